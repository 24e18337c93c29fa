"""How one (arm, seed) run is launched: :func:`resolve` reads the params once into a
:class:`RunSpec` (the arm's config, seed, folder, selection, levels, processes, whether levels
run apart), and :func:`launch` starts it one of three ways (:attr:`RunSpec.launch`):

- ``in_process``: this process trains it (:func:`diffgrpo.train.run.train_here`), holding the
  run's lock; also what every process started by one of the other two ways does;
- ``levels_apart``: a levels run (paper 002's EPRLI, :func:`diffgrpo.train.levels.is_levels_run`)
  with vLLM generating: each unfinished level in a process of its own (``python -m diffgrpo.train
  ... --level i``, or its ``accelerate launch``); this process holds the lock, reads each
  level's record and writes the run's manifest;
- ``accelerate``: ``accelerate launch --num_processes N`` of ``python -m diffgrpo.train``, whose
  processes train the run in process (the main one holding the lock).

A started process runs :func:`main`, which resolves its own spec: its ``--level`` or its
launcher's process count makes that ``in_process``, so nothing launches a run from inside its
own launch.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

from diffgrpo import errors, params, select
from diffgrpo.models import devices
from diffgrpo.params import Config, budgets
from diffgrpo.store import artifacts, layout
from diffgrpo.train import levels as eprli
from diffgrpo.train import derived
from diffgrpo.train import run as training

IN_PROCESS, LEVELS_APART, ACCELERATE = "in_process", "levels_apart", "accelerate"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One (arm, seed) run as it will be launched, resolved once (:func:`resolve`); what
    :mod:`diffgrpo.train.run` trains (its selection, levels, folder, the level a started process
    trains alone) is read from here, not worked out again."""

    cfg: Config  # the study's (a started process rereads it from a params file)
    arm: str
    seed: int
    folder: Path  # outputs/<study>/runs/<arm>-seed<seed>/
    selection: Path  # the selection it trains on (select.selection_path)
    levels: tuple[str | None, ...]  # the levels' names in order; (None,): a one-level run
    num_processes: int  # train.num_processes (in the run's key)
    apart: bool  # each level in a process of its own (a levels run only)
    processes_here: int = 1  # this process's launcher's processes (devices.num_processes)
    level: int | None = None  # this process trains that level alone; its parent holds the lock

    @property
    def arm_cfg(self) -> Config:
        return self.cfg.for_arm(self.arm)

    @property
    def is_levels_run(self) -> bool:
        return self.levels != (None,)

    @property
    def launch(self) -> str:
        """``in_process``, ``levels_apart`` or ``accelerate`` (the module's docstring)."""
        if self.level is not None or self.processes_here > 1:  # started by a launch: train here
            return IN_PROCESS
        if self.apart:
            return LEVELS_APART
        return ACCELERATE if self.num_processes > 1 else IN_PROCESS


def levels_apart(cfg: Config, arm: str) -> bool:
    """Whether an arm's runs train each level in a process of its own: a levels run whose
    training generates with vLLM (``train.use_vllm``). A level's trainer starts a colocated vLLM
    engine, and a second engine beside the first (which sleeps in vLLM's allocator) is what
    freeing an engine in-process cannot be trusted to survive; a process of its own frees the
    card by exiting. The HF path keeps one process: nothing outlives a level there, and a level's
    start costs a model load. A one-level run (``eprli_grpo``, ``eprli_dynamic``) has one engine
    and trains in process, vLLM or not."""
    return eprli.is_levels_run(cfg, arm) and cfg.for_arm(arm).train.use_vllm


def resolve(cfg: Config, arm: str, seed: int, *, apart: bool | None = None, level: int | None = None,
            processes_here: int | None = None) -> RunSpec:
    """The run's :class:`RunSpec`. ``apart``: None for :func:`levels_apart`; True or False to
    choose (a one-level run is never apart). ``level``: this process trains that level alone
    (the ``--level`` of a levels-apart run's process). ``processes_here``: default
    :func:`devices.num_processes` (more than one: under a launcher)."""
    levelled = eprli.is_levels_run(cfg, arm)
    arm_cfg = cfg.for_arm(arm)
    return RunSpec(
        cfg=cfg, arm=arm, seed=seed, folder=layout.run_dir(arm_cfg, arm, seed),
        selection=select.selection_path(cfg, arm, seed),
        levels=tuple(lv.name for lv in cfg.eprli.levels) if levelled else (None,),
        num_processes=arm_cfg.train.num_processes,
        apart=levelled and (levels_apart(cfg, arm) if apart is None else apart),
        processes_here=devices.num_processes() if processes_here is None else processes_here, level=level)


def launch(spec: RunSpec, *, progress: bool = True, force: bool = False) -> Path:
    """Train the run the way :attr:`RunSpec.launch` says; returns its folder."""
    how = spec.launch
    if how == LEVELS_APART:
        with artifacts.exclusive(spec.folder):
            return _levels_apart(spec, progress=progress, force=force)
    if how == ACCELERATE:
        return _accelerate(spec, force=force)
    return _in_process(spec, progress=progress, force=force)


def train_run(cfg: Config, arm: str, seed: int, *, progress: bool = True, force: bool = False,
              apart: bool | None = None) -> Path:
    """Train one (arm, seed) run (``arm``: the arm's name); resume it if interrupted, skip it
    if finished. Returns its folder. One writer at a time: a second process training the same
    run is refused. The arm's own training settings apply (:meth:`Config.for_arm`); how it is
    launched: :func:`resolve` (``apart``: there).

    Budgets as checkpoints (``train.budgets_as_checkpoints``,
    :func:`diffgrpo.params.budgets.checkpoint_of`): the run of the trajectory's largest budget
    trains (or is found finished), and the run of every smaller budget of it is written from its
    checkpoints (:func:`diffgrpo.train.derived.derive`), ``arm``'s among them; ``force`` starts
    ``arm``'s own run over (a smaller budget's: it is derived again)."""
    of = budgets.checkpoint_of(cfg)
    head = of.get(arm, arm)
    folder = launch(resolve(cfg, head, seed, apart=apart), progress=progress, force=force and head == arm)
    for child in [a for a, p in of.items() if p == head]:
        spec = resolve(cfg, child, seed)
        if force and child == arm and spec.folder.exists():
            with artifacts.exclusive(spec.folder):
                shutil.rmtree(spec.folder)
        try:
            derived.derive(spec, resolve(cfg, head, seed))
        except derived.NotDerivable as why:
            print(f"{why}: training {layout.run_id(child, seed)} on its own", flush=True)
            launch(spec, progress=progress)
    return folder if head == arm else resolve(cfg, arm, seed).folder


def train_runs(cfg: Config, progress: bool = True, arm: str | None = None, seed: int | None = None) -> dict[str, Path]:
    """Every (arm, seed) run of the study (or those of ``arm`` and/or ``seed``), one after the
    other in this process (the study runner trains ``workers`` runs at once, one notebook
    each: diffgrpo.study.executors); run id -> folder."""
    planned = layout.planned_runs(cfg, arm, seed)
    return {layout.run_id(s, sd): train_run(cfg, s, sd, progress=progress) for s, sd in planned}


def _in_process(spec: RunSpec, *, progress: bool, force: bool) -> Path:
    """This process trains the run (alone, or as one of a launcher's processes)."""
    if spec.processes_here != spec.num_processes:
        n = spec.processes_here
        raise ValueError(f"run {layout.run_id(spec.arm, spec.seed)}: launched with {n} processes, but "
                         f"train.num_processes = {spec.num_processes} (it is part of the run's key): set "
                         f"train.num_processes to {n} (--set train.num_processes={n}), or let the study start "
                         "the processes")
    if spec.level is not None or not devices.is_main_process():  # a level's process, or under a launcher:
        return training.train_here(spec, progress=progress, force=force)  # the parent, or main, holds the lock
    with artifacts.exclusive(spec.folder):
        return training.train_here(spec, progress=progress, force=force)


def _levels_apart(spec: RunSpec, *, progress: bool, force: bool) -> Path:
    """:func:`diffgrpo.train.run.train_here` with each unfinished level trained by a process of
    its own (:func:`level_command`); this one reads what each wrote (its ``level.json``, the
    manifest's resumes) and writes the run's manifest. A level that stopped early (no record)
    stops the run."""
    run = training.prepare(spec, progress=progress, force=force)
    if run is None:
        return spec.folder
    with tempfile.TemporaryDirectory(prefix="diffgrpo-level-") as tmp:
        params_file = Path(tmp) / layout.PARAMS
        params_file.write_text(params.dump(spec.cfg))
        for i, lv in enumerate(run.levels):
            if run.folder.read_level_record(i, lv.name) is None:
                stream_command(level_command(spec, params_file, i, progress),
                               f"run {layout.run_id(spec.arm, spec.seed)} level {i + 1} ({lv.name})")
                manifest = artifacts.read_manifest(run.folder.manifest_path, "03_train") or {}
                run.resumed_from = manifest.get("resumed_from", run.resumed_from)
                if run.folder.read_level_record(i, lv.name) is None:  # stopped early: the run stops here
                    run.offset = manifest.get("steps_done", run.offset)
                    break
            training.train_level(run, i, lv)  # a finished level: its record, steps and adapter
    training.finish(run)
    return spec.folder


def _accelerate(spec: RunSpec, *, force: bool = False) -> Path:
    """Train one run on ``train.num_processes`` processes: :func:`launch_command` with the
    study's params (written to a temporary file), in the GPUs this process may use
    (``CUDA_VISIBLE_DEVICES``, which the study runner sets per job); its output is printed
    as it comes (:func:`stream_command`)."""
    if force and spec.folder.exists():
        with artifacts.exclusive(spec.folder):
            shutil.rmtree(spec.folder)
    port = devices.free_port()  # several launched runs may share a node
    with tempfile.TemporaryDirectory(prefix="diffgrpo-launch-") as tmp:
        params_file = Path(tmp) / layout.PARAMS
        params_file.write_text(params.dump(spec.cfg))
        stream_command(launch_command(params_file, spec.arm, spec.seed, spec.num_processes, port),
                       f"run {layout.run_id(spec.arm, spec.seed)} on {spec.num_processes} processes")
    return spec.folder


def level_command(spec: RunSpec, params_file: Path, level: int, progress: bool) -> list[str]:
    """The command that trains level ``level`` (counting from 0) of a levels run: ``python -m
    diffgrpo.train ... --level`` on one process, its ``accelerate launch`` on several."""
    tail = ["--level", str(level)] + ([] if progress else ["--no-progress"])
    if spec.num_processes > 1:
        return launch_command(params_file, spec.arm, spec.seed, spec.num_processes, devices.free_port()) + tail
    return [sys.executable, "-m", "diffgrpo.train", str(params_file), "--arm", spec.arm, "--seed", str(spec.seed)] + tail


def launch_command(params_file: Path, arm: str, seed: int, n_processes: int, port: int) -> list[str]:
    """The command that trains one run on ``n_processes`` processes (one GPU each):
    ``accelerate launch`` of :func:`main`, mixed precision left to the params (``train.bf16``)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(n_processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), "-m", "diffgrpo.train", str(params_file),
            "--arm", arm, "--seed", str(seed)]


def stream_command(cmd: list[str], what: str) -> None:
    """Run ``cmd``, printing its output (stdout and stderr together) line by line as it comes, so
    that a run of hours shows its progress in the notebook; an error names its last error line."""
    import collections
    import subprocess

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    tail: collections.deque[str] = collections.deque(maxlen=200)
    for line in proc.stdout:
        print(line, end="", flush=True)
        tail.append(line)
    if proc.wait() != 0:
        errors = [ln for ln in tail if "Error" in ln or "error:" in ln]
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): "
                           f"{errors[-1].strip() if errors else 'see its output above'}\n  command: {' '.join(cmd)}")


def main(argv: list[str] | None = None) -> int:
    """One run from the command line; on several GPUs (what ``train.num_processes: 4`` starts by
    itself, :func:`launch`):

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
    ap.add_argument("--level", type=int, default=None, help=argparse.SUPPRESS)  # one level (a levels-apart run's)
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.force and devices.num_processes() > 1:
        raise SystemExit("--force with several processes would race to delete the run: start it over "
                         "with one process first, or remove the run folder")
    cfg = params.load(args.params_file, overrides=params.parse_overrides(args.overrides))
    spec = resolve(cfg, args.arm, args.seed, level=args.level)
    run_dir = launch(spec, progress=devices.is_main_process() and not args.no_progress, force=args.force)
    if devices.is_main_process():
        print(f"run: {run_dir}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` for a terminal (``python -m diffgrpo.train``): a busy run, a full disk, a
    read-only outputs folder, a refused params value or reward, a run before its selection is one
    line ``error: ...`` that says what to do, not a traceback (:mod:`diffgrpo.errors`)."""
    return errors.run(lambda: main(argv), stopped="stopped; rerun the same command to resume from its last checkpoint")
