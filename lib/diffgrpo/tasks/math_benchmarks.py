"""The math benchmarks paper 002 reports besides MATH-500 (``math500``, in math.py): AIME 2024,
AMC 2023, Minerva-Math and OlympiadBench. Evaluation sets, so a "test" split only.

Each task declares where its rows live on the Hugging Face hub (:class:`Hub`: repo, config,
split) and which of the hub's columns hold the problem and the gold; docs/tasks.md lists them
with the sources they were read from. No PyPI package ships them, so there is no offline copy:
``source`` is the hub or a local file with the hub's columns.

- ``aime2024``: ``HuggingFaceH4/aime_2024`` (split "train": 30 rows, AIME 2024 I and II);
  ``problem``, ``answer`` (a string, "204"). An integer 0-999, scored as ``aime2025``.
- ``amc23``: ``math-ai/amc23`` (split "test": 40 rows, AMC 12 2023 A and B as the Qwen2.5-Math
  evaluation suite rewrote them, every answer a number); ``question``, ``answer`` (a number,
  "27.0" in the suite's file: read as 27). The completion's final number, as ``aime2025``.
- ``minerva_math``: ``math-ai/minervamath`` (split "test": 272 rows); ``question``, ``answer``
  (LaTeX: "1.6", "4.5e33"). math-verify, as ``math`` (e-notation read as a power of ten); the
  four golds math-verify misreads are rewritten, same values (``MinervaMath.GOLD_REWRITES``).
- ``olympiadbench``: ``Hothan/OlympiadBench``, config ``OE_TO_maths_en_COMP`` (open-ended,
  text-only, maths, English, competition; split "train"); ``question``, ``final_answer`` (a list
  holding one LaTeX string, "$\\frac{1}{2}$": the dollars are dropped). math-verify, as ``math``.
  Option ``single_answer_only=True`` keeps the rows whose ``is_multiple_answer`` is false (the
  default keeps every row, as the evaluation suites whose numbers 002 compares with do).

Ids are ``<task>/<row position in the source, 3 digits>``: a local file keeps them only if it
keeps the hub's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from diffgrpo.tasks import register
from diffgrpo.tasks.aime2025 import SYSTEM as AIME_SYSTEM
from diffgrpo.tasks.base import (NumericTask, Task, TaskError, load_hub, log, no_offline, normalize_number,
                                 require_columns, rows_from, validate_rows)
from diffgrpo.tasks.math import SYSTEM as MATH_SYSTEM, MathVerified


@dataclass(frozen=True)
class Hub:
    """Where a benchmark's rows are on the Hugging Face hub."""

    repo: str
    config: str | None
    split: str


class _Benchmark(Task):
    """One evaluation set from the hub: its rows, prompt and gold. The reward comes from the
    class it is mixed with: :class:`~diffgrpo.tasks.base.NumericTask` (a number) or
    :class:`~diffgrpo.tasks.math.MathVerified` (LaTeX, math-verify)."""

    splits = ("test",)
    hub: ClassVar[Hub]
    #: the hub's columns holding the problem and the gold answer
    question_column: ClassVar[str]
    answer_column: ClassVar[str]
    system: ClassVar[str] = MATH_SYSTEM
    #: whether the gold is a number (stored normalised: "27.0" -> "27")
    numeric: ClassVar[bool] = False

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        hub = self.hub
        raw, where = rows_from(source, self.name, hub=lambda: load_hub(hub.repo, hub.config, hub.split),
                               offline=lambda: no_offline(self.name))
        require_columns(raw, (self.question_column, self.answer_column, *self.required_columns()), where, self.name)
        raw = raw.reset_index(drop=True)
        keep = self.keep(raw, where)
        df = pd.DataFrame(
            {
                "id": [f"{self.name}/{i:03d}" for i in range(len(raw))],
                "prompt": [[{"role": "system", "content": self.system}, {"role": "user", "content": q}]
                           for q in raw[self.question_column]],
                "answer": [self._gold(v, where, i) for i, v in enumerate(raw[self.answer_column])],
                "tier": None,
                "question": raw[self.question_column],
            }
        )[keep]
        df.attrs["source"] = where
        return validate_rows(df, where)

    def required_columns(self) -> tuple[str, ...]:
        """Columns besides the problem and the gold that this task (with its options) reads."""
        return ()

    def keep(self, raw: pd.DataFrame, where: str) -> np.ndarray:
        """Which rows are in the set (all, unless an option says otherwise)."""
        return np.ones(len(raw), dtype=bool)

    def _gold(self, value: Any, where: str, i: int) -> str:
        """The gold as text: a list (OlympiadBench's ``final_answer``; an array when read through
        ``datasets``) joined by ", ", the dollars around it dropped; a number normalised."""
        if isinstance(value, (list, tuple, np.ndarray)):
            value = ", ".join(_unwrapped(v) for v in value)
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return ""  # validate_rows names the row
        text = _unwrapped(value)
        if not self.numeric:
            return text
        number = normalize_number(text)
        if number is None:
            raise TaskError(f"{where}: row {i + 1} (counting from 1): {self.name}'s {self.answer_column!r} is {value!r}, "
                            "not a number; its answers are numbers")
        return number


@register
class AIME2024(_Benchmark, NumericTask):
    """Columns: id, prompt, answer (the integer, as a string), tier (None), question."""

    name = "aime2024"
    hub = Hub("HuggingFaceH4/aime_2024", None, "train")
    question_column, answer_column = "problem", "answer"
    system = AIME_SYSTEM
    numeric = True
    prompt_tokens = 384  # as aime2025
    split_rows = {"test": 30}


@register
class AMC23(_Benchmark, NumericTask):
    """Columns: id, prompt, answer (the number, as a string), tier (None), question."""

    name = "amc23"
    hub = Hub("math-ai/amc23", None, "test")
    question_column, answer_column = "question", "answer"
    numeric = True
    prompt_tokens = 384  # the longest problems are ~250 tokens with the chat template
    split_rows = {"test": 40}


@register
class MinervaMath(_Benchmark, MathVerified):
    """Columns: id, prompt, answer (LaTeX), tier (None), question."""

    name = "minerva_math"
    hub = Hub("math-ai/minervamath", None, "test")
    question_column, answer_column = "question", "answer"
    prompt_tokens = 512  # up to ~1,100 characters of problem
    split_rows = {"test": 272}
    #: golds math-verify misreads, written the same value another way: it drops a trailing
    #: one-letter factor as a unit ("\\frac{1}{m} t" would take "\\frac{1}{m}" and refuse
    #: "\\frac{t}{m}") and does not read numpy (docs/tasks.md gives the source)
    GOLD_REWRITES = {
        "np.arcsin(10/13)": "\\arcsin(10/13)",
        "\\frac{37}{4} m": "\\frac{37 m}{4}",
        "\\frac{1}{m} t": "\\frac{t}{m}",
        "\\frac{1}{\\sqrt{2}}c": "\\frac{c}{\\sqrt{2}}",
    }

    def _gold(self, value: Any, where: str, i: int) -> str:
        text = super()._gold(value, where, i)
        return self.GOLD_REWRITES.get(text, text)


@register
class OlympiadBench(_Benchmark, MathVerified):
    """Option ``single_answer_only``. Columns: id, prompt, answer (LaTeX, dollars dropped),
    tier (None), question."""

    name = "olympiadbench"
    hub = Hub("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train")
    question_column, answer_column = "question", "final_answer"
    prompt_tokens = 768  # ARML relay and geometry problems run long
    split_rows = {"test": 674}

    def __init__(self, single_answer_only: bool = False) -> None:
        self.single_answer_only = bool(single_answer_only)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **({"single_answer_only": True} if self.single_answer_only else {})}

    def required_columns(self) -> tuple[str, ...]:
        return ("is_multiple_answer",) if self.single_answer_only else ()

    def keep(self, raw: pd.DataFrame, where: str) -> np.ndarray:
        if not self.single_answer_only:
            return super().keep(raw, where)
        multiple = raw["is_multiple_answer"].map(lambda v: str(v).strip().lower() in ("true", "1"))
        log.info("%s: %d of %d rows have several answers, left out (single_answer_only)", where, int(multiple.sum()),
                 len(raw))
        return ~multiple.to_numpy()


def _unwrapped(value: Any) -> str:
    """"$\\frac{1}{2}$" -> "\\frac{1}{2}": a gold without the dollars of inline math around it."""
    return str(value).strip().strip("$").strip()
