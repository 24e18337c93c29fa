"""HF generation fit for a GPU (issue 39), its choices checked on the CPU: on cuda the probe and
the evaluation generate with a static cache (compiled by transformers on its first call), prompts
padded to widths of 64 so the compiled step sees few shapes, TRL's training generation gets a
static cache through its own option, and the caching allocator runs with expandable segments
unless the user said otherwise; on the CPU nothing changes."""

from __future__ import annotations

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from diffgrpo import params, train
from diffgrpo.models import devices, generation


class _Tok:
    eos_token_id, pad_token_id = 1, 0


def _generator():
    config = Qwen2Config(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=1, pad_token_id=0)
    return generation.HFGenerator(model, _Tok())


def test_a_static_cache_on_cuda_and_the_cpu_path_unchanged():
    assert generation.hf_cache("cuda") == generation.hf_cache("cuda:1") == "static"
    assert generation.hf_cache("cpu") == "dynamic"
    gen = _generator()
    assert gen.cache == "dynamic" and gen.width_multiple == 1
    assert gen._config(1.0, 1.0, 8).cache_implementation is None  # the CPU's config as it was
    gen.cache, gen.width_multiple = "static", generation.STATIC_WIDTH  # what a cuda model gets
    config = gen._config(1.0, 1.0, 8)
    assert config.cache_implementation == "static" and not config.disable_compile  # transformers compiles it


def test_prompts_are_padded_to_a_multiple_on_cuda_only():
    ids, mask = generation.left_pad([[5, 6, 7], [8]], 0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = generation.left_pad([[5, 6, 7], [8]], 0, multiple=4)
    assert ids.tolist() == [[0, 5, 6, 7], [0, 0, 0, 8]] and mask.sum(1).tolist() == [3, 1]
    assert generation.left_pad([[1] * 64], 0, multiple=64)[0].shape == (1, 64)


def test_expandable_segments_are_set_before_cuda_and_a_users_value_is_kept(monkeypatch):
    env = {}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert devices.expandable_segments(env) and env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    mine = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    assert not devices.expandable_segments(mine) and mine == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    late = {}
    assert not devices.expandable_segments(late) and late == {}  # too late: CUDA already read it


def test_training_generation_gets_a_static_cache_through_trls_option_on_cuda_with_hf(tmp_path):
    gpu = params.load("paper003_gsm8k_qwen3_4b", overrides={"train.use_vllm": False})
    [lv] = train.run_levels(gpu, "hard")
    assert train.grpo_kwargs(gpu, 0, tmp_path, 1, lv)["cache_implementation"] == "static"
    vllm = params.load("paper003_gsm8k_qwen3_4b")  # vLLM generates: TRL's cache option is not used
    assert "cache_implementation" not in train.grpo_kwargs(vllm, 0, tmp_path, 1, lv)
    cpu = params.load("tiny")
    [lv] = train.run_levels(cpu, "hard")
    assert "cache_implementation" not in train.grpo_kwargs(cpu, 0, tmp_path, 1, lv)
