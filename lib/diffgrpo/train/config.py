"""What the trainer is built with: TRL's ``GRPOConfig`` arguments and PEFT's ``LoraConfig``.

Every GRPOConfig argument is set explicitly (the effective values are in each run's
``trl_config.json``): from ``train.*``, from the arm's level, and the fixed choices below;
``train.trl`` passes any other option through, last (it may also replace a fixed choice, e.g.
the optimizer). How this differs from TRL 1.16's defaults: beta, loss_type, learning_rate,
epsilon_high come from params (TRL: 0.0, "dapo", 1e-6, None); ``use_bias_correction_kl=False``
(TRL multiplies the KL term by the importance ratio, DeepSeek-V3.2; DeepSeekMath does not);
``top_k=0``; ``bf16``/``gradient_checkpointing`` from params (TRL: True, which a CPU refuses);
``optim="adamw_torch"``; ``warmup_steps = ceil(warmup_ratio * max_steps)`` (transformers 5 has
no ``warmup_ratio``). TRL 1.16 has no ``max_prompt_length``: a prompt longer than
``train.max_prompt_length`` (when set) is an error rather than a silently cut question.

The advantage: with ``scale_rewards: group`` a group's advantage is (r - mean) / (std + 1e-4),
TRL's form; ``none`` leaves r - mean (Dr. GRPO, and paper 003's appendix A.4); the KL term is
DeepSeekMath's per-token k3 estimator against the base model with the adapter switched off.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from peft import LoraConfig
from trl import GRPOConfig

from diffgrpo.models import devices
from diffgrpo.params import DERIVED_GRPO_OPTIONS, Config
from diffgrpo.train.levels import Level, run_levels


def checkpointing_argument() -> str:
    """The name of activation checkpointing in the installed transformers: 5.23 (the CPU
    environment) calls it ``activation_checkpointing`` and warns on the old name; 5.17 (the
    GPU environment, which vLLM 0.31 holds below 5.18) knows only ``gradient_checkpointing``."""
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


class ScheduleChanged(ValueError):
    """A run taken to another length whose learning-rate schedule depends on its length."""


def warmup_steps(t, steps: int) -> int:
    """The warmup of a run of ``steps`` steps (transformers 5 has no ``warmup_ratio``)."""
    return math.ceil(t.warmup_ratio * steps)


def schedule_depends_on_length(t, planned: int, steps: int) -> bool:
    """Whether the learning rate of a step already trained in a run planned at ``planned``
    steps would differ in a run of ``steps`` steps (``t``: the run's ``train``): cosine and
    linear decay over the whole length; ``constant`` never; ``constant_with_warmup`` when the
    warmup moves. TRL rebuilds the schedule from the new length on resume, so such an
    extension would train neither the old run nor a fresh one (issue 30)."""
    if planned == steps or t.lr_scheduler == "constant":
        return False
    if t.lr_scheduler == "constant_with_warmup":
        return warmup_steps(t, planned) != warmup_steps(t, steps)
    return True


def check_extension(t, folder: Path, manifest: dict | None, steps: int) -> None:
    """Refuse, naming the keys, to take a run (finished or interrupted) that was planned at
    another length to ``steps`` when its schedule depends on the length. The run key leaves the
    length out so that a run may be extended; this keeps that safe without changing any key."""
    if not manifest or not manifest.get("steps_done"):
        return
    planned = manifest.get("max_steps")
    if planned is None or not schedule_depends_on_length(t, planned, steps):
        return
    raise ScheduleChanged(
        f"{folder}: the run was planned at {planned} steps ({manifest['steps_done']} done) with train.lr_scheduler = "
        f"{t.lr_scheduler} (warmup_ratio {t.warmup_ratio:g}); taking it to {steps} steps (train.max_steps or "
        "train.epochs) would change the learning rate of the steps already trained, so it would be neither run. "
        f"Set train.max_steps back to {planned} (or the train.epochs that gives it); or train runs meant to be "
        f"extended with `train.lr_scheduler: constant`; or move {folder.name} aside to train it anew at {steps} steps")


def grpo_kwargs(cfg: Config, seed: int, output_dir: Path, n_processes: int = 1,
                level: Level | None = None) -> dict[str, Any]:
    """Every GRPOConfig argument we set: all of ``cfg.train`` plus the fixed choices above;
    ``level`` (default: the run's one level from ``cfg.train``) sets the batch, steps, lengths
    and clip bounds. ``n_processes``: processes of the job (``accelerate launch``); the
    per-device batch and gradient accumulation are derived so that an update keeps
    ``prompts_per_step`` prompts."""
    t = cfg.train
    lv = level or run_levels(cfg)[0]
    b = devices.batching(lv.prompts_per_step, lv.group_size, n_processes, t.per_device_prompts)
    if t.use_vllm and t.vllm_mode == "colocate" and n_processes % t.vllm_tensor_parallel_size:
        raise ValueError(f"train.vllm_tensor_parallel_size = {t.vllm_tensor_parallel_size} must divide the "
                         f"{n_processes} training process(es) (TRL's colocate mode)")
    assert not set(t.trl) & set(DERIVED_GRPO_OPTIONS)  # params refuses them by name
    fixed = dict(
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
        warmup_steps=warmup_steps(t, lv.steps),
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
        report_to=t.report_to,  # TRL's own trackers; tensorboard writes into the run's folder (train.run)
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
    if cfg.model.device == "cuda" and not t.use_vllm:  # HF generation on a GPU: a static cache (TRL's own option;
        fixed["cache_implementation"] = "static"  # TRL 1.16 passes disable_compile=True, so it runs uncompiled)
    return {**fixed, **t.trl}  # checked at load: GRPOConfig fields, none derived from diffgrpo's keys


def lora_config(cfg: Config) -> LoraConfig:
    lp = cfg.train.lora
    return LoraConfig(r=lp.r, lora_alpha=lp.alpha, lora_dropout=lp.dropout,
                      target_modules=list(lp.target_modules), bias="none", task_type="CAUSAL_LM")


