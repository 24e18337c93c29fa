"""Stage 3: train one (arm, seed) run, GRPO with LoRA on its selection, through TRL's
GRPOTrainer and PEFT; resume it where it stopped, skip it when finished.

    train_run(cfg, "hard", seed=0)  ->  outputs/<study>/runs/hard-seed0/

One update = ``prompts_per_step`` prompts x ``group_size`` completions, sampled fresh from the
current policy; with ``num_iterations`` = mu > 1 one generated batch feeds mu updates. Files
in the run folder: ``params.yaml``, ``trl_config.json``, ``manifest.json`` (model, task,
selection, reward, steps done, checkpoints, versions, status), ``steps.parquet`` (TRL's logged
metrics), ``groups.parquet`` (every generated group, :mod:`.records`) and
``checkpoints/checkpoint-<step>/`` (the adapter every ``save_steps`` and at the end; only the
newest keeps its optimizer state). Prompts are reshuffled every epoch as a function of (seed,
epoch), so a resumed run sees the prompts an uninterrupted one does.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

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

from diffgrpo.store import artifacts, layout, run_folder
from diffgrpo.models import resolve, devices
from diffgrpo import params, rewards, select
from diffgrpo.train import levels as eprli
from diffgrpo.models.generation import check_fit, context_length, encode_prompt
from diffgrpo.models.loading import quiet_renamed_arguments
from diffgrpo.params import Config
from diffgrpo.train.config import grpo_kwargs, lora_config
from diffgrpo.train.records import Progress, Recorder, Tidy
from diffgrpo.train.trainer import Budget, Trainer



def selected_rows(cfg: Config, arm: str, seed: int = 0) -> pd.DataFrame:
    """The selection's prompts (id, prompt, answer, tier, p_hat; an EPRLI arm's also
    level), in the selection's order (a per-seed policy's: the one drawn for training seed ``seed``)."""
    path = select.selection_path(cfg, arm, seed)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no selection {arm!r}; run the select stage first")
    selection = artifacts.read_parquet(path, "02_select")
    ids = selection["id"].astype(str)
    pool = resolve.load_pool(cfg).set_index("id")
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


def train_run(cfg: Config, arm: str, seed: int, *, progress: bool = True, force: bool = False) -> Path:
    """Train one (arm, seed) run (``arm``: the arm's name); resume it if interrupted, skip it
    if finished. Returns its folder. One writer at a time: a second process training the same
    run is refused. The arm's own training settings apply (:meth:`Config.for_arm`)."""
    launched = cfg.for_arm(arm).train.num_processes
    if devices.num_processes() == 1 and launched > 1:  # the study's 03_train job: start the processes
        return launch_run(cfg, arm, seed, launched, force=force)
    cfg = cfg.for_arm(arm)
    run_dir = layout.run_dir(cfg, arm, seed)
    if devices.num_processes() != launched:
        raise ValueError(f"run {layout.run_id(arm, seed)}: launched with {devices.num_processes()} processes, but "
                         f"train.num_processes = {launched} (it is part of the run's key): set train.num_processes "
                         f"to {devices.num_processes()} (--set train.num_processes={devices.num_processes()}), or let "
                         "the study start the processes")
    if not devices.is_main_process():  # under a launcher the main process holds the lock and writes
        return _train_run(cfg, arm, seed, run_dir, progress=progress, force=force)
    with artifacts.exclusive(run_dir):
        return _train_run(cfg, arm, seed, run_dir, progress=progress, force=force)


def _train_run(cfg: Config, arm: str, seed: int, run_dir: Path, *, progress: bool, force: bool) -> Path:
    ckpt_dir = run_dir / layout.CHECKPOINTS
    rows = selected_rows(cfg, arm, seed)
    arm_cfg = cfg.arm(arm)
    max_steps = cfg.run_steps(arm, len(rows))  # train.max_steps, or train.epochs passes over these rows
    levels = eprli.run_levels(cfg, arm, len(rows))
    reward_key = run_reward_key(arm_cfg, rows, seed)
    key = layout.run_key(cfg, list(rows["id"]), reward_key,
                         [lv.key() for lv in levels] if arm_cfg.select == "levels" else None)
    manifest_path = run_dir / "manifest.json"
    if force and run_dir.exists():
        shutil.rmtree(run_dir)
    manifest, done = run_folder.previous(run_dir, key, max_steps, devices.is_main_process())
    if done:
        return run_dir

    devices.device(cfg.model.device)  # a clear error before anything loads when there is no GPU
    n_processes, is_main = devices.num_processes(), devices.is_main_process()
    eprli.check_levels_fit(levels, cfg, n_processes)
    task = resolve.task_of(cfg)
    study = layout.study_dir(cfg)
    head = {
        "key": key,
        "model": {"name": cfg.model.name, "path": cfg.model.path, "gguf_file": cfg.model.gguf_file},
        "task": task.describe(),
        "strategy": arm,
        "select": arm_cfg.select,
        "curriculum": arm_cfg.curriculum,
        "seed": seed,
        "selection": artifacts.relative(select.selection_path(cfg, arm, seed), study),
        "reward": {"weights": arm_cfg.reward_weights, **(reward_key or {"kind": rewards.VERIFIER})},
        "num_prompts": len(rows),
        "max_steps": max_steps,
        "num_processes": n_processes,
        "versions": _versions(),
    }
    resumed_from = (manifest or {}).get("resumed_from", [])
    level_records: list[dict] = []

    def write_manifest(status: str, steps_done: int, extra: dict | None = None) -> None:
        if not is_main:
            return
        ckpts = [artifacts.relative(p, run_dir) for p in layout.list_checkpoints(ckpt_dir).values()]
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
        lv_ckpt = ckpt_dir if one else artifacts.inside_outputs(run_dir / "levels" / f"{i + 1}-{lv.name}" / layout.CHECKPOINTS,
                                                                 "eprli.levels")
        record_path = lv_ckpt.parent / "level.json"
        if not one and record_path.exists():  # a level an interrupted run finished
            record = artifacts.read_json(record_path, "03_train")  # readable: checked before the first level
            level_records.append(record)
            offset += record["steps_done"]
            previous = layout.list_checkpoints(lv_ckpt)[record["local_steps"]]
            continue
        resumed_step, resume_from = run_folder.resume_point(lv_ckpt, tidy=is_main)
        if one:
            had = set(layout.list_checkpoints(lv_ckpt))  # what this session found: it must still be there at the end
        # every process records the groups it scored; the main process holds the earlier rows
        steps, groups = run_folder.previous_rows(run_dir, offset + resumed_step) if is_main else ([], [])
        before = int(sum(len(g["rewards"]) for g in groups if g["step"] <= offset))
        recorder = Recorder(task, lv.group_size, steps, groups, arm_cfg.reward_weights,
                            (lv.length_weight, lv.max_completion_length, cfg.train.length_reward.cache),
                            step_offset=offset, level=lv.name, seed=seed, rows=rows)
        budget = Budget(recorder, lv.max_completions, before)
        level_rows = rows if one else rows[rows["level"] == lv.name]
        if len(level_rows) < lv.prompts_per_step:
            raise ValueError(f"eprli level {lv.name!r}: {len(level_rows)} prompts, fewer than its buffer_size "
                             f"= {lv.prompts_per_step}")

        model, tokenizer = resolve.load_model(cfg)
        if tokenizer.chat_template is None:
            raise ValueError(f"{resolve.model_path(cfg)[0]}: the tokenizer has no chat template; prompts are chat messages")
        tokenizer.padding_side = "left"
        check_prompt_lengths(level_rows, tokenizer, cfg.train.max_prompt_length, cfg.model.chat_template_kwargs)
        check_fit(tokenizer, list(level_rows["id"]), list(level_rows["prompt"]), lv.max_completion_length,
                  context_length(model), cfg.model.chat_template_kwargs, "train", "max_completion_length")
        dataset = Dataset.from_list(level_rows[["prompt", "answer", "id", "tier"]].to_dict("records"))

        tidy = Tidy(lv_ckpt)
        if one:
            tidies.append(tidy)
        callbacks = [recorder, budget, tidy] + (
            [Progress(layout.run_id(arm, seed) + ("" if one else f" {lv.name}"))] if progress else [])
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
        written = recorder.write(run_dir)  # every process's groups
        level_spent = budget.spent()
        if not one:
            if local < lv.steps and not level_spent:  # stopped early (a callback): the run stops here
                offset += local
                break
            if is_main:
                eprli.copy_adapters(lv_ckpt, ckpt_dir, offset)
            level_groups = pd.DataFrame([g for g in written if g["level"] == lv.name])
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
            previous = layout.list_checkpoints(lv_ckpt)[local]
        offset += local
        budget_spent = level_spent
        del trainer, model

    if recorder is None:  # every level was finished before an interruption
        steps, groups = run_folder.previous_rows(run_dir, offset) if is_main else ([], [])
        recorder = Recorder(task, levels[-1].group_size, steps, groups)
    step_times = pd.DataFrame(recorder.steps).get("step_time", pd.Series(dtype=float))
    finished = offset >= max_steps or budget_spent
    if levels[0].name is not None:
        finished = len(level_records) == len(levels)
    if is_main:
        every = {s for s in range(cfg.train.save_steps, offset + 1, cfg.train.save_steps)} if levels[0].name is None else set()
        run_folder.check_nothing_lost(run_dir, had | every | {s for t in tidies for s in t.saved}, manifest_path)
    write_manifest("complete" if finished else "stopped", offset, {
        "sha256": artifacts.digests(run_dir, [f for f in run_folder.RUN_FILES if (run_dir / f).is_file()] + run_folder.adapter_files(run_dir)
                                    + [artifacts.relative(p, run_dir) for p in sorted(run_dir.glob("levels/*/level.json"))]),
        "seconds_this_session": round(time.perf_counter() - t0, 1),
        "mean_step_seconds": round(float(step_times.mean()), 3) if len(step_times) else None,
        "train_loss": output.training_loss if output is not None else None,
        "completions_generated": devices.sum_over_processes([recorder.completions_generated()])[0],  # main: earlier sessions' too
        "budget_spent": finished and offset < max_steps,
    })
    return run_dir


def launch_command(params_file: Path, arm: str, seed: int, n_processes: int, port: int) -> list[str]:
    """The command that trains one run on ``n_processes`` processes (one GPU each):
    ``accelerate launch`` of :func:`main`, mixed precision left to the params (``train.bf16``)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(n_processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), "-m", "diffgrpo.train", str(params_file),
            "--arm", arm, "--seed", str(seed)]


def launch_run(cfg: Config, arm: str, seed: int, n_processes: int, *, force: bool = False) -> Path:
    """Train one run on ``train.num_processes`` processes: :func:`launch_command` with the
    study's params (written to a temporary file), in the GPUs this process may use
    (``CUDA_VISIBLE_DEVICES``, which the study runner sets per job); its output is printed
    after it ends. Returns the run's folder, as :func:`train_run` does."""
    import subprocess
    import tempfile

    run_dir = layout.run_dir(cfg.for_arm(arm), arm, seed)
    if force and run_dir.exists():
        with artifacts.exclusive(run_dir):
            shutil.rmtree(run_dir)
    port = devices.free_port()  # several launched runs may share a node
    with tempfile.TemporaryDirectory(prefix="diffgrpo-launch-") as tmp:
        params_file = Path(tmp) / "params.yaml"
        params_file.write_text(params.dump(cfg))
        cmd = launch_command(params_file, arm, seed, n_processes, port)
        done = subprocess.run(cmd, capture_output=True, text=True)
    print(done.stdout, end="")
    print(done.stderr, end="", file=sys.stderr)
    if done.returncode != 0:
        errors = [ln for ln in done.stderr.splitlines() if "Error" in ln or "error:" in ln]
        raise RuntimeError(f"run {layout.run_id(arm, seed)} on {n_processes} processes failed (exit "
                           f"{done.returncode}): {errors[-1].strip() if errors else 'see its output above'}\n"
                           f"  command: {' '.join(cmd)}")
    return run_dir


def train_runs(cfg: Config, progress: bool = True, arm: str | None = None, seed: int | None = None) -> dict[str, Path]:
    """Every (arm, seed) run of the study (or those of ``arm`` and/or ``seed``), one after the
    other in this process (the study runner trains ``workers`` runs at once, one notebook
    each: diffgrpo.study.executors); run id -> folder."""
    planned = layout.planned_runs(cfg, arm, seed)
    return {layout.run_id(s, sd): train_run(cfg, s, sd, progress=progress) for s, sd in planned}


def main(argv: list[str] | None = None) -> int:
    """One run from the command line; on several GPUs (what ``train.num_processes: 4`` starts by
    itself, :func:`launch_run`):

        accelerate launch --multi_gpu --num_processes 4 -m diffgrpo.train paper003_gsm8k_qwen3_4b --arm hard --seed 0 \
            --set train.num_processes=4

    Each process trains on its share of every update (diffgrpo.models.devices.batching); the main
    process writes the run's files. The study's 03_train stage then finds the run finished
    (with the same train.num_processes: it is part of the run's key)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m diffgrpo.train", description=main.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", help="a file in params/ (name or path)")
    ap.add_argument("--arm", required=True, help="an arm of the params file's `arms`")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a parameter, e.g. train.max_steps=20 (repeatable)")
    ap.add_argument("--force", action="store_true", help="start the run over")
    args = ap.parse_args(argv)
    if args.force and devices.num_processes() > 1:
        raise SystemExit("--force with several processes would race to delete the run: start it over "
                         "with one process first, or remove the run folder")
    cfg = params.load(args.params_file, overrides=params.parse_overrides(args.overrides))
    run_dir = train_run(cfg, args.arm, args.seed, progress=devices.is_main_process(), force=args.force)
    if devices.is_main_process():
        print(f"run: {run_dir}")
    return 0


