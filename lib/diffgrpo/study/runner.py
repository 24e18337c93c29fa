"""Run a whole study: the stage notebooks under papermill, several at a time.

    python -m diffgrpo.study embedded                    # params/embedded.yaml
    python -m diffgrpo.study embedded --set train.max_steps=20 --stages 03_train 04_evaluate
    python -m diffgrpo.study paper003_gsm8k_qwen3_4b --executor slurm [--detach]   # on a Slurm cluster
    python -m diffgrpo.study paper003_gpu --campaign --executor slurm   # every study of its analyze.compare
    python -m diffgrpo.study embedded --status           # each notebook job: done, running, queued, failed...

The params are validated before any notebook starts. The probe, the selection and the
analysis run once; training and evaluation run once per (arm, seed) run, as executions of
``03_train`` / ``04_evaluate`` with ``arm`` and ``seed`` parameters, each kept in
``outputs/<study>/notebooks/<stage>/<run>.ipynb`` as that run's record (the base model's
evaluation is ``04_evaluate/base.ipynb``). ``workers`` of them execute at once
(:mod:`diffgrpo.study.executors`); a run is evaluated as soon as it has trained. Times per notebook go
to ``outputs/<study>/timings.json``. Every stage skips work already done (probe chunks,
finished runs, evaluated checkpoints), so an interrupted study resumes where it stopped.

``--executor slurm`` submits the same jobs to a Slurm cluster instead, one Slurm job per
notebook, with the params' ``cluster:`` resources (:mod:`diffgrpo.study.slurm`, docs/cluster.md).
``--campaign`` runs every study the params file's ``analyze.compare`` names (a paper's grid),
the last one's analysis after all of theirs, so that its report draws the whole grid.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path


from diffgrpo.tasks import splits
from diffgrpo.store import artifacts, layout, trackers
from diffgrpo.params import cluster
from diffgrpo.models import resolve
from diffgrpo.analysis import power
from diffgrpo.study import executors, plan, slurm
from diffgrpo import errors, params
from diffgrpo.study.executors import Executor, NotebookJob
from diffgrpo.study.graph import campaign_jobs, jobs
from diffgrpo.study.notebooks import STAGES


def notebook_parameters(params_file: str, overrides: dict, cfg: params.Config) -> dict:
    """What each stage notebook is given. The kernels run in ``notebooks/``, so a path as the user
    typed it, meaning the folder the command ran in, is made absolute (a plugin file found there
    too, as validation recorded it); a file of the checkout's ``params/`` is named inside it
    (``tiny.yaml``), so no executed notebook shows this machine's paths."""
    resolved = resolve.resolve_paths(cfg, Path.cwd())
    paths = {k: v for k, v in (("model.path", resolved.model.path), ("dataset.source", resolved.dataset.source),
                               ("analyze.compare", list(resolved.analyze.compare)))
             if v != params.get(cfg, k)}
    if cfg.plugins:
        paths["plugins"] = list(cfg.plugins)
    file = params.resolve(params_file).resolve()
    if file.is_relative_to(params.params_dir().resolve()):
        file = file.relative_to(params.params_dir().resolve())
    return {"params_file": str(file), "overrides": {**overrides, **paths}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m diffgrpo.study", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", help="a file in params/ (name or path)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a parameter, e.g. train.max_steps=20 (repeatable)")
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--kernel", default="diffgrpo", help="Jupyter kernel to run the notebooks in")
    ap.add_argument("--plan", action="store_true", help="print what each job costs (tokens, memory of its largest "
                    "pass, hours on params key `gpu`) without loading weights, and exit (diffgrpo.study.plan)")
    ap.add_argument("--project", metavar="DIR", help="the checkout whose notebooks/, params/ and outputs/ to use "
                    "(default: the one the command runs in; also DIFFGRPO_PROJECT)")
    ap.add_argument("--executor", choices=executors.EXECUTORS.names(), default="local",
                    help="local: `workers` notebooks at a time on this machine; slurm: one Slurm job per notebook, "
                    "with the params' cluster: resources (docs/cluster.md)")
    ap.add_argument("--detach", action="store_true", help="with --executor slurm: submit, print the job ids and return")
    ap.add_argument("--status", action="store_true", help="say for each notebook job whether it is done, running, "
                    "queued, failed or not submitted (and where a failed one's log is); runs nothing")
    ap.add_argument("--campaign", action="store_true", help="the studies that the params file's analyze.compare "
                    "names, all at once; the last one's analysis waits for every study and draws the grid")
    args = ap.parse_args(argv)
    if args.detach and args.executor != "slurm":
        ap.error("--detach submits to a cluster: add --executor slurm")
    if args.project:  # the notebook processes and their kernels inherit it
        os.environ[artifacts.PROJECT_ENV] = str(Path(args.project).resolve())
    note = artifacts.checkout_mismatch()
    if note:
        print(note, file=sys.stderr, flush=True)

    # a relative DIFFGRPO_OUTPUTS means the folder the command ran in, for the kernels too
    if os.environ.get(artifacts.OUTPUTS_ENV):
        os.environ[artifacts.OUTPUTS_ENV] = str(Path(os.environ[artifacts.OUTPUTS_ENV]).resolve())
    overrides = params.parse_overrides(args.overrides)
    cfg = params.load(args.params_file, overrides=overrides)  # fail before any work
    table = plan.plan(cfg, jobs(cfg, {"params_file": args.params_file, "overrides": overrides}, args.stages)) \
        if args.plan or cfg.model.device == "cuda" else None
    if args.plan:  # offline: no model, no data, no outputs folder
        print(plan.render(cfg, table), flush=True)
        print("\n".join(["", *power.plan_lines(cfg)]), flush=True)
        plan.check(cfg, table)
        return 0
    plan.check(cfg, table)  # a cuda study that does not fit its GPU stops here, before any notebook
    artifacts.check_outputs_root()
    files = [args.params_file]
    if args.campaign:
        if not cfg.analyze.compare:
            raise params.ParamsError(f"{params.resolve(args.params_file)}: --campaign runs the studies that "
                                     "`analyze.compare` names, and it names none")
        files = list(cfg.analyze.compare)
    studies = []
    for file in files:
        cfg = params.load(file, overrides=overrides)
        nb_params = notebook_parameters(file, overrides, cfg)
        cfg = params.load(nb_params["params_file"], overrides=nb_params["overrides"])
        if not args.status:
            splits.task_of(cfg), resolve.check_model(cfg)  # an unknown task or a missing model fails here, not in a notebook
            resolve.check_sources(cfg)  # a dataset file that is a folder or missing: here too
            trackers.check(cfg)  # a tracker named but not installed or not logged in: here too
        studies.append((cfg, nb_params))
    todo, owner = campaign_jobs(studies, args.stages)
    place = placement(owner)
    if args.status:
        return print_status(todo, place)
    executor = executors.EXECUTORS.get(args.executor)(studies, place, kernel=args.kernel, detach=args.detach)
    if args.detach:
        with _study_locks(studies):
            ids = executor.submit(todo)
        for job in todo:
            print(f"{ids[job.name]}  {place(job).job_name}")
        print(f"submitted {len(ids)} Slurm job(s); see them with: python -m diffgrpo.study {args.params_file} "
              + ("--campaign " if args.campaign else "") + "--status")
        return 0
    return run_studies(studies, todo, owner, executor, executor.how)


def placement(owner: dict[str, tuple[params.Config, str]]):
    """Where each job goes on a cluster (:class:`slurm.Placement`): its study's Slurm folder,
    the Slurm job name ``<study>/<stage>/<run>`` and its stage's ``cluster:`` resources."""
    settings = {}

    def place(job: NotebookJob) -> slurm.Placement:
        cfg, key = owner[job.name]
        if cfg.study not in settings:
            settings[cfg.study] = cluster.settings(cfg)
        rid = key.partition(" ")[2]
        return slurm.Placement(layout.slurm_dir(cfg), key, "/".join([cfg.study, job.stage] + ([rid] if rid else [])),
                               settings[cfg.study].resources(job.stage))

    return place


def print_status(todo: Sequence[NotebookJob], place) -> int:
    """``--status``: one line per job, with a failed job's error and its log; then a count per state."""
    rows = slurm.status(todo, place)
    width = max(len(j.name) for j, _, _ in rows)
    counts: dict[str, int] = {}
    for job, state, detail in rows:
        counts[state] = counts.get(state, 0) + 1
        head, *rest = detail.splitlines() or [""]
        print(f"{state:<13} {job.name:<{width}}  {head}".rstrip())
        for line in rest:  # where to read more: the log, the failed notebook
            print(f"{'':<13} {'':<{width}}  {line.strip()}")
    print(", ".join(f"{counts[s]} {s}" for s in slurm.STATES if s in counts))
    return 0


class StudyBusy(artifacts.FolderBusy):
    """Another study is running on the same study folder."""


def run_study(cfg: params.Config, nb_params: dict, stages: Sequence[str], executor: Executor) -> int:
    """Run one study's notebooks with ``executor``: :func:`run_studies`."""
    todo, owner = campaign_jobs([(cfg, nb_params)], stages)
    return run_studies([(cfg, nb_params)], todo, owner, executor, f"{cfg.workers} at a time")


@contextlib.contextmanager
def _study_locks(studies: Sequence[tuple[params.Config, dict]]):
    """One study at a time per study folder: a second one is refused before it touches any
    file of the first (its notebooks, their logs, ``timings.json``)."""
    with contextlib.ExitStack() as stack:
        for cfg, _ in studies:
            try:
                stack.enter_context(artifacts.exclusive(layout.notebooks_dir(cfg)))
            except artifacts.FolderBusy as err:
                holder = str(err).split("(", 1)[-1].split(")", 1)[0]
                raise StudyBusy(f"study {cfg.study!r}: another study ({holder}) is running on {layout.study_dir(cfg)}; "
                                "wait for it or stop it, then rerun (nothing was written)") from None
        yield


def run_studies(studies: Sequence[tuple[params.Config, dict]], todo: list[NotebookJob],
                owner: dict[str, tuple[params.Config, str]], executor: Executor, how: str) -> int:
    """Run the studies' notebooks ``todo`` (:func:`campaign_jobs`) with ``executor``; record
    seconds per notebook and per stage in each study's ``timings.json``, added as each
    notebook finishes, so a failed or stopped study keeps them."""
    with _study_locks(studies):
        record = {cfg.study: _Timings(cfg) for cfg, _ in studies}
        stages = [s for s in STAGES if any(j.stage == s for j in todo)]
        where = ", ".join(str(layout.notebooks_dir(c)) for c, _ in studies)
        print(f"== {', '.join(record)}: {len(todo)} notebooks ({', '.join(stages)}), {how}; executed copies in "
              f"{where}", flush=True)
        t0 = time.perf_counter()

        def finished(name: str, seconds: float, cpu_seconds: float | None) -> None:  # kept as each notebook ends
            cfg, key = owner[name]
            record[cfg.study].add(key, seconds, cpu_seconds)

        try:
            executor.run(todo, on_done=finished)
        except BaseException:
            for r in record.values():
                if r.per_job:  # what finished before the failure or the interrupt
                    with contextlib.suppress(OSError):  # a full disk: the failure itself is what to name
                        r.close(round(time.perf_counter() - t0, 1))
            raise
        wall = round(time.perf_counter() - t0, 1)
        for cfg, _ in studies:
            by_stage = record[cfg.study].close(wall)
            print(f"study {cfg.study!r}: {wall:.1f} s wall; seconds of notebook time per stage: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in by_stage.items()))
            report = layout.report_dir(cfg)
            if (report / layout.REPORT_SUMMARY).exists():
                print(f"report: {report}/ ({layout.REPORT_SUMMARY}, tables, figures)")
        return 0


class _Timings:
    """One study's ``timings.json``: seconds (and CPU seconds, where the executor counts them)
    per notebook, kept from earlier sessions and written as each notebook finishes.

    A notebook keeps its longest execution: a later session (a study's next block of seeds, a
    resumed study) executes every notebook again, and those whose work is done end in seconds,
    which would otherwise overwrite what the work cost. ``wall_s`` is the latest session's wall
    time, ``sessions_wall_s`` every session's, in order."""

    def __init__(self, cfg: params.Config):
        self.file = layout.study_dir(cfg) / layout.TIMINGS
        try:
            old = artifacts.read_json(self.file) if self.file.exists() else {}
        except artifacts.ArtifactError:
            old = {}  # a damaged record of seconds: start it again
        self.wall = old.get("wall_s")
        self.sessions = list(old.get("sessions_wall_s", [] if self.wall is None else [self.wall]))
        self.per_job = dict(old.get("notebooks", {}))
        self.cpu = dict(old.get("cpu_s", {}).get("notebooks", {}))

    def add(self, name: str, seconds: float, cpu_seconds: float | None) -> None:
        if seconds >= self.per_job.get(name, 0.0):  # the longest execution (see the class)
            self.per_job[name] = seconds
            if cpu_seconds is not None:
                self.cpu[name] = cpu_seconds
        _timings(self.file, self.per_job, self.wall, self.cpu, self.sessions)

    def close(self, wall: float) -> dict[str, float]:
        """Write the record with the session's wall time; the study's seconds per stage."""
        return _timings(self.file, self.per_job, wall, self.cpu, self.sessions + [wall])


def _by_stage(per_job: dict[str, float]) -> dict[str, float]:
    return {stage: round(sum(v for k, v in per_job.items() if k.split(" ")[0] == stage), 1)
            for stage in STAGES if any(k.split(" ")[0] == stage for k in per_job)}


def _timings(timings_file, per_job: dict, wall: float | None, cpu: dict | None = None,
             sessions: list[float] | None = None) -> dict:
    """Write seconds per notebook and per stage, and where the executor counts them, CPU seconds
    (user + system, the notebook's kernel included) the same way; return seconds per stage."""
    by_stage = _by_stage(per_job)
    record = {"wall_s": wall, "stages": by_stage, "notebooks": per_job}
    if sessions:
        record["sessions_wall_s"] = sessions
    if cpu:
        record["cpu_s"] = {"total": round(sum(cpu.values()), 1), "stages": _by_stage(cpu), "notebooks": cpu}
    artifacts.write_json(timings_file, record)
    return by_stage


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` for a terminal: a known error is one line naming the culprit (and, for a
    failed notebook, the executed copy that holds the traceback), not a traceback (:mod:`diffgrpo.errors`)."""
    return errors.run(lambda: main(argv), stopped="stopped; rerun the same command to resume")


if __name__ == "__main__":
    sys.exit(cli())
