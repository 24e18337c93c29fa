"""Stage 2: choose which pool prompts GRPO trains on, from the probe's per-prompt p_hat.

Policies (paper 003 section 2.3, blog 001, paper 000):

- ``hard`` / ``easy``: the ``n`` lowest / highest p_hat;
- ``middle``: the ``n`` nearest the median p_hat, all inside the interquartile range;
- ``random``: ``n`` uniformly, without replacement, drawn anew for every training seed (the
  spread of a random policy belongs in its interval): ``select/random-seed<s>.parquet``;
- ``random_reward``: the control arm. Its selection is ``random``'s of the same seed (same
  prompts); training replaces the verifier's reward by a seeded Bernoulli draw whose mean is
  the probe's mean p_hat over those prompts (:mod:`diffgrpo.train`), so any gain it shows is
  the optimiser's, not the reward's;
- ``base_wrong`` / ``base_right``: every prompt the one-sample probe got wrong / right (001);
  ``base_wrong_matched`` / ``base_right_matched``: both cut to the smaller one's size, so the
  comparison is at equal size;
- ``all``: the whole pool (001's comparison);
- ``tiers``: every prompt whose tier is at most ``select.max_tier`` (000: train on the lower
  tiers only); with tiers from p_hat bins when the task has none.

A study's arms (params ``arms``) each name one policy with its options (budget, max_tier);
``select/<arm>.parquet`` holds an arm's selection, its ``strategy`` column the arm's name.

``n = floor(budget_frac * |pool|)`` or ``budget_count``; the budget applies to hard, easy,
middle, random and random_reward (the others are defined by a set, not a size). Ties in p_hat
are common (many prompts sit at 0 or 1): they are broken by a shuffle seeded with
``select.seed``, which every selection file records. Deterministic policies (all but
``PER_SEED``) make one file that every training seed shares; a per-seed policy makes one file
per entry of ``train.seeds``, its stream seeded by (``select.seed``, policy, training seed) and
its training seed recorded in a ``train_seed`` column.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd

from . import artifacts, layout
from .params import ArmConfig, Config

BUDGETED = ("hard", "easy", "middle", "random", "random_reward")
#: paper 002: the EPRLI curriculum and its two baselines on the same prompts (eprli.levels)
EPRLI = ("eprli", "eprli_grpo", "eprli_dynamic")
STRATEGIES = BUDGETED + (
    "base_wrong", "base_right", "base_wrong_matched", "base_right_matched", "all", "tiers",
) + EPRLI
#: policies that draw their own subset for every training seed
PER_SEED = ("random", "random_reward")
#: the control arm: random's prompts, a random reward of the same mean (see train.ControlReward)
CONTROL = "random_reward"


class SelectionError(ValueError):
    pass


def budget(pool_size: int, frac: float | None, count: int | None) -> int:
    """``floor(frac * pool_size)``, or ``count``; at least 1 and at most the pool."""
    if count is not None:
        n = count
    elif frac is not None:
        n = math.floor(frac * pool_size)
    else:
        raise SelectionError("select: set budget_frac or budget_count")
    if not 1 <= n <= pool_size:
        raise SelectionError(f"select: budget of {n} prompts does not fit a pool of {pool_size}")
    return n


def _rng(seed: int, strategy: str, train_seed: int | None = None) -> np.random.Generator:
    # one stream per strategy, so adding a strategy never changes another's selection; the
    # control arm shares random's stream (same prompts); per-seed policies add the training
    # seed, except seed 0, which draws what a one-seed study always drew: adding seeds to a
    # study never changes the runs it already has
    stream = "random" if strategy == CONTROL else strategy
    return np.random.default_rng([seed, zlib.crc32(stream.encode())] + ([train_seed] if train_seed else []))


def per_seed(policy: str) -> bool:
    return policy in PER_SEED


def selection_path(cfg: Config, arm: str, seed: int):
    """The selection training seed ``seed`` of ``arm`` reads (its own for a per-seed policy)."""
    return layout.selection_file(cfg, arm, seed if per_seed(cfg.arm(arm).policy) else None)


def arm_budget(cfg: Config, arm: ArmConfig, pool_size: int) -> int:
    """The arm's prompt count: its own budget_frac / budget_count when it sets either, else the
    study's ``select.budget_frac`` / ``budget_count``."""
    own = arm.budget_frac is not None or arm.budget_count is not None
    frac, count = (arm.budget_frac, arm.budget_count) if own else (cfg.select.budget_frac, cfg.select.budget_count)
    return budget(pool_size, frac, count)


def select_arm(cfg: Config, prompts: pd.DataFrame, arm: ArmConfig, train_seed: int | None = None) -> pd.DataFrame:
    """The selection of one arm (of training seed ``train_seed`` for a per-seed policy): its
    policy with its options; ``strategy`` holds the arm's name, ``policy`` its policy."""
    max_tier = arm.max_tier if arm.max_tier is not None else cfg.select.max_tier
    sel = select(prompts, arm.policy, arm_budget(cfg, arm, len(prompts)), cfg.select.seed, max_tier=max_tier,
                 tier_bins=cfg.select.tier_bins, train_seed=train_seed, levels=cfg.eprli.levels,
                 levels_seed=cfg.eprli.seed)
    return sel.assign(strategy=arm.name) if arm.name != arm.policy else sel


def _order(prompts: pd.DataFrame, key: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    """Rows sorted by ``key`` ascending, ties in a seeded random order."""
    perm = rng.permutation(len(prompts))
    order = perm[np.argsort(key[perm], kind="stable")]
    return prompts.iloc[order]


def select(prompts: pd.DataFrame, strategy: str, n: int, seed: int, *,
           max_tier: int | None = None, tier_bins: list[float] | None = None,
           train_seed: int | None = None, levels: list | None = None, levels_seed: int = 0) -> pd.DataFrame:
    """Rows of ``prompts`` (columns id, p_hat, tier, optional base_correct) chosen by ``strategy``;
    ``train_seed``: the training seed a per-seed policy draws for (required for those);
    ``levels``, ``levels_seed``: ``eprli.levels`` and ``eprli.seed`` (the EPRLI strategies)."""
    if strategy not in STRATEGIES:
        raise SelectionError(f"unknown strategy {strategy!r}; known: {list(STRATEGIES)}")
    if per_seed(strategy) and train_seed is None:
        raise SelectionError(f"{strategy}: draws one subset per training seed; pass train_seed")
    rng = _rng(seed, strategy, train_seed if per_seed(strategy) else None)
    p = prompts["p_hat"].to_numpy(dtype=float)
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        ids = list(prompts.loc[bad, "id"])
        raise SelectionError(f"{strategy}: {len(ids)} prompt(s) have no valid p_hat (missing, non-finite or "
                             f"outside [0, 1]), e.g. {ids[:5]}; they cannot be ranked. Rerun the probe stage "
                             "(01_probe) to rebuild its results")
    if strategy == "hard":
        chosen = _order(prompts, p, rng).iloc[:n]
    elif strategy == "easy":
        chosen = _order(prompts, -p, rng).iloc[:n]
    elif strategy == "middle":
        q1, med, q3 = np.quantile(p, [0.25, 0.5, 0.75])
        inside = prompts[(p >= q1) & (p <= q3)]
        if len(inside) < n:
            raise SelectionError(
                f"middle: only {len(inside)} prompts lie in the interquartile range "
                f"[{q1:.3f}, {q3:.3f}], fewer than the budget of {n}"
            )
        dist = np.abs(inside["p_hat"].to_numpy(dtype=float) - med)
        chosen = _order(inside, dist, rng).iloc[:n]
    elif strategy in ("random", CONTROL):
        chosen = prompts.iloc[np.sort(rng.choice(len(prompts), size=n, replace=False))]
    elif strategy in ("base_wrong", "base_right", "base_wrong_matched", "base_right_matched"):
        if "base_correct" not in prompts:
            raise SelectionError(f"{strategy}: the probe has no one-sample results (set probe.one_sample)")
        right = prompts["base_correct"].to_numpy(dtype=bool)
        wrong_rows, right_rows = prompts[~right], prompts[right]
        chosen = wrong_rows if strategy.startswith("base_wrong") else right_rows
        if strategy.endswith("_matched"):
            m = min(len(wrong_rows), len(right_rows))
            chosen = chosen.iloc[np.sort(rng.choice(len(chosen), size=m, replace=False))]
    elif strategy == "all":
        chosen = prompts
    elif strategy in EPRLI:
        chosen = level_rows(prompts, levels or [], levels_seed)
    else:  # tiers
        tiers = prompt_tiers(prompts, tier_bins)
        cut = max_tier if max_tier is not None else int(np.median(np.unique(tiers)))
        chosen = prompts[tiers <= cut]
    if len(chosen) == 0:
        raise SelectionError(f"{strategy}: selected no prompts")
    out = chosen[[c for c in ("id", "p_hat", "tier", "base_correct", "level") if c in chosen]].copy()
    out["strategy"] = strategy
    out["seed"] = seed
    if per_seed(strategy):
        out["train_seed"] = train_seed
    out["rank"] = np.arange(len(out))
    return out.reset_index(drop=True)


def level_rows(prompts: pd.DataFrame, levels: list, seed: int) -> pd.DataFrame:
    """Paper 002's data D_l: for each level in order, ``level.prompts`` prompts drawn (seeded,
    without replacement) from those whose p_hat lies in ``level.p_hat`` (inclusive) or whose
    tier is in ``level.tiers``; a prompt belongs to the first level that draws it. Rows in level
    order, with a ``level`` column (the level's name)."""
    if not levels:
        raise SelectionError("the EPRLI strategies need eprli.levels")
    taken: set = set()
    parts = []
    for i, lv in enumerate(levels):
        if lv.p_hat is not None:
            p = prompts["p_hat"].to_numpy(dtype=float)
            band = (p >= lv.p_hat[0]) & (p <= lv.p_hat[1])
            where = f"p_hat in [{lv.p_hat[0]}, {lv.p_hat[1]}]"
        else:
            band = prompts["tier"].isin(lv.tiers).to_numpy()
            where = f"tier in {lv.tiers}"
        pool = prompts[band & ~prompts["id"].isin(taken).to_numpy()]
        if len(pool) < lv.prompts:
            raise SelectionError(f"eprli level {lv.name!r}: {len(pool)} pool prompts with {where} (not already in "
                                 f"an earlier level), fewer than its prompts = {lv.prompts}; widen the band or "
                                 "lower the count")
        rng = np.random.default_rng([seed, zlib.crc32(b"eprli"), i])
        part = pool.iloc[np.sort(rng.choice(len(pool), size=lv.prompts, replace=False))].assign(level=lv.name)
        taken.update(part["id"])
        parts.append(part)
    return pd.concat(parts)


def prompt_tiers(prompts: pd.DataFrame, bins: list[float] | None) -> np.ndarray:
    """The task's tiers, or p_hat bins numbered 1 (hardest: lowest p_hat) upwards."""
    tier = prompts["tier"]
    if tier.notna().all():
        return tier.to_numpy(dtype=int)
    edges = np.asarray(bins or [0.0, 0.25, 0.5, 0.75, 1.0])
    # bin 1 holds the highest p_hat (easiest), so "lower tiers" means easier, as with MATH levels
    idx = np.digitize(prompts["p_hat"].to_numpy(dtype=float), edges[1:-1], right=True)
    return (len(edges) - 1 - idx).astype(int)


def predicted_learnable(p_hat: np.ndarray, group_size: int) -> float:
    """Expected share of groups with mixed rewards: mean of 1 - p^G - (1-p)^G."""
    p = np.asarray(p_hat, dtype=float)
    return float(np.mean(1 - p**group_size - (1 - p) ** group_size))


#: the prior of the posterior prediction when the pool cannot be fit (Jeffreys)
JEFFREYS = (0.5, 0.5)


def fit_beta_prior(n_correct: np.ndarray, k: np.ndarray | int) -> tuple[float, float]:
    """Beta(alpha, beta) prior of the prompts' success rates, fit to the pool's probe by the
    method of moments of the beta-binomial: the mean m of p_hat and its spread beyond the
    binomial's (Var p_hat = m (1 - m) / K x (1 + (K - 1) rho), rho = 1 / (alpha + beta + 1)).
    Jeffreys' Beta(0.5, 0.5) when the pool is too small or shows no spread to fit."""
    n_correct, k = np.asarray(n_correct, float), np.broadcast_to(np.asarray(k, float), np.shape(n_correct))
    if len(n_correct) < 10 or k.min() < 2:
        return JEFFREYS
    p = n_correct / k
    m, v, kk = p.mean(), p.var(ddof=1), k.mean()
    if not 0 < m < 1:
        return JEFFREYS
    rho = float(np.clip((kk * v / (m * (1 - m)) - 1) / (kk - 1), 1e-3, 1 - 1e-3))
    total = 1 / rho - 1
    return float(m * total), float((1 - m) * total)


def posterior_learnable(n_correct: np.ndarray, k: np.ndarray | int, group_size: int,
                        prior: tuple[float, float] = JEFFREYS) -> float:
    """Expected share of groups with mixed rewards under each prompt's posterior success rate,
    Beta(alpha + n_correct, beta + k - n_correct): mean of 1 - E[p^G] - E[(1-p)^G], where
    E[p^G] = B(a + G, b) / B(a, b). Unlike the plug-in, a prompt probed 0 of K is not certain
    to stay unsolved."""
    from scipy.special import betaln

    n_correct, k = np.asarray(n_correct, float), np.asarray(k, float)
    a, b = prior[0] + n_correct, prior[1] + k - n_correct
    all_right = np.exp(betaln(a + group_size, b) - betaln(a, b))
    all_wrong = np.exp(betaln(a, b + group_size) - betaln(a, b))
    return float(np.mean(1 - all_right - all_wrong))


def summarize(selections: dict[str, pd.DataFrame], pool: pd.DataFrame, group_size: int) -> pd.DataFrame:
    rows = [{"strategy": "pool", "size": len(pool), "mean_p_hat": pool["p_hat"].mean(),
             "predicted_learnable": predicted_learnable(pool["p_hat"], group_size)}]
    for name, sel in selections.items():
        rows.append({"strategy": name, "size": len(sel), "mean_p_hat": sel["p_hat"].mean(),
                     "predicted_learnable": predicted_learnable(sel["p_hat"], group_size)})
    return pd.DataFrame(rows).round(4)


def run_select(cfg: Config) -> pd.DataFrame:
    """Read the probe, write one parquet per arm (per arm and seed for a per-seed policy) and
    ``summary.csv``; return the summary."""
    from .probe import read_prompts

    prompts = read_prompts(cfg)
    selections = {}
    for arm in cfg.arms:
        for seed in cfg.train.seeds if per_seed(arm.policy) else [None]:
            sel = select_arm(cfg, prompts, arm, seed)
            artifacts.write_parquet(layout.selection_file(cfg, arm.name, seed), sel)
            selections[arm.name if seed is None else layout.run_id(arm.name, seed)] = sel
    summary = summarize(selections, prompts, cfg.train.group_size)
    artifacts.write_csv(layout.select_dir(cfg) / "summary.csv", summary)
    folder = layout.select_dir(cfg)  # digests: the train stage reads a selection only as written here
    names = sorted(p.name for p in folder.glob("*.parquet")) + ["summary.csv"]
    artifacts.write_json(folder / "manifest.json", {"sha256": artifacts.digests(folder, names)})
    return summary


def read_selections(cfg: Config) -> dict[str, pd.DataFrame]:
    """Every selection the study made, by arm (``<arm>-seed<s>`` for a per-seed policy)."""
    out = {}
    for arm in cfg.arms:
        for seed in cfg.train.seeds if per_seed(arm.policy) else [None]:
            path = layout.selection_file(cfg, arm.name, seed)
            if not path.exists():
                raise FileNotFoundError(f"{path}: no selection for arm {arm.name!r}; run the select stage")
            out[arm.name if seed is None else layout.run_id(arm.name, seed)] = artifacts.read_parquet(path, "02_select")
    return out
