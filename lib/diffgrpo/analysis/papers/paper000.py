"""Paper 000 ("Limits of Difficulty Scaling"): GRPO + LoRA on the lower difficulty tiers only vs
on all tiers. It reports a capacity boundary (gains plateau on the hardest tiers), that the
lower-tier run matches the all-tier run's accuracy with about 45% of the steps, and that a model
trained on GSM8K beats one trained on MATH on MATH's numeric subset (+5 points at 1.5B, +3 at 3B).

Which arms are compared is read from their policies: the lower-tier arm is the first with
policy ``tiers``, the all-tier arm the first with policy ``all``.

**steps_to_match**, exactly: the target is the all-tier arm's accuracy (``analyze.metric``, on
the held-out test set, mean over its seeds) at its final checkpoint; ``step`` is the first
evaluated checkpoint at which the lower-tier arm's accuracy (mean over its seeds) reaches the
target (>=); ``frac_of_steps`` = step / the all-tier arm's final step. Checkpoints come every
``train.save_steps``, so the fraction is known to that resolution (``resolution_frac``). It is
null, with the reason, when either arm is missing, when the all-tier arm's gain over the base
model has a 95% interval that does not exclude 0 (there is no accuracy gain to match: the
untrained model already has it), or when the lower-tier arm never reaches the target.

Its 95% interval (``ci95``, fractions) resamples the test prompts (the study's
:class:`~diffgrpo.analysis.uncertainty.Bootstrap`, ``analyze.bootstrap`` resamples; the seeds held as
they are): in each resample the target and the lower-tier curve are recomputed on the same
drawn prompts and the first crossing found again; a resample where the lower-tier arm never
reaches the target counts as beyond its last checkpoint (``p_never``: their share; an upper
end that falls there is null, "not reached"). The percentiles take resampled values only (a
fraction on the checkpoint grid). With ``train.epochs`` each arm trains its own number of
steps (an epoch of the smaller lower-tier set is shorter), so the fraction can come out below
100% by the lower-tier arm's final checkpoint; with ``train.max_steps`` both train as long.

Section ``"000"`` of summary.json::

    {"tiers": [{"arm", "tier", "base_acc", "final_acc"}],        # test set, per tier, fractions
     "steps_to_match": {"lower_tier_arm", "all_arm", "step", "frac_of_steps", "ci95", "p_never",
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
from diffgrpo.analysis.uncertainty import _round, interval

DEFINITION = ("first evaluated checkpoint at which the lower-tier arm's accuracy (mean over seeds, held-out test "
              "set) reaches the all-tier arm's final accuracy, as a fraction of the all-tier arm's steps")


#: the report's markdown tables and figures in the report folder (the notebook shows them)
TABLES = ("table_tiers_000", "steps_to_match", "transfer_000")
FIGURES = ()


def match_interval(scores, boot, lower: str, all_arm: str, final_step: int, level: float = 0.95) -> dict:
    """The 95% interval of ``frac_of_steps`` over test-prompt resamples (module docstring):
    ``scores``: :class:`diffgrpo.analysis.report.Scores` (per prompt, by checkpoint), ``boot``: the
    study's :class:`diffgrpo.analysis.uncertainty.Bootstrap`; ``final_step``: the all-tier arm's."""
    target = boot.prompt_means(scores.at(all_arm, final_step).mean(axis=1))
    steps = np.array(scores.steps(lower))
    curve = np.column_stack([boot.prompt_means(scores.at(lower, int(s)).mean(axis=1)) for s in steps])
    reached = curve >= target[:, None] - 1e-12
    frac = np.where(reached.any(axis=1), steps[reached.argmax(axis=1)] / final_step, np.inf)
    lo, hi = interval(frac, level, method="inverted_cdf")
    return {"ci95": [_round(lo) if np.isfinite(lo) else None, _round(hi) if np.isfinite(hi) else None],
            "p_never": _round(float(np.isinf(frac).mean())),
            "interval_over": f"test prompts ({boot.n_boot} bootstrap resamples of {boot.n_prompts}; seeds as they are)"}


def steps_to_match(curves: pd.DataFrame, arms: pd.DataFrame, lower: str | None, all_arm: str | None,
                   save_steps: int, scores=None, boot=None) -> dict:
    """See the module's docstring. ``curves``: accuracy by checkpoint per arm (strategy, step,
    value; step 0 the base model); ``arms``: each arm's gain interval (strategy, ci_low, gain_pp);
    ``scores`` and ``boot`` (both or neither): the per-prompt scores and the study's test-prompt
    resamples, for the interval (:func:`match_interval`)."""
    out = {"lower_tier_arm": lower, "all_arm": all_arm, "step": None, "frac_of_steps": None, "ci95": None,
           "p_never": None, "interval_over": None, "lower_final_step": None, "all_final_step": None,
           "target_acc": None, "resolution_frac": None, "reason": None, "definition": DEFINITION}
    if lower is None or all_arm is None:
        out["reason"] = "the study needs an arm with policy `tiers` and one with policy `all`, each with complete runs"
        return out
    ref = curves[curves["strategy"] == all_arm]
    final = ref.loc[ref["step"].idxmax()]
    target, final_step = float(final["value"]), int(final["step"])
    out.update(target_acc=_round(target), resolution_frac=_round(save_steps / final_step), all_final_step=final_step,
               lower_final_step=int(curves.loc[curves["strategy"] == lower, "step"].max()))
    if scores is not None:
        out.update(match_interval(scores, boot, lower, all_arm, final_step))
    gain = arms.set_index("strategy").loc[all_arm]
    if not gain["ci_low"] > 0:
        out["reason"] = (f"the all-tier arm {all_arm!r} gained {gain['gain_pp']:+.1f} points over the base model, "
                         f"95% interval [{gain['ci_low']:+.1f}, {gain['ci_high']:+.1f}], which does not exclude 0: "
                         "there is no accuracy gain to match")
        return out
    mine = curves[(curves["strategy"] == lower) & (curves["step"] > 0)].sort_values("step")
    reached = mine[mine["value"] >= target - 1e-12]
    if reached.empty:
        out["reason"] = (f"the lower-tier arm {lower!r} never reaches the all-tier arm's final accuracy "
                         f"{target:.4f} (its best checkpoint: {mine['value'].max():.4f})")
        return out
    step = int(reached["step"].iloc[0])
    out.update(step=step, frac_of_steps=_round(step / final_step))
    return out


def describe(match: dict) -> str:
    """steps_to_match in words, with its interval (an end where the resample never crosses:
    "not reached")."""
    def pct(v):
        return "not reached" if v is None else f"{v:.0%}"

    ci = match["ci95"]
    ci_text = "" if ci is None else (f", 95% interval over {match['interval_over']} [{pct(ci[0])}, {pct(ci[1])}]; "
                                     f"the lower-tier arm never reaches the target in {match['p_never']:.0%} of resamples")
    if match["reason"] is not None:
        return f"not reported: {match['reason']}{ci_text}"
    return (f"{match['frac_of_steps']:.0%} of the all-tier arm's steps (step {match['step']} of "
            f"{match['all_final_step']}; the lower-tier arm trained {match['lower_final_step']}){ci_text}")


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
                           if all_arm else cfg.train.save_steps, study.scores, study.boot)
    tiers = tier_rows(study.tiers, study.evals, metric)
    transfer = transfer_rows(cfg, study.set_evals, metric)
    study.write_table("table_tiers_000", f"Accuracy per tier ({metric}, held-out test set): the base model and each "
                      "arm's final checkpoint (paper 000: gains plateau on the hardest tiers)", tiers.round(4))
    study.write_table("steps_to_match", "Steps the lower-tier arm needs to match the all-tier arm (paper 000: about 45%)",
                      pd.DataFrame([{k: v for k, v in match.items() if k not in ("definition", "interval_over")}]),
                      note=f"Definition: {DEFINITION}. Ours: {describe(match)}.")
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
