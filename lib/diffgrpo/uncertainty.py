"""Uncertainty of every reported number: a two-way bootstrap over test prompts and seeds,
paired contrasts with Holm's adjustment, the least-squares line of Figure 3 and an interval on
its R^2, and the one-line verdict that names a best arm only when the data support it.

- every arm's gain has a 95% percentile interval from a two-way bootstrap over the per-prompt
  scores (final checkpoint vs the base model): each resample draws the test prompts and the
  arm's seeds with replacement, independently (prompts and seeds are crossed: every seed is
  scored on the same prompts). With one seed the interval covers test-prompt noise only;
- every pair of arms gets a paired contrast: the same resampled prompts and seeds for both arms
  (over the seeds both ran), its interval, a two-sided bootstrap p-value (the share of
  resamples on either side of 0, doubled, with the +1 correction) and the Holm-adjusted
  p-value over all the pairs;
- Figure 3's R^2 gets a percentile interval from resampling the (arm, seed) runs;
- the verdict names the best arm only when its lead over the runner-up has an interval that
  excludes 0; otherwise it says the arms are not distinguishable at this size.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from .tables import DIGITS, METRIC_NAMES, strategy_order

def _round(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), DIGITS)



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
    """Two-way bootstrap weights: each resample draws the ``n_prompts`` test prompts and the S
    seeds with replacement, independently. The prompt draws are shared by every arm and
    contrast; the seed draws by every matrix with the same number of seeds (a contrast's two
    arms are one matrix, their difference, so both see the same draws)."""

    def __init__(self, n_prompts: int, n_boot: int, seed: int):
        self.n_prompts, self.n_boot, self.seed = n_prompts, n_boot, seed
        rng = np.random.default_rng([seed, 0])
        self.prompt_w = rng.multinomial(n_prompts, np.full(n_prompts, 1 / n_prompts), size=n_boot) / n_prompts

    def seed_w(self, n_seeds: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 1, n_seeds])
        return rng.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=self.n_boot) / n_seeds

    def means(self, x: np.ndarray) -> np.ndarray:
        """The resampled means of a prompts x seeds matrix (one value per resample)."""
        x = np.asarray(x, float).reshape(self.n_prompts, -1)
        return ((self.prompt_w @ x) * self.seed_w(x.shape[1])).sum(axis=1)



def interval(boot: np.ndarray, level: float = 0.95) -> list[float]:
    """Percentile interval of the resampled values."""
    tail = 100 * (1 - level) / 2
    return [float(v) for v in np.percentile(boot, [tail, 100 - tail])]



def boot_p(boot: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the mean is 0": twice the smaller share of resamples on
    either side of 0 (ties count on both sides), with the +1 of a resampling test, capped at 1."""
    n = len(boot)
    tail = min(int((boot <= 0).sum()), int((boot >= 0).sum()))
    return float(min(1.0, 2 * (tail + 1) / (n + 1)))



def holm(p: Iterable[float]) -> np.ndarray:
    """Holm's step-down adjustment: the i-th smallest of m p-values times (m - i + 1), made
    monotone, capped at 1; controls the family-wise error rate over the m contrasts."""
    p = np.asarray(list(p), float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out



def arm_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Per arm: mean gain over seeds (points, final checkpoint vs base) and its 95% interval."""
    rows = []
    for strategy in strategy_order(s for s, _ in scores.runs):
        gain = 100.0 * (scores.at(strategy) - scores.base[:, None])
        lo, hi = interval(boot.means(gain))
        rows.append({"strategy": strategy, "gain_pp": float(gain.mean()), "ci_low": lo, "ci_high": hi,
                     "n_seeds": gain.shape[1]})
    return pd.DataFrame(rows)



def contrasts(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Every pair of arms, paired on the same test prompts and the seeds both ran: difference of
    gains in points (a - b), its interval, bootstrap p-value, and Holm's over all pairs."""
    arms = strategy_order(s for s, _ in scores.runs)
    rows = []
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            common = sorted(set(scores.seeds(a)) & set(scores.seeds(b)))
            if not common:
                continue
            diff = 100.0 * (scores.at(a, seeds=common) - scores.at(b, seeds=common))
            draws = boot.means(diff)
            lo, hi = interval(draws)
            rows.append({"a": a, "b": b, "diff_pp": float(diff.mean()), "ci_low": lo, "ci_high": hi,
                         "p": boot_p(draws), "n_seeds": len(common)})
    out = pd.DataFrame(rows, columns=["a", "b", "diff_pp", "ci_low", "ci_high", "p", "n_seeds"])
    out["p_holm"] = holm(out["p"]) if len(out) else []
    out["excludes_zero"] = (out["ci_low"] > 0) | (out["ci_high"] < 0)
    out["significant_holm"] = out["p_holm"] < 0.05
    return out



def curve_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Figure 2's bands: per arm and checkpoint, the 95% interval of the mean accuracy over
    seeds (step 0: the base model's, over prompts only)."""
    base = interval(boot.means(scores.base))
    rows = []
    for strategy in strategy_order(s for s, _ in scores.runs):
        rows.append({"strategy": strategy, "step": 0, "ci_low": base[0], "ci_high": base[1]})
        for step in scores.steps(strategy):
            lo, hi = interval(boot.means(scores.at(strategy, step)))
            rows.append({"strategy": strategy, "step": step, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)



def r2_interval(x: Iterable[float], y: Iterable[float], n_boot: int, seed: int) -> list[float] | None:
    """Percentile interval of R^2 over resamples of the (arm, seed) runs; None with fewer than
    3 runs or no spread (resamples without spread in x or y are dropped)."""
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    idx = np.random.default_rng([seed, 2]).integers(0, len(x), size=(n_boot, len(x)))
    xs, ys = x[idx], y[idx]
    ok = (np.ptp(xs, axis=1) > 0) & (np.ptp(ys, axis=1) > 0)
    xc = xs[ok] - xs[ok].mean(axis=1, keepdims=True)
    yc = ys[ok] - ys[ok].mean(axis=1, keepdims=True)
    r2 = (xc * yc).sum(1) ** 2 / ((xc**2).sum(1) * (yc**2).sum(1))
    return [_round(v) for v in interval(r2)]



def verdict_with_intervals(arms: pd.DataFrame, pairs: pd.DataFrame, metric: str, base_acc: float,
                           n_prompts: int) -> tuple[str, str | None]:
    """One honest line, and the best arm: named only when its lead over the runner-up has an
    interval that excludes 0; otherwise the arms are not distinguishable at this size."""
    name = METRIC_NAMES.get(metric, metric)
    ranked = arms.sort_values("gain_pp", ascending=False, kind="stable").reset_index(drop=True)
    top = ranked.iloc[0]
    ci = lambda r: f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]"  # noqa: E731
    seeds = int(arms["n_seeds"].max())
    scope = (f"95% intervals over {n_prompts} test prompts and {seeds} seeds" if seeds > 1 else
             f"95% intervals over {n_prompts} test prompts only (one seed: seed-to-seed spread is not in them)")
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
        return f"{line} ({scope})", str(top["strategy"])
    second = ranked.iloc[1]
    pair = pairs[((pairs["a"] == top["strategy"]) & (pairs["b"] == second["strategy"]))
                 | ((pairs["b"] == top["strategy"]) & (pairs["a"] == second["strategy"]))].iloc[0]
    sign = 1 if pair["a"] == top["strategy"] else -1
    lead = {"diff": sign * pair["diff_pp"], "lo": min(sign * pair["ci_low"], sign * pair["ci_high"]),
            "hi": max(sign * pair["ci_low"], sign * pair["ci_high"])}
    lead_text = f"{lead['diff']:+.1f} [{lead['lo']:+.1f}, {lead['hi']:+.1f}] points over {second['strategy']}"
    n_sig = int(pairs["significant_holm"].sum())
    sig = f"; {n_sig} of {len(pairs)} contrasts differ from 0 after Holm's correction"
    if lead["lo"] > 0:
        best = str(top["strategy"])
        line += f"; {best} is the best arm: its lead of {lead_text} excludes 0"
    else:
        best = None
        line += f"; the arms are not distinguishable at this size: the lead of {lead_text} includes 0"
    return f"{line}{sig} ({scope})", best

