"""Run a study's notebook executions: each a job with the jobs it waits for.

A study is a small graph of papermill executions (:func:`diffgrpo.study.graph.jobs`): the probe,
the selection, one ``03_train`` per (arm, seed), the base model's ``04_evaluate``, one
``04_evaluate`` per (arm, seed) once that run has trained, and the analysis at the end. An
:class:`Executor` runs such a list; it is the one interface between the study and where the
notebooks execute. :class:`LocalExecutor` runs ``workers`` of them at a time on this machine,
each in its own process (``python -m diffgrpo.study.notebooks``, the command :meth:`NotebookJob.argv`
gives), so a job can be stopped, and dies with the study, ``kill -9`` included (the job
process asks Linux for ``PR_SET_PDEATHSIG``; its Jupyter kernel follows it through its parent
poller). The local executor owns every process its jobs start, whatever their parent: each
carries the run's mark (:data:`diffgrpo.processes.OWNER_ENV`), and what is still running when
its job has ended, or when the run ends, is killed (docs/reliability.md, "Owned processes").
A cluster executor would submit the same commands to its queue, in an order that
respects ``after``; nothing in the stages changes.

Among the jobs ready to start, an earlier stage goes first (the probe before any training,
every training before any evaluation), then within a stage the highest
:attr:`NotebookJob.priority`, then the list's order. The study gives each training its expected cost, so the
longest runs start first and the short ones (and the evaluations) fill the cores at the end,
instead of one long run training alone while the other core idles.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


from diffgrpo import processes, progress
from diffgrpo.registry import Registry
from diffgrpo.study.notebooks import DIE_WITH_ENV, STAGES, StageFailed


@dataclass(frozen=True)
class NotebookJob:
    """One papermill execution of a stage notebook into ``out_path``, after the jobs named in ``after``."""

    name: str
    stage: str
    out_path: Path
    parameters: dict = field(hash=False)
    after: tuple[str, ...] = ()
    #: a number read when the job is ready to start (its inputs exist by then): higher starts first
    priority: Callable[[], float] | None = field(default=None, hash=False, compare=False, repr=False)
    #: GPUs the job takes when it is of a stage that runs the model (:data:`GPU_STAGES`): a
    #: training run that spans several (``train.num_processes``) takes as many
    gpus: int = 1

    def rank(self) -> float:
        return self.priority() if self.priority is not None else 0.0

    def argv(self, kernel: str | None) -> list[str]:
        """The command that runs this job alone (what a cluster executor would submit)."""
        cmd = [sys.executable, "-m", "diffgrpo.study.notebooks", self.stage, str(self.out_path),
               "--parameters", json.dumps(self.parameters)]
        return cmd + (["--kernel", kernel] if kernel else [])

    @property
    def log_path(self) -> Path:
        return self.out_path.with_suffix(".log")


class Executor(Protocol):
    def run(self, jobs: Sequence[NotebookJob],
            on_done: Callable[[str, float, float | None], None] | None = None) -> dict[str, float]:
        """Run every job once all of its ``after`` jobs have succeeded; return seconds per job
        (``on_done(name, seconds, cpu_seconds)`` is called as each one succeeds, when given;
        ``cpu_seconds`` is None where the executor cannot count them).
        A failed job raises :class:`StageFailed` naming it (after the jobs already running end);
        jobs that depend on it do not start."""
        ...


#: where a study's notebooks run, by name (``python -m diffgrpo.study --executor <name>``): each
#: entry makes its executor, ``make(studies, place, kernel=..., detach=...)``, from the studies
#: ([(Config, notebook parameters)]) and ``place(job)`` (a job's cluster placement); ``slurm``'s
#: module (:mod:`diffgrpo.study.slurm`) is imported when it is asked for
EXECUTORS: Registry[Callable[..., Executor]] = Registry(
    "executor", ValueError, {"local": __name__, "slurm": "diffgrpo.study.slurm"},
    hint="an executor is a function registered with diffgrpo.study.executors.EXECUTORS.register(name)")


def check_graph(jobs: Sequence[NotebookJob]) -> None:
    """Unique names, known dependencies, no cycle."""
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate job names: {sorted({n for n in names if names.count(n) > 1})}")
    known = set(names)
    for j in jobs:
        missing = [a for a in j.after if a not in known]
        if missing:
            raise ValueError(f"job {j.name!r} waits for unknown job(s) {missing}")
    done: set[str] = set()
    pending = list(jobs)
    while pending:
        ready = [j for j in pending if set(j.after) <= done]
        if not ready:
            raise ValueError(f"jobs wait for each other in a cycle: {[j.name for j in pending]}")
        done |= {j.name for j in ready}
        pending = [j for j in pending if j.name not in done]


@dataclass
class LocalExecutor:
    """``workers`` notebook executions at a time on this machine: of the jobs ready to start,
    the earliest stage first, then the highest :meth:`NotebookJob.rank`, then the list's order. Each job writes its
    output beside its notebook (``<name>.log``).

    ``gpus``: the GPU ids this machine lends to the study (on a node with several GPUs). A job
    of a stage that runs the model (:data:`GPU_STAGES`) then starts only when its
    :attr:`NotebookJob.gpus` of them are free and sees only those (``CUDA_VISIBLE_DEVICES``), so
    ``workers`` jobs run at once each on its own GPU(s) rather than all on ``cuda:0``; the others
    see none."""

    workers: int = 1
    kernel: str | None = None
    progress: bool = True
    poll_s: float = 0.05  # a finished job's core waits at most this long for the next job
    gpus: tuple[str, ...] = ()
    #: environment the jobs and their kernels start with, unless this process's
    #: own sets the same names (:data:`CPU_ALLOCATOR`, for a study whose model runs on the CPU)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def how(self) -> str:
        """How the jobs run, as the study's progress line says it."""
        return f"{self.workers} at a time"

    def run(self, jobs: Sequence[NotebookJob],
            on_done: Callable[[str, float, float | None], None] | None = None) -> dict[str, float]:
        """:meth:`Executor.run`; a job's CPU seconds (user + system) include its kernel's."""
        check_graph(jobs)
        pending = list(jobs)
        running: dict[str, tuple[subprocess.Popen, float, object]] = {}
        done: set[str] = set()
        seconds: dict[str, float] = {}
        failed: list[tuple[NotebookJob, str]] = []
        by_name = {j.name: j for j in jobs}
        bar = progress.bar(len(jobs), f"notebooks ({self.workers} at a time)", unit="nb", disable=not self.progress)
        shown = ""  # the running jobs the bar names, redrawn only when they change
        greedy = [j for j in jobs if self.gpus and j.stage in GPU_STAGES and j.gpus > len(self.gpus)]
        if greedy:
            raise ValueError(f"job {greedy[0].name!r} needs {greedy[0].gpus} GPU(s), but only {list(self.gpus)} are lent "
                             "to the study: lower train.num_processes, or lend it more GPUs (CUDA_VISIBLE_DEVICES)")
        free = list(self.gpus)
        held: dict[str, list[str]] = {}  # job name -> the GPU ids it was given
        # every process this run starts, and every one they start, carries <mark>/<job>: what
        # outlives its job, or the run, is found by it and killed
        mark = f"{os.getpid()}.{secrets.token_hex(4)}"
        owned = {j.name: f"{mark}/{n}" for n, j in enumerate(jobs)}
        try:
            while pending or running:
                while not failed and len(running) < self.workers:
                    candidates = [j for j in pending if set(j.after) <= done
                                  and (not self.gpus or j.stage not in GPU_STAGES or len(free) >= j.gpus)]
                    if not candidates:
                        break
                    ready = min(candidates, key=lambda j: (_stage_order(j.stage), -j.rank(), pending.index(j)))
                    pending.remove(ready)
                    ready.out_path.parent.mkdir(parents=True, exist_ok=True)
                    if self.gpus:  # its own GPU(s), or none for a stage that does not run the model
                        held[ready.name] = [free.pop(0) for _ in range(ready.gpus)] \
                            if ready.stage in GPU_STAGES else []
                    env = self._job_env(owned[ready.name], held.get(ready.name))
                    log = open(ready.log_path, "w")
                    proc = subprocess.Popen(ready.argv(self.kernel), stdout=log, stderr=subprocess.STDOUT, env=env)
                    running[ready.name] = (proc, time.perf_counter(), log)
                if not running:
                    break  # a job failed: nothing more starts
                time.sleep(self.poll_s)
                for name, (proc, t0, log) in list(running.items()):
                    cpu = _reap(proc)
                    if cpu is None:
                        continue
                    processes.end(processes.marked(processes.OWNER_ENV, owned[name]))  # what its kernel left
                    log.close()
                    del running[name]
                    free.extend(held.pop(name, []))
                    if proc.returncode == 0:
                        done.add(name)
                        seconds[name] = round(time.perf_counter() - t0, 1)
                        bar.update()
                        if on_done is not None:
                            on_done(name, seconds[name], round(cpu, 1))
                    else:
                        failed.append((by_name[name], _error_of(by_name[name])))
                if ", ".join(running) != shown:
                    shown = ", ".join(running)
                    bar.set_postfix_str(shown)
        except BaseException:
            _stop([p for p, _, _ in running.values()])
            raise
        finally:
            bar.close()
            processes.end(processes.marked(processes.OWNER_ENV, mark))  # nothing of the run outlives it
        if failed:
            job, why = failed[0]
            skipped = [j.name for j in pending]
            more = f"; not started: {len(skipped)} job(s)" if skipped else ""
            raise StageFailed(f"{job.name}: {why}\n  its output is in {job.log_path}{more}")
        return seconds

    def _job_env(self, owner: str, gpus: list[str] | None) -> dict:
        """The environment a job starts with: this process's, its mark ``owner``, and the GPUs
        it was given (None: every GPU is lent to it)."""
        env = {**self.env, **os.environ, DIE_WITH_ENV: str(os.getpid()), processes.OWNER_ENV: owner}
        if gpus is not None:
            env[VISIBLE_GPUS_ENV] = ",".join(gpus)
        return env


@EXECUTORS.register("local")
def local_executor(studies, place=None, *, kernel: str | None = None, detach: bool = False) -> LocalExecutor:
    """``workers`` notebooks at a time on this machine (the most any of the studies sets), each
    GPU stage on its own GPU(s) where the studies run on cuda."""
    if detach:
        raise ValueError("--detach submits to a cluster: add --executor slurm")
    cuda = any(c.model.device == "cuda" for c, _ in studies)
    return LocalExecutor(workers=max(c.workers for c, _ in studies), kernel=kernel, gpus=visible_gpus() if cuda else (),
                         env={} if cuda else dict(CPU_ALLOCATOR))


#: glibc's allocator for a CPU study's processes: no ``mmap`` per large tensor and no heap trimmed
#: back to the system, so a training step's activations (tens of MB, freed and allocated again
#: every step) reuse pages instead of faulting fresh zeroed ones in. The arithmetic, and so every
#: number, is the same. Measured: a training step of the default study 1.075-1.087 s -> 1.050 s,
#: system CPU time of 12 steps 1.55 s -> 0.80 s (docs/benchmarks.md). Not for a GPU study: a
#: process that loaded a model's weights on the CPU before moving them to the card would keep
#: that memory.
CPU_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(4 << 30),
                 "MALLOC_TOP_PAD_": str(256 << 20)}


#: the stages that load the model (the select and analyze stages never do)
GPU_STAGES = ("01_probe", "03_train", "04_evaluate")
VISIBLE_GPUS_ENV = "CUDA_VISIBLE_DEVICES"


def visible_gpus() -> tuple[str, ...]:
    """The GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else every GPU
    torch sees (none on a CPU machine)."""
    listed = os.environ.get(VISIBLE_GPUS_ENV)
    if listed is not None:
        return tuple(g.strip() for g in listed.split(",") if g.strip())
    import torch  # only for a cuda study: the runner does not load torch otherwise

    return tuple(str(i) for i in range(torch.cuda.device_count()))


def _stage_order(stage: str) -> int:
    return STAGES.index(stage) if stage in STAGES else len(STAGES)


def _reap(proc: subprocess.Popen) -> float | None:
    """None while ``proc`` runs; once it has ended, its CPU seconds (user + system, with those of
    the children it waited for: the notebook's kernel), and ``proc.returncode`` is set."""
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def _error_of(job: NotebookJob) -> str:
    """The error the job printed last (a line that starts ``error: <stage>: ...``, see
    :func:`notebooks.main`), whole: an ``error: `` inside the message (a quoted log) is part of it."""
    text = job.log_path.read_text(errors="replace") if job.log_path.exists() else ""
    lines = text.splitlines()
    starts = [n for n, ln in enumerate(lines) if ln.startswith("error: ")]
    if not starts:
        lines = [ln for ln in lines if ln.strip()]
        return lines[-1].strip() if lines else "failed with no output"
    why = "\n".join(lines[starts[-1]:]).removeprefix("error: ").strip()
    return why[len(job.stage) + 2:] if why.startswith(f"{job.stage}: ") else why


def _stop(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """Interrupt running jobs (their notebooks are kept as ``.failed.ipynb``), then kill what remains."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.time() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
