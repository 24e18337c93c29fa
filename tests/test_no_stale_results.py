"""No stale result, ever: every cached artifact is keyed by everything that decides it, so a
changed setting or a rebuilt model recomputes what it changes, and a damaged or unfinished
artifact is refused or rebuilt, never read as a result.

The whole pipeline runs in-process on params/smoke.yaml with a copy of the embedded model (so
that it can be rebuilt) and a handful of shuffled-objects prompts: seconds per stage.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from diffgrpo.analysis import report as analyze
from diffgrpo.store import artifacts, layout
from diffgrpo.models import embedded
from diffgrpo import evaluate, params, probe, select, train

# workers 1: every stage in this process, so its warnings reach pytest.warns
SMALL = {"workers": 1, "arms": ["hard", "random"], "dataset.task": "shuffled_objects",
         "dataset.task_options": {"people": [3, 4], "swaps": [1, 3], "train_size": 60, "test_size": 20}}


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "outputs"))
    model = shutil.copytree(embedded.default_path(), tmp_path / "model")  # our own copy, to rebuild below
    return params.load("smoke", overrides={**SMALL, "model.path": str(model), "model.name": "m",
                                           "probe.sampling.max_new_tokens": 24, "evaluate.sampling.max_new_tokens": 24,
                                           "train.max_completion_length": 24})


def study(cfg):
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    train.train_runs(cfg, progress=False)
    evaluate.evaluate_runs(cfg, progress=False)
    return analyze.report(cfg)


def greedy(cfg, rid):
    return pd.read_parquet(layout.eval_dir(cfg, rid) / "samples.parquet").query("mode == 'greedy'")


@pytest.mark.e2e
def test_retraining_with_another_setting_recomputes_the_evaluation(cfg):
    """The issue's case: runs/ deleted, retrained at another lr, evaluated: the evaluation must
    score the new adapters, not the cached completions of the old ones."""
    study(cfg)
    old = greedy(cfg, "hard-seed0")
    shutil.rmtree(layout.study_dir(cfg) / "runs")
    hot = cfg.replace(**{"train.learning_rate": 0.05})
    study(hot)
    retrained = greedy(hot, "hard-seed0")
    # a fresh evaluation of the same adapters, with no cache at all
    shutil.rmtree(layout.eval_dir(hot, "hard-seed0"))
    evaluate.evaluate_run(hot, "hard", 0, progress=False)
    fresh = greedy(hot, "hard-seed0")
    pd.testing.assert_frame_equal(retrained.reset_index(drop=True), fresh.reset_index(drop=True))
    assert not retrained["completion"].reset_index(drop=True).equals(old["completion"].reset_index(drop=True))


@pytest.mark.e2e
def test_a_rebuilt_model_recomputes_probe_training_and_evaluation(cfg, tmp_path):
    study(cfg)
    probe_before, run = layout.probe_dir(cfg), layout.run_dir(cfg, "hard", 0)
    trained_before = json.loads((run / "manifest.json").read_text())["key"]
    base_before = json.loads((layout.eval_dir(cfg, "base") / "manifest.json").read_text())["key"]
    # rebuild the checkpoint behind the same path with other weights
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(cfg.model.path)
    for p in model.parameters():
        p.data.mul_(1.5)
    model.save_pretrained(cfg.model.path)
    with pytest.warns(UserWarning, match="model.fingerprint differ"):
        study(cfg)
    assert layout.probe_dir(cfg) != probe_before
    assert json.loads((run / "manifest.json").read_text())["key"] != trained_before
    assert json.loads((layout.eval_dir(cfg, "base") / "manifest.json").read_text())["key"] != base_before


@pytest.mark.e2e
def test_the_report_refuses_an_evaluation_older_than_its_run(cfg):
    study(cfg)
    manifest = layout.run_dir(cfg, "hard", 0) / "manifest.json"
    m = json.loads(manifest.read_text())
    m["key"]["train"]["learning_rate"] = 0.123  # as if retrained since it was evaluated
    artifacts.write_json(manifest, m)
    with pytest.raises(artifacts.ArtifactError, match=r"earlier training of run 'hard-seed0'.*04_evaluate"):
        analyze.report(cfg)


@pytest.mark.e2e
def test_an_unfinished_run_is_not_evaluated(cfg):
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    train.train_run(cfg, "hard", 0, progress=False)
    manifest = layout.run_dir(cfg, "hard", 0) / "manifest.json"
    m = json.loads(manifest.read_text())
    artifacts.write_json(manifest, {**m, "status": "running", "steps_done": 1})  # a killed train
    with pytest.raises(RuntimeError, match=r"not finished \(status 'running', 1 of its 2 steps: train.max_steps.*03_train"):
        evaluate.evaluate_run(cfg, "hard", 0, progress=False)


@pytest.mark.e2e
def test_a_damaged_probe_file_is_found_and_rebuilt(cfg):
    out = probe.run_probe(cfg, progress=False)
    good = pd.read_parquet(out / "prompts.parquet")
    (out / "prompts.parquet").write_bytes((out / "prompts.parquet").read_bytes()[:100])  # truncated
    with pytest.raises(artifacts.ArtifactError, match=r"prompts.parquet: damaged.*01_probe"):
        probe.read_prompts(cfg)
    probe.run_probe(cfg, progress=False)  # the manifest says complete; the checksum says otherwise
    pd.testing.assert_frame_equal(pd.read_parquet(out / "prompts.parquet"), good)


def test_selection_refuses_missing_p_hat_naming_the_prompts():
    prompts = pd.DataFrame({"id": ["a", "b", "c"], "p_hat": [0.5, float("nan"), 0.25], "tier": [1, 1, 2]})
    with pytest.raises(select.SelectionError, match=r"1 prompt\(s\) have no valid p_hat.*\['b'\]"):
        select.select(prompts, "hard", 1, seed=0)


def test_a_second_writer_of_a_run_is_refused_naming_the_holder(tmp_path):
    folder = tmp_path / "runs" / "hard-seed0"
    with artifacts.exclusive(folder):
        code = ("import sys; from diffgrpo.store import artifacts\n"
                "try:\n    artifacts.exclusive(sys.argv[1]).__enter__()\n"
                "except artifacts.FolderBusy as e:\n    print(e)\n")
        out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True).stdout
    assert f"another process (pid {os.getpid()}) is writing it" in out


def test_artifacts_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = artifacts.write_text(tmp_path / "x.txt", "hi")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.e2e
def test_a_damaged_finished_run_is_set_aside_and_trained_again(cfg):
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    run = train.train_run(cfg, "hard", 0, progress=False)
    good = pd.read_parquet(run / "groups.parquet")
    (run / "groups.parquet").write_bytes(b"not parquet")
    with pytest.warns(UserWarning, match=r"\['groups.parquet'\] damaged since the run finished"):
        train.train_run(cfg, "hard", 0, progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(run / "groups.parquet"), good)  # deterministic retrain
    assert len(list(run.parent.glob("hard-seed0.superseded-*"))) == 1
