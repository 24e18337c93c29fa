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
    assert list(steps) == ["versions", "tiny_study", "paper002_arms", "grpo_step", "probe_evaluate", "pass_qwen3_4b",
                           "hf_generation", "pass_llama3_8b"]
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
    # issue 39: paper002_gpu's three arms through the launch path, each as paper002_gpu launches it
    arms = steps["paper002_arms"]["runs"]
    assert list(arms) == ["eprli", "eprli_grpo", "eprli_dynamic"] and all(steps["paper002_arms"]["checks"].values())
    assert {a: (r["status"], r["launch"]) for a, r in arms.items()} == {
        "eprli": ("complete", "levels_apart"), "eprli_grpo": ("complete", "in_process"),
        "eprli_dynamic": ("complete", "in_process")}
    assert len(set(arms["eprli"]["level_pids"])) == 2 and arms["eprli_grpo"]["steps_done"] == 2
    # a whole GRPO step through the project's Trainer: every completion at its cap, the plan's step beside it
    g = steps["grpo_step"]
    m, p = g["measured"], g["planned"]
    assert (p["prompts"], p["completions"], p["completion_tokens"]) == (2, 4, 8) and g["beta"] > 0
    assert m["groups"] == 2 and m["completion_tokens"] == 4 * 8  # min_new_tokens: forced to the cap
    assert 0 < m["generate_s"] < m["step_s"] and m["update_s"] > 0 and p["step_s"][0] < p["step_s"][1]
    assert m["peak_allocated_gib"] is None and "step_gib" in p
    # the probe's and evaluation's generator: a dynamic cache on the CPU (static + compile is cuda's)
    e = steps["probe_evaluate"]
    assert list(e["caches"]) == ["dynamic"] and e["prompts"] == 4
    for stage in ("probe", "evaluate"):
        c = e["caches"]["dynamic"][stage]
        assert c["tokens_per_s"] > 0 and c["longest"] <= e["new_tokens"] and c["tokens"] > 0
    assert e["caches"]["dynamic"]["planned_tokens_per_s"][0] > e["caches"]["dynamic"]["planned_tokens_per_s"][1] > 0
    assert {"grpo_step", "paper002_arms", "probe_evaluate"} <= set(data["estimate_s"])
    figures = {r["figure"] for r in data["table"]}
    assert {"pass_qwen3_4b peak allocated GiB", "pass_llama3_8b peak reserved GiB", "HF generate tokens/s",
            "paper002_arms eprli", "grpo_step s a step", "grpo_step peak allocated GiB",
            "probe dynamic cache tokens/s", "evaluate dynamic cache tokens/s"} <= figures
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


def test_the_second_editions_rows_fail_on_memory_a_stopped_run_or_another_launch(accept):
    """Issue 39's steps in the table: the GRPO step's memory has the passes' verdicts against the
    plan's step peak; an arm of paper 002 fails unless complete and launched as paper002_gpu
    launches it; a static cache's first call (it compiles) has no verdict; reserved near the card fails."""
    def data(alloc=40.0, reserved=50.0, status="complete", launch="levels_apart", gen_reserved=30.0):
        grpo = {"status": "ok", "measured": {"step_s": 90.0, "generate_s": 60.0, "peak_allocated_gib": alloc,
                                              "peak_reserved_gib": reserved},
                "planned": {"step_s": [44.5, 108.3], "generate_s": [30.0, 83.1], "step_gib": 42.5}}
        arms = {"status": "ok", "runs": {"eprli": {"status": status, "launch": launch, "planned_launch": "levels_apart",
                                                   "seconds": 9.0}}}
        call = {"tokens_per_s": 3000.0, "peak_reserved_gib": gen_reserved}
        gen = {"status": "ok", "caches": {c: {"probe": call, "evaluate": call, "planned_tokens_per_s": [4000.0, 2000.0]}
                                          for c in ("dynamic", "static")}}
        return {"steps": {"versions": {"status": "ok", "gpu_memory_gib": 80.0}, "grpo_step": grpo,
                          "paper002_arms": arms, "probe_evaluate": gen}}

    def results(d):
        return {r["figure"]: r["result"] for r in accept.table(d)}

    ok = results(data())
    assert ok["grpo_step peak allocated GiB"] == ok["grpo_step peak reserved GiB"] == "pass"
    assert ok["grpo_step s a step"] == "in range" and ok["paper002_arms eprli"] == "pass"
    assert ok["evaluate static cache tokens/s"] == "in range"
    assert ok["probe static cache tokens/s (first call: compiles)"] == "n/a"
    assert results(data(alloc=55.0))["grpo_step peak allocated GiB"] == "FAIL"  # 1.29 x the plan's step
    assert results(data(reserved=75.0))["grpo_step peak reserved GiB"] == "FAIL"  # 94% of the card
    assert results(data(status="stopped"))["paper002_arms eprli"] == "FAIL"  # issue 39's bug
    assert results(data(launch="in_process"))["paper002_arms eprli"] == "FAIL"
    assert results(data(gen_reserved=79.0))["probe/evaluate dynamic cache peak reserved GiB"] == "FAIL"
