"""Stage 5: a study's report, from the files the earlier stages wrote.

- :mod:`.report`: reads the study once and writes the report; :mod:`.sections`: what every
  study's report holds, one module per section; :mod:`.papers`: one report per paper;
- :mod:`.tables`, :mod:`.figures`: the long tables and the figures;
- :mod:`.uncertainty`: the report's arm intervals and contrasts (the statistics: :mod:`diffgrpo.stats`);
- :mod:`.power`: the detectable differences ``--plan`` prints, from a committed study's components;
- :mod:`.learnability`: learnable % observed and predicted from the probe (the select stage's too);
- :mod:`.by_test_difficulty`: gains by the difficulty of the test prompts;
- :mod:`.inputs`: what the report reads, exported beside a committed report, and the report
  rendered again from it (``make results``).
"""
