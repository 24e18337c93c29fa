"""Online selection: which prompts a run generates and trains on, decided inside training from the
rewards it already computes, over whatever its selection policy gave it (usually the whole pool,
``select: all``). ``train.online.method`` (the treatments ``<arm>_online_band``,
``<arm>_posterior``, ``<arm>_posterior_warm``, ``<arm>_skip_zero_variance``;
docs/online_selection.md says what each takes from its paper and what is ours):

- ``band``: a group enters the update only if its rewards differ and their mean lies in
  ``train.online.band``; the update is refilled by dynamic sampling's rounds
  (:class:`diffgrpo.train.trainer.Trainer`, ``dynamic_sampling.max_rounds``). Bae et al. 2025,
  "Online Difficulty Filtering for Reasoning Oriented Reinforcement Learning"
  (arXiv:2504.03380): balanced filtering keeps the prompts of intermediate accuracy. With the
  band [0, 1] it is DAPO's dynamic sampling (arXiv:2503.14476), which stays as it was
  (``train.dynamic_sampling``).
- ``posterior``: each prompt's success rate has a Beta posterior, from a Beta ``prior``
  (``warm_start``: plus the probe's K samples of it) and every group generated at earlier steps
  (its verifier scores: successes and failures, a step-old one weighed ``decay`` per step); each
  step's prompts are the ``prompts_per_step`` whose Thompson draw lies nearest ``target``. MoPPS,
  Qu et al. 2025, "Can Prompt Difficulty be Online Predicted for Accelerating RL Finetuning of
  Reasoning Models?" (arXiv:2507.04632): streaming Bayesian inference of each prompt's success
  rate and posterior sampling toward a target, with no extra rollouts.
- ``skip_zero_variance``: a prompt whose last ``window`` groups all had equal rewards is
  skipped before generation, unless a draw of probability ``recheck`` lets it through; the step
  is filled with other prompts of the selection. GRESO, Zheng et al. 2025, "Act Only When It
  Pays: Efficient Reinforcement Learning for LLM Reasoning via Selective Rollouts"
  (arXiv:2506.02177): skip prompts predicted, from their reward history, to give zero-variance
  groups. Their exploration probability adapts during training; ours is fixed.

Every draw is seeded by (run seed, step, method), and the history is the run's recorded groups
of earlier steps (``groups.parquet``), so a resumed run chooses what an uninterrupted one did.
Pure functions of the history: no model, no TRL (tests/test_online.py).
"""

from __future__ import annotations

import zlib
from collections import defaultdict

import numpy as np

#: the methods that choose a step's prompts before generation (the others filter groups after it)
CHOOSING = ("posterior", "skip_zero_variance")


class OnlineSelection:
    """``train.online`` of one run over its prompts ``ids`` (the selection, in order); ``warm``:
    each prompt's (successes, samples) in the probe, for ``warm_start``."""

    def __init__(self, settings, seed: int, ids: list, warm: dict | None = None):
        self.method, self.seed, self.ids = settings.method, int(seed), list(ids)
        self.band, self.target, self.prior = tuple(settings.band), settings.target, tuple(settings.prior)
        self.decay, self.window, self.recheck = settings.decay, settings.window, settings.recheck
        self.warm = warm if settings.warm_start else None

    @property
    def chooses(self) -> bool:
        return self.method in CHOOSING

    def keep(self, group: dict) -> bool:
        """Whether a generated group enters the update: its rewards differ (dynamic sampling's
        rule) and, for ``band``, their mean lies in the band."""
        if not group["learnable"]:
            return False
        return self.method != "band" or self.band[0] - 1e-9 <= group["reward_mean"] <= self.band[1] + 1e-9

    def choose(self, batch: list, history: list[dict], step: int) -> tuple[list, int]:
        """The prompts step ``step`` generates instead of the sampler's ``batch`` (ids), and how
        many of ``batch`` were skipped; ``history``: the run's groups (those of earlier steps count)."""
        past = [g for g in history if g["step"] < step]
        if self.method == "posterior":
            return self.thompson(past, step, len(batch)), 0
        if self.method == "skip_zero_variance":
            return self.skip(batch, past, step)
        return list(batch), 0

    def rng(self, step: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, step, zlib.crc32(self.method.encode())])

    def posterior(self, past: list[dict], step: int) -> tuple[np.ndarray, np.ndarray]:
        """Each prompt's Beta(alpha, beta) before step ``step`` (in the order of ``ids``)."""
        alpha = np.full(len(self.ids), float(self.prior[0]))
        beta = np.full(len(self.ids), float(self.prior[1]))
        at = {pid: i for i, pid in enumerate(self.ids)}
        if self.warm:
            for pid, (wins, n) in self.warm.items():
                if pid in at:
                    alpha[at[pid]] += wins
                    beta[at[pid]] += n - wins
        for g in past:
            i = at.get(g["prompt_id"])
            if i is None or g["step"] >= step:  # a group of this step or later is no evidence yet
                continue
            w = self.decay ** (step - 1 - g["step"])
            wins = float(np.sum(np.asarray(g["scores"], float) == 1))
            alpha[i] += w * wins
            beta[i] += w * (len(g["scores"]) - wins)
        return alpha, beta

    def thompson(self, past: list[dict], step: int, n: int) -> list:
        """``n`` prompts whose draw from their posterior lies nearest ``target`` (ties: in order)."""
        alpha, beta = self.posterior(past, step)
        theta = self.rng(step).beta(alpha, beta)
        order = np.argsort(np.abs(theta - self.target), kind="stable")
        return [self.ids[i] for i in order[:n]]

    def zero_variance(self, past: list[dict]) -> set:
        """The prompts whose last ``window`` groups (at least that many) all had equal rewards."""
        recent: dict = defaultdict(list)
        for g in sorted(past, key=lambda g: g["step"]):
            recent[g["prompt_id"]].append(bool(g["learnable"]))
        return {pid for pid, flags in recent.items() if len(flags) >= self.window and not any(flags[-self.window:])}

    def skip(self, batch: list, past: list[dict], step: int) -> tuple[list, int]:
        """``batch`` without its skippable prompts (each re-checked with probability ``recheck``),
        filled up to its size with the selection's other prompts that pass the same test, in a
        seeded order; with too few of them, with skipped ones."""
        rng, flat = self.rng(step), self.zero_variance(past)
        passes = {pid: pid not in flat or rng.random() < self.recheck for pid in self.ids}
        chosen = [pid for pid in batch if passes[pid]]
        skipped = len(batch) - len(chosen)
        taken = set(batch)
        others = [self.ids[i] for i in rng.permutation(len(self.ids)) if self.ids[i] not in taken]
        fill = [pid for pid in others if passes[pid]] + [pid for pid in batch if not passes[pid]]
        return chosen + fill[:len(batch) - len(chosen)], skipped
