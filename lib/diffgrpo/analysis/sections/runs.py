"""The runs: one row per complete (arm, seed) run, and what the report covers.

Writes ``runs.csv`` / ``runs.md`` (base and final accuracy at ``analyze.metric``, gain in points,
learnable % observed and predicted, steps). Its part of ``summary.json``::

    {"metric": analyze.metric, "runs": [one row per run, as runs.csv without verifier_mixed_pct],
     "skipped": [planned runs not complete, left out], "eval_sets": [the evaluation sets scored],
     "trajectories": {"count": distinct training trajectories, "nested": [[arms whose runs are, seed by
                      seed, one trajectory stopped at different budgets]]}}

Runs that share a trajectory (:func:`diffgrpo.store.layout.trajectory_id`: one is the other's
prefix) are not independent: ``runs.md`` says how many trajectories the runs are, and which arms
are nested.
"""

from __future__ import annotations

from diffgrpo.analysis.tables import DIGITS, markdown
from diffgrpo.store.artifacts import write_csv, write_text

TABLES = ("runs",)
FIGURES = ()


def trajectories_note(study) -> tuple[str, dict]:
    """The line under the runs table and summary.json's ``trajectories``."""
    count, nested = len(set(study.trajectories.values())), study.nested_arms()
    note = f"{len(study.runs)} runs, {count} training trajectories"
    if nested:
        note += ("; nested (one trajectory per seed, stopped at different budgets, so not independent runs): "
                 + "; ".join(" = ".join(g) for g in nested))
    return note + ".", {"count": count, "nested": nested}


def write(study) -> dict:
    runs = study.runs.round(DIGITS)
    note, trajectories = trajectories_note(study)
    write_csv(study.out / "runs.csv", runs)
    write_text(study.out / "runs.md", f"# Runs ({study.metric}; gain in points)\n\n{markdown(runs)}\n{note}\n")
    return {"metric": study.metric, "runs": runs.drop(columns=["verifier_mixed_pct"]).to_dict("records"),
            "skipped": study.skipped, "eval_sets": study.cfg.eval_set_names(), "trajectories": trajectories}
