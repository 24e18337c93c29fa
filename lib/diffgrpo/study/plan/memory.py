"""Memory of each job's largest pass, in GiB: a training pass with TRL's generation around it, or a generation.

Memory of one training pass (TRL 1.16 GRPO + PEFT LoRA; the terms are :class:`TrainMemory`'s):

- weights: parameters x bytes of ``model.dtype`` (the reference model of beta > 0 is the base
  with the adapter off: no second copy);
- LoRA: r x (in + out) per targeted projection and layer, float32 (PEFT upcasts adapters),
  16 bytes a parameter with its gradient and AdamW's two moments;
- saved activations per token and layer (:meth:`ModelShape.layer_activation_bytes`): without
  gradient checkpointing every layer's; with it, each layer's input (hidden x dtype) plus one
  layer's activations recomputed in the backward; either way one layer's worth more for the
  gradients of the layer whose backward runs, and two residual-stream gradients;
- logits: TRL 1.16 never holds tokens x vocab: its fused LM head
  (``trl.trainer.utils.add_fused_lm_head``, ``trl/kernels/chunked_logprob.py``) projects tiles
  of 4,096 tokens x 32,768 vocabulary entries and keeps the scored hidden states plus a float32
  gradient of them. The tokens x vocab x (2 + 4) bytes of a bf16 logits tensor and its float32
  log-softmax, what older TRL held, are shown beside it (``logits_naive_gib``) for comparison;
- left padding: TRL left-pads an update's prompts, and with a padding mask transformers' SDPA
  path repeats a GQA model's k and v to every query head (``repeat_kv``; with no mask it passes
  ``enable_gqa`` instead), which autograd keeps: 2 x 2 x (q_dim - kv_dim) bytes a token more for
  the layer recomputed and the one whose backward runs (0 for a model without GQA). Measured on
  one H200 (2026-11-27, the issue-39 extra measurement beside ``make gpu-accept``), Qwen3-4B's
  pass of 64 x 768 tokens: 28.37 GiB all-ones mask, 29.53 left-padded (+1.16 GiB, +4.1%); this
  term gives +1.13 GiB;
- colocated vLLM: ``train.vllm_gpu_memory_utilization`` of the GPU, held through the training
  pass unless ``train.trl.vllm_enable_sleep_mode`` (TRL sleeps vLLM at level 2: weights and KV
  cache freed);
- merged-LoRA copies: with HF generation and ``train.merge_lora_for_generation`` every
  targeted weight is copied while generating (:func:`diffgrpo.train.merged_lora`).

How close, measured on the H200 (2026-11-27, ``make gpu-accept``, all-ones masks, so without the
padding term): Qwen3-4B's pass 28.37 GiB against 34.75 planned (0.82), Llama-3.1-8B's 51.23
against 50.91 (1.01). The plan stays the upper figure and the acceptance's band is 0.75-1.2 of it:
each saved-activation term above was re-derived from transformers 5.17, PEFT 0.21 and TRL 1.16's
code and none is Qwen3-specific enough to explain 6.4 GiB; the likeliest is the backward's
transient gradients, planned as one layer's activations (7.96 GiB for Qwen3-4B at that shape),
which held for Llama but not for Qwen3. The acceptance's second edition records autograd's saved
bytes a layer on the GPU to settle it (docs/gpu.md).

Generation memory: weights plus the KV cache of the batch (2 x layers x kv_dim x dtype bytes a
token) at the batch size HF runs (``sampling.batch_size``; in training the process's whole
generation batch), plus float32 logits of one step; with vLLM, its share of the GPU, which must
hold its weights and one sequence of ``max_model_len`` tokens or vLLM refuses to start.
"""

from __future__ import annotations

import dataclasses

from diffgrpo.models.vllm_engine import vllm_lora_rank
from diffgrpo.params import Config
from diffgrpo.study.plan.shapes import DTYPE_BYTES, GPU, ModelShape
from diffgrpo.study.plan.work import TrainWork

GIB = 2 ** 30
#: the PEFT adapter dtype (float32) and AdamW: parameter + gradient + two moments
LORA_BYTES_PER_PARAM = 4 + 4 + 8
#: TRL 1.16's fused LM head tile (trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, and
#: trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE)
LM_HEAD_TILE = (4096, 32768)
#: the share of the GPU a pass may plan for: the rest is the CUDA context, cuBLAS workspaces
#: and the caching allocator's fragmentation
USABLE = 0.9


def _act_bytes(cfg: Config) -> int:
    """Bytes of an activation: bf16 under TRL's autocast (train.bf16) or a 16-bit model, else 4."""
    return 2 if cfg.train.bf16 or DTYPE_BYTES[cfg.model.dtype] == 2 else 4


@dataclasses.dataclass(frozen=True)
class TrainMemory:
    """GiB of one forward/backward pass of one micro-batch, and of TRL's generation around it."""

    weights_gib: float
    lora_gib: float  # adapter + gradient + AdamW moments
    activations_gib: float  # as the params run it (checkpointing or not)
    activations_no_ckpt_gib: float
    activations_ckpt_gib: float
    logits_gib: float  # TRL 1.16's fused LM head
    logits_naive_gib: float  # tokens x vocab in bf16 + its float32 log-softmax (older TRL), for comparison
    padding_gib: float  # left-padded prompts: SDPA's k and v repeated to every query head (GQA)
    vllm_gib: float  # colocated vLLM's share held during the pass
    train_pass_gib: float
    generation_gib: float  # TRL's generation of the whole batch (HF or colocated vLLM)
    kv_gib: float  # HF generation's KV cache (0 with vLLM: inside its share)
    merged_gib: float  # merged-LoRA copies during HF generation
    vllm_kv_need_gib: float  # colocated vLLM: weights + one max_model_len sequence, which its share must hold
    vllm_share_gib: float


def train_memory(cfg: Config, shape: ModelShape, w: TrainWork, gpu: GPU, prompt: int) -> TrainMemory:
    t = cfg.train
    wbytes = DTYPE_BYTES[cfg.model.dtype]
    act = _act_bytes(cfg)
    weights = shape.params * wbytes
    lora = shape.lora_params(t.lora.r, list(t.lora.target_modules)) * LORA_BYTES_PER_PARAM
    seq = prompt + w.completion
    tokens = w.completions_per_pass * seq
    scored = w.completions_per_pass * w.completion if cfg.model.device == "cuda" else tokens  # CPU scores every position
    per_layer = shape.layer_activation_bytes(act, t.lora.r)
    stream = 2 * tokens * shape.hidden * act  # the residual stream's gradient in the backward
    final_norm = tokens * shape.hidden * 4
    backward = tokens * per_layer  # the gradients of one layer's activations while its backward runs
    no_ckpt = tokens * shape.layers * per_layer + backward + stream + final_norm
    ckpt = tokens * (shape.layers * shape.hidden * act + per_layer) + backward + stream + final_norm
    acts = ckpt if t.gradient_checkpointing else no_ckpt
    tile = min(scored, LM_HEAD_TILE[0]) * min(shape.vocab, LM_HEAD_TILE[1]) * act
    logits = scored * shape.hidden * (act + 4) + 2 * tile
    naive = w.completions_per_pass * w.completion * shape.vocab * (2 + 4)
    held_layers = (1 if t.gradient_checkpointing else shape.layers) + 1  # the saved layers, and the one in backward
    padding = held_layers * tokens * 2 * act * (shape.q_dim - shape.kv_dim)  # k and v repeated to the query heads
    colocate = t.use_vllm and t.vllm_mode == "colocate"
    share = t.vllm_gpu_memory_utilization * gpu.memory_gib * GIB if colocate else 0.0
    held = 0.0 if not colocate or t.trl.get("vllm_enable_sleep_mode", False) else share
    train_pass = weights + lora + acts + logits + padding + held
    kv = merged = 0.0
    if t.use_vllm:
        generation = weights + lora + (share if colocate else 0.0)
    else:
        kv = w.generation_batch * seq * shape.kv_bytes_per_token(wbytes)
        merged = shape.targeted_params(list(t.lora.target_modules)) * wbytes if t.merge_lora_for_generation else 0.0
        generation = weights + lora + kv + merged + w.generation_batch * shape.vocab * 4 * 2
    max_len = t.trl.get("vllm_max_model_length") or shape.max_positions
    need = weights + max_len * shape.kv_bytes_per_token(wbytes) if colocate else 0.0
    g = lambda b: round(b / GIB, 2)  # noqa: E731
    return TrainMemory(g(weights), g(lora), g(acts), g(no_ckpt), g(ckpt), g(logits), g(naive), g(padding), g(held),
                       g(train_pass), g(generation), g(kv), g(merged), g(need), g(share))


@dataclasses.dataclass(frozen=True)
class GenMemory:
    weights_gib: float
    kv_gib: float
    total_gib: float
    vllm_kv_need_gib: float  # vLLM: weights + one max_model_len sequence (its share must hold it)
    vllm_share_gib: float


#: GiB of vLLM's share that holds neither weights nor KV cache: the activation peak it profiles
#: at start and its CUDA graphs (assumption, docs/gpu.md)
VLLM_OVERHEAD_GIB = 1.5


def vllm_kv_sequences(shape: ModelShape, wbytes: int, share_gib: float, seq_tokens: int) -> int:
    """Sequences of ``seq_tokens`` (prompt + completion cap) whose KV cache fits a vLLM share of
    ``share_gib`` beside the weights and :data:`VLLM_OVERHEAD_GIB`: how many vLLM keeps in flight
    at most (it preempts the rest). At least 1: a share too small to start is the plan's
    memory check's to refuse (``vllm_kv_need_gib``)."""
    free = (share_gib - VLLM_OVERHEAD_GIB) * GIB - shape.params * wbytes
    return max(1, int(free // (seq_tokens * shape.kv_bytes_per_token(wbytes))))


def generation_memory(cfg: Config, shape: ModelShape, gpu: GPU, batch: int, prompt: int, new_tokens: int,
                      lora: bool) -> GenMemory:
    """Probe or evaluation: HF at ``batch`` sequences, or vLLM's share."""
    wbytes = DTYPE_BYTES[cfg.model.dtype]
    weights = shape.params * wbytes
    g = lambda b: round(b / GIB, 2)  # noqa: E731
    if cfg.generation.backend == "vllm":
        share = cfg.generation.vllm_gpu_memory_utilization * gpu.memory_gib * GIB
        max_len = cfg.generation.vllm_max_model_len or shape.max_positions
        adapters = shape.lora_params(vllm_lora_rank(cfg), list(cfg.train.lora.target_modules)) * wbytes if lora else 0
        need = weights + adapters + max_len * shape.kv_bytes_per_token(wbytes)
        return GenMemory(g(weights), g(share - weights), g(share), g(need), g(share))
    kv = batch * (prompt + new_tokens) * shape.kv_bytes_per_token(wbytes)
    act = 2 if wbytes == 2 else 4
    prefill = batch * prompt * act * (2 * shape.hidden + 2 * shape.intermediate)  # one layer's, no grad
    logits = batch * shape.vocab * 4 * 2
    return GenMemory(g(weights), g(kv), g(weights + kv + prefill + logits), 0.0, 0.0)

