"""What a study costs before it starts: tokens, memory and time per job, without loading weights.

    python -m diffgrpo.study paper003_gsm8k_qwen3_4b --plan     # the table, then exit

For every job of the study graph (:func:`diffgrpo.study.jobs`: the probe, each run's training
and evaluation, the base model's evaluation) the plan counts prompts, completions and tokens
generated and trained on, sizes the memory of its largest pass on ``gpu`` (params key
``gpu``, :data:`GPUS`) and gives a time range for the backend the params choose (HF or vLLM).
Model sizes come from ``config.json`` (:func:`model_shape`): the embedded model's, a local
folder's, the hub cache's or a copy the project ships for the papers' models
(``assets/model_configs``), so the plan runs offline. A cuda study whose plan does not fit
the GPU is refused with :class:`PlanDoesNotFit`, naming the job, the pass, the GiB against the
GiB and the key to change.

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
- colocated vLLM: ``train.vllm_gpu_memory_utilization`` of the GPU, held through the training
  pass unless ``train.trl.vllm_enable_sleep_mode`` (TRL sleeps vLLM at level 2: weights and KV
  cache freed);
- merged-LoRA copies: with HF generation and ``train.merge_lora_for_generation`` every
  targeted weight is copied while generating (:func:`diffgrpo.train.merged_lora`).

Generation memory: weights plus the KV cache of the batch (2 x layers x kv_dim x dtype bytes a
token) at the batch size HF runs (``sampling.batch_size``; in training the process's whole
generation batch), plus float32 logits of one step; with vLLM, its share of the GPU, which must
hold its weights and one sequence of ``max_model_len`` tokens or vLLM refuses to start.

Times are ranges from the throughput figures in :data:`THROUGHPUT` (docs/gpu.md gives their
sources and assumptions). They bound, they do not predict: the low end assumes completions
average half their cap and the efficient end of each range, the high end every completion
at its cap and the slow end.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from diffgrpo.models import resolve as data, devices
from diffgrpo.store import layout
from diffgrpo.models.vllm_engine import vllm_lora_rank
from diffgrpo.train.levels import run_levels
from diffgrpo.params import Config, ParamsError

GIB = 2 ** 30
#: the PEFT adapter dtype (float32) and AdamW: parameter + gradient + two moments
LORA_BYTES_PER_PARAM = 4 + 4 + 8
#: TRL 1.16's fused LM head tile (trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, and
#: trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE)
LM_HEAD_TILE = (4096, 32768)
#: the share of the GPU a pass may plan for: the rest is the CUDA context, cuBLAS workspaces
#: and the caching allocator's fragmentation
USABLE = 0.9
CONFIGS_DIR = Path(__file__).resolve().parents[1] / "assets" / "model_configs"


class PlanError(ParamsError):
    """The plan cannot be made (no config.json for the model, an unknown GPU)."""


class PlanDoesNotFit(ParamsError):
    """A pass of a job needs more memory than the GPU has."""


@dataclasses.dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float  # what torch.cuda.get_device_properties reports as total_memory
    bandwidth_tbs: float  # HBM, TB/s
    bf16_tflops: float  # dense (no sparsity)
    source: str


#: datasheet figures (docs/gpu.md, "Throughput figures")
GPUS = {
    "h100-80gb": GPU("NVIDIA H100 SXM 80GB", 79.6, 3.35, 989.0, "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
    "h100-pcie-80gb": GPU("NVIDIA H100 PCIe 80GB", 79.6, 2.0, 756.0, "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"),
    "h200-141gb": GPU("NVIDIA H200 141GB", 139.8, 4.8, 989.0, "NVIDIA H200 Tensor Core GPU datasheet"),
    "a100-80gb": GPU("NVIDIA A100 SXM 80GB", 79.2, 2.039, 312.0, "NVIDIA A100 Tensor Core GPU datasheet"),
}

#: (low, high) ranges behind every time, docs/gpu.md says where each comes from
THROUGHPUT = {
    # fraction of the memory-bandwidth roofline a decode step reaches
    "vllm_decode_bw": (0.35, 0.7),
    "hf_decode_bw": (0.25, 0.5),
    # eager PyTorch launches every kernel of every layer from Python each step: ms a layer a step
    "hf_step_overhead_ms_per_layer": (0.1, 0.3),
    # fraction of bf16 peak in prefill and in training's forward and backward (model FLOPs utilisation)
    "prefill_mfu": (0.3, 0.6),
    "train_mfu": (0.2, 0.45),
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
}

#: prompt tokens (chat template included) when train.max_prompt_length is null: upper-end
#: estimates per task (docs/gpu.md): GSM8K questions run to ~200 tokens, MATH problems to ~400
PROMPT_TOKENS = {"gsm8k": 256, "math": 512, "math500": 512, "aime2025": 384, "bbh_shuffled_objects": 320,
                 "arithmetic": 64, "shuffled_objects": 64}
#: rows per split when the params do not say (the datasets' cards: GSM8K 7,473 / 1,319; MATH
#: 7,500 / 5,000; MATH-500 500; AIME 2025 15 a part; BBH 250 a task)
SPLIT_ROWS = {"gsm8k": {"train": 7473, "test": 1319}, "math": {"train": 7500, "test": 5000},
              "math500": {"test": 500}, "aime2025": {"test": 30}, "bbh_shuffled_objects": {"train": 600, "test": 150}}

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


# ---- the model's shape, from config.json ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelShape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool
    max_positions: int
    qk_norm: bool  # Qwen3 normalises q and k per head
    qkv_bias: bool
    source: str

    @classmethod
    def from_config(cls, c: dict, source: str) -> "ModelShape":
        c = c.get("text_config", c)
        try:
            heads = int(c["num_attention_heads"])
            hidden = int(c["hidden_size"])
            return cls(vocab=int(c["vocab_size"]), hidden=hidden, layers=int(c["num_hidden_layers"]), heads=heads,
                       kv_heads=int(c.get("num_key_value_heads") or heads),
                       head_dim=int(c.get("head_dim") or hidden // heads), intermediate=int(c["intermediate_size"]),
                       tied=bool(c.get("tie_word_embeddings", True)),
                       max_positions=int(c.get("max_position_embeddings") or 0),
                       qk_norm=c.get("model_type") == "qwen3", qkv_bias=c.get("model_type") == "qwen2", source=source)
        except KeyError as err:
            raise PlanError(f"{source}: config.json has no {err.args[0]!r}; the plan needs vocab_size, hidden_size, "
                            "num_hidden_layers, num_attention_heads and intermediate_size") from None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of a decoder layer, by PEFT's target names."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def layer_params(self) -> int:
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        norms = 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        return sum(a * b for a, b in self.projections().values()) + bias + norms

    @property
    def params(self) -> int:
        embed = self.vocab * self.hidden
        return embed * (1 if self.tied else 2) + self.layers * self.layer_params + self.hidden

    def lora_params(self, r: int, targets: list[str]) -> int:
        shapes = self.projections()
        return self.layers * sum(r * (shapes[t][0] + shapes[t][1]) for t in targets if t in shapes)

    def targeted_params(self, targets: list[str]) -> int:
        """Base weights the LoRA targets (what merged_lora copies while generating)."""
        shapes = self.projections()
        return self.layers * sum(shapes[t][0] * shapes[t][1] for t in targets if t in shapes)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def layer_activation_bytes(self, act: int, r: int) -> int:
        """Bytes one token keeps for the backward of one decoder layer (LoRA on every projection,
        dropout 0, SDPA attention, HF's RMSNorm which upcasts its input to float32).

        float32 (``act`` 4, no autocast; the CPU): the two norms' inputs (2 x 4h), their outputs
        (LoRA A's input for q/k/v and for gate/up: 2 x 4h), the attention's q, k, v and output
        (4 x (2 q_dim + 2 kv_dim); the output is o_proj's LoRA input), SiLU's input, its output
        and up's output (3 x 4I), the product (down's LoRA input: 4I):
        ``16h + 8 q_dim + 8 kv_dim + 16 I``.

        bf16 under autocast (``act`` 2): the norms keep float32 inputs (8h) but not their outputs
        (frozen base weights need no input); each LoRA module casts its input to its float32
        weight and autocast keeps a bf16 copy for the matmul (2 x (5h + q_dim + I)); SDPA's q, k,
        v, out (2 x (2 q_dim + 2 kv_dim)); the MLP's gate, SiLU and up outputs (3 x 2I):
        ``18h + 6 q_dim + 4 kv_dim + 8 I``.

        Either way: Qwen3's q/k norms keep float32 inputs (4 (q_dim + kv_dim)) and each LoRA
        module its r-wide intermediate (7 x 4r)."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        if act == 4:
            total = 16 * h + 8 * q + 8 * kv + 16 * i
        else:
            total = 18 * h + 6 * q + 4 * kv + 8 * i
        if self.qk_norm:
            total += 4 * (q + kv)
        return total + 7 * 4 * r


def _config_file(cfg: Config) -> tuple[Path, str]:
    """The config.json that describes ``model.path``, and where it came from."""
    path = cfg.model.path
    if path == data.SMOLLM2:
        f = CONFIGS_DIR / "HuggingFaceTB--SmolLM2-135M-Instruct" / "config.json"
        return f, f"shipped copy {f.relative_to(CONFIGS_DIR.parent.parent)}"
    if path in (data.EMBEDDED, data.TINY_RANDOM):
        folder, _ = data.model_path(cfg)  # tiny-random: built once into the cache (a 2-layer model)
        return Path(folder) / "config.json", f"{path}'s config.json"
    folder = Path(path).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise PlanError(f"model.path: {folder} holds no config.json; the plan reads the model's size from it "
                            "(a GGUF-only folder: add the original model's config.json beside it)")
        return folder / "config.json", f"{folder / 'config.json'}"
    if data.looks_like_hub_id(path):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except Exception:  # noqa: BLE001 - a hub library that cannot answer: fall back to the shipped copies
            cached = None
        if isinstance(cached, str):
            return Path(cached), f"hub cache of {path}"
        shipped = CONFIGS_DIR / path.replace("/", "--") / "config.json"
        if shipped.is_file():
            return shipped, f"shipped copy {shipped.relative_to(CONFIGS_DIR.parent.parent)}"
    known = sorted(p.name.replace("--", "/") for p in CONFIGS_DIR.iterdir() if (p / "config.json").is_file())
    raise PlanError(f"model.path: {path!r} has no config.json the plan can read offline: not a local folder, not in "
                    f"the hub cache, and not one of the shipped configs {known} (lib/diffgrpo/assets/model_configs); "
                    "copy its hub config.json there as <org>--<name>/config.json")


def model_shape(cfg: Config) -> ModelShape:
    f, source = _config_file(cfg)
    try:
        return ModelShape.from_config(json.loads(Path(f).read_text()), source)
    except (OSError, json.JSONDecodeError) as err:
        raise PlanError(f"model.path: cannot read {f}: {err}") from None


def gpu_of(cfg: Config) -> GPU:
    if cfg.gpu not in GPUS:
        raise PlanError(f"gpu: {cfg.gpu!r} is not a GPU the plan knows; known: {sorted(GPUS)} (diffgrpo.study.plan.GPUS)")
    return GPUS[cfg.gpu]


# ---- sizes of the work --------------------------------------------------------------------


def prompt_tokens(cfg: Config) -> int:
    """Prompt length the plan sizes for: ``train.max_prompt_length``, else :data:`PROMPT_TOKENS`."""
    if cfg.train.max_prompt_length is not None:
        return cfg.train.max_prompt_length
    return PROMPT_TOKENS.get(cfg.dataset.task, 512)


def split_rows(cfg: Config, role: str) -> int:
    """Rows of the pool (``role`` "pool") or the held-out set ("test") the study reads."""
    d = cfg.dataset
    size = d.pool_size if role == "pool" else d.test_size
    if size is not None:
        return size
    split = d.train_split if role == "pool" else d.test_split
    opts = d.task_options or {}
    if f"{split}_size" in opts:  # synthetic tasks: rows per split (per tier for arithmetic)
        tiers = opts.get("tiers")
        per = int(opts[f"{split}_size"])
        return per * (tiers[1] - tiers[0] + 1 if isinstance(tiers, list) and len(tiers) == 2 else 1)
    return SPLIT_ROWS.get(d.task, {}).get(split, 1000)


@dataclasses.dataclass(frozen=True)
class TrainWork:
    """One training run's levels, each with its batch (paper 002's EPRLI: several)."""

    level: str
    steps: int
    prompts_per_step: int
    group_size: int
    completion: int
    per_pass_prompts: int
    accumulation: int
    rounds: int  # generation rounds per update at most (dynamic sampling)
    max_completions: int | None

    @property
    def completions_per_pass(self) -> int:
        return self.per_pass_prompts * self.group_size

    @property
    def generation_batch(self) -> int:
        """Completions TRL generates at once: the process's share of an update (one round)."""
        return self.prompts_per_step * self.group_size

    @property
    def completions(self) -> int:
        """Completions generated at most: every round of every step, within the budget."""
        n = self.steps * self.rounds * self.generation_batch
        return min(n, self.max_completions) if self.max_completions is not None else n


def selected_prompts(cfg: Config, arm: str) -> int:
    """The prompts a run of ``arm`` trains on, as the plan counts them (offline, no selection
    read): its budget (a budgeted policy), else the whole pool (an upper bound for a policy
    defined by a set, e.g. tiers)."""
    pool = split_rows(cfg, "pool")
    n = cfg.arm(arm).selected_count(cfg.select, pool)
    return pool if n is None else n


def train_work(cfg: Config, arm: str) -> list[TrainWork]:
    """The run's levels as :func:`diffgrpo.train.run_levels` builds them, with the batch
    :func:`diffgrpo.models.devices.batching` derives on each of its ``train.num_processes`` processes
    (a pass's memory is one process's; the times stay one GPU's). With dynamic sampling a part-filled
    update is padded to its planned passes (diffgrpo.train.trainer.pad_batch), so a pass never
    holds more than planned."""
    acfg = cfg.for_arm(arm)
    out = []
    for lv in run_levels(acfg, arm, selected_prompts(cfg, arm)):
        try:
            b = devices.batching(lv.prompts_per_step, lv.group_size, acfg.train.num_processes,
                                 acfg.train.per_device_prompts)
        except ValueError as err:  # the study stops here, before any notebook, naming the keys
            raise PlanError(f"arm {arm!r}{'' if lv.name is None else f' level {lv.name!r}'}: {err} "
                            "(train.num_processes)") from None
        out.append(TrainWork(lv.name or "-", lv.steps, lv.prompts_per_step, lv.group_size, lv.max_completion_length,
                             b.per_device_prompts, b.gradient_accumulation_steps, lv.dynamic_rounds or 1,
                             lv.max_completions))
    return out


# ---- memory --------------------------------------------------------------------------------


def _act_bytes(cfg: Config) -> int:
    """Bytes of an activation: bf16 under TRL's autocast (train.bf16) or a 16-bit model, else 4."""
    return 2 if cfg.train.bf16 or _DTYPE_BYTES[cfg.model.dtype] == 2 else 4


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
    vllm_gib: float  # colocated vLLM's share held during the pass
    train_pass_gib: float
    generation_gib: float  # TRL's generation of the whole batch (HF or colocated vLLM)
    kv_gib: float  # HF generation's KV cache (0 with vLLM: inside its share)
    merged_gib: float  # merged-LoRA copies during HF generation
    vllm_kv_need_gib: float  # colocated vLLM: weights + one max_model_len sequence, which its share must hold
    vllm_share_gib: float


def train_memory(cfg: Config, shape: ModelShape, w: TrainWork, gpu: GPU, prompt: int) -> TrainMemory:
    t = cfg.train
    wbytes = _DTYPE_BYTES[cfg.model.dtype]
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
    colocate = t.use_vllm and t.vllm_mode == "colocate"
    share = t.vllm_gpu_memory_utilization * gpu.memory_gib * GIB if colocate else 0.0
    held = 0.0 if not colocate or t.trl.get("vllm_enable_sleep_mode", False) else share
    train_pass = weights + lora + acts + logits + held
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
    return TrainMemory(g(weights), g(lora), g(acts), g(no_ckpt), g(ckpt), g(logits), g(naive), g(held), g(train_pass),
                       g(generation), g(kv), g(merged), g(need), g(share))


@dataclasses.dataclass(frozen=True)
class GenMemory:
    weights_gib: float
    kv_gib: float
    total_gib: float
    vllm_kv_need_gib: float  # vLLM: weights + one max_model_len sequence (its share must hold it)
    vllm_share_gib: float


def generation_memory(cfg: Config, shape: ModelShape, gpu: GPU, batch: int, prompt: int, new_tokens: int,
                      lora: bool) -> GenMemory:
    """Probe or evaluation: HF at ``batch`` sequences, or vLLM's share."""
    wbytes = _DTYPE_BYTES[cfg.model.dtype]
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



# ---- time ----------------------------------------------------------------------------------


def _decode_seconds(cfg: Config, shape: ModelShape, gpu: GPU, sequences: int, prompt: int, cap: int, backend: str,
                    batch: int, end: int) -> float:
    """Seconds to generate ``sequences`` completions (cap ``cap`` tokens) at ``end`` 0 (low) or 1 (high)."""
    if sequences <= 0:
        return 0.0
    wbytes = _DTYPE_BYTES[cfg.model.dtype]
    weights = shape.params * wbytes
    frac = THROUGHPUT["completion_fraction"][end]
    kv = shape.kv_bytes_per_token(wbytes)
    nonembed = shape.layers * shape.layer_params
    prefill = sequences * prompt * 2 * nonembed / (gpu.bf16_tflops * 1e12 * THROUGHPUT["prefill_mfu"][1 - end])
    if backend == "vllm":
        b = min(batch, sequences)
        mean_len = frac * cap
        steps = math.ceil(sequences / b) * mean_len  # continuous batching keeps b sequences in flight
        step_bytes = weights + b * (prompt + mean_len / 2) * kv
        step = step_bytes / (gpu.bandwidth_tbs * 1e12 * THROUGHPUT["vllm_decode_bw"][1 - end])
        return prefill + steps * step
    b = min(batch, sequences)
    steps = math.ceil(sequences / b) * (frac * cap if end == 0 else cap)  # a padded batch runs to its longest
    step_bytes = weights + b * (prompt + cap / 2) * kv
    step = (step_bytes / (gpu.bandwidth_tbs * 1e12 * THROUGHPUT["hf_decode_bw"][1 - end])
            + shape.layers * THROUGHPUT["hf_step_overhead_ms_per_layer"][end] / 1e3)
    return prefill + steps * step


def _train_seconds(cfg: Config, shape: ModelShape, gpu: GPU, w: TrainWork, prompt: int, end: int) -> float:
    t = cfg.train
    frac = THROUGHPUT["completion_fraction"][end]
    nonembed = shape.layers * shape.layer_params + shape.vocab * shape.hidden  # the LM head is a matmul too
    passes = 2 + 2 + (2 if t.gradient_checkpointing else 0) + (2 if t.beta > 0 else 0)  # x N FLOPs a token
    per_step_tokens = w.generation_batch * (prompt + frac * w.completion)
    steps = w.steps if w.max_completions is None else min(w.steps, math.ceil(w.completions / w.generation_batch))
    compute = steps * per_step_tokens * passes * nonembed / (gpu.bf16_tflops * 1e12 * THROUGHPUT["train_mfu"][1 - end])
    backend = "vllm" if t.use_vllm else "hf"
    batch = w.generation_batch
    gen = _decode_seconds(cfg, shape, gpu, w.completions, prompt, w.completion, backend, batch, end)
    extra = steps * THROUGHPUT["vllm_colocate_step_s"][end] + THROUGHPUT["vllm_engine_start_s"][end] if t.use_vllm else 0
    return compute + gen + extra


# ---- the plan ------------------------------------------------------------------------------


def _eval_work(cfg: Config) -> list[tuple[str, int, int, int]]:
    """(set, prompts, completions a prompt, max new tokens) of one evaluated model."""
    out = []
    for name in cfg.eval_set_names():
        s = cfg.for_eval_set(name)
        e = s.evaluate
        out.append((name, split_rows(s, "test"), int(e.greedy) + e.n_samples, e.sampling.max_new_tokens))
    return out


def checkpoints(cfg: Config, arm: str) -> int:
    """Adapters a run's evaluation scores: every save_steps and the last, or the last only."""
    t, steps = cfg.for_arm(arm).train, cfg.run_steps(arm, selected_prompts(cfg, arm))
    if cfg.evaluate.checkpoints == "final":
        return 1
    return steps // t.save_steps + (1 if steps % t.save_steps else 0)


def plan(cfg: Config, jobs) -> pd.DataFrame:
    """One row per job of the study graph (``jobs``: :func:`diffgrpo.study.jobs`): counts,
    memory of its largest pass, and a time range in hours."""
    shape, gpu = model_shape(cfg), gpu_of(cfg)
    prompt = prompt_tokens(cfg)
    rows = []
    for job in jobs:
        arm = job.parameters.get("arm")
        row: dict[str, Any] = {"job": job.name, "stage": job.stage, "arm": arm}
        if job.stage == "01_probe":
            p = cfg.probe
            n = split_rows(cfg, "pool")
            n_test = split_rows(cfg, "test") if p.test else 0  # probe.test: the held-out set too, K each
            completions = n * (p.k + (1 if p.one_sample else 0)) + n_test * p.k
            mem = generation_memory(cfg, shape, gpu, p.sampling.batch_size, prompt, p.sampling.max_new_tokens, False)
            times = [_decode_seconds(cfg, shape, gpu, completions, prompt, p.sampling.max_new_tokens,
                                     cfg.generation.backend, _gen_batch(cfg, p.sampling.batch_size), e) for e in (0, 1)]
            times = [x + _start(cfg, e, 1) for e, x in enumerate(times)]
            row.update(prompts=n + n_test, completions=completions,
                       tokens_generated=completions * p.sampling.max_new_tokens,
                       tokens_trained=0, **_gen_columns(mem), pass_="generation")
        elif job.stage == "04_evaluate":
            models = 1 if arm == layout.BASE_RUN else checkpoints(cfg, arm)
            work = _eval_work(cfg)
            batch = cfg.evaluate.sampling.batch_size
            new = max(x[3] for x in work)
            mem = generation_memory(cfg, shape, gpu, batch, prompt, new, arm != layout.BASE_RUN)
            times = []
            for e in (0, 1):
                x = sum(_decode_seconds(cfg, shape, gpu, n * c, prompt, m, cfg.generation.backend,
                                        _gen_batch(cfg, batch), e) for _, n, c, m in work) * models
                times.append(x + _start(cfg, e, models, shape))
            prompts = sum(n for _, n, _, _ in work)
            comps = sum(n * c for _, n, c, _ in work)
            row.update(prompts=prompts * models, completions=comps * models,
                       tokens_generated=sum(n * c * m for _, n, c, m in work) * models, tokens_trained=0,
                       models=models, **_gen_columns(mem), pass_="generation")
        elif job.stage == "03_train":
            acfg = cfg.for_arm(arm)
            works = train_work(cfg, arm)
            mems = [train_memory(acfg, shape, w, gpu, prompt) for w in works]
            worst = max(range(len(works)), key=lambda i: max(mems[i].train_pass_gib, mems[i].generation_gib))
            m, w = mems[worst], works[worst]
            times = [sum(_train_seconds(acfg, shape, gpu, x, prompt, e) for x in works) for e in (0, 1)]
            notes = []
            if acfg.train.epochs is not None and cfg.arm(arm).selected_count(cfg.select, split_rows(cfg, "pool")) is None:
                notes.append("train.epochs over the whole pool: an upper bound until 02_select sizes the arm's set")
            row.update(prompts=sum(x.steps * x.rounds * x.prompts_per_step for x in works),
                       completions=sum(x.completions for x in works),
                       tokens_generated=sum(x.completions * x.completion for x in works),
                       tokens_trained=sum(min(x.completions, x.steps * x.generation_batch) * (prompt + x.completion)
                                          for x in works),
                       level=w.level, per_pass=f"{w.per_pass_prompts}x{w.group_size}", accumulation=w.accumulation,
                       **{k: v for k, v in dataclasses.asdict(m).items()}, note="; ".join(notes),
                       pass_="train")
        else:
            times = [0.0, 0.0]
            row.update(prompts=0, completions=0, tokens_generated=0, tokens_trained=0, pass_="-")
        row["hours_low"], row["hours_high"] = round(times[0] / 3600, 2), round(times[1] / 3600, 2)
        rows.append(row)
    df = pd.DataFrame(rows).rename(columns={"pass_": "pass"})
    for col in ("accumulation", "models"):
        if col in df:
            df[col] = df[col].astype("Int64").astype(object).where(df[col].notna(), "")
    df.attrs.update(model=shape.source, gpu=gpu.name, gpu_gib=gpu.memory_gib, usable_gib=round(USABLE * gpu.memory_gib, 1),
                    prompt_tokens=prompt, params=shape.params, study=cfg.study,
                    backend=f"generation.backend={cfg.generation.backend}, train.use_vllm={cfg.train.use_vllm}")
    return df


def _gen_batch(cfg: Config, hf_batch: int) -> int:
    return int(THROUGHPUT["vllm_max_num_seqs"][0]) if cfg.generation.backend == "vllm" else hf_batch


def _start(cfg: Config, end: int, models: int, shape: ModelShape | None = None) -> float:
    """Seconds spent loading: a vLLM engine once per process (adapters per request), or with HF
    the base model (and a merge) for every model evaluated."""
    if cfg.generation.backend == "vllm":
        return THROUGHPUT["vllm_engine_start_s"][end]
    if shape is None:
        return 0.0
    gb = shape.params * _DTYPE_BYTES[cfg.model.dtype] / 1e9
    return models * gb / THROUGHPUT["load_gbs"][1 - end]


def _gen_columns(mem: GenMemory) -> dict[str, float]:
    return {"weights_gib": mem.weights_gib, "kv_gib": mem.kv_gib, "generation_gib": mem.total_gib,
            "vllm_kv_need_gib": mem.vllm_kv_need_gib, "vllm_share_gib": mem.vllm_share_gib}


# ---- refusing a study that does not fit ----------------------------------------------------


def problems(cfg: Config, df) -> list[str]:
    """Why each pass that does not fit the GPU fails, naming the key to change; empty if all fit."""
    gpu = gpu_of(cfg)
    usable = USABLE * gpu.memory_gib
    out = []
    for _, r in df.iterrows():
        job = r["job"]
        if r["pass"] == "train":
            acfg = cfg.for_arm(r["arm"])
            t = acfg.train
            if r["train_pass_gib"] > usable:
                out.append(f"{job}, training pass ({r['per_pass']} prompts x completions a pass, "
                           f"{r['accumulation']} accumulation step(s)): {r['train_pass_gib']:.1f} GiB > {usable:.1f} GiB "
                           f"usable of {gpu.name} ({gpu.memory_gib} GiB x {USABLE}); {_smaller_pass(acfg, r['arm'], usable)}")
            if r["generation_gib"] > usable:
                key = ("train.vllm_gpu_memory_utilization (lower it)" if t.use_vllm else
                       "train.use_vllm (true: vLLM bounds the KV cache by its share)"
                       + (" or train.merge_lora_for_generation (false)" if t.merge_lora_for_generation else ""))
                out.append(f"{job}, generation during training: {r['generation_gib']:.1f} GiB > {usable:.1f} GiB "
                           f"usable of {gpu.name}; change {key}")
            longest = max(w.completion for w in train_work(cfg, r["arm"]))
            context = t.trl.get("vllm_max_model_length")
            if t.use_vllm and context is not None and context <= longest:
                out.append(f"{job}, colocated vLLM context: train.trl.vllm_max_model_length = {context} "
                           f"holds no prompt before a {longest}-token completion; set it to prompt + completion tokens")
            if t.use_vllm and t.vllm_mode == "colocate" and r["vllm_kv_need_gib"] > r["vllm_share_gib"]:
                out.append(f"{job}, colocated vLLM start: its weights and one sequence of "
                           f"{context or 'the model' + chr(39) + 's full'} context need "
                           f"{r['vllm_kv_need_gib']:.1f} GiB > its share of {r['vllm_share_gib']:.1f} GiB "
                           f"(train.vllm_gpu_memory_utilization = {t.vllm_gpu_memory_utilization}); set "
                           "train.trl.vllm_max_model_length to prompt + completion tokens, or raise the share")
        elif r["pass"] == "generation":
            stage_key = "probe.sampling.batch_size" if r["stage"] == "01_probe" else "evaluate.sampling.batch_size"
            if cfg.generation.backend == "vllm":
                if r["vllm_kv_need_gib"] > r["vllm_share_gib"]:
                    out.append(f"{job}, vLLM engine start: weights and one sequence of the context need "
                               f"{r['vllm_kv_need_gib']:.1f} GiB > its share of {r['vllm_share_gib']:.1f} GiB; set "
                               "generation.vllm_max_model_len or raise generation.vllm_gpu_memory_utilization")
            elif r["generation_gib"] > usable:
                out.append(f"{job}, generation: {r['generation_gib']:.1f} GiB > {usable:.1f} GiB usable of "
                           f"{gpu.name}; lower {stage_key} or set generation.backend: vllm")
    return out


def _smaller_pass(cfg: Config, arm: str, usable: float) -> str:
    """The key to change, with the largest train.per_device_prompts that fits where one does."""
    shape, gpu = model_shape(cfg), gpu_of(cfg)
    t = cfg.train
    now = "null: the whole update in one pass" if t.per_device_prompts is None else str(t.per_device_prompts)
    shares = {w.prompts_per_step for w in train_work(cfg, arm)}
    for n in range(min(shares), 0, -1):
        if any(s % n for s in shares):
            continue
        trial = cfg.replace(**{"train.per_device_prompts": n})
        if all(train_memory(trial, shape, w, gpu, prompt_tokens(trial)).train_pass_gib <= usable
               for w in train_work(trial, arm)):
            return f"set train.per_device_prompts (now {now}) to {n} or less"
    ckpt = "" if t.gradient_checkpointing else "turn on train.gradient_checkpointing, or "
    return (f"even train.per_device_prompts: 1 does not fit; {ckpt}lower train.max_completion_length "
            f"(now {t.max_completion_length})")


def check(cfg: Config, df: pd.DataFrame) -> None:
    """Refuse a cuda study whose plan (:func:`plan`) does not fit its GPU (:class:`PlanDoesNotFit`)."""
    if cfg.model.device != "cuda":
        return
    why = problems(cfg, df)
    if why:
        # the runs of one study usually fail alike: name the first, count the others
        alike: dict[str, list[str]] = {}
        for w in why:
            job, rest = w.split(", ", 1)
            alike.setdefault(rest, []).append(job)
        parts = [f"{jobs[0]}" + (f" (and {len(jobs) - 1} more job(s) alike)" if len(jobs) > 1 else "") + f", {rest}"
                 for rest, jobs in alike.items()]
        raise PlanDoesNotFit(f"study {cfg.study!r} does not fit one {gpu_of(cfg).name} (params key gpu = {cfg.gpu!r}): "
                             + " | ".join(parts) + " (python -m diffgrpo.study <params> --plan shows every job)")


def render(cfg: Config, df) -> str:
    """The plan as text: a header, the work and time per job, the memory per job, totals."""
    a = df.attrs
    head = (f"plan of study {a['study']!r}: model {a['params'] / 1e9:.3g}B parameters ({a['model']}), "
            f"{a['gpu']} ({a['gpu_gib']} GiB; a pass may use {a['usable_gib']}), {a['backend']}, "
            f"prompts sized at {a['prompt_tokens']} tokens"
            + ("" if cfg.model.device == "cuda" else "; model.device is cpu: the figures say what the study would "
               "cost on that GPU, and nothing is refused"))
    work_cols = [c for c in ("job", "prompts", "completions", "tokens_generated", "tokens_trained", "per_pass",
                             "accumulation", "hours_low", "hours_high") if c in df]
    mem_cols = [c for c in ("job", "pass", "weights_gib", "lora_gib", "activations_ckpt_gib", "activations_no_ckpt_gib",
                            "logits_gib", "logits_naive_gib", "vllm_gib", "merged_gib", "kv_gib", "train_pass_gib",
                            "generation_gib", "vllm_kv_need_gib", "vllm_share_gib") if c in df]
    with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_colwidth", 40):
        work = df[work_cols].astype(object).fillna("").to_string(index=False)
        mem = df[df["pass"] != "-"][mem_cols].astype(object).fillna("").to_string(index=False)
    total = (f"whole study on one GPU, one job at a time: {df['hours_low'].sum():.1f}-{df['hours_high'].sum():.1f} h "
             f"(by stage: " + ", ".join(f"{s} {g['hours_low'].sum():.1f}-{g['hours_high'].sum():.1f} h"
                                        for s, g in df.groupby("stage", sort=False)) + ")")
    notes = [n for n in df.get("note", pd.Series(dtype=str)).dropna().unique() if n]
    return "\n".join([head, "", work, "", "memory (GiB) of each job's largest pass:", mem, "", total]
                     + [f"note: {n}" for n in notes])
