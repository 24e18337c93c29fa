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
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from . import artifacts, data, devices, layout, parallel, params, select
from .generation import encode_prompt
from .models import quiet_renamed_arguments
from .params import Config

CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.json"  # HF writes it last: a checkpoint without it is incomplete
OPTIMIZER_FILE = "optimizer.pt"


# ---- inputs -------------------------------------------------------------------------------
def selected_rows(cfg: Config, strategy: str, seed: int = 0) -> pd.DataFrame:
    """The selection's prompts (id, prompt, answer, tier, p_hat), in the selection's order (a
    per-seed policy's: the one drawn for training seed ``seed``)."""
    path = select.selection_path(cfg, strategy, seed)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no selection {strategy!r}; run the select stage first")
    selection = artifacts.read_parquet(path, "02_select", columns=["id", "p_hat"])
    ids = selection["id"].astype(str)
    pool = data.load_pool(cfg).set_index("id")
    missing = [i for i in ids if i not in pool.index]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} selected id(s) not in the {cfg.dataset.task!r} pool "
            f"(split {cfg.dataset.train_split!r}, pool_size {cfg.dataset.pool_size}): {missing[:10]}"
        )
    if len(ids) < cfg.train.prompts_per_step:
        raise ValueError(f"{path}: {len(ids)} prompts, fewer than train.prompts_per_step = {cfg.train.prompts_per_step}")
    return pool.loc[list(ids), ["prompt", "answer", "tier"]].reset_index().assign(p_hat=selection["p_hat"].to_numpy())


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


def grpo_kwargs(cfg: Config, seed: int, output_dir: Path, n_processes: int = 1) -> dict[str, Any]:
    """Every GRPOConfig argument we set: all of ``cfg.train`` plus the fixed choices above.
    ``n_processes``: processes of the job (``accelerate launch``); the per-device batch and
    gradient accumulation are derived so that an update keeps ``prompts_per_step`` prompts."""
    t = cfg.train
    b = devices.batching(t.prompts_per_step, t.group_size, n_processes, t.per_device_prompts)
    if t.use_vllm and t.vllm_mode == "colocate" and n_processes % t.vllm_tensor_parallel_size:
        raise ValueError(f"train.vllm_tensor_parallel_size = {t.vllm_tensor_parallel_size} must divide the "
                         f"{n_processes} training process(es) (TRL's colocate mode)")
    return dict(
        output_dir=str(output_dir),
        seed=seed,  # model init of LoRA, sampling, and (our sampler) the prompt order
        # batch: one update = prompts_per_step prompts x group_size completions, freshly generated
        # (N processes: per device x N x accumulation = prompts_per_step x G; one generation per update)
        num_generations=t.group_size,
        per_device_train_batch_size=b.per_device_train_batch_size,
        gradient_accumulation_steps=b.gradient_accumulation_steps,
        steps_per_generation=b.gradient_accumulation_steps,
        num_iterations=t.num_iterations,
        max_steps=t.max_steps,
        shuffle_dataset=True,
        # objective
        loss_type=t.loss_type,
        beta=t.beta,
        use_bias_correction_kl=False,
        scale_rewards=t.scale_rewards,
        epsilon=t.epsilon,
        epsilon_high=t.epsilon_high,
        importance_sampling_level="token",
        mask_truncated_completions=t.mask_truncated_completions,
        # optimizer and schedule
        optim="adamw_torch",
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=math.ceil(t.warmup_ratio * t.max_steps),
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        # sampling
        max_completion_length=t.max_completion_length,
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
        report_to="none",
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


class Recorder(TrainerCallback):
    """Scores completions (the reward function) and keeps the per-group and per-step rows."""

    def __init__(self, task, group_size: int, steps: list[dict], groups: list[dict],
                 control: ControlReward | None = None):
        self.task, self.group_size, self.control = task, group_size, control
        self.steps, self.groups = steps, groups

    def correct(self, prompts, completions, answer, id, tier, trainer_state, **_) -> list[float]:
        """Reward: 1.0 when the completion's final answer is right (the control arm: a seeded
        Bernoulli draw instead; the verifier's score is recorded as ``scores`` either way). TRL
        calls this once per generated batch, groups contiguous (RepeatSampler), so each group is
        recorded once."""
        scores = [self.task.score(completion_text(c), a) for c, a in zip(completions, answer)]
        step = trainer_state.global_step + 1  # the update this batch feeds (global_step is 0-based here)
        g = self.group_size
        rewards = []
        for start in range(0, len(scores), g):
            if len(set(id[start:start + g])) != 1:
                raise RuntimeError(f"TRL passed a group of mixed prompts {id[start:start + g]}: grouping changed")
            s = np.asarray(scores[start:start + g], dtype=float)
            r = s if self.control is None else self.control.draw(step, id[start], start, len(s))
            rewards.extend(r.tolist())
            self.groups.append({
                "step": step, "prompt_id": id[start], "tier": tier[start], "rewards": r.tolist(),
                "reward_mean": float(r.mean()), "reward_std": float(r.std(ddof=1)),
                "learnable": bool(r.max() > r.min()), "scores": s.tolist(),
            })
        return rewards

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:  # the end-of-training summary has train_loss instead
            self.steps.append({"step": state.global_step, **{k: v for k, v in logs.items() if k != "total_flos"}})

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        steps = pd.DataFrame(self.steps)
        groups = pd.DataFrame(self.groups, columns=["step", "prompt_id", "tier", "rewards", "reward_mean",
                                                    "reward_std", "learnable", "scores"])
        return steps, groups

    def write(self, run_dir: Path) -> None:
        """Every process calls it (at each save and at the end); with several, the groups each
        one scored are gathered and the main process writes them."""
        if devices.num_processes() > 1:
            from accelerate.utils import gather_object

            gathered = sorted(gather_object(self.groups), key=lambda g: g["step"])  # stable: rank order within a step
            everyone = Recorder(self.task, self.group_size, self.steps, gathered)
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

    def on_save(self, args, state, control, **kwargs):
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


class Trainer(GRPOTrainer):
    """GRPOTrainer with a resumable prompt order, our rows saved with each checkpoint, and
    (``train.merge_lora_for_generation``) the LoRA merged while transformers generates."""

    def __init__(self, *args, recorder: Recorder, run_dir: Path, merge_for_generation: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorder, self.run_dir = recorder, run_dir
        self.merge_for_generation = merge_for_generation and isinstance(self.model, peft.PeftModel)
        self.merged_generations = 0  # how many generation calls ran merged (tests read it)

    def _generate_single_turn(self, *args, **kwargs):
        # TRL 1.16: the one place that calls model.generate (HF) or vLLM for a batch of prompts
        if self.use_vllm or not self.merge_for_generation:
            return super()._generate_single_turn(*args, **kwargs)
        with merged_lora(self.model):
            self.merged_generations += 1
            return super()._generate_single_turn(*args, **kwargs)

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


def _train_run(cfg: Config, strategy: str, seed: int, run_dir: Path, *, progress: bool, force: bool) -> Path:
    ckpt_dir = run_dir / CHECKPOINTS
    rows = selected_rows(cfg, strategy, seed)
    control = control_reward(cfg.arm(strategy).policy, rows, seed)
    key = layout.run_key(cfg, list(rows["id"]), control.describe() if control else None)
    manifest_path = run_dir / "manifest.json"
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    manifest = artifacts.read_json(manifest_path) if manifest_path.exists() else None
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
        if manifest["status"] == "complete" and manifest["steps_done"] == cfg.train.max_steps:
            bad = artifacts.damaged(run_dir, manifest)  # every process sees the same files
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
    resumed_step, resume_from = resume_point(ckpt_dir, tidy=is_main)
    # every process records the groups it scored; the main process holds the earlier rows
    steps, groups = _previous_rows(run_dir, resumed_step) if is_main else ([], [])
    task = data.task_of(cfg)
    recorder = Recorder(task, cfg.train.group_size, steps, groups, control)

    model, tokenizer = data.load_model(cfg)
    if tokenizer.chat_template is None:
        raise ValueError(f"{data.model_path(cfg)[0]}: the tokenizer has no chat template; prompts are chat messages")
    tokenizer.padding_side = "left"
    check_prompt_lengths(rows, tokenizer, cfg.train.max_prompt_length, cfg.model.chat_template_kwargs)
    dataset = Dataset.from_list(rows[["prompt", "answer", "id", "tier"]].to_dict("records"))

    callbacks = [recorder, Tidy(ckpt_dir)] + ([Progress(layout.run_id(strategy, seed))] if progress else [])
    peft_config = lora_config(cfg)
    set_seed(seed)  # PEFT draws the LoRA init before TRL seeds anything
    with quiet_renamed_arguments():
        args = GRPOConfig(**grpo_kwargs(cfg, seed, ckpt_dir, n_processes))
        trainer = Trainer(
            model=model, reward_funcs=recorder.correct, args=args, train_dataset=dataset,
            processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks,
            recorder=recorder, run_dir=run_dir, merge_for_generation=cfg.train.merge_lora_for_generation,
        )
    trainer.remove_callback(PrinterCallback)  # it prints every log dict

    if is_main:
        artifacts.write_text(run_dir / "params.yaml", params.dump(cfg))
    peft_dict = {k: sorted(v) if isinstance(v, set) else v for k, v in peft_config.to_dict().items()}
    if is_main:
        artifacts.write_json(run_dir / "trl_config.json", {"grpo": args.to_dict(), "peft": peft_dict})
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
        "resumed_from": (manifest or {}).get("resumed_from", []) + ([resumed_step] if resume_from else []),
    }

    def write_manifest(status: str, steps_done: int, extra: dict | None = None) -> None:
        if not is_main:
            return
        ckpts = [artifacts.relative(p, run_dir) for p in list_checkpoints(ckpt_dir).values()]
        artifacts.write_json(manifest_path, {**head, "status": status, "steps_done": steps_done,
                                             "checkpoints": ckpts, **(extra or {})})

    write_manifest("running", resumed_step)
    t0 = time.perf_counter()
    with quiet_renamed_arguments():
        output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    recorder.write(run_dir)
    done = trainer.state.global_step
    step_times = pd.DataFrame(recorder.steps).get("step_time", pd.Series(dtype=float))
    write_manifest("complete" if done >= cfg.train.max_steps else "stopped", done, {
        "sha256": artifacts.digests(run_dir, ["steps.parquet", "groups.parquet"]),
        "seconds_this_session": round(time.perf_counter() - t0, 1),
        "mean_step_seconds": round(float(step_times.mean()), 3) if len(step_times) else None,
        "train_loss": output.training_loss,
    })
    return run_dir


def train_runs(cfg: Config, progress: bool = True) -> dict[str, Path]:
    """Every (arm, seed) run of the study, ``cfg.workers`` at a time; run id -> folder."""
    runs = layout.planned_runs(cfg)
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
