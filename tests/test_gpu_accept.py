"""scripts/gpu_accept.py (`make gpu-accept`, issue 28): the acceptance run of the GPU path, run
here on the CPU with tiny shapes (``--cpu-tiny``) so that it cannot rot before a GPU is at hand.
Its figures mean nothing on a CPU; what is checked is that every step runs through the same code
and that the record and the verdicts are what the GPU run will report."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_accept.py"


@pytest.fixture(scope="module")
def accept():
    spec = importlib.util.spec_from_file_location("gpu_accept", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e
def test_the_acceptance_runs_every_step_on_a_cpu_with_tiny_shapes(tmp_path):
    out = tmp_path / "accept.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "lib")}
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu-tiny", "--out", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    steps = data["steps"]
    assert list(steps) == ["versions", "tiny_study", "pass_qwen3_4b", "hf_generation", "pass_llama3_8b"]
    assert all(s["status"] == "ok" for s in steps.values()), {k: s.get("error") for k, s in steps.items()}
    assert data["cpu_tiny"] and data["estimate_s"]["limit"] == 480 and data["estimate_s"]["total"] > 0
    study = steps["tiny_study"]
    assert all(study["checks"].values())
    assert set(study["stages"]) >= {"01_probe", "02_select", "03_train", "04_evaluate", "05_analyze"}
    assert study["runs"]["hard-seed0"]["resumed_from"] == [2]
    assert study["stages"]["03_train"]["peak_allocated_gib"] is None  # no GPU: null, not absent
    for name in ("pass_qwen3_4b", "pass_llama3_8b"):
        m, p = steps[name]["measured"], steps[name]["planned"]
        assert len(m["pass_s"]) == p["passes"] == 2 and m["peak_reserved_gib"] is None
        assert (p["rows"], p["tokens_a_row"]) == (2, 16) and "train_pass_gib" in p and p["pass_s"][0] < p["pass_s"][1]
    assert steps["hf_generation"]["tokens_per_s"] > 0
    figures = {r["figure"] for r in data["table"]}
    assert {"pass_qwen3_4b peak allocated GiB", "pass_llama3_8b peak reserved GiB", "HF generate tokens/s"} <= figures
    assert "every check passed" in done.stdout and "figure" in done.stdout


def test_memory_outside_the_plans_band_or_near_the_card_fails(accept):
    """The verdicts the GPU run prints: allocated within 0.75-1.2 of the plan's pass (widened from 0.8
    after the first H200 run: Qwen3-4B measured 0.82 of the plan, docs/gpu.md), reserved
    below 90% of the card; a pass that failed to run fails."""
    def data(alloc, reserved, status="ok"):
        measured = {"peak_allocated_gib": alloc, "peak_reserved_gib": reserved, "mean_pass_s": 5.0,
                    "no_grad_forward_s": 1.0, "mfu": 0.3}
        planned = {"train_pass_gib": 30.0, "pass_s": [4.0, 9.0], "no_grad_forward_s": [0.5, 2.0]}
        return {"steps": {"versions": {"status": "ok", "gpu_memory_gib": 80.0},
                          "pass_qwen3_4b": {"status": status, "measured": measured, "planned": planned}}}

    def results(d):
        return {r["figure"]: r["result"] for r in accept.table(d)}

    ok = results(data(33.0, 40.0))
    assert ok["pass_qwen3_4b peak allocated GiB"] == "pass" and ok["pass_qwen3_4b peak reserved GiB"] == "pass"
    assert ok["pass_qwen3_4b s a pass"].startswith("in range")
    assert results(data(37.0, 40.0))["pass_qwen3_4b peak allocated GiB"] == "FAIL"  # 1.23 x the plan
    assert results(data(23.0, 40.0))["pass_qwen3_4b peak allocated GiB"] == "pass"  # 0.77 x: inside the band
    assert results(data(22.0, 40.0))["pass_qwen3_4b peak allocated GiB"] == "FAIL"  # 0.73 x
    assert results(data(33.0, 73.0))["pass_qwen3_4b peak reserved GiB"] == "FAIL"  # 91% of the card
    assert results(data(None, None, status="failed"))["pass_qwen3_4b"] == "FAIL"
    assert results(data(None, None))["pass_qwen3_4b peak allocated GiB"] == "n/a"  # a CPU measures none


def test_each_step_is_written_as_it_ends_a_failed_one_too(accept, tmp_path):
    acc = accept.Accept(tmp_path / "accept.json", tiny=True)
    acc.run("versions", lambda: {"python": "3"})
    assert json.loads((tmp_path / "accept.json").read_text())["steps"]["versions"]["status"] == "ok"
    acc.run("tiny_study", lambda: 1 / 0)
    step = json.loads((tmp_path / "accept.json").read_text())["steps"]["tiny_study"]
    assert step["status"] == "failed" and "ZeroDivisionError" in step["error"]
