"""Seeds in blocks: a group-sequential rule for a study's declared question (issue 46).

A study that adds seeds in blocks looks at its primary contrasts after each block. Looking more
than once spends the error rate more than once, so each look's threshold is set by an
alpha-spending function (Lan and DeMets 1983): the O'Brien-Fleming-type

    alpha(t) = 2 - 2 Phi(z_{1 - alpha / 2} / sqrt(t)),

t the information fraction (seeds so far / the most seeds the study will take), spends almost
nothing at the early looks and nearly the whole alpha at the last. Under the null the looks' z
statistics are a Brownian motion in t, corr(Z_i, Z_j) = sqrt(t_i / t_j) (t_i < t_j), and the
two-sided boundary c_k of look k solves

    P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1}),

computed here exactly with ``scipy.stats.multivariate_normal`` (rectangle probabilities), not by
tables. A look's decision for a contrast (:func:`decide`): **differs** when its p-value is below
the look's nominal level 2 (1 - Phi(c_k)); **equivalent** within the params file's margin when its
interval at the matching level, 1 - 2 x the nominal level (two one-sided tests), lies inside
[-margin, +margin]; else **another block**, or at the last look **not resolved**. The declared
question's m contrasts share alpha by Bonferroni (alpha / m each: the looks are already
conservative, and Holm's step-down across looks has no closed form). The p-values and intervals
are the report's own (:mod:`diffgrpo.stats.intervals`), so the rule inherits their calibration;
the boundaries assume the information grows with the seeds, which it does where the seed part
dominates a contrast's variance and less where the prompt part does (then the rule is
conservative: an early look has more information than t says).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from diffgrpo.stats import ALPHA


def spent(t: float, alpha: float = ALPHA) -> float:
    """The O'Brien-Fleming-type alpha spent by information fraction ``t`` (0 < t <= 1)."""
    t = min(max(float(t), 0.0), 1.0)
    if t <= 0:
        return 0.0
    return float(2 - 2 * special.ndtr(special.ndtri(1 - alpha / 2) / np.sqrt(t)))


def _inside(bounds: list[float], cov: np.ndarray) -> float:
    """P(|Z_i| < bounds_i for every i) for a centred normal with covariance ``cov``."""
    k = len(bounds)
    if k == 0:
        return 1.0
    b = np.asarray(bounds, float)
    if k == 1:
        return float(special.ndtr(b[0]) - special.ndtr(-b[0]))
    # scipy integrates 3 or more dimensions by randomised quasi-Monte Carlo (Genz): seeded, so that a
    # report's levels are the same bytes at every render, and to 1e-7 (its default 1e-5 moved the 6th digit)
    mvn = stats.multivariate_normal(mean=np.zeros(k), cov=cov, allow_singular=True, seed=0, abseps=1e-7, releps=1e-7)
    return float(mvn.cdf(b, lower_limit=-b))


def boundaries(fractions: list[float], alpha: float = ALPHA) -> list[float]:
    """Each look's two-sided z boundary c_k at information ``fractions`` (increasing, the last at
    most 1), so that the looks together reject a true null with probability alpha(t_K) (module
    docstring). Solved once per schedule (a report asks it for each declared contrast)."""
    return list(_boundaries(tuple(float(f) for f in fractions), float(alpha)))


@functools.lru_cache(maxsize=64)
def _boundaries(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    t = np.asarray(fractions, float)
    if len(t) == 0 or np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1 + 1e-12:
        raise ValueError(f"information fractions {list(fractions)} must increase within (0, 1]")
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    out: list[float] = []
    for k in range(len(t)):
        target = spent(t[k], alpha) - (spent(t[k - 1], alpha) if k else 0.0)
        before = _inside(out, cov[:k, :k])

        def excess(c: float) -> float:  # P(inside before, outside now) - target
            return before - _inside(out + [c], cov[:k + 1, :k + 1]) - target
        if target <= 0:
            out.append(np.inf)
            continue
        out.append(float(optimize.brentq(excess, 0.5, 12.0, xtol=1e-6)))
    return tuple(out)


def nominal_levels(fractions: list[float], alpha: float = ALPHA) -> list[float]:
    """Each look's nominal two-sided level 2 (1 - Phi(c_k)): a p-value below it rejects there."""
    return [float(2 * special.ndtr(-c)) for c in boundaries(fractions, alpha)]


@dataclass(frozen=True)
class Look:
    """One look of the rule at a contrast: its decision and what it rests on."""

    decision: str           # "differs", "equivalent", "another block", "not resolved"
    level: float            # the look's nominal two-sided level for this contrast
    fraction: float         # the information fraction (seeds / max seeds)
    interval: tuple[float, float]  # the contrast's interval at 1 - 2 x level (equivalence)


def looks(block: int, max_seeds: int) -> list[int]:
    """The seed counts at which a study that adds ``block`` seeds at a time up to ``max_seeds`` looks."""
    if block < 1 or max_seeds < block:
        raise ValueError(f"seeds in blocks of {block} up to {max_seeds}: need 1 <= block <= max_seeds")
    out = list(range(block, max_seeds + 1, block))
    return out if out[-1] == max_seeds else out + [max_seeds]


def decide(p: float, interval_at, n_seeds: int, block: int, max_seeds: int, margin: float | None,
           alpha: float = ALPHA, m: int = 1) -> Look:
    """The rule's decision at the look of ``n_seeds`` seeds (one of :func:`looks`) for a contrast
    with two-sided p-value ``p``; ``interval_at(level)`` gives its interval at a confidence
    ``level``; ``margin``: the equivalence margin in points (None: no equivalence); ``m``: the
    declared question's size (alpha / m each)."""
    schedule = looks(block, max_seeds)
    if n_seeds not in schedule:
        raise ValueError(f"{n_seeds} seeds is not a look of blocks of {block} up to {max_seeds} (looks at {schedule})")
    k = schedule.index(n_seeds)
    fractions = [s / max_seeds for s in schedule]
    level = nominal_levels(fractions, alpha / m)[k]
    lo, hi = interval_at(max(1 - 2 * level, 0.0))
    if p < level:
        decision = "differs"
    elif margin is not None and -margin < lo and hi < margin:
        decision = "equivalent"
    else:
        decision = "not resolved" if k == len(schedule) - 1 else "another block"
    return Look(decision, level, fractions[k], (float(lo), float(hi)))
