"""``band``: a group enters the update only if its rewards differ and their mean lies in
``train.online.band``; the update is refilled by dynamic sampling's rounds
(``dynamic_sampling.max_rounds``). Bae et al. 2025, "Online Difficulty Filtering for Reasoning
Oriented Reinforcement Learning" (arXiv:2504.03380): balanced filtering keeps the prompts of
intermediate accuracy. Ours: the default band [0.25, 0.75]; the refill is DAPO's rounds (seeded
draws of prompts the step has not generated). With the band [0, 1] it is dynamic sampling.

Settings: the flat block (:class:`diffgrpo.online.FlatSettings`), of which it reads ``band``.
Cost: its training groups, those it dropped included.
"""

from __future__ import annotations

from diffgrpo.online.base import FlatSettings, Method, register


@register("band")
class Band(Method):
    Settings = FlatSettings
    when = "after"
    refills = True
    cost = "every group generated, those it dropped included"

    def keep(self, group: dict) -> bool:
        low, high = self.settings.band
        return bool(group["learnable"]) and low - 1e-9 <= group["reward_mean"] <= high + 1e-9
