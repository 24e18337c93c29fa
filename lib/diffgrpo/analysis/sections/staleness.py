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

Arms whose runs are one trajectory stopped at different budgets (``hard.b576`` the prefix of
``hard.b1344``, :meth:`~diffgrpo.analysis.report.StudyReport.nested_arms`) are listed once, by the
longest (most steps), which names the arms it contains (``contains``): the shorter arms' groups
are its first steps, not other data.

**The decay** (per listed arm, :func:`decay`): the first window's ``spearman`` minus the last
window's (positive: the probe's ranking holds less as the policy moves; each the mean over seeds,
as in the windows table), with a 95% interval from a bootstrap of the selection's prompts with
the seeds fixed: the prompts are resampled with replacement (one resample for every seed and
window: they are the same prompts), each window's Spearman correlation recomputed on the resample
(tied ranks averaged, a prompt drawn twice counted twice) and averaged over seeds;
``analyze.bootstrap`` resamples drawn from ``[analyze.seed,`` :data:`BOOT_STREAM` ``]``, the
percentile interval over those where both windows have a correlation. It is the prompts'
uncertainty alone (the runs held as they ran), for the ranking of these prompts, not of the
pool. ``p_hat_values`` counts the distinct p_hat values of the selection: where they are
:data:`FEW_P_HAT` or fewer (a tail of a K = 4 probe: ``hard``'s prompts at p_hat 0 and 0.25) most
prompts tie, the correlation compares a few groups of tied prompts, and the words say so.

Writes ``staleness.md`` / ``staleness.csv`` (the windows), ``staleness_decay.md`` /
``staleness_decay.csv`` (the decay, one row per listed arm) and ``fig_staleness.png`` (rank
correlation by window, one line per arm; the share of the selection all-correct or all-wrong).
Its part of ``summary.json``::

    {"staleness": {arm: [{"window", "steps", "spearman", "n_prompts", "all_correct", "all_wrong", "success",
                          "p_hat"}]},
     "staleness_decay": {"resamples": analyze.bootstrap,
                         "arms": {arm: {"contains": [nested arms it holds], "first_steps", "last_steps",
                                        "spearman_first", "spearman_last", "decay", "ci95": [low, high],
                                        "n_prompts", "p_hat_values", "few_p_hat", "resamples_used"}},
                         "in_words": how the intervals are made, then one sentence per arm with a decay}}

(``decay`` / ``ci95``: null where either window has no correlation, or under half the resamples
give one.) ``{"staleness": None}``, no ``staleness_decay`` and no file when no arm trains on
probed prompts.
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
from diffgrpo.stats.intervals import interval
from diffgrpo.store import artifacts, layout

TABLES = ("staleness", "staleness_decay")
FIGURES = ("fig_staleness",)
WINDOWS = 4  # windows of equal steps a run is cut into
FEW_P_HAT = 3  # a selection with this many distinct p_hat values or fewer: its ranks are mostly ties
BOOT_STREAM = 44  # the decay's prompt resamples: default_rng([analyze.seed, BOOT_STREAM])


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


def weighted_spearman(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Spearman's correlation of ``a`` and ``b`` (n values each) in each row of ``w`` (resamples x
    n counts: how often each value is drawn), as if each value were repeated its count: Pearson's
    correlation of the resample's midranks (ties averaged, scipy's convention), computed for every
    resample at once. NaN where a resample has fewer than 3 values or either side is constant (as
    :func:`_spearman`). With counts of 1 it is ``scipy.stats.spearmanr(a, b)``."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    w = np.atleast_2d(np.asarray(w, float))
    total = w.sum(axis=1)

    def midranks(v):
        below, level = (v[None, :] < v[:, None]).astype(float), (v[None, :] == v[:, None]).astype(float)
        return w @ below.T + (w @ level.T + 1) / 2  # resamples x n: each value's midrank in the resample

    with np.errstate(divide="ignore", invalid="ignore"):
        ra, rb = midranks(a), midranks(b)
        ra -= (w * ra).sum(axis=1, keepdims=True) / total[:, None]
        rb -= (w * rb).sum(axis=1, keepdims=True) / total[:, None]
        va, vb, cov = (w * ra * ra).sum(axis=1), (w * rb * rb).sum(axis=1), (w * ra * rb).sum(axis=1)
        rho = cov / np.sqrt(va * vb)
    flat = (va <= 1e-9 * total ** 3) | (vb <= 1e-9 * total ** 3)  # a constant side: variance 0 up to rounding
    return np.where((total < 3) | flat, np.nan, np.clip(rho, -1.0, 1.0))


def run_rates(groups: pd.DataFrame, p_hat: pd.Series, last_step: int) -> tuple[list[str], pd.DataFrame]:
    """One run's windows (``"1-5"``) and its selection's prompts (``p_hat``'s index) x windows
    (1, 2, ...): each prompt's success rate in the window's groups, NaN where it was not trained."""
    groups = groups[groups["prompt_id"].isin(p_hat.index)]
    cut = windows(last_step)
    rates = {i: success_by_prompt(groups[groups["step"].isin(steps)]) if len(groups) else pd.Series(dtype=float)
             for i, steps in enumerate(cut, 1)}
    table = pd.DataFrame({i: r.reindex(p_hat.index).astype(float) for i, r in rates.items()}, index=p_hat.index)
    return [f"{steps[0]}-{steps[-1]}" for steps in cut], table


def run_staleness(groups: pd.DataFrame, p_hat: pd.Series, last_step: int) -> pd.DataFrame:
    """One run's rows: per window, the rank correlation of its prompts' success with ``p_hat``
    (indexed by prompt id), the prompts of the selection trained on, those all-correct, all-wrong."""
    steps, table = run_rates(groups, p_hat, last_step)
    rows = []
    for i, label in zip(table.columns, steps):
        rate = table[i].dropna()
        probed = p_hat.loc[rate.index].to_numpy()
        rows.append({"window": i, "steps": label, "spearman": _spearman(rate.to_numpy(), probed),
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


def listed_arms(study, arms: list[str]) -> dict[str, list[str]]:
    """The arms to list, each with the arms it contains: of every group of ``arms`` that is one
    trajectory (:meth:`~diffgrpo.analysis.report.StudyReport.nested_arms`), the one whose runs went
    furthest (most steps; the later in report order on a tie) holds the others; an arm alone in its
    trajectory holds none. In ``arms``' order."""
    steps = {}
    for m in study.manifests:
        steps[m["strategy"]] = max(steps.get(m["strategy"], 0), int(m.get("steps_done") or 0))
    keep = set(arms)
    held: dict[str, list[str]] = {}
    nested = study.nested_arms() if hasattr(study, "nested_arms") else []
    for group in nested:
        mine = [a for a in arms if a in set(group)]
        if len(mine) < 2:
            continue
        longest = max(mine, key=lambda a: (steps.get(a, 0), arms.index(a)))
        held[longest] = [a for a in mine if a != longest]
        keep -= set(held[longest])
    return {a: held.get(a, []) for a in arms if a in keep}


def _runs(study, arms) -> list[dict]:
    """Per run of ``arms`` that trained on its selection's probed prompts: arm, seed, windows,
    prompts x windows success rates and the selection's p_hat."""
    runs_dir, out = layout.runs_dir(layout.study_dir(study.cfg)), []
    for m in study.manifests:
        arm, seed = m["strategy"], int(m["seed"])
        if arm not in arms:
            continue
        groups, p_hat = artifacts.read_parquet(runs_dir / m["run_id"] / layout.GROUPS, "03_train"), _p_hat(study, arm, seed)
        if not groups["prompt_id"].isin(p_hat.index).any():
            continue  # it trained on none of its selection's probed prompts (a selection the run did not read)
        last = int(m.get("steps_done") or groups["step"].max())
        out.append({"arm": arm, "seed": seed, "groups": groups, "p_hat": p_hat, "last": last})
    return out


def staleness_table(study, runs: list[dict] | None = None, arms: list[str] | None = None) -> pd.DataFrame:
    """Every probed arm's windows, averaged over its seeds (column ``seeds``: how many ran); with
    ``arms``, theirs alone (the listed arms: :func:`listed_arms`)."""
    probed = probed_arms(study) if arms is None else arms
    runs = _runs(study, probed) if runs is None else runs
    frames = [run_staleness(r["groups"], r["p_hat"], r["last"]).assign(strategy=r["arm"], seed=r["seed"])
              for r in runs if r["arm"] in probed]
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


def decay(runs: list[tuple[pd.DataFrame, pd.Series]], n_boot: int, seed: int) -> dict:
    """One arm's decay (module docstring) from its runs, each (prompts x windows success rates,
    the selection's p_hat by prompt: :func:`run_rates`): ``spearman_first`` / ``spearman_last``
    (means over the runs where defined), ``decay`` (first - last), ``ci95`` (the prompt
    bootstrap's percentile interval, seeds fixed: ``n_boot`` resamples of the union of the runs'
    selections from ``default_rng([seed, BOOT_STREAM])``; None where under half give a decay),
    ``n_prompts``, ``p_hat_values``, ``resamples_used``."""
    p_of = pd.concat([p for _, p in runs])
    p_of = p_of[~p_of.index.duplicated()]
    ids = p_of.index
    n = len(ids)
    w = np.random.default_rng([seed, BOOT_STREAM]).multinomial(n, np.full(n, 1 / n), size=n_boot)
    ends = {"first": [], "last": []}
    points = {"first": [], "last": []}
    for rates, p_hat in runs:
        at = ids.get_indexer(rates.index)
        for end, col in (("first", rates.columns[0]), ("last", rates.columns[-1])):
            rate = rates[col].to_numpy(float)
            seen = ~np.isnan(rate)
            probed = p_hat.reindex(rates.index).to_numpy(float)
            points[end].append(_spearman(rate[seen], probed[seen]))
            ends[end].append(weighted_spearman(rate[seen], probed[seen], w[:, at[seen]]))
    with warnings.catch_warnings():  # a window no run has a correlation in: NaN, said so below
        warnings.simplefilter("ignore", RuntimeWarning)
        first, last = np.nanmean(points["first"]), np.nanmean(points["last"])
        draws = np.nanmean(np.vstack(ends["first"]), axis=0) - np.nanmean(np.vstack(ends["last"]), axis=0)
    used = int(np.isfinite(draws).sum())
    est = first - last
    ci = (interval(draws[np.isfinite(draws)], 0.95) if np.isfinite(est) and used >= n_boot / 2 else [np.nan, np.nan])
    values = int(p_of.nunique())
    return {"spearman_first": float(first), "spearman_last": float(last), "decay": float(est), "ci95": ci,
            "n_prompts": n, "p_hat_values": values, "few_p_hat": values <= FEW_P_HAT, "resamples_used": used}


def decay_table(study, runs: list[dict], held: dict[str, list[str]]) -> pd.DataFrame:
    """One row per listed arm (``held``: :func:`listed_arms`): its decay (:func:`decay`) and the
    steps of its first and last windows."""
    n_boot, seed = study.cfg.analyze.bootstrap, study.cfg.analyze.seed
    rows = []
    for arm, contains in held.items():
        mine = [run_rates(r["groups"], r["p_hat"], r["last"]) + (r["p_hat"],) for r in runs if r["arm"] == arm]
        if not mine:
            continue
        firsts, lasts = sorted({s[0] for s, _, _ in mine}), sorted({s[-1] for s, _, _ in mine})
        d = decay([(rates, p) for _, rates, p in mine], n_boot, seed)
        rows.append({"strategy": arm, "contains": ", ".join(contains), "first_steps": "/".join(firsts),
                     "last_steps": "/".join(lasts), "spearman_first": d["spearman_first"],
                     "spearman_last": d["spearman_last"], "decay": d["decay"], "ci_low": d["ci95"][0],
                     "ci_high": d["ci95"][1], "n_prompts": d["n_prompts"], "p_hat_values": d["p_hat_values"],
                     "few_p_hat": d["few_p_hat"], "seeds": len(mine), "resamples_used": d["resamples_used"]})
    return pd.DataFrame(rows)


def decay_in_words(row: dict) -> str | None:
    """One arm's decay in a sentence: its two correlations, the decay with its 95% interval, and
    its ties where its selection has few p_hat values; None where it has no decay."""
    if not np.isfinite(row["decay"]):
        return None
    ci = (f"[{row['ci_low']:+.2f}, {row['ci_high']:+.2f}]" if np.isfinite(row["ci_low"])
          else "(no interval: under half the resamples give both correlations)")
    if np.isfinite(row["ci_low"]):
        ci += (": the ranking decays" if row["ci_low"] > 0 else ": the ranking strengthens" if row["ci_high"] < 0
               else ", no change the prompts can tell")
    ties = (f"; its {row['n_prompts']} prompts take {row['p_hat_values']} p_hat values, so most of them tie and the "
            f"correlation compares {row['p_hat_values']} groups of tied prompts" if row["few_p_hat"] else "")
    return (f"{row['strategy']}: Spearman {row['spearman_first']:.2f} in steps {row['first_steps']} -> "
            f"{row['spearman_last']:.2f} in steps {row['last_steps']}, a decay of {row['decay']:+.2f} {ci}{ties}.")


def decay_words(table: pd.DataFrame) -> str:
    """The decay table in words: how its intervals are made, then one sentence per arm with a decay."""
    words = [w for w in (decay_in_words(r) for r in table.to_dict("records")) if w]
    if not words:
        return "No listed arm has a rank correlation in both its first and last window."
    return ("The decay of the probe's ranking (Spearman in the first window minus the last; 95% intervals from a "
            "bootstrap of the selection's prompts with the seeds fixed): " + " ".join(words))


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
    held = listed_arms(study, probed_arms(study))
    runs = _runs(study, list(held))
    table = staleness_table(study, runs, list(held))
    if table.empty:
        return {"staleness": None}
    nested = "; ".join(f"{a} holds {', '.join(c)}" for a, c in held.items() if c)
    study.write_table("staleness", "Staleness of the probe: each prompt's success in training's groups over windows "
                      "of steps against its probe p_hat (mean over seeds)", table.round(DIGITS),
                      note="spearman: rank correlation over the selection's prompts trained on in the window (None: "
                      "fewer than 3, or either side constant: a selection of one p_hat has no rank to correlate); "
                      "all_correct / all_wrong: of those, how many gave every completion right / wrong in the window; "
                      "success / p_hat: their mean success in the window and mean probe p_hat."
                      + (f" Arms that are one trajectory are listed once, by the longest ({nested}): the shorter "
                         "arms' runs are its first steps." if nested else ""))
    dec = decay_table(study, runs, {a: c for a, c in held.items() if a in set(table["strategy"])})
    words = decay_words(dec) if len(dec) else ""
    n_boot = study.cfg.analyze.bootstrap
    study.write_table("staleness_decay", "Decay of the probe's ranking: Spearman in the first window minus in the last "
                      f"(mean over seeds), 95% interval from {n_boot:,} resamples of the selection's prompts with the "
                      "seeds fixed", dec.round(DIGITS),
                      note=f"decay > 0: the ranking holds less as the policy moves. The interval is the prompts' "
                      "uncertainty alone (the runs as they ran); blank where either window has no correlation. "
                      f"p_hat_values: the selection's distinct p_hat values; few_p_hat: {FEW_P_HAT} or fewer, most "
                      "prompts tie. " + words)
    artifacts.save_figure(plot(table), study.out / "fig_staleness.png")
    return {"staleness": {arm: [{"window": int(r["window"]), "steps": r["steps"], "spearman": _round(r["spearman"]),
                                 "n_prompts": _round(r["n_prompts"]), "all_correct": _round(r["all_correct"]),
                                 "all_wrong": _round(r["all_wrong"]), "success": _round(r["success"]),
                                 "p_hat": _round(r["p_hat"])} for r in t.to_dict("records")]
                          for arm, t in table.groupby("strategy", sort=False)},
            "staleness_decay": {
                "resamples": n_boot,
                "arms": {r["strategy"]: {"contains": [a for a in r["contains"].split(", ") if a],
                                         "first_steps": r["first_steps"], "last_steps": r["last_steps"],
                                         "spearman_first": _round(r["spearman_first"]),
                                         "spearman_last": _round(r["spearman_last"]), "decay": _round(r["decay"]),
                                         "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
                                         "n_prompts": int(r["n_prompts"]), "p_hat_values": int(r["p_hat_values"]),
                                         "few_p_hat": bool(r["few_p_hat"]), "resamples_used": int(r["resamples_used"])}
                         for r in dec.to_dict("records")},
                "in_words": words}}
