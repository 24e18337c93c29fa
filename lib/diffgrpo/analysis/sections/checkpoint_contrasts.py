"""Paired contrasts at every evaluated checkpoint: "hard is ahead by checkpoint 300" (paper 003)
as a tested statement. Where ``evaluate.checkpoints`` evaluates several checkpoints, each pair
of arms is contrasted at each checkpoint both evaluated in every seed: the difference of their
accuracies (that of their gains: the base model is shared), in points, paired on the test
prompts and the seeds both ran, with its 95% interval and Holm's step-down across every
checkpoint x pair of its family (the arms; against a control), as the contrasts section
decides its own (:func:`diffgrpo.analysis.uncertainty.decide`).

Pairs: the reference arm, the one whose selection policy is ``hard`` (003's claim is about
it), against every other arm; a study without one: every pair of arms, as the contrasts
section pairs them. A lead is **established from checkpoint N** when at N and at every later
checkpoint Holm's decision is ``differs`` with the same arm ahead; it is **never established**
when the last checkpoint's contrast is not ``differs``. A pair "ahead by N" at its first
significant checkpoint but not after it is not ahead from N: the lead has to stay.

Writes ``checkpoint_contrasts.csv`` / ``.md`` and ``fig_checkpoint_contrasts.png`` (each
pair's contrast against the training step, a band for its 95% interval), nothing for a study
whose pairs share fewer than two evaluated checkpoints (``evaluate.checkpoints: final``). Its
part of ``summary.json`` (``{}`` then)::

    {"checkpoint_contrasts": {"reference": the reference arm or null (every pair),
                              "holm": what each Holm family spans,
                              "leads": [{"a", "b", "family", "ahead", "from_step", "words"}],
                              "rows": [{"step", "a", "b", "family", "diff_pp", "ci95", "p", "p_holm",
                                        "decision", "n_seeds"}]}}
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from diffgrpo.analysis.papers import arm_selecting
from diffgrpo.analysis.tables import DIGITS, arm_order
from diffgrpo.analysis.uncertainty import _round, decide
from diffgrpo.store.artifacts import save_figure

TABLES = ("checkpoint_contrasts",)
FIGURES = ("fig_checkpoint_contrasts",)
REFERENCE_POLICY = "hard"  # 003: "hard is ahead by checkpoint 300"


def pairs_of(cfg, arms: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    """The reference arm (policy ``hard``) and its pairs with every other arm, or None and every pair."""
    ref = arm_selecting(cfg, REFERENCE_POLICY, set(arms))
    if ref is not None:
        return ref, [(ref, b) for b in arms if b != ref]
    return None, [(a, b) for i, a in enumerate(arms) for b in arms[i + 1:]]


def by_checkpoint(scores, boot, pairs: list[tuple[str, str]], control=()) -> pd.DataFrame:
    """Per pair (a, b) and checkpoint both evaluated in every common seed (pairs with two or
    more of them): a - b in points with its interval, p and Holm's decision across the
    checkpoints x pairs of each family; an empty frame when no pair has two checkpoints."""
    rows, diffs = [], []
    for a, b in pairs:
        seeds = sorted(set(scores.seeds(a)) & set(scores.seeds(b)))
        steps = sorted(set(scores.steps(a)) & set(scores.steps(b))) if seeds else []
        if len(steps) < 2:
            continue
        for step in steps:
            diff = 100.0 * (scores.at(a, step, seeds) - scores.at(b, step, seeds))
            rows.append({"step": int(step), "a": a, "b": b, "family": "control" if {a, b} & set(control) else "arms",
                         "question": "exploratory",  # a lead's timing: never the declared question's test
                         "diff_pp": float(diff.mean()), "n_seeds": len(seeds)})
            diffs.append(diff)
    if not rows:
        return pd.DataFrame()
    return decide(pd.DataFrame(rows), diffs, boot)


def lead(g: pd.DataFrame, family_size: int) -> dict:
    """One pair's rows (every checkpoint): the arm ahead and the first checkpoint from which
    its lead is ``differs`` at every later one, with the words; ``ahead`` None: never established.
    ``family_size``: the contrasts Holm's step-down spans in the pair's family."""
    g = g.sort_values("step")
    a, b, last = g["a"].iloc[0], g["b"].iloc[0], g.iloc[-1]
    m = f"Holm-adjusted across {family_size} checkpoint contrasts"
    if last["decision"] != "differs":
        return {"a": a, "b": b, "family": last["family"], "ahead": None, "from_step": None,
                "words": f"{a} vs {b}: a lead is never established (last checkpoint {int(last['step'])}: "
                         f"{last['diff_pp']:+.1f} [{last['ci_low']:+.1f}, {last['ci_high']:+.1f}] points, "
                         f"{last['decision']}; {m})"}
    sign = np.sign(last["diff_pp"])
    held = ((g["decision"] == "differs") & (np.sign(g["diff_pp"]) == sign)).to_numpy()
    k = len(held)
    while k > 0 and held[k - 1]:
        k -= 1
    first = g.iloc[k]
    ahead, behind = (a, b) if sign > 0 else (b, a)
    lo, hi = sorted(sign * first[c] for c in ("ci_low", "ci_high"))
    return {"a": a, "b": b, "family": last["family"], "ahead": ahead, "from_step": int(first["step"]),
            "words": f"{ahead} is ahead of {behind} from checkpoint {int(first['step'])} on "
                     f"({sign * first['diff_pp']:+.1f} [{lo:+.1f}, {hi:+.1f}] points there; {m})"}


def plot(rows: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for (a, b), g in rows.groupby(["a", "b"], sort=False):
        g = g.sort_values("step")
        line, = ax.plot(g["step"], g["diff_pp"], marker="o", label=f"{a} - {b}")
        ax.fill_between(g["step"], g["ci_low"], g["ci_high"], color=line.get_color(), alpha=0.2)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="checkpoint (training step)", ylabel="accuracy of a minus b (points), 95% interval")
    ax.legend(fontsize=7)
    return fig


def write(study) -> dict:
    arms = arm_order(s for s, _ in study.scores.runs)
    ref, pairs = pairs_of(study.cfg, arms)
    rows = by_checkpoint(study.scores, study.boot, pairs, study.control)
    if rows.empty:
        return {}
    size = rows["family"].map(rows["family"].value_counts())
    leads = [lead(g, int(size[g.index[0]])) for _, g in rows.groupby(["a", "b"], sort=False)]
    holm = {f: f"{len(g)} contrasts: {g['step'].nunique()} checkpoints x {len(g.groupby(['a', 'b']))} pairs"
            for f, g in rows.groupby("family", sort=False)}
    cols = ["step", "a", "b", "family", "question", "diff_pp", "ci_low", "ci_high", "p", "p_holm", "decision", "n_seeds", "resamples"]
    who = f"{ref} (policy {REFERENCE_POLICY}) against every other arm" if ref else "every pair of arms"
    study.write_table("checkpoint_contrasts", f"Contrasts at every checkpoint, {who}: accuracy of a minus b (points, "
                      f"{study.metric}), paired on test prompts and seeds, 95% interval over {study.over}; Holm's "
                      "step-down across the checkpoints x pairs of each family; exploratory (a declared question is "
                      "tested at the final checkpoint alone: contrasts.md)",
                      rows[cols].round(DIGITS), "\n".join(f"- {x['words']}" for x in leads))
    save_figure(plot(rows), study.out / "fig_checkpoint_contrasts.png")
    return {"checkpoint_contrasts": {
        "reference": ref, "holm": holm, "leads": leads,
        "rows": [{"step": r["step"], "a": r["a"], "b": r["b"], "family": r["family"], "diff_pp": _round(r["diff_pp"]),
                  "ci95": [_round(r["ci_low"]), _round(r["ci_high"])], "p": _round(r["p"]),
                  "p_holm": _round(r["p_holm"]), "decision": r["decision"], "n_seeds": int(r["n_seeds"])}
                 for r in rows.to_dict("records")]}}
