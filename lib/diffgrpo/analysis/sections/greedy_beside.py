"""Greedy accuracy beside the study's metric: where ``analyze.metric`` is not greedy accuracy
(``pass@1`` over ``evaluate.n_samples`` samples, avg@k: docs/statistics.md), each arm's gain and
each contrast of the declared question (every contrast, where none is declared) computed again
from the same runs' greedy answers, by the same test (:func:`diffgrpo.analysis.uncertainty.
contrasts`: the same families, Holm, intervals and detectable size), beside the metric's. The
verdict is the metric's; this says whether greedy decoding tells the same story, and how much
wider its intervals are. Written only where the metric is not greedy and the evaluations hold
greedy answers.

Writes ``greedy_beside.csv`` / ``greedy_beside.md``. Its part of ``summary.json``::

    {"greedy_beside": {"metric", "arms": {arm: {"gain_pp", "greedy_gain_pp"}},
                       "contrasts": [{"a", "b", "diff_pp", "ci95", "decision", "detectable_pp",
                                      "greedy_diff_pp", "greedy_ci95", "greedy_decision",
                                      "greedy_detectable_pp"}], "words"}}
"""

from __future__ import annotations

import pandas as pd

from diffgrpo.analysis.tables import DIGITS
from diffgrpo.analysis.uncertainty import PRIMARY, _round, contrasts
from diffgrpo.store import layout

TABLES = ("greedy_beside",)
FIGURES = ()
GREEDY = "greedy_acc"


def write(study) -> dict:
    if study.metric == GREEDY or not len(study.pairs):
        return {}
    from diffgrpo.analysis.report import Scores, collect_runs, contrast_plan

    root = layout.study_dir(study.cfg)
    runs = collect_runs(root, GREEDY, [layout.run_id(a, s) for a, s in zip(study.runs["strategy"], study.runs["seed"])])
    try:
        scores = Scores(root, runs, GREEDY)
    except ValueError:  # evaluations without greedy answers (evaluate.greedy: false)
        return {}
    greedy = contrasts(scores, study.boot, study.control, **contrast_plan(study.cfg))
    pairs = study.pairs
    shown = pairs[pairs["family"] == PRIMARY] if (pairs["family"] == PRIMARY).any() else pairs
    g = greedy.set_index(["a", "b"])
    rows = []
    for r in shown.to_dict("records"):
        o = g.loc[(r["a"], r["b"])]
        rows.append({"a": r["a"], "b": r["b"], "family": r["family"], "diff_pp": r["diff_pp"], "ci_low": r["ci_low"],
                     "ci_high": r["ci_high"], "decision": r["decision"], "detectable_pp": r["detectable_pp"],
                     "greedy_diff_pp": o["diff_pp"], "greedy_ci_low": o["ci_low"], "greedy_ci_high": o["ci_high"],
                     "greedy_decision": o["decision"], "greedy_detectable_pp": o["detectable_pp"]})
    table = pd.DataFrame(rows)
    agree = int((table["decision"] == table["greedy_decision"]).sum())
    width = ((table["greedy_ci_high"] - table["greedy_ci_low"]) / (table["ci_high"] - table["ci_low"])).median()
    which = "the declared question's" if shown is not pairs else "every"
    words = (f"Greedy accuracy beside {study.metric}: {which} {len(table)} contrast(s) tested again on the same runs' "
             f"greedy answers by the same test; the decision agrees for {agree} of {len(table)}; greedy's intervals are "
             f"{width:.1f}x as wide (median) and its detectable sizes "
             f"{table['greedy_detectable_pp'].median():.1f} against {table['detectable_pp'].median():.1f} points (median)")
    study.write_table("greedy_beside", f"Greedy accuracy beside the study's metric ({study.metric}): gains in points, "
                      "a - b, each by the same paired test", table.round(DIGITS), words)
    gains = study.runs.groupby("strategy")["gain_pp"].mean()
    ggains = runs.groupby("strategy")["gain_pp"].mean()
    return {"greedy_beside": {
        "metric": study.metric,
        "arms": {a: {"gain_pp": _round(gains[a]), "greedy_gain_pp": _round(ggains.get(a, float("nan")))} for a in gains.index},
        "contrasts": [{"a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]), "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
                       "decision": r["decision"], "detectable_pp": _round(r["detectable_pp"]),
                       "greedy_diff_pp": _round(r["greedy_diff_pp"]),
                       "greedy_ci95": [_round(r["greedy_ci_low"]), _round(r["greedy_ci_high"])],
                       "greedy_decision": r["greedy_decision"], "greedy_detectable_pp": _round(r["greedy_detectable_pp"])}
                      for r in rows],
        "words": words}}
