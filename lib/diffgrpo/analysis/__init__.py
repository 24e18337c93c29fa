"""Stage 5: a study's report, from the files the earlier stages wrote.

- :mod:`.report`: the report, section by section; :mod:`.papers`: one report per paper;
- :mod:`.tables`, :mod:`.figures`: the long tables and the figures;
- :mod:`.uncertainty`, :mod:`.calibration`: intervals, contrasts and their error rates;
- :mod:`.by_test_difficulty`: gains by the difficulty of the test prompts.
"""
