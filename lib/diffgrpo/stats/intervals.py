"""The sampling distribution of the mean of a prompts x seeds matrix of scores (an arm's gain, or the
difference of two arms' gains), its 95% interval and two-sided p-value.

The mean varies through the test prompts and through the seeds. With 2-3 seeds, resampling the
seeds as well (a crossed bootstrap) understates the seed variance (a bootstrap of S values has
(S-1)/S of their variance and normal tails), which called null contrasts at 8-10% instead of 5%
(issue 19). So the two parts are kept apart:

- **prompt part**: the percentile bootstrap over the test prompts of the seed-averaged scores,
  shrunk by sqrt((MS_prompts - MS_resid) / MS_prompts) (two-way ANOVA mean squares) so that it
  carries the prompts' own variance and not the per-run noise the seed part carries;
- **seed part** (:class:`SeedPart`): the per-seed means over the test prompts vary with the seed
  and with each run's own per-prompt noise (MS_resid / n a seed mean, the *floor*); their variance
  is estimated from their spread with S - 1 degrees of freedom, or, pooled across a study's
  contrasts (:mod:`diffgrpo.stats.pooling`), with more; its pivot is the floored
  tau^2 = max(spread / chi2_df, floor), never narrower than the runs' own per-prompt noise.
  Together they estimate sigma_prompt^2 / n + sigma_seed^2 / S + sigma_resid^2 / (n S);
- the distribution of the mean is the bootstrap draws of the prompt part convolved with the seed
  part, whose CDF is computed exactly for each draw (no draws of it are sampled): the interval is
  its quantiles, the two-sided p-value twice its smaller tail at 0. With one seed it is the
  percentile bootstrap over test prompts alone.
- **ties**: the p-value is never below that of the exact sign-flip test of the seed-averaged
  per-prompt values (:func:`sign_flip_p`, McNemar's test where they are 0/1 differences): with few
  discordant prompts the bootstrap has too few of them to resample (issue 44's tie: 2 prompts in
  all 4 seeds, the bootstrap's p 0.27, McNemar's 0.50). Where it decides and the interval would
  exclude 0, the interval is widened to its reflection about 0 (:meth:`MeanDist.interval`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special

from diffgrpo.stats import ALPHA, POWER
from diffgrpo.stats.anova import mean_squares
from diffgrpo.stats.power import Design, detectable_at_size, detectable_difference, kappa_of
from diffgrpo.stats.seed_part import SeedPart

EXACT_MAX = 16  # sign_flip_p enumerates the 2^D sign patterns of up to this many discordant prompts
MC_Z = 2.576  # a p-value is decided when its 99% Monte Carlo interval holds no Holm threshold


def prompt_bound(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """A 95% interval for a mean ``p`` over ``n`` prompts of per-prompt scores in [0, 1] (pass@1,
    an accuracy), from the mean alone: Wilson's score interval, which takes the variance p (1 - p)
    of 0/1 scores, the most a score in [0, 1] with mean p can have (so a bound for pass@1 over
    samples), and stays inside [0, 1] with a nonzero width at p = 0 or 1."""
    if n <= 0:
        return float("nan"), float("nan")
    shrink = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    half = z * float(np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / shrink
    return max(0.0, centre - half), min(1.0, centre + half)


class Bootstrap:
    """Resamples of the ``n_prompts`` test prompts, shared by every arm and contrast. The first
    ``n_boot`` are multinomial weights drawn from ``[seed, 0]``; more (for a p-value on the edge
    of a threshold) are drawn per block of ``n_boot`` from ``[seed, 0, block]``."""

    def __init__(self, n_prompts: int, n_boot: int, seed: int):
        self.n_prompts, self.n_boot, self.seed = n_prompts, n_boot, seed
        rng = np.random.default_rng([seed, 0])
        self.prompt_w = rng.multinomial(n_prompts, np.full(n_prompts, 1 / n_prompts), size=n_boot) / n_prompts

    def prompt_means(self, v: np.ndarray, blocks: int = 1) -> np.ndarray:
        """Resampled means of the per-prompt values ``v``: ``blocks`` x ``n_boot`` of them."""
        v = np.asarray(v, float)
        draws = [self.prompt_w @ v]
        for block in range(1, blocks):
            idx = np.random.default_rng([self.seed, 0, block]).integers(0, self.n_prompts, (self.n_boot, self.n_prompts))
            draws.append(v[idx].mean(axis=1))
        return np.concatenate(draws)


def sign_flip_p(rows: np.ndarray) -> float:
    """Two-sided p of "the per-prompt values ``rows`` are symmetric about 0": the sign-flip
    (randomization) test of their sum, exact over the 2^D sign patterns of the D nonzero values when
    D <= :data:`EXACT_MAX` (McNemar's exact test where they are 0/1 differences), else its normal
    approximation (the sum over the root of the sum of squares). 1 when every value is 0."""
    r = np.asarray(rows, float)
    r = r[np.abs(r) > 1e-12 * max(float(np.abs(r).max(initial=0.0)), 1e-300)]
    if len(r) == 0:
        return 1.0
    t = abs(float(r.sum()))
    if len(r) <= EXACT_MAX:
        sums = np.zeros(1)
        for v in r:
            sums = np.concatenate([sums + v, sums - v])
        return float((np.abs(sums) >= t - 1e-9 * np.abs(r).sum()).mean())
    return float(min(1.0, 2 * special.ndtr(-t / np.sqrt((r * r).sum()))))


@dataclass
class MeanDist:
    """The sampling distribution of a prompts x seeds mean: ``est`` + a prompt-bootstrap draw
    (``dev``, one per resample) + the :class:`SeedPart` ``seed`` (none with one seed). ``rows``:
    the seed-averaged per-prompt values, for the exact sign-flip test (:func:`sign_flip_p`)."""

    est: float
    dev: np.ndarray
    seed: SeedPart
    rows: np.ndarray | None = field(default=None, repr=False)

    @property
    def df(self) -> float:
        return self.seed.dof if self.seed.n_seeds > 1 else 0.0

    def _below(self, v: float) -> np.ndarray:
        """P(mean <= v) given each prompt draw."""
        if not self.seed.empty:
            return self.seed.cdf(v - self.est - self.dev)
        return (self.est + self.dev <= v).astype(float)

    @functools.cached_property
    def exact_p(self) -> float | None:
        """The sign-flip test's p of the seed-averaged per-prompt values (None without them)."""
        return None if self.rows is None else sign_flip_p(self.rows)

    def _quantiles(self, level: float) -> list[float]:
        tail = (1 - level) / 2
        if self.seed.empty:  # the percentile bootstrap (one seed: as before issue 19)
            return interval(self.est + self.dev, level)
        out = []
        for q in (tail, 1 - tail):
            shift = self.seed.quantile(q)
            lo, hi = self.est + self.dev.min() + shift, self.est + self.dev.max() + shift
            out.append(float(lo) if hi - lo < 1e-12 else
                       optimize.brentq(lambda v: self._below(v).mean() - q, lo, hi, xtol=1e-9))
        return out

    def interval(self, level: float = 1 - ALPHA) -> list[float]:
        """The ``level`` interval: the distribution's quantiles; where the exact sign-flip test does
        not reject 0 at 1 - ``level`` but those quantiles exclude it, their hull with their
        reflection about 0 (the test says the sign is not known)."""
        lo, hi = self._quantiles(level)
        if (lo >= 0 or hi <= 0) and self.exact_p is not None and self.exact_p >= 1 - level:
            lo, hi = min(lo, -hi), max(hi, -lo)
        return [lo, hi]

    def _p_main(self) -> tuple[float, float]:
        b = len(self.dev)
        if self.seed.empty:
            draws = self.est + self.dev
            tail = min((draws <= 0).mean(), (draws >= 0).mean())  # ties on both sides: all-zero draws, no MC error
            return boot_p(draws), float(2 * np.sqrt(tail * (1 - tail) / b))
        below = self._below(0.0)
        tail = min(below.mean(), 1 - below.mean())
        return float(min(1.0, 2 * tail)), float(2 * below.std() / np.sqrt(b))

    def p_value(self) -> tuple[float, float]:
        """Two-sided p of "the mean is 0" and its Monte Carlo standard error: the distribution's,
        never below the exact sign-flip test's (which has no Monte Carlo error)."""
        p, se = self._p_main()
        exact = self.exact_p
        if exact is None or exact <= p:
            return p, se
        return exact, (0.0 if exact - MC_Z * se > p else se)

    def detectable(self, alpha: float = ALPHA, power: float = POWER) -> float:
        """The smallest true difference this contrast's test rejects with ``power`` at a two-sided
        ``alpha`` (Holm's first step: alpha / the family's size), from its own variance components
        and its per-prompt values' skew: the test inverted (:func:`diffgrpo.stats.power.detectable_difference`)."""
        seed, v = self.seed, float(np.var(self.dev))
        kappa = 0.0 if self.rows is None else kappa_of(self.rows, self.est, v + seed.variance)
        design = (Design(v, 0.0, 0.0, 0.0, 1, kappa=kappa) if seed.empty else
                  Design(v, seed.tau2, seed.floor, seed.dof, seed.n_seeds, seed.offset, kappa))
        if self.rows is None:
            return detectable_difference(design, alpha, power)
        return detectable_at_size(design, len(self.rows), self.est, alpha, power)


def mean_dist(x: np.ndarray, boot: Bootstrap, blocks: int = 1, run_noise_floor: bool = True,
              seed: SeedPart | None = None, exact: bool = True) -> MeanDist:
    """The distribution of the mean of a prompts x seeds matrix (module docstring). ``seed``: its
    seed part where the caller has one (pooled across a study's contrasts); else its own seeds'.
    ``run_noise_floor`` False and ``exact`` False: issue 19's plain t and no sign-flip floor (the
    calibration's references)."""
    x = np.asarray(x, float).reshape(boot.n_prompts, -1)
    n, s = x.shape
    ms = mean_squares(x)
    dev = boot.prompt_means(ms.rows, blocks) - ms.est
    rows = ms.rows if exact else None
    if s == 1:
        return MeanDist(ms.est, dev, SeedPart(0.0, 0.0, 1), rows)
    shrink = np.sqrt(max(0.0, ms.prompts - ms.resid) / ms.prompts) if ms.prompts > 0 else 1.0
    if seed is None:
        seed = SeedPart(float(((ms.cols - ms.cols.mean()) ** 2).sum()), float(ms.resid / n) if run_noise_floor else 0.0, s)
    return MeanDist(ms.est, shrink * dev, seed, rows)


def draws(dist: MeanDist, rng: np.random.Generator, noise: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Draws of a mean from its distribution, one per prompt resample: the resample's prompt
    part plus a draw of the seed part. The dists of one :class:`Bootstrap` drawn with one
    ``rng`` share their prompt resamples (row r of each is the same resample of the test
    prompts) and have independent seed parts: joint draws of arms trained in separate runs, for
    a statistic no closed form covers (a ratio, a crossing). Runs that share a trajectory (one a
    prefix of the other: same selection, seed and schedule) share one seed part: pass the same
    ``noise`` (:func:`seed_noise`) to each."""
    z, u = noise if noise is not None else seed_noise(rng, len(dist.dev))
    return dist.est + dist.dev + dist.seed.sample(z, u)


def seed_noise(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The standard normals and uniforms of ``size`` seed-part draws (:meth:`SeedPart.sample`)."""
    return rng.standard_normal(size), rng.random(size)


def interval(boot: np.ndarray, level: float = 0.95, method: str = "linear") -> list[float]:
    """Percentile interval of the resampled values (``method``: numpy's; ``"inverted_cdf"``
    takes resampled values only, for a statistic on a grid or with infinite values)."""
    tail = 100 * (1 - level) / 2
    return [float(v) for v in np.percentile(boot, [tail, 100 - tail], method=method)]


def boot_p(boot: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the mean is 0": twice the smaller share of resamples on
    either side of 0 (ties count on both sides), with the +1 of a resampling test, capped at 1."""
    n = len(boot)
    tail = min(int((boot <= 0).sum()), int((boot >= 0).sum()))
    return float(min(1.0, 2 * (tail + 1) / (n + 1)))
