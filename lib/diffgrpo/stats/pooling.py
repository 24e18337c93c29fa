"""The seed part pooled across a study's contrasts: degrees of freedom earned where the seeds'
spreads agree (issue 44).

A contrast's own seed part has S - 1 degrees of freedom: with 2 seeds, one, whose t pivot's tail
costs most of the power where the seeds add nothing beyond each run's own noise (the default
study's 10 contrasts have seed-to-residual mean-square ratios of 0.09-1.8). The contrasts of one
study share their seeds' variance. The model: each contrast k weighs *units*, one arm's runs (a - b:
+1 and -1; an arm's gain: +1); a unit's per-seed means deviate, beyond any effect the seed has on
every arm alike (which a paired contrast cancels), with variance v_u + s^2: v_u its runs' own
per-prompt noise (MS_resid / n of a seed mean), s^2 the seed's own effect, common to the arms. So
contrast k's seed mean varies by tau_k^2 = f_k + c_k s^2, where its floor f_k (MS_resid / n) is the
sum of its units' v_u (fitted by non-negative least squares, ``scipy.optimize.nnls``, for the
degrees of freedom) and c_k = sum_u L_ku^2 (2 for a pair, 1 for a gain).

The pool is the sum of the contrasts' spreads T = sum_k spread_k, E[T] = (S - 1) sum_k tau_k^2; T
is a sum of chi2_{S-1} weighted by the eigenvalues lambda of D^1/2 L'L D^1/2 (D the units'
v_u + s^2), so Satterthwaite's degrees of freedom are df = (S - 1) (sum lambda)^2 / sum lambda^2
(:func:`pooled_df`): (K - 1)(S - 1) for every pair of K arms, K (S - 1) for K arms' gains, never
more than the arms' runs hold. Its generalized pivot: the sum of the tau_k^2 is
T df / ((S - 1) chi2_df), and what exceeds the sum of the floors F is the seed's, shared in
proportion to c_k:

    tau_k^2 = f_k + c_k / C x max(0, T df / ((S - 1) chi2_df) - F)        (C = sum_k c_k),

a :class:`~diffgrpo.stats.intervals.SeedPart` with that spread, offset and floor (:class:`Pool`).
With one contrast it is the contrast's own floored t pivot; where the seeds add nothing it is about
each contrast's floor (the runs' noise, known from 1,000s of cells); where the seeds dominate it is
the pool's share, whatever a contrast's own few flipped cells say of its floor. (Pooling the ratio
tau_k^2 / f_k instead scales the seed's variance by each contrast's noisy floor: at 2 seeds, a seed
sd of 5 points and 0.5% flips, Holm's first step in a family of 55 called 15% of null families.)

Homogeneity check: a contrast whose own spread is above what the others' pool predicts for it at
the one-sided level :data:`HOMOGENEITY` (``scipy.stats.f``: (spread_k / (S - 1)) / tau_k^2 of the
others, against F(S - 1, df_-k)) keeps its own seed part, S - 1 degrees of freedom, and the pool is
taken over the others (its seeds vary more than the study's: an arm whose seeds draw their own
prompts). Not below: a spread smaller than the pool's is no evidence that the contrast's mean
varies less (with 2 seeds its one degree of freedom is often near 0, and its own pivot would then
be the floor alone: at a seed sd of 5 points, Holm's families of 55 were called at 36%). A contrast
whose runs show no per-run noise at all (floor 0: the two arms answer alike in every seed but on
fixed prompts) keeps its own seed part, and so does a pool of one. Contrasts pool with those of the same number of seeds
(the caller passes contrasts paired on the same seeds).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
from scipy import optimize, stats

from diffgrpo.stats.intervals import mean_dist
from diffgrpo.stats.seed_part import SeedPart

HOMOGENEITY = 0.01  # one-sided level at which a contrast's own seed spread is too large for the pool


def pair_units(pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """The unit weights of paired contrasts a - b (one row each; a column per arm)."""
    names = sorted({x for p in pairs for x in p})
    col = {a: i for i, a in enumerate(names)}
    out = np.zeros((len(pairs), len(names)))
    for k, (a, b) in enumerate(pairs):
        out[k, col[a]] += 1.0
        out[k, col[b]] -= 1.0
    return out


def unit_floors(units: np.ndarray, floors: np.ndarray) -> np.ndarray:
    """Each unit's share v_u of the contrasts' floors (f_k = sum_u L_ku^2 v_u), by non-negative
    least squares; where the floors leave the split open (every contrast against one control),
    the solution nearest to equal shares (a small ridge towards them)."""
    a = units * units
    v0 = float(floors.sum() / a.sum())
    if v0 <= 0:
        return np.zeros(a.shape[1])
    ridge = 1e-4 * float(np.sqrt((a * a).sum() / a.shape[1]))
    design = np.vstack([a, ridge * np.eye(a.shape[1])])
    return optimize.nnls(design, np.concatenate([floors, np.full(a.shape[1], ridge * v0)]))[0]


def pooled_df(units: np.ndarray, floors: np.ndarray, n_seeds: int, seed_var: float = 0.0) -> float:
    """Satterthwaite's degrees of freedom of the pooled spreads of contrasts with unit weights
    ``units``, floors ``floors`` and a seed variance ``seed_var`` a unit (module docstring)."""
    L, f = np.asarray(units, float), np.asarray(floors, float)
    if len(f) == 1:
        return float(n_seeds - 1)
    d = np.sqrt(unit_floors(L, f) + seed_var)
    B = d[:, None] * (L.T @ L) * d[None, :]
    tr, tr2 = float(np.trace(B)), float((B * B).sum())
    return float((n_seeds - 1) * tr * tr / tr2) if tr2 > 0 else float(n_seeds - 1)


def all_pairs_df(n_arms: int, n_seeds: int) -> float:
    """The pooled degrees of freedom of every pair of ``n_arms`` arms with equal floors: (K - 1)(S - 1)."""
    pairs = [(str(a), str(b)) for a in range(n_arms) for b in range(a + 1, n_arms)]
    if not pairs or n_seeds < 2:
        return float(max(n_seeds - 1, 0))
    return pooled_df(pair_units(pairs), np.ones(len(pairs)), n_seeds)


@dataclass(frozen=True)
class Pool:
    """The pooled spreads of some contrasts (module docstring): their sum, the sums of their floors
    and of their c_k, the seed variance a unit they imply, and the degrees of freedom."""

    total: float
    floors: float
    weights: float
    seed_var: float
    df: float
    n_seeds: int

    @classmethod
    def of(cls, spread: np.ndarray, floors: np.ndarray, units: np.ndarray, n_seeds: int) -> "Pool":
        total, fsum, weights = float(spread.sum()), float(floors.sum()), float((units * units).sum())
        seed_var = max(0.0, total / (n_seeds - 1) - fsum) / weights
        return cls(total, fsum, weights, seed_var, pooled_df(units, floors, n_seeds, seed_var), n_seeds)

    def tau2(self, floor: float, c: float) -> float:
        """The estimate of a contrast's tau^2 from its floor and c_k."""
        return floor + c * self.seed_var

    def part(self, floor: float, c: float) -> SeedPart:
        """A contrast's pooled seed part: tau^2 = max(offset + spread / chi2_df, floor)."""
        share = c / self.weights
        return SeedPart(share * self.total * self.df / (self.n_seeds - 1), floor, self.n_seeds, self.df,
                        offset=floor - share * self.floors)


def pool_seed_parts(parts: Sequence[SeedPart], units: np.ndarray, check: float | None = HOMOGENEITY) -> list[SeedPart]:
    """Each contrast's seed part, pooled across ``parts`` (their own, from their seeds) where the
    homogeneity check allows (module docstring); ``units``: a row of unit weights per contrast
    (:func:`pair_units`; the identity for arms' gains). ``check`` None: no check."""
    out, units = list(parts), np.asarray(units, float)
    eligible = [k for k, p in enumerate(parts) if p.n_seeds >= 2 and p.floor > 0 and p.df is None and p.offset == 0]
    for s in sorted({parts[k].n_seeds for k in eligible}):
        idx = [k for k in eligible if parts[k].n_seeds == s]
        if len(idx) < 2:
            continue
        spread = np.array([parts[k].spread for k in idx])
        f = np.array([parts[k].floor for k in idx])
        L = units[idx]
        keep = list(range(len(idx)))
        if check is not None:
            keep = [i for i in keep if not _too_spread(i, spread, f, L, s, check)]
        if len(keep) < 2:
            continue
        pool = Pool.of(spread[keep], f[keep], L[keep], s)
        for i in keep:
            out[idx[i]] = pool.part(float(f[i]), float((L[i] ** 2).sum()))
    return out


def _too_spread(i: int, spread: np.ndarray, f: np.ndarray, L: np.ndarray, s: int, level: float) -> bool:
    """Whether contrast i's own spread is above what the others' pool predicts for it at the
    one-sided ``level``."""
    if spread[i] <= 0:
        return False
    rest = [j for j in range(len(spread)) if j != i]
    others = Pool.of(spread[rest], f[rest], L[rest], s)
    expected = others.tau2(float(f[i]), float((L[i] ** 2).sum()))
    if expected <= 0:
        return True
    return float(stats.f.sf(spread[i] / (s - 1) / expected, s - 1, others.df)) < level


def pooled_dists(diffs: Sequence[np.ndarray], units: np.ndarray, boot, check: float | None = HOMOGENEITY,
                 exact: bool = True) -> list:
    """Each prompts x seeds matrix's :class:`~diffgrpo.stats.intervals.MeanDist`, its seed part
    pooled across ``diffs`` (:func:`pool_seed_parts`): a study's contrasts (``units``:
    :func:`pair_units`) or its arms' gains (the identity). ``exact``: :func:`~diffgrpo.stats.intervals.mean_dist`'s."""
    own = [mean_dist(d, boot, exact=exact) for d in diffs]
    parts = pool_seed_parts([d.seed for d in own], units, check)
    return [d if p is d.seed else replace(d, seed=p) for d, p in zip(own, parts)]
