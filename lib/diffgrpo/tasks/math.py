"""MATH (Hendrycks et al.) and its 500-problem test subset MATH-500.

- ``math``: hub ``EleutherAI/hendrycks_math``, all seven subject configs concatenated in
  their alphabetical order (train 7,500 / test 5,000); columns ``problem``, ``level``
  ("Level 1".."Level 5"), ``type``, ``solution``. The gold is the last ``\\boxed{}`` of the
  solution; the tier is the level (None for the few "Level ?" rows).
- ``math500``: hub ``HuggingFaceH4/MATH-500``, test only; columns ``problem``, ``solution``,
  ``answer``, ``subject``, ``level`` (an int), ``unique_id``.

No PyPI package ships these, so there is no offline copy: ``source`` must be the hub or a
local .jsonl/.parquet file in the hub's schema.

Answers are compared with math-verify, which treats ``\\frac{1}{2}``, ``0.5`` and ``1/2`` as
equal. Its timeouts use ``signal.alarm``, which raises off the main thread, so there the
comparison runs without one; any error or timeout scores 0.

Option ``numeric_only=True`` keeps the problems whose gold is a plain number (an integer or
a decimal, thousands separators allowed): paper 000's numeric-answer subset, on which a
GSM8K-trained model can be scored. That subset is scored with the one numeric extractor every
numeric task uses (:func:`~diffgrpo.tasks.base.extract_number`: ``#### N``, ``\\boxed{N}``,
"the answer is N", else the last number), not MATH's (``\\boxed`` or "answer is" only): a
GSM8K-trained arm learns to end with ``#### N``, and MATH's extractor would score its right
answers 0, biasing paper 000's transfer comparison against it (issue 29).
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

import pandas as pd
from math_verify import parse, verify
from math_verify.errors import TimeoutException

from diffgrpo.tasks import register
from diffgrpo.tasks.base import (Task, answer_is, extract_number, last_boxed, load_hub, log, no_offline, normalize_number,
                                 require_columns, rows_from, validate_rows)

SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
#: seconds math-verify may spend parsing or comparing one answer (main thread only)
TIMEOUT_S = 5

SYSTEM = "Solve the math problem. Think step by step, then put the final answer in \\boxed{}."


class MathVerified(Task):
    """A task whose gold is a LaTeX expression, compared with the completion's stated answer by
    math-verify (math, math500, and paper 002's minerva_math and olympiadbench)."""

    def extract(self, completion: str) -> str | None:
        return final_answer(completion)

    def score(self, completion: str, answer: str) -> float:
        got = self.extract(completion)
        return float(got is not None and math_equal(answer, got))


class _MathTask(MathVerified):
    """The reward and the numeric subset shared by ``math`` and ``math500``."""

    def __init__(self, numeric_only: bool = False) -> None:
        self.numeric_only = bool(numeric_only)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "numeric_only": self.numeric_only} | (
            {"extractor": "numeric"} if self.numeric_only else {})

    def extract(self, completion: str) -> str | None:
        """The last ``\\boxed{}`` content, else what follows the last "answer is"; on the numeric
        subset, the numeric tasks' final number (module docstring)."""
        return extract_number(completion) if self.numeric_only else super().extract(completion)

    def score(self, completion: str, answer: str) -> float:
        if self.numeric_only:
            got = self.extract(completion)
            return float(got is not None and got == normalize_number(answer))
        return super().score(completion, answer)

    def _finish(self, df: pd.DataFrame, where: str) -> pd.DataFrame:
        if self.numeric_only:
            df = df[df["answer"].map(is_plain_number)]
        df.attrs["source"] = where
        return validate_rows(df, where)


@register
class MATH(_MathTask):
    """Columns: id (``math/<split>/<subject>/<position in subject, 4 digits>``), prompt,
    answer (the solution's last boxed content), tier (level 1-5 or None), problem, level,
    type, solution."""

    name = "math"
    prompt_tokens = 512  # problems run to ~400 tokens with the chat template
    split_rows = {"train": 7500, "test": 5000}  # the dataset card

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        raw, where = rows_from(source, self.name, hub=lambda: _hub_math(split), offline=lambda: no_offline(self.name))
        require_columns(raw, ("problem", "level", "type", "solution"), where, self.name)
        raw = raw.assign(answer=raw["solution"].map(last_boxed))
        lacking = raw["answer"].isna()
        if lacking.any():
            log.warning("%s: %d solution(s) without a \\boxed{} answer left out", where, int(lacking.sum()))
        subject = raw["type"].map(_slug)
        ids = [f"math/{split}/{s}/{k:04d}" for s, k in zip(subject, raw.groupby(subject).cumcount())]
        df = pd.DataFrame(
            {
                "id": ids,
                "prompt": raw["problem"].map(_prompt),
                "answer": raw["answer"],
                "tier": pd.Series([_level(v) for v in raw["level"]], dtype=object),
                "problem": raw["problem"],
                "level": raw["level"],
                "type": raw["type"],
                "solution": raw["solution"],
            }
        )
        return self._finish(df[~lacking.to_numpy()], where)


@register
class MATH500(_MathTask):
    """Columns: id (``math500/<unique_id without .json>``, e.g. "math500/test/algebra/1035"),
    prompt, answer, tier (level 1-5), problem, level, subject, solution."""

    name = "math500"
    splits = ("test",)
    prompt_tokens = 512  # MATH's problems
    split_rows = {"test": 500}

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        raw, where = rows_from(
            source,
            self.name,
            hub=lambda: load_hub("HuggingFaceH4/MATH-500", None, "test"),
            offline=lambda: no_offline(self.name),
        )
        require_columns(raw, ("problem", "answer", "level", "subject", "unique_id"), where, self.name)
        df = pd.DataFrame(
            {
                "id": ["math500/" + str(u).removesuffix(".json") for u in raw["unique_id"]],
                "prompt": raw["problem"].map(_prompt),
                "answer": raw["answer"].astype(str),
                "tier": pd.Series([_level(v) for v in raw["level"]], dtype=object),
                "problem": raw["problem"],
                "level": raw["level"],
                "subject": raw["subject"],
                "solution": raw.get("solution"),
            }
        )
        return self._finish(df, where)


def final_answer(completion: str) -> str | None:
    """A completion's stated answer for math-verify: the last ``\\boxed{}`` content, else what
    follows the last "answer is" (no last-number fallback: an expression has no "last number")."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    stated = (answer_is(completion) or "").strip().rstrip(".").strip("$ ")
    return stated or None


def math_equal(gold: str, given: str) -> bool:
    """Whether math-verify finds ``given`` equal to ``gold``; False on any error or timeout.

    A number in e-notation ("4.5e33", a form Minerva-Math's golds use) is rewritten as
    ``4.5 \\times 10^{33}`` first, on both sides: math-verify reads the ``e`` as Euler's number."""
    timeout = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    gold, given = _e_notation(gold), _e_notation(given)
    try:
        expected = _parsed(gold, timeout)
        got = parse(f"\\boxed{{{given}}}", parsing_timeout=timeout)
        return bool(expected and got and verify(list(expected), got, timeout_seconds=timeout))
    except (Exception, TimeoutException):
        return False


@functools.lru_cache(maxsize=4096)
def _parsed(gold: str, timeout: int | None) -> tuple:
    """Golds are parsed once: every one is compared with many completions."""
    return tuple(parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout))


_E_NOTATION = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d+)\s*")


def _e_notation(text: str) -> str:
    """"4.5e33" -> "4.5 \\times 10^{33}"; anything that is not one such number is left as it is."""
    found = _E_NOTATION.fullmatch(text)
    return f"{found.group(1)} \\times 10^{{{int(found.group(2))}}}" if found else text


def is_plain_number(answer: str) -> bool:
    """Whether a gold is an integer or a decimal ("12", "-3", "0.25", "1,\\!000", "\\$18")."""
    text = answer.replace("\\!", "").replace("{,}", ",").replace("\\$", "").replace("$", "").strip()
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    return re.fullmatch(r"-?\d+(?:\.\d+)?", text) is not None


def _level(value: Any) -> int | None:
    """Tier of a level written "Level 3" (MATH) or 3 (MATH-500); None for "Level ?"."""
    found = re.search(r"\d+", str(value))
    return int(found.group()) if found else None


def _slug(subject: str) -> str:
    """"Counting & Probability" -> "counting_and_probability", the hub's config name."""
    return re.sub(r"\W+", "_", subject.lower().replace("&", "and")).strip("_")


def _prompt(problem: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": problem}]


def _hub_math(split: str) -> pd.DataFrame:
    return pd.concat([load_hub("EleutherAI/hendrycks_math", s, split) for s in SUBJECTS], ignore_index=True)


