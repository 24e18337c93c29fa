"""Paper 002 (EPRLI): a difficulty-level curriculum with dynamic sampling and a length reward,
against single-level GRPO on the same prompts and dynamic sampling alone, at one budget of
generated completions.

Which arms are compared is read from their definitions (those selecting ``levels``: ``eprli``,
``eprli_grpo``, ``eprli_dynamic``), not their names.

Section ``"002"`` of summary.json::

    {"metric": ..., "budget": {"max_completions", "how"},
     "arms": {run_id: {"strategy", "seed", "acc", "base_acc", "gain_pp", "steps",
                       "completions_generated",          # dropped groups included
                       "learnable_generated_pct",        # before dynamic sampling's filter
                       "learnable_kept_pct",             # after it (the groups trained on)
                       "levels": [...] or null}},        # eprli: each level's records, with
                                                         # acc_at_end (null when not evaluated)
     "reported": [...]}                                  # the paper's numbers: another model and
                                                         # other test sets, context only
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diffgrpo.store import layout
from diffgrpo.store.artifacts import read_json, read_parquet
from diffgrpo.analysis.tables import markdown
from diffgrpo.analysis.uncertainty import _round

#: the report's markdown tables and figures in the report folder (the notebook shows them)
TABLES = ("table_eprli", "table_eprli_levels")
FIGURES = ()


def write(study) -> dict:
    cfg, runs = study.cfg, study.runs
    root = layout.study_dir(cfg)
    eprli_arms = [a.name for a in cfg.arms if a.select == "levels"]
    arms = {}
    for r in runs[runs["strategy"].isin(eprli_arms)].to_dict("records"):
        rid = layout.run_id(r["strategy"], r["seed"])
        manifest = read_json(layout.runs_dir(root) / rid / layout.MANIFEST)
        groups = read_parquet(layout.runs_dir(root) / rid / layout.GROUPS, "03_train")
        kept = groups[groups["kept"]]
        evals = read_parquet(layout.eval_dir(cfg, rid) / layout.EVAL_SUMMARY, "04_evaluate").set_index("step")[study.metric]
        levels = [{**lv, "acc_at_end": _round(evals.get(lv["last_step"], np.nan))} for lv in manifest.get("levels") or []]
        arms[rid] = {
            "strategy": r["strategy"], "seed": int(r["seed"]), "acc": _round(r["final_acc"]),
            "base_acc": _round(r["base_acc"]), "gain_pp": _round(r["gain_pp"]), "steps": int(r["steps"]),
            "completions_generated": int(groups["rewards"].map(len).sum()),
            "learnable_generated_pct": _round(100.0 * groups["learnable"].mean()),
            "learnable_kept_pct": _round(100.0 * kept["learnable"].mean()) if len(kept) else None,
            "levels": levels or None,
        }
    rows = pd.DataFrame([{"run": rid, **{k: v for k, v in a.items() if k not in ("levels", "seed")}}
                         for rid, a in arms.items()])
    level_rows = pd.DataFrame([{"run": rid, **lv} for rid, a in arms.items() for lv in a["levels"] or []])
    how = ("each arm stops at the first update whose generated completions (dropped groups included) reach "
           "train.max_completions; EPRLI's levels each get their steps' share")
    rep = study.rep[study.rep["paper"] == "002"]
    cols = ["dataset", "model", "strategy", "metric", "value", "source"]
    study.write_table("table_eprli", f"Paper 002: EPRLI vs single-level GRPO vs dynamic sampling alone "
                      f"({study.metric})", rows,
                      note=f"Budget: {cfg.train.max_completions} generated completions per arm; {how}.\n\n"
                           "## Reported by paper 002 (a 1.5B model, math benchmarks: context, not a comparison)"
                           f"\n\n{markdown(rep[cols]) if len(rep) else '(none)'}")
    study.write_table("table_eprli_levels", "Paper 002: the EPRLI arm's levels", level_rows)
    return {
        "metric": study.metric,
        "budget": {"max_completions": cfg.train.max_completions, "how": how},
        "arms": arms,
        "reported": rep[cols].to_dict("records"),
    }
