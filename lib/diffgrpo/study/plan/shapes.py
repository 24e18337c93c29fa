"""The model and the GPU a plan sizes for: the model's shape from its ``config.json``, the GPU's datasheet.

Model sizes come from ``config.json`` (:func:`model_shape`): the embedded model's, a local
folder's, the hub cache's or a copy the project ships for the papers' models
(``assets/model_configs``), so the plan runs offline. The GPUs it knows are :data:`GPUS`
(params key ``gpu``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from diffgrpo.models import resolve
from diffgrpo.params import Config, ParamsError

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "assets" / "model_configs"
#: bytes a parameter of ``model.dtype``
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class PlanError(ParamsError):
    """The plan cannot be made (no config.json for the model, an unknown GPU)."""


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


def config_file(cfg: Config) -> tuple[Path, str]:
    """The config.json that describes ``model.path``, and where it came from."""
    path = cfg.model.path
    if path == resolve.SMOLLM2:
        f = CONFIGS_DIR / "HuggingFaceTB--SmolLM2-135M-Instruct" / "config.json"
        return f, f"shipped copy {f.relative_to(CONFIGS_DIR.parent.parent)}"
    if path in (resolve.EMBEDDED, resolve.TINY_RANDOM):
        folder, _ = resolve.model_path(cfg)  # tiny-random: built once into the cache (a 2-layer model)
        return Path(folder) / "config.json", f"{path}'s config.json"
    folder = Path(path).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise PlanError(f"model.path: {folder} holds no config.json; the plan reads the model's size from it "
                            "(a GGUF-only folder: add the original model's config.json beside it)")
        return folder / "config.json", f"{folder / 'config.json'}"
    if resolve.looks_like_hub_id(path):
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
    f, source = config_file(cfg)
    try:
        return ModelShape.from_config(json.loads(Path(f).read_text()), source)
    except (OSError, json.JSONDecodeError) as err:
        raise PlanError(f"model.path: cannot read {f}: {err}") from None


def gpu_of(cfg: Config) -> GPU:
    if cfg.gpu not in GPUS:
        raise PlanError(f"gpu: {cfg.gpu!r} is not a GPU the plan knows; known: {sorted(GPUS)} (diffgrpo.study.plan.GPUS)")
    return GPUS[cfg.gpu]

