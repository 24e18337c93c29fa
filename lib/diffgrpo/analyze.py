"""Stage 5, analyze: the papers' tables and figures from our runs, beside the numbers they report.

Reads only files the earlier stages wrote (run manifests, per-group rewards, eval summaries and
tiers, selections) and writes ``outputs/<study>/report/``: tables as CSV + markdown, figures as
PNG, and ``summary.json``. Our numbers and the papers' (``reported/paper_<id>.csv``) share one long
format (source, dataset, model, strategy, metric, value), so each table shows ours beside
theirs in the paper's own layout: a row per dataset x model, a column per strategy.

Choices where the papers are vague:

- gain = accuracy at the last evaluated checkpoint minus the base model's, in points, at
  ``analyze.metric`` (003 does not say whether its accuracy is greedy or sampled).
- learnable % counts (step, prompt) groups: we train on several prompts per step, where 003's
  definition (section 4.1) has one group per update.
- 003's Figure 3 states R^2 = 0.66 without listing its points. Refitting the points its
  Tables 1-3 report gives 0.641 over all 28, 0.670 over the 24 of Tables 1+2, and 0.659 over
  the 16 GSM8K points (Qwen3-4B, Qwen3-14B, Phi-4 and Llama): the figure was most likely
  drawn from those. :func:`paper_regressions` recomputes all of these from the data file.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy import stats

from . import layout
from .artifacts import ArtifactError, read_json, read_parquet, save_figure, write_csv, write_json, write_text
from .params import Config

#: 003's column order; other strategies follow alphabetically, the base model comes first
STRATEGY_ORDER = ("easy", "middle", "hard", "random")
DATA_DIR = Path(__file__).parent / "reported"  # the papers' numbers, one CSV per paper
METRIC_NAMES = {"greedy_acc": "greedy accuracy", "pass@1": "pass@1"}
#: columns of every "ours beside theirs" table
LONG_COLUMNS = ["source", "dataset", "model", "metric", "strategy", "value", "sd", "n"]
REPORTED_COLUMNS = ["paper", "table", "dataset", "model", "strategy", "metric", "value", "unit", "source", "note"]
DIGITS = 4  # rounding of everything written, so notebook outputs compare exactly


def strategy_order(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    head = [s for s in (layout.BASE_RUN, *STRATEGY_ORDER) if s in names]
    return head + sorted(set(names) - set(head))


def _sorted(df: pd.DataFrame, *then: str) -> pd.DataFrame:
    rank = {s: i for i, s in enumerate(strategy_order(df["strategy"]))}
    key = lambda col: col.map(rank) if col.name == "strategy" else col  # noqa: E731
    return df.sort_values(["strategy", *then], key=key, kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------------------------
# The papers' reported numbers
# ------------------------------------------------------------------------------------


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
    rows = [{"subset": name, **fit_line(g["learnable_pct"], g["gain_pp"])} for name, g in subsets.items()]
    return pd.DataFrame(rows).drop(columns="note")


def paper_regression(points: pd.DataFrame, rep: pd.DataFrame) -> dict:
    """Figure 3's fit over every reported point, its note comparing with the R^2 the paper states."""
    fit, stated = fit_line(points["learnable_pct"], points["gain_pp"]), stated_r2(rep)
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


# ------------------------------------------------------------------------------------
# Reading a study's files
# ------------------------------------------------------------------------------------


def study_path(study: Config | str | Path) -> Path:
    return layout.study_dir(study) if isinstance(study, Config) else Path(study)


def find_runs(study_dir: Path, run_ids: Iterable[str] | None = None) -> tuple[list[dict], list[str]]:
    """Manifests of the complete runs (with ``run_id`` added), and the ids of incomplete ones.
    ``run_ids``: only these (the study's planned runs), not every folder under runs/."""
    paths = sorted((study_dir / "runs").glob("*/manifest.json"))
    if run_ids is not None:
        wanted = set(run_ids)
        paths = [p for p in paths if p.parent.name in wanted]
    if not paths:
        raise FileNotFoundError(f"no runs/<run_id>/manifest.json under {study_dir}: run the train stage first")
    manifests = [{**read_json(p), "run_id": p.parent.name} for p in paths]
    done = [_complete(m) for m in manifests]
    untrained = sorted(set(run_ids or []) - {m["run_id"] for m in manifests})  # planned, never trained
    return ([m for m, d in zip(manifests, done) if d],
            [m["run_id"] for m, d in zip(manifests, done) if not d] + untrained)


def _complete(manifest: dict) -> bool:
    """The train stage writes ``status: complete``; a bare ``complete: true`` is accepted too."""
    return manifest.get("status") == "complete" or manifest.get("complete") is True


def _name(v: str | dict) -> str:
    """Manifests record the model and the task as ``{"name": ..., options...}``: keep the name."""
    return v["name"] if isinstance(v, dict) else v


def read_evals(study_dir: Path, run_ids: Iterable[str], name: str = "summary.parquet") -> pd.DataFrame:
    """One eval table (``summary.parquet`` or ``tiers.parquet``) of the base model and of each run, stacked."""
    frames = []
    for rid in [layout.BASE_RUN, *run_ids]:
        path = study_dir / "eval" / rid / name
        frames.append(read_parquet(path, "04_evaluate").assign(run_id=rid))
    return pd.concat(frames, ignore_index=True)


def learnable_pct(groups: pd.DataFrame) -> float:
    """Percent of (step, prompt) groups whose rewards differ (003 section 4.1).

    Recomputed from the reward vectors, not the logged flag: a group whose rewards are all
    equal has zero advantage everywhere, so GRPO learns nothing from it.
    """
    if groups.empty:
        raise ValueError("no (step, prompt) groups: learnable % is undefined")
    return 100.0 * float(groups["rewards"].map(lambda r: np.ptp(np.asarray(r, float)) > 0).mean())


def base_accuracy(evals: pd.DataFrame, metric: str) -> float:
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    if base.empty:
        raise ValueError(f"eval/{layout.BASE_RUN}/summary.parquet has no step-0 row for the base model")
    if metric not in base.columns:
        raise KeyError(f"eval summaries have no {metric!r} column (columns: {sorted(base.columns)})")
    return float(base[metric].iloc[0])


def final_checkpoints(evals: pd.DataFrame) -> pd.DataFrame:
    """Each trained run's last evaluated checkpoint (one row per run)."""
    trained = evals[(evals["run_id"] != layout.BASE_RUN) & (evals["step"] > 0)]
    return trained.loc[trained.groupby("run_id")["step"].idxmax()].reset_index(drop=True)


def collect_runs(study: Config | str | Path, metric: str = "greedy_acc",
                 run_ids: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per complete run: base and final accuracy at ``metric``, gain in points, learnable %.

    Incomplete runs are skipped with a warning that names them: their last checkpoint is not
    the budget the strategies are compared at.
    """
    root = study_path(study)
    if run_ids is None and isinstance(study, Config):
        run_ids = [layout.run_id(s, seed) for s, seed in layout.planned_runs(study)]
    runs, incomplete = find_runs(root, run_ids)
    if incomplete:
        warnings.warn(f"skipping incomplete runs: {', '.join(incomplete)}", stacklevel=2)
    if not runs:
        raise FileNotFoundError(f"no complete run under {root / 'runs'}")
    evals = read_evals(root, [m["run_id"] for m in runs])
    base = base_accuracy(evals, metric)
    final = final_checkpoints(evals).set_index("run_id")
    rows = []
    for m in runs:
        rid = m["run_id"]
        if rid not in final.index:
            raise ValueError(f"{root / 'eval' / rid / 'summary.parquet'} has no trained checkpoint (step > 0)")
        evaluated = read_json(root / "eval" / rid / "manifest.json").get("trained")
        if evaluated != layout.trained_identity(m):
            raise ArtifactError(f"{root / 'eval' / rid}: scores an earlier training of run {rid!r}, not the one "
                                "in runs/ now; rerun the evaluate stage (04_evaluate)")
        groups = read_parquet(root / "runs" / rid / "groups.parquet", "03_train")
        acc = float(final.loc[rid, metric])
        rows.append({
            "model": _name(m["model"]), "dataset": _name(m["task"]), "strategy": m["strategy"], "seed": int(m["seed"]),
            "base_acc": base, "final_acc": acc, "gain_pp": 100.0 * (acc - base),
            "learnable_pct": learnable_pct(groups), "steps": int(m["steps_done"]),
        })
    return _sorted(pd.DataFrame(rows), "seed")


def selection_p_hat(study_dir: Path) -> pd.DataFrame:
    """p_hat of every selected prompt, per strategy (the data behind the p_hat figure)."""
    files = sorted((study_dir / "select").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no select/<strategy>.parquet under {study_dir}: run the select stage first")
    frames = [read_parquet(f, "02_select", columns=["id", "p_hat"]).assign(strategy=f.stem) for f in files]
    return _sorted(pd.concat(frames, ignore_index=True), "id")


# ------------------------------------------------------------------------------------
# Our numbers in the papers' long format
# ------------------------------------------------------------------------------------


def _mean_sd(df: pd.DataFrame, by: list[str], column: str) -> pd.DataFrame:
    """Mean over seeds, with the spread (sd) only where there are 2+ seeds."""
    return df.groupby(by, sort=False)[column].agg(value="mean", sd="std", n="count").reset_index()


def summarize(runs: pd.DataFrame, column: str, metric: str | None = None) -> pd.DataFrame:
    """A per-run column as the long format: mean +- sd over seeds per dataset x model x strategy."""
    return _mean_sd(runs, ["dataset", "model", "strategy"], column).assign(metric=metric or column)


def accuracy_long(runs: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy in percent per strategy, the base model's as strategy ``base``, and blog
    001's comparison: base-wrong's relative improvement over base-right, when both ran (the
    size-matched pair when it ran, as 001 compares at equal size)."""
    acc = summarize(runs.assign(acc=100.0 * runs["final_acc"]), "acc", "accuracy_pct")
    base = runs.iloc[[0]].assign(strategy=layout.BASE_RUN, acc=100.0 * runs["base_acc"].iloc[0])
    out = pd.concat([summarize(base, "acc", "accuracy_pct"), acc], ignore_index=True)
    means = acc.set_index("strategy")["value"]
    for wrong, right in (("base_wrong_matched", "base_right_matched"), ("base_wrong", "base_right")):
        if {wrong, right} <= set(means.index):
            rel = 100.0 * (means[wrong] - means[right]) / means[right]
            row = {**out.iloc[0].to_dict(), "strategy": wrong, "metric": "rel_gain_vs_base_right_pct",
                   "value": rel, "sd": np.nan, "n": np.nan}
            return pd.concat([out, pd.DataFrame([row])], ignore_index=True)
    return out


def pass_k_long(evals: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Table 4's measure, pass@k in percent at the largest k evaluated, base and final checkpoints."""
    ks = [c for c in evals.columns if c.startswith("pass@") and c != "pass@1"]
    if not ks:
        return pd.DataFrame(columns=["dataset", "model", "strategy", "value", "sd", "n", "metric"])
    col = max(ks, key=lambda c: int(c.removeprefix("pass@")))
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    points = pd.concat([base, final_checkpoints(evals)]).assign(pct=lambda d: 100.0 * d[col])
    points = points.assign(dataset=runs["dataset"].iloc[0], model=runs["model"].iloc[0])
    return summarize(points, "pct", col)


def accuracy_curves(evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Figure 2's data: mean accuracy over seeds per strategy and checkpoint, every line
    starting from the base model at step 0."""
    trained = evals[(evals["run_id"] != layout.BASE_RUN) & (evals["step"] > 0)]
    starts = trained.drop_duplicates("run_id").assign(step=0, **{metric: base_accuracy(evals, metric)})
    curves = _mean_sd(pd.concat([starts, trained]), ["strategy", "step"], metric)
    return _sorted(curves, "step")


def steps_to_match(curves: pd.DataFrame, reference: str = "all") -> pd.DataFrame:
    """Paper 000's efficiency measure: the first checkpoint at which a strategy reaches the
    reference's final accuracy, in percent of the reference's steps (NaN: never reached)."""
    ref = curves[curves["strategy"] == reference]
    if ref.empty:
        return pd.DataFrame(columns=["strategy", "value"])
    target = ref.loc[ref["step"].idxmax()]
    others = curves[(curves["strategy"] != reference) & (curves["step"] > 0)]
    rows = [
        {"strategy": s, "value": 100.0 * c.loc[c["value"] >= target["value"], "step"].min() / target["step"]}
        for s, c in others.groupby("strategy", sort=False)
    ]
    return pd.DataFrame(rows, columns=["strategy", "value"])


def tier_accuracy(tiers: pd.DataFrame, evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Accuracy per difficulty tier of the base model and of each strategy's final checkpoint
    (mean over seeds): where along the difficulty axis a strategy's gain comes from."""
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    final = pd.concat([base, final_checkpoints(evals)])[["run_id", "strategy", "step"]]
    per_tier = tiers.drop(columns="strategy", errors="ignore").merge(final, on=["run_id", "step"])
    return _sorted(_mean_sd(per_tier, ["strategy", "tier"], metric), "tier")


def beside(ours: pd.DataFrame, rep: pd.DataFrame, metrics: Iterable[str]) -> pd.DataFrame:
    """Our rows (source "ours") above the papers' rows for the same metrics."""
    metrics = list(metrics)
    theirs = rep[rep["metric"].isin(metrics)].assign(source=lambda d: d["paper"] + " " + d["table"], sd=np.nan, n=np.nan)
    frames = [df[LONG_COLUMNS] for df in (ours.assign(source="ours"), theirs) if not df.empty]
    if not frames:
        return pd.DataFrame(columns=LONG_COLUMNS)
    return pd.concat(frames, ignore_index=True).round(DIGITS)


# ------------------------------------------------------------------------------------
# Regression and verdict
# ------------------------------------------------------------------------------------


def _round(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), DIGITS)


def fit_line(x: Iterable[float], y: Iterable[float]) -> dict:
    """Least-squares ``y = slope * x + intercept`` and its R^2 (Figure 3: gain on learnable %).

    R^2 is None, with the reason in ``note``, when it means nothing: fewer than 3 points (a
    line fits 2 exactly) or no spread in x or y. The slope needs only 2 points with distinct x.
    """
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    out = {"slope": None, "intercept": None, "r2": None, "n": len(x), "note": None}
    x_spread = len(x) > 1 and np.ptp(x) > 0
    if x_spread:
        fit = stats.linregress(x, y)
        out.update(slope=_round(fit.slope), intercept=_round(fit.intercept))
    if len(x) < 3:
        out["note"] = f"{len(x)} point(s): R^2 needs at least 3"
    elif not x_spread:
        out["note"] = "every point has the same learnable %: no line to fit"
    elif np.ptp(y) == 0:
        out["note"] = "every point has the same gain: R^2 is undefined"
    else:
        out["r2"] = _round(fit.rvalue**2)
    return out


def mean_gains(runs: pd.DataFrame) -> pd.DataFrame:
    out = runs.groupby("strategy", sort=False).agg(
        gain_pp=("gain_pp", "mean"), final_acc=("final_acc", "mean"), seeds=("seed", "count"))
    return out.reset_index()


def best_strategy(runs: pd.DataFrame) -> str | None:
    """The strategy with the largest mean gain; None when every strategy gained the same
    (a tie at the top names nobody rather than the first in the table)."""
    gains = mean_gains(runs)
    top = gains["gain_pp"].max()
    leaders = gains.loc[np.isclose(gains["gain_pp"], top), "strategy"]
    return str(leaders.iloc[0]) if len(leaders) == 1 else None


def noise_pp(base_acc: float, n_prompts: int) -> float:
    """One binomial standard error of the base accuracy on ``n_prompts``, in points: the scale
    below which a gain on this test set is indistinguishable from sampling noise."""
    return 100.0 * float(np.sqrt(base_acc * (1 - base_acc) / n_prompts))


def verdict(runs: pd.DataFrame, metric: str, n_prompts: int | None = None) -> str:
    """One honest line: which strategy gained most and least, flagging when none beat the base
    and, given the test set's size, when the best gain is within two standard errors."""
    gains = mean_gains(runs).set_index("strategy")
    base, name = runs["base_acc"].iloc[0], METRIC_NAMES.get(metric, metric)
    best, worst = gains["gain_pp"].idxmax(), gains["gain_pp"].idxmin()
    top = gains.loc[best]
    if top["gain_pp"] <= 0:
        line = (f"no strategy beat the base model's {name} ({base:.2f}); the best, {best}, "
                f"changed it by {top['gain_pp']:+.1f} points")
    else:
        line = f"{best} gained {top['gain_pp']:+.1f} points {name} over the base ({base:.2f} -> {top['final_acc']:.2f})"
    if len(gains) > 1:
        line += f"; {worst} gained the least ({gains.loc[worst, 'gain_pp']:+.1f})"
    if gains["seeds"].max() > 1:
        line += f" (means over up to {gains['seeds'].max()} seeds)"
    if n_prompts:
        se = noise_pp(base, n_prompts)
        within = "within" if abs(top["gain_pp"]) < 2 * se else "beyond"
        line += (f". One standard error on {n_prompts} test prompts is {se:.1f} points; "
                 f"the best gain is {within} two of them")
    return line


# ------------------------------------------------------------------------------------
# Figures (matplotlib Figure objects, no pyplot state: safe in tests and notebooks)
# ------------------------------------------------------------------------------------


def _colors(strategies: Iterable[str]) -> dict[str, str]:
    """One color per strategy, the same in every figure: 003's four first, the base grey."""
    others = [s for s in strategy_order(strategies) if s not in (layout.BASE_RUN, *STRATEGY_ORDER)]
    return {layout.BASE_RUN: "grey"} | {s: f"C{i}" for i, s in enumerate([*STRATEGY_ORDER, *others])}


def plot_accuracy_curves(curves: pd.DataFrame, metric: str) -> Figure:
    """Figure 2: accuracy by checkpoint, one line per strategy, band = sd over seeds."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    colors = _colors(curves["strategy"])
    for s, c in curves.groupby("strategy", sort=False):
        ax.plot(c["step"], c["value"], marker="o", color=colors[s], label=s)
        ax.fill_between(c["step"], c["value"] - c["sd"].fillna(0), c["value"] + c["sd"].fillna(0),
                        color=colors[s], alpha=0.15, linewidth=0)
    ax.axhline(curves.loc[curves["step"] == 0, "value"].iloc[0], color="grey", ls=":", label="base")
    ax.set(xlabel="training step", ylabel=METRIC_NAMES.get(metric, metric), title="Accuracy by checkpoint")
    ax.legend()
    return fig


def plot_learnable_vs_gain(runs: pd.DataFrame, points: pd.DataFrame, paper: str | None = None,
                           stated_r2: float | None = None) -> Figure:
    """Figure 3: learnable % vs gain with the least-squares line; ours, and the paper's reported
    points refit (its title also gives the R^2 the paper states, which the refit need not match)."""
    stated = "" if stated_r2 is None else f" (paper states {stated_r2:g})"
    panels = [("ours", runs, "")] + ([(f"paper {paper}, refit", points, stated)] if len(points) else [])
    fig = Figure(figsize=(5.5 * len(panels), 4.5))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    colors = _colors(pd.concat([runs["strategy"], points["strategy"]]))
    for ax, (title, df, note) in zip(axes, panels):
        markers = dict(zip(df["model"].unique(), "osD^vP*X"))
        for (s, m), d in df.groupby(["strategy", "model"], sort=False):
            ax.scatter(d["learnable_pct"], d["gain_pp"], color=colors[s], marker=markers[m])
        handles = [Line2D([], [], ls="", marker="o", color=colors[s], label=s) for s in strategy_order(df["strategy"])]
        handles += [Line2D([], [], ls="", marker=mk, color="k", label=m) for m, mk in markers.items()]
        fit = fit_line(df["learnable_pct"], df["gain_pp"])
        if fit["slope"] is not None:
            xs = np.linspace(df["learnable_pct"].min(), df["learnable_pct"].max(), 2)
            ax.plot(xs, fit["intercept"] + fit["slope"] * xs, "k--", lw=1)
        r2 = "undefined" if fit["r2"] is None else f"{fit['r2']:.2f}"
        ax.set(xlabel="learnable %", ylabel="gain (points)", title=f"{title}: n = {fit['n']}, R² = {r2}{note}")
        ax.legend(handles=handles, fontsize="x-small")
    return fig


def plot_p_hat(selected: pd.DataFrame) -> Figure:
    """Histogram of the base model's p_hat over each selection: what each strategy trains on."""
    strategies = list(dict.fromkeys(selected["strategy"]))
    fig = Figure(figsize=(6, 1.6 * len(strategies) + 0.6))
    axes = np.atleast_1d(fig.subplots(len(strategies), 1, sharex=True))
    colors = _colors(strategies)
    for ax, s in zip(axes, strategies):
        ax.hist(selected.loc[selected["strategy"] == s, "p_hat"], bins=np.linspace(0, 1, 21), color=colors[s])
        ax.set_ylabel(s)
    axes[-1].set_xlabel("p_hat (base model's success rate)")
    axes[0].set_title("Difficulty of each selection")
    return fig


def plot_tiers(tiers: pd.DataFrame, metric: str) -> Figure:
    """Accuracy per tier: grouped bars, base and each strategy's final checkpoint."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    wide = tiers.pivot(index="tier", columns="strategy", values="value")
    strategies = strategy_order(wide.columns)
    width = 0.8 / max(len(strategies), 1)
    colors = _colors(strategies)
    x = np.arange(len(wide.index))
    for i, s in enumerate(strategies):
        ax.bar(x + i * width, wide[s], width, color=colors[s], label=s)
    ax.set_xticks(x + width * (len(strategies) - 1) / 2, [str(t) for t in wide.index])
    ax.set(xlabel="tier", ylabel=METRIC_NAMES.get(metric, metric), title="Accuracy per difficulty tier")
    ax.legend(fontsize="small")
    return fig


# ------------------------------------------------------------------------------------
# Markdown
# ------------------------------------------------------------------------------------


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if np.isnan(v) else f"{v:.4g}"
    return str(v)


def markdown(df: pd.DataFrame) -> str:
    """A plain pipe table (no tabulate dependency)."""
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def wide_markdown(long: pd.DataFrame) -> str:
    """A long table in the paper's layout: a row per source x dataset x model x metric, a column
    per strategy, cells "mean ± sd" where seeds vary."""
    if long.empty:
        return "(no rows)\n"
    cells = [f"{v:.2f}" + ("" if np.isnan(sd) else f" ± {sd:.2f}") for v, sd in zip(long["value"], long["sd"].astype(float))]
    wide = long.assign(cell=cells).pivot_table(
        index=["source", "dataset", "model", "metric"], columns="strategy", values="cell", aggfunc="first", sort=False)
    return markdown(wide[strategy_order(long["strategy"])].reset_index().fillna(""))


# ------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------


def report(cfg: Config) -> dict:
    """Read the study's files, write every table, figure and ``summary.json`` to
    ``layout.report_dir(cfg)``, and return the summary.

    Beside-rows come from ``analyze.paper`` (none when null); ``paper_tables.md`` lists every
    number all four papers report, as the reference sheet.
    """
    root, out, metric, paper = layout.study_dir(cfg), layout.report_dir(cfg), cfg.analyze.metric, cfg.analyze.paper
    ids = [layout.run_id(s, seed) for s, seed in layout.planned_runs(cfg)]
    runs = collect_runs(root, metric, ids)
    complete, skipped = find_runs(root, ids)
    ids = [m["run_id"] for m in complete]
    evals, tiers = read_evals(root, ids), read_evals(root, ids, "tiers.parquet")
    rep = reported([paper] if paper else [])
    points = paper_points(rep)
    curves = accuracy_curves(evals, metric)
    label = runs[["dataset", "model"]].iloc[0].to_dict()  # one model and dataset per study

    def write_long(name: str, title: str, long: pd.DataFrame) -> None:
        write_csv(out / f"{name}.csv", long)
        write_text(out / f"{name}.md", f"# {title}\n\n{wide_markdown(long)}")

    write_csv(out / "runs.csv", runs.round(DIGITS))
    write_text(out / "runs.md", f"# Runs ({metric}; gain in points)\n\n{markdown(runs.round(DIGITS))}")
    write_long("table1_gain", f"Table 1: accuracy change from the base model (points, {metric}, final checkpoint)",
               beside(summarize(runs, "gain_pp"), rep, ["gain_pp"]))
    write_long("table2_learnable", "Table 2: learnable % ((step, prompt) groups with nonzero reward std)",
               beside(summarize(runs, "learnable_pct"), rep, ["learnable_pct"]))
    pass_k = pass_k_long(evals, runs)
    pass_metrics = set(pass_k["metric"]) | {m for m in rep["metric"] if m.startswith("pass@")}
    write_long("table4_pass_k", "Table 4: pass@k (percent) of the base model and each strategy's final checkpoint "
               "(ours: the study's test set; 003: AIME 2025-I)", beside(pass_k, rep, sorted(pass_metrics)))
    write_long("table_accuracy", f"Final accuracy (percent, {metric}); base-wrong vs base-right vs all (blog 001)",
               beside(accuracy_long(runs), rep, ["accuracy_pct", "rel_gain_vs_base_right_pct"]))
    steps = steps_to_match(curves).assign(metric="steps_to_match_all_pct", sd=np.nan, n=np.nan, **label)
    write_long("steps_to_match", "Steps to reach the `all` run's final accuracy (percent of its steps; paper 000)",
               beside(steps, rep, ["steps_to_match_all_pct"]))

    per_tier = tier_accuracy(tiers, evals, metric).round(DIGITS)
    write_csv(out / "tiers.csv", per_tier)
    tier_wide = per_tier.pivot(index="tier", columns="strategy", values="value")
    write_text(out / "tiers.md", f"# Accuracy per tier ({metric}): base and final checkpoints\n\n"
               + markdown(tier_wide[strategy_order(tier_wide.columns)].reset_index()))

    regression = fit_line(runs["learnable_pct"], runs["gain_pp"])
    regs, paper_fit = paper_regressions(points), paper_regression(points, rep)
    write_csv(out / "paper_regression.csv", regs)
    write_text(out / "paper_regression.md", "# Figure 3 refit from the paper's reported points\n\n"
               + (markdown(regs) if len(regs) else "(no reported points)\n") + f"\n{paper_fit['note'] or ''}\n")
    write_text(out / "paper_tables.md", _paper_tables(reported()))

    save_figure(plot_accuracy_curves(curves, metric), out / "fig2_accuracy_by_checkpoint.png")
    save_figure(plot_learnable_vs_gain(runs, points, paper, stated_r2(rep)), out / "fig3_learnable_vs_gain.png")
    save_figure(plot_p_hat(selection_p_hat(root)), out / "fig_p_hat.png")
    save_figure(plot_tiers(per_tier, metric), out / "fig_tiers.png")

    summary = {
        "metric": metric,
        "runs": runs.round(DIGITS).to_dict("records"),
        "skipped": skipped,
        "best": best_strategy(runs),
        "verdict": verdict(runs, metric, int(evals.loc[evals["run_id"] == layout.BASE_RUN, "n_prompts"].iloc[0])),
        "regression": regression,
        "paper_regression": paper_fit,
    }
    write_json(out / "summary.json", summary)
    return summary


def _paper_tables(rep: pd.DataFrame) -> str:
    """Every reported number, grouped by paper and table, with its source."""
    parts = ["# Numbers the papers report\n"]
    for (paper, table), g in rep.groupby(["paper", "table"], sort=False):
        parts.append(f"## {paper} {table}\n\nSource: {g['source'].iloc[0]}\n")
        parts.append(markdown(g[["dataset", "model", "strategy", "metric", "value", "unit", "note"]]))
    return "\n".join(parts)
