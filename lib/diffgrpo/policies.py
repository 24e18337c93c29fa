"""Selection policies: which pool prompts an arm trains on. One function each, by name.

A policy is ``fn(prompts, n, rng, **options) -> DataFrame``: ``prompts`` is the probed pool
(columns ``id``, ``p_hat``, ``tier``, and ``base_correct`` when the one-sample probe ran), ``n``
the arm's budget (None for a policy defined by a set, not a size), ``rng`` a
``numpy.random.Generator`` seeded for this policy (and training seed, for a per-seed policy);
it returns the selected rows, in training-rank order. Register your own in a plugin file
(params ``plugins:``, docs/extending.md)::

    from diffgrpo import policies

    @policies.register("hard_but_solved", budgeted=True)
    def hard_but_solved(prompts, n, rng, **options):
        solved = prompts[prompts["p_hat"] > 0]
        return policies.lowest(solved, solved["p_hat"], rng).iloc[:n]

``options`` are the arm's ``options:`` mapping plus the study-wide settings a policy may read
(``max_tier``, ``tier_bins``, ``levels``, ``levels_seed``); a function takes only those it names.

Built in (paper 003 section 2.3, blog 001, paper 000, paper 002): ``hard`` / ``easy`` (lowest /
highest p_hat), ``middle`` (nearest the median, inside the interquartile range), ``random``
(drawn anew per training seed), ``base_wrong`` / ``base_right`` (+ ``_matched``: cut to the
smaller one's size), ``all``, ``p_hat_band`` (every prompt with p_hat in [low, high]: 003's
released code), ``tiers`` (tier <= max_tier) and ``levels`` (paper 002's data D_l per EPRLI
level).
"""

from __future__ import annotations

import inspect
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diffgrpo.registry import Registry


class SelectionError(ValueError):
    pass


@dataclass(frozen=True)
class Policy:
    name: str
    fn: Callable[..., pd.DataFrame]
    budgeted: bool  # takes a size n (budget_frac / budget_count); else defined by a set
    per_seed: bool  # draws its own subset for every training seed
    origin: str  # where it was registered (a module or plugin file)
    # what of the probe its choice depends on, and so what a run's compute ledger charges it
    # (diffgrpo.train.ledger): True the whole probe (p_hat's K samples, and the one-sample pass when
    # it ran), "one_sample" the greedy one-sample pass alone (base_correct), False nothing
    reads_probe: bool | str = True

    def accepts(self, option: str) -> bool:
        sig = inspect.signature(self.fn).parameters
        return option in sig or any(p.kind is p.VAR_KEYWORD for p in sig.values())


_POLICIES: Registry[Policy] = Registry("selection policy", SelectionError)


def register(name: str, *, budgeted: bool = False, per_seed: bool = False, reads_probe: bool | str = True):
    """Decorator: register ``fn`` as selection policy ``name``. ``reads_probe``: what of the probe
    its choice depends on, so what a run's compute ledger charges it (diffgrpo.train.ledger):
    True the whole probe, ``"one_sample"`` the greedy one-sample pass alone (``base_wrong``),
    False nothing (``random``, ``all``)."""
    if reads_probe not in (True, False, "one_sample"):
        raise SelectionError(f"policy {name}: reads_probe must be True, False or 'one_sample', not {reads_probe!r}")

    def deco(fn: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
        _POLICIES.add(name, Policy(name, fn, budgeted, per_seed, getattr(fn, "__module__", "?"), reads_probe), fn)
        return fn

    return deco


get, names = _POLICIES.get, _POLICIES.names


def lowest(prompts: pd.DataFrame, key, rng: np.random.Generator) -> pd.DataFrame:
    """Rows sorted by ``key`` ascending, ties in a seeded random order (ties in p_hat are common:
    many prompts sit at 0 or 1)."""
    key = np.asarray(key, dtype=float)
    perm = rng.permutation(len(prompts))
    return prompts.iloc[perm[np.argsort(key[perm], kind="stable")]]


# ---- the built-in policies ------------------------------------------------------------------
@register("hard", budgeted=True)
def hard(prompts, n, rng):
    return lowest(prompts, prompts["p_hat"], rng).iloc[:n]


@register("easy", budgeted=True)
def easy(prompts, n, rng):
    return lowest(prompts, -prompts["p_hat"].to_numpy(dtype=float), rng).iloc[:n]


@register("middle", budgeted=True)
def middle(prompts, n, rng):
    p = prompts["p_hat"].to_numpy(dtype=float)
    q1, med, q3 = np.quantile(p, [0.25, 0.5, 0.75])
    inside = prompts[(p >= q1) & (p <= q3)]
    if len(inside) < n:
        raise SelectionError(f"middle: only {len(inside)} prompts lie in the interquartile range "
                             f"[{q1:.3f}, {q3:.3f}], fewer than the budget of {n}")
    out = lowest(inside, np.abs(inside["p_hat"].to_numpy(dtype=float) - med), rng).iloc[:n]
    chosen = np.sort(out["p_hat"].to_numpy(dtype=float))
    for other, ends in (("hard", np.sort(p)[:n]), ("easy", np.sort(p)[::-1][:n][::-1])):
        if np.array_equal(chosen, ends):
            warnings.warn_explicit(f"middle: the median p_hat ({med:.3f}) equals the {'first' if other == 'hard' else 'third'} "
                          f"quartile ({q1 if other == 'hard' else q3:.3f}), so middle's {n} prompts have the same p_hat "
                          f"as {other}'s: the two arms train on equally difficult prompts and their contrast says nothing "
                          "about difficulty. Probe with a larger K (probe.k) for finer p_hat, or drop one of the arms",
                          # named by the policy, not by a file of this machine (it shows in executed notebooks)
                          MiddleIsNotMiddle, filename="policy middle", lineno=0, module=__name__)
    return out


class MiddleIsNotMiddle(UserWarning):
    """``middle`` picked prompts as difficult as ``hard``'s (or ``easy``'s): p_hat too coarse."""


@register("random", budgeted=True, per_seed=True, reads_probe=False)
def random(prompts, n, rng):
    return prompts.iloc[np.sort(rng.choice(len(prompts), size=n, replace=False))]


def _base(prompts: pd.DataFrame, wrong: bool, matched: bool, rng) -> pd.DataFrame:
    if "base_correct" not in prompts:
        raise SelectionError("base_wrong/base_right: the probe has no one-sample results (set probe.one_sample)")
    right = prompts["base_correct"].to_numpy(dtype=bool)
    chosen = prompts[~right] if wrong else prompts[right]
    if matched:
        m = min(int((~right).sum()), int(right.sum()))
        chosen = chosen.iloc[np.sort(rng.choice(len(chosen), size=m, replace=False))]
    return chosen


@register("base_wrong", reads_probe="one_sample")
def base_wrong(prompts, n, rng):
    return _base(prompts, True, False, rng)


@register("base_right", reads_probe="one_sample")
def base_right(prompts, n, rng):
    return _base(prompts, False, False, rng)


@register("base_wrong_matched", reads_probe="one_sample")
def base_wrong_matched(prompts, n, rng):
    return _base(prompts, True, True, rng)


@register("base_right_matched", reads_probe="one_sample")
def base_right_matched(prompts, n, rng):
    return _base(prompts, False, True, rng)


@register("all", reads_probe=False)
def all_prompts(prompts, n, rng):
    return prompts


@register("p_hat_band")
def p_hat_band(prompts, n, rng, low=0.0, high=1.0):
    """Every prompt whose p_hat lies in [``low``, ``high``] (inclusive), in pool order: a whole
    difficulty bucket, as 003's released code selects (``p_hat <= 0.3`` on shuffled objects:
    ``low: 0, high: 0.3``; one exact bucket on GSM8K: ``low = high``), not a budget."""
    if not 0.0 <= low <= high <= 1.0:
        raise SelectionError(f"p_hat_band: options low = {low}, high = {high}; need 0 <= low <= high <= 1")
    p = prompts["p_hat"].to_numpy(dtype=float)
    band = prompts[(p >= low - 1e-9) & (p <= high + 1e-9)]
    if band.empty:
        raise SelectionError(f"p_hat_band: no pool prompt has p_hat in [{low}, {high}]; widen the band")
    return band


@register("tiers")
def tiers(prompts, n, rng, max_tier=None, tier_bins=None):
    """Every prompt whose tier is at most ``max_tier`` (000: train on the lower tiers only);
    tiers from p_hat bins when the task has none; no max_tier: the median tier."""
    t = prompt_tiers(prompts, tier_bins)
    cut = max_tier if max_tier is not None else int(np.median(np.unique(t)))
    return prompts[t <= cut]


@register("levels")
def levels(prompts, n, rng, levels=(), levels_seed=0):
    """Paper 002's data D_l: for each level in order, ``level.prompts`` prompts drawn (seeded,
    without replacement) from those whose p_hat lies in ``level.p_hat`` (inclusive) or whose
    tier is in ``level.tiers``; a prompt belongs to the first level that draws it. Rows in level
    order, with a ``level`` column (the level's name)."""
    if not levels:
        raise SelectionError("policy `levels` needs eprli.levels")
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
        level_rng = np.random.default_rng([levels_seed, zlib.crc32(b"eprli"), i])
        part = pool.iloc[np.sort(level_rng.choice(len(pool), size=lv.prompts, replace=False))].assign(level=lv.name)
        taken.update(part["id"])
        parts.append(part)
    return pd.concat(parts)


def prompt_tiers(prompts: pd.DataFrame, bins: list[float] | None) -> np.ndarray:
    """The task's tiers, or p_hat bins numbered 1 (easiest: highest p_hat) upwards, so that "lower
    tiers" means easier, as with MATH levels and shuffled-objects swaps."""
    tier = prompts["tier"]
    if tier.notna().all():
        return tier.to_numpy(dtype=int)
    edges = np.asarray(bins or [0.0, 0.25, 0.5, 0.75, 1.0])
    # bin 1 holds the highest p_hat (easiest), so "lower tiers" means easier, as with MATH levels
    idx = np.digitize(prompts["p_hat"].to_numpy(dtype=float), edges[1:-1], right=True)
    return (len(edges) - 1 - idx).astype(int)
