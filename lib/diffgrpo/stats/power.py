"""How large a difference a study's test finds: the power of the test the report runs, and the
detectable difference, the true difference it rejects with 80% power at Holm's first step
(alpha / m for a family of m contrasts), found by inverting that test.

The test (:mod:`diffgrpo.stats.intervals`): the mean difference over n test prompts and S seeds,
est ~ N(delta, V) with V = v_prompt + tau^2 / S, where v_prompt = sigma_prompt^2 / n is the
prompts' part and tau^2 = sigma_seed^2 + sigma_resid^2 / n one seed mean's variance, of which the
floor f = sigma_resid^2 / n is each run's per-prompt noise. The test rejects when |est| exceeds the
1 - alpha / 2 quantile of its null distribution: N(0, v_prompt) convolved with the seed part's
pivot N(0, max(tau_hat^2 df / chi2_df, f) / S), whose variance estimate tau_hat^2 is itself drawn,
tau^2 chi2_df / df with the seed part's ``df`` degrees of freedom (S - 1, or more where the seed part
is pooled across a study's contrasts, :mod:`diffgrpo.stats.pooling`), independent of est under
normal errors. So the critical point is a random variable and the power is

    P(reject | delta) = E over tau_hat^2 of [Phi((delta - c(tau_hat^2)) / sqrt V) + Phi((-delta - c(tau_hat^2)) / sqrt V)],

computed by Gauss-Legendre quadrature over the chi2's quantiles, each critical point c by root
finding on the (closed-form) mixture of normals: exact for normal errors, with no simulation. It
is what a formula (t_{1-alpha/2m} + t_{0.80}) x SE with Satterthwaite's degrees of freedom is not:
the floored pivot's critical point with few degrees of freedom is far out in its tail at alpha / 2m
(issue 44: 3.97 SE where the formula took 2.85) and varies from study to study. The departures of
the report's test from that model (0/1 scores, the prompt bootstrap, the homogeneity check, the
sign-flip floor on p) are measured by simulation: :func:`diffgrpo.stats.calibration.simulated_power`
(seeded, with its Monte Carlo error) and the calibration grid's power at the stated size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize, special

from diffgrpo.stats import ALPHA, POWER
from diffgrpo.stats.anova import mean_squares
from diffgrpo.stats.seed_part import SeedPart

_NODES = np.polynomial.legendre.leggauss(32)  # over the seed part estimate's chi2 quantiles


def components(diff: np.ndarray) -> dict[str, float]:
    """The three variance components (points^2) of a prompts x seeds matrix of differences, from
    the two-way mean squares (each at least 0): the prompts' own spread of the difference, the
    seed's effect on it and each run's per-prompt noise."""
    x = np.asarray(diff, float)
    n, s = x.shape
    ms = mean_squares(x)
    if s == 1:
        return {"prompt": ms.prompts, "seed": 0.0, "resid": 0.0}
    return {"prompt": max(0.0, (ms.prompts - ms.resid) / s), "seed": max(0.0, (ms.seeds - ms.resid) / n),
            "resid": ms.resid}


def critical_point(v_prompt: float, tau2_hat: float, floor: float, df: float, n_seeds: int, alpha: float,
                   offset: float = 0.0) -> float:
    """The test's two-sided critical point for |est| at ``alpha`` given the seed part's estimate
    ``tau2_hat`` of one seed mean's variance (no seed part with one seed or ``df`` 0); ``offset``:
    the part of it that is not drawn (a pooled seed part's, :class:`~diffgrpo.stats.pooling.Pool`)."""
    return float(critical_points(np.array([v_prompt]), tau2_hat, floor, df, n_seeds, alpha, offset)[0])


def critical_points(v_prompt: np.ndarray, tau2_hat: float, floor: float, df: float, n_seeds: int, alpha: float,
                    offset: float = 0.0) -> np.ndarray:
    """:func:`critical_point` at each prompt-part variance of ``v_prompt`` (one seed part)."""
    return critical_grid(np.asarray(v_prompt, float), np.array([tau2_hat]), floor, df, n_seeds, alpha, offset)[0]


def critical_grid(v_prompt: np.ndarray, tau2_hat: np.ndarray, floor: float, df: float, n_seeds: int, alpha: float,
                  offset: float = 0.0) -> np.ndarray:
    """:func:`critical_point` for every seed-part estimate of ``tau2_hat`` (rows) and prompt-part
    variance of ``v_prompt`` (columns): the c solving P(|N(0, v) + seed part| <= c) = 1 - alpha / 2,
    by bisection on all of them at once (48 halvings of a bracket: below 1e-14 of it), each seed
    part's mixture of normals built once."""
    mixtures = []
    for t in tau2_hat:
        if n_seeds < 2 or df <= 0:
            mixtures.append((np.zeros(1), np.ones(1)))
            continue
        seed = SeedPart(df * max(float(t) - offset, 0.0), floor, n_seeds, df, offset)
        mixtures.append(seed.mixture if not seed.empty else (np.zeros(1), np.ones(1)))
    width = max(len(w) for _, w in mixtures)
    scales = np.zeros((len(mixtures), width))
    weights = np.zeros((len(mixtures), width))  # padded with weight 0
    for k, (sc, w) in enumerate(mixtures):
        scales[k, :len(sc)], weights[k, :len(w)] = sc, w
    v = np.asarray(v_prompt, float)
    sd = np.sqrt(v[None, :, None] + scales[:, None, :] ** 2)  # nodes x variances x mixture
    none = ~((sd > 0) & (weights[:, None, :] > 0)).any(axis=2)  # no variance at all: the critical point is 0
    sd = np.maximum(sd, 1e-300)
    q = 1 - alpha / 2
    cdf = lambda c: np.einsum("ngm,nm->ng", special.ndtr(c[..., None] / sd), weights)  # noqa: E731
    lo, hi = np.zeros(sd.shape[:2]), sd.max(axis=2) * 2
    while True:
        short = (cdf(hi) < q) & ~none
        if not short.any():
            break
        hi = np.where(short, hi * 2, hi)
    for _ in range(48):
        mid = (lo + hi) / 2
        below = cdf(mid) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.where(none, 0.0, (lo + hi) / 2)


@dataclass(frozen=True)
class Design:
    """What a contrast's test and its mean's variance rest on (module docstring): the prompt part's
    variance ``v_prompt``, one seed mean's true variance ``tau2`` (the seed's variance plus the
    ``floor``), the seed part's degrees of freedom ``df`` (0: none) and ``offset`` (a pooled seed
    part's, :class:`~diffgrpo.stats.pooling.Pool`), the seeds ``n_seeds``, and ``kappa``: how the
    test's own estimate of the prompt part's variance moves with est, its regression slope
    Cov(v_hat, est) / Var(est) in the direction of the difference. With 0/1 scores a difference is
    carried by a few prompts that one arm wins: a study that drew more of them sees a larger
    difference and a larger variance (the prompts' third moment: Cov(v_hat, est) = mu_3 / n^2), so
    the test rejects where est exceeds c(v_prompt + kappa (est - delta)), not c(v_prompt): with few
    discordant prompts it finds more than a normal model says. 0: symmetric per-prompt values."""

    v_prompt: float
    tau2: float
    floor: float
    df: float
    n_seeds: int
    offset: float = 0.0
    kappa: float = 0.0

    @property
    def sd(self) -> float:
        """The mean's true standard deviation."""
        return float(np.sqrt(self.v_prompt + self.tau2 / max(self.n_seeds, 1)))

    def _nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """The quadrature nodes of the seed part's estimate tau_hat^2 ~ offset + (tau^2 - offset) chi2_df / df."""
        if self.n_seeds < 2 or self.df <= 0 or self.tau2 <= self.offset:
            return np.array([self.tau2]), np.ones(1)
        x, w = _NODES
        chi2 = special.chdtri(self.df, 1 - (x + 1) / 2)  # the chi2's quantiles at the nodes
        return self.offset + (self.tau2 - self.offset) * chi2 / self.df, w / 2

    def thresholds(self, alpha: float) -> "Thresholds":
        """The test's critical points at two-sided ``alpha``, at each node of its seed part's
        estimate: at the prompt part's variance itself, or (``kappa``) on a grid of variances."""
        estimates, weights = self._nodes()
        if self.kappa <= 0 or self.v_prompt <= 0:
            return Thresholds(np.zeros(1), critical_grid(np.array([self.v_prompt]), estimates, self.floor, self.df,
                                                         self.n_seeds, alpha, self.offset), weights)
        grid = self.v_prompt * _VGRID
        return Thresholds(grid, critical_grid(grid, estimates, self.floor, self.df, self.n_seeds, alpha, self.offset),
                          weights)

    def power(self, delta: float, thresholds: "Thresholds") -> float:
        """P(the test rejects) at a true difference ``delta``, given its :meth:`thresholds`: where
        ``kappa``, the rejection point e of each node solves e = c(v_prompt + kappa (e - |delta|))."""
        up, low = thresholds.at(abs(delta), self.v_prompt, self.kappa)
        weights = thresholds.weights
        if self.sd <= 0:
            return float(((abs(delta) > up) * weights).sum())
        return float((special.ndtr((abs(delta) - up) / self.sd) + special.ndtr((-abs(delta) - low) / self.sd)) @ weights)


_VGRID = np.r_[0.0, np.geomspace(0.02, 6.0, 24)]  # multiples of v_prompt on which c(v) is tabulated (kappa > 0)


@dataclass(frozen=True)
class Thresholds:
    """Critical points c(v, tau_hat^2): one row per node of tau_hat^2 (``weights``), one column per
    prompt-part variance in ``grid`` (a single column, at v_prompt itself, without kappa)."""

    grid: np.ndarray
    crit: np.ndarray
    weights: np.ndarray

    def at(self, delta: float, v: float, kappa: float) -> tuple[np.ndarray, np.ndarray]:
        """Each node's rejection points above and below 0 at a true difference ``delta`` >= 0: the
        fixed point e = c(v + kappa (+-e - delta)) of each row, iterated on every row at once
        (a row stops where it converges, to 1e-9 of its value)."""
        if self.crit.shape[1] == 1:
            return self.crit[:, 0], self.crit[:, 0]
        return self._fixed(v, kappa, delta, 1.0), self._fixed(v, kappa, delta, -1.0)

    def _interp(self, var: np.ndarray) -> np.ndarray:
        """Each row's c at its own variance (linear between the grid's points, as ``np.interp``)."""
        grid, rows = self.grid, np.arange(len(self.crit))
        idx = np.clip(np.searchsorted(grid, var, side="right") - 1, 0, len(grid) - 2)
        x0, x1 = grid[idx], grid[idx + 1]
        t = np.clip((var - x0) / (x1 - x0), 0.0, 1.0)
        return self.crit[rows, idx] + t * (self.crit[rows, idx + 1] - self.crit[rows, idx])

    def _fixed(self, v: float, kappa: float, delta: float, sign: float) -> np.ndarray:
        e = self._interp(np.full(len(self.crit), v))
        done = np.zeros(len(e), bool)
        for _ in range(100):
            nxt = self._interp(np.clip(v + kappa * (sign * e - delta), 0.0, self.grid[-1]))
            settled = np.abs(nxt - e) <= 1e-9 * np.maximum(nxt, 1e-300)
            e = np.where(done | settled, e, nxt)
            done |= settled
            if done.all():
                break
        return e


def power_of_test(delta: float, design: Design, alpha: float = ALPHA) -> float:
    """P(the test rejects at two-sided ``alpha``) when the true difference is ``delta`` (module docstring)."""
    return design.power(delta, design.thresholds(alpha))


def detectable_difference(design: Design, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference the test rejects with ``power`` at two-sided ``alpha``
    (:func:`power_of_test` inverted by root finding; 0 when the mean does not vary)."""
    if design.sd <= 0:
        return 0.0
    thresholds = design.thresholds(alpha)
    if design.power(0.0, thresholds) >= power:
        return 0.0
    hi = float(thresholds.crit.max()) + 4 * design.sd
    return float(optimize.brentq(lambda d: design.power(d, thresholds) - power, 0.0, hi, xtol=1e-6 * hi))


def growth(size: float, est: float = 0.0) -> float:
    """The variance (points^2) one run's per-prompt difference of 0/1 scores gains when the true
    difference is ``size`` points rather than the observed ``est``: a difference is carried by
    prompts one arm wins, so a larger one is more of them. With the rest of the discordant
    prompts as observed, moving the mean from e to d (fractions) adds (d - e) wins and changes the
    variance E[x^2] - mean^2 by (d - e)(1 - d - e): in points, (D - E)(100 - D - E), at least 0.
    For scores in [0, 1] that are not 0/1 (pass@1 over samples) it is an upper bound."""
    d, e = min(abs(size), 100.0), min(abs(est), 100.0)
    return max(0.0, (d - e) * (100.0 - d - e))


def grown(design: Design, extra: float, n_prompts: int) -> Design:
    """``design`` with ``extra`` points^2 of per-prompt variance a run (:func:`growth`) added, split
    between the prompt part (what persists across seeds) and each run's own noise in the shares
    the contrast shows (all of it to the prompts with one seed)."""
    if extra <= 0 or n_prompts <= 0:
        return design
    prompt, resid = design.v_prompt * n_prompts, design.floor * n_prompts
    share = prompt / (prompt + resid) if prompt + resid > 0 else 1.0
    if design.n_seeds < 2:
        share = 1.0
    run = (1 - share) * extra / n_prompts
    return replace(design, v_prompt=design.v_prompt + share * extra / n_prompts, tau2=design.tau2 + run,
                   floor=design.floor + run)


def detectable_at_size(design: Design, n_prompts: int, est: float = 0.0, alpha: float = ALPHA,
                       power: float = POWER) -> float:
    """The smallest true difference the test rejects with ``power``, the contrast's variance taken
    at that difference (:func:`grown`: 0/1 scores vary more the more they differ), not at the
    observed ``est``: the fixed point d = detectable(design at d), by root finding (0.01 points).
    Without it a report's size for a contrast observed near 0 was found with 41-74% power by
    simulation (tests/test_stated_power.py)."""
    excess = lambda d: detectable_difference(grown(design, growth(d, est), n_prompts), alpha, power) - d  # noqa: E731
    # scores that do not vary at all (an exact tie) still would at a true difference: start above it
    start = abs(est) if design.sd > 0 else max(abs(est), 0.01)
    first = excess(start)
    if first <= 0:
        return detectable_difference(design, alpha, power) if design.sd > 0 else start
    lo, hi = start, start + first
    while excess(hi) > 0:
        lo, hi = hi, min(2 * hi, 100.0)
        if hi >= 100.0:
            return 100.0 + max(0.0, excess(100.0))  # beyond any difference of accuracies
    return float(optimize.brentq(excess, lo, hi, xtol=0.01))


def variances_of(comp: dict[str, float], n_prompts: int, n_seeds: int) -> tuple[float, float, float]:
    """(v_prompt, tau^2, floor) of a contrast with variance components ``comp`` (points^2:
    ``prompt``, ``seed``, ``resid``) over ``n_prompts`` x ``n_seeds``. With one seed the test's
    prompt part holds the per-run noise too, and the seed's variance is in the mean but not the test."""
    if n_seeds < 2:
        return (comp["prompt"] + comp["resid"]) / n_prompts, comp["seed"], 0.0
    return comp["prompt"] / n_prompts, comp["seed"] + comp["resid"] / n_prompts, comp["resid"] / n_prompts


def design_of(comp: dict[str, float], n_prompts: int, n_seeds: int, pool_df: float | None = None,
              kappa: float = 0.0) -> Design:
    """The :class:`Design` of a contrast with variance components ``comp`` (points^2) over
    ``n_prompts`` x ``n_seeds``; ``pool_df``: its seed part's degrees of freedom where the report
    pools it across the study's contrasts (:func:`diffgrpo.stats.pooling.all_pairs_df`); None:
    S - 1; ``kappa``: :class:`Design`'s (0: the prompts' values symmetric)."""
    v_prompt, tau2, floor = variances_of(comp, n_prompts, n_seeds)
    df = float(n_seeds - 1 if pool_df is None else pool_df) if n_seeds > 1 else 0.0
    return Design(v_prompt, tau2, floor, df, n_seeds, kappa=kappa)


def detectable(comp: dict[str, float], n_prompts: int, n_seeds: int, m: int = 1, alpha: float = ALPHA,
               power: float = POWER, *, pool_df: float | None = None, kappa: float = 0.0, grow: bool = True) -> float:
    """The smallest true difference (points) a contrast of this design finds with ``power`` at
    Holm's first step over ``m`` contrasts, from its variance components (:func:`components`, of
    0/1 scores observed near no difference: ``grow``, :func:`detectable_at_size`; False: the
    components are the ones at the size, as a simulation's with normal errors), ``pool_df`` and
    ``kappa`` as :func:`design_of`'s."""
    design = design_of(comp, n_prompts, n_seeds, pool_df, kappa)
    if not grow:
        return detectable_difference(design, alpha / m, power)
    return detectable_at_size(design, n_prompts, 0.0, alpha / m, power)


def power_at(delta: float, comp: dict[str, float], n_prompts: int, n_seeds: int, m: int = 1, alpha: float = ALPHA,
             *, pool_df: float | None = None, kappa: float = 0.0) -> float:
    """The power of Holm's first step over ``m`` contrasts at a true difference ``delta`` (points)."""
    return power_of_test(delta, design_of(comp, n_prompts, n_seeds, pool_df, kappa), alpha / m)


def kappa_of(rows: np.ndarray, est: float, variance: float) -> float:
    """:class:`Design`'s ``kappa`` from a contrast's seed-averaged per-prompt values ``rows``, its
    estimate and its mean's variance: the rows' third central moment over n^2 (the covariance of
    their variance's estimate with their mean under resampling of the prompts) over the variance,
    in the direction of ``est``; at least 0."""
    r = np.asarray(rows, float)
    n = len(r)
    if n < 3 or variance <= 0:
        return 0.0
    mu3 = float(((r - r.mean()) ** 3).mean())
    return max(0.0, float(np.sign(est) or 1.0) * mu3 / (n * n * variance))
