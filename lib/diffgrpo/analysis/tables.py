"""The long format every "ours beside theirs" table shares, and its markdown.

Our numbers and the papers' share one long format (source, dataset, model, strategy, metric,
value, sd, n); a wide table puts a row per source x dataset x model x metric and a column per
arm (``strategy`` holds the arm's name), the paper's own layout. Markdown comes from pandas'
``DataFrame.to_markdown`` (tabulate).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from diffgrpo.store import layout

#: 003's column order; other arms follow alphabetically, the base model comes first
ARM_ORDER = ("easy", "middle", "hard", "random")



METRIC_NAMES = {"greedy_acc": "greedy accuracy", "pass@1": "pass@1"}



#: columns of every "ours beside theirs" table. ``strategy`` holds the arm's name: the column keeps
#: its historical name in every table, parquet file and summary.json the stages write (renaming it
#: would change every file a study has written), while the code that reads it says "arm"
LONG_COLUMNS = ["source", "dataset", "model", "metric", "strategy", "value", "sd", "n"]



FIRST_STEPS_FRAC = 0.1  # "first steps" of the learnability figure: the first 10% of a run's steps (at least 1)

DIGITS = 4  # rounding of everything written, so notebook outputs compare exactly



def arm_order(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    head = [s for s in (layout.BASE_RUN, *ARM_ORDER) if s in names]
    return head + sorted(set(names) - set(head))



def _sorted(df: pd.DataFrame, *then: str) -> pd.DataFrame:
    rank = {s: i for i, s in enumerate(arm_order(df["strategy"]))}
    key = lambda col: col.map(rank) if col.name == "strategy" else col  # noqa: E731
    return df.sort_values(["strategy", *then], key=key, kind="stable").reset_index(drop=True)



def _mean_sd(df: pd.DataFrame, by: list[str], column: str) -> pd.DataFrame:
    """Mean over seeds, with the spread (sd) only where there are 2+ seeds."""
    return df.groupby(by, sort=False)[column].agg(value="mean", sd="std", n="count").reset_index()



def summarize(runs: pd.DataFrame, column: str, metric: str | None = None) -> pd.DataFrame:
    """A per-run column as the long format: mean +- sd over seeds per dataset x model x arm."""
    return _mean_sd(runs, ["dataset", "model", "strategy"], column).assign(metric=metric or column)



def accuracy_curves(evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Figure 2's data: mean accuracy over seeds per arm and checkpoint, every line
    starting from the base model at step 0."""
    trained = evals[(evals["run_id"] != layout.BASE_RUN) & (evals["step"] > 0)]
    starts = trained.drop_duplicates("run_id").assign(step=0, **{metric: base_accuracy(evals, metric)})
    curves = _mean_sd(pd.concat([starts, trained]), ["strategy", "step"], metric)
    return _sorted(curves, "step")



def tier_accuracy(tiers: pd.DataFrame, evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Accuracy per difficulty tier of the base model and of each arm's final checkpoint
    (mean over seeds): where along the difficulty axis an arm's gain comes from."""
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    final = pd.concat([base, final_checkpoints(evals)])[["run_id", "strategy", "step"]]
    per_tier = tiers.drop(columns="strategy", errors="ignore").merge(final, on=["run_id", "step"])
    return _sorted(_mean_sd(per_tier, ["strategy", "tier"], metric), "tier")



def final_checkpoints(evals: pd.DataFrame) -> pd.DataFrame:
    """Each trained run's last evaluated checkpoint (one row per run)."""
    trained = evals[(evals["run_id"] != layout.BASE_RUN) & (evals["step"] > 0)]
    return trained.loc[trained.groupby("run_id")["step"].idxmax()].reset_index(drop=True)



def base_accuracy(evals: pd.DataFrame, metric: str) -> float:
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    if base.empty:
        raise ValueError(f"eval/{layout.BASE_RUN}/summary.parquet has no step-0 row for the base model")
    if metric not in base.columns:
        raise KeyError(f"eval summaries have no {metric!r} column (columns: {sorted(base.columns)})")
    return float(base[metric].iloc[0])



def beside(ours: pd.DataFrame, rep: pd.DataFrame, metrics: Iterable[str]) -> pd.DataFrame:
    """Our rows (source "ours") above the papers' rows for the same metrics."""
    metrics = list(metrics)
    columns = LONG_COLUMNS + [c for c in ("ci_low", "ci_high") if c in ours]  # intervals: ours only
    theirs = rep[rep["metric"].isin(metrics)].assign(source=lambda d: d["paper"] + " " + d["table"], sd=np.nan, n=np.nan)
    theirs = theirs.assign(**{c: np.nan for c in columns[len(LONG_COLUMNS):]})
    frames = [df[columns] for df in (ours.assign(source="ours"), theirs) if not df.empty]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True).round(DIGITS)



def markdown(df: pd.DataFrame) -> str:
    """A pipe table (pandas' own, through tabulate): floats to 4 significant digits, NaN blank."""
    cells = df.astype(object).where(df.notna(), None)
    return cells.to_markdown(index=False, floatfmt=".4g", missingval="") + "\n"


def wide_markdown(long: pd.DataFrame) -> str:
    """A long table in the paper's layout: a row per source x dataset x model x metric, a column
    per arm, cells "mean [95% interval]" where the table has intervals, else "mean ± sd"
    where seeds vary, with a line under the table that says what each is (the ± is the sd of
    the per-seed values, a spread, not an interval)."""
    if long.empty:
        return "(no rows)\n"
    lo, hi = (long[c].astype(float) if c in long else pd.Series(np.nan, index=long.index) for c in ("ci_low", "ci_high"))
    cells = [f"{v:.2f}" + (f" [{a:.2f}, {b:.2f}]" if np.isfinite(a) else "" if np.isnan(sd) else f" ± {sd:.2f}")
             for v, sd, a, b in zip(long["value"], long["sd"].astype(float), lo, hi)]
    wide = long.assign(cell=cells).pivot_table(
        index=["source", "dataset", "model", "metric"], columns="strategy", values="cell", aggfunc="first", sort=False)
    legend = [text for mark, text in (
        (" [", "[a, b]: the 95% interval (test prompts and seeds)"),
        (" ± ", "± : the standard deviation over seeds (the spread of the per-seed values, not an interval)"))
        if any(mark in c for c in cells)]
    table = markdown(wide[arm_order(long["strategy"])].reset_index().fillna(""))
    return table + (f"\n{'; '.join(legend)}.\n" if legend else "")


def method_of(arm: str) -> str:
    """An arm ``<method>.<label>``'s method (``hard.b960`` -> ``hard``); an arm without a label is its own."""
    return arm.split(".")[0]
