"""The statistics layer: pure functions on numpy arrays, the same ones the report, ``--plan`` and a
notebook call (no study files, no tables of the report).

- :mod:`.intervals`: the sampling distribution of a prompts x seeds mean (a prompt bootstrap plus a
  seed part), its interval and p-value, and the exact sign-flip test on the discordant prompts;
- :mod:`.anova`, :mod:`.seed_part`: the two-way mean squares it splits the variance by, and its
  seed part (a floored generalized pivot);
- :mod:`.pooling`: the seed part pooled across a study's contrasts, with a homogeneity check
  (degrees of freedom earned where the seeds' spreads agree);
- :mod:`.holm`: Holm's step-down, deciding each p-value only as far as its verdict needs;
- :mod:`.power`: the detectable difference, by inverting the test the report runs;
- :mod:`.lines`: the least-squares line of Figure 3 and an interval on its R^2;
- :mod:`.calibration`: the simulated error rates and power of all of it (docs/statistics.md).
"""

ALPHA = 0.05  # the error rate of every decision (intervals are 1 - ALPHA)
POWER = 0.80  # the power of a detectable difference (:func:`diffgrpo.stats.power.detectable`)
