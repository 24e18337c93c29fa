"""The numbers the papers report, kept as data (``diffgrpo/reported/paper_<id>.csv``, one row
each with its source and a note on how exact it is), and paper 003's Figure 3 refit from them.

003's Figure 3 states R^2 = 0.66 without listing its points. Refitting the points its Tables
1-3 report gives 0.641 over all 28, 0.670 over the 24 of Tables 1+2, and 0.659 over the 16
GSM8K points (Qwen3-4B, Qwen3-14B, Phi-4 and Llama): the figure was most likely drawn from
those. :func:`paper_regressions` recomputes all of these from the data file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from diffgrpo.analysis.tables import DIGITS, markdown
from diffgrpo.stats.lines import fit_line

DATA_DIR = Path(__file__).resolve().parents[2] / "reported"  # the papers' numbers, one CSV per paper
REPORTED_COLUMNS = ["paper", "table", "dataset", "model", "strategy", "metric", "value", "unit", "source", "note"]



def reported(papers: Iterable[str] | None = None) -> pd.DataFrame:
    """The numbers the papers report, one row each (all papers, or only ``papers``).

    Kept as data, not code, so a reader can check every value against the paper's text; the
    ``source`` and ``note`` columns say where each one comes from and how exact it is.
    """
    files = {p.stem.removeprefix("paper_"): p for p in sorted(DATA_DIR.glob("paper_*.csv"))}
    wanted = list(files) if papers is None else list(papers)
    unknown = sorted(set(wanted) - set(files))
    if unknown:
        raise ValueError(f"no reported numbers for paper(s) {unknown}; known: {sorted(files)}")
    frames = [pd.read_csv(files[p], dtype=str, keep_default_na=False) for p in wanted]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=REPORTED_COLUMNS)
    return df[REPORTED_COLUMNS].astype({"value": float})



def paper_points(rep: pd.DataFrame) -> pd.DataFrame:
    """Figure 3's points from reported numbers: (learnable %, gain) wherever a paper gives both."""
    keys = ["dataset", "model", "strategy"]
    gain = rep[rep["metric"] == "gain_pp"][keys + ["table", "value"]].rename(columns={"value": "gain_pp"})
    learn = rep[rep["metric"] == "learnable_pct"][keys + ["value"]].rename(columns={"value": "learnable_pct"})
    return gain.merge(learn, on=keys, validate="one_to_one").reset_index(drop=True)



def paper_regressions(points: pd.DataFrame) -> pd.DataFrame:
    """The paper's regression refit on several subsets of its points, since it does not say
    which points its R^2 used: all of them, Tables 1+2 only, and each dataset alone."""
    if points.empty:
        return pd.DataFrame(columns=["subset", "slope", "intercept", "r2", "n"])
    subsets = {"all reported points": points, "Tables 1+2": points[points["table"] == "Table 1"]}
    subsets |= {f"{d} only": g for d, g in points.groupby("dataset")}
    rows = [{"subset": name, **fit_line(g["learnable_pct"], g["gain_pp"], DIGITS)} for name, g in subsets.items()]
    return pd.DataFrame(rows).drop(columns="note")



def paper_regression(points: pd.DataFrame, rep: pd.DataFrame) -> dict:
    """Figure 3's fit over every reported point, its note comparing with the R^2 the paper states."""
    fit, stated = fit_line(points["learnable_pct"], points["gain_pp"], DIGITS), stated_r2(rep)
    if points.empty:
        fit["note"] = "no paper chosen, or it reports no (learnable %, gain) pairs"
    elif fit["r2"] is not None and stated is not None:
        fit["note"] = _paper_note(paper_regressions(points), stated)
    return fit



def stated_r2(rep: pd.DataFrame) -> float | None:
    """The R^2 a paper states for its Figure 3 (003: 0.66), if it states one."""
    stated = rep.loc[rep["metric"] == "r2", "value"]
    return float(stated.iloc[0]) if len(stated) else None



def _paper_note(regs: pd.DataFrame, stated: float) -> str:
    everything = regs.iloc[0]
    closest = regs.loc[(regs["r2"] - stated).abs().idxmin()]
    return (
        f"the paper states R^2 = {stated:g} without listing its points; its {everything.n} reported "
        f"(learnable %, gain) points give {everything.r2:.3f}; the closest subset is "
        f"'{closest.subset}' ({closest.n} points, R^2 = {closest.r2:.3f})"
    )



def paper_tables(rep: pd.DataFrame) -> str:
    """Every reported number, grouped by paper and table, with its source."""
    parts = ["# Numbers the papers report\n"]
    for (paper, table), g in rep.groupby(["paper", "table"], sort=False):
        parts.append(f"## {paper} {table}\n\nSource: {g['source'].iloc[0]}\n")
        parts.append(markdown(g[["dataset", "model", "strategy", "metric", "value", "unit", "note"]]))
    return "\n".join(parts)
