"""Paper 000's capacity boundary as a test, not a picture: per difficulty tier of the held-out
set, the base model's accuracy and each arm's gain with its 95% interval (the tier's test
prompts x seeds, :func:`~diffgrpo.stats.intervals.mean_dist`), and per arm the contrast
"gain on the hardest tier minus gain on the other tiers" with its interval.

A plateau on the hardest tier (000: gains stop where the base model is least competent) reads
as that contrast's interval lying below 0; an interval above 0 says the hardest tier gained
more (no plateau); one that holds 0 says this study cannot tell. A tier is often few prompts
(one prompt of 37 is 2.7 points), so the intervals, not the point estimates, carry the claim.
The contrast's prompts differ between its two sides: each prompt's gain is weighted n / n_hard
(hardest tier) or -n / n_rest (the others), so the mean over all test prompts is the difference,
and the study's resamples of all its prompts give the interval (the tiers' sizes vary a little
between resamples, as they would between test sets).

Writes ``plateau.csv`` / ``plateau.md``, nothing for a task without tiers. Its part of
``summary.json``: ``{"plateau": null}`` (no tiers) or ``{"plateau": {"tiers": [{"arm", "tier",
"n_prompts", "base_acc", "gain_pp", "ci_low", "ci_high", "n_seeds"}], "tests": [{"arm",
"hardest_tier", "diff_pp", "ci_low", "ci_high", "reading"}]}}``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diffgrpo.analysis.tables import DIGITS, arm_order, markdown
from diffgrpo.stats.intervals import Bootstrap, mean_dist
from diffgrpo.store.artifacts import write_csv, write_text
from diffgrpo.tasks import splits

TABLES = ("plateau",)
FIGURES = ()

READINGS = {-1: "the hardest tier gained less than the others: consistent with a plateau (unadjusted for the arms)",
            1: "the hardest tier gained more than the others: no plateau (unadjusted for the arms)",
            0: "not distinguishable: this study cannot say whether gains plateau"}


def per_tier(scores, tier: np.ndarray, n_boot: int, seed: int) -> pd.DataFrame:
    """Per arm and tier (ascending): the tier's test prompts, the base model's accuracy there
    (points) and the arm's gain with its 95% interval (a tier of one prompt: no interval)."""
    rows = []
    for t in sorted(set(tier.tolist())):
        mask = tier == t
        sub = scores.subset(mask)
        boot = Bootstrap(int(mask.sum()), n_boot, seed) if mask.sum() >= 2 else None
        for arm in arm_order(a for a, _ in scores.runs):
            gain = 100.0 * (sub.at(arm) - sub.base[:, None])
            lo, hi = mean_dist(gain, boot).interval() if boot else (np.nan, np.nan)
            rows.append({"arm": arm, "tier": int(t), "n_prompts": int(mask.sum()), "base_acc": 100.0 * float(sub.base.mean()),
                         "gain_pp": float(gain.mean()), "ci_low": lo, "ci_high": hi, "n_seeds": gain.shape[1]})
    return pd.DataFrame(rows)


def plateau_tests(scores, tier: np.ndarray, boot: Bootstrap) -> pd.DataFrame:
    """Per arm: gain on the hardest (highest) tier minus gain on the rest, its 95% interval over
    ``boot`` (resamples of all the test prompts) and seeds, and what it says (module docstring)."""
    hardest = int(np.max(tier))
    top = tier == hardest
    n = len(tier)
    weight = np.where(top, n / top.sum(), -n / (~top).sum())
    rows = []
    for arm in arm_order(a for a, _ in scores.runs):
        gain = 100.0 * (scores.at(arm) - scores.base[:, None])
        lo, hi = mean_dist(gain * weight[:, None], boot).interval()
        side = -1 if hi < 0 else 1 if lo > 0 else 0
        rows.append({"arm": arm, "hardest_tier": hardest, "diff_pp": float(gain[top].mean() - gain[~top].mean()),
                     "ci_low": lo, "ci_high": hi, "reading": READINGS[side]})
    return pd.DataFrame(rows)


def prompt_tiers(cfg, prompts: pd.Index) -> np.ndarray | None:
    """Each scored test prompt's tier, from the task's held-out rows; None when the task has no
    tiers (or fewer than two), or the rows do not cover the scored prompts."""
    tier = splits.load_test(cfg).set_index("id")["tier"].reindex(prompts)
    if tier.isna().any() or tier.nunique() < 2:
        return None
    return tier.to_numpy(dtype=int)


def write(study) -> dict:
    tier = prompt_tiers(study.cfg, study.scores.prompts)
    if tier is None:
        return {"plateau": None}
    cfg = study.cfg
    tiers = per_tier(study.scores, tier, cfg.analyze.bootstrap, cfg.analyze.seed).round(DIGITS)
    tests = plateau_tests(study.scores, tier, study.boot).round(DIGITS)
    write_csv(study.out / "plateau.csv", tiers)
    write_text(study.out / "plateau.md", f"# Gain per tier against the base model's accuracy there (points, {study.metric}; "
               f"95% intervals over the tier's test prompts and {study.over.split(' and ')[-1]})\n\n"
               + markdown(tiers) + "\n## A plateau on the hardest tier? Gain there minus gain on the other tiers "
               f"(95% interval)\n\nEach arm's interval is unadjusted: over {len(tests)} arms, one may exclude 0 by chance "
               f"(up to about {min(100, 5 * len(tests))}% of the time when no arm plateaus); an arm trained on prompts it "
               "already solves (p_hat = 1) has little to gain anywhere.\n\n" + markdown(tests))
    return {"plateau": {"tiers": tiers.to_dict("records"), "tests": tests.to_dict("records")}}
