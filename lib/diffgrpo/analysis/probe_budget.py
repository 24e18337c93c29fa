"""How many probe samples a selection needs, from one probe's samples (no new generation).

- **K sweep**: the probe's first K samples of each prompt (the samples of a prompt are
  independent draws, so the first K are a random subsample of K) for K = 1, 2, 4, ... up to the
  probe's own K: each policy's selection from that p_hat against the full probe's (overlap:
  the share of the full-K selection it keeps), the p_hat error over the pool, and the learnable %
  the selection would give, predicted with the full probe's p_hat (the best estimate there is).
- **Adaptive probing**: each prompt's samples taken in rounds of ``round_size``; after each
  round, with a uniform Beta(1, 1) prior, the probe stops for a prompt whose posterior puts at
  least ``confidence`` on p < ``edge`` or on p > 1 - ``edge`` (all wrong or all right after a few
  samples); its p_hat is then the share of the samples taken. Reported: the completions saved
  against the full K, and per policy (hard, middle, easy) the overlap of the adaptive
  selection with the full probe's and the p_hat error of its prompts.
- **The frontier** (:func:`frontier`): every cheaper probe tried, the first K' samples for each
  K' under the probe's K and adaptive probing under each stopping rule of :data:`ADAPTIVE_RULES`,
  as (share of the full probe's completions, agreement with its selection) per policy.
  Agreement counts ties: the share of the cheaper probe's selection whose full-probe p_hat lies
  inside the range of the full selection's p_hats (a prompt the full probe ranks level with one it
  chose could have been chosen by it; at K = 4 most prompts tie). ``overlap_pct`` is the exact
  share beside it. Because ties agree, agreement is not 0 by chance: ``chance_pct``
  (:func:`chance_agreement`) is the agreement a selection of the same size drawn at random from
  the pool scores on average, exact (the share of the pool inside the full selection's p_hat
  range: each prompt of a random selection is any of the pool's with equal chance, so the
  expected share of the selection in that range is the pool's, whatever its size); a cheaper
  probe's agreement means something only above it. A cheaper probe is worth charging instead of the full one where it reaches
  :data:`AGREEMENT` % agreement at no more than :data:`HALF` % of the completions
  (:func:`cheaper_probe`).

Ours (the report's ``probe_budget`` section); the idea of cheap screening rollouts is
SPEED-RL's and GRESO's, the stopping rule is a plain Beta posterior test.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy.stats import beta

from diffgrpo import select
from diffgrpo.analysis.learnability import predicted_learnable

#: the policies the probe's budget is measured for (each ranks prompts by p_hat)
POLICIES = ("hard", "middle", "easy")


#: adaptive stopping rules the frontier tries: (round_size, edge, confidence); the first is the
#: report's ``adaptive`` default
ADAPTIVE_RULES = ((2, 0.3, 0.75), (1, 0.3, 0.75), (1, 0.2, 0.6), (1, 0.3, 0.6), (1, 0.1, 0.5), (2, 0.2, 0.9))
#: a cheaper probe would be worth charging instead of the full one where it keeps this much agreement (%) ...
AGREEMENT = 90.0
#: ... at no more than this share (%) of the full probe's completions
HALF = 50.0


def correct_matrix(samples: pd.DataFrame) -> tuple[pd.Index, np.ndarray]:
    """The probe's samples as prompts x K (0/1), each row in sample order."""
    wide = samples.pivot(index="prompt_id", columns="sample", values="correct").sort_index(axis=1)
    if wide.isna().any().any():
        bad = wide.index[wide.isna().any(axis=1)][0]
        raise ValueError(f"probe samples: prompt {bad!r} has fewer samples than the others; rerun the probe (01_probe)")
    return wide.index, wide.to_numpy(float)


def _selections(ids: pd.Index, p_hat: np.ndarray, n: int, seed: int) -> dict[str, set]:
    prompts = pd.DataFrame({"id": ids, "p_hat": p_hat, "tier": np.nan})
    return {pol: set(select.select(prompts, pol, n, seed)["id"]) for pol in POLICIES}


def k_sweep(samples: pd.DataFrame, n: int, group_size: int, seed: int = 0, ks=(1, 2, 4, 8, 16)) -> pd.DataFrame:
    """One row per (K, policy): overlap with the full probe's selection, mean |p_hat_K - p_hat|
    over the pool, predicted learnable % of the K-selection (full p_hat). The full K is always a
    row (K = 3 gave 1 and 2 alone: the sweep's end, 100% overlap, was missing)."""
    ids, x = correct_matrix(samples)
    full = x.mean(axis=1)
    truth = _selections(ids, full, n, seed)
    p_of = dict(zip(ids, full))
    rows = []
    for k in sorted({k for k in ks if k <= x.shape[1]} | {x.shape[1]}):
        p_k = x[:, :k].mean(axis=1)
        chosen = _selections(ids, p_k, n, seed)
        for pol in POLICIES:
            rows.append({"k": k, "policy": pol, "completions": k * len(ids),
                         "overlap_pct": 100 * len(chosen[pol] & truth[pol]) / n,
                         "p_hat_error": float(np.abs(p_k - full).mean()),
                         "predicted_learnable_pct": 100 * predicted_learnable([p_of[i] for i in chosen[pol]], group_size)})
    return pd.DataFrame(rows)


def first_samples_p_hat(x: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """Each prompt's p_hat from its first ``taken`` samples (rows of ``x``, 0/1 in sample order)."""
    return np.array([row[:m].mean() for row, m in zip(x, taken)])


def adaptive_n(x: np.ndarray, round_size: int, edge: float, confidence: float) -> np.ndarray:
    """Samples the adaptive probe takes of each prompt (rows of ``x``, 0/1 in sample order): the
    first round end m (< K) at which the Beta(1 + s, 1 + m - s) posterior of its s correct of m
    puts ``confidence`` on p < ``edge`` or on p > 1 - ``edge``; K where none does. The test
    depends on (m, s) alone, so it is computed once per pair, not once per prompt."""
    k = x.shape[1]
    ends = np.arange(round_size, k, round_size)
    if len(ends) == 0:
        return np.full(len(x), k)
    m, s = np.meshgrid(ends, np.arange(k + 1), indexing="ij")  # s > m never occurs
    stops = np.maximum(beta.cdf(edge, 1 + s, 1 + m - s), beta.sf(1 - edge, 1 + s, 1 + m - s)) >= confidence
    correct = np.rint(np.cumsum(x, axis=1)[:, ends - 1]).astype(int)  # s at each round end, per prompt
    stopped = stops[np.arange(len(ends)), correct]  # prompts x round ends
    return np.where(stopped.any(axis=1), ends[stopped.argmax(axis=1)], k)


def adaptive(samples: pd.DataFrame, n: int, seed: int = 0, round_size: int = 2, edge: float = 0.3,
             confidence: float = 0.75) -> tuple[dict, pd.DataFrame]:
    """The adaptive probe against the full one: ``(totals, per policy)``."""
    ids, x = correct_matrix(samples)
    taken = adaptive_n(x, round_size, edge, confidence)
    full = x.mean(axis=1)
    p_ad = first_samples_p_hat(x, taken)
    truth, chosen = _selections(ids, full, n, seed), _selections(ids, p_ad, n, seed)
    at = {pid: i for i, pid in enumerate(ids)}
    rows = [{"policy": pol, "overlap_pct": 100 * len(chosen[pol] & truth[pol]) / n,
             "p_hat_error": float(np.mean([abs(p_ad[at[i]] - full[at[i]]) for i in chosen[pol]]))} for pol in POLICIES]
    totals = {"k": int(x.shape[1]), "round_size": round_size, "edge": edge, "confidence": confidence,
              "completions_full": int(x.size), "completions_adaptive": int(taken.sum()),
              "saved_pct": round(100 * (1 - taken.sum() / x.size), 2),
              "p_hat_error_pool": round(float(np.abs(p_ad - full).mean()), 4)}
    return totals, pd.DataFrame(rows)


def _agreement(chosen: set, truth: set, full_of: dict) -> float:
    """% of ``chosen`` whose full-probe p_hat lies in the range of ``truth``'s (ties agree)."""
    lo, hi = min(full_of[i] for i in truth), max(full_of[i] for i in truth)
    return 100 * sum(lo <= full_of[i] <= hi for i in chosen) / len(chosen)


def chance_agreement(truth: set, full_of: dict) -> float:
    """The agreement (%, :func:`_agreement`) of a selection of ``len(truth)`` prompts drawn at random
    from the pool (``full_of``: every pool prompt's full-probe p_hat) on average, exact: the share of
    the pool whose p_hat lies in the range of ``truth``'s (the mean of a hypergeometric share)."""
    lo, hi = min(full_of[i] for i in truth), max(full_of[i] for i in truth)
    return 100 * float(np.mean([lo <= p <= hi for p in full_of.values()]))


def frontier(samples: pd.DataFrame, n: int, seed: int = 0, rules=ADAPTIVE_RULES) -> pd.DataFrame:
    """One row per (cheaper probe, policy): ``rule``, ``completions`` and ``completions_pct`` (of
    the full probe's), ``agreement_pct`` (ties agree, the module's docstring), ``chance_pct`` (the
    agreement of a random selection of ``n`` on average, exact: :func:`chance_agreement`) and
    ``overlap_pct`` (exact) with the full probe's selection of ``n``. The full probe is the last
    row per policy."""
    ids, x = correct_matrix(samples)
    full = x.mean(axis=1)
    full_of = dict(zip(ids, full))
    truth = _selections(ids, full, n, seed)
    chance = {pol: chance_agreement(truth[pol], full_of) for pol in POLICIES}
    probes = [(f"first {k} of {x.shape[1]}", np.full(len(x), k)) for k in range(1, x.shape[1])]
    probes += [(f"adaptive: rounds of {r}, stop at {c:g} on p < {e:g} or p > {1 - e:g}", adaptive_n(x, r, e, c))
               for r, e, c in rules]
    probes.append((f"full ({x.shape[1]} a prompt)", np.full(len(x), x.shape[1])))
    rows = []
    for rule, taken in probes:
        p = first_samples_p_hat(x, taken)
        with warnings.catch_warnings():  # a coarse p_hat makes middle tie with hard or easy: the point measured
            warnings.simplefilter("ignore")
            chosen = _selections(ids, p, n, seed)
        for pol in POLICIES:
            rows.append({"rule": rule, "policy": pol, "completions": int(taken.sum()),
                         "completions_pct": 100 * taken.sum() / x.size,
                         "agreement_pct": _agreement(chosen[pol], truth[pol], full_of),
                         "chance_pct": chance[pol], "overlap_pct": 100 * len(chosen[pol] & truth[pol]) / n})
    return pd.DataFrame(rows)


def cheaper_probe(front: pd.DataFrame) -> dict[str, dict | None]:
    """Per policy, the cheapest probe of ``front`` with at least :data:`AGREEMENT` % agreement
    at no more than :data:`HALF` % of the completions (``rule``, ``completions_pct``,
    ``agreement_pct``, ``chance_pct``), or None where none reaches it."""
    ok = front[(front["agreement_pct"] >= AGREEMENT) & (front["completions_pct"] <= HALF)]
    out = {}
    for pol in POLICIES:
        best = ok[ok["policy"] == pol].sort_values(["completions_pct", "agreement_pct"], ascending=[True, False])
        out[pol] = None if best.empty else {k: best.iloc[0][k] for k in ("rule", "completions_pct", "agreement_pct",
                                                                         "chance_pct")}
    return out


def cheaper_probe_in_words(front: pd.DataFrame, found: dict[str, dict | None]) -> str:
    """Per policy, the cheaper probe worth charging instead of the full one, or why none is: the best
    agreement any probe of the frontier reaches at no more than :data:`HALF` % of the completions;
    each agreement beside its chance level (a random selection's, :func:`chance_agreement`), and
    said so where chance alone reaches :data:`AGREEMENT` %."""
    cheap = front[front["completions_pct"] <= HALF]
    parts = []
    for pol, hit in found.items():
        chance = front.loc[front["policy"] == pol, "chance_pct"]
        level = "" if chance.empty else f", against {chance.iloc[0]:.0f}% by chance" + (
            f" (chance alone reaches {AGREEMENT:g}%)" if chance.iloc[0] >= AGREEMENT else "")
        if hit is not None:
            parts.append(f"{pol}: {hit['rule']} agrees {hit['agreement_pct']:.0f}% at {hit['completions_pct']:.0f}% "
                         f"of the completions{level}")
            continue
        mine = cheap[cheap["policy"] == pol]
        best = mine.sort_values("agreement_pct", ascending=False).iloc[0] if len(mine) else None
        parts.append(f"{pol}: none" + ("" if best is None else
                     f" (the best at <= {HALF:g}%: {best['rule']}, {best['agreement_pct']:.0f}% at "
                     f"{best['completions_pct']:.0f}%{level})"))
    return "; ".join(parts)
