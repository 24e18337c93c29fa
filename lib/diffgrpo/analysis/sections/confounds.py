"""Length and format over training: per arm (mean over seeds), the completion length and the
share of completions truncated at max_completion_length that TRL logged (``steps.parquet``), over
the first and last ``FIRST_STEPS_FRAC`` of the steps and the whole run: whether an arm's gain may
come with a length change rather than with reasoning.

Writes ``confounds.csv`` / ``confounds.md`` and, where a run logged completion lengths,
``fig_length.png``. Its part of ``summary.json``::

    {"confounds": {arm: {"mean_length_first", "mean_length_last", "mean_length_run",
                         "truncated_first", ..., "mean_terminated_length_run" (those logged)}}}
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from diffgrpo.analysis import figures
from diffgrpo.analysis.tables import DIGITS, FIRST_STEPS_FRAC, _sorted, markdown
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.store import layout
from diffgrpo.store.artifacts import read_parquet, save_figure, write_csv, write_text

TABLES = ("confounds",)
FIGURES = ("fig_length",)

#: steps.parquet columns of the length / format view (TRL's logged generation metrics)
CONFOUND_METRICS = {"completions/mean_length": "mean_length", "completions/clipped_ratio": "truncated",
                    "completions/mean_terminated_length": "mean_terminated_length"}


def confound_steps(study_dir: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run and step, the completion length and truncation rate TRL logged (steps.parquet).
    Runs without those columns (or without steps.parquet) are left out."""
    frames = []
    for arm, seed in zip(runs["strategy"], runs["seed"]):
        path = layout.runs_dir(study_dir) / layout.run_id(arm, seed) / layout.STEPS
        if not path.exists():
            continue
        steps = read_parquet(path, "03_train")
        have = [c for c in CONFOUND_METRICS if c in steps]
        if "completions/mean_length" not in have:
            continue
        frames.append(steps[["step", *have]].rename(columns=CONFOUND_METRICS).assign(strategy=arm, seed=int(seed)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["strategy", "seed", "step"])


def confound_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per arm (mean over seeds): completion length and truncation rate over the first and last
    ``FIRST_STEPS_FRAC`` of the steps and the whole run."""
    if steps.empty:
        return pd.DataFrame(columns=["strategy", "n_seeds"])
    rows = []
    for (arm, seed), g in steps.groupby(["strategy", "seed"], sort=False):
        cut = max(1, int(np.ceil(FIRST_STEPS_FRAC * g["step"].max())))
        first, last = g[g["step"] <= cut], g[g["step"] > g["step"].max() - cut]
        row = {"strategy": arm, "seed": seed}
        for col in [c for c in CONFOUND_METRICS.values() if c in g]:
            row |= {f"{col}_first": first[col].mean(), f"{col}_last": last[col].mean(), f"{col}_run": g[col].mean()}
        rows.append(row)
    per_run = pd.DataFrame(rows)
    out = per_run.drop(columns="seed").groupby("strategy", sort=False).mean()
    out.insert(0, "n_seeds", per_run.groupby("strategy", sort=False).size())
    return _sorted(out.reset_index())


def write(study) -> dict:
    steps = confound_steps(layout.study_dir(study.cfg), study.runs)
    confounds = confound_table(steps)
    write_csv(study.out / "confounds.csv", confounds.round(DIGITS))
    write_text(study.out / "confounds.md", "# Length and format over training: completion length (tokens) and the "
               f"share of completions truncated at max_completion_length, first and last {FIRST_STEPS_FRAC:.0%} of the "
               "steps and the whole run, mean over seeds (TRL's logged metrics, steps.parquet). The answer-format rate "
               "is not recorded during training (groups.parquet keeps the scores, not the completions).\n\n"
               + (markdown(confounds.round(DIGITS)) if len(confounds) else "(no run logged completion lengths)\n"))
    if not steps.empty:
        save_figure(figures.plot_confounds(steps), study.out / "fig_length.png")
    return {"confounds": {r["strategy"]: {k: _round(v) for k, v in r.items() if k not in ("strategy", "n_seeds")}
                          for r in confounds.to_dict("records")}}
