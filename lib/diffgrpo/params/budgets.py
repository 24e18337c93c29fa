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
