"""One generation interface for every stage that samples from a model (probe, evaluate, build).

``HFGenerator.generate(prompts, n=...)`` takes chat messages and returns ``n`` completions per
prompt, in prompt order. It batches the ``len(prompts) * n`` requests, sorted by prompt length
so that a batch carries little padding, pads on the LEFT (a decoder-only model continues from
the last position; right padding would put pad tokens between prompt and completion), and
decodes only the completion tokens, so an example answer in the prompt can never be scored as
the model's.

The vLLM backend (:mod:`diffgrpo.models.vllm_engine`; the GPU environment or vLLM's CPU build) has the same
``generate`` signature and returns the same :class:`Completion` records;
:func:`diffgrpo.models.resumable_sampling.load_generator` picks one by ``generation.backend``.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from transformers import DynamicCache, GenerationConfig
from transformers.cache_utils import DynamicLayer

from diffgrpo import progress as progress_bars


@dataclass(frozen=True)
class Completion:
    """One sampled continuation of a prompt."""

    text: str  # the completion alone, special tokens removed
    num_tokens: int  # tokens the model generated, the EOS token included when it stopped
    finished: bool  # True when it stopped at EOS, False when cut at max_new_tokens


def encode_prompt(tokenizer, messages: list[dict], chat_template_kwargs: dict | None = None) -> list[int]:
    """Prompt token ids: the chat template with the assistant turn opened.
    ``chat_template_kwargs`` (``model.chat_template_kwargs``) go to the template, e.g.
    ``{"enable_thinking": False}`` for Qwen3."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         **(chat_template_kwargs or {}))
    # the template already holds any BOS token; adding special tokens again would double it
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def left_pad(seqs: list[list[int]], pad_id: int, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> (input_ids, attention_mask), padded on the left to the longest (rounded up
    to ``multiple``: a static cache's compiled step is reused across batches of one width)."""
    width = -(-max(len(s) for s in seqs) // multiple) * multiple
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    return ids, mask


#: prompt widths on cuda are rounded up to this many tokens, so the static cache's compiled decode
#: step sees few shapes (each new one recompiles, ~45 s)
STATIC_WIDTH = 64


def hf_cache(device: str) -> str:
    """The KV cache HF generation uses on ``device`` (a device type: ``cuda``, ``cpu``) in the
    probe and the evaluation: ``static`` on cuda, where transformers compiles the decode step on
    its first call (45-54 s) and a step of a 36-layer 4B model at batch 256 costs 38.8 ms instead
    of 81.0 eager with a growing ``dynamic`` cache, which also let the caching allocator reserve
    the whole card (one H200, 2026-11-27, docs/gpu.md "Measured on an H200"); ``dynamic``
    elsewhere: a growing cache that appends in place (:func:`append_cache`)."""
    return "static" if str(device).split(":")[0] == "cuda" else "dynamic"


class AppendLayer(DynamicLayer):
    """transformers' ``DynamicLayer`` with room to grow: its keys and values live in a buffer
    ``room`` positions longer than what it holds, a new token is written in place and attention
    reads a view of the filled part. ``DynamicLayer`` concatenates (``torch.cat``) the whole
    cache at every decode step, a copy that grows with the sequence: 0.20 of a 0.93 s
    generation of 64 x 48 tokens with the embedded model on one CPU thread (docs/benchmarks.md
    "Where a training step's time goes"). The values attention sees are the same, bit for bit
    (tests/test_generation.py compares tokens and logits); a cache that is cropped, reordered or
    reset (``self.keys`` reassigned) is copied into a new buffer at its next update."""

    def __init__(self, room: int = 64):
        super().__init__()
        self.room = max(int(room), 1)
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        self._filled: torch.Tensor | None = None  # the keys view last handed out

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, new = self.get_seq_length(), key_states.shape[-2]
        buffers = self._buffers
        if (buffers is None or self.keys is not self._filled or n + new > buffers[0].shape[-2]
                or buffers[0].shape[:-2] != key_states.shape[:-2]):
            shape = (*key_states.shape[:-2], n + new + self.room, key_states.shape[-1])
            buffers = (key_states.new_empty(shape), value_states.new_empty(shape))
            if n:
                buffers[0][..., :n, :].copy_(self.keys)
                buffers[1][..., :n, :].copy_(self.values)
            self._buffers = buffers
        buffers[0][..., n:n + new, :].copy_(key_states)
        buffers[1][..., n:n + new, :].copy_(value_states)
        self.keys, self.values = buffers[0][..., :n + new, :], buffers[1][..., :n + new, :]
        self._filled = self.keys
        return self.keys, self.values

    def reset(self) -> None:
        self._buffers = None
        super().reset()


def append_cache(model, room: int) -> DynamicCache:
    """A ``DynamicCache`` for ``model`` whose full-attention layers are :class:`AppendLayer` s
    with ``room`` positions to grow before a copy (the new tokens a ``generate`` call may add);
    sliding-window and other special layers stay as transformers builds them."""
    cache = DynamicCache(config=model.config)
    cache.layers = [AppendLayer(room) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    if cache.layer_class_to_replicate is DynamicLayer:  # a config that names no layer types: built lazily
        cache.layer_class_to_replicate = functools.partial(AppendLayer, room)
    return cache


@contextlib.contextmanager
def appending_cache(model, room: int):
    """Within it, ``model.generate`` (a transformers or PEFT model; TRL's HF generation calls it)
    gets an :func:`append_cache` unless the call passes a cache or its generation config names
    one (``cache_implementation``, e.g. TRL's ``cache_implementation`` option)."""
    inner = model.generate

    def generate(*args, **kwargs):
        config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
        if kwargs.get("past_key_values") is None and getattr(config, "cache_implementation", None) in (None, "dynamic"):
            kwargs["past_key_values"] = append_cache(model, room)
        return inner(*args, **kwargs)

    own = vars(model).get("generate")  # an instance's own generate (a wrapper already), put back after
    model.generate = generate
    try:
        yield model
    finally:
        if own is None:
            del model.generate
        else:
            model.generate = own


class HFGenerator:
    """Batched sampling with a transformers model (CPU or one GPU)."""

    def __init__(self, model, tokenizer, batch_size: int = 64, device: str | torch.device | None = None,
                 chat_template_kwargs: dict | None = None, cache: str | None = None):
        self.model = model if device is None else model.to(device)
        self.model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.device = next(self.model.parameters()).device
        # stop at the tokenizer's EOS and at any the model's generation config adds
        # (instruct models often end a turn with one token and the text with another)
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {e for e in [*eos, tokenizer.eos_token_id] if e is not None}
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        # static on cuda, the CPU path as it was (hf_cache); ``cache`` chooses (the acceptance run
        # measures both on cuda: scripts/gpu_accept.py)
        self.cache = cache or hf_cache(self.device.type)
        self.width_multiple = STATIC_WIDTH if self.cache == "static" else 1

    def generate(
        self,
        prompts: list[list[dict]],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int = 0,
        progress: bool = True,
        desc: str = "generate",
    ) -> list[list[Completion]]:
        """``n`` completions for each prompt, in prompt order. ``temperature == 0``: greedy.

        The same call with the same seed gives the same completions (the RNG is seeded once
        and batches run in a fixed order); the caller's global RNG state is left untouched.
        """
        encoded = [encode_prompt(self.tokenizer, p, self.chat_template_kwargs) for p in prompts]
        # longest prompts first: equal lengths share a batch, and memory peaks at the start
        jobs = sorted(((i, j) for i in range(len(prompts)) for j in range(n)), key=lambda ij: (-len(encoded[ij[0]]), ij))
        config = self._config(temperature, top_p, max_new_tokens)
        out: list[list[Completion | None]] = [[None] * n for _ in prompts]
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(seed)
            bar = progress_bars.bar(len(jobs), desc, unit="completion", disable=not progress)
            for start in range(0, len(jobs), self.batch_size):
                batch = jobs[start : start + self.batch_size]
                ids, mask = left_pad([encoded[i] for i, _ in batch], self.pad_id, self.width_multiple)
                cache = {} if self.cache == "static" else {"past_key_values": append_cache(self.model, max_new_tokens)}
                generated = self.model.generate(
                    input_ids=ids.to(self.device), attention_mask=mask.to(self.device), generation_config=config, **cache
                )
                for (i, j), row in zip(batch, generated[:, ids.shape[1] :].tolist()):
                    out[i][j] = self._completion(row)
                bar.update(len(batch))
            bar.close()
        return out  # type: ignore[return-value]

    def context_length(self) -> int | None:
        """Positions the model has (``max_position_embeddings``), None when it does not say."""
        return context_length(self.model)

    def check_prompts(self, ids: list, prompts: list, max_new_tokens: int, where: str | None = None) -> None:
        """Refuse, before any generation, a prompt whose tokens plus ``max_new_tokens`` exceed
        the model's context (a 1 MB prompt would otherwise try to allocate its attention)."""
        check_fit(self.tokenizer, ids, prompts, max_new_tokens, self.context_length(), self.chat_template_kwargs,
                  where, "max_new_tokens")

    def _config(self, temperature: float, top_p: float, max_new_tokens: int) -> GenerationConfig:
        """Every sampling knob set explicitly, so no model default (top_k 50, a repetition
        penalty from a hub config) slips into the probe."""
        sample = temperature > 0
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sample,
            temperature=temperature if sample else 1.0,
            top_p=top_p if sample else 1.0,
            top_k=0 if sample else None,  # 0: off (a None would take the model's default)
            repetition_penalty=1.0,
            num_beams=1,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
            # cuda: a static cache, which transformers compiles on the first call (hf_cache)
            **({"cache_implementation": "static"} if self.cache == "static" else {}),
        )

    def _completion(self, tokens: list[int]) -> Completion:
        """Cut at the first EOS; what follows it in the batch tensor is padding."""
        for k, tok in enumerate(tokens):
            if tok in self.eos_ids:
                text = self.tokenizer.decode(tokens[:k], skip_special_tokens=True)
                return Completion(text=text, num_tokens=k + 1, finished=True)
        return Completion(text=self.tokenizer.decode(tokens, skip_special_tokens=True), num_tokens=len(tokens), finished=False)


class PromptTooLong(ValueError):
    """A dataset row whose prompt does not fit the model's context with the generation limit."""


def context_length(model) -> int | None:
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def check_fit(tokenizer, ids: list, prompts: list, new_tokens: int, context: int | None,
              chat_template_kwargs: dict | None = None, where: str | None = None, limit_name: str = "max_new_tokens",
              context_name: str = "the model's context") -> None:
    """Every prompt's tokens plus ``new_tokens`` within ``context`` (skipped when it is None); a
    prompt of more characters than the context has positions times 64 is refused untokenized.
    ``context_name``: what sets the context, as the error names it."""
    if context is None:
        return
    for row, (pid, prompt) in enumerate(zip(ids, prompts), 1):
        chars = sum(len(str(m.get("content", ""))) for m in prompt) if not isinstance(prompt, str) else len(prompt)
        n = chars if chars > 64 * context else len(encode_prompt(tokenizer, prompt, chat_template_kwargs))
        if n + new_tokens > context:
            unit = "characters" if chars > 64 * context else "tokens"
            raise PromptTooLong(
                f"{where + ': ' if where else ''}id {pid!r} (prompt {row} of the {len(ids)} to generate for): its "
                f"prompt is {n} {unit}; with {limit_name} = "
                f"{new_tokens} it needs more than {context_name} of {context} positions; drop or shorten that "
                f"row, or lower {limit_name}")


class LazyGenerator:
    """A generator built on its first ``generate`` call: work already cached on disk then
    costs no model load (evaluating a checkpoint whose chunks are all written loads nothing)."""

    def __init__(self, make):
        self._make, self._generator = make, None

    def generate(self, *args, **kwargs):
        if self._generator is None:
            self._generator = self._make()
        return self._generator.generate(*args, **kwargs)

    def check_prompts(self, *args, **kwargs):
        if self._generator is None:
            self._generator = self._make()
        check = getattr(self._generator, "check_prompts", None)
        return check(*args, **kwargs) if check is not None else None
