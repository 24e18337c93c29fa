"""A study killed with SIGKILL (an OOM kill, a dropped login shell) leaves no process behind,
and its rerun gives what an uninterrupted study gives.

The runner trains two runs in two spawned workers (``workers: 2``); it is killed while they
train. Every process of the study (the notebook's kernel, the workers) carries the study's
DIFFGRPO_OUTPUTS in its environment, which is how survivors are found.

The kill is not a race with training (on a loaded machine one run could finish before the kill):
each arm's reward includes a plugin reward of weight 0, ``gated``, which after update HOLD_AFTER
(checkpoint 3 saved) marks its process as waiting and blocks until ``<outputs>/gate/open``
exists. The test kills once both runs wait, so neither can have finished; the rerun and the
uninterrupted study run with the gate open. A weight of 0 leaves every reward as the verifier's.
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

HOLD_AFTER = 4  # updates each run makes before it waits at the gate (checkpoint 3 saved)
GATE_PLUGIN = f'''
import os, time
from pathlib import Path
from diffgrpo import rewards

@rewards.register("gated")
def gated(prompts, completions, completion_ids=None, *, run, **kwargs):
    gate = Path(os.environ["DIFFGRPO_OUTPUTS"]) / "gate"
    if run.step > {HOLD_AFTER} and not (gate / "open").exists():
        gate.mkdir(exist_ok=True)
        (gate / f"waiting-{{os.getpid()}}").touch()
        while not (gate / "open").exists():
            time.sleep(0.1)
    return [0.0] * len(completions)
'''
ARMS = [{"name": arm, "select": arm, "reward": {"verifier": 1.0, "gated": 0.0}} for arm in ("hard", "random")]
OVERRIDES = {"workers": 2, "arms": ARMS, "train.max_steps": 24, "train.save_steps": 3}


def overrides(plugin: Path) -> dict:
    return {**OVERRIDES, "plugins": [str(plugin)]}


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


def runner(outputs: Path, plugin: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "diffgrpo.study", "smoke", "--stages", "03_train", "--kernel", "python3"]
    argv += [f"--set={k}={json.dumps(v)}" for k, v in overrides(plugin).items()]
    env = {**os.environ, "DIFFGRPO_OUTPUTS": str(outputs)}
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def prepare(outputs: Path, monkeypatch, plugin: Path) -> params.Config:
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(outputs))
    cfg = params.load("smoke", overrides=overrides(plugin))
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    return cfg


def test_kill_9_of_the_runner_leaves_no_process_and_the_rerun_matches(tmp_path, monkeypatch):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    plugin = tmp_path / "gate_plugin.py"
    plugin.write_text(GATE_PLUGIN)
    cfg = prepare(killed, monkeypatch, plugin)
    proc = runner(killed, plugin)
    deadline = time.time() + 600
    while time.time() < deadline:  # both workers wait at the gate: neither run can finish
        if len(list((killed / "gate").glob("waiting-*"))) == 2 or proc.poll() is not None:
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"the study ended before it could be killed: {proc.stderr.read()}"
    assert len(list((killed / "gate").glob("waiting-*"))) == 2, "the runs did not reach the gate in 600 s"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while processes_of(killed) and time.time() < deadline:
        time.sleep(0.2)
    assert processes_of(killed) == [], "processes of the killed study are still running"

    statuses = {p.parent.name: json.loads(p.read_text())["status"]
                for p in (killed / "smoke" / "runs").glob("*/manifest.json")}
    assert statuses == {"hard-seed0": "running", "random-seed0": "running"}, statuses  # killed mid-training, both
    assert all((killed / "smoke" / "runs" / rid / "checkpoints" / "checkpoint-3").is_dir() for rid in statuses)

    (killed / "gate" / "open").touch()
    rerun = runner(killed, plugin)
    assert rerun.wait(timeout=600) == 0, rerun.stderr.read()
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(whole))
    prepare(whole, monkeypatch, plugin)
    (whole / "gate").mkdir()
    (whole / "gate" / "open").touch()
    train.train_runs(cfg, progress=False)
    for arm, seed in layout.planned_runs(cfg):
        rid = layout.run_id(arm, seed)
        for name in ("groups.parquet",):
            a = pd.read_parquet(killed / "smoke" / "runs" / rid / name)
            b = pd.read_parquet(whole / "smoke" / "runs" / rid / name)
            pd.testing.assert_frame_equal(a, b)
