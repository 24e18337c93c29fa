"""The pool and the held-out set a study's params point at."""

import pytest

from diffgrpo.tasks import splits
from diffgrpo.models import resolve
from diffgrpo import params


def test_pool_and_test_are_seeded_samples_in_source_order():
    cfg = params.load("tiny")
    pool = splits.load_pool(cfg)
    assert len(pool) == cfg.dataset.pool_size
    assert pool.equals(splits.load_pool(cfg))
    full = splits.task_of(cfg).load(cfg.dataset.train_split)
    positions = full.reset_index().set_index("id").loc[pool["id"], "index"]
    assert positions.is_monotonic_increasing and positions.iloc[-1] > cfg.dataset.pool_size  # not the first rows
    assert set(pool["id"]) != set(splits.load_pool(cfg.replace(seed=1))["id"])


def test_same_split_pool_and_test_are_disjoint():
    cfg = params.load("tiny", overrides={"dataset.test_split": "train", "dataset.test_size": 30})
    pool, test = splits.load_pool(cfg), splits.load_test(cfg)
    assert len(pool) == cfg.dataset.pool_size and len(test) == 30
    assert not set(pool["id"]) & set(test["id"])


def test_same_split_needs_both_sizes():
    cfg = params.load("tiny", overrides={"dataset.test_split": "train", "dataset.test_size": None})
    with pytest.raises(ValueError, match="disjoint"):
        splits.load_test(cfg)


def test_too_large_a_pool_is_named():
    cfg = params.load("tiny", overrides={"dataset.pool_size": 10**6})
    with pytest.raises(ValueError, match="dataset.pool_size"):
        splits.load_pool(cfg)


@pytest.mark.parametrize("params_file", ["embedded", "tiny"])
def test_length_limits_fit_the_longest_gold_trace(params_file):
    """A limit below the gold trace makes the hardest tiers unsolvable (their traces are cut)."""
    cfg = params.load(params_file)
    task = splits.task_of(cfg)
    _, tokenizer = resolve.load_model(cfg)
    pool = splits.load_pool(cfg)
    longest = max(len(tokenizer(task.trace(row)).input_ids) for _, row in pool.iterrows()) + 1  # + EOS
    assert longest <= cfg.probe.sampling.max_new_tokens
    assert longest <= cfg.evaluate.sampling.max_new_tokens
    assert longest <= cfg.train.max_completion_length


def test_model_fingerprint_follows_the_files(tmp_path):
    import shutil

    cfg = params.load("tiny")
    folder = tmp_path / "m"
    shutil.copytree(resolve.model_path(cfg)[0], folder)
    local = cfg.replace(**{"model.path": str(folder)})
    before = resolve.model_fingerprint(local)
    assert before == resolve.model_fingerprint(local)
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    assert resolve.model_fingerprint(local) != before
    assert resolve.model_fingerprint(cfg.replace(**{"model.path": "Qwen/Qwen3-4B"})) == "hub:Qwen/Qwen3-4B"
