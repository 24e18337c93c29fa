"""The synthetic shuffled-objects task: deterministic rows, disjoint splits, gold traces that score."""

import pandas as pd
import pytest

from diffgrpo import tasks
from diffgrpo.tasks.shuffled_objects import trace_text

SMALL = {"train_size": 300, "test_size": 100}


@pytest.fixture(scope="module")
def task():
    return tasks.get("shuffled_objects", **SMALL)


def test_rows_are_deterministic_from_the_seed(task):
    again = tasks.get("shuffled_objects", **SMALL).load("train")
    pd.testing.assert_frame_equal(task.load("train"), again)
    other = tasks.get("shuffled_objects", seed=1, **SMALL).load("train")
    assert list(other["question"]) != list(again["question"])


def test_splits_are_disjoint_and_ids_stable(task):
    train, test = task.load("train"), task.load("test")
    assert len(train) == 300 and len(test) == 100
    assert not set(train["question"]) & set(test["question"])
    assert train["question"].is_unique and test["question"].is_unique
    assert train["id"].iloc[123] == "so/train/000123" and test["id"].iloc[0] == "so/test/000000"


def test_rows_follow_the_options():
    task = tasks.get("shuffled_objects", people=[3, 4], swaps=[2, 5], **SMALL)
    rows = task.load("test")
    assert sorted(rows["tier"].unique()) == [2, 3, 4, 5]
    assert rows["tier"].value_counts().max() - rows["tier"].value_counts().min() <= 1  # tiers balanced
    assert rows["people"].between(3, 4).all()
    assert all(len(p) == t for p, t in zip(rows["pairs"], rows["tier"]))
    row = rows.iloc[0]
    assert row["prompt"] == [{"role": "user", "content": row["question"]}]
    assert row["question"].endswith(f"Who has {row['start']}'s " + row["question"].split("each hold a ")[1].split(".")[0] + "?")
    assert task.describe()["swaps"] == [2, 5]


def test_trace_follows_the_object():
    trace = trace_text("Dave", [("Carol", "Bob"), ("Carol", "Dave"), ("Bob", "Carol"), ("Bob", "Dave")])
    assert trace == "Start Dave. 1 Carol Bob: Dave. 2 Carol Dave: Carol. 3 Bob Carol: Bob. 4 Bob Dave: Dave. Answer: Dave"


def test_gold_trace_scores_one_and_a_wrong_answer_zero(task):
    for row in task.load("test").to_dict("records"):
        trace = task.trace(row)
        assert task.score(trace, row["answer"]) == 1.0
        people = row["question"].split(" each hold")[0].replace(" and ", ", ").split(", ")
        assert len(people) == row["people"] and row["answer"] in people
        wrong = next(p for p in people if p != row["answer"])
        assert task.score(trace.rsplit("Answer: ", 1)[0] + f"Answer: {wrong}", row["answer"]) == 0.0


def test_trace_survives_a_parquet_round_trip(task, tmp_path):
    rows = task.load("test")
    rows.to_parquet(tmp_path / "rows.parquet")
    back = pd.read_parquet(tmp_path / "rows.parquet")
    assert [task.trace(r) for r in back.to_dict("records")] == [task.trace(r) for r in rows.to_dict("records")]


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("Start Bob. 1 Bob Eve: Eve. Answer: Eve", "Eve"),
        ("Answer: Bob. Wait. Answer: Carol", "Carol"),  # the last answer counts
        ("answer: Bob", None),  # the marker is case-sensitive, as the trace writes it
        ("Answer:   dave.", "Dave"),  # spacing, case and punctuation normalised
        ("Answer: Bob Answer:", None),  # a last marker with nothing after it
        ("Start Bob. 1 Bob Eve: Eve.", None),  # cut before the answer
        ("", None),
        ("Answer: 42", None),
    ],
)
def test_extract(task, completion, expected):
    assert task.extract(completion) == expected


def test_source_must_be_generated(task):
    assert len(task.load("test", source="generated")) == 100
    with pytest.raises(tasks.TaskError, match="generated"):
        task.load("test", source="hub")
    with pytest.raises(tasks.TaskError):
        task.load("validation")
    with pytest.raises(tasks.TaskError):
        tasks.get("shuffled_objects", swaps=[3, 1])
