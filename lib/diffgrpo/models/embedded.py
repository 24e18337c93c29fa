"""The embedded default model: a tiny Qwen2 pretrained here, partly competent at shuffled objects.

The study needs a base model that GRPO can improve on a CPU in minutes, and no hub. So we
build one from nothing: a byte-level BPE trained on the synthetic corpus, a ~0.9M-parameter
Qwen2 decoder (4 layers, hidden 128, MLP 384, 4 heads), and a short pretraining run on
prompt + gold trace sequences (loss on the completion only).

The competent-but-unreliable window is narrow (greedy accuracy jumps from 0.44 to 0.95 in
about 100 steps, docs/stack.md), so pretraining snapshots the weights every ``eval_every`` steps,
measures sampled pass@1 on held-out prompts, and keeps the snapshot nearest
``target_pass1``. The result must leave GRPO something to learn: greedy near 1.0 on the
easiest tier, near chance on the hardest (a guess among the 3-5 holders is right 26% of the
time), and pass@8 well above pass@1 in between, so that groups of samples carry mixed
rewards. A snapshot whose hardest tier sits *below* chance writes broken traces there, which
GRPO did not repair in a CPU budget (docs/testbed_log.md). ``build_info.json`` in the saved
folder records the settings and the per-tier table, measured on 200 fresh prompts a tier.

The packaged checkpoint lives at :func:`default_path`; ``scripts/build_embedded.py`` rebuilds it.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from diffgrpo.store import artifacts
from diffgrpo import tasks
from diffgrpo.models.generation import HFGenerator, encode_prompt

EOS, PAD = "<|end|>", "<|pad|>"
ROLES = ("<|system|>", "<|user|>", "<|assistant|>")
# one special token per role and one to end a turn: a prompt costs 2 tokens of template
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def default_path() -> Path:
    """The packaged embedded checkpoint (a HF folder: config, safetensors, tokenizer)."""
    return Path(__file__).resolve().parents[1] / "assets" / "embedded"


@dataclass
class BuildConfig:
    """Everything that defines a build; saved in ``build_info.json``."""

    seed: int = 0
    task_options: dict[str, Any] = field(default_factory=dict)  # shuffled_objects options
    corpus_size: int = 20000  # distinct pretraining questions, none in the task's splits
    tier_decay: float = 0.75  # corpus share of tier t ~ tier_decay ** t: < 1 makes long chains rarer
    tier_weights: list[float] | None = None  # explicit corpus share per tier (one per tier); replaces tier_decay
    vocab_size: int = 384
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    steps: int = 900  # upper bound; the build stops once past the target
    batch_size: int = 32
    lr: float = 1e-3
    eval_every: int = 25
    select_size: int = 256  # held-out prompts for the pass@1 that picks the snapshot
    target_pass1: float = 0.42
    eval_per_tier: int = 200  # fresh prompts per tier for the final table (in no split, corpus or select set)
    eval_samples: int = 8
    max_new_tokens: int = 64


@dataclass
class Pretrained:
    """A pretraining run: the model at its last snapshot, and every snapshot on the way."""

    task: Any
    tokenizer: PreTrainedTokenizerFast
    model: Qwen2ForCausalLM
    history: list[dict]  # per snapshot: step, loss, select_pass1
    seen: set[str]  # every question in the task's splits, the corpus and the select set
    snapshots: dict[int, dict]  # step -> state_dict


def build(out_dir: str | Path, config: BuildConfig | None = None, progress: bool = True, **overrides: Any) -> dict:
    """Build, pretrain, pick a snapshot and save a HF folder at ``out_dir``; returns build_info.

    ``overrides`` set :class:`BuildConfig` fields (a test builds a small one in seconds)."""
    cfg = replace_config(config or BuildConfig(), overrides)
    t0 = time.time()
    threads = torch.get_num_threads()
    # one thread: float sums then do not depend on the machine's core count (the build is
    # deterministic anywhere), and on a shared CPU it ran 7x faster than two spinning threads
    torch.set_num_threads(1)
    try:
        return _build(out_dir, cfg, progress, t0)
    finally:
        torch.set_num_threads(threads)


def _build(out_dir: Path, cfg: BuildConfig, progress: bool, t0: float) -> dict:
    run = pretrain(cfg, progress=progress)
    chosen = min(run.history, key=lambda h: (abs(h["select_pass1"] - cfg.target_pass1), h["step"]))["step"]
    run.model.load_state_dict(run.snapshots[chosen])
    train_s = time.time() - t0

    # 50 test prompts a tier would leave each rate +-0.07 (one SE); fresh prompts make it +-0.03
    rows = run.task.generate("eval", cfg.eval_per_tier * len(run.task.tiers), exclude=run.seen)
    table = tier_table(run.model, run.tokenizer, run.task, rows, cfg, progress=progress)
    info = {
        "config": asdict(cfg),
        "task": run.task.describe(),
        "num_parameters": sum(p.numel() for p in run.model.parameters()),
        "chosen_step": chosen,
        "history": run.history,
        "eval_rows": len(rows),
        "tiers": table.to_dict("records"),
        "pretrain_seconds": round(train_s, 1),
        "build_seconds": round(time.time() - t0, 1),
    }
    save(run.model, run.tokenizer, out_dir, info)
    return info


def pretrain(cfg: BuildConfig, progress: bool = True) -> Pretrained:
    """Tokenizer, model and the pretraining loop, snapshotting every ``eval_every`` steps.

    Stops once the select-set pass@1 passes ``target_pass1`` by 0.15: later snapshots only
    get further from the target."""
    t0 = time.time()
    task = tasks.get("shuffled_objects", **cfg.task_options)
    held_out = set(task.load("train")["question"]) | set(task.load("test")["question"])
    corpus = pretraining_corpus(cfg, held_out)
    select = task.generate("select", cfg.select_size, exclude=held_out | set(corpus["question"]))

    tokenizer = train_tokenizer(corpus, task, cfg.vocab_size)
    torch.manual_seed(cfg.seed)
    model = make_model(tokenizer, cfg)
    sequences = encode_corpus(corpus, task, tokenizer)

    seen = held_out | set(corpus["question"]) | set(select["question"])
    run = Pretrained(task, tokenizer, model, [], seen, {})
    rng = np.random.default_rng(cfg.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    for step in range(1, cfg.steps + 1):
        model.train()
        batch = [sequences[i] for i in rng.choice(len(sequences), size=cfg.batch_size, replace=False)]
        loss = completion_loss(model, batch, tokenizer.pad_token_id)
        optim.zero_grad()
        loss.backward()
        optim.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            pass1 = sampled_pass1(model, tokenizer, task, select, cfg, seed=cfg.seed + step)
            run.snapshots[step] = copy.deepcopy(model.state_dict())
            run.history.append({"step": step, "loss": round(loss.item(), 4), "select_pass1": round(pass1, 4)})
            if progress:
                print(f"step {step:4d}  loss {loss.item():.3f}  select pass@1 {pass1:.3f}  ({time.time() - t0:.0f} s)")
            if pass1 >= cfg.target_pass1 + 0.15:
                break
    return run


def replace_config(cfg: BuildConfig, overrides: dict[str, Any]) -> BuildConfig:
    unknown = set(overrides) - set(asdict(cfg))
    if unknown:
        raise TypeError(f"unknown build setting(s) {sorted(unknown)}")
    return BuildConfig(**{**asdict(cfg), **overrides})


# ---- pieces -------------------------------------------------------------------------------
def pretraining_corpus(cfg: BuildConfig, exclude: set[str]) -> pd.DataFrame:
    """Questions with gold traces from streams of their own, none in ``exclude``.

    With ``tier_decay`` < 1 long swap chains are rare, so the model masters short chains
    first and still stumbles on long ones when we stop: the difficulty spread GRPO needs."""
    base = tasks.get("shuffled_objects", **cfg.task_options)
    if cfg.tier_weights is not None:
        if len(cfg.tier_weights) != len(base.tiers) or min(cfg.tier_weights) <= 0:
            raise ValueError(f"tier_weights: need {len(base.tiers)} positive weights (tiers {base.tiers}), "
                             f"got {cfg.tier_weights}")
        weights = np.array(cfg.tier_weights, dtype=float)
    else:
        weights = np.array([cfg.tier_decay**i for i in range(len(base.tiers))])
    counts = np.maximum(1, np.round(cfg.corpus_size * weights / weights.sum()).astype(int))
    parts = []
    for tier, count in zip(base.tiers, counts):
        one_tier = tasks.get("shuffled_objects", **{**cfg.task_options, "swaps": [tier, tier]})
        parts.append(one_tier.generate(f"pretrain-{tier}", int(count), exclude=exclude))
    return pd.concat(parts, ignore_index=True)


def train_tokenizer(corpus: pd.DataFrame, task, vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE on the corpus's questions and traces, with the chat's special tokens.

    AutoTokenizer reloads the folder as a Qwen2Tokenizer (the config's model type), which
    rebuilds the normalizer and pre-tokenizer its own way (digits split one by one). We train
    with exactly those, so the reloaded tokenizer gives the ids the model was trained on."""
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS, *ROLES],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = list(corpus["question"]) + [task.trace(r) for r in corpus.to_dict("records")]
    bpe.train_from_iterator(texts, trainer=trainer)
    # padding_side survives save and reload only when given to the constructor (docs/stack.md)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=EOS, pad_token=PAD, padding_side="left", chat_template=CHAT_TEMPLATE
    )


def make_model(tokenizer: PreTrainedTokenizerFast, cfg: BuildConfig) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return model


def encode_corpus(corpus: pd.DataFrame, task, tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) pairs; the completion is the gold trace plus EOS."""
    out = []
    for row in corpus.to_dict("records"):
        completion = tokenizer(task.trace(row), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append((encode_prompt(tokenizer, row["prompt"]), completion))
    return out


def completion_loss(model, batch: list[tuple[list[int], list[int]]], pad_id: int) -> torch.Tensor:
    """Next-token loss on the completion tokens only (the prompt is given, not predicted)."""
    width = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (p, c) in enumerate(batch):
        seq = p + c
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, len(p) : len(seq)] = torch.tensor(c)
        mask[row, : len(seq)] = 1
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def sampled_pass1(model, tokenizer, task, rows: pd.DataFrame, cfg: BuildConfig, seed: int) -> float:
    """Share of rows whose one sample at temperature 1.0 is correct."""
    gen = HFGenerator(model, tokenizer)
    outs = gen.generate(list(rows["prompt"]), n=1, temperature=1.0, max_new_tokens=cfg.max_new_tokens, seed=seed, progress=False)
    return float(np.mean([task.score(o[0].text, a) for o, a in zip(outs, rows["answer"])]))


def tier_table(model, tokenizer, task, rows: pd.DataFrame, cfg: BuildConfig, progress: bool = False) -> pd.DataFrame:
    """Per tier: greedy accuracy, sampled pass@1 and pass@k (k = eval_samples, temperature 1.0),
    and the longest gold trace in tokens with EOS (a smaller max_new_tokens fails that tier).

    With n = k samples the unbiased pass@k estimator is "any of the k is correct"."""
    gen = HFGenerator(model, tokenizer)
    prompts, answers = list(rows["prompt"]), list(rows["answer"])
    greedy = gen.generate(prompts, temperature=0, max_new_tokens=cfg.max_new_tokens, progress=progress, desc="greedy")
    sampled = gen.generate(
        prompts, n=cfg.eval_samples, temperature=1.0, max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed, progress=progress, desc="sample",
    )
    scores = pd.DataFrame(
        {
            "tier": list(rows["tier"]),
            "greedy": [task.score(g[0].text, a) for g, a in zip(greedy, answers)],
            "pass@1": [np.mean([task.score(c.text, a) for c in s]) for s, a in zip(sampled, answers)],
            f"pass@{cfg.eval_samples}": [max(task.score(c.text, a) for c in s) for s, a in zip(sampled, answers)],
        }
    )
    trace_tokens = [len(tokenizer(task.trace(r), add_special_tokens=False)["input_ids"]) + 1 for r in rows.to_dict("records")]
    table = scores.groupby("tier").mean().reset_index()
    table.insert(1, "n", scores.groupby("tier").size().values)
    table["max_trace_tokens"] = pd.Series(trace_tokens).groupby(scores["tier"]).max().values
    overall = {**scores.drop(columns="tier").mean().to_dict(), "max_trace_tokens": max(trace_tokens)}
    table = pd.concat([table, pd.DataFrame([{"tier": "all", "n": len(scores), **overall}])], ignore_index=True)
    return table.round(3)


def save(model, tokenizer, out_dir: str | Path, info: dict) -> Path:
    """A plain HF folder (fp32 safetensors) plus build_info.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    artifacts.write_json(out / "build_info.json", info)
    return out


# ---- a random tiny model for smoke runs on real tasks ----------------------------------------
#: ``model.path: tiny-random``: the embedded tokenizer (byte-level, so any text encodes) on a
#: 2-layer, hidden-32 Qwen2 with random weights and room for the longest real prompts (AIME,
#: MATH: about 2,000 byte-level tokens). It answers nothing right on purpose; it exists so
#: that every task runs through every stage in seconds (tests, first tries of a new task).
TINY_RANDOM = "tiny-random"
TINY_RANDOM_VERSION = 1  # bump when the recipe changes: the folder name carries it


def tiny_random(cache: str | Path) -> Path:
    """The tiny random model's folder under ``cache``, built once (deterministic: seed 0,
    one thread, so every machine builds the same bytes and the same model fingerprint)."""
    out = Path(cache) / f"{TINY_RANDOM}-v{TINY_RANDOM_VERSION}"
    if (out / "config.json").exists():
        return out
    tokenizer = AutoTokenizer.from_pretrained(default_path())
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
        tie_word_embeddings=True, bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.set_num_threads(threads)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    # build beside, then rename: a concurrent or interrupted build never leaves half a model
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o777 & ~artifacts._umask())  # mkdtemp makes 0700
    save(model, tokenizer, tmp, {"recipe": TINY_RANDOM, "version": TINY_RANDOM_VERSION,
                                 "num_parameters": sum(p.numel() for p in model.parameters())})
    try:
        tmp.rename(out)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
