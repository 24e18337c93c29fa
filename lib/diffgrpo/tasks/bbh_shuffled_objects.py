"""Tracking Shuffled Objects (BIG-bench / BBH): who holds which object after a run of swaps.

Multiple choice in the BBH format: the story, then "Options:" and one "(A) text" line per
object; the gold is a letter such as "(C)". The tier is the number of objects (3, 5 or 7),
which is also the number of swaps and of options.

Sources: the hub (``lukaemon/bbh``, configs tracking_shuffled_objects_{three,five,seven}_objects,
250 rows each, columns ``input`` and ``target``); offline, BIG-bench's own task files from
the ``bigbench`` 1.0.0 source archive (750 / 1,250 / 1,750 rows; BBH's rows are a sample of
them), turned into the BBH format with the options in ``target_scores`` order; or a local
.jsonl/.parquet file in the hub schema.

Splits: BBH has only a test set, but a GRPO pool needs a train split, so every row goes to
"test" when a hash of its id (salted with ``split_seed``) falls below ``test_frac`` (default
0.2), else to "train". Ids hash the question text with whitespace collapsed
(``bbh_shuffled_objects/<objects>/<12 hex>``), so a row keeps its id and its split whichever
source it came from and whichever objects are asked for.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Sequence

import pandas as pd

from diffgrpo.tasks import offline
from diffgrpo.tasks import register
from diffgrpo.tasks.base import Task, TaskError, answer_is, load_hub, rows_from, validate_rows

WORDS = {3: "three", 5: "five", 7: "seven"}
HUB_REPO = "lukaemon/bbh"
OFFLINE_PACKAGE = "bigbench"
LETTERS = "ABCDEFG"

SYSTEM = (
    "Answer the multiple-choice question. Think step by step, then finish with "
    '"So the answer is (X).", where X is the letter of your choice.'
)

_OPTION = re.compile(r"^\(([A-G])\)\s*(.*)$")
_PAREN_LETTER = re.compile(r"\(([A-G])\)")
_BARE_LETTER = re.compile(r"^[\s*$:]*([A-G])(?![A-Za-z])")


@register
class BBHShuffledObjects(Task):
    """Options: ``objects`` (3, 5, 7 or a list of them; default all three), ``test_frac``,
    ``split_seed``. Columns: id, prompt, answer ("(C)"), tier (objects), input (the
    question with its options), options (the option texts, in letter order)."""

    name = "bbh_shuffled_objects"
    prompt_tokens = 320
    split_rows = {"train": 600, "test": 150}  # BBH's 250 a task x 3 tasks, test_frac 0.2

    def __init__(self, objects: int | Sequence[int] = (3, 5, 7), test_frac: float = 0.2, split_seed: int = 0) -> None:
        self.objects = sorted({objects} if isinstance(objects, int) else set(objects))
        if not self.objects or any(n not in WORDS for n in self.objects):
            raise TaskError(f"bbh_shuffled_objects: objects must be 3, 5, 7 or a list of them, got {objects!r}")
        if not 0 < test_frac < 1:
            raise TaskError(f"bbh_shuffled_objects: test_frac must lie in (0, 1), got {test_frac!r}")
        self.test_frac = float(test_frac)
        self.split_seed = int(split_seed)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "objects": self.objects, "test_frac": self.test_frac, "split_seed": self.split_seed}

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        raw, where = rows_from(source, self.name, hub=self._hub, offline=self._offline)
        if not {"input", "target"} <= set(raw.columns):
            raise TaskError(f"{where}: bbh rows need columns input and target, got {list(raw.columns)}")
        options = [_options(text, where) for text in raw["input"]]
        df = pd.DataFrame(
            {
                "id": [_row_id(text, len(opts)) for text, opts in zip(raw["input"], options)],
                "prompt": [_prompt(text) for text in raw["input"]],
                "answer": [self.normalize_gold(t) for t in raw["target"]],
                "tier": [len(opts) for opts in options],
                "input": raw["input"],
                "options": options,
            }
        )
        df = df[df["tier"].isin(self.objects)]
        df = df[[self._in_test(i) == (split == "test") for i in df["id"]]]
        df.attrs["source"] = where
        return validate_rows(df, where)

    # ---- reward -------------------------------------------------------------------------
    def extract(self, completion: str, options: Sequence[str] | None = None) -> str | None:
        """The chosen letter as "(C)": from the last "answer is" statement (a letter, or the
        text of exactly one of ``options`` when given), else the last "(X)" anywhere, else a
        completion that is only a letter."""
        stated = answer_is(completion)
        if stated:
            found = _PAREN_LETTER.search(stated)
            if found:
                return f"({found.group(1)})"
            named = [k for k, text in enumerate(options or ()) if _mentions(stated, text)]
            if len(named) == 1:
                return f"({LETTERS[named[0]]})"
            found = _BARE_LETTER.match(stated)
            if found:
                return f"({found.group(1)})"
        found = _PAREN_LETTER.findall(completion)
        if found:
            return f"({found[-1]})"
        found = re.fullmatch(r"\s*\(?([A-G])\)?\.?\s*", completion)
        return f"({found.group(1)})" if found else None

    def score(self, completion: str, answer: str, options: Sequence[str] | None = None) -> float:
        """As :meth:`Task.score`; with the row's ``options``, naming the option's text counts too."""
        got = self.extract(completion, options)
        return float(got is not None and got == self.normalize_gold(answer))

    def normalize_gold(self, answer: str) -> str:
        found = re.fullmatch(r"\s*\(?([A-G])\)?\s*", str(answer))
        if not found:
            raise TaskError(f"bbh_shuffled_objects: gold answer {answer!r} is not a letter A-G")
        return f"({found.group(1)})"

    # ---- sources ------------------------------------------------------------------------
    def _in_test(self, row_id: str) -> bool:
        digest = hashlib.sha256(f"{self.split_seed}:{row_id}".encode()).hexdigest()
        return int(digest[:8], 16) / 16**8 < self.test_frac

    def _hub(self) -> pd.DataFrame:
        configs = [f"tracking_shuffled_objects_{WORDS[n]}_objects" for n in self.objects]
        return pd.concat([load_hub(HUB_REPO, c, "test") for c in configs], ignore_index=True)

    def _offline(self) -> pd.DataFrame:
        paths = {
            n: f"bigbench/benchmark_tasks/tracking_shuffled_objects/{WORDS[n]}_objects/task.json" for n in self.objects
        }
        local = offline.files(OFFLINE_PACKAGE, list(paths.values()))
        rows = []
        for n in self.objects:
            examples = json.loads(local[paths[n]].read_text(encoding="utf-8"))["examples"]
            rows += [bbh_row(e["input"], e["target_scores"]) for e in examples]
        return pd.DataFrame(rows)


def bbh_row(question: str, target_scores: dict[str, int]) -> dict[str, str]:
    """A BIG-bench multiple-choice example in BBH's format: the question, then "Options:" and
    "(A) text" lines in ``target_scores`` order (trailing period dropped), gold "(X)"."""
    texts = [t.strip().rstrip(".") for t in target_scores]
    correct = [k for k, score in enumerate(target_scores.values()) if score == 1]
    if len(correct) != 1:
        raise TaskError(f"bigbench example has {len(correct)} correct options: {question[:80]!r}")
    listed = "\n".join(f"({LETTERS[k]}) {t}" for k, t in enumerate(texts))
    return {"input": f"{question.rstrip()}\nOptions:\n{listed}", "target": f"({LETTERS[correct[0]]})"}


def _options(text: str, where: str) -> list[str]:
    """The option texts of a BBH question, in letter order."""
    _, found, listed = text.partition("\nOptions:\n")
    options = [_OPTION.match(line.strip()) for line in listed.strip().split("\n")] if found else []
    if not options or not all(options):
        raise TaskError(f"{where}: no '(A) ...' option lines after 'Options:' in {text[:80]!r}")
    return [m.group(2).strip() for m in options]


def _row_id(text: str, objects: int) -> str:
    question = " ".join(text.partition("\nOptions:\n")[0].split())
    return f"bbh_shuffled_objects/{objects}/{hashlib.sha256(question.encode()).hexdigest()[:12]}"


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(option)}(?!\w)", text, re.IGNORECASE) is not None


def _prompt(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
