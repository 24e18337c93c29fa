"""Arithmetic: procedural integer expressions from reasoning-gym, with a difficulty knob.

A cheap stand-in for GSM-style data with known tiers: reasoning-gym's ``basic_arithmetic``
generator (+, -, *, exact /, parentheses, negative numbers), whose answers are integers.
The tier sets the expression's size:

    tier   1  2  3  4  5
    terms  2  3  3  4  5
    digits 1  1  2  2  3

Rows are deterministic from ``seed``: each (split, tier) has its own generator seed, a split
never repeats an expression, and the test split skips every expression the train split holds.
Ids hash the expression (``arithmetic/<tier>/<12 hex>``), so they stay stable whatever the
sizes asked for. The only source is generation: ``source`` must be None or "offline".
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import pandas as pd
import reasoning_gym

from diffgrpo.tasks import register
from diffgrpo.tasks.base import Task, TaskError, extract_number, normalize_number, validate_rows

#: tier -> (terms, digits per number)
TIERS = {1: (2, 1), 2: (3, 1), 3: (3, 2), 4: (4, 2), 5: (5, 3)}
SPLITS = ("train", "test")
#: draws allowed per wanted row before a tier is declared too small (tier 1 repeats itself often)
MAX_DRAWS_PER_ROW = 20

SYSTEM = 'Compute the result. Think step by step, then write the final answer on the last line as "#### N".'


@register
class Arithmetic(Task):
    """Options: ``tiers`` as an inclusive ``[min, max]`` range of 1-5 (default all),
    ``train_size`` and ``test_size`` rows per tier, ``seed``. Columns: id, prompt, answer
    (an integer), tier, question, expression."""

    name = "arithmetic"
    prompt_tokens = 64  # one short expression; the plan reads the sizes from the options

    def __init__(
        self, tiers: Sequence[int] = (1, 5), train_size: int = 500, test_size: int = 100, seed: int = 0
    ) -> None:
        low, high = tiers
        if not (min(TIERS) <= low <= high <= max(TIERS)):
            raise TaskError(f"arithmetic: tiers must be a range [min, max] within 1-5, got {tiers!r}")
        self.tiers = (int(low), int(high))
        self.sizes = {"train": int(train_size), "test": int(test_size)}
        self.seed = int(seed)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tiers": list(self.tiers),
            "train_size": self.sizes["train"],
            "test_size": self.sizes["test"],
            "seed": self.seed,
        }

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        if source not in (None, "offline"):
            raise TaskError(f"arithmetic: rows are generated; source must be None or 'offline', got {source!r}")
        rows = []
        for tier in range(self.tiers[0], self.tiers[1] + 1):
            taken = set(self._draw("train", tier)) if split == "test" else set()
            rows += self._draw(split, tier, skip=taken).values()
        df = pd.DataFrame(rows)
        df.attrs["source"] = "generated"
        return validate_rows(df, f"arithmetic {split}")

    def extract(self, completion: str) -> str | None:
        return extract_number(completion)

    def normalize_gold(self, answer: str) -> str:
        return normalize_number(answer)

    def _draw(self, split: str, tier: int, skip: set[str] = frozenset()) -> dict[str, dict[str, Any]]:
        """``sizes[split]`` rows of ``tier`` by id, distinct and outside ``skip``."""
        terms, digits = TIERS[tier]
        size = self.sizes[split]
        generator = reasoning_gym.create_dataset(
            "basic_arithmetic",
            size=size * MAX_DRAWS_PER_ROW,
            seed=self.seed * 1000 + tier * 10 + SPLITS.index(split),
            min_terms=terms,
            max_terms=terms,
            min_digits=digits,
            max_digits=digits,
        )
        rows: dict[str, dict[str, Any]] = {}
        for k in range(size * MAX_DRAWS_PER_ROW):
            if len(rows) == size:
                break
            item = generator[k]
            expression = item["metadata"]["expression"]
            row_id = f"arithmetic/{tier}/{hashlib.sha256(expression.encode()).hexdigest()[:12]}"
            if row_id not in rows and row_id not in skip:
                rows[row_id] = {
                    "id": row_id,
                    "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item["question"]}],
                    "answer": item["answer"],
                    "tier": tier,
                    "question": item["question"],
                    "expression": expression,
                }
        if len(rows) < size:
            raise TaskError(f"arithmetic: tier {tier} yields only {len(rows)} distinct {split} rows, {size} asked")
        return rows
