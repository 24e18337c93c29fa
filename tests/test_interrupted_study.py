"""A study killed with SIGKILL (an OOM kill, a dropped login shell) leaves no process behind,
and its rerun gives what an uninterrupted study gives.

The runner trains two runs in two spawned workers (``workers: 2``); it is killed while they
train. Every process of the study (the notebook's kernel, the workers) carries the study's
DIFFGRPO_OUTPUTS in its environment, which is how survivors are found.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo.store import layout
from diffgrpo import params, probe, select, train

pytestmark = pytest.mark.e2e  # a study killed and rerun: `make test`, not `make test-unit`

OVERRIDES = {"workers": 2, "arms": ["hard", "random"], "train.max_steps": 24, "train.save_steps": 3}


def processes_of(outputs: Path) -> list[int]:
    mark = f"DIFFGRPO_OUTPUTS={outputs}".encode()
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int(d.name) != os.getpid() and mark in (d / "environ").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def finished(outputs: Path) -> bool:
    """Some run has finished: kill now, while the other is still training."""
    return any(json.loads(p.read_text()).get("status") == "complete"
               for p in (outputs / "smoke" / "runs").glob("*/manifest.json"))


def runner(outputs: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "diffgrpo.study", "smoke", "--stages", "03_train", "--kernel", "python3"]
    argv += [f"--set={k}={v}" for k, v in OVERRIDES.items()]
    env = {**os.environ, "DIFFGRPO_OUTPUTS": str(outputs)}
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def prepare(outputs: Path, monkeypatch) -> params.Config:
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(outputs))
    cfg = params.load("smoke", overrides=OVERRIDES)
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    return cfg


def test_kill_9_of_the_runner_leaves_no_process_and_the_rerun_matches(tmp_path, monkeypatch):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    cfg = prepare(killed, monkeypatch)
    proc = runner(killed)
    deadline = time.time() + 300
    while time.time() < deadline:  # both workers have checkpointed at least once
        done = [m for m in (killed / "smoke" / "runs").glob("*/checkpoints/checkpoint-3/trainer_state.json")]
        if len(done) == 2 or proc.poll() is not None or finished(killed):
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"the study ended before it could be killed: {proc.stderr.read()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while processes_of(killed) and time.time() < deadline:
        time.sleep(0.2)
    assert processes_of(killed) == [], "processes of the killed study are still running"

    statuses = {p.parent.name: json.loads(p.read_text())["status"]
                for p in (killed / "smoke" / "runs").glob("*/manifest.json")}
    # it really was killed mid-training: at least one run is unfinished (on a loaded machine
    # one worker can finish its run before the other has written its first checkpoint)
    assert "running" in statuses.values(), statuses

    rerun = runner(killed)
    assert rerun.wait(timeout=600) == 0, rerun.stderr.read()
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(whole))
    prepare(whole, monkeypatch)
    train.train_runs(cfg, progress=False)
    for arm, seed in layout.planned_runs(cfg):
        rid = layout.run_id(arm, seed)
        for name in ("groups.parquet",):
            a = pd.read_parquet(killed / "smoke" / "runs" / rid / name)
            b = pd.read_parquet(whole / "smoke" / "runs" / rid / name)
            pd.testing.assert_frame_equal(a, b)
