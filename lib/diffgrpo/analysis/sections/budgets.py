"""Arms at equal total rollouts: is the probe worth its rollouts? Arms whose planned total
(``train.max_completions`` plus the probe charged to them, :func:`diffgrpo.train.ledger.planned_rollouts`)
is equal form one budget; within each budget every pair of arms is contrasted on the same test
prompts and seeds, Holm-adjusted within the budget (:func:`diffgrpo.analysis.uncertainty.contrasts`).
An arm named ``<method>.<label>`` (``hard.b2``, ``all_posterior.b2``) is drawn as one line per
method across budgets. Each arm is ``offline`` (its selection read the probe, which it is
charged), ``online`` (selection inside training) or ``no probe`` (:func:`diffgrpo.train.ledger.arm_kind`).

Writes ``budgets.csv`` / ``budgets.md`` (per budget and arm: rollouts spent, accuracy, gain with
its 95% interval), ``budget_contrasts.csv`` / ``.md`` and ``fig_accuracy_vs_rollouts.png``. Its part
of ``summary.json`` (nothing for a study with no two arms at one budget)::

    {"budgets": {"<total>": {"arms": {arm: {"kind", "total_rollouts", "accuracy", "gain_pp", "ci95"}},
                             "contrasts": [{"a", "b", "diff_pp", "ci95", "p_holm", "decision"}],
                             "verdict": one sentence}},
     "budgets_verdict": the verdict over every budget, in words}
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from diffgrpo.analysis.sections.compute import arm_rollouts
from diffgrpo.analysis.tables import DIGITS
from diffgrpo.analysis.uncertainty import _round, contrasts
from diffgrpo.store.artifacts import save_figure
from diffgrpo.train.ledger import arm_kind, planned_rollouts

TABLES = ("budgets", "budget_contrasts")
FIGURES = ("fig_accuracy_vs_rollouts",)


def budgets(study) -> dict[int, list[str]]:
    """Planned total -> the study's arms (with complete runs) planned at it, where at least two are."""
    done = set(study.arms["strategy"])
    out: dict[int, list[str]] = {}
    for a in study.cfg.arms:
        total = planned_rollouts(study.cfg, a.name)
        if total is not None and a.name in done:
            out.setdefault(total, []).append(a.name)
    return {b: arms for b, arms in sorted(out.items()) if len(arms) >= 2}


def verdict(budget: int, table: pd.DataFrame, pairs: pd.DataFrame) -> str:
    """One sentence: the arm with the largest gain at this budget, and whether the data separate it."""
    best = table.sort_values("gain_pp", ascending=False).iloc[0]
    mine = pairs[(pairs["a"] == best["strategy"]) | (pairs["b"] == best["strategy"])]
    tied = sorted({x for a, b in zip(mine["a"], mine["b"]) for x in (a, b)} - {best["strategy"]}
                  - set(mine.loc[mine["decision"] == "differs", ["a", "b"]].stack()))
    head = (f"At {budget:,} total rollouts {best['strategy']} ({best['kind']}) gains most, "
            f"{best['gain_pp']:+.1f} points [{best['ci_low']:+.1f}, {best['ci_high']:+.1f}]")
    if not tied:
        return head + ", ahead of every other arm at this budget (Holm-adjusted)."
    return head + f", but the data cannot tell it from {', '.join(tied)} (Holm-adjusted within the budget)."


def plot(table: pd.DataFrame, metric: str) -> Figure:
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for method, g in table.assign(method=table["strategy"].str.split(".").str[0]).groupby("method", sort=False):
        g = g.sort_values("total_rollouts")
        ax.errorbar(g["total_rollouts"], g["accuracy"], yerr=[g["accuracy"] - g["acc_low"], g["acc_high"] - g["accuracy"]],
                    marker="o", capsize=3, label=f"{method} ({g['kind'].iloc[0]})")
    ax.set(xlabel="total rollouts (probe charged + training generated)", ylabel=f"{metric} (base + gain, 95% interval)")
    ax.legend(fontsize=7)
    return fig


def write(study) -> dict:
    groups = budgets(study)
    if not groups:
        study.write_table("budgets", "Arms at equal total rollouts", pd.DataFrame(),
                          "No two arms share a planned total-rollout budget (train.max_completions per arm, plus the "
                          "probe charged): nothing to compare at equal budget.")
        study.write_table("budget_contrasts", "Contrasts at equal total rollouts", pd.DataFrame())
        return {}
    base = float(study.runs["base_acc"].iloc[0])
    spent = arm_rollouts(study).set_index("strategy")
    tables, pairs, out = [], [], {}
    for budget, arms in groups.items():
        t = spent.loc[arms].reset_index().assign(budget=budget, kind=[arm_kind(study.cfg, a) for a in arms])
        t = t.assign(accuracy=base + t["gain_pp"] / 100, acc_low=base + t["ci_low"] / 100, acc_high=base + t["ci_high"] / 100)
        p = contrasts(study.scores.only(arms), study.boot, study.control).assign(family=f"budget {budget}")
        tables.append(t)
        pairs.append(p)
        out[str(budget)] = {
            "arms": {r["strategy"]: {"kind": r["kind"], "total_rollouts": _round(r["total_rollouts"]),
                                     "accuracy": _round(r["accuracy"]), "gain_pp": _round(r["gain_pp"]),
                                     "ci95": [_round(r["ci_low"]), _round(r["ci_high"])]} for r in t.to_dict("records")},
            "contrasts": [{"a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]),
                           "ci95": [_round(r["ci_low"]), _round(r["ci_high"])], "p_holm": _round(r["p_holm"]),
                           "decision": r["decision"]} for r in p.to_dict("records")],
            "verdict": verdict(budget, t, p)}
    table, pair_table = pd.concat(tables, ignore_index=True), pd.concat(pairs, ignore_index=True)
    cols = ["budget", "strategy", "kind", "total_rollouts", "accuracy", "gain_pp", "ci_low", "ci_high"]
    study.write_table("budgets", f"Arms at equal total rollouts ({study.metric}; gain in points, 95% interval over "
                      f"{study.over})", table[cols].round(DIGITS))
    study.write_table("budget_contrasts", "Contrasts at equal total rollouts: gain of a minus gain of b (points), "
                      "Holm-adjusted within each budget", pair_table.round(DIGITS))
    save_figure(plot(table, study.metric), study.out / "fig_accuracy_vs_rollouts.png")
    return {"budgets": out, "budgets_verdict": " ".join(v["verdict"] for v in out.values())}
