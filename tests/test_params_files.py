"""Every params file in params/ builds every object a run of it would build, before any model
is loaded: the GRPOConfig and LoRA config of every arm, every evaluation set's task and
settings, every arm's selection definition. No GPU is lent here, so the GPU files are checked
this way: an inconsistency fails here rather than an hour into a GPU job."""

from __future__ import annotations

import transformers
import pytest
import yaml
from peft import LoraConfig
from trl import GRPOConfig

from diffgrpo.tasks import splits
from diffgrpo.models import devices
from diffgrpo import params, policies, registry, select, tasks, train
from diffgrpo.params import files as params_files
from diffgrpo.study import plan
from diffgrpo.params import TEST_SET

FILES = sorted(p.name for p in params.params_dir().glob("*.yaml") if p.name != params.DEFAULTS_FILE)


def test_the_gpu_files_layer_on_the_one_gpu_base():
    gpu = [f for f in FILES if params.load(f).model.device == "cuda"]
    assert len(gpu) >= 10 and "gpu.yaml" in gpu
    for f in gpu:
        chain = [p.name for p in params_files.with_includes(params.resolve(f), seen=set())]
        assert chain[0] == "gpu.yaml", f"{f} does not layer on gpu.yaml: {chain}"


@pytest.mark.parametrize("name", FILES)
def test_every_params_file_builds_every_object_of_its_runs(name, tmp_path, monkeypatch):
    cfg = params.load(name)
    if cfg.model.device == "cuda":
        # TrainingArguments refuses bf16 without a GPU; what is checked here is our arguments
        monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    task = splits.task_of(cfg)  # the task and its options
    assert cfg.arms and cfg.train.seeds
    for arm in cfg.arms:
        acfg = cfg.for_arm(arm.name)
        # the selection's definition: a known policy, a budget that fits the pool and one update
        assert arm.select in policies.names()
        if policies.get(arm.select).budgeted and cfg.dataset.pool_size is not None:
            n = select.arm_budget(cfg, arm, cfg.dataset.pool_size)
            assert n >= acfg.train.prompts_per_step, f"{name}: arm {arm.name} selects {n} prompts, fewer than one update"
        if arm.select == "tiers" and not getattr(task, "tiers", None):
            assert cfg.select.tier_bins, f"{name}: arm {arm.name} needs tiers: the task has none, and no tier_bins"
        if arm.select.startswith("base_"):
            assert cfg.probe.one_sample, f"{name}: arm {arm.name} needs probe.one_sample"
        n = plan.selected_prompts(cfg, arm.name)  # its budget, or the pool (what train.epochs counts passes over)
        for seed in cfg.train.seeds:
            args = GRPOConfig(**train.grpo_kwargs(acfg, seed, tmp_path / arm.name, 1, train.run_levels(acfg, None, n)[0]))
            b = devices.batching(acfg.train.prompts_per_step, acfg.train.group_size, 1, acfg.train.per_device_prompts)
            assert args.per_device_train_batch_size * args.gradient_accumulation_steps == (
                acfg.train.prompts_per_step * acfg.train.group_size) == b.per_device_train_batch_size * b.gradient_accumulation_steps
            assert (args.beta, args.loss_type, args.learning_rate, args.max_steps) == (
                acfg.train.beta, acfg.train.loss_type, acfg.train.learning_rate, cfg.run_steps(arm.name, n))
            assert args.scale_rewards == acfg.train.scale_rewards
        lora = train.lora_config(acfg)
        assert isinstance(lora, LoraConfig) and lora.r == acfg.train.lora.r
    for eval_set in cfg.eval_set_names():
        scfg = cfg.for_eval_set(eval_set)
        stask = splits.task_of(scfg)
        assert scfg.dataset.test_split in stask.splits, f"{name}: set {eval_set} reads split {scfg.dataset.test_split!r}"
        assert all(1 <= k <= scfg.evaluate.n_samples for k in scfg.evaluate.pass_k)
        assert scfg.model == cfg.model and scfg.train == cfg.train  # the same model and runs, other rows
        if eval_set == TEST_SET:
            assert scfg is cfg
    assert set(cfg.analyze.reports) <= set(registry.PAPERS.names())
    assert cfg.dataset.task in tasks.names()


PAPER_FILES = [f for f in FILES if f.startswith(("paper", "embedded"))]


@pytest.mark.parametrize("name", PAPER_FILES)
def test_every_paper_file_states_its_advantage_formula_with_its_source(name):
    """The advantage (scale_rewards) and the loss's aggregation (loss_type) are chosen in each
    paper's file, with a comment naming the paper's section or why it deviates, never inherited
    silently (issue 19: 003's A.4 has no std scaling; defaults.yaml and TRL scale by it)."""
    text = (params.params_dir() / name).read_text()
    train_section = yaml.safe_load(text).get("train") or {}
    assert {"loss_type", "scale_rewards"} <= set(train_section), f"{name} does not state them under train:"
    for key in ("loss_type", "scale_rewards"):
        line = next(line for line in text.splitlines() if line.startswith(f"  {key}:"))
        assert "#" in line and any(w in line for w in ("00", "DEVIATES", "released", "(ours)")), line
    cfg = params.load(name)
    stated = next(line for line in text.splitlines() if line.startswith("  scale_rewards:"))
    if name.startswith("paper003") and "released_code" not in name and "DEVIATES" not in stated:
        # 003 appendix A.4; paper003_confirmatory runs the embedded protocol, whose deviation it states
        assert (cfg.train.loss_type, cfg.train.scale_rewards) == ("grpo", "none")


def _trace_tokens(cfg: params.Config) -> int | None:
    """The longest gold trace of a shuffled-objects study on the embedded model (7 + 7 x swaps
    tokens with EOS, docs/embedded_model.md), or None for any other study."""
    if cfg.model.path != "embedded" or cfg.dataset.task != "shuffled_objects":
        return None
    return 7 + 7 * int(cfg.dataset.task_options.get("swaps", [1, 8])[1])


@pytest.mark.parametrize("name", [f for f in FILES if _trace_tokens(params.load(f)) is not None])
def test_every_length_limit_of_an_embedded_study_reaches_its_longest_trace(name):
    """A limit below the longest trace cuts those prompts before their answer and scores them 0
    whatever the model knows; the default study's 1-5 swaps allow 48 tokens, the full one's 1-8 need 63."""
    cfg = params.load(name)
    need = _trace_tokens(cfg)
    limits = {"probe.sampling.max_new_tokens": cfg.probe.sampling.max_new_tokens,
              "evaluate.sampling.max_new_tokens": cfg.evaluate.sampling.max_new_tokens}
    for arm in cfg.arms:
        limits[f"train.max_completion_length ({arm.name})"] = cfg.for_arm(arm.name).train.max_completion_length
    for s in cfg.eval_set_names():
        ecfg = cfg.for_eval_set(s)
        if _trace_tokens(ecfg) is not None:
            assert ecfg.evaluate.sampling.max_new_tokens >= _trace_tokens(ecfg), f"{name}: set {s}"
    short = {k: v for k, v in limits.items() if v < need}
    assert not short, f"{name}: limits below the longest trace ({need} tokens): {short}"


GPU_FILES = [f for f in FILES if params.load(f).model.device == "cuda"]


@pytest.mark.parametrize("name", GPU_FILES)
def test_every_gpu_file_builds_trls_gpu_config(name, tmp_path, monkeypatch):
    """GRPOConfig as a GPU run builds it, for every arm of every GPU file: bf16, activation
    checkpointing (under the installed transformers' name: 5.17 in the GPU env, 5.23 here),
    TRL's colocated vLLM with sleep mode and a context of prompt + completion, on the GPU
    (use_cpu off). The one thing a CPU cannot give is a bf16 GPU: transformers'
    TrainingArguments.__post_init__ asks ``is_torch_bf16_gpu_available()`` and refuses bf16
    without one (no environment variable turns that off), so that probe alone says yes here."""
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    cfg = params.load(name)
    for arm in cfg.arms:
        acfg = cfg.for_arm(arm.name)
        for lv in train.run_levels(acfg, arm.name, plan.selected_prompts(cfg, arm.name)):
            args = GRPOConfig(**train.grpo_kwargs(acfg, 0, tmp_path / arm.name, acfg.train.num_processes, lv))
            assert args.bf16 and not args.use_cpu and args.mixed_precision == "bf16", (name, arm.name)
            assert getattr(args, train.checkpointing_argument()), (name, arm.name)
            assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_enable_sleep_mode, (name, arm.name)
            assert args.vllm_max_model_length >= lv.max_completion_length, (name, arm.name)
            assert args.steps_per_generation == args.gradient_accumulation_steps
