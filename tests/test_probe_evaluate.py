"""Probe and evaluation: per-prompt statistics, unbiased pass@k, resuming after an interruption."""

import functools
import logging
import re
import time
from math import comb

import numpy as np
import pandas as pd
import pytest

from diffgrpo.models import resolve
from diffgrpo.tasks import splits
from diffgrpo import evaluate, params, probe
from diffgrpo.store import layout
from diffgrpo.models import resumable_sampling as sampling
from diffgrpo.models.generation import Completion
from diffgrpo.tasks import get


class ScriptedGenerator:
    """Answers the shuffled-objects question right for the first ``right`` samples of a
    prompt whose tier is even, wrong otherwise; can fail after ``fail_after`` calls."""

    def __init__(self, task, rows, fail_after=None):
        self.task, self.calls, self.fail_after = task, 0, fail_after
        self.by_prompt = {str(p): (a, t) for p, a, t in zip(rows["prompt"], rows["answer"], rows["tier"])}

    def generate(self, prompts, n, temperature, top_p, max_new_tokens, seed, progress, desc="g"):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        out = []
        for p in prompts:
            answer, tier = self.by_prompt[str(p)]
            right = n // 2 if tier % 2 == 0 else 0
            out.append([Completion(f"Answer: {answer if j < right else 'Nobody'}", 3, True) for j in range(n)])
        return out


def test_pass_at_k_matches_the_definition():
    for n, c, k in [(8, 0, 1), (8, 3, 1), (8, 3, 4), (8, 8, 8), (10, 1, 5)]:
        brute = 1 - comb(n - c, k) / comb(n, k) if n - c >= k else 1.0
        assert evaluate.pass_at_k(n, c, k) == pytest.approx(brute)
    assert evaluate.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    with pytest.raises(ValueError):
        evaluate.pass_at_k(4, 1, 5)


def test_score_table_and_summary_per_tier():
    rows = pd.DataFrame({"id": ["a", "b"], "tier": [1, 2]})
    samples = pd.DataFrame({
        "prompt_id": ["a", "b"] + ["a"] * 4 + ["b"] * 4, "mode": ["greedy"] * 2 + ["sampled"] * 8,
        "correct": [1.0, 0.0, 1, 1, 0, 0, 0, 0, 0, 1],
    })
    table = evaluate.score_table(samples, rows, [1, 4])
    assert list(table["greedy_acc"]) == [1.0, 0.0]
    assert list(table["pass@1"]) == [0.5, 0.25]
    assert list(table["pass@4"]) == [1.0, 1.0]
    overall, tiers = evaluate.summarize(table)
    assert overall == {"greedy_acc": 0.5, "pass@1": 0.375, "pass@4": 1.0, "n_prompts": 2}
    assert list(tiers["tier"]) == [1, 2] and list(tiers["pass@1"]) == [0.5, 0.25]


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    # workers 1: the scripted generators below live in this process, a probe's helper would load the model
    return params.load("tiny", overrides={"dataset.pool_size": 40, "workers": 1})


def _patch_generator(monkeypatch, module, gen):
    monkeypatch.setattr(resolve, "load_model", lambda *a, **k: (None, None))
    # sampling.load_generator builds the HF backend's generator (diffgrpo.models.generation.HFGenerator)
    monkeypatch.setattr(sampling, "HFGenerator", lambda *a, **k: gen)


def test_probe_resumes_where_it_stopped(cfg, monkeypatch):

    rows = splits.load_pool(cfg)
    task = get(cfg.dataset.task, **cfg.dataset.task_options)
    monkeypatch.setenv("DIFFGRPO_PROGRESS", "off")  # no bar in the test log
    # chunks of 16 prompts: the K-sample pass has 3 chunks; fail during the second
    monkeypatch.setattr(probe, "sample_and_score",
                        lambda *a, **k: sampling.sample_and_score(*a, **{**k, "chunk_size": 16}))
    flaky = ScriptedGenerator(task, rows, fail_after=1)
    _patch_generator(monkeypatch, probe, flaky)
    with pytest.raises(KeyboardInterrupt):
        probe.run_probe(cfg, progress=False)
    work = layout.probe_dir(cfg) / "work" / "samples"
    assert len(list(work.glob("part-*.parquet"))) == 1
    assert not (layout.probe_dir(cfg) / "prompts.parquet").exists()

    resumed = ScriptedGenerator(task, rows)
    _patch_generator(monkeypatch, probe, resumed)
    probe.run_probe(cfg, progress=False)
    assert resumed.calls == 2 + 3  # the 2 missing K-sample chunks, then the one-sample pass
    prompts = probe.read_prompts(cfg)
    assert len(prompts) == 40 and (prompts["k"] == cfg.probe.k).all()
    expected = np.where(prompts["tier"] % 2 == 0, (cfg.probe.k // 2) / cfg.probe.k, 0.0)
    assert np.allclose(prompts["p_hat"], expected)
    assert not prompts.loc[prompts["tier"] % 2 == 1, "base_correct"].any()
    # a finished probe is not run again
    _patch_generator(monkeypatch, probe, ScriptedGenerator(task, rows, fail_after=0))
    probe.run_probe(cfg, progress=False)


class WaitsForAHelper:
    """The calling process's generator: its first chunk waits (on a state, up to two minutes)
    until a helper process has written chunk 1, so the helper's work is in the result."""

    def __init__(self, inner, part):
        self.inner, self.part = inner, part

    def generate(self, *args, **kwargs):
        deadline = time.monotonic() + 120
        while not self.part.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.part.exists(), "the helper process never wrote a chunk"
        return self.inner.generate(*args, **kwargs)


@pytest.mark.e2e  # a helper process: its interpreter, imports and model (about 10 s)
def test_chunks_shared_with_a_helper_process_sample_what_one_process_samples(cfg, tmp_path, caplog, capsys, monkeypatch):
    """The probe on a CPU with workers: 2 (sampling.Helpers): a chunk is seeded by its index, so
    whichever process generates it the samples are the same, bit for bit."""
    rows, task = splits.load_pool(cfg).iloc[:20], splits.task_of(cfg)
    make = functools.partial(sampling.load_generator, cfg, batch_size=16)
    kw = dict(n=4, temperature=1.0, top_p=1.0, max_new_tokens=48, seed=3, key={"test": 1}, chunk_size=4,
              progress=False)
    alone = sampling.sample_and_score(make(), task, rows, work_dir=tmp_path / "alone", **kw)
    shared_dir = tmp_path / "shared"
    monkeypatch.setenv("DIFFGRPO_PROGRESS", "record")  # as in a study's notebook
    with caplog.at_level(logging.INFO, "diffgrpo.sampling"), sampling.Helpers(1, make) as helpers:
        shared = sampling.sample_and_score(WaitsForAHelper(make(), shared_dir / "part-00001.parquet"), task, rows,
                                           work_dir=shared_dir, helpers=helpers, **{**kw, "progress": True})
    pd.testing.assert_frame_equal(alone, shared)
    assert re.search(r"sample: 20/20 prompt \(100%\) in \d+s", capsys.readouterr().out)  # the helpers' chunks counted
    assert len(alone) == 20 * 4 and alone["completion"].nunique() > 10
    by_helper = int(re.search(r"(\d+) of 5 chunks generated by 1 helper", caplog.text).group(1))
    assert 1 <= by_helper <= 4  # chunk 0 is the caller's
    assert not list(shared_dir.glob("*.claim"))


def _no_model():
    raise RuntimeError("no model here")


@pytest.mark.e2e  # a helper process starts (its imports) and fails
def test_a_helper_that_fails_leaves_its_chunks_to_the_caller(cfg, tmp_path, caplog):
    rows, task = splits.load_pool(cfg).iloc[:12], splits.task_of(cfg)
    gen = ScriptedGenerator(task, rows)
    with caplog.at_level(logging.WARNING, "diffgrpo.sampling"), sampling.Helpers(1, _no_model) as helpers:
        out = sampling.sample_and_score(gen, task, rows, n=2, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0,
                                        work_dir=tmp_path, key={}, chunk_size=4, progress=False, helpers=helpers)
    assert len(out) == 24 and gen.calls == 3  # every chunk generated here
    assert "a sampling helper failed" in caplog.text


def test_the_probe_shares_its_chunks_on_a_cpu_only():
    cpu = params.load("embedded")
    assert cpu.workers == 2 and sampling.cpu_helpers(cpu) == 1
    assert sampling.cpu_helpers(params.load("embedded", overrides={"workers": 1})) == 0
    assert sampling.cpu_helpers(params.load("gpu_smoke", overrides={"workers": 2})) == 0  # one card
    assert sampling.cpu_helpers(params.load("embedded", overrides={"generation.backend": "vllm"})) == 0


def test_probe_is_keyed_by_model(cfg):
    other = cfg.replace(**{"model.name": "other"})
    assert layout.probe_dir(other) != layout.probe_dir(cfg)
    assert layout.probe_dir(cfg.replace(**{"probe.k": 5})) != layout.probe_dir(cfg)
    with pytest.raises(FileNotFoundError, match="no probe for model 'other'"):
        probe.read_prompts(other)


def test_per_prompt_refuses_a_short_probe():
    rows = pd.DataFrame({"id": ["a"], "tier": [1]})
    samples = pd.DataFrame({"prompt_id": ["a"] * 3, "correct": [1.0, 0, 0], "num_tokens": [1, 2, 3]})
    with pytest.raises(ValueError, match="expected K=4"):
        probe.per_prompt(rows, samples, 4)


def test_evaluation_reuses_written_chunks_without_loading_the_model(cfg, monkeypatch):

    rows = splits.load_test(cfg)
    task = get(cfg.dataset.task, **cfg.dataset.task_options)
    monkeypatch.setenv("DIFFGRPO_PROGRESS", "off")  # no bar in the test log
    _patch_generator(monkeypatch, evaluate, ScriptedGenerator(task, rows))
    out = evaluate.evaluate_base(cfg, progress=False)
    first = pd.read_parquet(out / "summary.parquet")
    # as if interrupted after the last chunk, before the run's files: the rerun reads the
    # chunks and must not load the model (here, loading fails)
    (out / "manifest.json").unlink()
    (out / "summary.parquet").unlink()

    def no_load(*a, **k):
        raise AssertionError("the model was loaded although every chunk was on disk")

    monkeypatch.setattr(resolve, "load_model", no_load)
    out = evaluate.evaluate_base(cfg, progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "summary.parquet"), first)
    # a missing chunk does load it
    next((out / "work").rglob("part-*.parquet")).unlink()
    (out / "manifest.json").unlink()
    with pytest.raises(AssertionError, match="the model was loaded"):
        evaluate.evaluate_base(cfg, progress=False)


def test_an_evaluation_set_is_scored_on_its_own_rows_with_its_own_settings(cfg, monkeypatch):
    """An OOD set (more swaps than training saw) scores the base model on its own rows, in
    eval-<set>/, with its own pass@k; the held-out test set's files stay where they were."""

    cfg = cfg.replace(**{"evaluate.sets": [{"name": "ood", "task_options": {"people": [3, 5], "swaps": [9, 10]},
                                            "size": 6, "n_samples": 2, "pass_k": [1, 2]}]})
    ood = cfg.for_eval_set("ood")
    rows = pd.concat([splits.load_test(cfg), splits.load_test(ood)], ignore_index=True)
    task = get(cfg.dataset.task, **cfg.dataset.task_options)
    monkeypatch.setenv("DIFFGRPO_PROGRESS", "off")  # no bar in the test log
    _patch_generator(monkeypatch, evaluate, ScriptedGenerator(task, rows))
    test_dir, ood_dir = evaluate.evaluate_base(cfg, progress=False), evaluate.evaluate_base(cfg, False, "ood")
    assert test_dir == layout.eval_dir(cfg, "base") and ood_dir.parent.name == "eval-ood"
    test, out = pd.read_parquet(test_dir / "summary.parquet"), pd.read_parquet(ood_dir / "summary.parquet")
    assert test["n_prompts"].iloc[0] == cfg.dataset.test_size and "pass@4" in test
    assert out["n_prompts"].iloc[0] == 6 and "pass@2" in out and "pass@4" not in out
    assert set(pd.read_parquet(ood_dir / "tiers.parquet")["tier"]) <= {9, 10}
    assert evaluate.read_summary(cfg, "base", eval_set="ood").equals(out)
