"""Stage 1: estimate each pool prompt's difficulty under the *base* model.

For every prompt of the training pool, K completions at temperature 1.0 (paper 003 section
2.2), each scored by the task's verifier; ``p_hat = n_correct / K``. Optionally the cheaper
one-sample probe of blog 001: one greedy completion per prompt, splitting the pool into
base-wrong and base-right.

A probe lives in a folder keyed by everything that decides its result (model, task and its
options, split, pool size, K, sampling settings, seed: see :func:`layout.probe_key`), so a
probe of one model is never reused to select data for another. It is resumable: completions
are written in chunks and an interrupted probe continues at the first missing chunk. On a CPU
``workers`` processes generate the chunks (each chunk is seeded by its index, so the probe is
the same with one process or several).

With ``probe.test`` the held-out test set is probed the same way, in a folder of its own
(``<task>-test-<split>-k<K>-<hash>``): the report then reads each test prompt's difficulty.

Files: ``samples.parquet`` (prompt_id, sample, completion, correct, num_tokens, finished),
``prompts.parquet`` (id, tier, k, n_correct, p_hat, mean_tokens, base_correct),
``one_sample.parquet`` and ``manifest.json``.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

import pandas as pd

from diffgrpo.tasks import splits
from diffgrpo.store import artifacts, layout
from diffgrpo import params
from diffgrpo.params import Config
from diffgrpo.models import devices
from diffgrpo.models.resumable_sampling import Helpers, cpu_helpers, load_generator, sample_and_score

log = logging.getLogger("diffgrpo.probe")


def per_prompt(rows: pd.DataFrame, samples: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per-prompt success rate from per-sample results, in pool order."""
    g = samples.groupby("prompt_id", sort=False)
    stats = pd.DataFrame({
        "k": g["correct"].size(),
        "n_correct": g["correct"].sum().astype(int),
        "mean_tokens": g["num_tokens"].mean(),
    })
    if (stats["k"] != k).any():
        bad = stats.index[stats["k"] != k][0]
        raise ValueError(f"probe: prompt {bad!r} has {stats.loc[bad, 'k']} samples, expected K={k}")
    out = rows[["id", "tier"]].merge(stats, left_on="id", right_index=True, how="left", validate="1:1")
    if out["k"].isna().any():
        raise ValueError(f"probe: no samples for prompt {out.loc[out['k'].isna(), 'id'].iloc[0]!r}")
    out["p_hat"] = out["n_correct"] / out["k"]
    return out


def run_probe(cfg: Config, progress: bool = True) -> Path:
    """Probe the pool (resuming if interrupted), and with ``probe.test`` the held-out test set
    too; return the pool's probe folder."""
    generator = functools.cache(lambda: load_generator(cfg, batch_size=cfg.probe.sampling.batch_size))  # one model
    # on a CPU, ``workers`` processes share the chunks (each chunk is seeded by its index)
    make = functools.partial(load_generator, cfg, batch_size=cfg.probe.sampling.batch_size)
    with Helpers(cpu_helpers(cfg), make) as helpers:
        if cfg.probe.test:
            with artifacts.exclusive(layout.probe_dir(cfg, "test")):
                _run_probe(cfg, layout.probe_dir(cfg, "test"), progress, "test", generator, helpers)
        out_dir = layout.probe_dir(cfg)
        with artifacts.exclusive(out_dir):
            return _run_probe(cfg, out_dir, progress, "pool", generator, helpers)


def _run_probe(cfg: Config, out_dir: Path, progress: bool, role: str, generator, helpers: Helpers) -> Path:
    manifest = out_dir / layout.MANIFEST
    try:
        m = artifacts.read_manifest(manifest, "01_probe")
    except artifacts.ArtifactError as err:  # its chunks are keyed: the probe is rebuilt from them
        log.warning("%s; rebuilding the probe from its chunks", err)
        manifest.replace(manifest.with_name(f"{layout.MANIFEST}.damaged"))
        m = None
    if m is not None and m.get("complete"):
        bad = artifacts.damaged(out_dir, m)
        if not bad:
            return out_dir
        log.warning("%s: %s damaged since the probe finished; rebuilding from its chunks", out_dir, bad)
        manifest.unlink()
    t0, cpu0 = time.perf_counter(), time.process_time()
    key = layout.probe_key(cfg, role)
    rows = splits.load_pool(cfg) if role == "pool" else splits.load_test(cfg)
    one_sample = cfg.probe.one_sample and role == "pool"
    task = splits.task_of(cfg)
    gen = generator()
    s = cfg.probe.sampling
    samples = sample_and_score(
        gen, task, rows, n=cfg.probe.k, temperature=s.temperature, top_p=s.top_p,
        max_new_tokens=s.max_new_tokens, seed=cfg.probe.seed, work_dir=out_dir / "work" / "samples",
        key=key, progress=progress, desc=f"probe K={cfg.probe.k}" + ("" if role == "pool" else " (test set)"),
        helpers=helpers,
    )
    prompts = per_prompt(rows, samples, cfg.probe.k)
    if one_sample:
        one = sample_and_score(
            gen, task, rows, n=1, temperature=0.0, top_p=1.0, max_new_tokens=s.max_new_tokens,
            seed=cfg.probe.seed, work_dir=out_dir / "work" / "one_sample", key=key,
            progress=progress, desc="one-sample probe (greedy)", helpers=helpers,
        )
        artifacts.write_parquet(out_dir / layout.ONE_SAMPLE, one)
        prompts = prompts.merge(one[["prompt_id", "correct"]].rename(
            columns={"prompt_id": "id", "correct": "base_correct"}), on="id", how="left")
        prompts["base_correct"] = prompts["base_correct"].astype(bool)
    artifacts.write_parquet(out_dir / layout.SAMPLES, samples)
    artifacts.write_parquet(out_dir / layout.PROMPTS, prompts)
    artifacts.write_text(out_dir / layout.PARAMS, params.dump(cfg))
    files = [layout.SAMPLES, layout.PROMPTS] + ([layout.ONE_SAMPLE] if one_sample else [])
    artifacts.write_json(manifest, {
        "complete": True, "key": key, "role": role, "n_prompts": len(prompts), "k": cfg.probe.k,
        "mean_p_hat": round(float(prompts["p_hat"].mean()), 4), "files": files,
        "seconds": _seconds(cfg, t0, cpu0),
        "sha256": artifacts.digests(out_dir, files),
        "peak_memory": devices.peak_memory(),  # this process's GPU peaks (None: CPU)
    })
    return out_dir


def _seconds(cfg: Config, t0: float, cpu0: float) -> dict:
    """The session that finished the probe: wall, CPU (this process) and GPU seconds (wall on a
    cuda device; 0 on a CPU), for the compute ledger (diffgrpo.train.ledger). A probe resumed from
    chunks counts the finishing session's alone."""
    wall = time.perf_counter() - t0
    return {"wall": round(wall, 1), "cpu": round(time.process_time() - cpu0, 1),
            "gpu": round(wall if cfg.model.device == "cuda" else 0.0, 1)}


def read_prompts(cfg: Config) -> pd.DataFrame:
    """The per-prompt probe results for this config; a clear error when there are none."""
    path = layout.probe_dir(cfg) / layout.PROMPTS
    if not path.exists():
        raise layout.NotRunYet(
            f"{path}: no probe for model {cfg.model.name!r} on {cfg.dataset.task!r} with these settings; "
            "run the probe stage (01_probe) first"
        )
    return artifacts.read_parquet(path, "01_probe")


def read_test_prompts(cfg: Config) -> pd.DataFrame | None:
    """The base model's per-prompt success rate on the held-out test set (``probe.test``), or
    None when the study does not probe it."""
    if not cfg.probe.test:
        return None
    path = layout.probe_dir(cfg, "test") / layout.PROMPTS
    if not path.exists():
        raise layout.NotRunYet(f"{path}: probe.test is on but the test set is not probed yet; run the probe stage "
                                "(01_probe) first")
    return artifacts.read_parquet(path, "01_probe")


def read_samples(cfg: Config) -> pd.DataFrame:
    return artifacts.read_parquet(layout.probe_dir(cfg) / layout.SAMPLES, "01_probe")


def tier_table(prompts: pd.DataFrame) -> pd.DataFrame:
    """Mean p_hat (the sampled pass rate) per tier, with the share of all-wrong and all-right prompts."""
    g = prompts.groupby("tier", dropna=False)
    return pd.DataFrame({
        "n_prompts": g.size(),
        "mean_p_hat": g["p_hat"].mean(),
        "all_wrong": g["p_hat"].apply(lambda p: (p == 0).mean()),
        "all_right": g["p_hat"].apply(lambda p: (p == 1).mean()),
    }).round(4).reset_index()


def has_tiers(prompts: pd.DataFrame) -> bool:
    """Whether the task gives its rows difficulty tiers (GSM8K and AIME do not)."""
    return bool(prompts["tier"].notna().any())
