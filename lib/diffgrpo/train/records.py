"""What a run records: each generated group's rewards (``groups.parquet``), each logged step
(``steps.parquet``), the checkpoints' tidying and the progress bar.

Learnable % (one definition, the project's): the share of groups whose arm reward (the
verifier's score, or a control's Bernoulli draw) is not all equal (``learnable``). A length
reward (DAPO's overlong punishment, paper 002) is added to ``rewards`` but does not make a group
learnable: it varies with length in every group, so counting it would call all-correct and
all-wrong groups learnable. Dynamic sampling keeps the groups this flag keeps, as DAPO filters
on accuracy (docs/paper002.md). The verifier's scores are kept beside them (``scores``); where
a report shows the share of groups whose verifier scores are mixed, it is called
``verifier_mixed``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from transformers import TrainerCallback

from diffgrpo import progress
from diffgrpo.store import artifacts, layout
from diffgrpo.models import devices
from diffgrpo import rewards

#: groups.parquet's columns; ``round`` (the generation round of its step, 1 without dynamic
#: sampling) and ``kept`` (it entered the update) came with dynamic sampling, ``level`` with EPRLI,
#: ``completion_tokens`` (the group's generated tokens, for the compute ledger) with the ledger
GROUP_COLUMNS = ["step", "prompt_id", "tier", "rewards", "reward_mean", "reward_std", "learnable", "scores",
                 "round", "kept", "level", "completion_tokens"]


class Recorder(TrainerCallback):
    """Scores completions (the reward function) and keeps the per-group and per-step rows.

    ``reward``: the arm's rewards with their weights (:mod:`diffgrpo.rewards`; default the
    verifier's), ``seed`` and ``rows`` (the run's selection) what they may read;
    ``length_reward``: (weight, max_length, cache) of :func:`rewards.overlong_penalty`, added
    to each completion's reward (weight 0: none). ``step_offset`` and ``level``: a level of an
    EPRLI run records its steps after the earlier levels'."""

    def __init__(self, task, group_size: int, steps: list[dict], groups: list[dict],
                 reward: dict[str, float] | None = None, length_reward: tuple[float, int, int] = (0.0, 1, 1),
                 step_offset: int = 0, level: str | None = None, seed: int = 0, rows: pd.DataFrame | None = None):
        self.task, self.group_size = task, group_size
        self.reward = reward or {rewards.VERIFIER: 1.0}
        self.seed, self.rows = seed, rows
        self.steps, self.groups = steps, groups
        self.length_reward, self.step_offset, self.level = length_reward, step_offset, level
        self.round = 1  # the trainer's dynamic sampling sets it before each generation round

    def correct(self, prompts, completions, answer, id, tier, trainer_state, completion_ids=None, **kwargs) -> list[float]:
        """The reward function TRL calls, once per generated batch, groups contiguous
        (RepeatSampler): the arm's rewards given the verifier's scores (recorded as ``scores``
        either way), plus the weighted length reward when there is one."""
        scores = [self.task.score(rewards.text(c), a) for c, a in zip(completions, answer)]
        step = self.step_offset + trainer_state.global_step + 1  # the update it feeds (global_step: 0-based here)
        weight, max_length, cache = self.length_reward
        if weight and completion_ids is None:
            raise RuntimeError("TRL passed no completion_ids to the reward function: the length reward needs them")
        g = self.group_size
        context = rewards.RunContext(self.seed, g, step, self.rows, max_length, self.task)
        trained = rewards.combine(self.reward, prompts=prompts, completions=completions, completion_ids=completion_ids,
                                  scores=scores, run=context, answer=answer, id=id, tier=tier,
                                  trainer_state=trainer_state, **kwargs)
        if len(trained) != len(scores):
            raise RuntimeError(f"the rewards {list(self.reward)} gave {len(trained)} values for {len(scores)} completions")
        out = []
        for start in range(0, len(scores), g):
            if len(set(id[start:start + g])) != 1:
                raise RuntimeError(f"TRL passed a group of mixed prompts {id[start:start + g]}: grouping changed")
            s = np.asarray(scores[start:start + g], dtype=float)
            r = trained[start:start + g]
            learnable = bool(r.max() > r.min())  # the arm's reward (accuracy for the verifier), before any length term
            if weight:
                r = r + weight * np.array([rewards.overlong_penalty(len(c), max_length, cache)
                                           for c in completion_ids[start:start + g]])
            out.extend(r.tolist())
            self.groups.append({
                "step": step, "prompt_id": id[start], "tier": tier[start], "rewards": r.tolist(),
                "reward_mean": float(r.mean()), "reward_std": float(r.std(ddof=1)),
                "learnable": learnable, "scores": s.tolist(),
                "round": self.round, "kept": True, "level": self.level,
                "completion_tokens": None if completion_ids is None else int(sum(len(c) for c in completion_ids[start:start + g])),
            })
        return out

    def completions_generated(self) -> int:
        return int(sum(len(g["rewards"]) for g in self.groups))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:  # the end-of-training summary has train_loss instead
            self.steps.append({"step": self.step_offset + state.global_step,
                               **({"level": self.level} if self.level is not None else {}),
                               **{k: v for k, v in logs.items() if k != "total_flos"},
                               **devices.peak_memory(reset=True)})  # GPU peaks since the step before (None: CPU)

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        steps = pd.DataFrame(self.steps)
        groups = pd.DataFrame(self.groups, columns=GROUP_COLUMNS)
        return steps, groups

    def write(self, run_dir: Path) -> list[dict]:
        """Every process calls it (at each save and at the end); with several, the groups each
        one scored are gathered and the main process writes them. Returns every process's groups."""
        if devices.num_processes() > 1:
            from accelerate.utils import gather_object

            gathered = sorted(gather_object(self.groups), key=lambda g: g["step"])  # stable: rank order within a step
            everyone = Recorder(self.task, self.group_size, self.steps, gathered, step_offset=self.step_offset,
                                level=self.level)
            if devices.is_main_process():
                everyone.write_frames(run_dir)
            return gathered
        self.write_frames(run_dir)
        return self.groups

    def write_frames(self, run_dir: Path) -> None:
        steps, groups = self.frames()
        artifacts.write_parquet(run_dir / layout.STEPS, steps)
        artifacts.write_parquet(run_dir / layout.GROUPS, groups)


class Tidy(TrainerCallback):
    """After each save: drop the optimizer state of every checkpoint but the newest."""

    def __init__(self, ckpt_dir: Path):
        self.ckpt_dir = ckpt_dir
        self.saved: set[int] = set()  # the steps saved this session (a lost one is noticed at the end)

    def on_save(self, args, state, control, **kwargs):
        self.saved.add(state.global_step)
        for step, path in layout.list_checkpoints(self.ckpt_dir).items():
            if step < state.global_step:
                (path / layout.OPTIMIZER_FILE).unlink(missing_ok=True)


class Progress(TrainerCallback):
    """One bar over the run's steps, with the last reward and learnable share."""

    def __init__(self, desc: str):
        self.desc, self.bar = desc, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = progress.bar(state.max_steps, self.desc, unit="step", initial=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.bar.set_postfix(reward=f"{logs['reward']:.2f}", learnable=f"{1 - logs['frac_reward_zero_std']:.2f}")

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()


