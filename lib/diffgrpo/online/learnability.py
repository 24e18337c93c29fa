"""``learnability``: each step's prompts are drawn, without replacement, with probability in
proportion to p(1 - p) of each prompt's online success estimate p (plus ``floor``), so prompts
the policy solves about half the time are trained on most and solved or unsolvable ones rarely.

The rule is LILO's (Foster and Foerster 2025, "Learning to Reason at the Frontier of
Learnability", arXiv:2502.12272): the variance of a Bernoulli reward, p(1 - p), measures how
much a prompt can teach, and training samples prompts in proportion to it. The paper was not at
hand when this was written (not in the project's sources); the rule is the one issue 38 states.
Ours: p is the mean verifier score of the prompt's last ``window`` groups in this run (LILO
estimates p from rollouts of a larger sampled batch); a prompt with no group yet counts p =
``unseen`` (0.5: the most learnable, so every prompt is tried); ``floor`` keeps a weight above
zero for prompts whose last groups were flat, so they can come back as the policy moves; the
draw is from the run's own selection.

Chooses before generation (one training process); costs its training groups only (no probe,
no extra rollouts).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated

import numpy as np
from pydantic import Field

from diffgrpo.online.base import Frac, Method, PosInt, Settings, register


class LearnabilitySettings(Settings):
    window: PosInt = 1  # groups of a prompt (its latest) its success estimate averages
    unseen: Frac = 0.5  # the estimate of a prompt with no group yet
    floor: Annotated[float, Field(gt=0.0, le=0.25)] = 0.01  # added to every p(1 - p): no prompt's chance is zero


@register("learnability")
class Learnability(Method):
    Settings = LearnabilitySettings
    when = "before"

    def estimates(self, past: list[dict]) -> np.ndarray:
        """Each prompt's success estimate (in the order of ``ids``) from its last ``window`` groups."""
        scores: dict = defaultdict(list)
        for g in sorted(past, key=lambda g: g["step"]):
            scores[g["prompt_id"]].append(float(np.mean(g["scores"])))
        w = self.settings.window
        return np.array([np.mean(scores[pid][-w:]) if scores.get(pid) else self.settings.unseen for pid in self.ids])

    def weights(self, past: list[dict]) -> np.ndarray:
        """Each prompt's probability of being drawn: p(1 - p) + floor, normalised."""
        p = self.estimates(past)
        w = p * (1 - p) + self.settings.floor
        return w / w.sum()

    def choose(self, batch: list, history: list[dict], step: int) -> tuple[list, int]:
        past = [g for g in history if g["step"] < step]
        n = min(len(batch), len(self.ids))
        drawn = self.rng(step).choice(len(self.ids), size=n, replace=False, p=self.weights(past))
        chosen = [self.ids[i] for i in drawn]
        return chosen + list(batch[n:]), 0
