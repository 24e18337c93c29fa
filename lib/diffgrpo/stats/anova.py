"""The two-way ANOVA of a prompts x seeds matrix of scores: the mean squares that the intervals
(:mod:`diffgrpo.stats.intervals`) and the detectable difference (:mod:`diffgrpo.stats.power`) split
a mean's variance by."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class MeanSquares(NamedTuple):
    """The two-way ANOVA of a prompts x seeds matrix: its mean, row (prompt) and column (seed)
    means, and the mean squares of prompts, seeds and the residual (seeds and residual 0 with one seed)."""

    est: float
    rows: np.ndarray
    cols: np.ndarray
    prompts: float
    seeds: float
    resid: float


def mean_squares(x: np.ndarray) -> MeanSquares:
    """:class:`MeanSquares` of ``x`` (prompts x seeds): what the intervals (:func:`~diffgrpo.stats.intervals.mean_dist`) and
    the detectable difference (:mod:`diffgrpo.stats.power`) split a mean's variance by."""
    n, s = x.shape
    est, rows, cols = float(x.mean()), x.mean(axis=1), x.mean(axis=0)
    ms_rows = s * ((rows - est) ** 2).sum() / (n - 1)
    if s == 1:
        return MeanSquares(est, rows, cols, float(ms_rows), 0.0, 0.0)
    ms_cols = n * ((cols - est) ** 2).sum() / (s - 1)
    ms_resid = ((x - rows[:, None] - cols[None, :] + est) ** 2).sum() / ((n - 1) * (s - 1))
    return MeanSquares(est, rows, cols, float(ms_rows), float(ms_cols), float(ms_resid))
