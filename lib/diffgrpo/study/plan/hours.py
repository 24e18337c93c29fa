"""Seconds of each job, as a (low, high) range from the throughput figures in :data:`THROUGHPUT`.

docs/gpu.md gives the figures' sources and assumptions. The ranges bound, they do not predict:
the low end assumes completions average half their cap (the longest of an update three quarters
of it) and the efficient end of each range, the high end every completion at its cap and the
slow end. Each function's ``end`` picks the range's end: 0 the low, 1 the high.

Three facts of TRL 1.16 the times follow (issue 28): every row of an update is padded to its
longest prompt and completion, so the trained tokens are rows x (prompt + the longest
completion), not the mean; with vLLM the importance-sampling correction runs one more no-grad
forward of the trained model over the batch (2N FLOPs a token more; so does ``num_iterations``
> 1); and vLLM keeps in flight only the sequences its share's KV cache holds
(:func:`~diffgrpo.study.plan.memory.vllm_kv_sequences`).
"""

from __future__ import annotations

import math

from diffgrpo.models.generation import hf_cache
from diffgrpo.params import Config
from diffgrpo.study.plan.memory import vllm_kv_sequences
from diffgrpo.study.plan.shapes import DTYPE_BYTES, GPU, ModelShape
from diffgrpo.study.plan.work import TrainWork

#: (low, high) ranges behind every time, docs/gpu.md says where each comes from. "Measured on an
#: H200": one NVIDIA H200 141 GB (driver 580.159.04, torch 2.11.0+cu130, transformers 5.17.0, peft
#: 0.21.2, trl 1.16.0), 2026-11-27, `make gpu-accept` (scripts/gpu_accept.py) and its generation
#: diagnostic (ms a decode step at batch 256, prompt 256: (t(72 new) - t(8 new)) / 64, after a
#: warm-up), at Qwen3-4B's and Llama-3.1-8B's shapes built from the shipped config.json, random weights
THROUGHPUT = {
    # fraction of the memory-bandwidth roofline a decode step reaches
    "vllm_decode_bw": (0.35, 0.7),
    "hf_decode_bw": (0.25, 0.5),
    # HF generate, eager with a dynamic cache: ms a layer a decode step of kernel launches from Python,
    # whatever the batch (launch-bound). Measured on the H200: Qwen3-4B's 36 layers at 68.6 ms a step
    # (PEFT LoRA r32, batch 256), 81.0 (bare), 127 (the acceptance's model: LoRA + TRL's fused head,
    # batch 64) and 117 (256 x 512 new tokens, one GRPO step's rollouts), less the bandwidth term (5-16 ms):
    # 1.65-3.5 ms a layer. Before
    # issue 39: 0.1-0.3, an assumption that made HF generation 3-11x optimistic
    "hf_step_overhead_ms_per_layer": (1.65, 3.5),
    # the same with a static cache, its decode step compiled (cache_implementation="static": what the
    # probe and evaluation use on cuda, diffgrpo.models.generation.hf_cache): 38.8 ms a step on the H200
    # at batch 256 (bare Qwen3-4B shape), less the bandwidth term (8-16 ms there): 0.6-1.1 ms a layer
    "hf_static_step_overhead_ms_per_layer": (0.6, 1.1),
    # s the static cache's first call costs (torch.compile of the decode step), once a model a process:
    # 45-54 s on the H200 (the diagnostic's first call at batch 256)
    "hf_static_compile_s": (45.0, 60.0),
    # fraction of bf16 peak in prefill (a no-grad forward): measured on the H200 over 64 x 768 tokens,
    # 0.26 (Qwen3-4B, 1.512 s) and 0.53 (Llama-3.1-8B, 1.41 s); before: 0.3-0.6, assumed
    "prefill_mfu": (0.26, 0.53),
    # fraction of bf16 peak in training's forward and backward (model FLOPs utilisation): measured on
    # the H200, one pass of 64 x 768 tokens, LoRA r32, checkpointing, bf16: 0.27 (Qwen3-4B, 4.375 s)
    # and 0.39 (Llama-3.1-8B, 5.755 s); before: 0.2-0.45, assumed
    "train_mfu": (0.27, 0.39),
    # sequences vLLM decodes at once (EngineArgs.max_num_seqs default in the probe and evaluation)
    "vllm_max_num_seqs": (256, 256),
    # s to build a vLLM engine (weights, profiling, CUDA graphs), once per probe / evaluation / training process
    "vllm_engine_start_s": (60.0, 240.0),
    # s per training step for colocated vLLM: LoRA merged and pushed to vLLM, wake up and sleep
    "vllm_colocate_step_s": (1.0, 4.0),
    # GB/s reading a checkpoint from local disk (HF loads the base model for every evaluated checkpoint)
    "load_gbs": (1.0, 4.0),
    # mean completion length as a fraction of its cap
    "completion_fraction": (0.5, 1.0),
    # the longest completion of an update (hundreds of samples) as a fraction of the cap: TRL pads every row to it
    "longest_completion_fraction": (0.75, 1.0),
}

#: TRL left-pads an update's prompts, so its attention mask holds zeros and SDPA leaves the flash
#: kernel: a training pass takes 6.3% longer. Measured on the H200 (2026-11-27, the issue-39 extra
#: measurement beside `make gpu-accept`): Qwen3-4B's pass of 64 x 768 tokens, 4.384 s with an all-ones
#: mask, 4.660 s with up to 128 tokens of left padding a row (the memory's side: plan.memory, padding)
PADDED_PASS_TIME = 1.063


def decode_seconds(cfg: Config, shape: ModelShape, gpu: GPU, sequences: int, prompt: int, cap: int, backend: str,
                   batch: int, end: int, share: float | None = None, cache: str = "dynamic") -> float:
    """Seconds to generate ``sequences`` completions (cap ``cap`` tokens) at ``end`` 0 (low) or 1
    (high). vLLM keeps ``batch`` sequences in flight, or fewer when its share of the GPU
    (``share``, default ``generation.vllm_gpu_memory_utilization``) holds the KV cache of fewer.
    HF: a decode step reads the weights and the batch's KV cache (the bandwidth term) and pays a
    per-layer launch overhead measured on the card: eager with a ``dynamic`` cache, or a
    ``static`` one compiled (:data:`THROUGHPUT`)."""
    if sequences <= 0:
        return 0.0
    wbytes = DTYPE_BYTES[cfg.model.dtype]
    weights = shape.params * wbytes
    frac = THROUGHPUT["completion_fraction"][end]
    kv = shape.kv_bytes_per_token(wbytes)
    nonembed = shape.layers * shape.layer_params
    prefill = sequences * prompt * 2 * nonembed / (gpu.bf16_tflops * 1e12 * THROUGHPUT["prefill_mfu"][1 - end])
    if backend == "vllm":
        share = cfg.generation.vllm_gpu_memory_utilization if share is None else share
        b = min(batch, sequences, vllm_kv_sequences(shape, wbytes, share * gpu.memory_gib, prompt + cap))
        mean_len = frac * cap
        steps = math.ceil(sequences / b) * mean_len  # continuous batching keeps b sequences in flight
        step_bytes = weights + b * (prompt + mean_len / 2) * kv
        step = step_bytes / (gpu.bandwidth_tbs * 1e12 * THROUGHPUT["vllm_decode_bw"][1 - end])
        return prefill + steps * step
    b = min(batch, sequences)
    steps = math.ceil(sequences / b) * THROUGHPUT["longest_completion_fraction"][end] * cap  # a padded batch runs to its longest
    step_bytes = weights + b * (prompt + cap / 2) * kv
    step = (step_bytes / (gpu.bandwidth_tbs * 1e12 * THROUGHPUT["hf_decode_bw"][1 - end])
            + shape.layers * THROUGHPUT[_overhead_key(cache)][end] / 1e3)
    return prefill + steps * step


def _overhead_key(cache: str) -> str:
    return "hf_static_step_overhead_ms_per_layer" if cache == "static" else "hf_step_overhead_ms_per_layer"


def train_flops_per_token(cfg: Config) -> tuple[int, int]:
    """(FLOPs a trained token, FLOPs a generated token) of training, in units of N (the
    non-embedding parameters plus the LM head): 2 forward + 2 backward (frozen weights: input
    gradients only) + 2 recomputed with gradient checkpointing for every token an update trains
    on; 2 for the reference model's forward (beta > 0) and 2 for the old policy's forward (vLLM's
    importance-sampling correction, or ``num_iterations`` > 1) for every token generated."""
    t = cfg.train
    trained = 2 + 2 + (2 if t.gradient_checkpointing else 0)
    old_policy = (t.use_vllm and t.trl.get("vllm_importance_sampling_correction", True)) or t.num_iterations > 1
    return trained, (2 if t.beta > 0 else 0) + (2 if old_policy else 0)


def train_flops(shape: ModelShape, token_units: float) -> float:
    """FLOPs of ``token_units`` (tokens x FLOPs a token in units of N, :func:`train_flops_per_token`):
    N is the non-embedding parameters plus the LM head (a matmul too)."""
    return token_units * (shape.layers * shape.layer_params + shape.vocab * shape.hidden)


def compute_seconds(shape: ModelShape, gpu: GPU, token_units: float, end: int) -> float:
    """Seconds of training's forwards and backwards over ``token_units`` at the ``train_mfu`` range's end."""
    return train_flops(shape, token_units) / (gpu.bf16_tflops * 1e12 * THROUGHPUT["train_mfu"][1 - end])


def train_seconds(cfg: Config, shape: ModelShape, gpu: GPU, w: TrainWork, prompt: int, end: int) -> float:
    """Seconds of one level of a run: the forward and backward passes over every row padded to the
    update's longest completion (left-padded prompts: :data:`PADDED_PASS_TIME`), the no-grad
    forwards over every generated row, TRL's generation of every completion (HF: eager, TRL 1.16
    generates with ``disable_compile=True``), and with vLLM its engine's start and each step's
    weight sync."""
    t = cfg.train
    row = prompt + THROUGHPUT["longest_completion_fraction"][end] * w.completion  # TRL pads each row to the longest
    steps = w.steps if w.max_completions is None else min(w.steps, math.ceil(w.completions / w.generation_batch))
    trained, scored = train_flops_per_token(cfg)
    compute = compute_seconds(shape, gpu, (steps * w.generation_batch * trained + w.completions * scored) * row, end)
    compute *= PADDED_PASS_TIME  # TRL's left-padded prompts: SDPA with a mask
    backend = "vllm" if t.use_vllm else "hf"
    batch = w.generation_batch
    share = t.vllm_gpu_memory_utilization if t.vllm_mode == "colocate" else None
    gen = decode_seconds(cfg, shape, gpu, w.completions, prompt, w.completion, backend, batch, end, share)
    extra = steps * THROUGHPUT["vllm_colocate_step_s"][end] + THROUGHPUT["vllm_engine_start_s"][end] if t.use_vllm else 0
    return compute + gen + extra


def generation_batch(cfg: Config, hf_batch: int) -> int:
    """Sequences generated at once: vLLM's ``max_num_seqs``, or HF's ``sampling.batch_size``."""
    return int(THROUGHPUT["vllm_max_num_seqs"][0]) if cfg.generation.backend == "vllm" else hf_batch


def start_seconds(cfg: Config, end: int, models: int, shape: ModelShape | None = None) -> float:
    """Seconds spent loading: a vLLM engine once per process (adapters per request), or with HF
    the base model (and a merge) for every model evaluated, and on cuda the static cache's
    compilation once a model (:data:`THROUGHPUT` ``hf_static_compile_s``)."""
    if cfg.generation.backend == "vllm":
        return THROUGHPUT["vllm_engine_start_s"][end]
    compile_s = models * THROUGHPUT["hf_static_compile_s"][end] if hf_cache(cfg.model.device) == "static" else 0.0
    if shape is None:
        return compile_s
    gb = shape.params * DTYPE_BYTES[cfg.model.dtype] / 1e9
    return compile_s + models * gb / THROUGHPUT["load_gbs"][1 - end]

