"""The plan (diffgrpo.study.plan): its arithmetic against sizes worked out by hand, `--plan` offline
for every params file, every GPU study fitting one 80 GB H100 on the vLLM path, and an
oversized setting refused with the named error before anything runs."""

from __future__ import annotations

import pytest

from diffgrpo import params, study
from diffgrpo.study import runner
from diffgrpo.study import graph, plan

FILES = sorted(p.stem for p in params.params_dir().glob("*.yaml") if p.name != params.DEFAULTS_FILE)
GPU_FILES = [f for f in FILES if params.load(f).model.device == "cuda"]
GIB = 2 ** 30


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_embedded_model_is_sized_by_hand():
    cfg = params.load("embedded")
    s = plan.model_shape(cfg)
    # config.json: vocab 342, hidden 128, 4 layers, 4 heads of 32, 4 KV heads, MLP 384, tied, Qwen2 (q/k/v bias)
    h, layers, i, v = 128, 4, 384, 342
    per_layer = (h * h + h * h + h * h + h * h  # q, k, v, o (4 heads x 32 = 128 wide, as many KV heads)
                 + 3 * h * i  # gate, up, down
                 + 3 * h  # q, k, v biases
                 + 2 * h)  # two RMSNorm weights
    assert s.params == v * h + layers * per_layer + h == 898_432  # tied embedding, final norm
    # LoRA r 16 on all seven projections: r x (in + out) each
    assert s.lora_params(16, list(cfg.train.lora.target_modules)) == layers * 16 * (4 * (h + h) + 2 * (h + i) + (i + h))
    assert s.kv_bytes_per_token(4) == 2 * layers * h * 4  # K and V, every layer, float32
    # saved float32 activations a token a layer: 16h + 8q + 8kv + 16I + 7 LoRA intermediates of r floats
    assert s.layer_activation_bytes(4, 16) == 16 * h + 8 * h + 8 * h + 16 * i + 7 * 4 * 16 == 10_688


def test_a_training_pass_of_the_embedded_model_adds_up():
    cfg = params.load("embedded", overrides={"train.lora.r": 16, "train.gradient_checkpointing": True})
    s = plan.model_shape(cfg)
    w = plan.TrainWork("-", 1, 8, 8, 48, 8, 1, 1, None)  # 8 prompts x 8 completions of 48 tokens, one pass
    m = plan.train_memory(cfg, s, w, plan.GPUS["h100-80gb"], prompt=64)
    tokens = 64 * (64 + 48)
    h, layers = 128, 4
    per_layer = 10_688
    ckpt = tokens * (layers * h * 4 + per_layer) + tokens * per_layer + 2 * tokens * h * 4 + tokens * h * 4
    assert m.activations_ckpt_gib == round(ckpt / GIB, 2)
    assert m.weights_gib == round(898_432 * 4 / GIB, 2)
    assert m.lora_gib == round(4 * 16 * 2560 * 16 / GIB, 2)  # r x (in + out) summed = 16 x 2560 a layer; 16 B each
    # HF generation of the 64 completions: KV of 112 tokens each, float32, plus the merged copies of the targets
    assert m.kv_gib == round(64 * 112 * 2 * 4 * 128 * 4 / GIB, 2)
    assert m.merged_gib == round(4 * (4 * h * h + 3 * h * 384) * 4 / GIB, 2)


def test_a_shipped_config_is_sized_by_hand():
    """Llama-3.1-8B-Instruct from lib/diffgrpo/assets/model_configs (no hub): 8.03B parameters."""
    cfg = params.load("paper003_table3_llama3_8b")
    s = plan.model_shape(cfg)
    assert "shipped copy" in s.source
    h, layers, i, v, kv = 4096, 32, 14336, 128256, 8 * 128
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h  # q and o, k and v (8 KV heads of 128), MLP, norms
    assert s.params == 2 * v * h + layers * per_layer + h == 8_030_261_248  # untied embedding and LM head
    assert s.kv_bytes_per_token(2) == 2 * layers * kv * 2 == 131_072  # 128 KiB a token in bf16
    # a 131,072-token context (the model's, when vllm_max_model_length is null) needs 16 GiB of KV cache,
    # which with 15 GiB of weights does not fit a 0.3 share of an 80 GB GPU
    assert 131_072 * s.kv_bytes_per_token(2) / GIB == 16.0
    # bf16 under autocast: 18h + 6q + 4kv + 8I + 7 x 4r a token a layer
    assert s.layer_activation_bytes(2, 32) == 18 * h + 6 * h + 4 * kv + 8 * i + 7 * 4 * 32


@pytest.mark.parametrize("name", FILES)
def test_the_plan_prints_offline_for_every_params_file(name, capsys):
    assert study.main([name, "--plan"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"plan of study {params.load(name).study!r}")
    assert "03_train" in out and "04_evaluate base" in out and "whole study on one GPU" in out


@pytest.mark.parametrize("name", GPU_FILES)
def test_every_gpu_study_fits_one_h100_on_the_vllm_path(name):
    cfg = params.load(name)
    assert cfg.gpu == "h100-80gb" and plan.GPUS[cfg.gpu].memory_gib < 80
    assert cfg.generation.backend == "vllm" and cfg.train.use_vllm and cfg.train.trl["vllm_enable_sleep_mode"]
    table = plan.plan(cfg, graph.jobs(cfg, {"params_file": "", "overrides": {}}))
    assert plan.problems(cfg, table) == []
    usable = plan.USABLE * plan.GPUS["h100-80gb"].memory_gib
    train = table[table["pass"] == "train"]
    assert (train["train_pass_gib"] <= usable).all() and (train["generation_gib"] <= usable).all()
    assert (train["vllm_kv_need_gib"] <= train["vllm_share_gib"]).all()  # colocated vLLM can start
    gen = table[table["pass"] == "generation"]
    assert (gen["vllm_kv_need_gib"] <= gen["vllm_share_gib"]).all()


OVERSIZED = ["paper003_table3_llama3_8b", "--set", "train.per_device_prompts=null",
             "--set", "train.max_completion_length=8192"]


def test_an_oversized_setting_is_refused_with_the_named_error(capsys):
    with pytest.raises(plan.PlanDoesNotFit) as err:
        study.main(OVERSIZED + ["--plan"])
    why = str(err.value)
    assert "03_train hard-seed0" in why and "training pass" in why and "GiB >" in why
    assert "train.per_device_prompts" in why and "NVIDIA H100" in why
    assert "plan of study" in capsys.readouterr().out  # the table is printed first


def test_a_study_that_does_not_fit_stops_before_any_notebook(monkeypatch):
    started = []
    monkeypatch.setattr(runner, "run_study", lambda *a, **k: started.append(a) or 0)
    with pytest.raises(plan.PlanDoesNotFit):
        study.main(OVERSIZED)
    assert not started
    assert study.cli(OVERSIZED) == 2  # one `error:` line, no traceback


def test_a_colocated_vllm_without_a_max_model_length_is_refused_for_llama():
    cfg = params.load("paper003_table3_llama3_8b", overrides={"train.trl.vllm_max_model_length": None})
    why = plan.problems(cfg, plan.plan(cfg, graph.jobs(cfg, {"params_file": "", "overrides": {}})))
    assert why and "colocated vLLM start" in why[0] and "train.trl.vllm_max_model_length" in why[0]


def test_a_model_without_a_config_is_named():
    cfg = params.load("paper003_gsm8k_qwen3_4b", overrides={"model.path": "someone/unknown-model"})
    with pytest.raises(plan.PlanError, match="model.path: 'someone/unknown-model'"):
        plan.model_shape(cfg)
    with pytest.raises(plan.PlanError, match="gpu: 'b200'"):
        plan.gpu_of(params.load("embedded", overrides={"gpu": "b200"}))


def test_vllm_lora_rank_is_the_smallest_allowed_at_or_above_the_arms():
    assert plan.vllm_lora_rank(params.load("tiny")) == 8  # r 4 is not a rank vLLM accepts
    assert plan.vllm_lora_rank(params.load("paper003_gsm8k_qwen3_4b")) == 32


def test_a_study_in_epochs_is_planned_per_arm_from_its_selection_size():
    """Before 02_select: a budgeted arm's steps are its budget's epochs, a set-defined policy's
    the whole pool's (an upper bound); checkpoints to score follow the arm's own steps."""
    cfg = params.load("paper000_gsm8k_qwen2.5_1.5b", overrides={
        "train.max_steps": None, "train.epochs": 1, "arms": ["hard", "all"], "select.budget_frac": 0.1})
    pool = plan.split_rows(cfg, "pool")
    per_step = cfg.train.prompts_per_step
    assert cfg.run_steps("hard", plan.selected_prompts(cfg, "hard")) == -(-(pool // 10) // per_step)
    assert cfg.run_steps("all", plan.selected_prompts(cfg, "all")) == -(-pool // per_step)
    assert [w.steps for w in plan.train_work(cfg, "all")] == [cfg.run_steps("all", plan.selected_prompts(cfg, "all"))]
    save = cfg.train.save_steps
    assert plan.checkpoints(cfg, "hard") == -(-cfg.run_steps("hard", plan.selected_prompts(cfg, "hard")) // save)


@pytest.mark.e2e
def test_the_gpu_smoke_run_refuses_without_a_gpu_and_its_study_fits():
    """`make gpu-smoke` (scripts/gpu_smoke.py) on a machine where torch sees no GPU: exit 2 and
    a line saying why, before anything runs. Its study (params/gpu_smoke.yaml) is on the GPU
    path and fits the GPU it is planned for."""
    import subprocess
    import sys
    from pathlib import Path

    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the smoke run would run, not refuse")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "scripts" / "gpu_smoke.py")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "gpu-smoke: not run: torch" in done.stderr and "sees no GPU" in done.stderr
    cfg = params.load("gpu_smoke")
    assert (cfg.model.device, cfg.generation.backend, cfg.train.use_vllm, cfg.train.bf16,
            cfg.train.gradient_checkpointing) == ("cuda", "vllm", True, True, True)
    assert cfg.train.trl["vllm_enable_sleep_mode"] and cfg.train.save_steps < cfg.train.max_steps
    table = plan.plan(cfg, graph.jobs(cfg, {"params_file": "gpu_smoke", "overrides": {}}))
    plan.check(cfg, table)


def test_a_process_count_that_does_not_split_an_update_is_refused_by_the_plan():
    cfg = params.load("paper003_gsm8k_qwen3_4b", overrides={"train.num_processes": 3})
    with pytest.raises(plan.PlanError, match=r"arm 'hard': train.prompts_per_step = 32 with 3 process.*"
                                             r"train.num_processes"):
        plan.plan(cfg, graph.jobs(cfg, {"params_file": "paper003_gsm8k_qwen3_4b", "overrides": {}}))
    two = params.load("paper003_gsm8k_qwen3_4b", overrides={"train.num_processes": 2})
    table = plan.plan(two, graph.jobs(two, {"params_file": "paper003_gsm8k_qwen3_4b", "overrides": {}}))
    assert set(table.loc[table["stage"] == "03_train", "accumulation"]) == {2}  # 16 prompts a process, 8 a pass


def test_the_notebooks_plan_is_one_row_per_stage_and_adds_up_to_the_jobs():
    """What every stage notebook prints: a few lines (the 44 jobs of the default study in five
    rows), with the per-job table's totals."""
    cfg = params.load("embedded")
    table = plan.plan(cfg, graph.jobs(cfg, {"params_file": "embedded", "overrides": {}}))
    text = plan.brief(cfg, table)
    assert len(table) == 44 and len(text.splitlines()) <= 12
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip().startswith("0")}
    assert list(rows) == ["01_probe", "02_select", "03_train", "04_evaluate", "05_analyze"]
    train = table[table["stage"] == "03_train"]
    assert rows["03_train"][1:5] == [str(len(train)), str(train["completions"].sum()),
                                     str(train["tokens_generated"].sum()), str(train["tokens_trained"].sum())]
    assert "0.898M-parameter model" in text


# ---- the time model of TRL 1.16's training (issue 28) ---------------------------------------------
def test_training_flops_count_the_old_policy_forward_of_vllms_importance_sampling():
    """With vLLM, TRL 1.16 runs one more no-grad forward over the generated batch (the old
    policy's log-probs for the importance-sampling correction): 2N FLOPs a generated token more;
    so does num_iterations > 1; the reference model's forward (beta > 0) another 2N."""
    from diffgrpo.study.plan.hours import train_flops_per_token

    cfg = params.load("paper003_gsm8k_qwen3_4b")  # vLLM, checkpointing, beta 0.1
    assert cfg.train.use_vllm and cfg.train.gradient_checkpointing and cfg.train.beta > 0
    assert train_flops_per_token(cfg) == (6, 4)  # 2 fwd + 2 bwd + 2 recomputed; ref + old policy
    assert train_flops_per_token(cfg.replace(**{"train.use_vllm": False})) == (6, 2)
    assert train_flops_per_token(cfg.replace(**{"train.trl": {**cfg.train.trl,
                                                              "vllm_importance_sampling_correction": False}})) == (6, 2)
    assert train_flops_per_token(cfg.replace(**{"train.use_vllm": False, "train.beta": 0.0})) == (6, 0)
    assert train_flops_per_token(cfg.replace(**{"train.use_vllm": False, "train.beta": 0.0,
                                                "train.num_iterations": 2})) == (6, 2)


def test_vllm_keeps_in_flight_only_the_sequences_its_kv_share_holds():
    """Colocated vLLM at 0.3 of an H100 holds the KV cache of fewer sequences than an update
    generates for Qwen3-4B and Llama-3.1-8B: generation runs in waves of that many, so a smaller
    share is slower, by exactly the waves of the smaller batch."""
    from diffgrpo.study.plan.hours import decode_seconds
    from diffgrpo.study.plan.memory import VLLM_OVERHEAD_GIB, vllm_kv_sequences

    gpu = plan.GPUS["h100-80gb"]
    for name in ("paper003_gsm8k_qwen3_4b", "paper003_table3_llama3_8b"):
        cfg = params.load(name)
        shape, seq = plan.model_shape(cfg), 256 + cfg.train.max_completion_length
        share = cfg.train.vllm_gpu_memory_utilization * gpu.memory_gib
        n = vllm_kv_sequences(shape, 2, share, seq)
        used = lambda k: (VLLM_OVERHEAD_GIB * GIB + shape.params * 2 + k * seq * shape.kv_bytes_per_token(2))  # noqa: E731
        assert used(n) <= share * GIB < used(n + 1)  # the most that fit
        assert n < 32 * 8  # fewer than an update's 256 completions
        for end in (0, 1):
            small = decode_seconds(cfg, shape, gpu, 256, 256, seq - 256, "vllm", 256, end, share=0.3)
            roomy = decode_seconds(cfg, shape, gpu, 256, 256, seq - 256, "vllm", 256, end, share=0.9)
            assert small > roomy
            assert small == decode_seconds(cfg, shape, gpu, 256, 256, seq - 256, "vllm", n, end, share=0.9)


def test_training_time_pads_every_row_to_the_longest_completion(monkeypatch):
    """TRL pads every row of an update to its longest completion: the trained tokens follow the
    longest, not the mean (which still sets the decode time)."""
    from diffgrpo.study.plan import hours

    cfg = params.load("paper003_gsm8k_qwen3_4b")
    shape, gpu = plan.model_shape(cfg), plan.GPUS["h100-80gb"]
    [w] = plan.train_work(cfg, "hard")
    base = [hours.train_seconds(cfg, shape, gpu, w, 256, e) for e in (0, 1)]
    gen = [hours.decode_seconds(cfg, shape, gpu, w.completions, 256, w.completion, "vllm", w.generation_batch, e,
                                share=cfg.train.vllm_gpu_memory_utilization) for e in (0, 1)]
    monkeypatch.setitem(hours.THROUGHPUT, "longest_completion_fraction", (0.5, 0.5))
    shorter = [hours.train_seconds(cfg, shape, gpu, w, 256, e) for e in (0, 1)]
    assert shorter[0] < base[0] and shorter[1] < base[1]
    trained, scored = hours.train_flops_per_token(cfg)
    nonembed = shape.layers * shape.layer_params + shape.vocab * shape.hidden
    for e, longest in ((0, 0.75), (1, 1.0)):  # the whole difference is the padded tokens' FLOPs
        rows = w.steps * w.generation_batch * trained + w.completions * scored
        extra = rows * (longest - 0.5) * w.completion * nonembed / (gpu.bf16_tflops * 1e12 * hours.THROUGHPUT["train_mfu"][1 - e])
        assert base[e] - shorter[e] == pytest.approx(extra * hours.PADDED_PASS_TIME, rel=1e-9)  # left padding: +6.3%
        assert base[e] > gen[e]


# ---- recalibrated from the first GPU run (issue 39) -------------------------------------------------
#: measured on one NVIDIA H200 141 GB, 2026-11-27 (`make gpu-accept` and its extra measurements and
#: generation diagnostic; random weights at the papers' shapes, bf16): docs/gpu.md "Measured on an H200"
H200 = {
    "decode_ms_dynamic": (68.6, 81.0),  # a decode step, Qwen3-4B shape, batch 256, prompt 256: PEFT LoRA, bare
    "decode_ms_static": 38.8,  # the same with cache_implementation="static", compiled
    "hf_generate_tok_s": 543.8,  # 64 x (256 + 128), the acceptance's model (LoRA, fused head), eager
    "step_rollouts_s": 60.1,  # one GRPO step's rollouts, 256 x (256 + 512), eager
    "pass_s": {"paper003_gsm8k_qwen3_4b": 4.375, "paper003_table3_llama3_8b": 5.755},  # 64 x 768, LoRA r32
    "padded_pass_s": (4.384, 4.660),  # Qwen3-4B's pass, all-ones mask / left-padded
    "padding_gib": 29.533 - 28.37,  # the same two passes' peak allocated
}


def _decode_ms(cfg, shape, gpu, end, cache):
    """ms a decode step as the plan has it, measured the diagnostic's way: (t(72 new) - t(8 new)) / 64."""
    from diffgrpo.study.plan.hours import THROUGHPUT, decode_seconds

    frac = THROUGHPUT["longest_completion_fraction"][end]
    t = [decode_seconds(cfg, shape, gpu, 256, 256, n, "hf", 256, end, cache=cache) for n in (8, 72)]
    return 1000 * (t[1] - t[0]) / (64 * frac)


def test_hf_decode_is_a_measured_per_layer_overhead_plus_the_bandwidth_term():
    """Eager HF decoding costs about 2 ms a layer a step of launches whatever the batch (the plan
    had 0.1-0.3 and was 3-11x optimistic); a static cache, compiled, about half. The plan's range
    holds what the H200 measured, at the probe's and the acceptance's shapes."""
    from diffgrpo.study.plan.hours import THROUGHPUT, decode_seconds

    cfg = params.load("paper003_gsm8k_qwen3_4b")
    shape, gpu = plan.model_shape(cfg), plan.GPUS["h200-141gb"]
    dyn = [_decode_ms(cfg, shape, gpu, e, "dynamic") for e in (0, 1)]
    static = [_decode_ms(cfg, shape, gpu, e, "static") for e in (0, 1)]
    assert dyn[0] <= min(H200["decode_ms_dynamic"]) and max(H200["decode_ms_dynamic"]) <= dyn[1]
    assert static[0] <= H200["decode_ms_static"] <= static[1] < dyn[0] * 1.2
    # the overhead dominates: a step at batch 256 is mostly launches, not bytes
    assert shape.layers * THROUGHPUT["hf_step_overhead_ms_per_layer"][0] > 0.8 * dyn[0]
    # the acceptance's generate (64 x 128 new) and one GRPO step's rollouts (256 x 512 new), eager
    tok_s = [64 * THROUGHPUT["longest_completion_fraction"][e] * 128
             / decode_seconds(cfg, shape, gpu, 64, 256, 128, "hf", 64, e) for e in (0, 1)]
    assert tok_s[1] <= H200["hf_generate_tok_s"] <= tok_s[0]
    rollouts = [decode_seconds(cfg, shape, gpu, 256, 256, 512, "hf", 256, e) for e in (0, 1)]
    assert rollouts[0] <= H200["step_rollouts_s"] <= rollouts[1]


def test_the_probe_and_evaluation_plan_a_static_cache_on_cuda_and_training_an_eager_one(monkeypatch):
    """On cuda the probe and evaluation generate with a compiled static cache (its compilation
    once a model is in their start time); TRL generates eagerly (it passes disable_compile).
    Training's HF hours follow the eager overhead: raising it moves training, not the probe."""
    from diffgrpo.study.plan import hours

    cfg = params.load("paper003_gsm8k_qwen3_4b", overrides={"generation.backend": "hf", "train.use_vllm": False})
    jobs = graph.jobs(cfg, {"params_file": "", "overrides": {}})
    base = plan.plan(cfg, jobs).set_index("job")
    assert hours.start_seconds(cfg, 0, 3) >= 3 * hours.THROUGHPUT["hf_static_compile_s"][0]
    assert hours.start_seconds(cfg.replace(**{"model.device": "cpu"}), 0, 3) == 0.0
    slower = dict(hours.THROUGHPUT, hf_step_overhead_ms_per_layer=(3.3, 7.0))
    monkeypatch.setattr(hours, "THROUGHPUT", slower)
    moved = plan.plan(cfg, jobs).set_index("job")
    assert (moved.loc["01_probe", ["hours_low", "hours_high"]] == base.loc["01_probe", ["hours_low", "hours_high"]]).all()
    assert moved.loc["03_train hard-seed0", "hours_low"] > 1.3 * base.loc["03_train hard-seed0", "hours_low"]


def test_the_mfu_range_is_what_the_h200_measured_and_holds_its_passes():
    import sys
    from pathlib import Path

    from diffgrpo.study.plan.hours import THROUGHPUT

    assert THROUGHPUT["train_mfu"] == (0.27, 0.39)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import gpu_accept

    for study, measured in H200["pass_s"].items():
        cfg, _, shape, w, prompt = gpu_accept.pass_setup(study, "hard", False)
        lo, hi = gpu_accept.planned_pass(cfg, shape, w, prompt, plan.GPUS["h200-141gb"])["pass_s"]
        assert lo <= measured <= hi, study


def test_left_padding_adds_gqas_repeated_keys_and_values_and_six_percent_time(monkeypatch):
    """TRL left-pads prompts; with a padding mask SDPA repeats a GQA model's k and v to every query
    head: the plan's term matches the H200's +1.16 GiB for Qwen3-4B within 10%, is 0 for a model
    without GQA (the embedded one), and training's compute takes the measured 6.3% longer."""
    import sys
    from pathlib import Path

    from diffgrpo.study.plan import hours

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import gpu_accept

    cfg, _, shape, w, prompt = gpu_accept.pass_setup("paper003_gsm8k_qwen3_4b", "hard", False)
    m = plan.train_memory(cfg, shape, w, plan.GPUS["h200-141gb"], prompt)
    assert m.padding_gib == pytest.approx(H200["padding_gib"], rel=0.1)
    assert m.train_pass_gib == pytest.approx(m.weights_gib + m.lora_gib + m.activations_gib + m.logits_gib
                                             + m.padding_gib, abs=0.03)
    emb = params.load("embedded")
    assert plan.train_memory(emb, plan.model_shape(emb), w, plan.GPUS["h100-80gb"], 64).padding_gib == 0.0
    assert hours.PADDED_PASS_TIME == pytest.approx(H200["padded_pass_s"][1] / H200["padded_pass_s"][0], abs=0.002)
    gsm8k = params.load("paper003_gsm8k_qwen3_4b")
    [tw] = plan.train_work(gsm8k, "hard")
    gpu = plan.GPUS["h100-80gb"]
    padded = [hours.train_seconds(gsm8k, shape, gpu, tw, 256, e) for e in (0, 1)]
    monkeypatch.setattr(hours, "PADDED_PASS_TIME", 1.0)
    unpadded = [hours.train_seconds(gsm8k, shape, gpu, tw, 256, e) for e in (0, 1)]
    trained, scored = hours.train_flops_per_token(gsm8k)
    for e, longest in ((0, 0.75), (1, 1.0)):  # the whole difference is 6.3% of the passes' compute
        rows = tw.steps * tw.generation_batch * trained + tw.completions * scored
        compute = hours.compute_seconds(shape, gpu, rows * (256 + longest * tw.completion), e)
        assert padded[e] - unpadded[e] == pytest.approx(0.063 * compute, rel=1e-6)
