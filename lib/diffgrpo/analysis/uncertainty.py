"""Uncertainty of every reported number: intervals that hold at the seeds a study has, paired
contrasts with Holm's adjustment in named families, the least-squares line of Figure 3 and an
interval on its R^2, and the one-line verdict that names a best arm only when Holm's decisions support it.

The mean of a prompts x seeds matrix of scores (an arm's gain, or the difference of two arms'
gains) varies through the test prompts and through the seeds. With 2-3 seeds, resampling the
seeds as well (a crossed bootstrap) understates the seed variance (a bootstrap of S values has
(S-1)/S of their variance and normal tails), which called null contrasts at 8-10% instead of 5%
(issue 19). So the two parts are kept apart:

- **seed part**: the per-seed means over the test prompts vary with the seed and with each
  run's own per-prompt noise; their standard error (sd over seeds / sqrt(S)) is scaled by a
  Student t with S - 1 degrees of freedom, the exact pivot of a mean of S normal values;
- **prompt part**: the percentile bootstrap over the test prompts of the seed-averaged scores,
  shrunk by sqrt((MS_prompts - MS_resid) / MS_prompts) (two-way ANOVA mean squares) so that it
  carries the prompts' own variance and not the per-run noise the seed part already carries.
  Together they estimate sigma_prompt^2 / n + sigma_seed^2 / S + sigma_resid^2 / (n S), the
  variance of the mean, without double counting;
- the distribution of the mean is the bootstrap draws of the prompt part convolved with the t
  of the seed part, whose CDF is computed exactly for each draw (no t draws are sampled): the
  95% interval is its 2.5% and 97.5% quantiles, the two-sided p-value twice its smaller tail at 0.
  With one seed it is the percentile bootstrap over test prompts alone, as before, and the
  report says that seed variance is not included.

Simulated (:mod:`diffgrpo.analysis.calibration`: 300 test prompts, a seed sd of 3 and 5 points, 2,000
studies a setting), null contrasts are called at 4.8% and 5.6% with 2 seeds, 4.5% and 4.4% with
3, and arm gains covered 97.4-98.1% (conservative: the t's tails widen the seed part also where
the prompts' variance dominates); the crossed bootstrap called 7.5%, 17.8%, 5.1% and 10.0% and
covered 88-96%. ``tests/test_analyze.py::test_few_seed_intervals_hold_their_error_rates``
checks the rates with 600 studies a setting.

Holm's step-down decides each family (:func:`holm_step_down`): the smallest p left is compared
with alpha / (the contrasts left); while its 99% Monte Carlo interval holds that one threshold,
its prompt resamples are doubled, up to ``MAX_REFINE`` times ``analyze.bootstrap``. A p below it
is rejected and the next is compared; the first p above it ends the family, and no resample is
spent on the contrasts after it (no p of theirs can change their verdict: not distinguishable).
A p still on the edge at the cap is ``undecided``, and so is every later contrast whose p is not
clearly above alpha (its verdict hangs on the undecided one).
Holm's families: the contrasts among the arms that train on the verifier's reward, and, apart,
each arm against a control arm (whose contrasts would otherwise dilute the arms' own).

Figure 3's R^2 is over the arms that train on the verifier's reward; its interval resamples the
arms, then each drawn arm's seeds (an arm's seeds share one selection, so its runs are not
independent points).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize, special, stats
from statsmodels.stats.multitest import multipletests

from diffgrpo.analysis.tables import DIGITS, METRIC_NAMES, arm_order

ALPHA = 0.05  # the error rate of every decision (intervals are 1 - ALPHA)
MC_Z = 2.576  # a p-value is decided when its 99% Monte Carlo interval holds no Holm threshold
POWER = 0.80  # the power of a detectable difference (:meth:`MeanDist.detectable`)
MAX_REFINE = 16  # at most this many times analyze.bootstrap prompt resamples for a p on the edge

#: Holm's families, in the report's words
FAMILIES = {"arms": "pairs of arms that train on the verifier's reward",
            "control": "each arm against a control arm, whose reward ignores the answer"}


def _round(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), DIGITS)



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


def fit_line(x: Iterable[float], y: Iterable[float]) -> dict:
    """Least-squares ``y = slope * x + intercept`` and its R^2 (Figure 3: gain on learnable %).

    R^2 is None, with the reason in ``note``, when it means nothing: fewer than 3 points (a
    line fits 2 exactly) or no spread in x or y. The slope needs only 2 points with distinct x.
    """
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    out = {"slope": None, "intercept": None, "r2": None, "n": len(x), "note": None}
    x_spread = len(x) > 1 and np.ptp(x) > 0
    if x_spread:
        fit = stats.linregress(x, y)
        out.update(slope=_round(fit.slope), intercept=_round(fit.intercept))
    if len(x) < 3:
        out["note"] = f"{len(x)} point(s): R^2 needs at least 3"
    elif not x_spread:
        out["note"] = "every point has the same learnable %: no line to fit"
    elif np.ptp(y) == 0:
        out["note"] = "every point has the same gain: R^2 is undefined"
    else:
        out["r2"] = _round(fit.rvalue**2)
    return out



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



_LEGENDRE = np.polynomial.legendre.leggauss(48)  # nodes and weights on [-1, 1] (SeedPart.mixture)


@dataclass
class SeedPart:
    """The seed part of a prompts x seeds mean: the spread of the ``S`` per-seed means, which
    carry the seed's own effect (variance sigma_seed^2) and each run's per-prompt noise
    (sigma_resid^2 / n a seed mean). ``spread`` is (S - 1) x the per-seed means' sample variance;
    ``floor`` is MS_resid / n, the per-run noise's share of one seed mean's variance, which 1,000s
    of cells estimate (the seeds' spread cannot fall below it: it would count the noise nowhere).

    Its distribution is the generalized pivot (fiducial) of a variance with a known lower bound:
    tau^2 = max(spread / chi2_{S-1}, floor) per draw of chi2, and the seed part N(0, tau^2 / S).
    Without a floor it is exactly the Student t with S - 1 degrees of freedom of issue 19's method;
    with seeds that agree exactly (spread 0) it is the normal of the per-run noise, never 0. It is
    kept as a scale mixture of normals: Gauss-Legendre nodes over the chi2 quantiles where
    spread / chi2 exceeds the floor, and one normal at the floor for the rest."""

    spread: float
    floor: float
    n_seeds: int

    @property
    def empty(self) -> bool:
        return self.n_seeds < 2 or (self.spread <= 0 and self.floor <= 0)

    @functools.cached_property
    def mixture(self) -> tuple[np.ndarray, np.ndarray]:
        """The seed part's scales (sd of each normal) and weights (summing to 1)."""
        if self.empty:
            return np.zeros(0), np.zeros(0)
        df = self.n_seeds - 1
        above = 1.0 if self.floor <= 0 else float(special.chdtr(df, self.spread / self.floor)) if self.spread > 0 else 0.0
        x, w = _LEGENDRE
        scales, weights = [], []
        if above > 0:
            q = np.maximum(special.chdtri(df, 1 - (x + 1) / 2 * above), 1e-300)  # the chi2's quantiles (> 0)
            scales.append(np.sqrt(self.spread / (self.n_seeds * q)))
            weights.append(w / 2 * above)
        if above < 1:
            scales.append([np.sqrt(self.floor / self.n_seeds)])
            weights.append([1.0 - above])
        return np.concatenate(scales), np.concatenate(weights)

    def cdf(self, v: np.ndarray) -> np.ndarray:
        """P(seed part <= v), elementwise."""
        v = np.asarray(v, float)
        scales, weights = self.mixture
        return special.ndtr(v[..., None] / scales) @ weights

    def quantile(self, q: float) -> float:
        if self.empty:
            return 0.0
        scale = np.sqrt(max(self.spread / max(self.n_seeds - 1, 1), self.floor) / self.n_seeds)
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
        chi2 = special.chdtri(self.n_seeds - 1, 1 - np.clip(u, 1e-300, 1))
        tau2 = np.maximum(self.spread / chi2, self.floor) if self.spread > 0 else np.full(np.shape(u), self.floor)
        return np.asarray(z) * np.sqrt(tau2 / self.n_seeds)

    @property
    def variance(self) -> float:
        """Its estimated variance, (the seeds' spread or the floor, the larger) / S: the plan's and
        the detectable difference's figure (a t's variance is infinite with 1-2 degrees of freedom)."""
        return 0.0 if self.empty else max(self.spread / (self.n_seeds - 1), self.floor) / self.n_seeds



@dataclass
class MeanDist:
    """The sampling distribution of a prompts x seeds mean: ``est`` + a prompt-bootstrap draw
    (``dev``, one per resample) + the :class:`SeedPart` ``seed`` (none with one seed)."""

    est: float
    dev: np.ndarray
    seed: SeedPart

    @property
    def df(self) -> int:
        return max(self.seed.n_seeds - 1, 0)

    def _below(self, v: float) -> np.ndarray:
        """P(mean <= v) given each prompt draw."""
        if not self.seed.empty:
            return self.seed.cdf(v - self.est - self.dev)
        return (self.est + self.dev <= v).astype(float)

    def interval(self, level: float = 1 - ALPHA) -> list[float]:
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

    def p_value(self) -> tuple[float, float]:
        """Two-sided p of "the mean is 0" and its Monte Carlo standard error."""
        b = len(self.dev)
        if self.seed.empty:
            draws = self.est + self.dev
            tail = min((draws <= 0).mean(), (draws >= 0).mean())  # ties on both sides: all-zero draws, no MC error
            return boot_p(draws), float(2 * np.sqrt(tail * (1 - tail) / b))
        below = self._below(0.0)
        tail = min(below.mean(), 1 - below.mean())
        return float(min(1.0, 2 * tail)), float(2 * below.std() / np.sqrt(b))

    def detectable(self, alpha: float = ALPHA, power: float = POWER) -> float:
        """The smallest true difference this design detects with ``power`` at a two-sided
        ``alpha`` (normal approximation: (z_{1-alpha/2} + z_power) x the mean's standard error,
        the seed part's t inflating it by its degrees of freedom)."""
        var_prompt = float(np.var(self.dev))
        var_seed = self.seed.variance
        se = np.sqrt(var_prompt + var_seed)
        if se == 0:
            return 0.0
        df = satterthwaite(var_prompt, len(self.dev) - 1, var_seed, self.df)
        return float((special.stdtrit(df, 1 - alpha / 2) + special.stdtrit(df, power)) * se)



def satterthwaite(v1: float, df1: float, v2: float, df2: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of two variance estimates."""
    if v2 <= 0 or df2 <= 0:
        return max(df1, 1.0)
    if v1 <= 0 or df1 <= 0:
        return float(df2)
    return float((v1 + v2) ** 2 / (v1 ** 2 / df1 + v2 ** 2 / df2))



def mean_dist(x: np.ndarray, boot: Bootstrap, blocks: int = 1, run_noise_floor: bool = True) -> MeanDist:
    """The distribution of the mean of a prompts x seeds matrix (module docstring).
    ``run_noise_floor`` False: the seed part is the plain t of issue 19 (the calibration's
    reference, which collapses when the seeds agree)."""
    x = np.asarray(x, float).reshape(boot.n_prompts, -1)
    n, s = x.shape
    ms = mean_squares(x)
    dev = boot.prompt_means(ms.rows, blocks) - ms.est
    if s == 1:
        return MeanDist(ms.est, dev, SeedPart(0.0, 0.0, 1))
    shrink = np.sqrt(max(0.0, ms.prompts - ms.resid) / ms.prompts) if ms.prompts > 0 else 1.0
    seed = SeedPart(float(((ms.cols - ms.cols.mean()) ** 2).sum()), float(ms.resid / n) if run_noise_floor else 0.0, s)
    return MeanDist(ms.est, shrink * dev, seed)


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
    """:class:`MeanSquares` of ``x`` (prompts x seeds): what the intervals (:func:`mean_dist`) and
    the detectable difference (:mod:`diffgrpo.analysis.power`) split a mean's variance by."""
    n, s = x.shape
    est, rows, cols = float(x.mean()), x.mean(axis=1), x.mean(axis=0)
    ms_rows = s * ((rows - est) ** 2).sum() / (n - 1)
    if s == 1:
        return MeanSquares(est, rows, cols, float(ms_rows), 0.0, 0.0)
    ms_cols = n * ((cols - est) ** 2).sum() / (s - 1)
    ms_resid = ((x - rows[:, None] - cols[None, :] + est) ** 2).sum() / ((n - 1) * (s - 1))
    return MeanSquares(est, rows, cols, float(ms_rows), float(ms_cols), float(ms_resid))



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



def arm_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Per arm: mean gain over seeds (points, final checkpoint vs base) and its 95% interval."""
    rows = []
    for arm in arm_order(s for s, _ in scores.runs):
        gain = 100.0 * (scores.at(arm) - scores.base[:, None])
        lo, hi = mean_dist(gain, boot).interval()
        rows.append({"strategy": arm, "gain_pp": float(gain.mean()), "ci_low": lo, "ci_high": hi,
                     "n_seeds": gain.shape[1]})
    return pd.DataFrame(rows)



CONTRAST_COLUMNS = ["a", "b", "family", "diff_pp", "ci_low", "ci_high", "p", "p_mc_se", "resamples", "n_seeds",
                    "detectable_pp"]


def contrasts(scores: Scores, boot: Bootstrap, control: Iterable[str] = (), alpha: float = ALPHA,
              max_refine: int = MAX_REFINE) -> pd.DataFrame:
    """Every pair of arms, paired on the same test prompts and the seeds both ran: difference of
    gains in points (a - b), its interval, p-value (with its Monte Carlo error and the resamples
    it took), and Holm's within its family: ``arms`` (pairs of verifier-reward arms) or
    ``control`` (a pair with a ``control`` arm). ``decision``: differs / not distinguishable /
    undecided, by Holm's step-down (:func:`decide`)."""
    arms, control = arm_order(s for s, _ in scores.runs), set(control)
    rows, diffs = [], []
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            common = sorted(set(scores.seeds(a)) & set(scores.seeds(b)))
            if not common:
                continue
            diff = 100.0 * (scores.at(a, seeds=common) - scores.at(b, seeds=common))
            family = "control" if {a, b} & control else "arms"
            rows.append({"a": a, "b": b, "family": family, "diff_pp": float(diff.mean()), "n_seeds": len(common)})
            diffs.append(diff)
    return decide(pd.DataFrame(rows, columns=CONTRAST_COLUMNS), diffs, boot, alpha, max_refine)


def decide(out: pd.DataFrame, diffs: list[np.ndarray], boot: Bootstrap, alpha: float = ALPHA,
           max_refine: int = MAX_REFINE) -> pd.DataFrame:
    """The intervals, p-values and Holm's decisions of paired contrasts: ``out`` has a row per
    contrast (a ``family`` column among its own; a RangeIndex), ``diffs`` its prompts x seeds
    differences in points. Holm's step-down runs within each family (:func:`holm_step_down`:
    resamples are spent only on the p that decides a step); adds ``ci_low``, ``ci_high``, ``p``,
    ``p_mc_se``, ``resamples``, ``p_holm``, ``excludes_zero``, ``decision``, ``undecided``,
    ``significant_holm``, and ``detectable_pp``: the smallest true difference this contrast would be
    found with 80% power at Holm's first-step threshold (alpha / the family's size; later steps
    are less strict), from its own variance components (:meth:`MeanDist.detectable`): beside a
    "not distinguishable", the size the study could have seen."""
    out = out.copy()
    blocks, dists = [1] * len(diffs), [mean_dist(d, boot) for d in diffs]

    def p_of(i: int, refine: bool):
        if refine:
            if 2 * blocks[i] > max_refine:
                return None
            blocks[i] *= 2
            dists[i] = mean_dist(diffs[i], boot, blocks[i])
        return dists[i].p_value()

    decision = pd.Series("not distinguishable", index=out.index, dtype=object)
    for family, idx in out.groupby("family").groups.items():
        idx = list(idx)
        for k, d in holm_step_down(lambda j, refine: p_of(idx[j], refine), len(idx), alpha).items():
            decision[idx[k]] = d
    size = out.groupby("family")["family"].transform("size") if len(out) else out["family"]
    for i, dist in enumerate(dists):
        p, se = dist.p_value()
        lo, hi = dist.interval(1 - alpha)
        out.loc[i, ["ci_low", "ci_high", "p", "p_mc_se", "resamples", "detectable_pp"]] = [
            lo, hi, p, se, blocks[i] * boot.n_boot, dist.detectable(alpha / int(size.iloc[i]))]
    out = out.astype({"ci_low": float, "ci_high": float, "p": float, "p_mc_se": float, "resamples": int,
                      "detectable_pp": float})
    out["p_holm"] = np.nan
    for family, idx in out.groupby("family").groups.items():
        out.loc[idx, "p_holm"] = holm(out.loc[idx, "p"])
    out["excludes_zero"] = (out["ci_low"] > 0) | (out["ci_high"] < 0)
    out["decision"] = decision.to_numpy()
    out["undecided"] = out["decision"] == "undecided"
    out["significant_holm"] = out["decision"] == "differs"
    return out



def holm_families(pairs: pd.DataFrame) -> dict:
    """Each Holm family of the report: what it is and the contrasts in it."""
    return {family: {"what": FAMILIES[family], "contrasts": [f"{a} - {b}" for a, b in zip(g["a"], g["b"])]}
            for family, g in pairs.groupby("family", sort=False)}



def curve_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Figure 2's bands: per arm and checkpoint, the 95% interval of the mean accuracy over
    seeds (step 0: the base model's, over prompts only)."""
    base = mean_dist(scores.base, boot).interval()
    rows = []
    for arm in arm_order(s for s, _ in scores.runs):
        rows.append({"strategy": arm, "step": 0, "ci_low": base[0], "ci_high": base[1]})
        for step in scores.steps(arm):
            lo, hi = mean_dist(scores.at(arm, step), boot).interval()
            rows.append({"strategy": arm, "step": step, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)



def r2_interval(x: Iterable[float], y: Iterable[float], n_boot: int, seed: int,
                groups: Iterable | None = None) -> list[float] | None:
    """Percentile interval of R^2 over resamples of the arms (``groups``, one label per run),
    then of each drawn arm's runs (its seeds); ``groups`` None: every run its own arm. None with
    fewer than 3 runs or no spread (resamples without spread in x or y are dropped)."""
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    labels = np.arange(len(x)) if groups is None else pd.factorize(pd.Series(list(groups)))[0]
    members = [np.flatnonzero(labels == g) for g in range(labels.max() + 1)]
    sizes = np.array([len(m) for m in members])
    padded = np.array([np.pad(m, (0, sizes.max() - len(m)), mode="edge") for m in members])
    rng = np.random.default_rng([seed, 2])
    arm = rng.integers(0, len(members), size=(n_boot, len(members)))          # arms, with replacement
    pos = (rng.random((n_boot, len(members), sizes.max())) * sizes[arm][..., None]).astype(int)  # then seeds
    idx = padded[arm[..., None], pos].reshape(n_boot, -1)
    w = (np.arange(sizes.max()) < sizes[arm][..., None]).reshape(n_boot, -1).astype(float)
    xs, ys = x[idx], y[idx]
    xc = xs - (w * xs).sum(1, keepdims=True) / w.sum(1, keepdims=True)
    yc = ys - (w * ys).sum(1, keepdims=True) / w.sum(1, keepdims=True)
    sxx, syy, sxy = (w * xc * xc).sum(1), (w * yc * yc).sum(1), (w * xc * yc).sum(1)
    ok = (sxx > 1e-12) & (syy > 1e-12)
    return [_round(v) for v in interval(sxy[ok] ** 2 / (sxx[ok] * syy[ok]))]



def best_arm(arms: Iterable[str], pairs: pd.DataFrame) -> str | None:
    """The arm that Holm's decisions put ahead of every other one of ``arms`` (its contrast with
    each ``differs``, in its favour), or None. No ranking by point estimate comes first, so the
    arm named is not the luckiest of several (no winner's curse): it is named only when the
    family's own decisions, at their family-wise error rate, say it leads each other arm."""
    arms = list(arms)
    for arm in arms:
        wins = 0
        for other in arms:
            if other == arm:
                continue
            row = pairs[((pairs["a"] == arm) & (pairs["b"] == other)) | ((pairs["a"] == other) & (pairs["b"] == arm))]
            if len(row) and bool(row["significant_holm"].iloc[0]):
                sign = 1 if row["a"].iloc[0] == arm else -1
                wins += sign * float(row["diff_pp"].iloc[0]) > 0
        if wins == len(arms) - 1:
            return arm
    return None



def verdict_with_intervals(arms: pd.DataFrame, pairs: pd.DataFrame, metric: str, base_acc: float,
                           n_prompts: int, control: Iterable[str] = ()) -> tuple[str, str | None]:
    """One honest line, and the best arm: named only when Holm's decisions in the arms' family
    put it ahead of every other arm (:func:`best_arm`); otherwise the arms are not
    distinguishable at this size, and the line gives the leader's lead over the runner-up with
    its interval (unadjusted: a description, not a decision). The best arm is one that trains on
    the verifier's reward (``control`` arms are compared apart)."""
    name = METRIC_NAMES.get(metric, metric)
    control = set(control)
    real = arms[~arms["strategy"].isin(control)] if (~arms["strategy"].isin(control)).any() else arms
    ranked = real.sort_values("gain_pp", ascending=False, kind="stable").reset_index(drop=True)
    top = ranked.iloc[0]
    ci = lambda r: f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]"  # noqa: E731
    seeds = int(arms["n_seeds"].max())
    scope = (f"95% intervals over {n_prompts} test prompts and {seeds} seeds, the seed part a t with {seeds - 1} "
             "degrees of freedom never narrower than the runs' own per-prompt noise" if seeds > 1 else
             f"95% intervals over {n_prompts} test prompts only (one seed: seed variance is not included)")
    if top["ci_high"] < 0:
        head = f"every arm lost {name} against the base model ({base_acc:.2f}); the best, {top['strategy']}, "
    elif top["ci_low"] <= 0:
        tied = int(np.isclose(ranked["gain_pp"], top["gain_pp"]).sum())
        best_mean = f"{tied} arms tie for the best mean at" if tied > 1 else f"the best mean, {top['strategy']},"
        head = f"no arm's gain over the base model's {name} ({base_acc:.2f}) excludes 0; {best_mean} "
    else:
        head = f"{top['strategy']} beat the base model's {name} ({base_acc:.2f}): "
    line = head + f"{top['gain_pp']:+.1f} points {ci(top)}"
    if len(ranked) == 1:
        return f"{line}{_family_counts(pairs)} ({scope})", str(top["strategy"])
    second = ranked.iloc[1]
    pair = pairs[((pairs["a"] == top["strategy"]) & (pairs["b"] == second["strategy"]))
                 | ((pairs["b"] == top["strategy"]) & (pairs["a"] == second["strategy"]))].iloc[0]
    sign = 1 if pair["a"] == top["strategy"] else -1
    lead = {"diff": sign * pair["diff_pp"], "lo": min(sign * pair["ci_low"], sign * pair["ci_high"]),
            "hi": max(sign * pair["ci_low"], sign * pair["ci_high"])}
    lead_text = f"{lead['diff']:+.1f} [{lead['lo']:+.1f}, {lead['hi']:+.1f}] points over {second['strategy']}"
    best = best_arm(ranked["strategy"], pairs)
    if best is not None:
        line += (f"; {best} is the best arm: it differs from every other arm after Holm's correction "
                 f"(its lead of {lead_text})")
    else:
        line += (f"; the arms are not distinguishable at this size: no arm differs from every other after Holm's "
                 f"correction (the leader's lead of {lead_text}, unadjusted; {detectable_words(pair)})")
    return f"{line}{_family_counts(pairs)} ({scope})", best



def detectable_words(pair) -> str:
    """"this study could have detected about X points" for a contrast row (``detectable_pp``)."""
    if not pair["detectable_pp"] > 0:  # no variation at all (every paired score equal), or none to measure
        return "the paired scores do not vary at all, so no detectable size can be given: more test prompts or seeds"
    return (f"a difference of about {pair['detectable_pp']:.1f} points was detectable with 80% power at Holm's "
            "first step: a smaller true one would go unseen")


def _family_counts(pairs: pd.DataFrame) -> str:
    """'; k of m contrasts ... differ from 0 after Holm's correction', per family."""
    parts = []
    pairs = pairs if "family" in pairs else pairs.assign(family="arms")
    for family, g in pairs.groupby("family", sort=False) if len(pairs) else []:
        what = "contrasts" if family == "arms" else "contrasts with the control"
        undecided = int(g["undecided"].sum()) if "undecided" in g else 0
        parts.append(f"{int(g['significant_holm'].sum())} of {len(g)} {what} differ from 0 after Holm's correction "
                     f"within their family" + (f" ({undecided} undecided at the resample cap)" if undecided else ""))
    return "".join(f"; {p}" for p in parts)
