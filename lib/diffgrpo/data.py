"""The rows and the model a study's params point at, resolved the same way by every stage."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import tasks
from .params import Config


def task_of(cfg: Config) -> tasks.Task:
    return tasks.get(cfg.dataset.task, **cfg.dataset.task_options)


def load_rows(cfg: Config, split: str) -> pd.DataFrame:
    """The task's rows of ``split``, cut to ``pool_size`` (train split) or ``test_size`` (test split).

    The cut is a sample seeded by the study's ``seed``, kept in source order: sources list
    their rows grouped (MATH by subject, BBH by number of objects), so the first N rows would
    be one subject or one tier.
    """
    df = task_of(cfg).load(split, source=cfg.dataset.source)
    limit = cfg.dataset.pool_size if split == cfg.dataset.train_split else cfg.dataset.test_size
    if limit is not None:
        if limit > len(df):
            raise ValueError(
                f"dataset.{'pool_size' if split == cfg.dataset.train_split else 'test_size'} = {limit} "
                f"but split {split!r} of task {cfg.dataset.task!r} has only {len(df)} rows"
            )
        df = df.sample(n=limit, random_state=cfg.seed).sort_index().reset_index(drop=True)
    return df


def model_path(cfg: Config) -> Path | str:
    """``model.path`` with ``embedded`` resolved to the packaged checkpoint."""
    if cfg.model.path == "embedded":
        from .embedded import default_path

        return default_path()
    return cfg.model.path
