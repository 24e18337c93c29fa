"""The seed part of a prompts x seeds mean (:class:`SeedPart`): how the per-seed means vary, beyond
the prompts, as a scale mixture of normals whose variance is a floored generalized pivot."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

_LEGENDRE = np.polynomial.legendre.leggauss(48)  # nodes and weights on [-1, 1] (SeedPart.mixture)


@dataclass
class SeedPart:
    """The seed part of a prompts x seeds mean: the spread of the ``S`` per-seed means, which carry
    the seed's own effect (variance sigma_seed^2) and each run's per-prompt noise (sigma_resid^2 / n
    a seed mean). ``spread`` / ``df`` estimates one seed mean's variance tau^2 (its own seeds:
    ``spread`` is (S - 1) x the per-seed means' sample variance, ``df`` S - 1; pooled across a
    study's contrasts, :mod:`diffgrpo.stats.pooling`: its share of the pool's, with the pool's
    degrees of freedom and an ``offset``); ``floor`` is MS_resid / n, the per-run noise's share of
    one seed mean's variance, which 1,000s of cells estimate (tau^2 cannot fall below it).

    Its distribution is the generalized pivot (fiducial) of a variance with a known lower bound:
    tau^2 = max(offset + spread / chi2_df, floor) per draw of chi2, and the seed part
    N(0, tau^2 / S). With its own seeds (offset 0) and no floor it is exactly the Student t with
    S - 1 degrees of freedom; with seeds that agree exactly (spread 0) it is the normal of the
    per-run noise. It is kept as a scale mixture of normals: Gauss-Legendre nodes over the chi2
    quantiles where the pivot exceeds the floor, and one normal at the floor for the rest."""

    spread: float
    floor: float
    n_seeds: int
    df: float | None = None  # None: the seeds' own, S - 1
    offset: float = 0.0

    @property
    def dof(self) -> float:
        """The degrees of freedom of the variance estimate."""
        return float(self.n_seeds - 1 if self.df is None else self.df)

    @property
    def empty(self) -> bool:
        return self.n_seeds < 2 or (self.spread <= 0 and max(self.floor, self.offset) <= 0)

    @property
    def pooled(self) -> bool:
        return self.df is not None and self.df != self.n_seeds - 1

    @functools.cached_property
    def mixture(self) -> tuple[np.ndarray, np.ndarray]:
        """The seed part's scales (sd of each normal) and weights (summing to 1)."""
        if self.empty:
            return np.zeros(0), np.zeros(0)
        df, gap = self.dof, self.floor - self.offset  # the pivot is above the floor where chi2 < spread / gap
        if self.spread <= 0:
            above = 0.0
        else:
            above = 1.0 if gap <= 0 else float(special.chdtr(df, self.spread / gap))
        x, w = _LEGENDRE
        scales, weights = [], []
        if above > 0:
            q = np.maximum(special.chdtri(df, 1 - (x + 1) / 2 * above), 1e-300)  # the chi2's quantiles (> 0)
            scales.append(np.sqrt((self.offset + self.spread / q) / self.n_seeds))
            weights.append(w / 2 * above)
        if above < 1:
            scales.append([np.sqrt(max(self.floor, self.offset) / self.n_seeds)])
            weights.append([1.0 - above])
        return np.maximum(np.concatenate(scales), 1e-300), np.concatenate(weights)

    def cdf(self, v: np.ndarray) -> np.ndarray:
        """P(seed part <= v), elementwise."""
        v = np.asarray(v, float)
        scales, weights = self.mixture
        return special.ndtr(v[..., None] / scales) @ weights

    def quantile(self, q: float) -> float:
        if self.empty:
            return 0.0
        scale = np.sqrt(self.tau2 / self.n_seeds)
        lo, hi = -scale, scale
        while self.cdf(lo) > q:
            lo *= 2
        while self.cdf(hi) < q:
            hi *= 2
        return optimize.brentq(lambda v: float(self.cdf(v)) - q, lo, hi, xtol=1e-12 * scale)

    def sample(self, z: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Draws of the seed part from standard normals ``z`` and uniforms ``u`` (the chi2's
        quantile): runs that share a trajectory share their ``z`` and ``u``."""
        if self.empty:
            return np.zeros(np.shape(z))
        chi2 = special.chdtri(self.dof, 1 - np.clip(u, 1e-300, 1))
        pivot = self.offset + self.spread / chi2 if self.spread > 0 else np.full(np.shape(u), self.offset)
        return np.asarray(z) * np.sqrt(np.maximum(pivot, self.floor) / self.n_seeds)

    @property
    def tau2(self) -> float:
        """The estimate of one seed mean's variance: the spread's (plus the offset) or the floor, the larger."""
        return 0.0 if self.empty else max(self.offset + self.spread / self.dof, self.floor)

    @property
    def variance(self) -> float:
        """Its estimated variance, tau^2 / S (a t's variance is infinite with 1-2 degrees of freedom)."""
        return self.tau2 / self.n_seeds if not self.empty else 0.0
