"""The smoke study on a real Slurm cluster (``make test-cluster``: scripts/slurm_local.sh starts
a single-node one as root; docs/cluster.md).

Marked ``cluster``: the default ``make test`` deselects them, and they skip where no Slurm
node answers. Nothing is mocked: sbatch, squeue and scancel are Slurm's, the jobs run the
notebooks on the node. The smoke study is cut to two arms and 120 training steps (a
checkpoint every 10), so that a training job lasts long enough to be cancelled in the middle.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo.analysis.sections import compute
from diffgrpo.store import layout
from diffgrpo import params, study
from diffgrpo.study import slurm

pytestmark = pytest.mark.cluster

SETTINGS = ["--set=arms=[hard, easy]", "--set=train.max_steps=120", "--set=train.save_steps=10",
            "--set=cluster.mem_gb=1", "--kernel", "python3"]


def _node_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.split()[:1] != [] and \
        out.stdout.split()[0].rstrip("*~#").startswith(("idle", "mixed", "alloc", "completing"))


@pytest.fixture(autouse=True)
def slurm_node():
    if not _node_up():
        pytest.skip("no Slurm node answers here: make test-cluster starts one (as root)")


@pytest.fixture(scope="module")
def local_study(tmp_path_factory):
    """The same study through the local executor: the reference."""
    root = tmp_path_factory.mktemp("local")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DIFFGRPO_OUTPUTS", str(root))
        assert study.main(["smoke", *SETTINGS]) == 0
    return root / "smoke"


def _cfg() -> params.Config:
    return params.load("smoke", overrides=params.parse_overrides([s.split("=", 1)[1] for s in SETTINGS if "=" in s]))


def _report(study_dir: Path) -> dict[str, bytes]:
    """Every report file's bytes, with the compute section's measured seconds (the node's clock,
    compute.MEASURED) blanked: two runs of one study agree on everything else, byte for byte."""
    out = {}
    for p in sorted((study_dir / "report").rglob("*")):
        if p.is_file():
            name = str(p.relative_to(study_dir))
            out[name] = _blank_measured(name, p.read_bytes())
    return out


def _blank_measured(name: str, data: bytes) -> bytes:
    if name.endswith("summary.json"):
        summary = json.loads(data)
        for row in summary.get("compute", {}).get("runs", []):
            for col in compute.MEASURED:
                row[col] = "measured"
        return json.dumps(summary, sort_keys=True).encode()
    if Path(name).stem != "compute":
        return data
    sep = "," if name.endswith(".csv") else "|"
    lines = data.decode().splitlines()
    cols = [i for i, c in enumerate(lines[0 if sep == "," else 2].split(sep)) if c.strip() in compute.MEASURED]
    assert len(cols) == len(compute.MEASURED), f"{name}: the measured columns are not in its header"
    blanked = [sep.join("measured" if i in cols else c for i, c in enumerate(line.split(sep))) if line.count(sep) > 1
               else line for line in lines]
    return "\n".join(blanked).encode()


def _status(capsys, *extra) -> dict[str, tuple[str, str]]:
    capsys.readouterr()
    assert study.main(["smoke", *SETTINGS, "--status", *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    out = {}
    for line in lines[:-1]:  # the last line counts them
        if line.startswith(" "):
            continue  # a failed job's second line: its log
        state = next(s for s in slurm.STATES if line.startswith(s))
        name, _, detail = line[len(state):].strip().partition("  ")
        out[name.strip()] = (state, detail.strip())
    return out


def _wait(predicate, timeout_s: float, what: str, poll_s: float = 1.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_smoke_study_through_slurm_gives_the_local_report(local_study, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.main(["smoke", *SETTINGS, "--executor", "slurm"]) == 0
    here = tmp_path / "smoke"
    assert _report(here) == _report(local_study)  # byte for byte: tables, summary.json, figures
    # one Slurm job per notebook, named <study>/<stage>/<run>, each with its log beside its notebook
    record = json.loads((here / "slurm" / "jobs.json").read_text())
    assert record["03_train hard-seed0"]["job_name"] == "smoke/03_train/hard-seed0"
    for key, rec in record.items():
        assert Path(rec["log"]).exists() and f"Slurm job {rec['id']}" in Path(rec["log"]).read_text()
    assert (here / "notebooks" / "03_train" / "hard-seed0.log") == Path(record["03_train hard-seed0"]["log"])
    # timings come from the nodes, as the local runner's
    timings = json.loads((here / "timings.json").read_text())
    assert set(timings["notebooks"]) == set(record) and timings["cpu_s"]["total"] > 0
    states = _status(capsys)
    assert {s for s, _ in states.values()} == {"done"} and len(states) == len(record)
    # the run's curves, written on the node, read back here
    assert (here / "runs" / "hard-seed0" / "tensorboard" / "eval-test").is_dir()
    # the local study's status reads its files alone
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(local_study.parent))
    assert {s for s, _ in _status(capsys).values()} == {"done"}


def test_a_training_cancelled_midway_resumes_when_resubmitted_to_the_same_numbers(local_study, tmp_path,
                                                                                   monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.main(["smoke", *SETTINGS, "--executor", "slurm", "--detach"]) == 0
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "smoke" / "slurm" / "jobs.json").read_text())
    assert f"{record['03_train hard-seed0']['id']}  smoke/03_train/hard-seed0" in out
    # a second submission while the first is queued or running is refused, and submits nothing
    assert study.cli(["smoke", *SETTINGS, "--executor", "slurm", "--detach"]) == 2
    assert "still queued or running" in capsys.readouterr().err
    assert json.loads((tmp_path / "smoke" / "slurm" / "jobs.json").read_text()) == record
    states = _status(capsys)  # the scheduler's view: waiting on their dependencies, or running
    assert {s for s, _ in states.values()} <= {"queued", "running", "done"}
    assert states["05_analyze"][0] == "queued" and "(Dependency)" in states["05_analyze"][1]

    cfg = _cfg()
    run = layout.run_dir(cfg, "hard", 0)
    _wait(lambda: (run / "checkpoints" / "checkpoint-10").is_dir(), 600, "hard-seed0 to save step 10", poll_s=0.2)
    subprocess.run(["scancel", record["03_train hard-seed0"]["id"]], check=True)  # at once: a step takes ~0.2 s
    _wait(lambda: not slurm.live_jobs(layout.slurm_dir(cfg)), 600, "every job to end")
    states = _status(capsys)
    assert states["03_train hard-seed0"][0] == "failed"
    assert states["04_evaluate hard-seed0"][0] == "cancelled" and states["05_analyze"][0] == "cancelled"
    assert states["04_evaluate easy-seed0"][0] == "done"  # what did not wait for it ran
    stopped = json.loads((run / "manifest.json").read_text())
    assert stopped["status"] == "running" and not (run / "checkpoints" / "checkpoint-120").exists()  # stopped midway

    assert study.main(["smoke", *SETTINGS, "--executor", "slurm"]) == 0
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["resumed_from"]  # resumed, not trained anew
    ref = local_study / "runs" / "hard-seed0"
    for table in ("steps.parquet", "groups.parquet"):
        ours, theirs = pd.read_parquet(run / table), pd.read_parquet(ref / table)
        cols = [c for c in theirs.columns if c not in ("step_time",)]
        pd.testing.assert_frame_equal(ours[cols], theirs[cols])
    assert _report(tmp_path / "smoke") == _report(local_study)
    assert {s for s, _ in _status(capsys).values()} == {"done"}


def test_a_failing_job_cancels_its_dependants_and_is_named_with_its_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    # no probe was run: the selection fails (the probe is left out of the stages)
    stages = ["--stages", "02_select", "03_train", "04_evaluate", "05_analyze"]
    assert study.cli(["smoke", *SETTINGS, "--executor", "slurm", *stages]) == 1
    err = capsys.readouterr().err
    log = tmp_path / "smoke" / "notebooks" / "02_select.log"
    assert "error: 02_select (Slurm job" in err and f"its output is in {log}" in err
    assert "cancelled by Slurm as they depended on it: 5 job(s)" in err
    states = _status(capsys, *stages)
    assert states["02_select"][0] == "failed"
    assert {states[n][0] for n in ("03_train hard-seed0", "03_train easy-seed0", "05_analyze")} == {"cancelled"}
    assert states["04_evaluate base"][0] == "done"  # it waits for nothing


def test_a_partition_slurm_refuses_is_named_and_nothing_is_left_queued(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.cli(["smoke", *SETTINGS, "--executor", "slurm", "--set=cluster.partition=nosuch"]) == 2
    assert "sbatch refused smoke/01_probe" in capsys.readouterr().err
    assert not (tmp_path / "smoke" / "slurm" / "jobs.json").exists()
