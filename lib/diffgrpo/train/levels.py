"""Paper 002's EPRLI levels (docs/paper002.md): what each trainer of a run trains. A run is one
level from ``train.*``, or, for an arm with ``curriculum: levels``, the levels of
``eprli.levels`` one after the other, the LoRA adapter carrying over (``levels/<i>-<name>/``;
their adapters renumbered by the run's step into the run's ``checkpoints/``)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from diffgrpo import online
from diffgrpo.store import layout
from diffgrpo.params import Config


@dataclasses.dataclass(frozen=True)
class Level:
    """What one trainer trains: the whole run, or one level of an EPRLI run (paper 002).
    ``name`` None: a one-level run (today's layout); ``dynamic_rounds`` None: every group
    enters the update; ``max_completions``: the level's budget of generated completions."""

    name: str | None
    steps: int
    prompts_per_step: int
    group_size: int
    max_completion_length: int
    epsilon: float
    epsilon_high: float
    dynamic_rounds: int | None
    length_weight: float
    max_completions: int | None

    def key(self) -> dict:
        return dataclasses.asdict(self)


def is_levels_run(cfg: Config, arm: str | None) -> bool:
    """Whether ``arm``'s runs train several levels one after the other (``curriculum: levels``,
    paper 002's ``eprli``): the one answer to "is this a levels run" (its levels are named, each
    keeps a ``level.json``, and with vLLM each may train in a process of its own). An arm that
    only *selects* by level (``eprli_grpo``, ``eprli_dynamic``: ``select: levels``) trains one
    level from ``train.*``."""
    return arm is not None and cfg.arm(arm).curriculum == "levels"


def run_levels(cfg: Config, arm: str | None = None, n_selected: int | None = None) -> list[Level]:
    """The run's levels: ``eprli.levels`` for an arm with ``curriculum: levels`` (each level's
    completion budget is its share of steps times ``train.max_completions``), else one level
    from ``train.*`` (``cfg``: the arm's, :meth:`Config.for_arm`), its steps
    :meth:`~diffgrpo.params.Config.run_steps` of the run's ``n_selected`` prompts (needed with
    ``train.epochs``)."""
    t = cfg.train
    rounds = t.dynamic_sampling.max_rounds
    if is_levels_run(cfg, arm):
        return [Level(lv.name, lv.steps, lv.buffer_size, lv.group_size, lv.max_completion_length, lv.epsilon,
                      lv.epsilon_high, rounds if lv.dynamic_sampling else None, lv.length_reward_weight,
                      None if t.max_completions is None else round(t.max_completions * lv.steps / t.max_steps))
                for lv in cfg.eprli.levels]
    # dynamic sampling's rounds: it is on (train.dynamic_sampling.enabled, its one spelling in a
    # loaded config), or a method that filters after generation (the band) refills as it does
    dynamic = t.dynamic_sampling.enabled or (t.online.method != online.NONE and online.get(t.online.method).refills)
    return [Level(None, cfg.run_steps(arm, n_selected), t.prompts_per_step, t.group_size, t.max_completion_length, t.epsilon,
                  t.epsilon_high, rounds if dynamic else None, t.length_reward.weight, t.max_completions)]


def copy_adapters(level_ckpts: Path, ckpt_dir: Path, offset: int) -> None:
    """A level's adapters, renumbered by the run's step, into the run's checkpoints/ (what the
    evaluate stage scores); the trainer state stays in the level's folder."""
    for step, path in layout.list_checkpoints(level_ckpts).items():
        target = layout.checkpoint(ckpt_dir, offset + step)
        if target.exists():
            continue
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(path, tmp, ignore=shutil.ignore_patterns(layout.OPTIMIZER_FILE, "scheduler.pt", "rng_state.pth"))
        tmp.rename(target)
