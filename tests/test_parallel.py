"""Worker processes: results in job order, per-job errors named, one worker runs in-process."""

import os

import pytest

from diffgrpo import parallel


def square_and_pid(x, *, progress, offset=0):
    if x == 3:
        raise ValueError("three is not allowed")
    return x * x + offset, os.getpid(), progress


def test_results_come_back_in_job_order_from_other_processes():
    out = parallel.run_jobs(square_and_pid, [(1,), (2,), (4,), (5,)], workers=2, progress=False, offset=1)
    assert [r[0] for r in out] == [2, 5, 17, 26]
    assert os.getpid() not in {r[1] for r in out}
    assert not any(r[2] for r in out)  # workers never draw their own progress bars


def test_one_worker_runs_here_with_progress():
    out = parallel.run_jobs(square_and_pid, [(2,), (4,)], workers=1, progress=True)
    assert [r[0] for r in out] == [4, 16]
    assert {r[1] for r in out} == {os.getpid()} and all(r[2] for r in out)


def test_a_failed_job_is_named():
    with pytest.raises(parallel.JobError, match=r"train: job seed-3 failed: ValueError: three is not allowed"):
        parallel.run_jobs(square_and_pid, [(1,), (3,)], workers=2, names=["seed-1", "seed-3"],
                          progress=False, desc="train")
