"""The embedded default: a small build saves, reloads identically and generates; the packaged
checkpoint loads and its recorded per-tier table leaves GRPO something to learn."""

import json

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from diffgrpo.models import embedded
from diffgrpo import tasks
from diffgrpo.models.generation import HFGenerator
from diffgrpo.models.loading import load_model

TINY = dict(
    corpus_size=600, steps=30, eval_every=10, select_size=32, eval_per_tier=8, eval_samples=2,
    hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, max_new_tokens=24,
    task_options={"swaps": [1, 2], "train_size": 40, "test_size": 16},
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    return out, embedded.build(out, progress=False, **TINY)


def test_small_build_saves_its_record(tiny):
    out, info = tiny
    assert {"config.json", "model.safetensors", "tokenizer.json", "build_info.json"} <= {p.name for p in out.iterdir()}
    recorded = json.loads((out / "build_info.json").read_text())
    assert recorded["config"]["steps"] == 30 and recorded["chosen_step"] in {10, 20, 30}
    assert [row["tier"] for row in recorded["tiers"]] == [1, 2, "all"]
    assert {"greedy", "pass@1", "pass@2"} <= set(recorded["tiers"][0])


def test_small_build_reloads_with_identical_logits(tiny):
    out, _ = tiny
    model, tokenizer = load_model(out)
    task = tasks.get("shuffled_objects", **TINY["task_options"])
    row = task.load("test").iloc[0]
    text = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True) + task.trace(row)
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    again = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)


def test_reloaded_tokenizer_gives_the_training_ids(tmp_path):
    """AutoTokenizer rebuilds the folder as a Qwen2Tokenizer; the ids must not move."""
    cfg = embedded.BuildConfig(**{**TINY, "corpus_size": 200})
    corpus = embedded.pretraining_corpus(cfg, set())
    task = tasks.get("shuffled_objects", **TINY["task_options"])
    tokenizer = embedded.train_tokenizer(corpus, task, cfg.vocab_size)
    embedded.save(embedded.make_model(tokenizer, cfg), tokenizer, tmp_path, {})
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) + task.trace(r)
             for r in corpus.to_dict("records")] + ["Swaps: 12 Bob, 3 Eve's 45?"]
    assert [tokenizer(t)["input_ids"] for t in texts] == [reloaded(t)["input_ids"] for t in texts]
    assert reloaded.padding_side == "left" and reloaded.eos_token == embedded.EOS and reloaded.pad_token == embedded.PAD


def test_small_build_generates(tiny):
    out, _ = tiny
    model, tokenizer = load_model(out)
    (completions,) = HFGenerator(model, tokenizer).generate(
        [[{"role": "user", "content": "Alice, Bob and Eve each hold a hat. Swaps: 1 Bob Eve. Who has Eve's hat?"}]],
        n=2, max_new_tokens=24, progress=False,
    )
    assert len(completions) == 2 and all(c.num_tokens >= 1 for c in completions)


def test_build_is_deterministic(tiny, tmp_path):
    _, info = tiny
    again = embedded.build(tmp_path, progress=False, **{**TINY, "steps": 10})
    assert again["history"][0] == info["history"][0]


def test_packaged_checkpoint_loads_and_is_small():
    path = embedded.default_path()
    size = sum(p.stat().st_size for p in path.iterdir())
    assert size < 10 * 2**20
    model, tokenizer = load_model("embedded")
    assert model.config.model_type == "qwen2" and tokenizer.padding_side == "left"
    assert next(model.parameters()).dtype == torch.float32


def test_packaged_checkpoint_leaves_grpo_something_to_learn():
    info = json.loads((embedded.default_path() / "build_info.json").read_text())
    table = pd.DataFrame([r for r in info["tiers"] if r["tier"] != "all"]).set_index("tier")
    k = info["config"]["eval_samples"]
    people = info["task"]["people"]
    chance = sum(1 / n for n in range(people[0], people[1] + 1)) / (people[1] - people[0] + 1)  # 0.26
    assert table["n"].min() >= 200  # each rate within about +-0.03
    assert table["greedy"].iloc[0] >= 0.9  # the easiest tier is nearly solved
    # the hardest is mostly failed, near the chance of guessing the holder; not below it:
    # below chance means broken traces, which GRPO did not repair here (docs/testbed_log.md)
    assert chance - 0.05 <= table["greedy"].iloc[-1] <= chance + 0.1
    middle = table.iloc[1:-1]
    assert (middle[f"pass@{k}"] - middle["pass@1"] >= 0.2).all()  # mixed groups for GRPO


def test_corpus_follows_the_tier_weights():
    opts = {"swaps": [1, 3], "train_size": 20, "test_size": 10}
    cfg = embedded.BuildConfig(corpus_size=600, task_options=opts, tier_weights=[4, 1, 1])
    counts = embedded.pretraining_corpus(cfg, set())["tier"].value_counts().to_dict()
    assert counts == {1: 400, 2: 100, 3: 100}
    cfg = embedded.BuildConfig(corpus_size=700, task_options=opts, tier_decay=0.5)
    assert embedded.pretraining_corpus(cfg, set())["tier"].value_counts().to_dict() == {1: 400, 2: 200, 3: 100}
    with pytest.raises(ValueError, match=r"tier_weights: need 3 positive weights \(tiers \[1, 2, 3\]\)"):
        embedded.pretraining_corpus(embedded.BuildConfig(task_options=opts, tier_weights=[1, 1]), set())
