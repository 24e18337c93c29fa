"""The report's figures (matplotlib Figure objects, no pyplot state: safe in tests and
notebooks); each is checked by the data behind it, not by its pixels."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from diffgrpo.store import layout
from diffgrpo.analysis.tables import DIGITS, FIRST_STEPS_FRAC, METRIC_NAMES, ARM_ORDER, arm_order
from diffgrpo.stats.lines import fit_line

def _colors(arms: Iterable[str]) -> dict[str, str]:
    """One color per arm (or method), the same in every figure: 003's four first, the base grey;
    past matplotlib's ten (C0-C9), seaborn's husl hues, so no two names of one figure share a colour."""
    import seaborn as sns

    others = [s for s in arm_order(arms) if s not in (layout.BASE_RUN, *ARM_ORDER)]
    names = [*ARM_ORDER, *others]
    extra = sns.color_palette("husl", max(len(names) - 10, 0)).as_hex()
    return {layout.BASE_RUN: "grey"} | {s: f"C{i}" if i < 10 else extra[i - 10] for i, s in enumerate(names)}


#: line style and marker of an arm's kind in the figures over total rollouts (diffgrpo.train.ledger.arm_kind)
KIND_STYLE = {"offline": ("-", "o"), "no probe": ("--", "s"), "online": (":", "^")}


def method_lines(ax, table: pd.DataFrame, x: str, y: str, lo: str, hi: str, method_of) -> None:
    """One line per method across its budgets (arms ``<method>.<label>``; column ``kind``): a colour
    per method, none reused; offline, no-probe and online told apart by line style and marker; the
    points of the methods dodged along x (a few percent apart) so that intervals do not hide each other."""
    t = table.assign(method=table["strategy"].map(method_of)).dropna(subset=[x])
    methods = list(dict.fromkeys(t["method"]))
    colors = _colors(methods)
    for i, (method, g) in enumerate(t.groupby("method", sort=False)):
        g = g.sort_values(x)
        dodge = 1 + 0.015 * (i - (len(methods) - 1) / 2)
        style, marker = KIND_STYLE.get(g["kind"].iloc[0], ("-", "o"))
        ax.errorbar(g[x] * dodge, g[y], yerr=[g[y] - g[lo], g[hi] - g[y]], color=colors[method], linestyle=style,
                    marker=marker, capsize=3, label=f"{method} ({g['kind'].iloc[0]})")



def plot_accuracy_curves(curves: pd.DataFrame, metric: str) -> Figure:
    """Figure 2: accuracy by checkpoint, one line per arm (mean over seeds); band = the 95%
    bootstrap interval over test prompts and seeds when ``curves`` has ``ci_low``/``ci_high``,
    else the sd over seeds."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    colors = _colors(curves["strategy"])
    has_ci = {"ci_low", "ci_high"} <= set(curves.columns)
    for s, c in curves.groupby("strategy", sort=False):
        ax.plot(c["step"], c["value"], marker="o", color=colors[s], label=s)
        lo, hi = ((c["ci_low"], c["ci_high"]) if has_ci else
                  (c["value"] - c["sd"].fillna(0), c["value"] + c["sd"].fillna(0)))
        ax.fill_between(c["step"], lo, hi, color=colors[s], alpha=0.15, linewidth=0)
    ax.axhline(curves.loc[curves["step"] == 0, "value"].iloc[0], color="grey", ls=":", label="base")
    band = "95% interval (prompts x seeds)" if has_ci else "sd over seeds"
    ax.set(xlabel="training step", ylabel=METRIC_NAMES.get(metric, metric), title=f"Accuracy by checkpoint; band: {band}")
    ax.legend()
    return fig



def plot_learnable_vs_gain(runs: pd.DataFrame, points: pd.DataFrame, paper: str | None = None,
                           stated_r2: float | None = None, r2_ci95: list[float] | None = None,
                           control: Iterable[str] = ()) -> Figure:
    """Figure 3: learnable % vs gain with the least-squares line; ours, and the paper's reported
    points refit (its title also gives the R^2 the paper states, which the refit need not match).
    ``control`` arms (not trained on the verifier's reward) are drawn apart, hollow and labelled,
    and left out of the line and its R^2."""
    stated = "" if stated_r2 is None else f" (paper states {stated_r2:g})"
    ours = "" if r2_ci95 is None else f" [{r2_ci95[0]:.2f}, {r2_ci95[1]:.2f}]"
    control = set(control)
    panels = [("ours", runs, ours)] + ([(f"paper {paper}, refit", points, stated)] if len(points) else [])
    fig = Figure(figsize=(5.5 * len(panels), 4.5))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    colors = _colors(pd.concat([runs["strategy"], points["strategy"]]))
    for ax, (title, df, note) in zip(axes, panels):
        markers = dict(zip(df["model"].unique(), "osD^vP*X"))
        for (s, m), d in df.groupby(["strategy", "model"], sort=False):
            if s in control:
                ax.scatter(d["learnable_pct"], d["gain_pp"], facecolors="none", edgecolors=colors[s], marker=markers[m])
            else:
                ax.scatter(d["learnable_pct"], d["gain_pp"], color=colors[s], marker=markers[m])
        handles = [Line2D([], [], ls="", marker="o", color=colors[s], label=s) for s in arm_order(df["strategy"])
                   if s not in control]
        handles += [Line2D([], [], ls="", marker="o", mfc="none", color=colors[s],
                           label=f"{s} (control): not fitted")
                    for s in arm_order(df["strategy"]) if s in control]
        handles += [Line2D([], [], ls="", marker=mk, color="k", label=m) for m, mk in markers.items()]
        fitted = df[~df["strategy"].isin(control)]
        fit = fit_line(fitted["learnable_pct"], fitted["gain_pp"], DIGITS)
        if fit["slope"] is not None:
            xs = np.linspace(fitted["learnable_pct"].min(), fitted["learnable_pct"].max(), 2)
            ax.plot(xs, fit["intercept"] + fit["slope"] * xs, "k--", lw=1)
        r2 = "undefined" if fit["r2"] is None else f"{fit['r2']:.2f}"
        ax.set(xlabel="learnable % (verifier's scores)" if title == "ours" else "learnable %", ylabel="gain (points)",
               title=f"{title}: n = {fit['n']}, R² = {r2}{note}")
        ax.legend(handles=handles, fontsize="x-small")
    return fig



def plot_learnability(arms: pd.DataFrame, group_size: int) -> Figure:
    """Predicted learnable % at step 0 (from the probe's p_hat, filled; from each prompt's Beta
    posterior, hollow) against the observed one, over the first steps and the whole run, per
    arm (mean over seeds); the diagonal is agreement."""
    fig = Figure(figsize=(5.5, 4.5))
    ax = fig.subplots()
    colors = _colors(arms["strategy"])
    posterior = "predicted_posterior_pct" if "predicted_posterior_pct" in arms else "predicted_learnable_pct"
    for col, marker in (("learnable_first_pct", "o"), ("learnable_pct", "s")):
        ax.scatter(arms["predicted_learnable_pct"], arms[col], c=[colors[s] for s in arms["strategy"]], marker=marker)
        ax.scatter(arms[posterior], arms[col], facecolors="none", edgecolors=[colors[s] for s in arms["strategy"]],
                   marker=marker)
    values = arms[["predicted_learnable_pct", posterior, "learnable_first_pct", "learnable_pct"]].to_numpy(float)
    top = max(5.0, float(np.nanmax(values)) * 1.1) if np.isfinite(values).any() else 100.0
    ax.plot([0, top], [0, top], color="grey", ls=":", lw=1)
    handles = [Line2D([], [], ls="", marker="o", color=colors[s], label=s) for s in arms["strategy"]]
    handles += [Line2D([], [], ls="", marker="o", mfc="none", color="k", label=f"first {FIRST_STEPS_FRAC:.0%} of steps"),
                Line2D([], [], ls="", marker="s", mfc="none", color="k", label="whole run"),
                Line2D([], [], ls="", marker="o", color="grey", label="filled: plug-in p_hat"),
                Line2D([], [], ls="", marker="o", mfc="none", color="grey", label="hollow: Beta posterior of p")]
    ax.set(xlim=(0, top), ylim=(0, top), xlabel=f"predicted learnable % (mean of 1 - p^{group_size} - (1-p)^{group_size})",
           ylabel="observed learnable %", title="Learnability: predicted from the probe vs observed")
    ax.legend(handles=handles, fontsize="x-small")
    return fig



def plot_p_hat(selected: pd.DataFrame) -> Figure:
    """Histogram of the base model's p_hat over each selection: what each arm trains on."""
    arms = list(dict.fromkeys(selected["strategy"]))
    fig = Figure(figsize=(6, 1.6 * len(arms) + 0.6))
    axes = np.atleast_1d(fig.subplots(len(arms), 1, sharex=True))
    colors = _colors(arms)
    for ax, s in zip(axes, arms):
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
    arms = arm_order(wide.columns)
    width = 0.8 / max(len(arms), 1)
    colors = _colors(arms)
    x = np.arange(len(wide.index))
    for i, s in enumerate(arms):
        ax.bar(x + i * width, wide[s], width, color=colors[s], label=s)
    ax.set_xticks(x + width * (len(arms) - 1) / 2, [str(t) for t in wide.index])
    ax.set(xlabel="tier", ylabel=METRIC_NAMES.get(metric, metric), title="Accuracy per difficulty tier")
    ax.legend(fontsize="small")
    return fig




def plot_test_bins(bins: pd.DataFrame) -> Figure:
    """Gain per test-difficulty bin: grouped bars per arm with their 95% intervals; each bin
    labelled with its number of test prompts."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    data = bins.dropna(subset=["gain_pp"]) if "gain_pp" in bins else bins.iloc[0:0]
    labels = list(dict.fromkeys(bins["bin"]))
    arms = arm_order(data["strategy"])
    width = 0.8 / max(len(arms), 1)
    colors = _colors(arms)
    for i, s in enumerate(arms):
        d = data[data["strategy"] == s].set_index("bin").reindex(labels)
        x = np.arange(len(labels)) + i * width
        err = np.vstack([d["gain_pp"] - d["ci_low"], d["ci_high"] - d["gain_pp"]])
        ax.bar(x, d["gain_pp"], width, yerr=err, capsize=2, color=colors[s], label=s)
    n = bins.drop_duplicates("bin").set_index("bin")["n_prompts"]
    ax.set_xticks(np.arange(len(labels)) + width * (len(arms) - 1) / 2,
                  [f"p_hat {b}\n{int(n[b])} prompts" for b in labels])
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="base model's p_hat on the test prompt (probe.test)", ylabel="gain (points)",
           title="Gain by test-prompt difficulty (95% intervals)")
    ax.legend(fontsize="small")
    return fig


def plot_matched_test(table: pd.DataFrame) -> Figure:
    """Each arm's gain on the common test set and on the test prompts of its own training
    difficulty (003's released code), with 95% intervals."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    data = table.dropna(subset=["gain_pp"])
    arms = arm_order(data["strategy"])
    for j, (scoring, marker) in enumerate((("common", "o"), ("matched", "s"))):
        d = data[data["scoring"] == scoring].set_index("strategy").reindex(arms)
        x = np.arange(len(arms)) + (j - 0.5) * 0.25
        err = np.vstack([d["gain_pp"] - d["ci_low"], d["ci_high"] - d["gain_pp"]])
        ax.errorbar(x, d["gain_pp"], yerr=err, fmt=marker, capsize=3,
                    label={"common": "common test set", "matched": "test prompts of its training difficulty"}[scoring])
    ax.set_xticks(np.arange(len(arms)), arms)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(ylabel="gain (points)", title="Gain scored two ways (95% intervals)")
    ax.legend(fontsize="small")
    return fig


def plot_confounds(steps: pd.DataFrame) -> Figure:
    """Completion length and truncation rate by training step, one line per arm (mean over
    seeds, a rolling mean over 5 steps): a length change that comes with a gain is a confound."""
    cols = [c for c in ("mean_length", "truncated") if c in steps]
    fig = Figure(figsize=(5.5 * len(cols), 4))
    axes = np.atleast_1d(fig.subplots(1, len(cols)))
    colors = _colors(steps["strategy"])
    curves = steps.groupby(["strategy", "step"], sort=False)[cols].mean().reset_index()
    for ax, col in zip(axes, cols):
        for s in arm_order(curves["strategy"]):
            c = curves[curves["strategy"] == s].sort_values("step")
            ax.plot(c["step"], c[col].rolling(5, min_periods=1).mean(), color=colors[s], label=s)
        ax.set(xlabel="training step", ylabel={"mean_length": "completion length (tokens)",
                                               "truncated": "share truncated"}[col])
        ax.legend(fontsize="x-small")
    axes[0].set_title("Length and truncation over training (rolling mean of 5 steps)")
    return fig


def plot_sequential_map(studies: dict[str, dict]) -> Figure:
    """The map of a declared question asked in several studies (issue 46: when the probe pays, in
    a mixed and a skewed regime): one panel per study, each primary contrast's difference at the
    group-sequential rule's last look with its interval (at 1 - 2 x the look's level), against the
    arms' total-rollout budget, one marker per comparison, coloured by the rule's decision, the
    equivalence margin shaded. ``studies``: title -> the study's ``summary.json``."""
    colours = {"differs": "#c0392b", "equivalent": "#2471a3", "not resolved": "#7f8c8d", "another block": "#b7950b"}
    fig = Figure(figsize=(4.2 * len(studies), 3.6))
    axes = fig.subplots(1, len(studies), sharey=True, squeeze=False)[0]
    for ax, (title, summary) in zip(axes, studies.items()):
        seq = summary["sequential"]
        margin = seq.get("margin")
        if margin:
            ax.axhspan(-margin, margin, color="#d6eaf8", zorder=0, label=f"+-{margin:g} (equivalence)")
        ax.axhline(0, color="black", lw=0.8)
        versus = sorted({r["b"].split(".")[0] for r in seq["rows"]})
        for k, other in enumerate(versus):
            for r in (r for r in seq["rows"] if r["b"].split(".")[0] == other):
                budget = int(r["a"].rsplit(".b", 1)[1]) if ".b" in r["a"] else 0
                x = budget + (k - (len(versus) - 1) / 2) * 60
                lo, hi = r["interval"]
                ax.errorbar(x, r["diff_pp"], yerr=[[r["diff_pp"] - lo], [hi - r["diff_pp"]]], fmt="os"[k % 2],
                            color=colours.get(r["decision"], "black"), capsize=3, ms=6)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("total rollouts (the probe charged)")
        budgets = sorted({int(r["a"].rsplit(".b", 1)[1]) for r in seq["rows"] if ".b" in r["a"]})
        ax.set_xticks(budgets)
        ax.grid(alpha=0.3)
    rows = studies[next(iter(studies))]["sequential"]["rows"]
    axes[0].set_ylabel(f"{rows[0]['a'].split('.')[0]} minus the other arm (points)")
    handles = [Line2D([], [], color=c, marker="o", ls="", label=d) for d, c in colours.items() if d != "another block"]
    versus = sorted({r["b"].split(".")[0] for r in rows})
    handles += [Line2D([], [], color="black", marker="os"[k % 2], ls="", label=f"minus {v}") for k, v in enumerate(versus)]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # the legend below the panels, clear of every interval
    return fig
