"""What a params file plans each arm to spend, before any run: what of the probe an arm is charged
(:func:`charged_part`), its planned total rollouts (:func:`planned_rollouts`) and the budget the
report compares it at (:func:`budget_level`). The compute ledger of what a run did spend is
:mod:`diffgrpo.train.ledger`, which charges by these; they live in the config layer so that the
params' own checks (a declared question across budgets) and the report read them without the
trainer.
"""

from __future__ import annotations

from typing import Any

from diffgrpo import online, policies

#: a :class:`diffgrpo.params.Config` (not imported: the schema's own checks call these)
Config = Any


def charges_probe(cfg: Config, arm: str) -> bool:
    """Whether ``arm``'s runs are charged the probe, or part of it (module docstring); ``cfg``: the arm's."""
    return charged_part(cfg, arm) is not None


def charged_part(cfg: Config, arm: str, ignore_charge_probe: bool = False) -> str | None:
    """What of the probe ``arm``'s runs are charged: ``"all"``, ``"one_sample"`` (a policy that
    reads only the greedy one-sample pass) or None; ``ignore_charge_probe``: what the policy and
    training alone decide."""
    a = cfg.arm(arm)
    if a.charge_probe is not None and not ignore_charge_probe:
        return "all" if a.charge_probe else None
    settings = cfg.train.online
    if settings.method != online.NONE and online.get(settings.method).charges_probe(settings):
        return "all"  # the method's choice reads the probe (a posterior warm-started from it)
    reads = policies.get(a.select).reads_probe
    return "one_sample" if reads == "one_sample" else ("all" if reads else None)


def planned_rollouts(cfg: Config, arm: str) -> int | None:
    """The total rollouts an arm is planned to spend: its ``train.max_completions`` plus the probe
    it is charged (pool size x K, and the pool once more with the one-sample probe); None for an
    arm with no completion budget. Arms with equal planned totals are compared at equal budget
    (the report's ``budgets`` section); a run overshoots its budget by less than one step."""
    acfg = cfg.for_arm(arm)
    if acfg.train.max_completions is None:
        return None
    pool, part = cfg.dataset.pool_size or 0, charged_part(acfg, arm)
    probe = {None: 0, "one_sample": pool, "all": pool * cfg.probe.k + (pool if cfg.probe.one_sample else 0)}[part]
    return acfg.train.max_completions + probe


def budget_level(cfg: Config, arm: str) -> int | None:
    """The total-rollout budget an arm is placed at, for the report's families (no Holm family
    mixes budgets, :func:`diffgrpo.analysis.uncertainty.pair_families`): its :func:`planned_rollouts`
    where the arm sets its own ``train.max_completions`` (a study of budgets: online_vs_offline's
    ``hard.b576``), else None (a study-wide cap is a cap, not a budget the arms are compared at)."""
    return planned_rollouts(cfg, arm) if "max_completions" in cfg.arm(arm).train else None


def _trajectory(cfg: Config, arm: str) -> str | None:
    """What an arm's runs train, bar where they stop: its own settings without
    ``train.max_completions`` and ``charge_probe`` (which end or charge a run without changing a
    step of it), or None for an arm that is no budget of a trajectory (no budget of its own,
    ``budgets_as_checkpoints`` off, or a levels curriculum, whose budget is split over its levels)."""
    import json

    a, t = cfg.arm(arm), cfg.for_arm(arm).train
    if "max_completions" not in a.train or not t.budgets_as_checkpoints or a.curriculum != "none" \
            or a.select == "levels":
        return None
    train = {k: v for k, v in t.model_dump().items() if k != "max_completions"}
    rest = {k: v for k, v in a.model_dump().items() if k not in ("name", "train", "charge_probe")}
    return json.dumps({"train": train, "arm": rest}, sort_keys=True, default=str)


def checkpoint_of(cfg: Config) -> dict[str, str]:
    """``{arm: the arm whose runs it is a checkpoint of}`` (issue 46, "budgets as checkpoints"):
    arms that train the same steps and differ only in their own ``train.max_completions`` (and
    ``charge_probe``) are one trajectory per seed, and only the largest budget's run trains; it
    saves a checkpoint at the first step whose completions reach each smaller budget
    (:func:`checkpoint_marks`), and each smaller arm's run is that checkpoint
    (:func:`diffgrpo.train.derived.derive`). The schedule must not depend on the budget, and it
    does not here: it runs over ``train.max_steps`` (or epochs of the selection), never over the
    budget. An arm maps to the first arm of its trajectory with the largest budget; the largest
    maps to nothing. Empty when no two arms share a trajectory."""
    groups: dict[str, list[str]] = {}
    for a in cfg.arms:
        key = _trajectory(cfg, a.name)
        if key is not None:
            groups.setdefault(key, []).append(a.name)
    out: dict[str, str] = {}
    for arms in groups.values():
        if len(arms) < 2:
            continue
        parent = max(arms, key=lambda a: (cfg.for_arm(a).train.max_completions, -arms.index(a)))
        out.update({a: parent for a in arms if a != parent})
    return out


def checkpoint_marks(cfg: Config, arm: str) -> list[int]:
    """The training completions at which ``arm``'s runs save a checkpoint for the arms that are
    checkpoints of them (:func:`checkpoint_of`): their ``train.max_completions``, ascending."""
    return sorted({cfg.for_arm(c).train.max_completions for c, p in checkpoint_of(cfg).items() if p == arm})
