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
from diffgrpo.analysis.learnability import predicted_learnable
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
    repeated = sorted(set(chosen["id"][chosen["id"].duplicated()]), key=str)
    outside = sorted(set(chosen["id"][~chosen["id"].isin(prompts["id"])]), key=str)
    if repeated or outside:
        raise SelectionError(f"policy {policy!r} ({pol.origin}) returned rows that are not distinct pool prompts: "
                             + "; ".join(f"{what} {ids[:10]}{' ...' if len(ids) > 10 else ''} ({len(ids)})"
                                         for what, ids in (("repeated ids", repeated), ("ids not in the pool", outside))
                                         if ids) + "; a policy returns rows of the prompts it was given, each once")
    if len(chosen) == 0:
        raise SelectionError(f"{policy}: selected no prompts")
    out = chosen[[c for c in ("id", "p_hat", "tier", "base_correct", "level") if c in chosen]].copy()
    out["strategy"] = policy
    out["seed"] = seed
    if pol.per_seed:
        out["train_seed"] = train_seed
    out["rank"] = np.arange(len(out))
    return out.reset_index(drop=True)


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
            _check_fills_a_step(cfg, arm, sel)
            artifacts.write_parquet(layout.selection_file(cfg, arm.name, seed), sel)
            selections[arm.name if seed is None else layout.run_id(arm.name, seed)] = sel
    summary = summarize(selections, prompts, cfg.train.group_size)
    artifacts.write_csv(layout.select_dir(cfg) / layout.SELECTION_SUMMARY, summary)
    folder = layout.select_dir(cfg)  # digests: the train stage reads a selection only as written here
    names = sorted(p.name for p in folder.glob("*.parquet")) + [layout.SELECTION_SUMMARY]
    artifacts.write_json(folder / layout.MANIFEST, {"sha256": artifacts.digests(folder, names)})
    return summary


def _check_fills_a_step(cfg: Config, arm: ArmConfig, sel: pd.DataFrame) -> None:
    """A selection smaller than one step (the arm's train.prompts_per_step) is refused here, not
    at the train stage after every other arm's selection was written."""
    per_step = cfg.for_arm(arm.name).train.prompts_per_step
    if len(sel) < per_step:
        raise SelectionError(f"arm {arm.name!r} (policy {arm.select!r}) selected {len(sel)} prompts, fewer than one step "
                             f"needs (train.prompts_per_step = {per_step}); raise its budget, lower "
                             "train.prompts_per_step, or fix the policy")


def read_selections(cfg: Config) -> dict[str, pd.DataFrame]:
    """Every selection the study made, by arm (``<arm>-seed<s>`` for a per-seed policy)."""
    out = {}
    for arm in cfg.arms:
        for seed in cfg.train.seeds if per_seed(arm.select) else [None]:
            path = layout.selection_file(cfg, arm.name, seed)
            if not path.exists():
                raise layout.NotRunYet(f"{path}: no selection for arm {arm.name!r}; run the select stage (02_select)")
            out[arm.name if seed is None else layout.run_id(arm.name, seed)] = artifacts.read_parquet(path, "02_select")
    return out
