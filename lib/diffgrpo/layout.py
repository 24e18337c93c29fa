"""Where every artifact of a study lives, derived from one root (``outputs/``).

    outputs/<study>/
      probe/<model>/<key>/      samples.parquet, prompts.parquet, one_sample.parquet, manifest.json
      select/<strategy>.parquet selections (prompt ids, p_hat, policy, seed) + summary.csv
      runs/<run_id>/            params.yaml, manifest.json, steps.parquet, groups.parquet,
                                checkpoints/checkpoint-<step>/ (LoRA adapters)
      eval/<run_id>/            samples.parquet, summary.parquet, tiers.parquet (run_id "base" for the base model)
      report/                   tables (CSV + markdown), figures (PNG), summary.json
      notebooks/                executed notebooks

``run_id`` is ``<strategy>-seed<seed>``. Paths inside manifests are relative to the study folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from .artifacts import outputs_root
from .data import generation_key, model_fingerprint, task_of
from .params import Config

BASE_RUN = "base"


def study_dir(cfg: Config) -> Path:
    return outputs_root() / cfg.study


def probe_key(cfg: Config, split: str | None = None) -> dict[str, Any]:
    """Everything that decides a probe's result: a probe is reused only when all match."""
    return {
        "model": {"name": cfg.model.name, "path": cfg.model.path, "gguf_file": cfg.model.gguf_file,
                  "dtype": cfg.model.dtype, "fingerprint": model_fingerprint(cfg)},
        "task": task_of(cfg).describe(),
        "source": cfg.dataset.source,
        "split": split or cfg.dataset.train_split,
        "pool_size": cfg.dataset.pool_size,
        "k": cfg.probe.k,
        "sampling": dataclasses.asdict(cfg.probe.sampling),
        "seed": cfg.probe.seed,
        **generation_key(cfg),
    }


def key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]


def probe_dir(cfg: Config) -> Path:
    key = probe_key(cfg)
    name = f"{cfg.dataset.task}-{key['split']}-k{cfg.probe.k}-{key_hash(key)}"
    return study_dir(cfg) / "probe" / cfg.model.name / name


def select_dir(cfg: Config) -> Path:
    return study_dir(cfg) / "select"


def selection_file(cfg: Config, strategy: str) -> Path:
    return select_dir(cfg) / f"{strategy}.parquet"


def run_id(strategy: str, seed: int) -> str:
    return f"{strategy}-seed{seed}"


def planned_runs(cfg: Config) -> list[tuple[str, int]]:
    """The study's (strategy, seed) runs: train.strategies (default: every selection) x train.seeds."""
    return [(s, seed) for s in (cfg.train.strategies or cfg.select.strategies) for seed in cfg.train.seeds]


def run_dir(cfg: Config, strategy: str, seed: int) -> Path:
    return study_dir(cfg) / "runs" / run_id(strategy, seed)


def eval_dir(cfg: Config, rid: str) -> Path:
    return study_dir(cfg) / "eval" / rid


def report_dir(cfg: Config) -> Path:
    return study_dir(cfg) / "report"


def notebooks_dir(cfg: Config) -> Path:
    return study_dir(cfg) / "notebooks"
