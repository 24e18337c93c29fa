"""The report's uncertainty: every arm's gain and every pair's paired contrast with its interval,
p-value and Holm's decision in named families, Figure 2's bands, and the one-line verdict that names a
best arm only when Holm's decisions support it. The statistics themselves (the distribution of a
prompts x seeds mean, the seed part pooled across the study's contrasts, Holm's step-down, the
detectable difference) are :mod:`diffgrpo.stats`; this module forms the report's contrasts from its
:class:`~diffgrpo.analysis.report.Scores` and says what they show.

Holm's families (:func:`pair_families`): the study's declared question (``analyze.primary``),
**confirmatory**, adjusted among its own contrasts alone; then, **exploratory**, the contrasts among
the arms that train on the verifier's reward and, apart, each arm against a control arm (whose
contrasts would otherwise dilute the arms' own), each split by total-rollout budget where the
study's arms have several: no family mixes budgets, and pairs of arms at different budgets are not
formed unless ``analyze.across_budgets`` (their own family). Every table labels each contrast's
family and whether it is confirmatory. The seed parts pool across all the contrasts one call
forms (every family; a budget's arms; every checkpoint of every pair), and the arms' gains across
the arms (:mod:`diffgrpo.stats.pooling`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from diffgrpo.analysis.tables import DIGITS, METRIC_NAMES, arm_order
from diffgrpo.stats import ALPHA
from diffgrpo.stats.holm import MAX_REFINE, holm, holm_step_down
from diffgrpo.stats.intervals import Bootstrap, mean_dist
from diffgrpo.stats.pooling import pair_units, pooled_dists

#: Holm's families, in the report's words (a budget's: "<family> at <N> rollouts")
FAMILIES = {"primary": "the study's declared question (analyze.primary): confirmatory",
            "arms": "pairs of arms that train on the verifier's reward: exploratory",
            "control": "each arm against a control arm, whose reward ignores the answer: exploratory",
            "across budgets": "pairs of arms at different total-rollout budgets (analyze.across_budgets): exploratory"}
PRIMARY = "primary"


def family_what(family: str) -> str:
    """A family's description in the report's words (:data:`FAMILIES`)."""
    base, _, budget = family.partition(" at ")
    what = FAMILIES[base]
    return f"{what.replace(': exploratory', '')}, at {budget}: exploratory" if budget else what


def pair_families(arms: list[str], control: Iterable[str] = (), budget_of: dict[str, int | None] | None = None,
                  primary: Iterable[tuple[str, str]] = (), across_budgets: bool = False) -> list[tuple[str, str, str]]:
    """The contrasts a report forms, (a, b, family) in order: the declared ``primary`` pairs first
    (as declared), then every other pair of ``arms`` in their order, in family ``control`` (with a
    ``control`` arm) or ``arms``, suffixed " at <N> rollouts" where ``budget_of`` (arm -> planned
    total rollouts, :func:`diffgrpo.params.budgets.planned_rollouts`) gives the arms more than one
    budget; a pair across budgets is left out, or with ``across_budgets`` in family ``across budgets``."""
    control, budget_of = set(control), dict(budget_of or {})
    primary = [tuple(p) for p in primary]
    declared = {frozenset(p) for p in primary}
    split = len({budget_of.get(a) for a in arms}) > 1
    out = [(a, b, PRIMARY) for a, b in primary]
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            if frozenset((a, b)) in declared:
                continue
            family = "control" if {a, b} & control else "arms"
            if split:
                ba, bb = budget_of.get(a), budget_of.get(b)
                if ba != bb:
                    if not across_budgets:
                        continue
                    family = "across budgets"
                else:
                    family = f"{family} at {ba} rollouts" if ba is not None else f"{family} at no budget"
            out.append((a, b, family))
    return out


def _round(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), DIGITS)


def arm_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Per arm: mean gain over seeds (points, final checkpoint vs base) and its 95% interval, the
    seed parts pooled across the arms (:func:`diffgrpo.stats.pooling.pooled_dists`)."""
    arms = arm_order(s for s, _ in scores.runs)
    gains = [100.0 * (scores.at(arm) - scores.base[:, None]) for arm in arms]
    dists = pooled_dists(gains, np.eye(len(gains)), boot) if gains else []
    rows = []
    for arm, gain, dist in zip(arms, gains, dists):
        lo, hi = dist.interval()
        rows.append({"strategy": arm, "gain_pp": float(gain.mean()), "ci_low": lo, "ci_high": hi,
                     "n_seeds": gain.shape[1]})
    return pd.DataFrame(rows)



CONTRAST_COLUMNS = ["a", "b", "family", "question", "diff_pp", "ci_low", "ci_high", "p", "p_mc_se", "resamples", "n_seeds",
                    "detectable_pp"]


def contrasts(scores: Scores, boot: Bootstrap, control: Iterable[str] = (), alpha: float = ALPHA,
              max_refine: int = MAX_REFINE, *, budget_of: dict[str, int | None] | None = None,
              primary: Iterable[tuple[str, str]] = (), across_budgets: bool = False,
              keep: list | None = None) -> pd.DataFrame:
    """The pairs of arms :func:`pair_families` forms, each paired on the same test prompts and the
    seeds both ran: difference of gains in points (a - b), its interval, p-value (with its Monte
    Carlo error and the resamples it took), and Holm's within its family; ``question``:
    confirmatory (the declared ``primary``) or exploratory. ``decision``: differs / not
    distinguishable / undecided, by Holm's step-down (:func:`decide`). A declared pair whose arms
    share no complete seed is named (ValueError), not dropped."""
    arms = arm_order(s for s, _ in scores.runs)
    primary = [p for p in primary if set(p) <= set(arms)]
    rows, diffs = [], []
    for a, b, family in pair_families(arms, control, budget_of, primary, across_budgets):
        common = sorted(set(scores.seeds(a)) & set(scores.seeds(b)))
        if not common:
            if family == PRIMARY:
                raise ValueError(f"analyze.primary declares {a} - {b}, but the two arms share no complete seed")
            continue
        diff = 100.0 * (scores.at(a, seeds=common) - scores.at(b, seeds=common))
        rows.append({"a": a, "b": b, "family": family,
                     "question": "confirmatory" if family == PRIMARY else "exploratory",
                     "diff_pp": float(diff.mean()), "n_seeds": len(common)})
        diffs.append(diff)
    return decide(pd.DataFrame(rows, columns=CONTRAST_COLUMNS), diffs, boot, alpha, max_refine, keep)


def decide(out: pd.DataFrame, diffs: list[np.ndarray], boot: Bootstrap, alpha: float = ALPHA,
           max_refine: int = MAX_REFINE, keep: list | None = None) -> pd.DataFrame:
    """The intervals, p-values and Holm's decisions of paired contrasts: ``out`` has a row per
    contrast (a ``family`` column among its own; a RangeIndex), ``diffs`` its prompts x seeds
    differences in points. Holm's step-down runs within each family (:func:`holm_step_down`:
    resamples are spent only on the p that decides a step); adds ``ci_low``, ``ci_high``, ``p``,
    ``p_mc_se``, ``resamples``, ``p_holm``, ``excludes_zero``, ``decision``, ``undecided``,
    ``significant_holm``, and ``detectable_pp``: the smallest true difference this contrast would be
    found with 80% power at Holm's first-step threshold (alpha / the family's size; later steps
    are less strict), the test inverted from its own variance components
    (:meth:`~diffgrpo.stats.intervals.MeanDist.detectable`): beside a "not distinguishable", the
    size the study could have seen. The seed parts pool across every row of ``out`` (its ``a``
    and ``b`` name each contrast's arms: :mod:`diffgrpo.stats.pooling`). ``keep``: a list that
    receives each row's :class:`~diffgrpo.stats.intervals.MeanDist`, in row order."""
    out = out.copy()
    units = pair_units(list(zip(out["a"], out["b"]))) if len(out) else np.zeros((0, 0))
    blocks, dists = [1] * len(diffs), pooled_dists(diffs, units, boot) if diffs else []
    seeds = [d.seed for d in dists]

    def p_of(i: int, refine: bool):
        if refine:
            if 2 * blocks[i] > max_refine:
                return None
            blocks[i] *= 2
            dists[i] = mean_dist(diffs[i], boot, blocks[i], seed=seeds[i])
        return dists[i].p_value()

    decision = pd.Series("not distinguishable", index=out.index, dtype=object)
    for family, idx in out.groupby("family").groups.items():
        idx = list(idx)
        for k, d in holm_step_down(lambda j, refine: p_of(idx[j], refine), len(idx), alpha).items():
            decision[idx[k]] = d
    size = out.groupby("family")["family"].transform("size") if len(out) else out["family"]
    for i, dist in enumerate(dists):
        p, se = dist.p_value()
        lo, hi = dist.interval(1 - alpha)
        out.loc[i, ["ci_low", "ci_high", "p", "p_mc_se", "resamples", "detectable_pp"]] = [
            lo, hi, p, se, blocks[i] * boot.n_boot, dist.detectable(alpha / int(size.iloc[i]))]
    out = out.astype({"ci_low": float, "ci_high": float, "p": float, "p_mc_se": float, "resamples": int,
                      "detectable_pp": float})
    out["p_holm"] = np.nan
    for family, idx in out.groupby("family").groups.items():
        out.loc[idx, "p_holm"] = holm(out.loc[idx, "p"])
    out["excludes_zero"] = (out["ci_low"] > 0) | (out["ci_high"] < 0)
    out["decision"] = decision.to_numpy()
    out["undecided"] = out["decision"] == "undecided"
    out["significant_holm"] = out["decision"] == "differs"
    if keep is not None:  # each row's distribution (a look's interval at its own level: the sequential section)
        keep.extend(dists)
    return out



def holm_families(pairs: pd.DataFrame) -> dict:
    """Each Holm family of the report: what it is and the contrasts in it."""
    return {family: {"what": family_what(family), "contrasts": [f"{a} - {b}" for a, b in zip(g["a"], g["b"])]}
            for family, g in pairs.groupby("family", sort=False)}



def curve_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Figure 2's bands: per arm and checkpoint, the 95% interval of the mean accuracy over
    seeds, the seed parts pooled across the arms at each checkpoint (step 0: the base model's,
    over prompts only). A level, not a difference: no sign-flip test of 0."""
    base = mean_dist(scores.base, boot, exact=False).interval()
    arms = arm_order(s for s, _ in scores.runs)
    band = {}
    for step in sorted({step for arm in arms for step in scores.steps(arm)}):
        at = [arm for arm in arms if step in scores.steps(arm)]
        dists = pooled_dists([scores.at(arm, step) for arm in at], np.eye(len(at)), boot, exact=False)
        band.update({(arm, step): d.interval() for arm, d in zip(at, dists)})
    rows = []
    for arm in arms:
        rows.append({"strategy": arm, "step": 0, "ci_low": base[0], "ci_high": base[1]})
        for step in scores.steps(arm):
            lo, hi = band[arm, step]
            rows.append({"strategy": arm, "step": step, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)



def best_arm(arms: Iterable[str], pairs: pd.DataFrame) -> str | None:
    """The arm that Holm's decisions put ahead of every other one of ``arms`` (its contrast with
    each ``differs``, in its favour), or None. No ranking by point estimate comes first, so the
    arm named is not the luckiest of several (no winner's curse): it is named only when the
    family's own decisions, at their family-wise error rate, say it leads each other arm."""
    arms = list(arms)
    for arm in arms:
        wins = 0
        for other in arms:
            if other == arm:
                continue
            row = pairs[((pairs["a"] == arm) & (pairs["b"] == other)) | ((pairs["a"] == other) & (pairs["b"] == arm))]
            if len(row) and bool(row["significant_holm"].iloc[0]):
                sign = 1 if row["a"].iloc[0] == arm else -1
                wins += sign * float(row["diff_pp"].iloc[0]) > 0
        if wins == len(arms) - 1:
            return arm
    return None



def verdict_with_intervals(arms: pd.DataFrame, pairs: pd.DataFrame, metric: str, base_acc: float,
                           n_prompts: int, control: Iterable[str] = ()) -> tuple[str, str | None]:
    """One honest line, and the best arm: named only when Holm's decisions in the arms' family
    put it ahead of every other arm (:func:`best_arm`); otherwise the arms are not
    distinguishable at this size, and the line gives the leader's lead over the runner-up with
    its interval (unadjusted: a description, not a decision). The best arm is one that trains on
    the verifier's reward (``control`` arms are compared apart)."""
    name = METRIC_NAMES.get(metric, metric)
    control = set(control)
    real = arms[~arms["strategy"].isin(control)] if (~arms["strategy"].isin(control)).any() else arms
    ranked = real.sort_values("gain_pp", ascending=False, kind="stable").reset_index(drop=True)
    top = ranked.iloc[0]
    question = question_words(pairs)
    family = None
    if "family" in pairs and len(pairs):
        # the best-arm test is exploratory, among the arms compared with the leader in one family
        # of its budget (no family mixes budgets): the leader's own "arms" family
        mine = pairs[((pairs["a"] == top["strategy"]) | (pairs["b"] == top["strategy"]))
                     & ~pairs["family"].str.startswith(("control", "across"))]
        peers = set(mine["a"]) | set(mine["b"]) | {top["strategy"]}
        ranked = ranked[ranked["strategy"].isin(peers)].reset_index(drop=True)
        own = [f for f in mine["family"].unique() if f != PRIMARY]
        family = own[0] if own else (PRIMARY if len(mine) else None)
    ci = lambda r: f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]"  # noqa: E731
    seeds = int(arms["n_seeds"].max())
    scope = (f"95% intervals over {n_prompts} test prompts and {seeds} seeds, the seed part pooled across the study's "
             f"contrasts where their seeds' spreads agree (else a t with {seeds - 1} degrees of freedom), never narrower "
             "than the runs' own per-prompt noise" if seeds > 1 else
             f"95% intervals over {n_prompts} test prompts only (one seed: seed variance is not included)")
    if top["ci_high"] < 0:
        head = f"every arm lost {name} against the base model ({base_acc:.2f}); the best, {top['strategy']}, "
    elif top["ci_low"] <= 0:
        tied = int(np.isclose(ranked["gain_pp"], top["gain_pp"]).sum())
        best_mean = f"{tied} arms tie for the best mean at" if tied > 1 else f"the best mean, {top['strategy']},"
        head = f"no arm's gain over the base model's {name} ({base_acc:.2f}) excludes 0; {best_mean} "
    else:
        head = f"{top['strategy']} beat the base model's {name} ({base_acc:.2f}): "
    line = head + f"{top['gain_pp']:+.1f} points {ci(top)}"
    if len(ranked) == 1:
        return f"{question}{line}{_family_counts(pairs)} ({scope})", str(top["strategy"])
    second = ranked.iloc[1]
    pair = pairs[((pairs["a"] == top["strategy"]) & (pairs["b"] == second["strategy"]))
                 | ((pairs["b"] == top["strategy"]) & (pairs["a"] == second["strategy"]))].iloc[0]
    sign = 1 if pair["a"] == top["strategy"] else -1
    lead = {"diff": sign * pair["diff_pp"], "lo": min(sign * pair["ci_low"], sign * pair["ci_high"]),
            "hi": max(sign * pair["ci_low"], sign * pair["ci_high"])}
    lead_text = f"{lead['diff']:+.1f} [{lead['lo']:+.1f}, {lead['hi']:+.1f}] points over {second['strategy']}"
    best = best_arm(ranked["strategy"], pairs)
    among = (f" of the {len(ranked)} arms of family '{family}' (exploratory)" if family not in (None, PRIMARY)
             else "")
    if best is not None:
        line += (f"; {best} is the best arm{among}: it differs from every other after Holm's correction "
                 f"(its lead of {lead_text})")
    else:
        line += (f"; no arm{among} differs from every other after Holm's correction: not distinguishable at this "
                 f"size (the leader's lead of {lead_text}, unadjusted; {detectable_words(pair)})")
    return f"{question}{line}{_family_counts(pairs)} ({scope})", best


def question_words(pairs: pd.DataFrame) -> str:
    """The verdict's first sentence: the declared question's contrasts (family ``primary``), each
    with its interval and Holm's decision among them alone, or that none is declared."""
    if "family" not in pairs or not (pairs["family"] == PRIMARY).any():
        return ("No question is declared (analyze.primary): every contrast below is exploratory, adjusted within its "
                "own family. ")
    rows = pairs[pairs["family"] == PRIMARY]
    parts = []
    for r in rows.to_dict("records"):
        text = f"{r['a']} - {r['b']} {r['diff_pp']:+.1f} [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}] points: {r['decision']}"
        if r["decision"] != "differs":
            text += (f" (about {r['detectable_pp']:.1f} points was detectable with 80% power)"
                     if r["detectable_pp"] > 0 else " (the paired scores do not vary)")
        parts.append(text)
    return (f"The study's question (analyze.primary; confirmatory, Holm's correction over its {len(rows)} "
            f"contrast{'s' if len(rows) > 1 else ''} alone): " + "; ".join(parts) + ". Exploratory: ")



def detectable_words(pair) -> str:
    """"this study could have detected about X points" for a contrast row (``detectable_pp``)."""
    if not pair["detectable_pp"] > 0:  # no variation at all (every paired score equal), or none to measure
        return "the paired scores do not vary at all, so no detectable size can be given: more test prompts or seeds"
    return (f"a difference of about {pair['detectable_pp']:.1f} points was detectable with 80% power at Holm's "
            "first step: a smaller true one would go unseen")


def _family_counts(pairs: pd.DataFrame) -> str:
    """'; k of m contrasts ... differ from 0 after Holm's correction', per family."""
    parts = []
    pairs = pairs if "family" in pairs else pairs.assign(family="arms")
    for family, g in pairs.groupby("family", sort=False) if len(pairs) else []:
        if family == PRIMARY:
            continue
        what = f"contrasts of family '{family}'"
        undecided = int(g["undecided"].sum()) if "undecided" in g else 0
        parts.append(f"{int(g['significant_holm'].sum())} of {len(g)} {what} differ from 0 after Holm's correction "
                     f"within their family" + (f" ({undecided} undecided at the resample cap)" if undecided else ""))
    return "".join(f"; {p}" for p in parts)
