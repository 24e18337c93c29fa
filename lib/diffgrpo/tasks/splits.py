"""The rows a study trains and tests on: its task's data, cut into the pool and the held-out set.

Every stage gets its rows here (the probe the pool, the evaluation the held-out set, training
its selection of the pool), so they are cut the same way, seeded by the study's ``seed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from diffgrpo import tasks

if TYPE_CHECKING:
    from diffgrpo.params import Config


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
    if role == "test" and not same and d.source not in (None, "hub", "offline") and d.train_split in task_of(cfg).splits:
        # (a test-only task, an evaluation set such as aime2024, has no train split to share rows with)
        _check_disjoint(df, task_of(cfg).load(d.train_split, source=d.source), d.source)
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


def _check_disjoint(test: pd.DataFrame, train: pd.DataFrame, source: str) -> None:
    """One local file is both splits for a task that does not split it itself (GSM8K, MATH):
    then the pool and the held-out set would share prompts. Refuse, saying what to set."""
    shared = set(test["prompt"].map(str)) & set(train["prompt"].map(str))
    if shared:
        example = test.loc[test["prompt"].map(str).isin(shared), "id"].iloc[0]
        raise ValueError(f"dataset.source {source}: the train and test splits read from this file share "
                         f"{len(shared)} prompt(s) (e.g. {example!r}), so the held-out set would not be "
                         "held out; set dataset.train_split equal to dataset.test_split, and the pool and "
                         "the test set are cut from the file without overlap")
