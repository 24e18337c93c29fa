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
     "benchmarks": [{"benchmark", "eval_set", "arm", "accuracy_pct", "ci95", "n_prompts"}],
                                                         # the paper's benchmarks that are evaluation
                                                         # sets of this study: pass@1 of the base model
                                                         # and each arm's final checkpoint
     "reported": [...]}                                  # the paper's numbers: another model and
                                                         # other test sets, context only

Which task scores which of the paper's benchmarks: :data:`BENCHMARKS` (docs/tasks.md, "Paper 002's
benchmarks"). ``table_benchmarks`` puts our pass@1 on each beside the paper's number.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diffgrpo.store import layout
from diffgrpo.store.artifacts import read_json, read_parquet, write_text
from diffgrpo.analysis.papers.paper003 import pass_k_rows
from diffgrpo.analysis.tables import DIGITS, beside, markdown
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.stats.intervals import prompt_bound

#: the report's markdown tables and figures in the report folder (the notebook shows them)
TABLES = ("table_eprli", "table_eprli_levels", "table_benchmarks")
FIGURES = ()

#: our task -> the benchmark of paper 002 it scores, as lib/diffgrpo/reported/paper_002.csv names it
BENCHMARKS = {"aime2024": "aime24", "math500": "math500", "amc23": "amc", "minerva_math": "minerva",
              "olympiadbench": "olympiadbench"}
METRIC = "accuracy_pct"  # the paper's: accuracy in percent


def benchmark_rows(set_evals: pd.DataFrame, set_tasks: dict[str, str], model: str) -> pd.DataFrame:
    """Our side of the paper's results: on each evaluation set whose task scores one of 002's
    benchmarks, pass@1 in percent (the mean over samples at the evaluation's temperature, what
    reasoning-model papers report as accuracy) of the base model and of each arm's final
    checkpoint, mean over seeds, in the long format with a 95% bound over the set's prompts."""
    rows = pass_k_rows(set_evals)
    rows = rows[(rows["k"] == 1) & rows["eval_set"].map(lambda s: set_tasks.get(s) in BENCHMARKS)]
    n_prompts = set_evals.groupby("eval_set")["n_prompts"].max()
    out = []
    for r in rows.to_dict("records"):
        lo, hi = prompt_bound(r["pass_at_k"], int(n_prompts[r["eval_set"]]))
        out.append({"dataset": BENCHMARKS[set_tasks[r["eval_set"]]], "model": model, "metric": METRIC,
                    "strategy": r["arm"], "value": 100.0 * r["pass_at_k"], "sd": float("nan"), "n": r["n"],
                    "ci_low": 100.0 * lo, "ci_high": 100.0 * hi, "eval_set": r["eval_set"],
                    "n_prompts": int(n_prompts[r["eval_set"]])})
    return pd.DataFrame(out, columns=["dataset", "model", "metric", "strategy", "value", "sd", "n", "ci_low",
                                      "ci_high", "eval_set", "n_prompts"])


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
    ours = benchmark_rows(study.set_evals, {s: cfg.for_eval_set(s).dataset.task for s in cfg.eval_set_names()},
                          study.label["model"])
    _write_benchmarks(study, ours, rep)
    return {
        "metric": study.metric,
        "budget": {"max_completions": cfg.train.max_completions, "how": how},
        "arms": arms,
        "benchmarks": [{"benchmark": r["dataset"], "eval_set": r["eval_set"], "arm": r["strategy"],
                        "accuracy_pct": round(r["value"], DIGITS), "ci95": [round(r["ci_low"], DIGITS),
                                                                            round(r["ci_high"], DIGITS)],
                        "n_prompts": r["n_prompts"]} for r in ours.to_dict("records")],
        "reported": rep[cols].to_dict("records"),
    }


def _write_benchmarks(study, ours: pd.DataFrame, rep: pd.DataFrame) -> None:
    """``table_benchmarks``: our pass@1 on each of the paper's benchmarks beside its number."""
    scored = sorted(set(ours["eval_set"]))
    missing = sorted(set(BENCHMARKS.values()) - set(ours["dataset"]))
    study.write_long("table_benchmarks", "Paper 002's benchmarks: pass@1 (percent) of the base model and each arm's "
                     "final checkpoint (ours: mean over seeds [95% bound over the set's prompts]) beside the "
                     "paper's accuracy (EPRLI on its own 1.5B model: context, not a comparison)",
                     beside(ours, rep.replace({"strategy": {"curriculum": "eprli"}}), [METRIC]))
    note = (f"\nOurs: evaluation sets {scored}. Here [a, b] is Wilson's interval over the N prompts of the set, "
            "from the mean alone (a bound: it takes the variance of 0/1 scores, and a prompt's pass@1 lies in "
            "[0, 1]); the seeds' spread is not in it. The paper's EPRLI (its curriculum) is in our `eprli` column. "
            + (f"Not an evaluation set of this study: {missing} (docs/tasks.md says which task scores each)."
               if missing else "Every benchmark the paper reports is scored.") + "\n")
    path = study.out / "table_benchmarks.md"
    write_text(path, path.read_text() + note)
