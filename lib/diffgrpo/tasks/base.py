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
import functools
import json
import logging
import os
import re
import threading
import urllib.error
import urllib.request
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np
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

    # ---- facts the plan reads (diffgrpo.study.plan), known without loading a row ----------
    #: prompt tokens, chat template included, that the plan sizes a study for when
    #: ``train.max_prompt_length`` is null: an upper-end estimate (docs/gpu.md)
    prompt_tokens: ClassVar[int] = 512
    #: rows per split as the dataset's card gives them, for the plan when the params set no
    #: ``dataset.pool_size`` / ``test_size``; a split left out is planned at 1,000 rows
    split_rows: ClassVar[dict[str, int]] = {}

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
        first = int(np.flatnonzero(df["id"].duplicated().to_numpy())[0])
        raise TaskError(f"{where}: duplicate ids, e.g. {dup.iloc[0]!r} (row {first + 1}, counting from 1); ids name "
                        "prompts in every artifact, so each must be unique")
    for column, what in (("answer", "answer"), ("prompt", "prompt")):
        bad = [i for i, v in enumerate(df[column]) if _blank(v)]
        if bad:
            rows = [i + 1 for i in bad]
            raise TaskError(f"{where}: row {rows[0]} (counting from 1; id {df['id'].iloc[bad[0]]!r}) has an empty or "
                            f"null {what}" + (f" ({len(rows)} rows in all: {rows[:10]})" if len(rows) > 1 else "")
                            + ("; no completion could ever be scored right against it" if column == "answer" else "")
                            + "; fix or drop those rows")
    return df.reset_index(drop=True)


def _blank(value: Any) -> bool:
    """None, NaN, an empty or all-blank string, or an empty list of chat messages."""
    if value is None:
        return True
    if isinstance(value, float) and value != value:
        return True
    if isinstance(value, str):
        return not value.strip()
    try:
        return len(value) == 0
    except TypeError:
        return False


# ---- where rows come from ---------------------------------------------------------------
# Shared by the tasks whose data lives on the Hugging Face hub.

log = logging.getLogger("diffgrpo.tasks")

#: seconds to wait for the hub before taking it as unreachable
HUB_TIMEOUT_S = 5.0


@functools.lru_cache(maxsize=1)
def hub_usable() -> bool:
    """Whether ``datasets.load_dataset`` can be asked for hub data without hanging.

    On a machine without network, ``load_dataset`` retries for about 25 s before it fails, so
    a short request goes first (in a thread: a DNS lookup ignores socket timeouts). In HF offline
    mode (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``) datasets reads its local cache and never
    touches the network, so the answer is yes. Checked once per process.
    """
    if any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return True
    url = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/") + "/api/datasets"
    answered: list[bool] = []

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=HUB_TIMEOUT_S)
            answered.append(True)
        except urllib.error.HTTPError:  # an HTTP error is still an answer
            answered.append(True)
        except Exception:
            answered.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(HUB_TIMEOUT_S + 1)
    return bool(answered and answered[0])


def load_hub(repo: str, config: str | None, split: str) -> pd.DataFrame:
    import datasets  # heavy; only when the hub is used

    return datasets.load_dataset(repo, config, split=split).to_pandas()


#: the file types a local ``dataset.source`` may be
TABLE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Rows of a local .jsonl, .json, .parquet or .csv file, values as written: no dtype
    guessing, so an answer "033" stays the string "033"."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise TaskError(f"{path}: unknown file type {suffix!r}; use .jsonl, .json, .parquet or .csv")
    try:
        if suffix == ".jsonl":
            df = pd.DataFrame(_jsonl_rows(path))
        elif suffix == ".json":
            df = pd.DataFrame(json.loads(path.read_text(encoding="utf-8")))
        elif suffix == ".parquet":
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except TaskError:
        raise
    except Exception as err:  # a JSON, CSV or parquet parser's complaint, with the file named
        raise TaskError(f"{path}: cannot be read as {suffix} ({type(err).__name__}: {err})") from None
    if df.empty:
        raise TaskError(f"{path}: the file holds no rows")
    return df


def _jsonl_rows(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise TaskError(f"{path}:{number}: not valid JSON ({err.msg} at column {err.colno}); "
                                "each line must be one JSON object") from None
            if not isinstance(row, dict):
                raise TaskError(f"{path}:{number}: a line must be a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def rows_from(
    source: str | None, task: str, hub: Callable[[], pd.DataFrame], offline: Callable[[], pd.DataFrame]
) -> tuple[pd.DataFrame, str]:
    """Raw rows from ``source`` and a word saying where they came from.

    ``source``: "hub", "offline", a local file in the hub's schema, or None (the hub where
    usable, else offline, with a warning that says so).
    """
    if source in (None, "hub"):
        if not hub_usable():
            if source == "hub":
                raise TaskError(f"{task}: the Hugging Face hub is unreachable; use source='offline' or a local file")
            log.warning("%s: the Hugging Face hub is unreachable; loading the offline copy", task)
        else:
            try:
                return hub(), "hub"
            except Exception as err:
                if source == "hub":
                    raise TaskError(f"{task}: loading from the Hugging Face hub failed: {err}") from err
                log.warning("%s: loading from the Hugging Face hub failed (%s); loading the offline copy", task, err)
    if source in (None, "offline"):
        return offline(), "offline"
    if Path(source).is_dir():
        raise TaskError(f"{task}: dataset.source {source!r} is a folder ({Path(source).absolute()}); give the data "
                        "file inside it (.jsonl, .json, .parquet or .csv), or 'hub' / 'offline'")
    if not Path(source).is_file():
        raise TaskError(f"{task}: dataset.source {source!r} is neither 'hub', 'offline' nor an existing file "
                        f"(looked for {Path(source).absolute()})")
    return read_table(source), str(source)


def no_offline(task: str) -> pd.DataFrame:
    """The offline source of a task no PyPI package ships (MATH, paper 002's benchmarks)."""
    raise TaskError(f"{task}: no offline copy exists (no PyPI package ships it); use source='hub' or a local "
                    ".jsonl/.parquet file in the hub's schema")


def require_columns(raw: pd.DataFrame, columns: tuple[str, ...], where: str, task: str) -> None:
    """A source's rows hold every column ``task`` reads, or a :class:`TaskError` naming the
    source (``where``: the file, or "hub"), the missing columns and the ones it has."""
    missing = [c for c in columns if c not in raw.columns]
    if missing:
        raise TaskError(f"{where}: {task} rows lack column(s) {missing} (they have {list(raw.columns)}); a local "
                        "file must keep the hub's column names")


# ---- answers ----------------------------------------------------------------------------
# Final-answer extraction shared by the numeric tasks (gsm8k, aime2025, arithmetic) and math.

_BOX = re.compile(r"\\(?:boxed|fbox)")
# a number not glued to a word before it ("x2", "5-3" give no sign), thousands groups allowed
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?")
_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([-+]?\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}`` (nested braces kept), or the
    token after ``\\boxed 5``; None when there is none or its braces never close (a
    completion cut off mid-answer)."""
    starts = [m.end() for m in _BOX.finditer(text)]
    if not starts:
        return None
    rest = text[starts[-1] :]
    body = rest.lstrip()
    if not body.startswith("{"):
        token = re.match(r"[^\s$]+", body) if rest[:1].isspace() else None
        return token.group().rstrip(".") if token else None
    depth = 0
    for i, ch in enumerate(body):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return body[1:i].strip()
    return None


def answer_is(text: str) -> str | None:
    """What follows the last "answer is" / "Answer:" up to the end of its line (the next line
    when the phrase ends one), or None."""
    found = list(_ANSWER_IS.finditer(text))
    if not found:
        return None
    rest = text[found[-1].end() :].lstrip(" \t:*")
    return next((line for line in rest.split("\n") if line.strip()), None)


def normalize_number(text: str) -> str | None:
    """The first number in ``text`` written one canonical way, or None.

    Traps this avoids (``int()`` fails on all of them): thousands separators ("1,000",
    "1{,}000", "1\\,000"), currency and units ("$18", "18 dollars", "18 cm"), trailing
    zeros ("18.00" -> "18", "18.50" -> "18.5"), signs ("+3" -> "3", "-0" -> "0"), leading
    zeros ("033" -> "33") and percentages ("25%" -> "25": GSM8K's golds drop the sign).
    Fractions ("1/2", "\\frac{1}{2}") become "0.5", or "1/3" where not a finite decimal.
    After an "=", only what follows the last one counts ("x = 5", "3 + 4 = 7").
    """
    m = _NUMBER.search(_plain(text).rsplit("=", 1)[-1])
    if not m:
        return None
    token = m.group().replace(",", "").replace(" ", "")
    num, _, den = token.partition("/")
    if den and int(den) == 0:
        return None
    value = Fraction(Decimal(num)) / (int(den) if den else 1)
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    if d != 1:
        return f"{value.numerator}/{value.denominator}"
    return format((Decimal(value.numerator) / Decimal(value.denominator)).normalize(), "f")


def extract_number(completion: str) -> str | None:
    """A completion's final numeric answer: after the last "####", else the last \\boxed{},
    else after the last "answer is", else the last number anywhere; normalised."""
    for segment in (
        completion.rsplit("####", 1)[1].split("\n", 1)[0] if "####" in completion else None,
        last_boxed(completion),
        answer_is(completion),
    ):
        got = normalize_number(segment) if segment else None
        if got is not None:
            return got
    numbers = _NUMBER.findall(_plain(completion))
    return normalize_number(numbers[-1]) if numbers else None


def _plain(text: str) -> str:
    """LaTeX number spellings as plain text: "1{,}000" / "1\\,000" -> "1,000"/"1000",
    "\\frac{1}{2}" -> "1/2", a Unicode minus -> "-"."""
    text = text.replace("{,}", ",").replace("\\,", "").replace("\\!", "").replace("\u2212", "-")
    return _FRAC.sub(r"\1/\2", text)


class NumericTask(Task):
    """A task whose answer is one number (gsm8k, aime2025): the completion's final number,
    compared with the gold after the same normalisation."""

    def extract(self, completion: str) -> str | None:
        return extract_number(completion)

    def normalize_gold(self, answer: str) -> str:
        return normalize_number(answer)
