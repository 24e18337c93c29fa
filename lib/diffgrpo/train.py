"""Stage 3: GRPO with LoRA on one selection, through TRL's GRPOTrainer and PEFT.

    train_run(cfg, "hard", seed=0)  ->  outputs/<study>/runs/hard-seed0/

One optimizer step = ``prompts_per_step`` prompts x ``group_size`` completions, sampled fresh
from the current policy (TRL: ``per_device_train_batch_size`` counts completions, so it is
prompts x G; ``gradient_accumulation_steps = steps_per_generation = 1``). With
``num_iterations`` = mu > 1 one generated batch feeds mu consecutive updates. The reward is the
task's binary verifier (the control arm ``random_reward``: a seeded Bernoulli reward of the same
mean, :class:`ControlReward`). Files written in the run folder:

- ``params.yaml``, ``trl_config.json`` (GRPOConfig.to_dict() after the trainer has read it,
  plus the LoRA config), ``manifest.json`` (model, task, selection, steps done, checkpoints,
  library versions, status);
- ``steps.parquet``: TRL's logged metrics, one row per logged step (``step`` 1-based);
- ``groups.parquet``: one row per generated group: ``step`` (the first update it feeds),
  ``prompt_id``, ``tier``, ``rewards`` (G floats), ``reward_mean``, ``reward_std`` (ddof 1,
  as TRL), ``learnable`` (rewards not all equal), ``scores`` (the verifier's G scores; equal
  to ``rewards`` except in the control arm). Learnable % = 100 * mean(learnable);
- ``checkpoints/checkpoint-<step>/``: the LoRA adapter every ``save_steps`` and at the end.
  Only the newest keeps its optimizer state, the one a resume needs.

Options (all off by default, and then training is exactly what it was; ``docs/paper002.md``):
``train.dynamic_sampling`` (DAPO's: groups with all-equal rewards are dropped and more are
generated, :class:`Trainer`), ``train.length_reward`` (DAPO's soft overlong penalty,
:func:`overlong_penalty`), ``train.max_completions`` (a budget of generated completions:
:class:`Budget`). Every update's generation is recorded in ``steps.parquet``
(``GENERATION_METRICS``) and every group's ``round`` and ``kept`` in ``groups.parquet``. The
strategy ``eprli`` trains paper 002's levels (``eprli.levels``) one after the other, the LoRA
adapter carrying over (:func:`run_levels`, ``levels/<i>-<name>/``; a ``level`` column in both
tables).

How this differs from paper 003 (appendix B): 003 states no LoRA settings (rank, alpha and
target modules come from params; its released code uses r 32, alpha 32 on all projections);
the KL term is DeepSeekMath's per-token k3 estimator against the base model with the adapter
switched off, not a second copy of the model; with ``scale_rewards: group`` a group's
advantage is (r - mean) / (std + 1e-4), TRL's form; prompts are reshuffled every epoch and the
last ``|selection| mod prompts_per_step`` of each permutation wait for the next epoch.

How this differs from TRL 1.16's defaults, all set explicitly (the effective values are in
``trl_config.json``): beta, loss_type, learning_rate, epsilon_high come from params (TRL:
0.0, "dapo", 1e-6, None); ``use_bias_correction_kl=False`` (TRL multiplies the KL term by the
importance ratio, DeepSeek-V3.2; DeepSeekMath does not); ``top_k=0`` (no top-k cut);
``bf16``/``gradient_checkpointing`` from params (TRL: True, which a CPU refuses);
``optim="adamw_torch"`` (transformers picks the fused variant by torch version);
``warmup_steps = ceil(warmup_ratio * max_steps)`` (transformers 5 has no ``warmup_ratio``).
TRL 1.16 has no ``max_prompt_length``: prompts are never truncated, and a prompt longer than
``train.max_prompt_length`` (when set) is an error rather than a silently cut question.

Interrupted runs resume from their newest complete checkpoint with the full trainer state
(optimizer, scheduler, RNG); the prompt order of every epoch is a function of (seed, epoch),
so a resumed run sees the same prompts as an uninterrupted one. A finished run is skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import peft
import torch
import transformers
import trl
from datasets import Dataset
from peft import LoraConfig
from tqdm.auto import tqdm
from transformers import TrainerCallback, set_seed
from transformers.integrations import TensorBoardCallback
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from . import artifacts, data, devices, layout, parallel, params, select
from .generation import check_fit, context_length, encode_prompt
from .models import quiet_renamed_arguments
from .params import Config

CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.json"  # HF writes it last: a checkpoint without it is incomplete
OPTIMIZER_FILE = "optimizer.pt"


# ---- inputs -------------------------------------------------------------------------------
def selected_rows(cfg: Config, strategy: str, seed: int = 0) -> pd.DataFrame:
    """The selection's prompts (id, prompt, answer, tier, p_hat; an EPRLI strategy's also
    level), in the selection's order (a per-seed policy's: the one drawn for training seed ``seed``)."""
    path = select.selection_path(cfg, strategy, seed)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no selection {strategy!r}; run the select stage first")
    selection = artifacts.read_parquet(path, "02_select")
    ids = selection["id"].astype(str)
    pool = data.load_pool(cfg).set_index("id")
    dup = ids[ids.duplicated()]
    if len(dup):
        raise ValueError(f"{path}: id {dup.iloc[0]!r} is selected more than once (row {int(dup.index[0]) + 1}, counting "
                         f"from 1; {len(dup)} repeat(s)); a selection names distinct prompts. Rerun the select stage "
                         "(02_select) to rebuild it")
    missing = [i for i in ids if i not in pool.index]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} selected id(s) not in the {cfg.dataset.task!r} pool "
            f"(split {cfg.dataset.train_split!r}, pool_size {cfg.dataset.pool_size}): {missing[:10]}"
        )
    if len(ids) < cfg.train.prompts_per_step:
        raise ValueError(f"{path}: {len(ids)} prompts, fewer than train.prompts_per_step = {cfg.train.prompts_per_step}")
    out = pool.loc[list(ids), ["prompt", "answer", "tier"]].reset_index().assign(p_hat=selection["p_hat"].to_numpy())
    if cfg.arm(strategy).policy in select.EPRLI:  # each prompt's EPRLI level (select.level_rows)
        if "level" not in selection:
            raise ValueError(f"{path}: no `level` column; rerun the select stage (02_select)")
        out["level"] = selection["level"].to_numpy()
    return out


def check_prompt_lengths(rows: pd.DataFrame, tokenizer, limit: int | None, chat_template_kwargs: dict | None = None) -> None:
    if limit is None:
        return
    lengths = [len(encode_prompt(tokenizer, p, chat_template_kwargs)) for p in rows["prompt"]]
    long = [(i, n) for i, n in zip(rows["id"], lengths) if n > limit]
    if long:
        raise ValueError(f"train.max_prompt_length = {limit}: {len(long)} prompt(s) are longer, e.g. {long[:5]}")


def checkpointing_argument() -> str:
    """The name of activation checkpointing in the installed transformers: 5.23 (the CPU
    environment) calls it ``activation_checkpointing`` and warns on the old name; 5.17 (the
    GPU environment, which vLLM 0.31 holds below 5.18) knows only ``gradient_checkpointing``."""
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


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


def run_levels(cfg: Config, policy: str) -> list[Level]:
    """The run's levels (by the arm's policy): ``eprli.levels`` for policy ``eprli`` (each level's completion
    budget is its share of steps times ``train.max_completions``), else one level from
    ``train.*`` (``eprli_dynamic`` turns dynamic sampling on)."""
    t = cfg.train
    rounds = t.dynamic_sampling.max_rounds
    if policy == "eprli":
        return [Level(lv.name, lv.steps, lv.buffer_size, lv.group_size, lv.max_completion_length, lv.epsilon,
                      lv.epsilon_high, rounds if lv.dynamic_sampling else None, lv.length_reward_weight,
                      None if t.max_completions is None else round(t.max_completions * lv.steps / t.max_steps))
                for lv in cfg.eprli.levels]
    dynamic = t.dynamic_sampling.enabled or policy == "eprli_dynamic"
    return [Level(None, t.max_steps, t.prompts_per_step, t.group_size, t.max_completion_length, t.epsilon,
                  t.epsilon_high, rounds if dynamic else None, t.length_reward.weight, t.max_completions)]


def grpo_kwargs(cfg: Config, seed: int, output_dir: Path, n_processes: int = 1,
                level: Level | None = None) -> dict[str, Any]:
    """Every GRPOConfig argument we set: all of ``cfg.train`` plus the fixed choices above;
    ``level`` (default: the run's one level from ``cfg.train``) sets the batch, steps, lengths
    and clip bounds. ``n_processes``: processes of the job (``accelerate launch``); the
    per-device batch and gradient accumulation are derived so that an update keeps
    ``prompts_per_step`` prompts."""
    t = cfg.train
    lv = level or run_levels(cfg, "")[0]
    b = devices.batching(lv.prompts_per_step, lv.group_size, n_processes, t.per_device_prompts)
    if t.use_vllm and t.vllm_mode == "colocate" and n_processes % t.vllm_tensor_parallel_size:
        raise ValueError(f"train.vllm_tensor_parallel_size = {t.vllm_tensor_parallel_size} must divide the "
                         f"{n_processes} training process(es) (TRL's colocate mode)")
    return dict(
        output_dir=str(output_dir),
        seed=seed,  # model init of LoRA, sampling, and (our sampler) the prompt order
        # batch: one update = prompts_per_step prompts x group_size completions, freshly generated
        # (N processes: per device x N x accumulation = prompts_per_step x G; one generation per update)
        num_generations=lv.group_size,
        per_device_train_batch_size=b.per_device_train_batch_size,
        gradient_accumulation_steps=b.gradient_accumulation_steps,
        steps_per_generation=b.gradient_accumulation_steps,
        num_iterations=t.num_iterations,
        max_steps=lv.steps,
        shuffle_dataset=True,
        # objective
        loss_type=t.loss_type,
        beta=t.beta,
        use_bias_correction_kl=False,
        scale_rewards=t.scale_rewards,
        epsilon=lv.epsilon,
        epsilon_high=lv.epsilon_high,
        importance_sampling_level="token",
        mask_truncated_completions=t.mask_truncated_completions,
        # optimizer and schedule
        optim="adamw_torch",
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=math.ceil(t.warmup_ratio * lv.steps),
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        # sampling
        max_completion_length=lv.max_completion_length,
        temperature=t.temperature,
        top_p=t.top_p,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        chat_template_kwargs=dict(cfg.model.chat_template_kwargs),
        # checkpoints and logs
        save_strategy="steps",
        save_steps=t.save_steps,
        save_only_model=False,
        logging_strategy="steps",
        logging_steps=t.logging_steps,
        log_completions=False,  # groups.parquet keeps the rewards; completions would cost disk
        report_to=t.report_to,  # TRL's own trackers; tensorboard writes into the run's folder (_train_run)
        disable_tqdm=True,  # our own bar: HF's prints every log dict
        # device; activation checkpointing under the installed transformers' name
        use_cpu=cfg.model.device == "cpu",
        bf16=t.bf16,
        **{checkpointing_argument(): t.gradient_checkpointing},
        use_vllm=t.use_vllm,
        vllm_mode=t.vllm_mode,
        vllm_gpu_memory_utilization=t.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=t.vllm_tensor_parallel_size,
        dataloader_num_workers=0,
    )


def lora_config(cfg: Config) -> LoraConfig:
    lp = cfg.train.lora
    return LoraConfig(r=lp.r, lora_alpha=lp.alpha, lora_dropout=lp.dropout,
                      target_modules=list(lp.target_modules), bias="none", task_type="CAUSAL_LM")


def _set_aside(run_dir: Path, old_key: dict) -> Path:
    """Move a run trained with other settings out of the way, never deleting it."""
    base = run_dir.with_name(f"{run_dir.name}.superseded-{layout.key_hash(old_key)}")
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    run_dir.rename(target)
    return target


def _changed(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix.rstrip(".") or "(all)"]
    return [c for k in sorted(set(old) | set(new)) for c in _changed(old.get(k), new.get(k), f"{prefix}{k}.")]


# ---- recording ----------------------------------------------------------------------------
def completion_text(completion: Any) -> str:
    """TRL passes chat messages for conversational prompts; the text is the last message's."""
    if isinstance(completion, str):
        return completion
    content = completion[-1]["content"]
    if isinstance(content, list):  # content blocks
        return "".join(part.get("text", "") for part in content)
    return content


class ControlReward:
    """The control arm's reward (strategy ``random_reward``): each completion gets 1.0 with
    probability ``mean``, independently of what it says. Deterministic given the seed, and
    resume-safe: a group's draws are a function of (seed, step, prompt id, position in the
    batch) only, not of how many draws came before."""

    def __init__(self, mean: float, seed: int):
        if not 0.0 <= mean <= 1.0:
            raise ValueError(f"control reward mean {mean} is outside [0, 1]")
        self.mean, self.seed = float(mean), int(seed)

    def draw(self, step: int, prompt_id: str, start: int, n: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step, zlib.crc32(str(prompt_id).encode()), start])
        return (rng.random(n) < self.mean).astype(float)

    def describe(self) -> dict:
        return {"kind": "bernoulli", "mean": round(self.mean, 6), "seed": self.seed,
                "mean_from": "the probe's mean p_hat over the run's selection"}


def control_reward(policy: str, rows: pd.DataFrame, seed: int) -> ControlReward | None:
    """The control arm's reward for this run (policy ``random_reward``), None for every other. Its mean is the
    probe's mean p_hat over the selected prompts: the expected verifier reward of the base
    model on them, i.e. the real reward's mean at step 0."""
    return ControlReward(float(rows["p_hat"].mean()), seed) if policy == select.CONTROL else None


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


#: groups.parquet's columns; ``round`` (the generation round of its step, 1 without dynamic
#: sampling) and ``kept`` (it entered the update) came with dynamic sampling, ``level`` with EPRLI
GROUP_COLUMNS = ["step", "prompt_id", "tier", "rewards", "reward_mean", "reward_std", "learnable", "scores",
                 "round", "kept", "level"]


class Recorder(TrainerCallback):
    """Scores completions (the reward function) and keeps the per-group and per-step rows.

    ``length_reward``: (weight, max_length, cache) of :func:`overlong_penalty`, added to each
    completion's reward (weight 0: none). ``step_offset`` and ``level``: a level of an EPRLI run
    records its steps after the earlier levels' (:func:`_train_levels`)."""

    def __init__(self, task, group_size: int, steps: list[dict], groups: list[dict],
                 control: ControlReward | None = None, length_reward: tuple[float, int, int] = (0.0, 1, 1),
                 step_offset: int = 0, level: str | None = None):
        self.task, self.group_size, self.control = task, group_size, control
        self.steps, self.groups = steps, groups
        self.length_reward, self.step_offset, self.level = length_reward, step_offset, level
        self.round = 1  # the trainer's dynamic sampling sets it before each generation round

    def correct(self, prompts, completions, answer, id, tier, trainer_state, completion_ids=None, **_) -> list[float]:
        """Reward: 1.0 when the completion's final answer is right (the control arm: a seeded
        Bernoulli draw instead; the verifier's score is recorded as ``scores`` either way), plus
        the weighted length reward when there is one. TRL calls this once per generated batch,
        groups contiguous (RepeatSampler), so each group is recorded once."""
        scores = [self.task.score(completion_text(c), a) for c, a in zip(completions, answer)]
        step = self.step_offset + trainer_state.global_step + 1  # the update it feeds (global_step: 0-based here)
        weight, max_length, cache = self.length_reward
        if weight and completion_ids is None:
            raise RuntimeError("TRL passed no completion_ids to the reward function: the length reward needs them")
        g = self.group_size
        rewards = []
        for start in range(0, len(scores), g):
            if len(set(id[start:start + g])) != 1:
                raise RuntimeError(f"TRL passed a group of mixed prompts {id[start:start + g]}: grouping changed")
            s = np.asarray(scores[start:start + g], dtype=float)
            r = s if self.control is None else self.control.draw(step, id[start], start, len(s))
            if weight:
                r = r + weight * np.array([overlong_penalty(len(c), max_length, cache)
                                           for c in completion_ids[start:start + g]])
            rewards.extend(r.tolist())
            self.groups.append({
                "step": step, "prompt_id": id[start], "tier": tier[start], "rewards": r.tolist(),
                "reward_mean": float(r.mean()), "reward_std": float(r.std(ddof=1)),
                "learnable": bool(r.max() > r.min()), "scores": s.tolist(),
                "round": self.round, "kept": True, "level": self.level,
            })
        return rewards

    def completions_generated(self) -> int:
        return int(sum(len(g["rewards"]) for g in self.groups))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:  # the end-of-training summary has train_loss instead
            self.steps.append({"step": self.step_offset + state.global_step,
                               **({"level": self.level} if self.level is not None else {}),
                               **{k: v for k, v in logs.items() if k != "total_flos"}})

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        steps = pd.DataFrame(self.steps)
        groups = pd.DataFrame(self.groups, columns=GROUP_COLUMNS)
        return steps, groups

    def write(self, run_dir: Path) -> None:
        """Every process calls it (at each save and at the end); with several, the groups each
        one scored are gathered and the main process writes them."""
        if devices.num_processes() > 1:
            from accelerate.utils import gather_object

            gathered = sorted(gather_object(self.groups), key=lambda g: g["step"])  # stable: rank order within a step
            everyone = Recorder(self.task, self.group_size, self.steps, gathered, step_offset=self.step_offset,
                                level=self.level)
            if devices.is_main_process():
                everyone.write_frames(run_dir)
        else:
            self.write_frames(run_dir)

    def write_frames(self, run_dir: Path) -> None:
        steps, groups = self.frames()
        artifacts.write_parquet(run_dir / "steps.parquet", steps)
        artifacts.write_parquet(run_dir / "groups.parquet", groups)


class Tidy(TrainerCallback):
    """After each save: drop the optimizer state of every checkpoint but the newest."""

    def __init__(self, ckpt_dir: Path):
        self.ckpt_dir = ckpt_dir
        self.saved: set[int] = set()  # the steps saved this session (a lost one is noticed at the end)

    def on_save(self, args, state, control, **kwargs):
        self.saved.add(state.global_step)
        for step, path in list_checkpoints(self.ckpt_dir).items():
            if step < state.global_step:
                (path / OPTIMIZER_FILE).unlink(missing_ok=True)


class Progress(TrainerCallback):
    """One bar over the run's steps, with the last reward and learnable share."""

    def __init__(self, desc: str):
        self.desc, self.bar = desc, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc=self.desc, unit="step")

    def on_step_end(self, args, state, control, **kwargs):
        self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.bar.set_postfix(reward=f"{logs['reward']:.2f}", learnable=f"{1 - logs['frac_reward_zero_std']:.2f}")

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()


# ---- checkpoints --------------------------------------------------------------------------
def list_checkpoints(ckpt_dir: Path, complete: bool = True) -> dict[int, Path]:
    """Checkpoint folders by step; ``complete``: only those HF finished writing."""
    found = {}
    for d in ckpt_dir.glob("checkpoint-*"):
        if d.is_dir() and d.name.split("-")[-1].isdigit() and (not complete or (d / STATE_FILE).exists()):
            found[int(d.name.split("-")[-1])] = d
    return dict(sorted(found.items()))


def resume_point(ckpt_dir: Path, tidy: bool = True) -> tuple[int, Path | None]:
    """The newest checkpoint a resume can use (full trainer state); ``tidy``: removes
    half-written ones (only the main process of a multi-process job does)."""
    usable = {s: p for s, p in list_checkpoints(ckpt_dir).items() if (p / OPTIMIZER_FILE).exists()}
    step, path = max(usable.items()) if usable else (0, None)
    for s, p in list_checkpoints(ckpt_dir, complete=False).items():
        if s > step and tidy:  # written after the last usable state: never trusted
            shutil.rmtree(p)
    return step, path


def _previous_rows(run_dir: Path, upto: int) -> tuple[list[dict], list[dict]]:
    """Rows recorded up to step ``upto`` (those after it belong to the lost part of the run)."""
    out = []
    for name in ("steps.parquet", "groups.parquet"):
        path = run_dir / name
        df = pd.read_parquet(path) if upto and path.exists() else pd.DataFrame(columns=["step"])
        df = df[df["step"] <= upto]
        if name == "groups.parquet" and len(df):
            df = df.assign(rewards=df["rewards"].map(list),
                           scores=df["scores"].map(list) if "scores" in df else df["rewards"].map(list))
            for column, value in (("round", 1), ("kept", True), ("level", None)):  # runs recorded before these
                if column not in df:
                    df[column] = value
        out.append(df.to_dict("records"))
    return out[0], out[1]


def _versions() -> dict[str, str]:
    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "peft": peft.__version__}


# ---- the run ------------------------------------------------------------------------------
class EpochSampler(RepeatSampler):
    """TRL's sampler, reseeded from (seed, epoch) at each epoch. TRL's own draws every
    epoch's permutation from one generator, which a resume in a later epoch restarts."""

    def set_epoch(self, epoch: int) -> None:  # accelerate calls it before each epoch
        if self.shuffle:
            self.generator.manual_seed(int(self.seed or 0) * 1_000_003 + epoch)


@contextlib.contextmanager
def merged_lora(model):
    """The LoRA adapter merged into its base layers for the duration (generation): each
    projection is one matmul with W + s*B*A instead of PEFT's W x + s*B(A x), three matmuls
    and a Python layer. Afterwards the base weights are restored from copies, bit for bit
    (PEFT's own ``unmerge_adapter`` subtracts the delta again, which leaves rounding residue
    that would accumulate over a run). Logits differ from the unmerged model's by float
    rounding only (about 1e-7 relative); tests/test_train.py checks that sampled tokens agree."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if not layers or any(m.merged for m in layers):
        yield model
        return
    saved = [m.get_base_layer().weight.detach().clone() for m in layers]
    model.merge_adapter()
    try:
        yield model
    finally:
        with torch.no_grad():
            for m, weight in zip(layers, saved):
                m.get_base_layer().weight.copy_(weight)
                m.merged_adapters = []


#: what TRL 1.16's ``_generate_and_score_completions`` returns for a text-only batch: the
#: tensors dynamic sampling cuts to the kept groups. Another key (a TRL upgrade, images, tools)
#: stops training rather than letting a tensor slip through uncut.
BATCH_KEYS = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch",
              "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps"}
LEFT_PADDED = ("prompt_ids", "prompt_mask")
#: per-step records of generation, always logged (steps.parquet)
GENERATION_METRICS = ("groups_generated", "groups_kept", "dropped_all_correct", "dropped_all_wrong",
                      "dropped_other", "generation_rounds", "completions_generated")


def _pad_to(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    extra = width - t.size(1)
    if extra <= 0:
        return t
    pad = t.new_full((t.size(0), extra), value)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def merge_batches(parts: list[tuple[dict, list[int]]], group_size: int, pad_token_id: int) -> dict:
    """The groups ``parts`` keep, as one generated batch: ``[(batch, group indices), ...]``,
    each batch as ``_generate_and_score_completions`` returned it. Sequences are re-padded to
    the longest (prompts on the left, completions on the right) and ``num_items_in_batch``
    recounted from the completion mask."""
    unknown = sorted({k for batch, _ in parts for k in batch} - BATCH_KEYS)
    if unknown:
        raise RuntimeError(f"TRL's generated batch has keys {unknown} that dynamic sampling does not know how to cut "
                           "(TRL changed, or images/tools are in use); see diffgrpo.train.BATCH_KEYS")
    rows = []
    for batch, groups in parts:
        idx = torch.tensor([g * group_size + j for g in groups for j in range(group_size)], dtype=torch.long)
        rows.append((batch, idx))
    out = {}
    for key in [k for k in parts[0][0] if k != "num_items_in_batch"]:
        pieces = [batch[key][idx.to(batch[key].device)] for batch, idx in rows]
        if pieces[0].dim() == 2:
            width = max(p.size(1) for p in pieces)
            value = pad_token_id if key.endswith("_ids") else 0
            pieces = [_pad_to(p, width, value, key in LEFT_PADDED) for p in pieces]
        out[key] = torch.cat(pieces, dim=0)
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


class Trainer(GRPOTrainer):
    """GRPOTrainer with a resumable prompt order, our rows saved with each checkpoint, and
    dynamic sampling (``dynamic_rounds``: generation rounds per update at most; None: off).

    Dynamic sampling (DAPO's, verl's ``filter_groups``) hooks the one method of TRL 1.16 that
    turns a batch of prompts into scored completions and advantages,
    ``_generate_and_score_completions``: the groups whose rewards are all equal (zero
    advantage) are dropped, and more prompts are generated until the update holds
    ``prompts_per_step`` mixed groups or ``dynamic_rounds`` rounds ran; the update then trains
    on what it holds (with no mixed group at all, every token is masked out of the loss). The
    extra prompts of round r of step s are a draw seeded by (seed, s, r) from the prompts not yet
    generated at that step, so a resumed run draws what an uninterrupted one did. Advantages are
    computed per round (per group with ``scale_rewards: group``, so combining rounds changes none). One
    process and one generation per update only (checked by :func:`train_run`).

    With ``merge_for_generation`` (``train.merge_lora_for_generation``) transformers generates
    with the LoRA merged into the base weights (:func:`merged_lora`).
    """

    def __init__(self, *args, recorder: Recorder, run_dir: Path, dynamic_rounds: int | None = None,
                 merge_for_generation: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorder, self.run_dir, self.dynamic_rounds = recorder, run_dir, dynamic_rounds
        self.merge_for_generation = merge_for_generation and isinstance(self.model, peft.PeftModel)

    def _generate_single_turn(self, *args, **kwargs):
        # TRL 1.16: the one place that calls model.generate (HF) or vLLM for a batch of prompts
        if self.use_vllm or not self.merge_for_generation:
            return super()._generate_single_turn(*args, **kwargs)
        with merged_lora(self.model):
            return super()._generate_single_turn(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        g = self.num_generations
        wanted = len(inputs) // g
        self.recorder.round = 1
        first = len(self.recorder.groups)
        batch = super()._generate_and_score_completions(inputs)
        counts = dict.fromkeys(GENERATION_METRICS, 0)
        counts["generation_rounds"] = 1
        if self.dynamic_rounds is None:  # every group enters the update, as TRL does (all processes')
            n = self.accelerator.num_processes
            counts.update(groups_generated=wanted * n, groups_kept=wanted * n, completions_generated=len(inputs) * n)
            self._log_counts(counts)
            return batch
        seen = {x["id"] for x in inputs}
        parts, kept = [], 0
        while True:
            rows = self.recorder.groups[first:]
            self._count(counts, rows)
            take = [i for i, row in enumerate(rows) if row["learnable"]][:wanted - kept]
            for i, row in enumerate(rows):
                row["kept"] = i in take
            if take:
                parts.append((batch, take))
            kept += len(take)
            if kept >= wanted or counts["generation_rounds"] >= self.dynamic_rounds:
                break
            counts["generation_rounds"] += 1
            self.recorder.round = counts["generation_rounds"]
            extra = self._draw_prompts(wanted, counts["generation_rounds"], seen)
            seen.update(x["id"] for x in extra)
            first = len(self.recorder.groups)
            batch = super()._generate_and_score_completions([x for x in extra for _ in range(g)])
        counts["groups_kept"] = kept
        self._log_counts(counts)
        if not parts:  # nothing learnable: an update whose loss has no token
            return {**batch, "completion_mask": torch.zeros_like(batch["completion_mask"]),
                    "advantages": torch.zeros_like(batch["advantages"]),
                    "num_items_in_batch": batch["completion_mask"].sum() * 0}
        return merge_batches(parts, g, self._tokenizer.pad_token_id)

    def _draw_prompts(self, n: int, generation_round: int, seen: set) -> list[dict]:
        """``n`` dataset rows for an extra round: seeded by (seed, step, round), drawn from the
        prompts this step has not generated yet (all of them once every one has been)."""
        ds = self.train_dataset
        fresh = [i for i, pid in enumerate(ds["id"]) if pid not in seen] or list(range(len(ds)))
        rng = np.random.default_rng([self.args.seed, self.recorder.step_offset + self.state.global_step + 1,
                                     generation_round])
        chosen = rng.choice(len(fresh), size=min(n, len(fresh)), replace=False)
        return [ds[int(fresh[i])] for i in chosen]

    @staticmethod
    def _count(counts: dict, rows: list[dict]) -> None:
        for row in rows:
            counts["groups_generated"] += 1
            counts["completions_generated"] += len(row["rewards"])
            if not row["learnable"]:
                scores = np.asarray(row["scores"])
                key = ("dropped_all_correct" if (scores == 1).all() else
                       "dropped_all_wrong" if (scores == 0).all() else "dropped_other")
                counts[key] += 1

    def _log_counts(self, counts: dict) -> None:
        for name, value in counts.items():
            self._metrics["train"][name].append(float(value))

    def _get_train_sampler(self, dataset=None):
        return EpochSampler(
            data_source=dataset if dataset is not None else self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def _save_checkpoint(self, model, trial):
        # rows first: a crash mid-save leaves rows past the checkpoint, which a resume drops
        self.recorder.write(self.run_dir)
        super()._save_checkpoint(model, trial)
        ckpt = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        if ckpt.is_dir():  # safetensors writes the adapter 0600; every file follows the umask (README)
            artifacts.follow_umask(ckpt)


def train_run(cfg: Config, strategy: str, seed: int, *, progress: bool = True, force: bool = False) -> Path:
    """Train one (arm, seed) run (``strategy``: the arm's name); resume it if interrupted, skip it
    if finished. Returns its folder. One writer at a time: a second process training the same
    run is refused. The arm's own training settings apply (:meth:`Config.for_arm`)."""
    cfg = cfg.for_arm(strategy)
    run_dir = layout.run_dir(cfg, strategy, seed)
    if not devices.is_main_process():  # under a launcher the main process holds the lock and writes
        return _train_run(cfg, strategy, seed, run_dir, progress=progress, force=force)
    with artifacts.exclusive(run_dir):
        return _train_run(cfg, strategy, seed, run_dir, progress=progress, force=force)


#: files every finished run holds besides its checkpoints (covered by the manifest's digests)
RUN_FILES = ("steps.parquet", "groups.parquet", "params.yaml", "trl_config.json")


def adapter_files(run_dir: Path) -> list[str]:
    """The files of every checkpoint's adapter, relative to the run folder (trainer state,
    which a later stage never reads, left out: only the newest checkpoint keeps it)."""
    out = []
    for path in list_checkpoints(run_dir / CHECKPOINTS, complete=False).values():
        out += [artifacts.relative(f, run_dir) for f in sorted(path.rglob("*"))
                if f.is_file() and f.name not in layout.ADAPTER_STATE_FILES]
    return out


def run_damaged(run_dir: Path, manifest: dict) -> list[str]:
    """What a finished run lost or had changed since it finished: files its manifest recorded
    (``sha256``: records, adapters), the checkpoints it lists, and its params and TRL config."""
    bad = artifacts.damaged(run_dir, manifest)
    bad += [c for c in manifest.get("checkpoints", []) if not (run_dir / c / "adapter_config.json").is_file()]
    bad += [f for f in RUN_FILES if f not in manifest.get("sha256", {}) and not (run_dir / f).is_file()]
    return bad


def _damaged_level_record(run_dir: Path) -> str | None:
    """What is wrong with the first unreadable ``levels/*/level.json`` of a run, or None."""
    for path in sorted(run_dir.glob("levels/*/level.json")):
        try:
            artifacts.read_json(path, "03_train")
        except artifacts.ArtifactError as err:
            return str(err)
    return None


def _finished(manifest: dict, max_steps: int) -> bool:
    """A run is finished at ``max_steps`` steps, or earlier when its completion budget was spent."""
    return manifest["status"] == "complete" and (manifest["steps_done"] == max_steps or bool(manifest.get("budget_spent")))


class Budget(TrainerCallback):
    """Stops training (and saves) at the first step whose generated completions reach the
    level's budget, counted from ``before`` (the completions of earlier levels)."""

    def __init__(self, recorder: Recorder, budget: int | None, before: int):
        self.recorder, self.budget, self.before = recorder, budget, before

    def spent(self) -> bool:
        return self.budget is not None and self.recorder.completions_generated() - self.before >= self.budget

    def on_step_end(self, args, state, control, **kwargs):
        if self.spent():
            control.should_training_stop = True
            control.should_save = True


def _check_levels_fit(levels: list[Level], cfg: Config, n_processes: int) -> None:
    """Dynamic sampling and the completion budget count the groups one process scored and cut one
    generated batch: one process, one generation per update."""
    for lv in levels:
        if lv.dynamic_rounds is None and lv.max_completions is None:
            continue
        b = devices.batching(lv.prompts_per_step, lv.group_size, n_processes, cfg.train.per_device_prompts)
        if n_processes > 1 or b.gradient_accumulation_steps > 1:
            raise ValueError(f"dynamic sampling and train.max_completions need one process and one forward pass per "
                             f"update (here {n_processes} process(es), {b.gradient_accumulation_steps} accumulation "
                             "steps); set train.per_device_prompts to null and launch one process")


def _copy_adapters(level_ckpts: Path, ckpt_dir: Path, offset: int) -> None:
    """A level's adapters, renumbered by the run's step, into the run's checkpoints/ (what the
    evaluate stage scores); the trainer state stays in the level's folder."""
    for step, path in list_checkpoints(level_ckpts).items():
        target = ckpt_dir / f"checkpoint-{offset + step}"
        if target.exists():
            continue
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(path, tmp, ignore=shutil.ignore_patterns(OPTIMIZER_FILE, "scheduler.pt", "rng_state.pth"))
        tmp.rename(target)


def _train_run(cfg: Config, strategy: str, seed: int, run_dir: Path, *, progress: bool, force: bool) -> Path:
    ckpt_dir = run_dir / CHECKPOINTS
    rows = selected_rows(cfg, strategy, seed)
    policy = cfg.arm(strategy).policy
    levels = run_levels(cfg, policy)
    control = control_reward(policy, rows, seed)
    key = layout.run_key(cfg, list(rows["id"]), control.describe() if control else None,
                         [lv.key() for lv in levels] if policy in select.EPRLI else None)
    manifest_path = run_dir / "manifest.json"
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    try:
        manifest = artifacts.read_manifest(manifest_path, "03_train")
        if manifest is not None and not {"key", "status", "steps_done"} <= set(manifest):
            raise artifacts.ArtifactError(f"{manifest_path}: damaged, not a run manifest")
    except artifacts.ArtifactError as err:  # its records cannot be trusted: set aside, trained anew
        if devices.is_main_process():
            kept = artifacts.set_aside(run_dir, "damaged")
            warnings.warn(f"{run_dir.name}: {err}; kept the run as {kept.name} and training this one anew",
                          stacklevel=2)
        manifest = None
    if manifest is not None and manifest["key"] == key and _damaged_level_record(run_dir):
        # an interrupted EPRLI run whose record of a finished level is damaged: the rows of the
        # levels after it cannot be put back in order without it, so the run trains anew
        if devices.is_main_process():
            kept = artifacts.set_aside(run_dir, "damaged")
            warnings.warn(f"{run_dir.name}: {_damaged_level_record(kept)}; kept the run as {kept.name} and training "
                          "this one anew", stacklevel=2)
        manifest = None
    if manifest is None and run_dir.exists() and list_checkpoints(ckpt_dir, complete=False):
        # a run writes its manifest before its first step: checkpoints without one are the rest of a
        # folder that lost files (deleted while it trained); its history cannot be trusted
        if devices.is_main_process():
            kept = artifacts.set_aside(run_dir, "damaged")
            warnings.warn(f"{run_dir.name}: checkpoints without a manifest (the folder lost files); kept it as "
                          f"{kept.name} and training this one anew", stacklevel=2)
    if manifest is not None and manifest["key"] != key:
        if devices.is_main_process():  # under a launcher, the one process that moves files
            kept = _set_aside(run_dir, manifest["key"])
            warnings.warn(f"{run_dir.name}: the run there was trained with other settings "
                          f"({', '.join(_changed(manifest['key'], key))} differ); kept it as {kept.name} and "
                          "training this one anew", stacklevel=2)
        manifest = None
    if manifest is not None:
        if manifest["steps_done"] > cfg.train.max_steps:
            raise ValueError(f"{run_dir}: {manifest['steps_done']} steps done, more than train.max_steps = "
                             f"{cfg.train.max_steps}; raise train.max_steps, or delete that folder to retrain it")
        if _finished(manifest, cfg.train.max_steps):
            bad = run_damaged(run_dir, manifest)  # every process sees the same files
            if not bad:
                return run_dir
            if devices.is_main_process():
                kept = _set_aside(run_dir, manifest["key"])
                warnings.warn(f"{run_dir.name}: {bad} damaged since the run finished (its records cannot be "
                              f"rebuilt without training); kept it as {kept.name} and training this one anew",
                              stacklevel=2)
            manifest = None

    devices.device(cfg.model.device)  # a clear error before anything loads when there is no GPU
    n_processes, is_main = devices.num_processes(), devices.is_main_process()
    _check_levels_fit(levels, cfg, n_processes)
    task = data.task_of(cfg)
    study = layout.study_dir(cfg)
    head = {
        "key": key,
        "model": {"name": cfg.model.name, "path": cfg.model.path, "gguf_file": cfg.model.gguf_file},
        "task": task.describe(),
        "strategy": strategy,
        "policy": cfg.arm(strategy).policy,
        "seed": seed,
        "selection": artifacts.relative(select.selection_path(cfg, strategy, seed), study),
        "reward": control.describe() if control else {"kind": "verifier"},
        "num_prompts": len(rows),
        "max_steps": cfg.train.max_steps,
        "num_processes": n_processes,
        "versions": _versions(),
    }
    resumed_from = (manifest or {}).get("resumed_from", [])
    level_records: list[dict] = []

    def write_manifest(status: str, steps_done: int, extra: dict | None = None) -> None:
        if not is_main:
            return
        ckpts = [artifacts.relative(p, run_dir) for p in list_checkpoints(ckpt_dir).values()]
        artifacts.write_json(manifest_path, {**head, "resumed_from": resumed_from, "status": status,
                                             "steps_done": steps_done, "checkpoints": ckpts,
                                             **({"levels": level_records} if levels[0].name is not None else {}),
                                             **(extra or {})})

    if is_main:
        artifacts.write_text(run_dir / "params.yaml", params.dump(cfg))
    t0 = time.perf_counter()
    offset, previous, budget_spent, output, recorder = 0, None, False, None, None
    tidies: list[Tidy] = []
    had: set[int] = set()
    for i, lv in enumerate(levels):
        one = lv.name is None
        lv_ckpt = ckpt_dir if one else artifacts.inside_outputs(run_dir / "levels" / f"{i + 1}-{lv.name}" / CHECKPOINTS,
                                                                 "eprli.levels")
        record_path = lv_ckpt.parent / "level.json"
        if not one and record_path.exists():  # a level an interrupted run finished
            record = artifacts.read_json(record_path, "03_train")  # readable: checked before the first level
            level_records.append(record)
            offset += record["steps_done"]
            previous = list_checkpoints(lv_ckpt)[record["local_steps"]]
            continue
        resumed_step, resume_from = resume_point(lv_ckpt, tidy=is_main)
        if one:
            had = set(list_checkpoints(lv_ckpt))  # what this session found: it must still be there at the end
        # every process records the groups it scored; the main process holds the earlier rows
        steps, groups = _previous_rows(run_dir, offset + resumed_step) if is_main else ([], [])
        before = int(sum(len(g["rewards"]) for g in groups if g["step"] <= offset))
        recorder = Recorder(task, lv.group_size, steps, groups, control,
                            (lv.length_weight, lv.max_completion_length, cfg.train.length_reward.cache),
                            step_offset=offset, level=lv.name)
        budget = Budget(recorder, lv.max_completions, before)
        level_rows = rows if one else rows[rows["level"] == lv.name]
        if len(level_rows) < lv.prompts_per_step:
            raise ValueError(f"eprli level {lv.name!r}: {len(level_rows)} prompts, fewer than its buffer_size "
                             f"= {lv.prompts_per_step}")

        model, tokenizer = data.load_model(cfg)
        if tokenizer.chat_template is None:
            raise ValueError(f"{data.model_path(cfg)[0]}: the tokenizer has no chat template; prompts are chat messages")
        tokenizer.padding_side = "left"
        check_prompt_lengths(level_rows, tokenizer, cfg.train.max_prompt_length, cfg.model.chat_template_kwargs)
        check_fit(tokenizer, list(level_rows["id"]), list(level_rows["prompt"]), lv.max_completion_length,
                  context_length(model), cfg.model.chat_template_kwargs, "train", "max_completion_length")
        dataset = Dataset.from_list(level_rows[["prompt", "answer", "id", "tier"]].to_dict("records"))

        tidy = Tidy(lv_ckpt)
        if one:
            tidies.append(tidy)
        callbacks = [recorder, budget, tidy] + (
            [Progress(layout.run_id(strategy, seed) + ("" if one else f" {lv.name}"))] if progress else [])
        peft_config = lora_config(cfg)
        set_seed(seed)  # PEFT draws the LoRA init before TRL seeds anything
        if previous is not None:  # the adapter carries on from the level before
            model = peft.PeftModel.from_pretrained(model, str(previous), is_trainable=True)
            peft_config = None
        with quiet_renamed_arguments():
            args = GRPOConfig(**grpo_kwargs(cfg, seed, lv_ckpt, n_processes, lv))
            trainer = Trainer(
                model=model, reward_funcs=recorder.correct, args=args, train_dataset=dataset,
                processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks,
                recorder=recorder, run_dir=run_dir, dynamic_rounds=lv.dynamic_rounds,
                merge_for_generation=cfg.train.merge_lora_for_generation,
            )
        trainer.remove_callback(PrinterCallback)  # it prints every log dict
        for cb in trainer.callback_handler.callbacks:  # TensorBoard's event files: in the run's folder, one per level
            if isinstance(cb, TensorBoardCallback):
                cb.logging_dir = str(layout.tensorboard_dir(run_dir) / ("" if one else f"{i + 1}-{lv.name}"))
        if is_main and (one or i == 0):
            lora = peft_config or lora_config(cfg)
            peft_dict = {k: sorted(v) if isinstance(v, set) else v for k, v in lora.to_dict().items()}
            artifacts.write_json(run_dir / "trl_config.json", {"grpo": args.to_dict(), "peft": peft_dict})
        if is_main and not one:
            artifacts.write_json(lv_ckpt.parent / "trl_config.json", {"grpo": args.to_dict()})
        if resume_from:
            resumed_from = resumed_from + [offset + resumed_step]
        write_manifest("running", offset + resumed_step)
        if budget.spent():  # spent before an interruption: the level is over
            local = resumed_step
        else:
            with quiet_renamed_arguments():
                output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
            local = trainer.state.global_step
        recorder.write(run_dir)
        level_spent = budget.spent()
        if not one:
            if local < lv.steps and not level_spent:  # stopped early (a callback): the run stops here
                offset += local
                break
            if is_main:
                _copy_adapters(lv_ckpt, ckpt_dir, offset)
            level_groups = pd.DataFrame([g for g in recorder.groups if g["level"] == lv.name])
            level_steps = pd.DataFrame([r for r in recorder.steps if r.get("level") == lv.name])
            record = {
                "level": lv.name, "local_steps": local, "steps_done": local, "first_step": offset + 1,
                "last_step": offset + local, "budget_spent": level_spent,
                "completions_generated": int(level_groups["rewards"].map(len).sum()) if len(level_groups) else 0,
                "learnable_generated_pct": round(100 * float(level_groups["learnable"].mean()), 2)
                if len(level_groups) else None,
                "learnable_kept_pct": round(100 * float(level_groups[level_groups["kept"]]["learnable"].mean()), 2)
                if len(level_groups) and level_groups["kept"].any() else None,
                "buffer_fill": round(float((level_steps["groups_kept"] / lv.prompts_per_step).mean()), 4)
                if "groups_kept" in level_steps else None,
                "mean_completion_length": round(float(level_steps["completions/mean_length"].mean()), 2)
                if "completions/mean_length" in level_steps else None,
            }
            if is_main:
                artifacts.write_json(record_path, record)
            level_records.append(record)
            previous = list_checkpoints(lv_ckpt)[local]
        offset += local
        budget_spent = level_spent
        del trainer, model

    if recorder is None:  # every level was finished before an interruption
        steps, groups = _previous_rows(run_dir, offset)
        recorder = Recorder(task, levels[-1].group_size, steps, groups)
    step_times = pd.DataFrame(recorder.steps).get("step_time", pd.Series(dtype=float))
    finished = offset >= cfg.train.max_steps or budget_spent
    if levels[0].name is not None:
        finished = len(level_records) == len(levels)
    if is_main:
        every = {s for s in range(cfg.train.save_steps, offset + 1, cfg.train.save_steps)} if levels[0].name is None else set()
        _check_nothing_lost(run_dir, had | every | {s for t in tidies for s in t.saved}, manifest_path)
    write_manifest("complete" if finished else "stopped", offset, {
        "sha256": artifacts.digests(run_dir, [f for f in RUN_FILES if (run_dir / f).is_file()] + adapter_files(run_dir)
                                    + [artifacts.relative(p, run_dir) for p in sorted(run_dir.glob("levels/*/level.json"))]),
        "seconds_this_session": round(time.perf_counter() - t0, 1),
        "mean_step_seconds": round(float(step_times.mean()), 3) if len(step_times) else None,
        "train_loss": output.training_loss if output is not None else None,
        "completions_generated": recorder.completions_generated(),
        "budget_spent": finished and offset < cfg.train.max_steps,
    })
    return run_dir


def _check_nothing_lost(run_dir: Path, saved: set[int], manifest_path: Path) -> None:
    """Before a run is recorded: every checkpoint this session found or saved, and the run's
    params and TRL config, are still there. A run folder deleted (or thinned) while it trained
    is set aside and refused, not recorded as finished with what was written after."""
    have = set(list_checkpoints(run_dir / CHECKPOINTS, complete=False))
    lost = [f"{CHECKPOINTS}/checkpoint-{s}" for s in sorted(saved - have)]
    lost += [f for f in ("params.yaml", "trl_config.json") if not (run_dir / f).is_file()]
    if lost:
        kept = artifacts.set_aside(run_dir, "damaged")
        raise artifacts.ArtifactError(f"{run_dir}: files of the run disappeared while it trained ({', '.join(lost)}); "
                                      f"kept what is left as {kept.name}; rerun the train stage (03_train), which "
                                      "trains the run anew")


def train_runs(cfg: Config, progress: bool = True, arm: str | None = None, seed: int | None = None) -> dict[str, Path]:
    """Every (arm, seed) run of the study (or those of ``arm`` and/or ``seed``), ``cfg.workers``
    at a time; run id -> folder."""
    runs = layout.planned_runs(cfg, arm, seed)
    ids = [layout.run_id(s, seed) for s, seed in runs]
    done = parallel.run_jobs(train_run, [(cfg, s, seed) for s, seed in runs], cfg.workers, names=ids,
                             progress=progress, desc="train")
    return dict(zip(ids, done))


def main(argv: list[str] | None = None) -> int:
    """One run from the command line; the way to train on several GPUs:

        accelerate launch --multi_gpu --num_processes 4 -m diffgrpo.train paper003_gsm8k_qwen3_4b --arm hard --seed 0

    Each process trains on its share of every update (diffgrpo.devices.batching); the main
    process writes the run's files. The study's 03_train stage then finds the run finished."""
    import argparse

    from .study import parse_overrides

    ap = argparse.ArgumentParser(prog="python -m diffgrpo.train", description=main.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", help="a file in params/ (name or path)")
    ap.add_argument("--arm", "--strategy", dest="arm", required=True, help="an arm of the params file's `arms`")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a parameter, e.g. train.max_steps=20 (repeatable)")
    ap.add_argument("--force", action="store_true", help="start the run over")
    args = ap.parse_args(argv)
    if args.force and devices.num_processes() > 1:
        raise SystemExit("--force with several processes would race to delete the run: start it over "
                         "with one process first, or remove the run folder")
    cfg = params.load(args.params_file, overrides=parse_overrides(args.overrides))
    run_dir = train_run(cfg, args.arm, args.seed, progress=devices.is_main_process(), force=args.force)
    if devices.is_main_process():
        print(f"run: {run_dir}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
