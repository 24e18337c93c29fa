"""Paper 000 ("Limits of Difficulty Scaling"): GRPO + LoRA on the lower difficulty tiers only vs
on all tiers. It reports a capacity boundary (gains plateau on the hardest tiers), that the
lower-tier run matches the all-tier run's accuracy with about 45% of the steps, and that a model
trained on GSM8K beats one trained on MATH on MATH's numeric subset (+5 points at 1.5B, +3 at 3B).

Which arms are compared is read from their policies: the lower-tier arm is the first with
policy ``tiers``, the all-tier arm the first with policy ``all``.

**steps_to_match**, exactly: a non-inferiority test on the paired difference, not a first
crossing of point estimates (which is biased early when the curves are close). At each evaluated
checkpoint s of the lower-tier arm, the difference d(s) = its accuracy at s minus the all-tier
arm's at its final checkpoint (``analyze.metric`` on the held-out test set, in points), paired on
the same test prompts and the seeds both arms ran, gets the study's 95% interval (test prompts
and seeds, :func:`~diffgrpo.stats.intervals.mean_dist`). The lower-tier arm is
*non-inferior* at s when that interval's lower end is above ``-analyze.match_margin`` points (a
one-sided test at 2.5%). The checkpoints are tested in a fixed sequence, the last first, and the
sequence stops at the first that is not non-inferior (the fixed-sequence procedure: the
family-wise error stays at 2.5% over all the checkpoints); ``step`` is the earliest checkpoint of
that unbroken run, and ``frac_of_steps`` = step / the all-tier arm's final step, known to
``train.save_steps`` / that step (``resolution_frac``). ``checkpoints`` lists every d(s) with its
interval. It is null, with the reason, when either arm is missing, when the two share no seed,
when the all-tier arm's gain over the base model has a 95% interval that does not exclude 0
(there is no accuracy gain to match: the untrained model already has it), or when the lower-tier
arm is not non-inferior even at its last checkpoint. Paper 000 says its run matches "across
tiers"; this match is on the whole held-out set (the per-tier rows are in ``table_tiers_000``).
With ``train.epochs`` each arm trains its own number of steps (an epoch of the smaller
lower-tier set is shorter), so the fraction can come out below 100% by the lower-tier arm's
final checkpoint; with ``train.max_steps`` both train as long.

Section ``"000"`` of summary.json::

    {"tiers": [{"arm", "tier", "base_acc", "final_acc"}],        # test set, per tier, fractions
     "steps_to_match": {"lower_tier_arm", "all_arm", "step", "frac_of_steps", "margin_pp",
                        "checkpoints": [{"step", "diff_pp", "ci_low", "ci_high", "non_inferior"}],
                        "interval_over", "lower_final_step", "all_final_step", "target_acc",
                        "resolution_frac", "reason", "definition"},
     "transfer": [{"arm", "train_task", "eval_set", "acc"}],      # every arm (and base) on every
                                                                   # evaluation set besides `test`
     "transfer_reason": null or why there are no transfer rows}
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diffgrpo.analysis.papers import arm_selecting
from diffgrpo.store import layout
from diffgrpo.params import TEST_SET
from diffgrpo.analysis.tables import final_checkpoints, tier_accuracy
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.stats.intervals import mean_dist

DEFINITION = ("earliest checkpoint from which on, to its last, the lower-tier arm is non-inferior to the all-tier "
              "arm's final checkpoint: the 95% interval of the paired difference (held-out test set, points; test "
              "prompts and seeds) has its lower end above -margin, checkpoints tested last first in a fixed "
              "sequence; as a fraction of the all-tier arm's steps")


#: the report's markdown tables and figures in the report folder (the notebook shows them)
TABLES = ("table_tiers_000", "steps_to_match", "transfer_000")
FIGURES = ()


def match_checkpoints(scores, boot, lower: str, all_arm: str, final_step: int, margin_pp: float) -> pd.DataFrame:
    """Per evaluated checkpoint of the lower-tier arm: the paired difference from the all-tier
    arm's final checkpoint (points), its 95% interval, and whether it is non-inferior (the
    interval's lower end above ``-margin_pp``). Paired on the seeds both arms ran."""
    common = sorted(set(scores.seeds(lower)) & set(scores.seeds(all_arm)))
    target = scores.at(all_arm, final_step, seeds=common)
    rows = []
    for step in scores.steps(lower):
        dist = mean_dist(100.0 * (scores.at(lower, step, seeds=common) - target), boot)
        lo, hi = dist.interval()
        rows.append({"step": int(step), "diff_pp": dist.est, "ci_low": lo, "ci_high": hi,
                     "non_inferior": bool(lo > -margin_pp)})
    return pd.DataFrame(rows, columns=["step", "diff_pp", "ci_low", "ci_high", "non_inferior"])


def steps_to_match(curves: pd.DataFrame, arms: pd.DataFrame, lower: str | None, all_arm: str | None,
                   save_steps: int, scores, boot, margin_pp: float) -> dict:
    """See the module's docstring. ``curves``: accuracy by checkpoint per arm (strategy, step,
    value; step 0 the base model); ``arms``: each arm's gain interval (strategy, ci_low, gain_pp);
    ``scores``: the per-prompt scores by checkpoint (:class:`diffgrpo.analysis.report.Scores`),
    ``boot``: the study's test-prompt resamples; ``margin_pp``: ``analyze.match_margin``."""
    out = {"lower_tier_arm": lower, "all_arm": all_arm, "step": None, "frac_of_steps": None, "margin_pp": margin_pp,
           "checkpoints": [], "interval_over": None, "lower_final_step": None, "all_final_step": None,
           "target_acc": None, "resolution_frac": None, "reason": None, "definition": DEFINITION}
    if lower is None or all_arm is None:
        out["reason"] = "the study needs an arm with policy `tiers` and one with policy `all`, each with complete runs"
        return out
    ref = curves[curves["strategy"] == all_arm]
    final = ref.loc[ref["step"].idxmax()]
    target, final_step = float(final["value"]), int(final["step"])
    out.update(target_acc=_round(target), resolution_frac=_round(save_steps / final_step), all_final_step=final_step,
               lower_final_step=int(curves.loc[curves["strategy"] == lower, "step"].max()))
    common = sorted(set(scores.seeds(lower)) & set(scores.seeds(all_arm)))
    if not common:
        out["reason"] = f"{lower!r} and {all_arm!r} ran no seed in common: the paired difference needs one"
        return out
    out["interval_over"] = (f"test prompts ({boot.n_boot} bootstrap resamples of {boot.n_prompts}) and "
                            + (f"{len(common)} seeds (t, {len(common) - 1} df, floored at the runs' per-prompt noise)" if len(common) > 1
                               else "one seed (seed variance not included)"))
    table = match_checkpoints(scores, boot, lower, all_arm, final_step, margin_pp)
    out["checkpoints"] = [{k: _round(v) if isinstance(v, float) else v for k, v in r.items()}
                          for r in table.to_dict("records")]
    gain = arms.set_index("strategy").loc[all_arm]
    if not gain["ci_low"] > 0:
        out["reason"] = (f"the all-tier arm {all_arm!r} gained {gain['gain_pp']:+.1f} points over the base model, "
                         f"95% interval [{gain['ci_low']:+.1f}, {gain['ci_high']:+.1f}], which does not exclude 0: "
                         "there is no accuracy gain to match")
        return out
    ok = table["non_inferior"].to_numpy()
    if not len(ok) or not ok[-1]:
        last = table.iloc[-1] if len(table) else None
        out["reason"] = (f"the lower-tier arm {lower!r} is not within {margin_pp:g} points of the all-tier arm's final "
                         "accuracy even at its last checkpoint" + ("" if last is None else
                         f" (step {int(last['step'])}: {last['diff_pp']:+.1f} [{last['ci_low']:+.1f}, {last['ci_high']:+.1f}])"))
        return out
    first = len(ok) - int(np.argmin(ok[::-1])) if not ok.all() else 0  # the unbroken run of non-inferior ones at the end
    step = int(table["step"].iloc[first])
    out.update(step=step, frac_of_steps=_round(step / final_step))
    return out


def describe(match: dict) -> str:
    """steps_to_match in words, with the margin and the difference at the matched checkpoint."""
    if match["reason"] is not None:
        return f"not reported: {match['reason']}"
    at = next(c for c in match["checkpoints"] if c["step"] == match["step"])
    return (f"{match['frac_of_steps']:.0%} of the all-tier arm's steps (step {match['step']} of "
            f"{match['all_final_step']}; the lower-tier arm trained {match['lower_final_step']}): from there on "
            f"non-inferior within {match['margin_pp']:g} points (at step {match['step']}: {at['diff_pp']:+.1f} "
            f"[{at['ci_low']:+.1f}, {at['ci_high']:+.1f}], 95% over {match['interval_over']})")


def tier_rows(tiers: pd.DataFrame, evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per arm and tier: the base model's accuracy and the arm's final one (mean over seeds)."""
    per_tier = tier_accuracy(tiers, evals, metric)
    base = per_tier[per_tier["strategy"] == layout.BASE_RUN].set_index("tier")["value"]
    arms = per_tier[per_tier["strategy"] != layout.BASE_RUN]
    return pd.DataFrame({"arm": arms["strategy"], "tier": arms["tier"], "base_acc": arms["tier"].map(base),
                         "final_acc": arms["value"], "n_seeds": arms["n"]}).reset_index(drop=True)


def transfer_rows(cfg, set_evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Every arm's final checkpoint (mean over seeds) and the base model on every evaluation set
    besides the held-out test set; ``train_task`` says what the arm trained on."""
    other = set_evals[set_evals["eval_set"] != TEST_SET]
    rows = []
    for eval_set, ev in other.groupby("eval_set", sort=False):
        base = ev[(ev["run_id"] == layout.BASE_RUN) & (ev["step"] == 0)]
        rows.append({"arm": layout.BASE_RUN, "train_task": None, "eval_set": eval_set, "acc": float(base[metric].iloc[0])})
        for arm, g in final_checkpoints(ev).groupby("strategy", sort=False):
            a = cfg.arm(arm)
            what = f"{cfg.dataset.task}, policy {a.select}" + (f" (tier <= {a.max_tier if a.max_tier is not None else cfg.select.max_tier})"
                                                               if a.select == "tiers" else "")
            rows.append({"arm": arm, "train_task": what, "eval_set": eval_set, "acc": float(g[metric].mean())})
    return pd.DataFrame(rows, columns=["arm", "train_task", "eval_set", "acc"])


def write(study) -> dict:
    cfg, metric = study.cfg, study.metric
    ran = set(study.runs["strategy"])
    lower, all_arm = arm_selecting(cfg, "tiers", ran), arm_selecting(cfg, "all", ran)
    match = steps_to_match(study.curves, study.arms, lower, all_arm, cfg.for_arm(all_arm).train.save_steps
                           if all_arm else cfg.train.save_steps, study.scores, study.boot, cfg.analyze.match_margin)
    tiers = tier_rows(study.tiers, study.evals, metric)
    transfer = transfer_rows(cfg, study.set_evals, metric)
    study.write_table("table_tiers_000", f"Accuracy per tier ({metric}, held-out test set): the base model and each "
                      "arm's final checkpoint (paper 000: gains plateau on the hardest tiers)", tiers.round(4))
    study.write_table("steps_to_match", "Steps the lower-tier arm needs to match the all-tier arm (paper 000: about 45%): "
                      "each checkpoint's paired difference from the all-tier arm's final accuracy (points, 95% interval)",
                      pd.DataFrame(match["checkpoints"], columns=["step", "diff_pp", "ci_low", "ci_high", "non_inferior"]),
                      note=f"Definition: {DEFINITION} (margin {match['margin_pp']:g} points). Ours: {describe(match)}.")
    study.write_table("transfer_000", f"Transfer ({metric}, final checkpoints): every arm on every evaluation set "
                      "besides the held-out test set (paper 000: GSM8K-trained beats MATH-trained on MATH numeric "
                      "by about 5 points at 1.5B, 3 at 3B)", transfer.round(4))
    return {
        "tiers": [{"arm": r["arm"], "tier": None if pd.isna(r["tier"]) else int(r["tier"]), "base_acc": _round(r["base_acc"]),
                   "final_acc": _round(r["final_acc"])} for r in tiers.to_dict("records")],
        "steps_to_match": match,
        "transfer": [{"arm": r["arm"], "train_task": None if pd.isna(r["train_task"]) else r["train_task"],
                      "eval_set": r["eval_set"], "acc": _round(r["acc"])} for r in transfer.to_dict("records")],
        "transfer_reason": None if len(transfer) else "the study declares no evaluation set besides `test` (evaluate.sets)",
    }
