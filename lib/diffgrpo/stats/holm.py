"""Holm's step-down over a family of p-values that carry Monte Carlo error: each p is decided only
as far as its verdict needs (:func:`holm_step_down`), and statsmodels' adjusted p-values (:func:`holm`).

The smallest p left is compared with alpha / (the contrasts left); while its 99% Monte Carlo
interval holds that one threshold, the caller gives a better estimate (more prompt resamples, up to
``MAX_REFINE`` times the first). A p below it is rejected and the next is compared; the first p
above it ends the family, and nothing is spent on the contrasts after it (no p of theirs can change
their verdict: not distinguishable). A p still on the edge at the cap is ``undecided``, and so is
every later contrast whose p is not clearly above alpha (its verdict hangs on the undecided one).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from statsmodels.stats.multitest import multipletests

from diffgrpo.stats import ALPHA
from diffgrpo.stats.intervals import MC_Z

MAX_REFINE = 16  # at most this many times the first resamples for a p on the edge


def holm(p: Iterable[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (statsmodels' ``multipletests``): the i-th smallest of m
    p-values times (m - i + 1), made monotone, capped at 1; controls the family-wise error rate."""
    p = np.asarray(list(p), float)
    return multipletests(p, method="holm")[1] if len(p) else p


def side(p: float, se: float, threshold: float) -> int:
    """-1 when p's 99% Monte Carlo interval lies below ``threshold``, +1 above it, 0 when it holds it."""
    if abs(p - threshold) <= MC_Z * se:
        return 0
    return -1 if p < threshold else 1


def holm_step_down(p_of, m: int, alpha: float = ALPHA) -> dict[int, str]:
    """Holm's step-down over the contrasts ``0..m-1`` of one family, deciding each p only as far
    as its verdict needs. ``p_of(i, refine)`` returns ``(p, mc_se)`` of contrast i: its current
    estimate with ``refine`` False, a better one (more resamples; ``None`` at the cap) with True.
    Returns each contrast's decision: ``differs``, ``not distinguishable`` or ``undecided``
    (module docstring)."""
    est = {i: p_of(i, False) for i in range(m)}
    left, out = set(range(m)), {}
    while left:
        i = min(left, key=lambda j: (est[j][0], j))
        threshold = alpha / len(left)
        while (where := side(*est[i], threshold)) == 0:
            better = p_of(i, True)
            if better is None:
                break
            est[i] = better
        if where < 0:
            out[i] = "differs"
            left.discard(i)
            continue
        if where > 0 and min(left, key=lambda j: (est[j][0], j)) != i:
            continue  # refined above: another p left is now the smallest, and decides the step
        out[i] = "undecided" if where == 0 else "not distinguishable"
        left.discard(i)
        for j in left:  # after a stop nothing is rejected; after an undecided step a p below alpha might be
            clear = est[j][0] - MC_Z * est[j][1] > alpha
            out[j] = "not distinguishable" if where > 0 or clear else "undecided"
        break
    return out
