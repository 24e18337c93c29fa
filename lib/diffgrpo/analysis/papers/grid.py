"""A report over several studies: 003's Table 1 as a grid of models x datasets, and 000's
cross-dataset transfer (a model trained on one dataset against one trained on another, on the
same evaluation set).

A study holds one model and one training dataset; ``analyze.compare`` names other studies
(params files, by name or path) whose reports this study's analysis draws beside its own (the
study itself, when the list names it, is skipped: a base file can hold one list for all). It
reads only their ``report/summary.json``, so run (or rerun) each study first; a study whose
report is missing is listed as not run, with the command that runs it, never left out silently.
When each report was written is in the table, since a report is as current as its last run.

Section ``"grid"`` of summary.json::

    {"studies": [{"study", "params_file", "model", "dataset", "status", "report_written"}],
     "gains": [{"study", "model", "dataset", "arm", "base_acc", "gain_pp", "ci95", "n_seeds"}],
     "transfer": [{"study", "model", "train_dataset", "arm", "eval_set", "acc"}]}

``transfer`` collects every study's paper-000 transfer rows (its arms' final checkpoints on
its evaluation sets besides ``test``), so two studies that score the same set (000: GSM8K- and
MATH-trained models on MATH's numeric subset) are compared in one table.
"""

from __future__ import annotations

import datetime as dt
import json

import pandas as pd

from diffgrpo.store import layout
from diffgrpo import params
from diffgrpo.store.artifacts import save_figure
from diffgrpo.params import Config

TABLES = ("grid_003", "grid_transfer_000")
FIGURES = ("fig_grid_003",)


def _study_rows(cfg: Config, own: dict) -> list[tuple[str, Config, dict | None, str | None]]:
    """(params file, config, summary or None, when its report was written) of this study, then
    of every study ``analyze.compare`` names."""
    out = [(cfg.study, cfg, own, "this run")]
    for entry in cfg.analyze.compare:
        other = params.load(entry)
        if other.study == cfg.study:
            continue  # a list shared by several studies (in a base file) names each of them
        path = layout.report_dir(other) / layout.REPORT_SUMMARY
        if path.exists():
            written = dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M")
            out.append((entry, other, json.loads(path.read_text()), written))
        else:
            out.append((entry, other, None, None))
    return out


def collect(cfg: Config, own: dict) -> dict:
    """The grid's three tables as lists of rows (see the module's docstring)."""
    studies, gains, transfer = [], [], []
    for entry, c, summary, written in _study_rows(cfg, own):
        model, dataset = c.model.name, c.dataset.task
        status = "ok" if summary is not None else f"not run: make study STUDY={entry}"
        studies.append({"study": c.study, "params_file": entry, "model": model, "dataset": dataset,
                        "status": status, "report_written": written})
        if summary is None:
            continue
        base = summary["runs"][0]["base_acc"] if summary.get("runs") else None
        for arm, a in summary.get("arms", {}).items():
            gains.append({"study": c.study, "model": model, "dataset": dataset, "arm": arm, "base_acc": base,
                          "gain_pp": a["gain_pp"], "ci95": a["ci95"], "n_seeds": a["n_seeds"]})
        for r in (summary.get("000") or {}).get("transfer", []):
            transfer.append({"study": c.study, "model": model, "train_dataset": dataset, "arm": r["arm"],
                             "eval_set": r["eval_set"], "acc": r["acc"]})
    return {"studies": studies, "gains": gains, "transfer": transfer}


def _cell(row: pd.Series) -> str:
    lo, hi = row["ci95"]
    return f"{row['gain_pp']:+.1f} [{lo:+.1f}, {hi:+.1f}]" if lo is not None else f"{row['gain_pp']:+.1f}"


def gain_table(gains: pd.DataFrame, studies: pd.DataFrame) -> pd.DataFrame:
    """One row per study (model, dataset), one column per arm: gain in points [95% interval]."""
    arms = list(dict.fromkeys(gains["arm"])) if len(gains) else []
    wide = (gains.assign(cell=gains.apply(_cell, axis=1)).pivot(index="study", columns="arm", values="cell")
            if len(gains) else pd.DataFrame())
    base = gains.groupby("study")["base_acc"].first() if len(gains) else pd.Series(dtype=float)
    rows = []
    for s in studies.to_dict("records"):
        row = {"model": s["model"], "dataset": s["dataset"], "study": s["study"],
               "base acc": base.get(s["study"])}
        row.update({a: (wide.loc[s["study"], a] if s["study"] in wide.index and pd.notna(wide.loc[s["study"], a])
                        else ("" if s["status"] == "ok" else "-")) for a in arms})
        row["report"] = s["report_written"] or s["status"]
        rows.append(row)
    return pd.DataFrame(rows)


def plot(gains: pd.DataFrame):
    """Gain per (model / dataset) x arm, annotated with its interval."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    g = gains.assign(row=gains["model"] + " / " + gains["dataset"])
    values = g.pivot(index="row", columns="arm", values="gain_pp")[list(dict.fromkeys(g["arm"]))]
    labels = g.assign(cell=g.apply(lambda r: _cell(r).replace(" [", "\n["), axis=1)).pivot(
        index="row", columns="arm", values="cell").reindex_like(values).fillna("")
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * values.shape[1], 0.8 + 0.7 * values.shape[0]))
    lim = max(1.0, float(values.abs().max().max()))
    sns.heatmap(values, annot=labels.to_numpy(), fmt="", cmap="RdBu", center=0, vmin=-lim, vmax=lim,
                cbar_kws={"label": "gain (points)"}, ax=ax, annot_kws={"fontsize": 8})
    ax.set(xlabel="arm", ylabel="model / training dataset",
           title="Gain over the base model (points, 95% interval), paper 003 Table 1's grid")
    fig.tight_layout()
    return fig


def write(study, own: dict) -> dict:
    """Write grid_003 (+ fig_grid_003.png) and grid_transfer_000 into the report folder."""
    got = collect(study.cfg, own)
    studies, gains, transfer = (pd.DataFrame(got[k]) for k in ("studies", "gains", "transfer"))
    metric = study.metric
    not_run = studies[studies["status"] != "ok"]
    note = ("" if not_run.empty else "Not run yet (no report/summary.json): "
            + "; ".join(f"{r['params_file']} (`{r['status'][len('not run: '):]}`)" for r in not_run.to_dict("records"))
            + ". Rerun this study's analyze stage afterwards.")
    study.write_table("grid_003", f"Gain over the base model ({metric}, points, 95% interval over test prompts x "
                      "seeds) per model and training dataset: paper 003's Table 1 grid over this study and "
                      "analyze.compare", gain_table(gains, studies), note=note)
    if len(gains):
        save_figure(plot(gains), study.out / "fig_grid_003.png")
    if len(transfer):
        wide = transfer.pivot_table(index=["model", "eval_set", "arm"], columns="train_dataset", values="acc",
                                    aggfunc="first", sort=False).reset_index()
        wide.columns.name = None
    else:
        wide = pd.DataFrame()
    study.write_table("grid_transfer_000", f"Transfer ({metric}, final checkpoints): every study's arms on each "
                      "evaluation set besides its test set, one column per training dataset (paper 000: GSM8K-trained "
                      "beats MATH-trained on MATH numeric by about 5 points at 1.5B, 3 at 3B)", wide,
                      note="" if len(transfer) else "No study here writes paper 000's transfer rows "
                      "(analyze.reports with \"000\" and an evaluation set in evaluate.sets).")
    return got
