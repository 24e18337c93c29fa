"""Run independent jobs (training runs, checkpoint evaluations) in worker processes.

A study's runs share nothing while they train or are evaluated: each reads the selection and
the model from disk and writes its own folder. On a CPU one process per core with one torch
thread each beats one process with several threads (a 0.9M model cannot use them), so
``workers: 2`` on a 2-core machine halves the wall time of those stages. On one GPU keep
``workers: 1``.

Workers are spawned (not forked: torch and a Jupyter kernel do not survive a fork), so the job
function must be importable: a module-level function of :mod:`diffgrpo`. A job's error is
raised in the caller with the job named; jobs not yet started are cancelled, finished ones
keep their files, and every stage skips finished work when rerun.

Workers die with the process that started them (Linux ``PR_SET_PDEATHSIG``): a study killed
with ``kill -9`` or by the OOM killer leaves no orphan training on, writing into folders a
rerun is about to use. Each run folder also has one writer at a time
(:func:`artifacts.exclusive`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from tqdm.auto import tqdm


class JobError(RuntimeError):
    """A job failed in a worker process; the original error is its ``__cause__``."""


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    if os.getppid() != parent_pid:  # the parent died before the request: nobody to wait for
        os._exit(1)


def run_jobs(fn: Callable[..., Any], jobs: Sequence[tuple], workers: int, *, names: Sequence[str] | None = None,
             progress: bool = True, desc: str = "jobs", **kwargs: Any) -> list[Any]:
    """``[fn(*job, progress=..., **kwargs) for job in jobs]``, up to ``workers`` at a time.

    With one worker (or one job) everything runs here, with each job's own progress bars;
    otherwise jobs run with ``progress=False`` and one bar counts finished jobs."""
    names = list(names) if names is not None else [str(j) for j in jobs]
    if workers <= 1 or len(jobs) <= 1:
        return [fn(*job, progress=progress, **kwargs) for job in jobs]
    results: list[Any] = [None] * len(jobs)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx,
                             initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(fn, *job, progress=False, **kwargs): i for i, job in enumerate(jobs)}
        bar = tqdm(total=len(jobs), desc=f"{desc} ({min(workers, len(jobs))} processes)", unit="run",
                   disable=not progress)
        try:
            for future in as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except Exception as err:
                    raise JobError(f"{desc}: job {names[i]} failed: {type(err).__name__}: {err}") from err
                bar.set_postfix_str(f"done {names[i]}")
                bar.update()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            bar.close()
    return results
