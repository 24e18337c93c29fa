"""``skip_zero_variance``: a prompt whose last ``window`` groups all had equal rewards is skipped
before generation, unless a draw of probability ``recheck`` lets it through; the step is filled
with other prompts of the selection that pass the same test. GRESO, Zheng et al. 2025, "Act Only
When It Pays: Efficient Reinforcement Learning for LLM Reasoning via Selective Rollouts"
(arXiv:2506.02177): skip prompts predicted, from their reward history, to give zero-variance
groups. Ours: a fixed ``recheck`` (GRESO adapts its exploration probability), the fill from the
selection.

Settings: the flat block (:class:`diffgrpo.online.FlatSettings`): ``window``, ``recheck``.
"""

from __future__ import annotations

from collections import defaultdict

from diffgrpo.online.base import FlatSettings, Method, register


@register("skip_zero_variance")
class SkipZeroVariance(Method):
    Settings = FlatSettings
    when = "before"

    def choose(self, batch: list, history: list[dict], step: int) -> tuple[list, int]:
        return self.skip(batch, [g for g in history if g["step"] < step], step)

    def zero_variance(self, past: list[dict]) -> set:
        """The prompts whose last ``window`` groups (at least that many) all had equal rewards."""
        window = self.settings.window
        recent: dict = defaultdict(list)
        for g in sorted(past, key=lambda g: g["step"]):
            recent[g["prompt_id"]].append(bool(g["learnable"]))
        return {pid for pid, flags in recent.items() if len(flags) >= window and not any(flags[-window:])}

    def skip(self, batch: list, past: list[dict], step: int) -> tuple[list, int]:
        """``batch`` without its skippable prompts (each re-checked with probability ``recheck``),
        filled up to its size with the selection's other prompts that pass the same test, in a
        seeded order; with too few of them, with skipped ones."""
        rng, flat = self.rng(step), self.zero_variance(past)
        passes = {pid: pid not in flat or rng.random() < self.settings.recheck for pid in self.ids}
        chosen = [pid for pid in batch if passes[pid]]
        skipped = len(batch) - len(chosen)
        taken = set(batch)
        others = [self.ids[i] for i in rng.permutation(len(self.ids)) if self.ids[i] not in taken]
        fill = [pid for pid in others if passes[pid]] + [pid for pid in batch if not passes[pid]]
        return chosen + fill[:len(batch) - len(chosen)], skipped
