"""Stage 2: choose which pool prompts GRPO trains on, from the probe's per-prompt p_hat.

Each arm names a selection policy (:mod:`diffgrpo.policies`: hard, easy, middle, random,
base_wrong/right, all, tiers, levels, or a plugin's) with its options; ``select/<arm>.parquet``
holds its selection, its ``strategy`` column the arm's name, ``rank`` the policy's order.

``n = floor(budget_frac * |pool|)`` or ``budget_count`` for a budgeted policy. Each policy
draws from its own random stream, seeded by (``select.seed``, policy name), so adding a policy
never changes another's selection; a per-seed policy (``random``) adds the training seed (except
seed 0, which draws what a one-seed study always drew) and makes one file per seed of
``train.seeds``, its seed in a ``train_seed`` column.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from diffgrpo.store import artifacts, layout
from diffgrpo import policies
from diffgrpo.params import ArmConfig, Config, budget_size
from diffgrpo.policies import SelectionError, prompt_tiers  # noqa: F401  (the stage's errors and tiers, re-exported)


def budget(pool_size: int, frac: float | None, count: int | None) -> int:
    """``floor(frac * pool_size)``, or ``count`` (:func:`~diffgrpo.params.budget_size`); at
    least 1 and at most the pool."""
    n = budget_size(pool_size, frac, count)
    if not 1 <= n <= pool_size:
        raise SelectionError(f"select: budget of {n} prompts does not fit a pool of {pool_size}")
    return n


def per_seed(policy: str) -> bool:
    return policies.get(policy).per_seed


def selection_path(cfg: Config, arm: str, seed: int):
    """The selection training seed ``seed`` of ``arm`` reads (its own for a per-seed policy)."""
    return layout.selection_file(cfg, arm, seed if per_seed(cfg.arm(arm).select) else None)


def selection_size(cfg: Config, arm: str, seed: int) -> int | None:
    """The prompts run (``arm``, ``seed``) trains on, None before the select stage wrote its
    selection (what :meth:`Config.run_steps` reads when ``train.epochs`` decides the steps)."""
    path = selection_path(cfg, arm, seed)
    return len(artifacts.read_parquet(path, "02_select")) if path.exists() else None


def arm_budget(cfg: Config, arm: ArmConfig, pool_size: int) -> int | None:
    """The arm's prompt count (None for a policy defined by a set): its own budget_frac /
    budget_count when it sets either, else the study's ``select.*``."""
    n = arm.selected_count(cfg.select, pool_size)
    return None if n is None else budget(pool_size, None, n)  # its bounds checked


def select_arm(cfg: Config, prompts: pd.DataFrame, arm: ArmConfig, train_seed: int | None = None) -> pd.DataFrame:
    """The selection of one arm (of training seed ``train_seed`` for a per-seed policy)."""
    options = {"max_tier": arm.max_tier if arm.max_tier is not None else cfg.select.max_tier,
               "tier_bins": cfg.select.tier_bins, "levels": cfg.eprli.levels, "levels_seed": cfg.eprli.seed}
    sel = select(prompts, arm.select, arm_budget(cfg, arm, len(prompts)), cfg.select.seed, train_seed=train_seed,
                 **{**options, **arm.options})  # an arm's own option (a plugin policy's max_tier) wins
    return sel.assign(strategy=arm.name)


def select(prompts: pd.DataFrame, policy: str, n: int | None, seed: int, *, train_seed: int | None = None,
           **options) -> pd.DataFrame:
    """Rows of ``prompts`` (columns id, p_hat, tier, optional base_correct) chosen by ``policy``
    with the ``options`` it takes, ranked; ``train_seed``: required for a per-seed policy."""
    pol = policies.get(policy)
    if pol.per_seed and train_seed is None:
        raise SelectionError(f"{policy}: draws one subset per training seed; pass train_seed")
    p = prompts["p_hat"].to_numpy(dtype=float)
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        ids = list(prompts.loc[bad, "id"])
        raise SelectionError(f"{policy}: {len(ids)} prompt(s) have no valid p_hat (missing, non-finite or "
                             f"outside [0, 1]), e.g. {ids[:5]}; they cannot be ranked. Rerun the probe stage "
                             "(01_probe) to rebuild its results")
    rng = np.random.default_rng([seed, zlib.crc32(policy.encode())] + ([train_seed] if pol.per_seed and train_seed else []))
    chosen = pol.fn(prompts, n, rng, **{k: v for k, v in options.items() if pol.accepts(k)})
    if not isinstance(chosen, pd.DataFrame) or not {"id", "p_hat"} <= set(chosen.columns):
        raise SelectionError(f"policy {policy!r} ({pol.origin}) returned {type(chosen).__name__}, not rows of the "
                             "prompts it was given")
    if chosen["id"].duplicated().any() or not chosen["id"].isin(prompts["id"]).all():
        raise SelectionError(f"policy {policy!r} ({pol.origin}) returned rows that are not distinct pool prompts")
    if len(chosen) == 0:
        raise SelectionError(f"{policy}: selected no prompts")
    out = chosen[[c for c in ("id", "p_hat", "tier", "base_correct", "level") if c in chosen]].copy()
    out["strategy"] = policy
    out["seed"] = seed
    if pol.per_seed:
        out["train_seed"] = train_seed
    out["rank"] = np.arange(len(out))
    return out.reset_index(drop=True)


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
    from diffgrpo.probe import read_prompts

    prompts = read_prompts(cfg)
    selections = {}
    for arm in cfg.arms:
        for seed in cfg.train.seeds if per_seed(arm.select) else [None]:
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
        for seed in cfg.train.seeds if per_seed(arm.select) else [None]:
            path = layout.selection_file(cfg, arm.name, seed)
            if not path.exists():
                raise FileNotFoundError(f"{path}: no selection for arm {arm.name!r}; run the select stage")
            out[arm.name if seed is None else layout.run_id(arm.name, seed)] = artifacts.read_parquet(path, "02_select")
    return out
