"""Synthetic shuffled objects: our own seeded generator with difficulty knobs.

A question lists who holds an object, a sequence of numbered swaps, and asks where one named
person's object ends up::

    Alice, Dave, Bob and Carol each hold a book. Swaps: 1 Carol Bob, 2 Carol Dave,
    3 Bob Carol, 4 Bob Dave. Who has Dave's book?

The question names the starting holder: "who has the book?" would need a lookup that a tiny
model never learned (docs/stack.md). The tier is the number of swaps. The gold completion is a
short trace, the holder after every swap, which a tiny model can be pretrained on and GRPO
can reward (an answer-only target gave GRPO nothing to learn)::

    Start Dave. 1 Carol Bob: Dave. 2 Carol Dave: Carol. 3 Bob Carol: Bob. 4 Bob Dave: Dave. Answer: Dave

Rows are deterministic from ``seed``: each split draws from its own seeded stream, and the
test split skips any question the train split holds, so the two never share a question.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from diffgrpo.tasks import register
from diffgrpo.tasks.base import Task, TaskError, validate_rows

NAMES = ("Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy")
OBJECTS = ("book", "ball", "hat", "key")
SPLITS = ("train", "test")

_ANSWER = re.compile(r"^\s*([A-Za-z]+)")


def question_text(people: list[str], obj: str, pairs: list[tuple[str, str]], start: str) -> str:
    listed = ", ".join(people[:-1]) + " and " + people[-1]
    swaps = ", ".join(f"{k} {a} {b}" for k, (a, b) in enumerate(pairs, 1))
    return f"{listed} each hold a {obj}. Swaps: {swaps}. Who has {start}'s {obj}?"


def trace_text(start: str, pairs: list[tuple[str, str]]) -> str:
    """The holder of ``start``'s object after every swap, then the answer."""
    holder, steps = start, [f"Start {start}."]
    for k, (a, b) in enumerate(pairs, 1):
        holder = b if holder == a else a if holder == b else holder
        steps.append(f"{k} {a} {b}: {holder}.")
    return " ".join(steps) + f" Answer: {holder}"


@register
class ShuffledObjects(Task):
    """Track one object through ``swaps`` pairwise swaps among ``people`` people.

    Options (all recorded by :meth:`describe`): ``people`` and ``swaps`` as inclusive
    ``[min, max]`` ranges (tier = swaps; tiers are equally represented), ``train_size``,
    ``test_size`` and ``seed``.
    """

    name = "shuffled_objects"
    prompt_tokens = 64  # one short question; the plan reads the sizes from the options

    def __init__(
        self,
        people: tuple[int, int] | list[int] = (3, 5),
        swaps: tuple[int, int] | list[int] = (1, 8),
        train_size: int = 2000,
        test_size: int = 400,
        seed: int = 0,
    ) -> None:
        self.people = _range(people, "people", 2, len(NAMES))
        self.swaps = _range(swaps, "swaps", 1, 99)
        self.sizes = {"train": int(train_size), "test": int(test_size)}
        self.seed = int(seed)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "people": list(self.people),
            "swaps": list(self.swaps),
            "train_size": self.sizes["train"],
            "test_size": self.sizes["test"],
            "seed": self.seed,
        }

    @property
    def tiers(self) -> list[int]:
        return list(range(self.swaps[0], self.swaps[1] + 1))

    # ---- data -----------------------------------------------------------------------
    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        """Rows of ``split``; ``source`` is None or "generated" (there is nothing to download)."""
        self.check_split(split)
        if source not in (None, "generated"):
            raise TaskError(f"task {self.name!r} is generated locally; source must be None or 'generated', got {source!r}")
        exclude = set(self.generate("train", self.sizes["train"])["question"]) if split == "test" else set()
        return validate_rows(self.generate(split, self.sizes[split], exclude=exclude), f"{self.name}/{split}")

    def generate(self, stream: str, size: int, exclude: set[str] = frozenset()) -> pd.DataFrame:
        """``size`` distinct questions from the seeded stream ``stream``, none in ``exclude``.

        Tiers cycle (1, 2, ..., max, 1, ...) so every tier holds the same number of rows.
        ``stream`` names the split; other names give other streams (the embedded model's
        pretraining corpus draws from its own)."""
        rng = np.random.default_rng([self.seed, *stream.encode()])
        seen, rows, tiers = set(exclude), [], self.tiers
        attempts = 0
        while len(rows) < size:
            attempts += 1
            if attempts > 100 * size + 1000:
                raise TaskError(f"{self.name}: cannot draw {size} distinct questions with {self.describe()}")
            tier = tiers[len(rows) % len(tiers)]
            row = self._draw(rng, tier)
            if row["question"] in seen:
                continue
            seen.add(row["question"])
            row["id"] = f"so/{stream}/{len(rows):06d}"
            rows.append(row)
        columns = ["id", "prompt", "answer", "tier", "people", "question", "start", "pairs"]
        return pd.DataFrame(rows, columns=columns)

    def _draw(self, rng: np.random.Generator, tier: int) -> dict[str, Any]:
        k = int(rng.integers(self.people[0], self.people[1] + 1))
        people = [str(x) for x in rng.choice(NAMES, size=k, replace=False)]
        obj = str(rng.choice(OBJECTS))
        pairs = [tuple(str(x) for x in rng.choice(people, size=2, replace=False)) for _ in range(tier)]
        start = str(rng.choice(people))
        question = question_text(people, obj, pairs, start)
        answer = trace_text(start, pairs).rsplit("Answer: ", 1)[1]
        return {
            "prompt": [{"role": "user", "content": question}],
            "answer": answer,
            "tier": tier,
            "people": k,
            "question": question,
            "start": start,
            "pairs": [list(p) for p in pairs],
        }

    def trace(self, row: Any) -> str:
        """The gold completion for a row (a dict or a DataFrame row): the pretraining target."""
        return trace_text(str(row["start"]), [(str(a), str(b)) for a, b in row["pairs"]])

    # ---- reward ---------------------------------------------------------------------
    def extract(self, completion: str) -> str | None:
        """The name after the last "Answer:", capitalised; None when there is none."""
        if "Answer:" not in completion:
            return None
        match = _ANSWER.match(completion.rsplit("Answer:", 1)[1])
        return match.group(1).capitalize() if match else None

    def normalize_gold(self, answer: str) -> str:
        return answer.strip().capitalize()


def _range(value: Any, what: str, lo: int, hi: int) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in value)
    except (TypeError, ValueError):
        raise TaskError(f"{what} must be a [min, max] pair, got {value!r}") from None
    if not lo <= a <= b <= hi:
        raise TaskError(f"{what} must satisfy {lo} <= min <= max <= {hi}, got {[a, b]}")
    return a, b
