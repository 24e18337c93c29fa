"""``posterior``: each prompt's success rate has a Beta posterior, from a Beta ``prior``
(``warm_start``: plus the probe's K samples of it, and then the probe is charged) and every group
generated at earlier steps (its verifier scores: successes and failures, a step-old one weighed
``decay`` per step); each step's prompts are the ``prompts_per_step`` whose Thompson draw lies
nearest ``target``. MoPPS, Qu et al. 2025, "Can Prompt Difficulty be Online Predicted for
Accelerating RL Finetuning of Reasoning Models?" (arXiv:2507.04632): streaming Bayesian inference
of each prompt's success rate and posterior sampling toward a target, with no extra rollouts.
Ours: the uniform prior, the form of ``decay``, the warm start from our probe, drawing from the
run's own selection.

Settings: the flat block (:class:`diffgrpo.online.FlatSettings`): ``target``, ``prior``,
``decay``, ``warm_start``.
"""

from __future__ import annotations

import numpy as np

from diffgrpo.online.base import FlatSettings, Method, register


@register("posterior")
class Posterior(Method):
    Settings = FlatSettings
    when = "before"
    cost = "its training groups; with warm_start the probe, in full"

    @classmethod
    def charges_probe(cls, settings) -> bool:
        return bool(settings.warm_start)

    def choose(self, batch: list, history: list[dict], step: int) -> tuple[list, int]:
        return self.thompson(history, step, len(batch)), 0

    def posterior(self, past: list[dict], step: int) -> tuple[np.ndarray, np.ndarray]:
        """Each prompt's Beta(alpha, beta) before step ``step`` (in the order of ``ids``)."""
        s = self.settings
        alpha = np.full(len(self.ids), float(s.prior[0]))
        beta = np.full(len(self.ids), float(s.prior[1]))
        at = {pid: i for i, pid in enumerate(self.ids)}
        if s.warm_start and self.warm:
            for pid, (wins, n) in self.warm.items():
                if pid in at:
                    alpha[at[pid]] += wins
                    beta[at[pid]] += n - wins
        for g in past:
            i = at.get(g["prompt_id"])
            if i is None or g["step"] >= step:  # a group of this step or later is no evidence yet
                continue
            w = s.decay ** (step - 1 - g["step"])
            wins = float(np.sum(np.asarray(g["scores"], float) == 1))
            alpha[i] += w * wins
            beta[i] += w * (len(g["scores"]) - wins)
        return alpha, beta

    def thompson(self, past: list[dict], step: int, n: int) -> list:
        """``n`` prompts whose draw from their posterior lies nearest ``target`` (ties: in order)."""
        alpha, beta = self.posterior(past, step)
        theta = self.rng(step).beta(alpha, beta)
        order = np.argsort(np.abs(theta - self.settings.target), kind="stable")
        return [self.ids[i] for i in order[:n]]
