"""What every task provides: its rows, its prompt, its answer extraction and its verifier.

A task's ``load`` returns a :class:`pandas.DataFrame` with at least these columns:

- ``id``: a string, stable across runs and machines (derived from the source and the row's
  position or content, never from a random draw at load time);
- ``prompt``: chat messages, a list of ``{"role": ..., "content": ...}`` dicts;
- ``answer``: the gold answer as a string;
- ``tier``: the difficulty tier as an int, or ``None`` where the task has none.

Extra columns a task finds useful (``level``, ``type``, ...) may follow.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import pandas as pd

REQUIRED_COLUMNS = ("id", "prompt", "answer", "tier")
SOURCES = ("hub", "offline")


class TaskError(ValueError):
    """Bad task input: an unknown split or source, a malformed row, a missing file."""


class Task(abc.ABC):
    """One dataset with its prompt format and its reward."""

    name: ClassVar[str]
    #: splits this task can load
    splits: ClassVar[tuple[str, ...]] = ("train", "test")

    def __init__(self, **options: Any) -> None:
        if options:
            raise TaskError(f"task {self.name!r} takes no options, got {sorted(options)}")

    # ---- data -----------------------------------------------------------------------
    @abc.abstractmethod
    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        """Rows of ``split``. ``source``: "hub", "offline", a path to a local file in the
        hub's schema, or None (the hub where reachable, else offline; says which)."""

    # ---- reward ---------------------------------------------------------------------
    @abc.abstractmethod
    def extract(self, completion: str) -> str | None:
        """The final answer a completion states, normalised, or None."""

    def score(self, completion: str, answer: str) -> float:
        """1.0 when the completion's final answer matches the gold answer, else 0.0."""
        got = self.extract(completion)
        return float(got is not None and got == self.normalize_gold(answer))

    def normalize_gold(self, answer: str) -> str:
        """The gold answer in the form :meth:`extract` returns. Identity by default."""
        return answer

    # ---- helpers --------------------------------------------------------------------
    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise TaskError(f"task {self.name!r} has no split {split!r}; it has {list(self.splits)}")

    def describe(self) -> dict[str, Any]:
        """Options that define this task's rows and prompts (recorded with every artifact)."""
        return {"name": self.name}


def validate_rows(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """Check the columns every stage relies on; ``where`` names the file or source."""
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise TaskError(f"{where}: rows lack column(s) {missing}")
    dup = df["id"][df["id"].duplicated()]
    if len(dup):
        raise TaskError(f"{where}: duplicate ids, e.g. {dup.iloc[0]!r}")
    return df.reset_index(drop=True)
