"""Arms at equal total rollouts: is the probe worth its rollouts? Arms whose planned total
(``train.max_completions`` plus the probe charged to them, :func:`diffgrpo.params.budgets.planned_rollouts`)
is equal form one budget; within each budget the report's own contrasts of its arms are listed
(the contrasts section's rows, :func:`diffgrpo.analysis.uncertainty.pair_families`: Holm-adjusted
within each one's family, the declared question's or the budget's exploratory one).
An arm named ``<method>.<label>`` (``hard.b2``, ``all_posterior.b2``) is drawn as one line per
method across budgets. Each arm is ``offline`` (its selection read the probe, which it is
charged), ``online`` (selection inside training) or ``no probe`` (:func:`diffgrpo.train.ledger.arm_kind`).

**Rollouts to reach a target** (a method studied at two budgets or more): the target is the
largest gain any arm reaches at the smallest budget (its point estimate, then held fixed: "what
the cheapest budget buys at best"); per method, the total rollouts (the ledger's, the probe
charged; the plan's where a run predates the ledger) at which its gain first reaches it, by
linear interpolation between its budgets. Below its smallest budget nothing is measured, so a
method there already reads "at or below" that total; one that no budget brings there reads
"not reached within the budgets studied", never an extrapolation. The 95% interval is the
crossing per resample: every arm's gain drawn from the study's resamples of the test prompts
(shared by the arms) and its own seed part (:func:`diffgrpo.stats.intervals.draws`),
interpolated as the point is; its ends carry the same two censored readings. Arms whose runs are
one trajectory stopped at different budgets (a ``.b960`` run the prefix of its ``.b1920`` run,
:meth:`~diffgrpo.analysis.report.StudyReport.nested_arms`) are one training per seed, not two, but
not one number either: the later checkpoint has trained on more. A method's budgets' seed parts
are drawn jointly, normals correlated as the data say (:func:`seed_correlation`: each arm's
per-seed mean gains less their mean over seeds; for two budgets of one method, the products of their
deviations on the same seed, summed over every method and seed, over the root of the two sums of
squares: a pooled Pearson correlation r, and one per pair of budget labels shared by the methods),
the chi-square part of the pivot shared; the measured correlations (and how many pairs of arms and
seeds measure them) are printed in the table's note. With one seed (nothing to measure) they
share one seed part, as one training. The budgets table says how far each arm's runs went on which
schedule (``trained``: "5 of 60 steps (cosine)" is a prefix, not a 5-step schedule). One method is
named the cheapest only when its interval lies below every other method's (no overlap: a
conservative reading, not a test of each pair); else the words say the data cannot tell. The
arm that sets the target reaches it at the smallest budget by construction, and about half its
resamples fall short there: the upper end of its method's interval says so.

Writes ``budgets.csv`` / ``budgets.md`` (per budget and arm: rollouts spent, accuracy, gain with
its 95% interval), ``budget_contrasts.csv`` / ``.md``, ``rollouts_to_target.csv`` / ``.md`` (only
with a method at two budgets) and ``fig_accuracy_vs_rollouts.png``. Its part of ``summary.json``
(nothing for a study with no two arms at one budget)::

    {"budgets": {"<total>": {"arms": {arm: {"kind", "total_rollouts", "accuracy", "gain_pp", "ci95"}},
                             "contrasts": [{"a", "b", "diff_pp", "ci95", "p_holm", "decision"}],
                             "verdict": one sentence}},
     "rollouts_to_target": {"target": {"gain_pp", "accuracy", "budget", "set_by"},   # with a method at 2+ budgets
                            "methods": {method: {"kind", "totals", "rollouts", "reading", "ci95", "ci95_words"}},
                            "seed_correlation": {"r", "by_budget": {"<label> - <label>": r}, "pairs", "cells",
                                                 "words"},                           # r: null, no nested arms
                            "verdict": one sentence},                                # rollouts / ci95: null where
     "budgets_verdict": the verdict over every budget and the target, in words}      # not reached
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from diffgrpo.analysis.figures import method_lines
from diffgrpo.analysis.sections.compute import arm_rollouts
from diffgrpo.analysis.tables import DIGITS, method_of
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.stats import ALPHA
from diffgrpo.stats.intervals import draws, interval, mean_dist, seed_noise
from diffgrpo.store.artifacts import save_figure
from diffgrpo.train.ledger import arm_kind, planned_rollouts

TABLES = ("budgets", "budget_contrasts", "rollouts_to_target")
FIGURES = ("fig_accuracy_vs_rollouts",)
MIN_PAIR_CELLS = 9  # per-seed pairs a pair of budgets' own correlation needs (3 methods x 3 seeds); else the pooled r


def budgets(study) -> dict[int, list[str]]:
    """Planned total -> the study's arms (with complete runs) planned at it, where at least two are."""
    done = set(study.arms["strategy"])
    out: dict[int, list[str]] = {}
    for a in study.cfg.arms:
        total = planned_rollouts(study.cfg, a.name)
        if total is not None and a.name in done:
            out.setdefault(total, []).append(a.name)
    return {b: arms for b, arms in sorted(out.items()) if len(arms) >= 2}


def schedule(study, arm: str) -> str:
    """How far an arm's runs went on which schedule: "5 of 60 steps (cosine)". A run that a budget
    stops early is a prefix of its schedule, not a run of that many steps."""
    ms = [m for m in study.manifests if m["strategy"] == arm]
    done = sorted({int(m["steps_done"]) for m in ms})
    planned = sorted({int(m["max_steps"]) for m in ms if m.get("max_steps")})
    lr = sorted({str((m.get("key") or {}).get("train", {}).get("lr_scheduler", "?")) for m in ms})
    steps = "-".join(str(v) for v in (done[0], done[-1])) if len(done) > 1 else str(done[0]) if done else "?"
    return f"{steps} of {'/'.join(map(str, planned)) or '?'} steps ({'/'.join(lr)})"


def verdict(budget: int, table: pd.DataFrame, pairs: pd.DataFrame) -> str:
    """One sentence: the arm with the largest gain at this budget, and whether the data separate it."""
    best = table.sort_values("gain_pp", ascending=False).iloc[0]
    mine = pairs[(pairs["a"] == best["strategy"]) | (pairs["b"] == best["strategy"])]
    open_ = mine[mine["decision"] != "differs"]
    tied = sorted({x for a, b in zip(open_["a"], open_["b"]) for x in (a, b)} - {best["strategy"]})
    head = (f"At {budget:,} total rollouts {best['strategy']} ({best['kind']}) gains most, "
            f"{best['gain_pp']:+.1f} points [{best['ci_low']:+.1f}, {best['ci_high']:+.1f}]")
    if not tied:
        return head + ", ahead of every other arm at this budget (exploratory, Holm-adjusted within each contrast's family)."
    seen = open_["detectable_pp"]
    size = (f"{seen.min():.1f}" if np.isclose(seen.min(), seen.max(), atol=0.05) else f"{seen.min():.1f}-{seen.max():.1f}")
    return head + (f", but the data cannot tell it from {', '.join(tied)} (exploratory, Holm-adjusted within each contrast's "
                   f"family; differences "
                   f"of about {size} points were detectable with 80% power, smaller ones would go unseen).")


def plot(table: pd.DataFrame, metric: str) -> Figure:
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    method_lines(ax, table, "total_rollouts", "accuracy", "acc_low", "acc_high", method_of)
    ax.set(xlabel="total rollouts (probe charged + training generated; points dodged)",
           ylabel=f"{metric} (base + gain, 95% interval)")
    ax.legend(fontsize=7, ncol=2)
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
        t = spent.loc[arms].reset_index().assign(budget=budget, kind=[arm_kind(study.cfg, a) for a in arms],
                                                 trained=[schedule(study, a) for a in arms])
        t = t.assign(accuracy=base + t["gain_pp"] / 100, acc_low=base + t["ci_low"] / 100, acc_high=base + t["ci_high"] / 100)
        # the report's own contrasts between these arms (one number per contrast: Holm's within
        # the family each is in, the declared question's or the budget's exploratory one)
        p = study.pairs[study.pairs["a"].isin(arms) & study.pairs["b"].isin(arms)].reset_index(drop=True)
        tables.append(t)
        pairs.append(p)
        out[str(budget)] = {
            "arms": {r["strategy"]: {"kind": r["kind"], "trained": r["trained"], "total_rollouts": _round(r["total_rollouts"]),
                                     "accuracy": _round(r["accuracy"]), "gain_pp": _round(r["gain_pp"]),
                                     "ci95": [_round(r["ci_low"]), _round(r["ci_high"])]} for r in t.to_dict("records")},
            "contrasts": [{"a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]),
                           "ci95": [_round(r["ci_low"]), _round(r["ci_high"])], "p_holm": _round(r["p_holm"]),
                           "decision": r["decision"], "detectable_pp": _round(r["detectable_pp"])}
                          for r in p.to_dict("records")],
            "verdict": verdict(budget, t, p)}
    table, pair_table = pd.concat(tables, ignore_index=True), pd.concat(pairs, ignore_index=True)
    cols = ["budget", "strategy", "kind", "trained", "total_rollouts", "accuracy", "gain_pp", "ci_low", "ci_high"]
    study.write_table("budgets", f"Arms at equal total rollouts ({study.metric}; gain in points, 95% interval over "
                      f"{study.over})", table[cols].round(DIGITS))
    study.write_table("budget_contrasts", "Contrasts at equal total rollouts: gain of a minus gain of b (points), "
                      "the report's contrasts (contrasts.md), Holm-adjusted within each one's family (column `family`: the "
                      "declared question's, confirmatory, or the budget's own, exploratory)", pair_table.round(DIGITS))
    save_figure(plot(table, study.metric), study.out / "fig_accuracy_vs_rollouts.png")
    words = [v["verdict"] for v in out.values()]
    to_target = rollouts_to_target(study, table)
    if to_target:
        words.append(to_target["verdict"])
    return {"budgets": out, **({"rollouts_to_target": to_target} if to_target else {}), "budgets_verdict": " ".join(words)}


# ---- rollouts to reach a target -----------------------------------------------------------


def crossing(totals: np.ndarray, gains: np.ndarray, level: float) -> np.ndarray:
    """Where each row of ``gains`` (draws x budgets, at ``totals`` ascending) first reaches
    ``level``, by linear interpolation between budgets: ``totals[0]`` when the smallest budget
    reaches it already (read "at or below"), inf when no budget does (not reached)."""
    gains = np.atleast_2d(np.asarray(gains, float))
    reached = gains >= level
    first = reached.argmax(axis=1)
    if len(totals) == 1:
        return np.where(reached[:, 0], totals[0], np.inf)
    i, rows = np.maximum(first, 1), np.arange(len(gains))
    y0, y1 = gains[rows, i - 1], gains[rows, i]
    with np.errstate(divide="ignore", invalid="ignore"):
        between = totals[i - 1] + (level - y0) / (y1 - y0) * (totals[i] - totals[i - 1])
    return np.where(~reached.any(axis=1), np.inf, np.where(first == 0, totals[0], between))


def reading(v: float, totals: np.ndarray) -> str:
    """A crossing in words: "at or below" the smallest budget, a number, or not reached."""
    if np.isinf(v):
        return f"not reached within {totals[-1]:,.0f}"
    return f"at or below {totals[0]:,.0f}" if v <= totals[0] else f"{v:,.0f}"


def nested_groups(study, table: pd.DataFrame) -> list[list[str]]:
    """A method's budgets that are one trajectory per seed: the groups of :meth:`~diffgrpo.analysis.
    report.StudyReport.nested_arms` split by method (``random.b576`` and ``random_charged.b576`` may
    be prefixes of one run; each method's line is drawn on its own), two of ``table``'s arms or
    more, each by total rollouts."""
    totals = table.set_index("strategy")["total_rollouts"].fillna(table.set_index("strategy")["budget"])
    out = []
    for group in study.nested_arms():
        mine = [a for a in group if a in totals.index]
        for method in dict.fromkeys(map(method_of, mine)):
            arms = sorted((a for a in mine if method_of(a) == method), key=lambda a: (totals[a], a))
            if len(arms) > 1:
                out.append(arms)
    return out


def _label(arm: str) -> str:
    """An arm ``<method>.<label>``'s budget label (``hard.b960`` -> ``b960``); else the arm."""
    return arm.split(".", 1)[1] if "." in arm else arm


def seed_correlation(scores, groups: list[list[str]]) -> dict:
    """The per-seed correlation of a method's budgets' gains, measured: for each group of ``groups``
    (one method's arms whose runs are one trajectory per seed, :func:`nested_groups`), each arm's
    mean gain over the test prompts per seed (``scores``: :class:`~diffgrpo.analysis.report.Scores`;
    the seeds every arm of the group ran) less its mean over those seeds; for every pair of the
    group's arms, the two deviations' product per seed. ``r``: their sum over the root of the two
    sums of squares, over every pair and group (one pooled Pearson correlation; None where no pair
    has a spread: one seed, or seeds that agree); ``by_budget``: the same per pair of budget labels
    (``"b576 - b960"``, the smaller budget first) measured on :data:`MIN_PAIR_CELLS` per-seed
    pairs or more (the methods share the labels), which the draws use where there, ``r`` elsewhere;
    ``pairs``: the pairs of arms, ``cells``: pairs x seeds. ``words``: both in a sentence."""
    sums: dict[str, list[float]] = {}
    pairs = cells = 0
    for group in groups:
        seeds = sorted(set.intersection(*(set(scores.seeds(a)) for a in group)))
        if len(seeds) < 2:
            continue
        dev = {a: (g := 100.0 * (scores.at(a, seeds=seeds) - scores.base[:, None]).mean(axis=0)) - g.mean()
               for a in group}
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                acc = sums.setdefault(f"{_label(a)} - {_label(b)}", [0.0, 0.0, 0.0, 0])
                acc[0] += float(dev[a] @ dev[b])
                acc[1] += float(dev[a] @ dev[a])
                acc[2] += float(dev[b] @ dev[b])
                acc[3] += len(seeds)
                pairs, cells = pairs + 1, cells + len(seeds)

    def pearson(num, left, right):
        return float(np.clip(num / np.sqrt(left * right), -1, 1)) if left > 0 and right > 0 else None

    total = np.sum([v[:3] for v in sums.values()], axis=0) if sums else np.zeros(3)
    r = pearson(*total)
    by = {k: round(v, DIGITS) for k, acc in sums.items()
          if acc[3] >= MIN_PAIR_CELLS and (v := pearson(*acc[:3])) is not None}
    if not groups:
        words = "no method's budgets here are one trajectory: every arm's seed part is drawn apart"
    elif r is None:
        words = ("a method's budgets (one trajectory per seed) have no seed spread to measure their correlation: "
                 "drawn with one seed part")
    else:
        words = (f"a method's budgets (one trajectory per seed, stopped at different budgets) are drawn with the "
                 f"per-seed correlation of their gains measured here, r = {r:.2f} pooled over {pairs} pairs of "
                 f"budgets x seeds ({cells} per-seed mean gains, each less its arm's mean over seeds)"
                 + (f"; by pair of budgets {', '.join(f'{k} {v:.2f}' for k, v in by.items())}" if by else ""))
    return {"r": None if r is None else round(r, DIGITS), "by_budget": by, "pairs": pairs, "cells": cells,
            "words": words}


def correlation_matrix(group: list[str], corr: dict) -> np.ndarray:
    """The correlation matrix of ``group``'s seed parts (:func:`seed_correlation`'s ``by_budget``
    where it has the pair, its ``r`` elsewhere), made positive semidefinite where the pairs'
    estimates disagree (negative eigenvalues set to 0, the diagonal rescaled to 1)."""
    m = len(group)
    mat = np.eye(m)
    for i in range(m):
        for j in range(i + 1, m):
            mat[i, j] = mat[j, i] = corr["by_budget"].get(f"{_label(group[i])} - {_label(group[j])}", corr["r"])
    w, v = np.linalg.eigh(mat)
    if w.min() < 0:
        mat = (v * np.clip(w, 0, None)) @ v.T
        d = np.sqrt(np.clip(np.diag(mat), 1e-12, None))
        mat = mat / np.outer(d, d)
    return mat


def joint_seed_noise(rng: np.random.Generator, size: int, groups: list[list[str]],
                     corr: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per arm of ``groups``, the normals and uniforms of its ``size`` seed-part draws
    (:func:`diffgrpo.stats.intervals.seed_noise`): within a group the normals drawn jointly with the
    measured correlation matrix (:func:`correlation_matrix`, through its symmetric square root) and
    the uniforms (the pivot's chi-square) shared; with no correlation measured (``corr["r"]`` None)
    the same normals (one seed part). Arms in no group are not keys: they draw their own."""
    out = {}
    for group in groups:
        z, u = seed_noise(rng, size)
        if corr["r"] is None:
            out |= {a: (z, u) for a in group}
            continue
        w, v = np.linalg.eigh(correlation_matrix(group, corr))
        root = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
        normals = np.column_stack([z, rng.standard_normal((size, len(group) - 1))]) @ root
        out |= {a: (normals[:, i], u) for i, a in enumerate(group)}
    return out


def target_rows(study, table: pd.DataFrame) -> tuple[dict, pd.DataFrame] | None:
    """The target (the largest gain at the smallest budget) and, per method studied at two
    budgets or more, its totals, the crossing and its interval; None without such a method."""
    table = table.assign(method=table["strategy"].map(method_of),
                         totals=table["total_rollouts"].fillna(table["budget"]).astype(float))
    if table.groupby("method")["budget"].nunique().max() < 2:
        return None
    smallest = table[table["budget"] == table["budget"].min()].sort_values("gain_pp", ascending=False).iloc[0]
    target = {"gain_pp": float(smallest["gain_pp"]), "accuracy": float(smallest["accuracy"]),
              "budget": int(smallest["budget"]), "set_by": smallest["strategy"]}
    rng, rows = np.random.default_rng([study.cfg.analyze.seed, 31]), []
    groups = nested_groups(study, table)
    noise = joint_seed_noise(rng, study.boot.n_boot, groups, seed_correlation(study.scores, groups))
    for method, g in table.groupby("method", sort=False):
        g = g.sort_values("totals")
        totals = g["totals"].to_numpy(float)
        gains = [draws(mean_dist(100.0 * (study.scores.at(a) - study.scores.base[:, None]), study.boot), rng,
                       noise.get(a)) for a in g["strategy"]]
        point = float(crossing(totals, g["gain_pp"].to_numpy(float)[None, :], target["gain_pp"])[0])
        lo, hi = interval(crossing(totals, np.column_stack(gains), target["gain_pp"]), 1 - ALPHA, method="inverted_cdf")
        rows.append({"method": method, "kind": g["kind"].iloc[0], "totals": [_round(t) for t in totals],
                     "rollouts": point, "ci_low": lo, "ci_high": hi, "reading": reading(point, totals),
                     "ci95_words": f"[{reading(lo, totals)}, {reading(hi, totals)}]"})
    return target, pd.DataFrame(rows).sort_values("rollouts", kind="stable").reset_index(drop=True)


def target_verdict(target: dict, rows: pd.DataFrame, over: str) -> str:
    """One sentence: the method that reaches the target with fewest rollouts, when its interval
    lies below every other's, or that the intervals overlap."""
    best, others = rows.iloc[0], rows.iloc[1:]
    head = (f"To reach a gain of {target['gain_pp']:+.1f} points (the most any arm gains at the smallest budget, "
            f"{target['set_by']} at {target['budget']:,} total rollouts), {best['method']} needs the fewest on the point "
            f"estimates, {best['reading']} {best['ci95_words']}")
    tied = others[others["ci_low"] <= best["ci_high"]]["method"].tolist()
    if not tied:
        return head + f", and its 95% interval lies below every other method's ({over})."
    return head + (f", but its 95% interval overlaps {', '.join(tied)}'s: the data cannot tell which method gets "
                   f"there with fewest rollouts ({over}).")


def rollouts_to_target(study, table: pd.DataFrame) -> dict | None:
    """Writes ``rollouts_to_target`` and returns its part of ``summary.json`` (module docstring);
    None, writing nothing, without a method studied at two budgets."""
    found = target_rows(study, table)
    if found is None:
        return None
    target, rows = found
    corr = seed_correlation(study.scores, nested_groups(study, table))
    line = target_verdict(target, rows, f"95% intervals over {study.over}")
    study.write_table("rollouts_to_target", f"Total rollouts (the probe charged) to reach a gain of "
                      f"{target['gain_pp']:+.2f} points ({study.metric} {target['accuracy']:.4f}), the most any arm "
                      f"gains at the smallest budget ({target['set_by']}, {target['budget']:,}); linear between a "
                      "method's budgets, 95% interval over resamples (blank: not reached, in words beside it)",
                      rows.assign(totals=rows["totals"].map(lambda t: ", ".join(f"{v:,.0f}" for v in t)))
                      .replace(np.inf, np.nan).round(DIGITS), f"{line} Resamples: {corr['words']}.")
    finite = lambda v: _round(v) if np.isfinite(v) else None  # noqa: E731
    return {"target": {k: _round(v) if isinstance(v, float) else v for k, v in target.items()},
            "methods": {r["method"]: {"kind": r["kind"], "totals": r["totals"], "rollouts": finite(r["rollouts"]),
                                      "reading": r["reading"], "ci95": [finite(r["ci_low"]), finite(r["ci_high"])],
                                      "ci95_words": r["ci95_words"]} for r in rows.to_dict("records")},
            "seed_correlation": corr, "verdict": line}
