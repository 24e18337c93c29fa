"""The work each job does, counted offline: prompts per split, a run's steps and levels, the checkpoints evaluated.

Sizes come from the params (``dataset.pool_size``, ``dataset.test_size``, a synthetic task's
``task_options``) and, where the params leave them open, from the task itself: its rows per
split and its prompt length (:attr:`diffgrpo.tasks.Task.split_rows`, :attr:`~diffgrpo.tasks.Task.prompt_tokens`).
"""

from __future__ import annotations

import dataclasses

from diffgrpo import tasks
from diffgrpo.models import devices
from diffgrpo.params import Config
from diffgrpo.study.plan.shapes import PlanError
from diffgrpo.train.levels import run_levels


def task_of(cfg: Config) -> tasks.Task:
    """The study's task (``dataset.task`` with its ``task_options``), for the facts it declares."""
    return tasks.get(cfg.dataset.task, **(cfg.dataset.task_options or {}))


def prompt_tokens(cfg: Config) -> int:
    """Prompt length the plan sizes for: ``train.max_prompt_length``, else the task's
    :attr:`~diffgrpo.tasks.Task.prompt_tokens`."""
    if cfg.train.max_prompt_length is not None:
        return cfg.train.max_prompt_length
    return task_of(cfg).prompt_tokens


def split_rows(cfg: Config, role: str) -> int:
    """Rows of the pool (``role`` "pool") or the held-out set ("test") the study reads: the
    params' size, else a synthetic task's ``<split>_size`` option, else the task's
    :attr:`~diffgrpo.tasks.Task.split_rows`, else 1,000."""
    d = cfg.dataset
    size = d.pool_size if role == "pool" else d.test_size
    if size is not None:
        return size
    split = d.train_split if role == "pool" else d.test_split
    opts = d.task_options or {}
    if f"{split}_size" in opts:  # synthetic tasks: rows per split (per tier for arithmetic)
        tiers = opts.get("tiers")
        per = int(opts[f"{split}_size"])
        return per * (tiers[1] - tiers[0] + 1 if isinstance(tiers, list) and len(tiers) == 2 else 1)
    return task_of(cfg).split_rows.get(split, 1000)


@dataclasses.dataclass(frozen=True)
class TrainWork:
    """One training run's levels, each with its batch (paper 002's EPRLI: several)."""

    level: str
    steps: int
    prompts_per_step: int
    group_size: int
    completion: int
    per_pass_prompts: int
    accumulation: int
    rounds: int  # generation rounds per update at most (dynamic sampling)
    max_completions: int | None

    @property
    def completions_per_pass(self) -> int:
        return self.per_pass_prompts * self.group_size

    @property
    def generation_batch(self) -> int:
        """Completions TRL generates at once: the process's share of an update (one round)."""
        return self.prompts_per_step * self.group_size

    @property
    def completions(self) -> int:
        """Completions generated at most: every round of every step, within the budget."""
        n = self.steps * self.rounds * self.generation_batch
        return min(n, self.max_completions) if self.max_completions is not None else n


def selected_prompts(cfg: Config, arm: str) -> int:
    """The prompts a run of ``arm`` trains on, as the plan counts them (offline, no selection
    read): its budget (a budgeted policy), else the whole pool (an upper bound for a policy
    defined by a set, e.g. tiers)."""
    pool = split_rows(cfg, "pool")
    n = cfg.arm(arm).selected_count(cfg.select, pool)
    return pool if n is None else n


def train_work(cfg: Config, arm: str) -> list[TrainWork]:
    """The run's levels as :func:`diffgrpo.train.run_levels` builds them, with the batch
    :func:`diffgrpo.models.devices.batching` derives on each of its ``train.num_processes`` processes
    (a pass's memory is one process's; the times stay one GPU's). With dynamic sampling a part-filled
    update is padded to its planned passes (diffgrpo.train.trainer.pad_batch), so a pass never
    holds more than planned."""
    acfg = cfg.for_arm(arm)
    out = []
    for lv in run_levels(acfg, arm, selected_prompts(cfg, arm)):
        try:
            b = devices.batching(lv.prompts_per_step, lv.group_size, acfg.train.num_processes,
                                 acfg.train.per_device_prompts)
        except ValueError as err:  # the study stops here, before any notebook, naming the keys
            raise PlanError(f"arm {arm!r}{'' if lv.name is None else f' level {lv.name!r}'}: {err} "
                            "(train.num_processes)") from None
        out.append(TrainWork(lv.name or "-", lv.steps, lv.prompts_per_step, lv.group_size, lv.max_completion_length,
                             b.per_device_prompts, b.gradient_accumulation_steps, lv.dynamic_rounds or 1,
                             lv.max_completions))
    return out



def eval_work(cfg: Config) -> list[tuple[str, int, int, int]]:
    """(set, prompts, completions a prompt, max new tokens) of one evaluated model."""
    out = []
    for name in cfg.eval_set_names():
        s = cfg.for_eval_set(name)
        e = s.evaluate
        out.append((name, split_rows(s, "test"), int(e.greedy) + e.n_samples, e.sampling.max_new_tokens))
    return out


def checkpoints(cfg: Config, arm: str) -> int:
    """Adapters a run's evaluation scores: every save_steps and the last, or the last only."""
    t, steps = cfg.for_arm(arm).train, cfg.run_steps(arm, selected_prompts(cfg, arm))
    if cfg.evaluate.checkpoints == "final":
        return 1
    return steps // t.save_steps + (1 if steps % t.save_steps else 0)

