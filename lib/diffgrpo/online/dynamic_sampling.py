"""``dynamic_sampling``: drop groups whose rewards are all equal (no advantage, no gradient) and
generate more prompts until the update is full or ``max_rounds`` rounds ran. DAPO, Yu et al.
2025 (arXiv:2503.14476); verl's ``filter_groups``. Ours: the extra rounds draw prompts the step
has not generated yet, seeded by (seed, step, round).

Settings: ``train.dynamic_sampling`` (:class:`DynamicSamplingParams`: ``enabled``,
``max_rounds``), where they were before the registry, so run keys stay; it combines with any
other method (``band`` refills with its rounds). ``train.online.method: dynamic_sampling`` is
the same run spelled as a method: the params turn it into ``dynamic_sampling.enabled: true``
at load (one run key for both), so a loaded config never names this method; a run reads the
switch (:mod:`diffgrpo.train.online`), and the class below states the rule the switch trains
with (the base class's ``keep``: any group whose rewards differ). Cost: every group generated,
those dropped included.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from diffgrpo.online.base import Method, PosInt, Settings, register


class DynamicSamplingParams(BaseModel):
    """``train.dynamic_sampling``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    enabled: bool
    max_rounds: PosInt


class DynamicSamplingSettings(Settings):
    """``train.online`` of ``method: dynamic_sampling``: no keys of its own (its rounds are
    ``train.dynamic_sampling.max_rounds``)."""


@register("dynamic_sampling")
class DynamicSampling(Method):
    Settings = DynamicSamplingSettings
    when = "after"
    refills = True
    cost = "every group generated, those it dropped included"
