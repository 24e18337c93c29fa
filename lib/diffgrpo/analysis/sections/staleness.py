"""The staleness of the probe (DARE, arXiv:2605.09188: offline difficulty estimates go stale as the
policy moves): for every run that trains on probed prompts (its arm's selection has p_hat), each
prompt's success rate in training's own groups over windows of steps, against its probe p_hat.

A run's steps are cut into :data:`WINDOWS` windows of equal steps (fewer when it ran fewer
steps). In each, a prompt's success rate is the mean of every completion's score in the
groups of that prompt in the window (``scores``, the verifier's, where the groups have them;
else ``rewards``), kept and dropped groups alike. Per window:

- ``spearman``: Spearman's rank correlation between the prompts' success rates and their p_hat
  (over the prompts of the selection trained on in the window; None where fewer than 3, or
  either side is constant), averaged over the arm's seeds;
- ``n_prompts``: the prompts of the selection trained on in the window (mean over seeds);
- ``all_correct`` / ``all_wrong``: how many of them had every completion right (wrong) in the
  window: prompts that give a zero-variance group now, whatever the probe said (mean over seeds);
- ``success`` / ``p_hat``: their mean success rate in the window and their mean probe p_hat (an
  arm whose selection holds one p_hat, a tail of a K-sample probe, has no rank to correlate:
  these two and the all-correct / all-wrong counts say how far it moved).

Writes ``staleness.md`` / ``staleness.csv`` and ``fig_staleness.png`` (rank correlation by
window, one line per arm; the share of the selection all-correct or all-wrong). Its part of
``summary.json``::

    {"staleness": {arm: [{"window", "steps", "spearman", "n_prompts", "all_correct", "all_wrong", "success",
                                "p_hat"}]}}

``{"staleness": None}`` and no file when no arm trains on probed prompts.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from diffgrpo.analysis.figures import _colors
from diffgrpo.analysis.tables import DIGITS, arm_order
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.store import artifacts, layout

TABLES = ("staleness",)
FIGURES = ("fig_staleness",)
WINDOWS = 4  # windows of equal steps a run is cut into


def windows(last_step: int, n: int = WINDOWS) -> list[np.ndarray]:
    """Steps 1..last_step in ``n`` windows of (as near as can be) equal steps."""
    return [w for w in np.array_split(np.arange(1, last_step + 1), min(n, last_step)) if len(w)]


def success_by_prompt(groups: pd.DataFrame) -> pd.Series:
    """Each prompt's success rate over the groups given: every completion's score (the verifier's
    ``scores`` where present, else ``rewards``), pooled."""
    col = groups["scores"] if "scores" in groups else groups["rewards"]
    values = [np.asarray(s if s is not None else r, float) for s, r in zip(col, groups["rewards"])]
    total = pd.Series([v.sum() for v in values], index=groups.index).groupby(groups["prompt_id"]).sum()
    count = pd.Series([len(v) for v in values], index=groups.index).groupby(groups["prompt_id"]).sum()
    return total / count


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.spearmanr(a, b).statistic)


def run_staleness(groups: pd.DataFrame, p_hat: pd.Series, last_step: int) -> pd.DataFrame:
    """One run's rows: per window, the rank correlation of its prompts' success with ``p_hat``
    (indexed by prompt id), the prompts of the selection trained on, those all-correct, all-wrong."""
    groups = groups[groups["prompt_id"].isin(p_hat.index)]
    rows = []
    for i, steps in enumerate(windows(last_step), 1):
        rate = success_by_prompt(groups[groups["step"].isin(steps)]) if len(groups) else pd.Series(dtype=float)
        probed = p_hat.loc[rate.index].to_numpy()
        rows.append({"window": i, "steps": f"{steps[0]}-{steps[-1]}", "spearman": _spearman(rate.to_numpy(), probed),
                     "n_prompts": len(rate), "all_correct": int((rate == 1).sum()), "all_wrong": int((rate == 0).sum()),
                     "success": rate.mean() if len(rate) else np.nan, "p_hat": probed.mean() if len(rate) else np.nan})
    return pd.DataFrame(rows)


def probed_arms(study) -> list[str]:
    """The arms whose selection has p_hat (they train on probed prompts), in report order."""
    sel = study.selections
    if sel is None or not len(sel):
        return []
    has = sel.dropna(subset=["p_hat"])["strategy"]
    return [a for a in arm_order(study.runs["strategy"]) if a in set(has)]


def _p_hat(study, arm: str, seed: int) -> pd.Series:
    sel = study.selections[(study.selections["strategy"] == arm) & study.selections["p_hat"].notna()]
    if sel["train_seed"].notna().any():  # a per-seed selection
        sel = sel[sel["train_seed"] == seed]
    return sel.drop_duplicates("id").set_index("id")["p_hat"]


def staleness_table(study) -> pd.DataFrame:
    """Every probed arm's windows, averaged over its seeds (column ``seeds``: how many ran)."""
    runs_dir, frames, probed = layout.runs_dir(layout.study_dir(study.cfg)), [], probed_arms(study)
    for m in study.manifests:
        arm, seed = m["strategy"], int(m["seed"])
        if arm not in probed:
            continue
        groups, p_hat = artifacts.read_parquet(runs_dir / m["run_id"] / layout.GROUPS, "03_train"), _p_hat(study, arm, seed)
        if not groups["prompt_id"].isin(p_hat.index).any():
            continue  # it trained on none of its selection's probed prompts (a selection the run did not read)
        last = int(m.get("steps_done") or groups["step"].max())
        frames.append(run_staleness(groups, p_hat, last).assign(strategy=arm, seed=seed))
    if not frames:
        return pd.DataFrame()
    runs = pd.concat(frames, ignore_index=True)
    table = runs.groupby(["strategy", "window", "steps"], sort=False).agg(
        spearman=("spearman", "mean"), n_prompts=("n_prompts", "mean"), all_correct=("all_correct", "mean"),
        all_wrong=("all_wrong", "mean"), success=("success", "mean"), p_hat=("p_hat", "mean"),
        seeds=("seed", "nunique")).reset_index()
    order = {a: i for i, a in enumerate(probed)}
    return table.sort_values(["strategy", "window"], key=lambda c: c.map(order) if c.name == "strategy" else c,
                             ignore_index=True)


def plot(table: pd.DataFrame) -> Figure:
    """Rank correlation with p_hat by window, one line per arm (an arm whose selection holds one
    p_hat is named "(no rank)" in the legend); the share of the prompts trained on in the window
    that were all-correct (solid) or all-wrong (dashed). One colour per arm (figures._colors)."""
    fig = Figure(figsize=(11, 4))
    left, right = fig.subplots(1, 2)
    colors = _colors(table["strategy"])
    for arm, t in table.groupby("strategy", sort=False):
        ranked = t["spearman"].notna().any()  # a selection of one p_hat has no rank: named, not drawn
        left.plot(t["window"], t["spearman"], marker="o", color=colors[arm], label=arm if ranked else f"{arm} (no rank)")
        share = t["n_prompts"].where(t["n_prompts"] > 0)
        right.plot(t["window"], t["all_correct"] / share, marker="o", color=colors[arm], label=f"{arm} all-correct")
        right.plot(t["window"], t["all_wrong"] / share, marker="s", ls="--", color=colors[arm], label=f"{arm} all-wrong")
    windows_ = sorted(table["window"].unique())
    for ax in (left, right):
        ax.set_xticks(windows_)
    left.axhline(0, color="grey", lw=0.8)
    left.set(xlabel="window of training steps", ylabel="Spearman(success in training, probe p_hat)",
             title="Does the probe's ranking still hold?")
    right.set(xlabel="window of training steps", ylabel="share of the prompts trained on", ylim=(-0.02, 1.02),
              title="Zero-variance now: all-correct (solid), all-wrong (dashed)")
    left.legend(fontsize=7)
    right.legend(fontsize=6, ncol=2)
    return fig


def write(study) -> dict:
    table = staleness_table(study)
    if table.empty:
        return {"staleness": None}
    study.write_table("staleness", "Staleness of the probe: each prompt's success in training's groups over windows "
                      "of steps against its probe p_hat (mean over seeds)", table.round(DIGITS),
                      note="spearman: rank correlation over the selection's prompts trained on in the window (None: "
                      "fewer than 3, or either side constant: a selection of one p_hat has no rank to correlate); "
                      "all_correct / all_wrong: of those, how many gave every completion right / wrong in the window; "
                      "success / p_hat: their mean success in the window and mean probe p_hat.")
    artifacts.save_figure(plot(table), study.out / "fig_staleness.png")
    return {"staleness": {arm: [{"window": int(r["window"]), "steps": r["steps"], "spearman": _round(r["spearman"]),
                                 "n_prompts": _round(r["n_prompts"]), "all_correct": _round(r["all_correct"]),
                                 "all_wrong": _round(r["all_wrong"]), "success": _round(r["success"]),
                                 "p_hat": _round(r["p_hat"])} for r in t.to_dict("records")]
                          for arm, t in table.groupby("strategy", sort=False)}}
