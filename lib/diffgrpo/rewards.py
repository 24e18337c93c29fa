"""Rewards an arm trains on, by name: the verifier's score, the control arm's Bernoulli draw, a
length penalty, or your own.

A reward has TRL's reward-function signature, ``fn(prompts, completions, completion_ids=None,
**kwargs) -> list[float]``, called once per generated batch (groups contiguous), with these
keyword arguments besides the dataset's columns (``answer``, ``id``, ``tier``) and TRL's
``trainer_state``:

- ``scores``: the task verifier's score of each completion (1.0 right, 0.0 wrong);
- ``run``: a :class:`RunContext` (seed, group size, the update's step, the selection's rows,
  the completion length limit, the task, whose ``extract`` reads a completion's answer).

An arm names its reward (``reward: verifier``) or several with weights, summed the way TRL's
``reward_weights`` sums them (``reward: {verifier: 1.0, overlong: 0.5}``). Register your own in
a plugin file (params ``plugins:``, docs/extending.md)::

    from diffgrpo import rewards

    @rewards.register("partial_credit")
    def partial_credit(prompts, completions, completion_ids=None, *, scores, **kwargs):
        return [1.0 if s else 0.2 * ("answer" in rewards.text(c).lower()) for c, s in zip(completions, scores)]

A reward that is not the verifier's enters each run's key by its name and a digest of its
code (a plugin's: its whole file and the files beside it that it imports,
:func:`diffgrpo.registry.code_digest`; or what its ``key`` returns), so a run trained on another
reward, or on an edited one or one whose helper was edited, is never taken for this one.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from diffgrpo.registry import Registry, code_digest, shown, source_file

#: the reward of every arm that names none: the task verifier's score
VERIFIER = "verifier"


@dataclass(frozen=True)
class RunContext:
    seed: int
    group_size: int
    step: int  # the update this batch feeds (1-based)
    rows: pd.DataFrame  # the run's selection (id, p_hat, ...)
    max_completion_length: int
    task: Any = None  # the run's task (diffgrpo.tasks.Task)


@dataclass(frozen=True)
class Reward:
    name: str
    fn: Callable[..., list[float]]
    key: Callable[[pd.DataFrame, int], dict] | None  # (selection rows, seed) -> what enters the run key
    control: bool = False  # carries no signal about the answers: an arm trained on it alone is a control arm

    def run_key(self, rows: pd.DataFrame, seed: int) -> dict[str, Any] | None:
        if self.name == VERIFIER:
            return None  # the verifier adds nothing: 003's runs keep their keys
        if self.key:
            return self.key(rows, seed)
        return {"kind": self.name, "source_sha256": code_digest(self.fn)}  # a plugin's whole file and helpers


_REWARDS: Registry[Reward] = Registry("reward", KeyError)


def register(name: str, *, key: Callable[[pd.DataFrame, int], dict] | None = None, control: bool = False):
    """Decorator: register ``fn`` as reward ``name``; ``key(rows, seed)``: what of the run decides
    its rewards besides the name (the control arm's mean and seed); ``control``: a control's
    reward, one an arm trains on alone only with ``role: control``."""

    def deco(fn):
        _REWARDS.add(name, Reward(name, fn, key, control), fn)
        return fn

    return deco


get, names = _REWARDS.get, _REWARDS.names


def text(completion: Any) -> str:
    """A completion's text: TRL passes chat messages for conversational prompts (the last
    message's content, content blocks joined), a string otherwise."""
    if isinstance(completion, str):
        return completion
    content = completion[-1]["content"]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content


class RewardError(ValueError):
    """A reward function returned something other than one finite number per completion."""


def combine(weights: dict[str, float], **kwargs) -> np.ndarray:
    """The weighted sum of the named rewards (TRL's ``reward_weights``), as floats; each reward's
    values checked first (:func:`checked`), so a NaN never reaches an update."""
    total = None
    for name, w in weights.items():
        r = w * checked(name, get(name).fn(**kwargs), kwargs.get("completions"), kwargs.get("id"), kwargs.get("run"))
        total = r if total is None else total + r
    return total


def checked(name: str, values: Any, completions: Sequence | None, ids: Sequence | None,
            run: RunContext | None = None) -> np.ndarray:
    """``values`` (what reward ``name`` returned) as floats, when they are one finite real number
    per completion; else a :class:`RewardError` naming the reward, its file, the prompt id and the
    value (a NaN or inf reward trained nothing and was recorded complete; a string or None raised
    a raw ``ValueError``/``TypeError`` from numpy)."""
    where = f"reward {name!r}" + (f" ({_source(name)})" if name != VERIFIER else "")
    step = f" at step {run.step}" if run is not None else ""
    n = None if completions is None else len(completions)
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise RewardError(f"{where} returned {shown(values)}{step}: a reward returns a list of floats, one per "
                          f"completion ({n} here); fix the reward function")
    if n is not None and len(values) != n:
        raise RewardError(f"{where} returned {len(values)} values for {n} completions{step}: one float per "
                          "completion, in the order given; fix the reward function")
    out = np.empty(len(values), dtype=float)
    for i, v in enumerate(values):
        out[i] = float(v) if isinstance(v, (int, float, np.integer, np.floating, np.bool_)) else np.nan
        if not np.isfinite(out[i]):
            prompt = f" for prompt id {ids[i]!r}" if ids is not None and i < len(ids) else ""
            raise RewardError(f"{where} returned {shown(v)}{prompt} (completion {i}){step}: a reward is a finite "
                              "number per completion (not NaN, inf, None or text); fix the reward function, "
                              "nothing of this update was written")
    return out


def _source(name: str) -> str:
    try:
        return source_file(get(name).fn)
    except KeyError:
        return "not registered"


# ---- built in ---------------------------------------------------------------------------------
@register(VERIFIER)
def verifier(prompts, completions, completion_ids=None, *, scores, **kwargs):
    """1.0 when the completion's final answer is right (the task's verifier), else 0.0."""
    return list(scores)


def _control_mean(rows: pd.DataFrame) -> float:
    mean = float(rows["p_hat"].mean())
    if not 0.0 <= mean <= 1.0:
        raise ValueError(f"control reward mean {mean} is outside [0, 1]")
    return mean


def _control_key(rows: pd.DataFrame, seed: int) -> dict:
    return {"kind": "bernoulli", "mean": round(_control_mean(rows), 6), "seed": int(seed),
            "mean_from": "the probe's mean p_hat over the run's selection"}


@register("bernoulli_control", key=_control_key, control=True)
def bernoulli_control(prompts, completions, completion_ids=None, *, run: RunContext, id, **kwargs):
    """The control arm (003's ``random_reward``): 1.0 with probability m, independently of the
    completion, where m is the probe's mean p_hat over the selection (the verifier reward's mean
    at step 0), so any gain is the optimiser's, not the reward's. Resume-safe: a group's draws
    depend on (seed, step, prompt id, position in the batch) only."""
    mean, g, out = _control_mean(run.rows), run.group_size, []
    for start in range(0, len(completions), g):
        rng = np.random.default_rng([int(run.seed), run.step, zlib.crc32(str(id[start]).encode()), start])
        n = len(completions[start:start + g])
        out.extend((rng.random(n) < mean).astype(float).tolist())
    return out


def overlong_penalty(length: int, max_length: int, cache: int) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", arXiv:2503.14476, eq. 13):
    0 up to ``max_length - cache`` tokens, then a linear ramp to -1 at ``max_length`` (and -1
    beyond, which generation capped at ``max_length`` never reaches)."""
    free = max_length - cache
    if length <= free:
        return 0.0
    if length <= max_length:
        return (free - length) / cache
    return -1.0
