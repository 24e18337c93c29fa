"""The runs: one row per complete (arm, seed) run, and what the report covers.

Writes ``runs.csv`` / ``runs.md`` (base and final accuracy at ``analyze.metric``, gain in points,
learnable % observed and predicted, steps). Its part of ``summary.json``::

    {"metric": analyze.metric, "runs": [one row per run, as runs.csv without verifier_mixed_pct],
     "skipped": [planned runs not complete, left out], "eval_sets": [the evaluation sets scored]}
"""

from __future__ import annotations

from diffgrpo.analysis.tables import DIGITS, markdown
from diffgrpo.store.artifacts import write_csv, write_text

TABLES = ("runs",)
FIGURES = ()


def write(study) -> dict:
    runs = study.runs.round(DIGITS)
    write_csv(study.out / "runs.csv", runs)
    write_text(study.out / "runs.md", f"# Runs ({study.metric}; gain in points)\n\n{markdown(runs)}")
    return {"metric": study.metric, "runs": runs.drop(columns=["verifier_mixed_pct"]).to_dict("records"),
            "skipped": study.skipped, "eval_sets": study.cfg.eval_set_names()}
