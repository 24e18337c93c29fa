"""The GPU path that can be checked without a GPU: the model and its inputs on the device the
params name, TRL's device / checkpointing / vLLM arguments, the batch split over several
processes, and the chat-template arguments recorded with a probe and a run."""

import dataclasses

from pathlib import Path

import pytest
import torch
from trl import GRPOConfig

from diffgrpo.models import resolve, devices, resumable_sampling
from diffgrpo.store import layout
from diffgrpo import params, train
from diffgrpo.models.generation import HFGenerator, encode_prompt

#: every device model.device may name; those this machine lacks are skipped, saying so
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU on this machine: the cuda case runs where torch sees one"))]


def tiny(**overrides):
    return params.load("tiny", overrides=overrides)


# ---- placement -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", DEVICES)
def test_model_and_inputs_follow_model_device(name, monkeypatch):
    cfg = tiny(**{"model.device": name})
    gen = resumable_sampling.load_generator(cfg, batch_size=4)
    assert isinstance(gen, HFGenerator)
    assert {p.device.type for p in gen.model.parameters()} == {name}
    seen = []
    real = gen.model.generate

    def spy(input_ids, attention_mask, **kw):
        seen.append((input_ids.device.type, attention_mask.device.type))
        return real(input_ids=input_ids, attention_mask=attention_mask, **kw)

    monkeypatch.setattr(gen.model, "generate", spy)
    prompt = [{"role": "user", "content": "Alice has the ball. Who has it?"}]
    (out,), = gen.generate([prompt], temperature=0, max_new_tokens=3, progress=False)
    assert seen == [(name, name)] and out.num_tokens >= 1


def test_load_model_passes_the_params_device(monkeypatch):
    """resolve.load_model hands models.load_model the device of model.device (a GPU under a
    launcher is the process's own)."""
    from diffgrpo.models import loading as models

    got = {}
    monkeypatch.setattr(models, "load_model", lambda path, **kw: got.update(kw) or ("m", "t"))
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: True)
    resolve.load_model(tiny(**{"model.device": "cuda"}))
    assert got["device"] == torch.device("cuda")
    monkeypatch.setenv("LOCAL_RANK", "3")
    resolve.load_model(tiny(**{"model.device": "cuda"}))
    assert got["device"] == torch.device("cuda", 3)
    monkeypatch.delenv("LOCAL_RANK")
    resolve.load_model(tiny())
    assert got["device"] == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"model.device = 'cuda' but torch sees no GPU.*model.device: cpu"):
        resolve.load_model(tiny(**{"model.device": "cuda"}))


def test_train_device_moved_to_model_device():
    with pytest.raises(params.ParamsError, match=r"unknown key `train.device`"):
        tiny(**{"train.device": "cuda"})


# ---- TRL's arguments -----------------------------------------------------------------------
def test_grpo_device_checkpointing_and_vllm_from_params(tmp_path):
    cfg = tiny(**{"model.device": "cuda", "train.gradient_checkpointing": True, "train.use_vllm": True,
                  "train.vllm_mode": "server", "train.vllm_gpu_memory_utilization": 0.45,
                  "train.vllm_tensor_parallel_size": 2})
    kw = train.grpo_kwargs(cfg, 0, tmp_path, n_processes=2)
    assert kw["use_cpu"] is False
    assert kw[train.checkpointing_argument()] is True
    assert train.checkpointing_argument() in {f.name for f in dataclasses.fields(GRPOConfig)}
    assert (kw["use_vllm"], kw["vllm_mode"], kw["vllm_gpu_memory_utilization"], kw["vllm_tensor_parallel_size"]) \
        == (True, "server", 0.45, 2)
    assert train.grpo_kwargs(tiny(), 0, tmp_path)["use_cpu"] is True


def test_vllm_tensor_parallel_must_divide_processes(tmp_path):
    cfg = tiny(**{"train.use_vllm": True, "train.vllm_tensor_parallel_size": 2})
    with pytest.raises(ValueError, match="vllm_tensor_parallel_size = 2 must divide the 1 training"):
        train.grpo_kwargs(cfg, 0, tmp_path, n_processes=1)


def test_grpo_config_accepts_our_arguments(tmp_path):
    """Every argument we pass exists in the installed TRL + transformers (5.23 here; the GPU
    environment runs this test under 5.17, which has no `activation_checkpointing`)."""
    cfg = tiny(**{"model.chat_template_kwargs": {"enable_thinking": False}})
    args = GRPOConfig(**train.grpo_kwargs(cfg, 0, tmp_path))
    t = cfg.train
    assert args.generation_batch_size == t.prompts_per_step * t.group_size
    assert args.chat_template_kwargs == {"enable_thinking": False}
    assert args.use_cpu is True


# ---- several processes ---------------------------------------------------------------------
@pytest.mark.parametrize("n, per_device, want", [
    (1, None, (32, 1)),  # today's single process: the whole update in one pass
    (1, 8, (8, 4)),
    (2, None, (16, 1)),
    (4, None, (8, 1)),
    (4, 4, (4, 2)),
    (8, 1, (1, 4)),
    (32, None, (1, 1)),
])
def test_batching_keeps_prompts_per_step(n, per_device, want):
    b = devices.batching(32, 8, n, per_device)
    assert (b.per_device_prompts, b.gradient_accumulation_steps) == want
    assert b.per_device_prompts * n * b.gradient_accumulation_steps == 32
    assert b.per_device_train_batch_size == b.per_device_prompts * 8  # TRL counts completions


@pytest.mark.parametrize("n, per_device, match", [
    (3, None, "do not split evenly over the processes"),
    (64, None, "do not split evenly"),
    (4, 3, "each process gets 8 prompt"),
    (4, 16, "each process gets 8 prompt"),
])
def test_batching_refuses_what_cannot_hold_prompts_per_step(n, per_device, match):
    with pytest.raises(ValueError, match=match):
        devices.batching(32, 8, n, per_device)


def test_grpo_batch_follows_the_number_of_processes(tmp_path, monkeypatch):
    cfg = tiny(**{"train.prompts_per_step": 32, "train.group_size": 8, "train.per_device_prompts": 4})
    kw = train.grpo_kwargs(cfg, 0, tmp_path, n_processes=4)
    assert (kw["per_device_train_batch_size"], kw["gradient_accumulation_steps"], kw["steps_per_generation"]) == (32, 2, 2)
    # one optimizer update = per device x processes x accumulation completions = 32 prompts x 8
    assert kw["per_device_train_batch_size"] * 4 * kw["gradient_accumulation_steps"] == 32 * 8
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert devices.num_processes() == 3
    with pytest.raises(ValueError, match="train.prompts_per_step = 32 with 3 process"):
        train.grpo_kwargs(cfg, 0, tmp_path, n_processes=devices.num_processes())


def test_single_process_kwargs_unchanged(tmp_path):
    """The CPU study's TRL batch is what it was before the multi-process split existed."""
    cfg = params.load("embedded")
    kw = train.grpo_kwargs(cfg, 0, tmp_path)
    t = cfg.train
    assert (kw["per_device_train_batch_size"], kw["gradient_accumulation_steps"], kw["steps_per_generation"]) \
        == (t.prompts_per_step * t.group_size, 1, 1)


# ---- chat template -------------------------------------------------------------------------
THINKING = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
            "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}")


def test_chat_template_kwargs_reach_the_prompt_and_the_keys():
    from diffgrpo.models.loading import load_model

    _, tok = load_model("embedded")
    tok.chat_template = THINKING
    msgs = [{"role": "user", "content": "hi"}]
    on, off = encode_prompt(tok, msgs), encode_prompt(tok, msgs, {"enable_thinking": False})
    assert tok.decode(off).endswith("<think></think>") and not tok.decode(on).endswith("</think>")

    default, thinking_off = tiny(), tiny(**{"model.chat_template_kwargs": {"enable_thinking": False}})
    assert layout.probe_key(thinking_off)["model"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert layout.probe_dir(thinking_off) != layout.probe_dir(default)
    assert "enable_thinking: false" in params.dump(thinking_off)  # params.yaml beside every run
    gen = resumable_sampling.load_generator(thinking_off, batch_size=2)
    assert gen.chat_template_kwargs == {"enable_thinking": False}


def test_default_keys_unchanged():
    """The new settings add nothing to a probe's key at their defaults: the tiny study's probe
    folder is the one its notebook reference shows (tests/notebooks/01_probe.ipynb)."""
    cfg = tiny()
    assert "backend" not in layout.probe_key(cfg) and "chat_template_kwargs" not in layout.probe_key(cfg)
    reference = (Path(__file__).parent / "notebooks" / "01_probe.ipynb").read_text()
    assert f"probe folder: probe/embedded/{layout.probe_dir(cfg).name}" in reference
    assert layout.probe_dir(tiny(**{"generation.backend": "vllm"})).name != layout.probe_dir(cfg).name
