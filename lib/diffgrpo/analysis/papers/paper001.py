"""Blog 001 (a summary of paper 003): train on the prompts the base model got wrong in a
one-sample probe ("base-wrong") vs those it got right ("base-right"), each cut to the other's
size, vs the whole pool ("all"). The blog reports base-wrong 14.3% better than size-matched
base-right (relative), and base-wrong 85% vs all 82% average accuracy, and calls the
one-sample probe "a much cheaper filter".

"Cheaper" as a number: each arm's gain per 1,000 total rollouts, from the compute ledger
(:mod:`diffgrpo.analysis.sections.compute`: training completions generated plus the probe
charged, :data:`diffgrpo.train.ledger.PROBE_CHARGE`), with its 95% interval (the gain's, divided
by the arm's mean total rollouts, taken as fixed: a run's total is set by its steps or its
completion budget, not by chance). The base-wrong and base-right arms are charged the greedy
one-sample pass alone (one completion a pool prompt), which is all their policies read; an arm
whose policy reads p_hat is charged the K-sample probe as well.

Which arms are compared is read from their policies, not their names: the base-wrong arm is
the one with policy ``base_wrong_matched`` (else ``base_wrong``), base-right likewise, all the
one with policy ``all``; the size-matched pair is preferred, as the blog compares at equal size.

Section ``"001"`` of summary.json::

    {"arms": {name: {"acc", "gain_pp", "n_train"}},       # acc: final accuracy (fraction, analyze.metric),
                                                           # mean over seeds; n_train: prompts trained on
     "rel_improvement_wrong_vs_right_pct": ...,            # 100 * (acc_wrong - acc_right) / acc_right
     "wrong_arm", "right_arm", "all_arm",
     "contrasts": [...],                                    # the paired gain differences among them, with
                                                           # 95% intervals, Holm-adjusted p within its
                                                           # family and the decision (diffgrpo.analysis.uncertainty)
     "seed_variance": whether the intervals include it (not with one seed),
     "reason": null or why the relative improvement is not given,
     "cost": {"arms": {name: {"total_rollouts", "gain_pp", "gain_per_1k_rollouts", "ci95"}},  # nulls: no ledger
              "probe_charge", "words", "reason": null or why no arm has a cost}}
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diffgrpo.analysis.papers import arm_selecting
from diffgrpo.analysis.sections.compute import arm_rollouts
from diffgrpo.store import layout
from diffgrpo.analysis.tables import DIGITS, beside, summarize
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.train.ledger import PROBE_CHARGE

PAIRS = (("base_wrong_matched", "base_right_matched"), ("base_wrong", "base_right"))


#: the report's markdown tables and figures in the report folder (the notebook shows them)
TABLES = ("table_accuracy", "table_cost")
FIGURES = ()


def cost(study, order: list[str]) -> dict:
    """Per arm (``order`` first): gain per 1,000 total rollouts with its 95% interval, from the
    ledger; writes ``table_cost``. An arm whose runs predate the ledger has nulls."""
    arms = arm_rollouts(study).set_index("strategy")
    arms = arms.loc[[a for a in order if a in arms.index] + [a for a in arms.index if a not in order]]
    per = 1000.0 / arms["total_rollouts"]
    table = arms.assign(gain_per_1k_rollouts=arms["gain_pp"] * per, ci_low_per_1k=arms["ci_low"] * per,
                        ci_high_per_1k=arms["ci_high"] * per).reset_index()
    known = table.dropna(subset=["total_rollouts"])
    words = "; ".join(f"{r['strategy']} {r['gain_per_1k_rollouts']:+.2f} [{r['ci_low_per_1k']:+.2f}, "
                      f"{r['ci_high_per_1k']:+.2f}] points per 1,000 rollouts ({r['total_rollouts']:,.0f} rollouts)"
                      for r in known.to_dict("records"))
    reason = None if len(known) else "no run of the study has a compute ledger (trained before it existed)"
    study.write_table("table_cost", f"Gain per 1,000 total rollouts (blog 001's \"cheaper filter\" as a number): "
                      f"points of {study.metric} gained over the base model per 1,000 rollouts, training completions "
                      f"generated plus the probe charged {PROBE_CHARGE}; 95% interval: the gain's over {study.over}, "
                      "the rollouts taken as fixed",
                      table[["strategy", "total_rollouts", "gain_pp", "ci_low", "ci_high", "gain_per_1k_rollouts",
                             "ci_low_per_1k", "ci_high_per_1k"]].round(DIGITS), reason or words + ".")
    return {"arms": {r["strategy"]: {"total_rollouts": _round(r["total_rollouts"]), "gain_pp": _round(r["gain_pp"]),
                                     "gain_per_1k_rollouts": _round(r["gain_per_1k_rollouts"]),
                                     "ci95": [_round(r["ci_low_per_1k"]), _round(r["ci_high_per_1k"])]}
                     for r in table.to_dict("records")},
            "probe_charge": PROBE_CHARGE, "words": words or None, "reason": reason}


def write(study) -> dict:
    cfg, runs = study.cfg, study.runs
    ran = set(runs["strategy"])
    n_train = pd.DataFrame([{"strategy": m["strategy"], "n": m["num_prompts"]} for m in study.manifests])
    n_train = n_train.groupby("strategy")["n"].mean()
    per_arm = runs.groupby("strategy", sort=False).agg(acc=("final_acc", "mean"), gain_pp=("gain_pp", "mean"))
    arms = {a: {"acc": _round(r["acc"]), "gain_pp": _round(r["gain_pp"]), "n_train": int(round(n_train[a]))}
            for a, r in per_arm.iterrows()}

    wrong = right = None
    for w, r in PAIRS:
        wrong, right = arm_selecting(cfg, w, ran), arm_selecting(cfg, r, ran)
        if wrong and right:
            break
    all_arm = arm_selecting(cfg, "all", ran)
    rel, reason = None, None
    if not (wrong and right):
        reason = (f"the study has no base-wrong / base-right pair of arms with complete runs (policies "
                  f"{[p for pair in PAIRS for p in pair]}); its arms: {sorted(ran)}")
    elif per_arm.loc[right, "acc"] == 0:
        reason = f"the base-right arm {right!r} scores 0: a relative improvement over 0 is undefined"
    else:
        rel = 100.0 * (per_arm.loc[wrong, "acc"] - per_arm.loc[right, "acc"]) / per_arm.loc[right, "acc"]
    among = {a for a in (wrong, right, all_arm) if a}
    pairs = study.pairs[study.pairs["a"].isin(among) & study.pairs["b"].isin(among)]

    acc = summarize(runs.assign(acc=100.0 * runs["final_acc"]), "acc", "accuracy_pct")
    base = runs.iloc[[0]].assign(strategy=layout.BASE_RUN, acc=100.0 * runs["base_acc"].iloc[0])
    long = pd.concat([summarize(base, "acc", "accuracy_pct"), acc], ignore_index=True)
    if rel is not None:
        long = pd.concat([long, pd.DataFrame([{**long.iloc[0].to_dict(), "strategy": wrong, "value": rel, "sd": np.nan,
                                               "n": np.nan, "metric": "rel_gain_vs_base_right_pct"}])], ignore_index=True)
    study.write_long("table_accuracy", f"Final accuracy (percent, {study.metric}): base-wrong vs base-right vs all "
                     "(blog 001); rel_gain_vs_base_right_pct = 100 (acc_wrong - acc_right) / acc_right",
                     beside(long, study.rep, ["accuracy_pct", "rel_gain_vs_base_right_pct"]))
    return {
        "arms": arms,
        "rel_improvement_wrong_vs_right_pct": _round(rel) if rel is not None else None,
        "wrong_arm": wrong, "right_arm": right, "all_arm": all_arm,
        "contrasts": [{"a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]),
                       "ci95": [_round(r["ci_low"]), _round(r["ci_high"])], "p_holm": _round(r["p_holm"]),
                       "family": r["family"], "decision": r["decision"], "n_seeds": int(r["n_seeds"])}
                      for r in pairs.to_dict("records")],
        "seed_variance": ("included (a t with seeds - 1 degrees of freedom)" if len(pairs) and pairs["n_seeds"].min() > 1
                          else "not included: one seed, so the intervals and p cover the test prompts only"),
        "reason": reason,
        "cost": cost(study, [a for a in (wrong, right, all_arm) if a]),
    }
