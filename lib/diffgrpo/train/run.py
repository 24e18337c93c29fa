"""Stage 3: train one (arm, seed) run, GRPO with LoRA on its selection, through TRL's
GRPOTrainer and PEFT; resume it where it stopped, skip it when finished.

    train_run(cfg, "hard", seed=0)  ->  outputs/<study>/runs/hard-seed0/

How a run is launched (in this process, its levels apart, accelerate): :mod:`.launch`, whose
:class:`~diffgrpo.train.launch.RunSpec` says the run (its arm, seed, folder, selection and
levels, resolved once); this module trains it in the process it is given (:func:`train_here`).

One update = ``prompts_per_step`` prompts x ``group_size`` completions, sampled fresh from the
current policy; with ``num_iterations`` = mu > 1 one generated batch feeds mu updates. Files
in the run folder: ``params.yaml``, ``trl_config.json``, ``manifest.json`` (model, task,
selection, reward, steps done, checkpoints, versions, status, the compute ledger:
:mod:`.ledger`), ``steps.parquet`` (TRL's logged
metrics), ``groups.parquet`` (every generated group, :mod:`.records`) and
``checkpoints/checkpoint-<step>/`` (the adapter every ``save_steps`` and at the end; only the
newest keeps its optimizer state). Prompts are reshuffled every epoch as a function of (seed,
epoch), so a resumed run sees the prompts an uninterrupted one does.
"""

from __future__ import annotations

import contextlib

import dataclasses
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import peft
import torch
import transformers
import trl
from datasets import Dataset
from transformers import set_seed
from transformers.integrations import TensorBoardCallback
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig

from diffgrpo.tasks import splits
from diffgrpo.store import artifacts, layout, trackers
from diffgrpo.store.run_folder import RunFolder
from diffgrpo.models import resolve, devices
from diffgrpo import rewards, select
from diffgrpo.train import ledger
from diffgrpo.train import levels as eprli
from diffgrpo.models.generation import check_fit, context_length, encode_prompt
from diffgrpo.models.loading import quiet_renamed_arguments
from diffgrpo.params import Config, budgets
from diffgrpo.train.config import check_extension, grpo_kwargs, lora_config
from diffgrpo.train import online
from diffgrpo.train.records import Progress, Recorder, Tidy
from diffgrpo.train.trainer import Budget, Trainer, check_levels_fit

# `RunSpec` in the annotations: diffgrpo.train.launch's, which imports this module (so this one
# names it without importing it)


def selected_rows(cfg: Config, arm: str, seed: int = 0) -> pd.DataFrame:
    """The selection's prompts (id, prompt, answer, tier, p_hat; an EPRLI arm's also
    level), in the selection's order (a per-seed policy's: the one drawn for training seed
    ``seed``). For a caller without the run's spec (a script, a test); a run reads the selection
    its spec names (:func:`prepare`)."""
    return _selection_rows(cfg, arm, select.selection_path(cfg, arm, seed))


def _selection_rows(cfg: Config, arm: str, path: Path) -> pd.DataFrame:
    """:func:`selected_rows` of the selection at ``path`` (``cfg``: the arm's or the study's)."""
    if not path.exists():
        raise layout.NotRunYet(f"{path}: no selection {arm!r} yet; run the probe and select stages first (01_probe, "
                               "02_select: `python -m diffgrpo.study <params> --stages 01_probe 02_select`), then train")
    selection = artifacts.read_parquet(path, "02_select")
    ids = selection["id"].astype(str)
    pool = splits.load_pool(cfg).set_index("id")
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
    if cfg.arm(arm).select == "levels":  # each prompt's EPRLI level (policies.levels)
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


def _versions() -> dict[str, str]:
    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "peft": peft.__version__}


def run_reward_key(arm, rows: pd.DataFrame, seed: int) -> dict | None:
    """What the arm's rewards add to its runs' key: nothing for the verifier alone (003's runs
    keep their keys), a reward's own key (the control arm's mean and seed) for one other reward,
    every reward's and its weight for several."""
    weights = arm.reward_weights
    if len(weights) == 1 and next(iter(weights.values())) == 1.0:
        return rewards.get(next(iter(weights))).run_key(rows, seed)
    return {"weights": weights, "rewards": {n: rewards.get(n).run_key(rows, seed) for n in weights}}


def train_here(spec: RunSpec, *, progress: bool, force: bool) -> Path:
    """Train the run ``spec`` says in this process (the caller holds the run's lock, or is a
    launcher's process whose parent or main process does: :mod:`diffgrpo.train.launch`).
    A run reads in three steps: :func:`prepare` (what the folder holds, skipped when
    finished), :func:`train_level` for each level (the whole run, or paper 002's EPRLI levels one
    after the other), :func:`finish` (the manifest that records it). ``spec.level``: the levels
    before it are finished (their records are read), it alone trains, and the parent process
    finishes."""
    only = spec.level
    run = prepare(spec, progress=progress, force=force)
    if run is None:  # finished before
        return spec.folder
    for i, lv in enumerate(run.levels[:None if only is None else only + 1]):
        if only is not None and i < only and run.folder.read_level_record(i, lv.name) is None:
            raise RuntimeError(f"{spec.folder}: level {i + 1} ({lv.name}) is not finished; level {only + 1} cannot start")
        if not train_level(run, i, lv):
            break
    if only is None:
        finish(run)
    return spec.folder


@dataclasses.dataclass
class Run:
    """One (arm, seed) run as it trains: what :func:`prepare` read, and what each level hands
    the next (the steps done before it, the adapter it carries on from)."""

    spec: RunSpec  # the run as launch.resolve resolved it: arm, seed, folder, selection, levels
    cfg: Config  # the arm's (spec.arm_cfg)
    folder: RunFolder
    rows: pd.DataFrame  # the prompts of spec.selection
    levels: list[eprli.Level]  # the settings of each of spec.levels (eprli.run_levels)
    max_steps: int  # the run's steps (Config.run_steps)
    fields: dict  # the manifest's description of the run (key, model, task, selection, ...)
    task: Any
    progress: bool
    n_processes: int
    is_main: bool
    resumed_from: list[int]  # the steps this run was resumed from, every session's
    earlier_seconds: dict = dataclasses.field(default_factory=dict)  # cpu/gpu/wall of earlier finished sessions
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    cpu0: float = dataclasses.field(default_factory=time.process_time)
    level_records: list[dict] = dataclasses.field(default_factory=list)
    offset: int = 0  # steps done by the levels before this one
    adapter: Path | None = None  # the previous level's last adapter (EPRLI)
    budget_spent: bool = False
    output: Any = None  # TRL's TrainOutput of the last level trained this session
    recorder: Recorder | None = None
    groups: list[dict] | None = None  # every process's groups, as the last level wrote them
    saved: set[int] = dataclasses.field(default_factory=set)  # checkpoints found or saved this session

    @property
    def arm(self) -> str:
        return self.spec.arm

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def is_eprli(self) -> bool:
        """A levels run (:attr:`RunSpec.is_levels_run`): only such a run's levels have names
        (:func:`~diffgrpo.train.levels.run_levels`)."""
        return self.spec.is_levels_run

    def write_manifest(self, status: str, steps_done: int, extra: dict | None = None) -> None:
        if self.is_main:
            self.folder.write_manifest({**self.fields, "resumed_from": self.resumed_from,
                                        **({"levels": self.level_records} if self.is_eprli else {}),
                                        **(extra or {})}, status, steps_done)


def prepare(spec: RunSpec, *, progress: bool, force: bool) -> Run | None:
    """The rows of the spec's selection, its levels' settings and the run's key; what its folder
    holds (a finished run: None; one with other settings or damaged: set aside,
    :meth:`RunFolder.previous`); its params written."""
    cfg, arm, seed, run_dir = spec.arm_cfg, spec.arm, spec.seed, spec.folder
    folder = RunFolder(run_dir)
    rows, max_steps, levels, key = identity(spec)
    ledger.check_probe(cfg, arm, spec.selection)
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    manifest, done = folder.previous(key, max_steps, devices.is_main_process())
    if done:
        groups = run_dir / layout.GROUPS
        fresh = ledger.refreshed(cfg, arm, manifest, artifacts.read_parquet(groups, "03_train") if groups.exists() else None)
        if fresh is not None and devices.is_main_process():  # today's charge_probe and probe: the ledger says them
            artifacts.write_json(folder.manifest_path, {**manifest, "ledger": fresh})
        return None
    if not spec.is_levels_run:  # a levels run's level steps are in its key
        check_extension(cfg.train, run_dir, manifest, max_steps)

    devices.device(cfg.model.device)  # a clear error before anything loads when there is no GPU
    if cfg.model.device == "cuda" and not cfg.train.use_vllm:
        devices.expandable_segments()  # TRL's HF generation: before the model reaches the card
    trackers.check(cfg)  # the tracker train.report_to names can run here; its records under the outputs root
    os.environ.update(trackers.environment(cfg))
    n_processes, is_main = devices.num_processes(), devices.is_main_process()
    check_levels_fit(levels, cfg, n_processes)
    fields = manifest_fields(spec, key, rows, max_steps, splits.task_of(cfg), n_processes)
    if is_main:
        folder.write_params(cfg)
    earlier = ((manifest or {}).get("ledger") or {}).get("train", {})
    return Run(spec, cfg, folder, rows, levels, max_steps, fields, splits.task_of(cfg), progress, n_processes, is_main,
               resumed_from=(manifest or {}).get("resumed_from", []),
               earlier_seconds={k: earlier.get(f"{k}_seconds") or 0.0 for k in ("cpu", "gpu", "wall")})


def identity(spec: RunSpec) -> tuple[pd.DataFrame, int, list[eprli.Level], dict]:
    """What decides the run ``spec`` says: its selection's rows, its steps (train.max_steps, or
    train.epochs passes over these rows), its levels' settings and its key (:func:`layout.run_key`)."""
    cfg, arm = spec.arm_cfg, spec.arm
    rows = _selection_rows(cfg, arm, spec.selection)
    arm_cfg = cfg.arm(arm)
    max_steps = cfg.run_steps(arm, len(rows))
    levels = eprli.run_levels(cfg, arm, len(rows))
    reward_key = run_reward_key(arm_cfg, rows, spec.seed)
    # the levels' settings are in the key of every arm that selects by level, a one-level one
    # (eprli_grpo) too: the key's shape since paper 002, kept so that no run's key changes
    key = layout.run_key(cfg, list(rows["id"]), reward_key,
                         [lv.key() for lv in levels] if arm_cfg.select == "levels" else None)
    return rows, max_steps, levels, key


def manifest_fields(spec: RunSpec, key: dict, rows: pd.DataFrame, max_steps: int, task, n_processes: int) -> dict:
    """The manifest's description of the run (its key, model, task, selection, reward, ...)."""
    cfg, arm, seed = spec.arm_cfg, spec.arm, spec.seed
    arm_cfg = cfg.arm(arm)
    reward_key = key.get("reward")
    return {
        "key": key,
        "model": {"name": cfg.model.name, "path": cfg.model.path, "gguf_file": cfg.model.gguf_file},
        "task": task.describe(),
        "strategy": arm,
        "select": arm_cfg.select,
        "curriculum": arm_cfg.curriculum,
        "seed": seed,
        "selection": artifacts.relative(spec.selection, layout.study_dir(cfg)),
        "reward": {"weights": arm_cfg.reward_weights, **(reward_key or {"kind": rewards.VERIFIER})},
        "num_prompts": len(rows),
        "max_steps": max_steps,
        "num_processes": n_processes,
        "versions": _versions(),
    }


def train_level(run: Run, i: int, lv: eprli.Level) -> bool:
    """Train level ``i`` (the whole run, or one EPRLI level) from its newest usable checkpoint,
    through TRL's trainer; False when the run stops here (a callback stopped the level early)."""
    one = not run.is_eprli  # the whole run in one level
    ckpt_dir = run.folder.level_checkpoints(i, lv.name)
    record = None if one else run.folder.read_level_record(i, lv.name)
    if record is not None:  # a level an interrupted run finished
        run.level_records.append(record)
        run.offset += record["steps_done"]
        run.adapter = layout.list_checkpoints(ckpt_dir)[record["local_steps"]]
        return True
    resumed_step, resume_from = RunFolder.resume_point(ckpt_dir, tidy=run.is_main)
    if one:
        run.saved |= set(layout.list_checkpoints(ckpt_dir))  # what this session found: still there at the end
    # every process records the groups it scored; the main process holds the earlier rows
    steps, groups = run.folder.previous_rows(run.offset + resumed_step) if run.is_main else ([], [])
    before = int(sum(len(g["rewards"]) for g in groups if g["step"] <= run.offset))
    run.recorder = recorder = Recorder(
        run.task, lv.group_size, steps, groups, run.cfg.arm(run.arm).reward_weights,
        (lv.length_weight, lv.max_completion_length, run.cfg.train.length_reward.cache),
        step_offset=run.offset, level=lv.name, seed=run.seed, rows=run.rows)
    marks = () if not one or lv.max_completions is None else tuple(
        m for m in budgets.checkpoint_marks(run.spec.cfg, run.arm) if m < lv.max_completions)
    budget = Budget(recorder, lv.max_completions, before, marks)
    trainer, tidy = _trainer(run, i, lv, ckpt_dir, recorder, budget)
    if resume_from:
        run.resumed_from = run.resumed_from + [run.offset + resumed_step]
    run.write_manifest("running", run.offset + resumed_step)
    if budget.spent():  # spent before an interruption: the level is over
        local = resumed_step
    else:
        with quiet_renamed_arguments(), _named_if_the_folder_went(run, tidy):
            run.output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        local = trainer.state.global_step
    written = run.groups = recorder.write(run.folder.path)  # every process's groups
    level_spent = budget.spent()
    if one:
        run.saved |= tidy.saved
    else:
        if local < lv.steps and not level_spent:  # stopped early (a callback): the run stops here
            run.offset += local
            return False
        record = level_record(lv, local, run.offset, level_spent, written, recorder.steps)
        record["train_loss"] = run.output.training_loss if run.output is not None else None
        record["pid"] = os.getpid()  # the process that trained it (levels_apart: one per level)
        _record_level(run, i, lv, ckpt_dir, record)
    run.offset += local
    run.budget_spent = level_spent
    return True


@contextlib.contextmanager
def _named_if_the_folder_went(run: Run, tidy: Tidy):
    """A run folder deleted while TRL writes into it surfaces as a raw OSError from deep inside a
    save, as torch.save's RuntimeError ("Parent directory ... does not exist": the optimizer's save,
    when the deletion lands between a checkpoint's folder and its files), or from TensorBoard's
    writer thread (printed as an unhandled thread exception). Name it as the run's loss, with what
    to do (:meth:`RunFolder.check_nothing_lost` raises when files of the run are gone); any other
    error goes through as it is."""
    folder, before = str(run.folder.path), threading.excepthook

    def hook(args):  # TensorBoard's events file vanished with the folder: the main thread names it
        if not (isinstance(args.exc_value, FileNotFoundError) and os.fsdecode(args.exc_value.filename or "").startswith(folder)):
            before(args)

    threading.excepthook = hook
    try:
        yield
    except (OSError, RuntimeError):
        if run.is_main:
            run.folder.check_nothing_lost(run.saved | tidy.saved)
        raise
    finally:
        threading.excepthook = before


def _trainer(run: Run, i: int, lv: eprli.Level, ckpt_dir: Path, recorder: Recorder,
             budget: Budget) -> tuple[Trainer, Tidy]:
    """TRL's trainer of level ``i``, on the level's prompts, with the run's callbacks (rows,
    budget, checkpoint tidying, progress bar); the LoRA adapter fresh, or the previous level's.
    Writes the effective GRPOConfig and LoRA config (``trl_config.json``)."""
    cfg, one = run.cfg, not run.is_eprli
    level_rows = run.rows if one else run.rows[run.rows["level"] == lv.name]
    if len(level_rows) < lv.prompts_per_step:
        raise ValueError(f"eprli level {lv.name!r}: {len(level_rows)} prompts, fewer than its buffer_size "
                         f"= {lv.prompts_per_step}")
    model, tokenizer, dataset = _level_data(cfg, lv, level_rows)
    tidy = Tidy(ckpt_dir)
    callbacks = [recorder, budget, tidy] + (
        [Progress(layout.run_id(run.arm, run.seed) + ("" if one else f" {lv.name}"))] if run.progress else [])
    peft_config = lora_config(cfg)
    set_seed(run.seed)  # PEFT draws the LoRA init before TRL seeds anything
    if run.adapter is not None:  # the adapter carries on from the level before
        model = peft.PeftModel.from_pretrained(model, str(run.adapter), is_trainable=True)
        peft_config = None
    with quiet_renamed_arguments():
        args = GRPOConfig(**grpo_kwargs(cfg, run.seed, ckpt_dir, run.n_processes, lv))
        trainer = Trainer(
            model=model, reward_funcs=recorder.correct, args=args, train_dataset=dataset,
            processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks,
            recorder=recorder, run_dir=run.folder.path, dynamic_rounds=lv.dynamic_rounds,
            merge_for_generation=cfg.train.merge_lora_for_generation, online=online.for_run(run.cfg.train, run.seed, level_rows, run.cfg.probe.k),
        )
    trainer.remove_callback(PrinterCallback)  # it prints every log dict
    for cb in trainer.callback_handler.callbacks:  # TensorBoard's event files: in the run's folder, one per level
        if isinstance(cb, TensorBoardCallback):
            cb.logging_dir = str(run.folder.tensorboard / ("" if one else f"{i + 1}-{lv.name}"))
    if run.is_main and (one or i == 0):
        peft_dict = {k: sorted(v) if isinstance(v, set) else v for k, v in lora_config(cfg).to_dict().items()}
        run.folder.write_trl_config({"grpo": args.to_dict(), "peft": peft_dict})
    if run.is_main and not one:
        run.folder.write_trl_config({"grpo": args.to_dict()}, level=run.folder.level_dir(i, lv.name))
    return trainer, tidy


def _level_data(cfg: Config, lv: eprli.Level, level_rows: pd.DataFrame):
    """The model, its tokenizer and the level's prompts as a dataset; a prompt that cannot fit
    (too long, or no room for ``max_completion_length``) is an error before training starts."""
    model, tokenizer = resolve.load_model(cfg)
    if tokenizer.chat_template is None:
        raise ValueError(f"{resolve.model_path(cfg)[0]}: the tokenizer has no chat template; prompts are chat messages")
    tokenizer.padding_side = "left"
    check_prompt_lengths(level_rows, tokenizer, cfg.train.max_prompt_length, cfg.model.chat_template_kwargs)
    context, context_name = training_context(cfg, model)
    check_fit(tokenizer, list(level_rows["id"]), list(level_rows["prompt"]), lv.max_completion_length,
              context, cfg.model.chat_template_kwargs, "train", "max_completion_length", context_name)
    return model, tokenizer, Dataset.from_list(level_rows[["prompt", "answer", "id", "tier"]].to_dict("records"))


def training_context(cfg: Config, model) -> tuple[int | None, str]:
    """The positions a training prompt and its completion must fit, and what sets them: with vLLM
    generating, ``train.trl.vllm_max_model_length`` when set (the engine refuses a longer
    sequence, whatever the model's own positions), else the model's context."""
    limit = cfg.train.trl.get("vllm_max_model_length") if cfg.train.use_vllm else None
    if limit is not None:
        return int(limit), "train.trl.vllm_max_model_length"
    return context_length(model), "the model's context"


def level_record(lv: eprli.Level, local: int, offset: int, spent: bool, groups: list[dict], steps: list[dict]) -> dict:
    """What an EPRLI level did (``level.json``, and the manifest's ``levels``): its steps in the
    run, whether its budget was spent, and its generated groups and logged steps summarised."""
    level_groups = pd.DataFrame([g for g in groups if g["level"] == lv.name])
    level_steps = pd.DataFrame([r for r in steps if r.get("level") == lv.name])
    return {
        "level": lv.name, "local_steps": local, "steps_done": local, "first_step": offset + 1,
        "last_step": offset + local, "budget_spent": spent,
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


def _record_level(run: Run, i: int, lv: eprli.Level, ckpt_dir: Path, record: dict) -> None:
    """A finished EPRLI level: its adapters renumbered into the run's checkpoints, its record
    written; the next level carries on from its last adapter."""
    if run.is_main:
        eprli.copy_adapters(ckpt_dir, run.folder.checkpoints, run.offset)
        run.folder.write_level_record(i, lv.name, record)
    run.level_records.append(record)
    run.adapter = layout.list_checkpoints(ckpt_dir)[record["local_steps"]]


def finish(run: Run) -> None:
    """Record the run: "complete" (every step done, or its completion budget spent; an EPRLI run:
    every level), else "stopped"; the digests of its files, its timings and completions. A run
    that lost files while it trained is set aside and refused (:meth:`RunFolder.check_nothing_lost`)."""
    if run.recorder is None:  # every level was finished before an interruption
        steps, groups = run.folder.previous_rows(run.offset) if run.is_main else ([], [])
        run.recorder = Recorder(run.task, run.levels[-1].group_size, steps, groups)
    step_times = pd.DataFrame(run.recorder.steps).get("step_time", pd.Series(dtype=float))
    if run.is_eprli:
        finished = len(run.level_records) == len(run.levels)
    else:
        finished = run.offset >= run.max_steps or run.budget_spent
    if run.is_main:
        save_steps = run.cfg.train.save_steps
        every = set() if run.is_eprli else set(range(save_steps, run.offset + 1, save_steps))
        run.folder.check_nothing_lost(run.saved | every)
    run.write_manifest("complete" if finished else "stopped", run.offset, {  # every process: a collective below
        "sha256": run.folder.digests(),
        "seconds_this_session": round(time.perf_counter() - run.t0, 1),
        "mean_step_seconds": round(float(step_times.mean()), 3) if len(step_times) else None,
        # GPU memory at its peak over the run's logged steps and the rest of this session (None: CPU)
        "peak_memory": devices.max_memory(run.recorder.steps + [devices.peak_memory()]),
        "train_loss": run.output.training_loss if run.output is not None
        else run.level_records[-1].get("train_loss") if run.level_records else None,
        "completions_generated": devices.sum_over_processes([run.recorder.completions_generated()])[0],  # main: earlier sessions' too
        "budget_spent": finished and run.offset < run.max_steps,
        **({"ledger": _ledger(run)} if run.is_main else {}),
    })


def _ledger(run: Run) -> dict:
    """The run's compute ledger (:mod:`diffgrpo.train.ledger`): this session's seconds added to
    the earlier sessions'. CPU: this (main) process's; GPU: wall x processes on a cuda device."""
    wall = time.perf_counter() - run.t0
    now = {"cpu": time.process_time() - run.cpu0, "wall": wall,
           "gpu": wall * run.n_processes if run.cfg.model.device == "cuda" else 0.0}
    seconds = {k: run.earlier_seconds.get(k, 0.0) + v for k, v in now.items()}
    return ledger.ledger(run.cfg, run.arm, run.groups if run.groups is not None else run.recorder.groups, seconds)
