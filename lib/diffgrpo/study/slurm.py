"""Run a study's notebook jobs on a Slurm cluster, through submitit (docs/cluster.md).

:class:`SlurmExecutor` is the :class:`diffgrpo.study.executors.Executor` of a cluster: each
:class:`~diffgrpo.study.executors.NotebookJob` becomes one Slurm job that runs the job's own command
(:meth:`NotebookJob.argv`, the one :class:`~diffgrpo.study.executors.LocalExecutor` runs) with its
output in the job's log beside the executed notebook (``<name>.log``), named
``<study>/<stage>/<run>``, submitted with ``--dependency=afterok:<the jobs it waits for>`` and
``--kill-on-invalid-dep=yes``, so that a failed job's dependants are cancelled by Slurm itself
(not left pending with DependencyNeverSatisfied), whether anyone follows the study or not.
Resources are the params' ``cluster:`` section (:mod:`diffgrpo.params.cluster`).

Each job's Slurm id is recorded in ``outputs/<study>/slurm/jobs.json``
(:func:`diffgrpo.store.layout.slurm_dir`), beside submitit's own files, so that ``--status`` and a
second submission can ask the scheduler about them. A second submission is refused while
jobs of the first are queued or running; a run's own lock (``flock`` beside its folder) keeps
two processes from training it at once where the shared file system supports ``flock``.

A job cut off by its time limit or preempted is requeued by submitit (the notebook job is
checkpointable to submitit: it resubmits itself, up to 3 times), and its stage
resumes from its last checkpoint, as every stage does; a cancelled job is resumed by
submitting the study again.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


from diffgrpo import progress
from diffgrpo.store import artifacts, layout
from diffgrpo.study.executors import EXECUTORS, NotebookJob, _error_of, check_graph
from diffgrpo.study.notebooks import DIE_WITH_ENV, StageFailed

#: Slurm states of a job that has not ended (squeue's long names)
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}
RECORD = layout.SLURM_JOBS


class SlurmError(RuntimeError):
    """The scheduler refused a command (no Slurm here, a bad partition or account...)."""


class NotebookCommand:
    """What one Slurm job runs: a notebook job's command, its output appended to its log.

    A picklable callable (submitit runs it on the node with this interpreter). Its
    ``checkpoint`` makes it checkpointable to submitit: on a time limit or a preemption
    submitit requeues it as it is, and the stage resumes from its files."""

    def __init__(self, argv: list[str], log: str):
        self.argv, self.log = argv, log

    def __call__(self) -> dict:
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        Path(self.log).parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as log:
            log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} Slurm job {os.environ.get('SLURM_JOB_ID', '?')} "
                      f"on {os.uname().nodename}\n")
            log.flush()
            # the notebook ignores submitit's time-limit signal (USR2): the submitit process
            # requeues the job on it, and Slurm then stops the notebook; dying of it first would
            # read as a failure and cancel its dependants
            proc = subprocess.run(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, DIE_WITH_ENV: str(os.getpid())},
                                  preexec_fn=lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
                   else f"exit status {proc.returncode}")
            raise RuntimeError(f"the notebook job ended with {how}; its output is in {self.log}")
        return {"seconds": round(time.perf_counter() - t0, 1),
                "cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)}

    def checkpoint(self, *args, **kwargs):
        from submitit.core.utils import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


@dataclass(frozen=True)
class Placement:
    """Where one notebook job goes on the cluster: ``folder`` (its study's :func:`layout.slurm_dir`:
    submitit's files and :data:`RECORD`), ``key`` (the job's name in its study, as its
    record and ``--status`` name it), ``job_name`` (Slurm's: ``<study>/<stage>/<run>``) and
    ``resources`` (submitit parameters: :meth:`cluster.ClusterConfig.resources`)."""

    folder: Path
    key: str
    job_name: str
    resources: dict


# ---- the scheduler ---------------------------------------------------------------------


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise SlurmError(f"`{cmd[0]}` not found: no Slurm client on this machine (a local cluster: "
                         "make slurm-local; docs/cluster.md)") from None


def queue_states(ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(state, reason) of each of ``ids`` that the scheduler still knows: ``squeue`` keeps
    ended jobs for a while (MinJobAge), so an ended job may be here or not."""
    if not ids:
        return {}
    out = _run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(ids)])
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        raise SlurmError(f"squeue failed: {out.stderr.strip()}")
    states = {}
    for line in out.stdout.splitlines():
        jid, state, reason = (line.split("|") + ["", ""])[:3]
        states[jid.strip()] = (state.strip(), reason.strip())
    return states


def cancel(ids: Sequence[str]) -> None:
    if ids:
        _run(["scancel", *ids])


def outcome(folder: Path, job_id: str) -> tuple[str, str | dict]:
    """An ended job's outcome from submitit's result file: ("done", its numbers),
    ("failed", why) or ("none", "") where it wrote none (cancelled before it ran, or killed)."""
    from submitit.core.utils import pickle_load
    from submitit.slurm.slurm import SlurmJob

    path = SlurmJob(folder, job_id).paths.result_pickle
    if not path.exists():
        return "none", ""
    try:
        kind, value = pickle_load(path)
    except Exception as err:  # noqa: BLE001 (a half-written or foreign file)
        return "none", f"unreadable result file {path}: {err}"
    if kind == "success":
        return "done", value if isinstance(value, dict) else {}
    text = str(value).strip().splitlines()
    return "failed", text[-1] if text else "failed"


def slurm_log(folder: Path, job_id: str) -> Path:
    """submitit's own log of the job (what ran around the notebook: requeues, signals, Slurm's messages)."""
    from submitit.slurm.slurm import SlurmJob

    return SlurmJob(folder, job_id).paths.stderr


def read_record(folder: Path) -> dict[str, dict]:
    """``{job key: {"id", "job_name", "log", "submitted"}}`` of the study's last submission."""
    path = folder / RECORD
    if not path.exists():
        return {}
    try:
        return artifacts.read_json(path)
    except artifacts.ArtifactError:
        return {}


def live_jobs(folder: Path) -> dict[str, str]:
    """``{job key: Slurm id}`` of the recorded jobs the scheduler still has queued or running."""
    record = read_record(folder)
    ids = {v["id"]: k for k, v in record.items()}
    states = queue_states(list(ids))
    return {ids[j]: j for j, (state, _) in states.items() if j in ids and state in QUEUED | RUNNING}


# ---- the executor ------------------------------------------------------------------------


@dataclass
class SlurmExecutor:
    """Submit every job at once, each with ``afterok`` on the jobs it waits for; with
    ``detach``, return the job ids at once, else follow them with the local runner's progress
    bar and failure line. ``place(job)``: where and with what resources it runs."""

    place: Callable[[NotebookJob], Placement]
    kernel: str | None = None
    progress: bool = True
    detach: bool = False
    poll_s: float = 5.0
    #: how the jobs run, as the study's progress line says it
    how = "one Slurm job each"

    def submit(self, jobs: Sequence[NotebookJob]) -> dict[str, str]:
        """Submit ``jobs`` (refused while an earlier submission of one of their studies is
        queued or running); ``{job name: Slurm id}``."""
        import submitit

        check_graph(jobs)
        places = {j.name: self.place(j) for j in jobs}
        for folder in dict.fromkeys(p.folder for p in places.values()):
            busy = live_jobs(folder)
            if busy:
                raise artifacts.FolderBusy(
                    f"{folder.parent}: {len(busy)} job(s) of an earlier submission are still queued or running "
                    f"({', '.join(f'{k} = {v}' for k, v in list(busy.items())[:4])}{', ...' if len(busy) > 4 else ''}); "
                    f"follow them with --status, or cancel them (scancel {' '.join(busy.values())}) and submit "
                    "again (nothing was submitted)")
        ids: dict[str, str] = {}
        records: dict[Path, dict] = {}
        try:
            for job in _in_order(jobs):
                p = places[job.name]
                p.folder.mkdir(parents=True, exist_ok=True)
                job.out_path.parent.mkdir(parents=True, exist_ok=True)
                ex = submitit.AutoExecutor(folder=p.folder, cluster="slurm")
                extra = {**p.resources.get("slurm_additional_parameters", {}), "kill-on-invalid-dep": "yes"}
                if job.after:
                    extra["dependency"] = "afterok:" + ":".join(ids[a] for a in job.after)
                ex.update_parameters(name=p.job_name, **{**p.resources, "slurm_additional_parameters": extra})
                try:
                    sj = ex.submit(NotebookCommand(job.argv(self.kernel), str(job.log_path)))
                except Exception as err:  # submitit raises a plain error with sbatch's message
                    raise SlurmError(f"sbatch refused {p.job_name}: {' '.join(str(err).split())[:600]}") from None
                ids[job.name] = str(sj.job_id)
                records.setdefault(p.folder, {})[p.key] = {
                    "id": str(sj.job_id), "job_name": p.job_name, "log": str(job.log_path),
                    "submitted": time.strftime("%Y-%m-%d %H:%M:%S")}
        except BaseException:
            cancel(list(ids.values()))  # all or nothing: a half-submitted study is not left behind
            raise
        finally:
            for folder, rec in records.items():
                if len(rec) == sum(1 for p in places.values() if p.folder == folder):
                    artifacts.write_json(folder / RECORD, rec)
        return ids

    def run(self, jobs: Sequence[NotebookJob],
            on_done: Callable[[str, float, float | None], None] | None = None) -> dict[str, float]:
        """:meth:`fanout.Executor.run` on the cluster: a job's seconds and CPU seconds are its
        notebook process's, measured on the node. A failed job is named (with its log) as
        soon as it is seen; Slurm cancels its dependants; the others run on, and
        :class:`StageFailed` is raised once every job has ended. Interrupting the follower
        (Ctrl-C) leaves the jobs to the cluster."""
        ids = self.submit(jobs)
        first, last = min(ids.values(), key=int), max(ids.values(), key=int)
        print(f"submitted {len(ids)} Slurm job(s), ids {first}" + (f" to {last}" if last != first else "")
              + " (their names: <study>/<stage>/<run>; --status lists them)", flush=True)
        if self.detach:
            return {}
        return self.follow(jobs, ids, on_done)

    def follow(self, jobs: Sequence[NotebookJob], ids: dict[str, str],
               on_done: Callable[[str, float, float | None], None] | None = None) -> dict[str, float]:
        by_name = {j.name: j for j in jobs}
        pending = dict(ids)
        seconds: dict[str, float] = {}
        failed: list[str] = []
        cancelled: list[str] = []
        bar = progress.bar(len(jobs), "Slurm jobs", unit="nb", disable=not self.progress)
        shown, ended = "", {}  # when a job was first seen ended without its result file
        try:
            while pending:
                states = queue_states(list(pending.values()))
                running = []
                for name, jid in list(pending.items()):
                    state, reason = states.get(jid, ("", ""))
                    if state in QUEUED or state in RUNNING:
                        running += [name] if state in RUNNING else []
                        continue
                    kind, value = outcome(self.place(by_name[name]).folder, jid)
                    if kind == "none" and time.time() - ended.setdefault(name, time.time()) < 20 and \
                            not any(a in failed or a in cancelled for a in by_name[name].after):
                        continue  # ended a moment ago: its result file may not be visible yet
                    del pending[name]
                    if kind == "done":
                        seconds[name] = value.get("seconds", 0.0)
                        bar.update()
                        if on_done is not None:
                            on_done(name, seconds[name], value.get("cpu_seconds"))
                    elif kind == "none" and (reason == "DependencyNeverSatisfied" or
                                             any(a in failed or a in cancelled for a in by_name[name].after)):
                        cancelled.append(name)  # Slurm cancelled it: a job it waits for failed
                    else:
                        failed.append(name)
                        bar.write(f"failed: {self.describe_failure(by_name[name], jid, state)}")
                if ", ".join(running) != shown:
                    shown = ", ".join(running)
                    bar.set_postfix_str(shown)
                if pending:
                    time.sleep(self.poll_s)
        except KeyboardInterrupt:
            bar.close()
            print(f"\nstopped following; the jobs run on: --status shows them, "
                  f"scancel {' '.join(pending.values())} stops them", file=sys.stderr)
            raise
        finally:
            bar.close()
        if failed:
            job = by_name[failed[0]]
            more = f"; cancelled by Slurm as they depended on it: {len(cancelled)} job(s)" if cancelled else ""
            others = f"; {len(failed) - 1} more failed" if len(failed) > 1 else ""
            raise StageFailed(f"{self.describe_failure(job, ids[job.name])}{others}{more}")
        return seconds

    def describe_failure(self, job: NotebookJob, job_id: str, state: str = "") -> str:
        return failure(job, self.place(job).folder, job_id, state)


@EXECUTORS.register("slurm")
def slurm_executor(studies, place, *, kernel: str | None = None, detach: bool = False) -> SlurmExecutor:
    """One Slurm job per notebook, with the params' ``cluster:`` resources (docs/cluster.md)."""
    return SlurmExecutor(place, kernel=kernel, detach=detach)


def failure(job: NotebookJob, folder: Path, job_id: str, state: str = "") -> str:
    """One line (and where to read more) on why a job ended without its notebook."""
    _, why = outcome(folder, job_id)
    text = job.log_path.read_text(errors="replace") if job.log_path.exists() else ""
    if "error: " in text[text.rfind("\n== ") + 1:]:  # the notebook's own error line, in the last attempt's output
        why = _error_of(job)
    elif not why:
        why = f"Slurm ended it ({state or 'state unknown'}) without a result"
    return (f"{job.name} (Slurm job {job_id}): {why}\n  its output is in {job.log_path}; "
            f"Slurm's log: {slurm_log(folder, job_id)}")


def _in_order(jobs: Sequence[NotebookJob]) -> list[NotebookJob]:
    """Every job after the ones it waits for (its dependencies need their ids)."""
    done: set[str] = set()
    out: list[NotebookJob] = []
    pending = list(jobs)
    while pending:
        ready = [j for j in pending if set(j.after) <= done]
        out += ready
        done |= {j.name for j in ready}
        pending = [j for j in pending if j.name not in done]
    return out


# ---- status --------------------------------------------------------------------------------

#: the states ``--status`` reports, in its order
STATES = ("done", "running", "queued", "failed", "cancelled", "not submitted")


def job_state(job: NotebookJob, place: Placement, queue: dict[str, tuple[str, str]],
              broken: set[str] = frozenset()) -> tuple[str, str]:
    """(state, detail) of one notebook job, from the scheduler (``queue``:
    :func:`queue_states` of the recorded ids) and the study's files: the executed notebook,
    its ``.running`` and ``.failed`` copies and the notebook's lock (a local study's jobs too).
    ``broken``: the jobs already found failed or cancelled (a job that waits for one of them and
    ended without running was cancelled by Slurm)."""
    rec = read_record(place.folder).get(place.key)
    jid = rec["id"] if rec else None
    state, reason = queue.get(jid, ("", "")) if jid else ("", "")
    if state in RUNNING:
        return "running", f"Slurm job {jid}"
    if state in QUEUED:
        return "queued", f"Slurm job {jid} ({reason})" if reason and reason != "None" else f"Slurm job {jid}"
    held = False
    if job.out_path.parent.is_dir():  # (a study never run: nothing to ask, and no folder made)
        try:
            with artifacts.exclusive(job.out_path):  # the lock a running notebook holds (notebooks.run_notebook)
                pass
        except artifacts.FolderBusy:
            held = True
    if held:
        return "running", "on this machine" if not jid else f"Slurm job {jid}"
    failed_copy = job.out_path.with_suffix(".failed.ipynb")
    newest = max((p.stat().st_mtime for p in (job.out_path, failed_copy) if p.exists()), default=None)
    submitted = time.mktime(time.strptime(rec["submitted"], "%Y-%m-%d %H:%M:%S")) if rec else None
    if jid and (newest is None or submitted >= newest - 1):  # the last submission has not run it since
        kind, why = outcome(place.folder, jid)
        if kind == "done":
            return "done", f"Slurm job {jid}"
        waits = [a for a in job.after if a in broken]
        if kind == "none" and (waits or reason == "DependencyNeverSatisfied"):
            return "cancelled", f"Slurm job {jid}, cancelled by Slurm: {', '.join(waits) or 'a job it waits for'} failed"
        return "failed", failure(job, place.folder, jid, state)
    if job.out_path.exists() and (not failed_copy.exists() or failed_copy.stat().st_mtime < job.out_path.stat().st_mtime):
        return "done", ""
    if failed_copy.exists():
        why = _error_of(job) if job.log_path.exists() else f"failed; the notebook is {failed_copy}"
        return "failed", f"{why}\nits output is in {job.log_path}"
    return "not submitted", ""


def status(jobs: Sequence[NotebookJob], place: Callable[[NotebookJob], Placement]) -> list[tuple[NotebookJob, str, str]]:
    """(job, state, detail) of every job of a study's graph (:func:`job_state`)."""
    places = {j.name: place(j) for j in jobs}
    ids = [r["id"] for f in dict.fromkeys(p.folder for p in places.values()) for r in read_record(f).values()]
    try:
        queue = queue_states(ids)
    except SlurmError:
        queue = {}  # no Slurm here: the files alone say what is done
    out, broken = [], set()
    for j in jobs:  # the graph's order: a job after the ones it waits for
        state, detail = job_state(j, places[j.name], queue, broken)
        if state in ("failed", "cancelled"):
            broken.add(j.name)
        out.append((j, state, detail))
    return out
