"""Gains by the difficulty of the *test* prompts (``probe.test``): did hard-trained arms gain on
hard test prompts? And paper 003's released-code scoring, where each arm is scored on the test
prompts of its own training difficulty, beside the common test set.

The base model is probed on the held-out test set as on the pool (same K and sampling,
:func:`diffgrpo.probe.run_probe`), so every test prompt has a base success rate p_hat. Then:

- **per bin** (``analyze.test_bins``, p_hat edges; bins ``[e0, e1]``, ``(e1, e2]``, ...): every
  arm's gain on the test prompts of each bin, with the study's interval (test prompts in the
  bin x seeds: :func:`uncertainty.mean_dist`);
- **matched** (003's code: ``gsm8k/train_gsm8k.py`` scores an arm trained on the train split's
  difficulty bucket X on the *test* split's bucket X): an arm's matched test prompts are those
  whose base p_hat lies within the range of p_hat of the prompts it trained on (all of its
  seeds' selections). For a whole-bucket policy (``p_hat_band``) that is the same bucket of the
  test set, exactly as the code did; for ``hard`` it is the test prompts at most as easy as its
  easiest training prompt; for ``random`` the whole test set.
- **the spread**: the gain of the arm ranked first minus that of the arm ranked last among the
  verifier-reward arms, ranked by matched gain (003's Table 1: hard minus easy), under both
  scorings. On the common test set the two arms are paired on the same prompts and seeds; on
  matched sets the prompts differ, so the two arms' distributions are drawn independently
  (each: its prompt bootstrap + its seed part), which ignores the overlap of their sets;
- **the share** of the matched spread that the scoring makes, 1 - common / matched (the
  embedded study's README: 1 - 4.6 / 18.3 = 75%), with a 95% interval from the ratio per
  resample, none where the matched spread's own interval holds 0 (:func:`removed_share`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diffgrpo.analysis.tables import arm_order
from diffgrpo.stats import ALPHA
from diffgrpo.stats.intervals import Bootstrap, MeanDist, draws, interval, mean_dist

WIDE = 50.0  # points: an interval on the share of the spread wider than this is called wide


def bin_labels(edges: list[float]) -> list[str]:
    """``[0, 0.3]``, ``(0.3, 0.7]``, ...: the first bin holds its lower edge."""
    return [f"{'[' if i == 0 else '('}{a:g}, {b:g}]" for i, (a, b) in enumerate(zip(edges, edges[1:]))]


def bin_of(p_hat: np.ndarray, edges: list[float]) -> np.ndarray:
    """Each p_hat's bin index (0 = the hardest: lowest p_hat)."""
    return np.digitize(np.asarray(p_hat, float), np.asarray(edges[1:-1]), right=True)


def test_p_hat(test_probe: pd.DataFrame, prompts: pd.Index) -> np.ndarray:
    """The probe's p_hat of each scored test prompt, in the scores' order; an error naming the
    first prompt the probe does not cover."""
    p = test_probe.set_index("id")["p_hat"].reindex(prompts)
    if p.isna().any():
        raise ValueError(f"test prompt {p.index[p.isna()][0]!r} is scored but not in the test set's probe: the "
                         "probe and the evaluation read different test rows; rerun 01_probe")
    return p.to_numpy(float)


def _gain(scores, arm: str, mask: np.ndarray, boot: Bootstrap) -> tuple[dict, MeanDist]:
    """One arm's gain on the test prompts where ``mask`` is true (``boot``: resamples of as many)."""
    sub = scores.subset(mask)
    final = sub.at(arm)
    gain = 100.0 * (final - sub.base[:, None])
    dist = mean_dist(gain, boot)
    lo, hi = dist.interval()
    return {"n_prompts": int(mask.sum()), "base_acc": 100.0 * float(sub.base.mean()),
            "final_acc": 100.0 * float(final.mean()), "gain_pp": dist.est, "ci_low": lo, "ci_high": hi,
            "n_seeds": gain.shape[1]}, dist


def by_bin(scores, p_hat: np.ndarray, edges: list[float], n_boot: int, seed: int) -> pd.DataFrame:
    """Per (bin, arm): the test prompts of the bin, their base and final accuracy (points) and
    the arm's gain with its 95% interval; a bin with no test prompt is listed with n 0."""
    idx, rows = bin_of(p_hat, edges), []
    for b, label in enumerate(bin_labels(edges)):
        mask = idx == b
        boot = Bootstrap(int(mask.sum()), n_boot, seed) if mask.sum() >= 2 else None  # shared by the bin's arms
        for arm in arm_order(s for s, _ in scores.runs):
            row = {"bin": label, "strategy": arm}
            row.update(_gain(scores, arm, mask, boot)[0] if boot else {"n_prompts": int(mask.sum())})
            rows.append(row)
    return pd.DataFrame(rows)


def training_ranges(selections: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per arm, the lowest and highest p_hat among the prompts it trained on (every seed's)."""
    g = selections.groupby("strategy")["p_hat"].agg(["min", "max"])
    return {s: (float(lo), float(hi)) for s, lo, hi in zip(g.index, g["min"], g["max"])}


def matched(scores, p_hat: np.ndarray, ranges: dict[str, tuple[float, float]],
            boot: Bootstrap) -> tuple[pd.DataFrame, dict[tuple[str, str], MeanDist]]:
    """Per (arm, scoring): ``common`` (every test prompt; ``boot``, the study's resamples of
    them) and ``matched`` (the test prompts whose p_hat lies in the arm's training range,
    resampled as ``boot`` is), with the distributions behind the intervals."""
    rows, dists = [], {}
    everything = np.ones(len(p_hat), bool)
    for arm in arm_order(s for s, _ in scores.runs):
        lo, hi = ranges[arm]
        own = (p_hat >= lo - 1e-9) & (p_hat <= hi + 1e-9)
        for scoring, mask in (("common", everything), ("matched", own)):
            if mask.sum() < 2:
                rows.append({"strategy": arm, "scoring": scoring, "p_hat_range": f"[{lo:g}, {hi:g}]",
                             "n_prompts": int(mask.sum())})
                continue
            sboot = boot if scoring == "common" else Bootstrap(int(mask.sum()), boot.n_boot, boot.seed)
            row, dists[arm, scoring] = _gain(scores, arm, mask, sboot)
            rows.append({"strategy": arm, "scoring": scoring,
                         "p_hat_range": "[0, 1]" if scoring == "common" else f"[{lo:g}, {hi:g}]", **row})
    return pd.DataFrame(rows), dists


def spread(table: pd.DataFrame, dists: dict, pairs: pd.DataFrame, control, seed: int, scores=None,
           boot: Bootstrap | None = None) -> dict | None:
    """First minus last verifier-reward arm, ranked by matched gain, under both scorings, with
    95% intervals and the rankings, and the share of the matched spread the common test set
    removes (:func:`removed_share`; with ``scores`` and ``boot``); None with fewer than two such
    arms. On the common test set it is the study's paired contrast of the two (``pairs``:
    :func:`uncertainty.contrasts`)."""
    real = table[(table["scoring"] == "matched") & ~table["strategy"].isin(set(control)) & table["gain_pp"].notna()]
    if len(real) < 2:
        return None
    ranked = real.sort_values("gain_pp", ascending=False)["strategy"].tolist()
    top, bottom = ranked[0], ranked[-1]
    pair = pairs[((pairs["a"] == top) & (pairs["b"] == bottom)) | ((pairs["a"] == bottom) & (pairs["b"] == top))].iloc[0]
    sign = 1.0 if pair["a"] == top else -1.0
    rng = np.random.default_rng([seed, 19])
    unpaired = draws(dists[top, "matched"], rng) - draws(dists[bottom, "matched"], rng)
    by = table.set_index(["strategy", "scoring"])["gain_pp"]
    ranking = {sc: sorted(real["strategy"], key=lambda s: -by[s, sc]) for sc in ("matched", "common")}
    out = {"first": top, "last": bottom,
           "matched": {"diff_pp": float(by[top, "matched"] - by[bottom, "matched"]),
                       "ci95": [float(v) for v in interval(unpaired, 1 - ALPHA)], "ranking": ranking["matched"]},
           "common": {"diff_pp": sign * float(pair["diff_pp"]),
                      "ci95": sorted(sign * float(pair[k]) for k in ("ci_low", "ci_high")), "ranking": ranking["common"]}}
    for sc in ("matched", "common"):
        lo, hi = out[sc]["ci95"]
        out[sc]["excludes_zero"] = bool(lo > 0 or hi < 0)
    if scores is not None and boot is not None:
        seeds = sorted(set(scores.seeds(top)) & set(scores.seeds(bottom)))
        common = mean_dist(100.0 * (scores.at(top, seeds=seeds) - scores.at(bottom, seeds=seeds)), boot)
        out["share_removed"] = removed_share(out["matched"], out["common"], unpaired, draws(common, rng))
    return out


def removed_share(matched: dict, common: dict, matched_draws: np.ndarray, common_draws: np.ndarray) -> dict:
    """The share of the spread the matched scoring makes, X = 100 (1 - common / matched), with its 95%
    interval, the ratio taken per resample (``matched_draws``, ``common_draws``: the two spreads'
    draws, drawn independently, which ignores their positive correlation, as hard's matched
    prompts are among the common ones and both come from the same runs: the interval is, if
    anything, too wide). Where the matched spread's own interval holds 0 the share has no finite
    interval (a ratio over a denominator that may be 0 is unbounded: Fieller), and the words say
    so; an interval wider than :data:`WIDE` points is called wide."""
    m, c = matched["diff_pp"], common["diff_pp"]
    if m <= 0:
        return {"pct": None, "ci95": None, "words": "The matched spread is not positive: there is no share of it to "
                                                     "attribute to the scoring."}
    pct = 100.0 * (1 - c / m)
    head = f"On the point estimates the matched scoring makes {pct:.0f}% of the spread (1 - {c:.1f} / {m:.1f})"
    if not matched["excludes_zero"]:
        return {"pct": pct, "ci95": None, "words": head + ", but that share has no finite 95% interval: the matched "
                "spread's own interval holds 0, and a ratio over a denominator that may be 0 is unbounded, so the "
                "data do not say how much of the spread the scoring makes."}
    with np.errstate(divide="ignore", invalid="ignore"):
        share = 100.0 * (1 - common_draws / matched_draws)
    lo, hi = interval(share[~np.isnan(share)], 1 - ALPHA, method="inverted_cdf")
    wide = hi - lo > WIDE
    return {"pct": pct, "ci95": [lo, hi], "words": head + f", 95% interval [{lo:.0f}%, {hi:.0f}%] (ratio per resample)"
            + (f": a wide interval (over {WIDE:.0f} points), so the share is only loosely known." if wide else ".")}


def verdict(sp: dict | None) -> str:
    """One paragraph: does the ranking and the spread survive a common test set?"""
    if sp is None:
        return "Fewer than two verifier-reward arms: no spread to compare."
    m, c = sp["matched"], sp["common"]

    def fmt(d: dict) -> str:
        return f"{d['diff_pp']:+.1f} points [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"

    same = m["ranking"] == c["ranking"]
    words = ("survives" if c["excludes_zero"] else "does not survive (its interval holds 0)") if m["excludes_zero"] \
        else "is inside the noise already under matched scoring"
    return (f"Scored as 003's code did (each arm on the test prompts of its own training difficulty), "
            f"{sp['first']} minus {sp['last']} is {fmt(m)}; on the common test set it is {fmt(c)}: the spread {words}. "
            f"Ranking matched: {' > '.join(m['ranking'])}; common: {' > '.join(c['ranking'])}"
            f" ({'the same' if same else 'it changes'})." + (f" {sp['share_removed']['words']}" if "share_removed" in sp else ""))
