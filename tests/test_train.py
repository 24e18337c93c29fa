"""GRPO + LoRA training: effective TRL config, per-group records, checkpoints, resume.

A tiny random Qwen2 (about 60k parameters) built here, and a stub reward that gives mixed
groups whatever the model says (1 when the completion has an even number of characters), so
every code path sees learnable and non-learnable groups. Each test trains a few steps.
"""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

import peft
from peft import LoraConfig
from trl import GRPOTrainer

from diffgrpo.store import artifacts, layout
from diffgrpo.models import resolve as data, devices
from diffgrpo import params, rewards, tasks, train
from diffgrpo.tasks.shuffled_objects import ShuffledObjects
from diffgrpo.train.config import ScheduleChanged, schedule_depends_on_length

from conftest import tensorboard_scalars

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TASK_OPTIONS = {"people": [3, 4], "swaps": [1, 3], "train_size": 24, "test_size": 6}


class EvenLength(ShuffledObjects):
    """Shuffled-objects rows; reward 1 when the completion's length is even."""

    name = "even_length_objects"

    def score(self, completion, answer):
        return float(len(completion) % 2 == 0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls on 2 threads crawl when another process holds a core (OpenMP waits for
    the descheduled thread): 19 s against 1 s for a 3-step run on a busy 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-qwen2")
    rows = EvenLength(**TASK_OPTIONS).load("train")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    special = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
    bpe.train_from_iterator(list(rows["question"]), trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|end|>", pad_token="<|pad|>",
                                  padding_side="left", chat_template=TEMPLATE)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture
def make_cfg(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    tasks.register(EvenLength)  # the same class again is accepted: one registration per test process

    def make(n_select=8, **train_overrides):
        overrides = {
            "study": "t", "model.name": "tiny", "model.path": str(tiny_model),
            "dataset.task": EvenLength.name, "dataset.task_options": TASK_OPTIONS,
            "train.max_steps": 2, "train.prompts_per_step": 2, "train.group_size": 4,
            "train.max_completion_length": 8, "train.save_steps": 1, "train.learning_rate": 1e-3,
            "train.lora.r": 4, "train.lora.alpha": 8, "train.warmup_ratio": 0.25,
            **{f"train.{k}": v for k, v in train_overrides.items()},
        }
        cfg = params.load(overrides=overrides)
        pool = tasks.get(EvenLength.name, **TASK_OPTIONS).load("train")
        sel = pd.DataFrame({"id": pool["id"][:n_select], "p_hat": np.linspace(0, 1, n_select)})
        artifacts.write_parquet(layout.selection_file(cfg, "hard"), sel)
        return cfg

    return make


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")  # PEFT, loading below
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_run_writes_effective_config_groups_steps_checkpoints(make_cfg, loss_type, beta):
    cfg = make_cfg(loss_type=loss_type, beta=beta, max_steps=3, save_steps=2)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    t = cfg.train

    # every GRPOConfig value we set is the one TRL used
    grpo = json.loads((run / "trl_config.json").read_text())["grpo"]
    expected = {
        "num_generations": t.group_size, "per_device_train_batch_size": t.prompts_per_step * t.group_size,
        "gradient_accumulation_steps": 1, "steps_per_generation": 1, "generation_batch_size": 8,
        "beta": beta, "loss_type": loss_type, "scale_rewards": t.scale_rewards, "epsilon": t.epsilon,
        "epsilon_high": t.epsilon_high, "num_iterations": t.num_iterations, "learning_rate": t.learning_rate,
        "lr_scheduler_type": t.lr_scheduler, "warmup_steps": 1, "weight_decay": t.weight_decay,
        "max_grad_norm": t.max_grad_norm, "max_steps": 3, "max_completion_length": 8,
        "temperature": t.temperature, "top_p": t.top_p, "top_k": 0,
        "mask_truncated_completions": t.mask_truncated_completions, "save_steps": 2,
        "logging_steps": t.logging_steps, "seed": 0, "use_cpu": True, "bf16": False,
        "gradient_checkpointing": False, train.checkpointing_argument(): False, "use_vllm": False,
        "use_bias_correction_kl": False, "report_to": [] if t.report_to == "none" else [t.report_to],
    }
    assert {k: grpo[k] for k in expected} == expected
    peft_cfg = json.loads((run / "trl_config.json").read_text())["peft"]
    assert (peft_cfg["r"], peft_cfg["lora_alpha"], sorted(peft_cfg["target_modules"])) == (
        4, 8, sorted(t.lora.target_modules))
    assert params.load(run / "params.yaml", defaults=False) == cfg

    # one group row per (step, prompt), rewards of length G, learnable = mixed rewards
    groups = pd.read_parquet(run / "groups.parquet")
    assert len(groups) == 3 * t.prompts_per_step
    assert sorted(groups["step"].unique()) == [1, 2, 3]
    assert all(len(r) == t.group_size for r in groups["rewards"])
    assert list(groups["learnable"]) == [bool(np.std(r) > 0) for r in groups["rewards"]]
    assert groups["learnable"].any() and not groups["learnable"].all()

    # TRL's per-step share of zero-std groups is the complement of ours
    steps = pd.read_parquet(run / "steps.parquet")
    assert list(steps["step"]) == [1, 2, 3]
    ours = 1 - groups.groupby("step")["learnable"].mean()
    assert np.allclose(steps.set_index("step")["frac_reward_zero_std"], ours)
    assert np.allclose(steps.set_index("step")["reward"], groups.groupby("step")["reward_mean"].mean())
    assert ("kl" in steps) == (beta > 0)

    # adapters at save_steps and at the end; only the newest keeps the optimizer state
    ckpts = layout.list_checkpoints(run / "checkpoints")
    assert sorted(ckpts) == [2, 3]
    for step, path in ckpts.items():
        assert (path / "adapter_model.safetensors").exists() and (path / "adapter_config.json").exists()
        assert (path / "optimizer.pt").exists() == (step == 3)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(cfg.model.path)
    PeftModel.from_pretrained(base, ckpts[2])

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["steps_done"] == 3
    assert manifest["checkpoints"] == ["checkpoints/checkpoint-2", "checkpoints/checkpoint-3"]
    assert manifest["selection"] == "select/hard.parquet" and manifest["num_prompts"] == 8
    assert set(manifest["versions"]) == {"torch", "transformers", "trl", "peft"}


@pytest.mark.e2e
def test_finished_run_is_skipped_and_settings_are_guarded(make_cfg, monkeypatch):
    cfg = make_cfg(max_steps=1)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    monkeypatch.setattr(data, "load_model", lambda *a, **k: pytest.fail("a finished run was trained again"))
    assert train.train_run(cfg, "hard", seed=0, progress=False) == run



@pytest.mark.e2e
def test_a_run_with_other_settings_is_set_aside_and_trained_anew(make_cfg):
    """A changed setting (or a rebuilt model) never resumes the old run, and never deletes it."""
    cfg = make_cfg(max_steps=1)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    old = json.loads((run / "manifest.json").read_text())
    changed = cfg.replace(**{"train.learning_rate": 0.5})
    with pytest.warns(UserWarning, match=r"train\.learning_rate differ.*kept it as hard-seed0\.superseded-"):
        again = train.train_run(changed, "hard", seed=0, progress=False)
    new = json.loads((again / "manifest.json").read_text())
    assert again == run and new["key"]["train"]["learning_rate"] == 0.5 and new["resumed_from"] == []
    [kept] = run.parent.glob("hard-seed0.superseded-*")
    assert json.loads((kept / "manifest.json").read_text())["key"] == old["key"]


def _trace(run):
    groups = pd.read_parquet(run / "groups.parquet")
    return list(zip(groups["step"], groups["prompt_id"]))


def _interrupt(cfg, arm, monkeypatch, when) -> None:
    """Train ``arm`` until ``when(recorder, global_step)`` holds while a batch is scored, then
    stop it as a crash would (KeyboardInterrupt), leaving the run folder behind."""
    correct = train.Recorder.correct

    def flaky(self, *args, trainer_state, **kwargs):
        if when(self, trainer_state.global_step):
            raise KeyboardInterrupt("simulated interruption")
        return correct(self, *args, trainer_state=trainer_state, **kwargs)

    monkeypatch.setattr(train.Recorder, "correct", flaky)
    with pytest.raises(KeyboardInterrupt):
        train.train_run(cfg, arm, seed=0, progress=False)
    monkeypatch.setattr(train.Recorder, "correct", correct)


@pytest.mark.e2e
def test_resume_after_interruption_matches_an_uninterrupted_run(make_cfg, monkeypatch, tmp_path):
    # 4 selected prompts, 2 per step: an epoch is 2 steps, so the resume starts a new epoch
    cfg = make_cfg(n_select=4, max_steps=4)
    whole = train.train_run(cfg, "hard", seed=0, progress=False)
    reference = _trace(whole)
    ref_steps = pd.read_parquet(whole / "steps.parquet")
    import shutil

    shutil.rmtree(whole)

    # crash while generating for step 3 (after the checkpoint of step 2)
    _interrupt(cfg, "hard", monkeypatch, lambda recorder, step: step == 2)
    assert json.loads((whole / "manifest.json").read_text())["status"] == "running"

    run = train.train_run(cfg, "hard", seed=0, progress=False)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["resumed_from"] == [2]
    assert _trace(run) == reference  # same prompts at the same steps, no row lost or doubled
    steps = pd.read_parquet(run / "steps.parquet")
    assert list(steps["step"]) == [1, 2, 3, 4]
    # the restored optimizer, scheduler and RNG continue the same trajectory
    assert np.allclose(steps["learning_rate"], ref_steps["learning_rate"])
    assert np.allclose(steps["reward"], ref_steps["reward"])


@pytest.mark.e2e
def test_tensorboard_curves_are_written_in_the_run_folder_and_kept_out_of_its_key(make_cfg):
    """train.report_to: tensorboard (the default) writes each logged step's metrics, as TRL logs
    them, into runs/<run>/tensorboard/; the same values as steps.parquet. Another report_to is
    the same run: it is not retrained."""
    cfg = make_cfg(max_steps=2)
    assert cfg.train.report_to == "tensorboard"
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    [logdir] = {p.parent for p in layout.tensorboard_dir(run).rglob("events.out.tfevents.*")}
    curves = tensorboard_scalars(logdir)
    steps = pd.read_parquet(run / "steps.parquet").set_index("step")
    for tag, column in [("train/reward", "reward"), ("train/frac_reward_zero_std", "frac_reward_zero_std"),
                        ("train/completions/mean_length", "completions/mean_length"), ("train/loss", "loss")]:
        assert sorted(curves[tag]) == [1, 2], tag
        assert np.allclose([curves[tag][s] for s in (1, 2)], steps.loc[[1, 2], column], atol=1e-5), tag
    manifest = json.loads((run / "manifest.json").read_text())
    assert "report_to" not in manifest["key"]["train"]
    again = train.train_run(cfg.replace(**{"train.report_to": "none"}), "hard", seed=0, progress=False)
    assert json.loads((again / "manifest.json").read_text()) == manifest  # finished: skipped, not trained anew


@pytest.mark.e2e
def test_extending_a_finished_run_continues_from_its_last_step(make_cfg):
    """With a constant schedule (no warmup) the steps already trained are those of a longer run."""
    cfg = make_cfg(max_steps=2, lr_scheduler="constant", warmup_ratio=0.0)
    train.train_run(cfg, "hard", seed=0, progress=False)
    run = train.train_run(cfg.replace(**{"train.max_steps": 4}), "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    assert len(groups) == 4 * cfg.train.prompts_per_step
    assert list(pd.read_parquet(run / "steps.parquet")["step"]) == [1, 2, 3, 4]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["resumed_from"] == [2] and manifest["steps_done"] == 4


@pytest.mark.e2e
def test_extending_a_cosine_run_is_refused_naming_the_keys(make_cfg):
    """Issue 30: cosine, 2 steps then 4 would give lr 1e-4, 5e-5, 0, 1.5e-5 (a fresh 4-step run:
    1e-4, 8.5e-5, 5e-5, 1.5e-5). Refused before anything is written; the finished run is kept."""
    cfg = make_cfg(max_steps=2, lr_scheduler="cosine", warmup_ratio=0.0, learning_rate=1e-4)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(ScheduleChanged, match=r"planned at 2 steps \(2 done\) with train.lr_scheduler = cosine.*"
                                              r"to 4 steps \(train.max_steps or train.epochs\).*train.max_steps back to 2"):
        train.train_run(cfg.replace(**{"train.max_steps": 4}), "hard", seed=0, progress=False)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    lrs = pd.read_parquet(run / "steps.parquet")["learning_rate"].tolist()
    assert lrs == pytest.approx([1e-4, 5e-5])  # the 2-step cosine run as it was


@pytest.mark.parametrize("scheduler, ratio, planned, steps, changes", [
    ("constant", 0.5, 2, 8, False), ("constant_with_warmup", 0.0, 2, 8, False),
    ("constant_with_warmup", 0.25, 4, 8, True), ("constant_with_warmup", 0.25, 3, 4, False),
    ("cosine", 0.0, 2, 4, True), ("linear", 0.0, 2, 4, True), ("cosine", 0.0, 4, 4, False),
])
def test_which_schedules_a_longer_run_keeps(scheduler, ratio, planned, steps, changes):
    t = params.load(overrides={"train.lr_scheduler": scheduler, "train.warmup_ratio": ratio}).train
    assert schedule_depends_on_length(t, planned, steps) is changes


@pytest.mark.e2e
def test_num_iterations_records_each_generated_group_once(make_cfg):
    cfg = make_cfg(max_steps=4, num_iterations=2, save_steps=2)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    # one generation feeds two updates: groups recorded at steps 1 and 3 only
    assert sorted(groups["step"].unique()) == [1, 3]
    assert len(groups) == 2 * cfg.train.prompts_per_step


def test_selected_id_missing_from_the_pool_is_named(make_cfg):
    cfg = make_cfg()
    path = layout.selection_file(cfg, "hard")
    sel = pd.read_parquet(path)
    artifacts.write_parquet(path, pd.concat([sel, pd.DataFrame({"id": ["so/train/999999"], "p_hat": [0.0]})]))
    with pytest.raises(ValueError, match=r"so/train/999999") as err:
        train.train_run(cfg, "hard", seed=0, progress=False)
    assert str(path) in str(err.value)


def test_prompt_longer_than_max_prompt_length_is_an_error(make_cfg):
    cfg = make_cfg(max_prompt_length=4)
    with pytest.raises(ValueError, match="max_prompt_length = 4"):
        train.train_run(cfg, "hard", seed=0, progress=False)


LAUNCHED = """
import sys
from diffgrpo import params, tasks, train
sys.path.insert(0, {tests!r})
from test_train import EvenLength
tasks.register(EvenLength)
cfg = params.load({params_file!r}, defaults=False)
train.train_run(cfg, "hard", seed=0, progress=False)
"""


def _torchrun_two_processes(cfg, tmp_path) -> None:
    """Train ``cfg``'s hard-seed0 run in 2 CPU processes (gloo) started by torchrun on a free
    port (a fixed one collides with another test session's run on the same machine)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    params_file = tmp_path / "launched.yaml"
    params_file.write_text(params.dump(cfg))
    script = tmp_path / "launched.py"
    script.write_text(LAUNCHED.format(tests=str(Path(__file__).parent), params_file=str(params_file)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(devices.free_port()), str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.e2e
def test_two_processes_keep_prompts_per_step(make_cfg, tmp_path):
    """2 CPU processes (gloo) started by torchrun, as `accelerate launch --multi_gpu` starts
    one per GPU (its `--cpu` starts only one): each takes half of every update, the main
    process writes the run, and groups.parquet holds every group of both processes."""

    cfg = make_cfg(n_select=8, max_steps=2, save_steps=2, prompts_per_step=4, num_processes=2)
    _torchrun_two_processes(cfg, tmp_path)

    run = layout.run_dir(cfg, "hard", 0)
    grpo = json.loads((run / "trl_config.json").read_text())["grpo"]
    # 4 prompts x 4 completions per update: 2 prompts (8 completions) on each of 2 processes
    assert (grpo["per_device_train_batch_size"], grpo["gradient_accumulation_steps"], grpo["generation_batch_size"]) \
        == (8, 1, 16)
    groups = pd.read_parquet(run / "groups.parquet")
    assert groups.groupby("step").size().to_dict() == {1: 4, 2: 4}
    assert groups.groupby("step")["prompt_id"].nunique().to_dict() == {1: 4, 2: 4}
    assert set(groups["prompt_id"]) == set(pd.read_parquet(layout.selection_file(cfg, "hard"))["id"])
    steps = pd.read_parquet(run / "steps.parquet")
    assert list(steps["step"]) == [1, 2]
    assert np.allclose(steps.set_index("step")["reward"], groups.groupby("step")["reward_mean"].mean())
    # the generation record counts both processes' groups, not the main process's half
    assert steps["groups_generated"].tolist() == [4, 4] and steps["completions_generated"].tolist() == [16, 16]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["num_processes"] == 2


class _State:
    def __init__(self, global_step: int):
        self.global_step = global_step


class _Exact:
    def score(self, completion, answer):
        return float(completion == answer)


def test_control_reward_is_independent_of_correctness_with_the_stated_mean():
    """(issue 11) The control arm (random_reward): Bernoulli rewards whose mean is the probe's
    mean p_hat over its selection, the same whatever the completions say, deterministic in
    (seed, step, prompt); the verifier's scores are still recorded as ``scores``."""
    rows = pd.DataFrame({"id": ["a", "b", "c", "d"], "p_hat": [0.1, 0.2, 0.3, 0.6]})
    assert rewards.get("verifier").run_key(rows, 0) is None  # the verifier adds nothing to a run's key
    key = rewards.get("bernoulli_control").run_key(rows, 3)
    assert key["mean"] == pytest.approx(0.3) and key["seed"] == 3
    control = {"bernoulli_control": 1.0}
    g = 8

    def batch(recorder, step, right: bool):
        ids = [p for p in rows["id"] for _ in range(g)]
        completions = ["x" if right or i % 2 else "y" for i in range(len(ids))]  # all right, or half
        return recorder.correct(None, completions, ["x"] * len(ids), ids, [1] * len(ids), _State(step))

    right, half = (train.Recorder(_Exact(), g, [], [], control, seed=3, rows=rows) for _ in range(2))
    r_right = [batch(right, s, True) for s in range(200)]
    r_half = [batch(half, s, False) for s in range(200)]
    assert r_right == r_half  # the completions' correctness changes nothing
    drawn = np.concatenate(r_right)
    se = np.sqrt(0.3 * 0.7 / len(drawn))
    assert abs(drawn.mean() - 0.3) < 4 * se and set(np.unique(drawn)) == {0.0, 1.0}
    scores = np.concatenate([grp["scores"] for grp in half.groups])
    assert scores.mean() == 0.5 and all(np.all(np.array(grp["scores"]) == 1.0) for grp in right.groups)
    assert [grp["rewards"] for grp in half.groups] == [list(r) for r in np.reshape(drawn, (-1, g))]
    # same seed: same draws; another seed: other draws
    again = train.Recorder(_Exact(), g, [], [], control, seed=3, rows=rows)
    other = train.Recorder(_Exact(), g, [], [], control, seed=4, rows=rows)
    assert batch(again, 7, True) == r_right[7] and batch(other, 7, True) != r_right[7]
    # without a control the reward is the verifier's score
    plain = train.Recorder(_Exact(), g, [], [])
    assert batch(plain, 0, False) == [float(i % 2) for i in range(4 * g)]


def test_a_length_reward_does_not_make_a_group_learnable():
    """(issue 29) DAPO filters groups on accuracy: an all-correct group whose completions differ
    in length has rewards that differ through the length penalty, yet no accuracy signal; it is
    not learnable (nor kept by dynamic sampling). A group of mixed correctness is."""
    g = 4
    rec = train.Recorder(_Exact(), g, [], [], length_reward=(1.0, 10, 5))
    ids, answers = ["a"] * g + ["b"] * g, ["x"] * 2 * g
    completions = ["x"] * g + ["x", "y", "x", "y"]
    lengths = [[0] * n for n in (2, 6, 8, 10)] * 2  # past L_max - L_cache = 5: penalised by length
    out = rec.correct(None, completions, answers, ids, [1] * 2 * g, _State(0), completion_ids=lengths)
    all_right, mixed = rec.groups
    assert len(set(out[:g])) > 1 and len(set(all_right["rewards"])) > 1  # the length term varies...
    assert not all_right["learnable"] and mixed["learnable"]                # ...but only accuracy counts


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_merged_lora_restores_the_base_weights_bit_for_bit(tiny_model):
    from peft import get_peft_model

    from diffgrpo.models import loading as diffgrpo_models

    model, _ = diffgrpo_models.load_model(str(tiny_model))
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    before = {k: v.clone() for k, v in peft_model.state_dict().items()}
    ids = torch.randint(5, 200, (3, 12))
    with torch.no_grad():
        unmerged = peft_model(input_ids=ids).logits
        attn = peft_model.base_model.model.model.layers[0].self_attn
        layer = attn.q_proj
        with train.merged_lora(peft_model):
            merged = peft_model(input_ids=ids).logits
            assert layer.merged
            assert attn.q_proj is layer.get_base_layer()  # the model calls the merged base layer itself
            assert not torch.equal(layer.get_base_layer().weight, before[
                "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])
            through_peft = layer(torch.ones(2, layer.in_features))  # what PEFT's merged layer computes
            assert torch.equal(through_peft, attn.q_proj(torch.ones(2, layer.in_features)))
        after = peft_model(input_ids=ids).logits
    assert attn.q_proj is layer and not layer.merged
    assert all(torch.equal(before[k], v) for k, v in peft_model.state_dict().items())  # exact, no rounding residue
    assert torch.equal(after, unmerged)
    assert torch.allclose(merged, unmerged, atol=1e-5)  # the same function, up to float rounding


@pytest.mark.e2e
def test_generation_with_the_lora_merged_samples_what_the_unmerged_model_samples(make_cfg, monkeypatch):
    """The speed-up is in effect (TRL 1.16 generates through ``_generate_single_turn``: if an
    upgrade moves generation elsewhere, the count is 0 and this fails) and, over these steps,
    changes no sampled completion: rewards, lengths and losses are the same with it off."""
    calls = []
    merged_lora = train.merged_lora

    def counting(model):
        calls.append(1)
        return merged_lora(model)

    monkeypatch.setattr(train.trainer, "merged_lora", counting)
    cfg = make_cfg(max_steps=4, save_steps=10, max_completion_length=16)
    merged = train.train_run(cfg, "hard", seed=0, progress=False)
    assert len(calls) == 4
    on = (pd.read_parquet(merged / "groups.parquet"), pd.read_parquet(merged / "steps.parquet"))
    off_cfg = cfg.replace(**{"train.merge_lora_for_generation": False})
    unmerged = train.train_run(off_cfg, "hard", seed=0, progress=False)  # other key: set aside, retrained
    assert len(calls) == 4
    off = (pd.read_parquet(unmerged / "groups.parquet"), pd.read_parquet(unmerged / "steps.parquet"))
    pd.testing.assert_frame_equal(on[0], off[0])
    for column in ("completions/mean_length", "reward", "loss"):
        assert np.allclose(on[1][column], off[1][column], rtol=1e-5), column


# ---- dynamic sampling (issue 10) ------------------------------------------------------------
def _updates(monkeypatch):
    """Every batch an update trains on, as the trainer hands it to compute_loss."""
    seen = []
    compute_loss = train.Trainer.compute_loss

    def spy(self, model, inputs, *args, **kwargs):
        seen.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(train.Trainer, "compute_loss", spy)
    return seen


@pytest.mark.e2e
def test_dynamic_sampling_trains_on_mixed_groups_only(make_cfg, monkeypatch):
    """G = 2 and a coin-flip reward: half the groups are all-equal. With dynamic sampling no
    update holds one, extra rounds top the update up, and every step says what it generated."""
    cfg = make_cfg(max_steps=4, group_size=2, **{"dynamic_sampling": {"enabled": True, "max_rounds": 6}})
    updates = _updates(monkeypatch)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    g, p = cfg.train.group_size, cfg.train.prompts_per_step

    assert len(updates) == 4
    for batch in updates:
        adv = batch["advantages"].view(-1, g)
        live = batch["completion_mask"].view(-1, g, batch["completion_mask"].size(1)).sum(dim=(1, 2)) > 0
        assert bool(((adv.abs().amax(dim=1) > 0) | ~live).all()), "an update holds a zero-variance group"
        assert batch["num_items_in_batch"] == batch["completion_mask"].sum()

    groups = pd.read_parquet(run / "groups.parquet")
    steps = pd.read_parquet(run / "steps.parquet").set_index("step")
    assert groups[groups["kept"]]["learnable"].all()
    assert (~groups["learnable"]).any() and (groups["round"] > 1).any()  # the test saw dropping and refilling
    per_step = groups.groupby("step")
    assert per_step["kept"].sum().le(p).all()
    assert np.array_equal(steps["groups_generated"], per_step.size())
    assert np.array_equal(steps["groups_kept"], per_step["kept"].sum())
    assert np.array_equal(steps["generation_rounds"], per_step["round"].max())
    assert np.array_equal(steps["completions_generated"], per_step.size() * g)
    dropped = groups[~groups["learnable"]]
    all_right = dropped["scores"].map(lambda s: bool(np.all(np.asarray(s) == 1)))
    assert np.array_equal(steps["dropped_all_correct"], all_right.groupby(dropped["step"]).sum().reindex(steps.index, fill_value=0))
    assert np.array_equal(steps["dropped_all_wrong"], (~all_right).groupby(dropped["step"]).sum().reindex(steps.index, fill_value=0))
    # a step that ran out of rounds has fewer than p groups; one that did not holds exactly p
    full = steps["generation_rounds"] < 6
    assert (steps.loc[full, "groups_kept"] == p).all()
    # each round's extra prompts are distinct from those the step already generated, while any are left
    for (step, rnd), grp in groups.groupby(["step", "round"]):
        assert grp["prompt_id"].is_unique


@pytest.mark.e2e
def test_dynamic_sampling_with_nothing_learnable_masks_every_token(make_cfg, monkeypatch):
    """A reward that never varies: after max_rounds the update has no mixed group, so no token
    enters the loss (and the record says 0 kept)."""
    monkeypatch.setattr(EvenLength, "score", lambda self, completion, answer: 1.0)
    cfg = make_cfg(max_steps=1, **{"dynamic_sampling": {"enabled": True, "max_rounds": 2}})
    updates = _updates(monkeypatch)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    assert len(updates) == 1 and int(updates[0]["completion_mask"].sum()) == 0
    steps = pd.read_parquet(run / "steps.parquet")
    assert steps[["groups_kept", "generation_rounds", "dropped_all_correct"]].iloc[0].tolist() == [0, 2, 4]


@pytest.mark.e2e
def test_dynamic_sampling_off_trains_as_trl_does(make_cfg, monkeypatch):
    """With the option off, our trainer's numbers are TRL's own (the override passes the batch
    through untouched): same seed, same rewards, losses and records."""
    cfg = make_cfg(max_steps=3)
    ours = train.train_run(cfg, "hard", seed=0, progress=False)
    a_groups, a_steps = pd.read_parquet(ours / "groups.parquet"), pd.read_parquet(ours / "steps.parquet")
    import shutil

    shutil.rmtree(ours)
    monkeypatch.setattr(train.Trainer, "_generate_and_score_completions",
                        GRPOTrainer._generate_and_score_completions)
    trl_run = train.train_run(cfg, "hard", seed=0, progress=False)
    b_groups, b_steps = pd.read_parquet(trl_run / "groups.parquet"), pd.read_parquet(trl_run / "steps.parquet")
    pd.testing.assert_frame_equal(a_groups, b_groups)
    assert set(train.GENERATION_METRICS) <= set(a_steps) and not set(train.GENERATION_METRICS) & set(b_steps)
    same = [c for c in b_steps if c != "step_time"]
    pd.testing.assert_frame_equal(a_steps[same], b_steps[same])


def test_trl_generate_and_score_is_where_dynamic_sampling_hooks():
    """Pin the TRL internals dynamic sampling relies on, so an upgrade that moves them fails
    here rather than silently training on every group: the method exists, is called from
    _prepare_inputs with the generation batch, and reports zero-std groups."""
    import inspect

    src = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "self._generate_and_score_completions(generation_batch)" in src
    body = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for name in train.trainer.BATCH_KEYS - {"sampling_per_token_logps"}:
        assert f'"{name}"' in body, name
    assert "frac_reward_zero_std" in body and "completion_ids=completion_ids_list" in inspect.getsource(
        GRPOTrainer._calculate_rewards)
    # a padded update (issue 17): TRL cuts the generated batch into steps_per_generation equal passes,
    # and the loss our Trainer rescales is _compute_loss(model, inputs)'s
    assert "split_tensor_dict(generation_batch, self.args.steps_per_generation)" in src
    assert list(inspect.signature(GRPOTrainer._compute_loss).parameters) == ["self", "model", "inputs"]
    assert 'inputs["num_items_in_batch"]' in inspect.getsource(GRPOTrainer._compute_loss)


@pytest.mark.e2e
def test_dynamic_sampling_resumes_to_the_same_run(make_cfg, monkeypatch):
    cfg = make_cfg(n_select=6, max_steps=4, group_size=2, **{"dynamic_sampling": {"enabled": True, "max_rounds": 3}})
    whole = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(whole / "groups.parquet")
    reference = list(zip(groups["step"], groups["round"], groups["prompt_id"], groups["kept"]))
    ref_steps = pd.read_parquet(whole / "steps.parquet")
    import shutil

    shutil.rmtree(whole)
    _interrupt(cfg, "hard", monkeypatch, lambda recorder, step: step == 2)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    assert json.loads((run / "manifest.json").read_text())["resumed_from"] == [2]
    groups = pd.read_parquet(run / "groups.parquet")
    assert list(zip(groups["step"], groups["round"], groups["prompt_id"], groups["kept"])) == reference
    steps = pd.read_parquet(run / "steps.parquet")
    assert np.allclose(steps["reward"], ref_steps["reward"])
    assert steps["generation_rounds"].tolist() == ref_steps["generation_rounds"].tolist()


@pytest.mark.e2e
def test_completion_budget_stops_the_run_and_counts_as_finished(make_cfg, monkeypatch):
    """train.max_completions: the run stops at the first step that reaches the budget; the
    manifest says so and the evaluate stage accepts it as finished."""
    cfg = make_cfg(max_steps=6, group_size=2, max_completions=10,
                   **{"dynamic_sampling": {"enabled": True, "max_rounds": 3}})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    manifest = json.loads((run / "manifest.json").read_text())
    groups = pd.read_parquet(run / "groups.parquet")
    per_step = groups.groupby("step").size() * 2
    assert manifest["status"] == "complete" and manifest["budget_spent"] and manifest["steps_done"] < 6
    assert manifest["completions_generated"] == int(per_step.sum()) >= 10
    assert per_step.iloc[:-1].sum() < 10  # it stopped at the first step that reached the budget
    assert layout.list_checkpoints(run / "checkpoints")
    from diffgrpo import evaluate

    evaluate.check_finished(run, cfg.train.max_steps)
    monkeypatch.setattr(data, "load_model", lambda *a, **k: pytest.fail("a finished run was trained again"))
    assert train.train_run(cfg, "hard", seed=0, progress=False) == run


# ---- dynamic sampling with gradient accumulation and several processes (issue 17) -----------
@pytest.mark.e2e
def test_dynamic_sampling_with_accumulation_pads_each_update_to_equal_passes(make_cfg, monkeypatch):
    """4 prompts an update, 1 a pass: TRL splits every update into 4 passes. With 2 rounds at
    most some updates stay part-filled; each is padded with masked rows so its passes are equal,
    and the rows that carry an advantage are exactly the kept groups the run records."""
    cfg = make_cfg(n_select=12, max_steps=4, group_size=2, prompts_per_step=4, per_device_prompts=1,
                   **{"dynamic_sampling": {"enabled": True, "max_rounds": 2}})
    updates = _updates(monkeypatch)
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    grpo = json.loads((run / "trl_config.json").read_text())["grpo"]
    assert (grpo["gradient_accumulation_steps"], grpo["steps_per_generation"], grpo["per_device_train_batch_size"]) \
        == (4, 4, 2)
    steps = pd.read_parquet(run / "steps.parquet").set_index("step")
    groups = pd.read_parquet(run / "groups.parquet")
    kept = groups[groups["kept"]]
    assert kept["learnable"].all()
    assert np.array_equal(steps["groups_kept"], groups.groupby("step")["kept"].sum())
    assert (steps["groups_kept"] < 4).any() and (steps["groups_kept"] > 0).any()  # padding was exercised
    assert len(updates) == 4 * 4
    for step, passes in zip(steps.index, [updates[i:i + 4] for i in range(0, 16, 4)]):
        assert len({p["completion_ids"].size(0) for p in passes}) == 1, "the passes of an update differ in size"
        live = sum(int((p["advantages"] != 0).sum()) for p in passes)
        assert live == steps.loc[step, "groups_kept"] * 2  # every kept completion, and no other, trains
        masked = sum(int(((p["completion_mask"].sum(1) > 0) & (p["advantages"] == 0)).sum()) for p in passes)
        assert masked == 0  # a padded (or dropped) row never enters the loss
        assert all(p["num_items_in_batch"] == sum(q["completion_mask"].sum() for q in passes) for p in passes)
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"


@pytest.mark.e2e
@pytest.mark.parametrize("loss_type, beta", [("grpo", 0.1), ("dr_grpo", 0.0), ("dapo", 0.0)])
def test_a_padded_update_has_the_gradient_of_its_kept_groups(make_cfg, monkeypatch, loss_type, beta):
    """The direct check: the kept groups of an update in one pass, against the same groups
    padded with masked rows and split into 3 passes as TRL splits an accumulated update (the
    loss rescaled for the row-mean losses): the LoRA gradients agree. Without the rescaling a
    row-mean loss's gradient shrinks by kept/padded rows."""
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

    cfg = make_cfg(max_steps=1, group_size=2, loss_type=loss_type, beta=beta,
                   **{"dynamic_sampling": {"enabled": True, "max_rounds": 4}})
    seen = {}
    compute_loss, pad_batch = train.Trainer.compute_loss, train.trainer.pad_batch

    def spy(self, model, inputs, *args, **kwargs):
        seen.setdefault("trainer", (self, model))
        return compute_loss(self, model, inputs, *args, **kwargs)

    def keep(batch, rows):
        seen.setdefault("batch", {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in batch.items()})
        return pad_batch(batch, rows)

    monkeypatch.setattr(train.Trainer, "compute_loss", spy)
    monkeypatch.setattr(train.trainer, "pad_batch", keep)
    train.train_run(cfg, "hard", seed=0, progress=False)
    trainer, model = seen["trainer"]
    batch = seen["batch"]
    rows = batch["completion_ids"].size(0)
    assert rows > 0 and bool((batch["advantages"] != 0).all())
    model.train()

    def gradient(b, passes):
        trainer.current_gradient_accumulation_steps = trainer.args.steps_per_generation = passes
        model.zero_grad()
        for part in split_tensor_dict(shuffle_sequence_dict(b), passes):
            trainer.compute_loss(model, part).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])

    one = gradient(batch, 1)
    padded_rows = train.trainer.passes_rows(rows + 3, 3)
    padded = pad_batch(batch, padded_rows)
    scale = train.trainer.loss_scale(loss_type, padded_rows, 1, rows)
    if scale != 1.0:
        padded["loss_scale"] = torch.tensor(scale)
    assert padded["completion_ids"].size(0) == padded_rows > rows and int(padded["completion_mask"].sum()) == int(
        batch["completion_mask"].sum())
    three = gradient(padded, 3)
    assert one.abs().max() > 0
    assert torch.allclose(one, three, rtol=1e-4, atol=1e-7), float((one - three).abs().max())
    if loss_type in train.trainer.ROW_MEAN_LOSSES:
        unscaled = gradient({k: v for k, v in padded.items() if k != "loss_scale"}, 3)
        assert torch.allclose(unscaled * scale, one, rtol=1e-4, atol=1e-7) and not torch.allclose(unscaled, one)


def test_bnpo_with_dynamic_sampling_and_several_passes_is_refused(make_cfg):
    cfg = make_cfg(loss_type="bnpo", per_device_prompts=1, **{"dynamic_sampling": {"enabled": True, "max_rounds": 2}})
    with pytest.raises(ValueError, match="loss_type 'bnpo' needs one process and one pass per update"):
        train.train_run(cfg, "hard", seed=0, progress=False)


@pytest.mark.e2e
def test_two_processes_agree_on_dynamic_sampling_and_the_budget(make_cfg, tmp_path):
    """2 CPU processes (gloo), 1 prompt a pass (2 passes on each), dynamic sampling and a
    completion budget: both run the same rounds (every round holds both processes' groups, none
    hangs), draw distinct extra prompts, stop at the same step, and the record counts both."""

    cfg = make_cfg(n_select=16, max_steps=6, save_steps=2, prompts_per_step=4, per_device_prompts=1, group_size=2,
                   max_completions=40, num_processes=2, **{"dynamic_sampling": {"enabled": True, "max_rounds": 3}})
    _torchrun_two_processes(cfg, tmp_path)

    run = layout.run_dir(cfg, "hard", 0)
    grpo = json.loads((run / "trl_config.json").read_text())["grpo"]
    assert (grpo["per_device_train_batch_size"], grpo["gradient_accumulation_steps"]) == (2, 2)
    groups = pd.read_parquet(run / "groups.parquet")
    steps = pd.read_parquet(run / "steps.parquet").set_index("step")
    per_round = groups.groupby(["step", "round"])
    assert (per_round.size() == 4).all()  # each process's 2 groups in every round: they ran the same rounds
    assert per_round["prompt_id"].nunique().eq(4).all()  # the processes' extra prompts are distinct
    assert np.array_equal(steps["generation_rounds"], groups.groupby("step")["round"].max())
    assert np.array_equal(steps["groups_generated"], groups.groupby("step").size())
    assert np.array_equal(steps["groups_kept"], groups.groupby("step")["kept"].sum())
    assert groups[groups["kept"]]["learnable"].all() and (groups.groupby("step")["kept"].sum() <= 4).all()
    assert (steps["generation_rounds"] > 1).any()
    manifest = json.loads((run / "manifest.json").read_text())
    per_step = groups.groupby("step").size() * 2
    assert manifest["status"] == "complete" and manifest["budget_spent"] and manifest["steps_done"] < 6
    assert manifest["completions_generated"] == int(per_step.sum()) >= 40 > int(per_step.iloc[:-1].sum())


@pytest.mark.e2e
def test_a_run_with_num_processes_launches_itself_through_accelerate(make_cfg, tmp_path, monkeypatch):
    """train.num_processes: 2: the run (as the study's 03_train job calls it, in one process)
    starts `accelerate launch --multi_gpu --num_processes 2` of diffgrpo.train with the study's
    params, on the GPUs its job was given (here 2 CPU processes: gloo), and returns the run's
    folder once the launched processes have trained it; a launch whose process count disagrees
    with the params is refused (the count is in the run's key)."""
    import subprocess
    from pathlib import Path

    plugin = tmp_path / "even_length.py"
    plugin.write_text(PLUGIN.format(tests=str(Path(__file__).parent)))
    cfg = make_cfg(n_select=8, max_steps=2, save_steps=2, prompts_per_step=4, num_processes=2).replace(
        plugins=[str(plugin)])
    launched = []
    popen = subprocess.Popen

    def record(cmd, **kwargs):
        launched.append(cmd)
        return popen(cmd, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", record)
    out = train.train_run(cfg, "hard", seed=0, progress=False)
    assert out == layout.run_dir(cfg, "hard", 0)
    [cmd] = launched
    assert cmd[1:4] == ["-m", "accelerate.commands.launch", "--multi_gpu"]
    assert cmd[cmd.index("--num_processes") + 1] == "2" and cmd[cmd.index("-m", 2) + 1] == "diffgrpo.train"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["num_processes"] == 2
    assert manifest["key"]["train"]["num_processes"] == 2
    grpo = json.loads((out / "trl_config.json").read_text())["grpo"]
    assert (grpo["per_device_train_batch_size"], grpo["gradient_accumulation_steps"]) == (8, 1)
    assert pd.read_parquet(out / "groups.parquet").groupby("step").size().to_dict() == {1: 4, 2: 4}

    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match="launched with 4 processes, but train.num_processes = 2"):
        train.train_run(cfg, "hard", seed=0, progress=False)


def test_overlong_penalty_is_dapos_soft_punishment():
    """DAPO eq. 13: 0 up to L_max - L_cache, linear to -1 at L_max."""
    assert [rewards.overlong_penalty(n, 20, 4) for n in (0, 16, 17, 18, 20, 21)] == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]


@pytest.mark.e2e
def test_length_reward_is_added_to_the_verifier_reward(make_cfg):
    cfg = make_cfg(max_steps=1, max_completion_length=8, **{"length_reward": {"weight": 0.5, "cache": 4}})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    diff = np.concatenate([np.asarray(r) - np.asarray(s) for r, s in zip(groups["rewards"], groups["scores"])])
    assert (diff <= 0).all() and (diff >= -0.5).all() and (diff < 0).any()
    assert set(np.round(diff / 0.5 * 4)) <= {0.0, -1.0, -2.0, -3.0, -4.0}  # steps of 1/L_cache


# ---- EPRLI levels (paper 002) ---------------------------------------------------------------
def _level(name, band, **kw):
    return {"name": name, "p_hat": band, "tiers": None, "prompts": 4, "steps": 2, "max_completion_length": 8,
            "epsilon": 0.2, "epsilon_high": 0.28, "group_size": 4, "buffer_size": 2, "dynamic_sampling": True,
            "length_reward_weight": 0.0, **kw}


@pytest.fixture
def eprli_cfg(make_cfg):
    cfg = make_cfg(n_select=8, max_steps=4)
    levels = [_level("easy", [0.5, 1.0]), _level("hard", [0.0, 0.49], max_completion_length=6, group_size=2,
                                                 epsilon=0.1, epsilon_high=0.3, length_reward_weight=0.5)]
    cfg = cfg.replace(**{"eprli.levels": levels, "arms": ["hard", "eprli"]})
    from diffgrpo import select

    pool = pd.read_parquet(layout.selection_file(cfg, "hard")).assign(tier=1)
    sel = select.select(pool, "levels", None, 0, levels=cfg.eprli.levels, levels_seed=cfg.eprli.seed)
    artifacts.write_parquet(layout.selection_file(cfg, "eprli"), sel)
    return cfg


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")  # PEFT, loading an adapter
def test_eprli_trains_its_levels_in_order_with_their_settings(eprli_cfg, monkeypatch):
    loaded = []
    from_pretrained = peft.PeftModel.from_pretrained
    monkeypatch.setattr(peft.PeftModel, "from_pretrained",
                        lambda model, path, **kw: (loaded.append(path), from_pretrained(model, path, **kw))[1])
    run = train.train_run(eprli_cfg, "eprli", seed=0, progress=False)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["steps_done"] == 4
    assert [r["level"] for r in manifest["levels"]] == ["easy", "hard"]
    assert [(r["first_step"], r["last_step"]) for r in manifest["levels"]] == [(1, 2), (3, 4)]
    # the adapter carries over: level 2 starts from level 1's last checkpoint
    assert loaded == [str(run / "levels" / "1-easy" / "checkpoints" / "checkpoint-2")]
    groups = pd.read_parquet(run / "groups.parquet")
    sel = pd.read_parquet(layout.selection_file(eprli_cfg, "eprli")).set_index("id")
    assert (groups["level"] == sel.loc[groups["prompt_id"], "level"].to_numpy()).all()  # each level its own data
    assert groups.groupby("level")["step"].agg(["min", "max"]).loc[["easy", "hard"]].values.tolist() == [[1, 2], [3, 4]]
    assert set(groups[groups["level"] == "easy"]["rewards"].map(len)) == {4}
    assert set(groups[groups["level"] == "hard"]["rewards"].map(len)) == {2}
    assert groups[groups["kept"]]["learnable"].all()  # the levels' buffers hold mixed groups only
    steps = pd.read_parquet(run / "steps.parquet")
    assert steps["step"].tolist() == [1, 2, 3, 4] and steps["level"].tolist() == ["easy"] * 2 + ["hard"] * 2
    # each level's GRPOConfig carries its own length, clip bounds and group size
    hard = json.loads((run / "levels" / "2-hard" / "trl_config.json").read_text())["grpo"]
    assert (hard["max_completion_length"], hard["epsilon"], hard["epsilon_high"], hard["num_generations"]) == (6, 0.1, 0.3, 2)
    # the run's checkpoints/ numbers them by the run's step (what the evaluate stage scores)
    assert sorted(layout.list_checkpoints(run / "checkpoints")) == [1, 2, 3, 4]
    assert not (run / "checkpoints" / "checkpoint-4" / "optimizer.pt").exists()
    for r in manifest["levels"]:
        assert set(r) >= {"learnable_generated_pct", "learnable_kept_pct", "buffer_fill", "mean_completion_length",
                          "completions_generated"}


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_eprli_resumes_inside_its_second_level(eprli_cfg, monkeypatch):
    whole = train.train_run(eprli_cfg, "eprli", seed=0, progress=False)
    groups = pd.read_parquet(whole / "groups.parquet")
    reference = list(zip(groups["step"], groups["round"], groups["prompt_id"], groups["rewards"].map(list)))
    import shutil

    shutil.rmtree(whole)
    _interrupt(eprli_cfg, "eprli", monkeypatch, lambda recorder, step: recorder.level == "hard" and step == 1)
    run = train.train_run(eprli_cfg, "eprli", seed=0, progress=False)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["resumed_from"] == [3]
    groups = pd.read_parquet(run / "groups.parquet")
    # same prompts, same sampled rewards: the resumed level restored its adapter, optimizer and RNG
    assert list(zip(groups["step"], groups["round"], groups["prompt_id"], groups["rewards"].map(list))) == reference


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_eprli_a_damaged_level_record_sets_the_interrupted_run_aside(eprli_cfg, monkeypatch):
    """Issue 20: a truncated ``level.json`` of an interrupted run is not a bare JSONDecodeError on
    every rerun: the run is set aside and trained anew, to the same result."""
    whole = train.train_run(eprli_cfg, "eprli", seed=0, progress=False)
    reference = pd.read_parquet(whole / "groups.parquet")
    import shutil

    shutil.rmtree(whole)
    _interrupt(eprli_cfg, "eprli", monkeypatch, lambda recorder, step: recorder.level == "hard" and step == 1)
    record = whole / "levels" / "1-easy" / "level.json"
    record.write_text(record.read_text()[:20])
    with pytest.warns(UserWarning, match=r"level.json: damaged, not valid JSON.*kept the run as eprli-seed0.damaged-1"):
        run = train.train_run(eprli_cfg, "eprli", seed=0, progress=False)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and [r["level"] for r in manifest["levels"]] == ["easy", "hard"]
    assert "levels/1-easy/level.json" in manifest["sha256"]
    pd.testing.assert_frame_equal(pd.read_parquet(run / "groups.parquet"), reference)


# ---- budgets in epochs, the Dr. GRPO treatment (issue 19) --------------------------------------
@pytest.mark.e2e
def test_a_study_in_epochs_trains_each_arm_one_pass_over_its_own_selection(make_cfg):
    """hard selects 8 prompts and easy 3; at 2 prompts a step, one epoch is 4 updates of hard
    and 2 of easy (the second is the next pass's first batch): each run stops at its own length, and
    the evaluate stage finds each finished at it."""
    from diffgrpo import evaluate, select

    cfg = make_cfg(n_select=8, max_steps=None, epochs=1, save_steps=3)
    pool = tasks.get(EvenLength.name, **TASK_OPTIONS).load("train")
    artifacts.write_parquet(layout.selection_file(cfg, "easy"), pd.DataFrame({"id": pool["id"][8:11], "p_hat": 0.9}))
    for arm, steps in (("hard", 4), ("easy", 2)):
        assert cfg.run_steps(arm, select.selection_size(cfg, arm, 0)) == steps
        run = train.train_run(cfg, arm, seed=0, progress=False)
        manifest = json.loads((run / "manifest.json").read_text())
        assert (manifest["status"], manifest["steps_done"], manifest["max_steps"]) == ("complete", steps, steps)
        assert json.loads((run / "trl_config.json").read_text())["grpo"]["max_steps"] == steps
        assert sorted(layout.list_checkpoints(run / "checkpoints")) == sorted({3, steps} & set(range(1, steps + 1)))
        assert evaluate.check_finished(run, cfg.run_steps(arm, select.selection_size(cfg, arm, 0)))["steps_done"] == steps
    with pytest.raises(RuntimeError, match=r"not finished \(status 'complete', 2 of"):  # as if it were 4
        evaluate.check_finished(layout.run_dir(cfg, "easy", 0), 4)


def test_the_dr_grpo_treatment_builds_its_grpo_config_and_enters_the_run_key(tmp_path):
    """``hard_dr_grpo`` = hard with Dr. GRPO's objective: TRL's loss_type dr_grpo (token losses
    over a constant) and no std scaling of the advantage; its runs are keyed apart from hard's."""
    from trl import GRPOConfig

    from diffgrpo.models.loading import quiet_renamed_arguments

    cfg = params.load("embedded", overrides={"arms": ["hard", "hard_dr_grpo", "random_reward_dr_grpo"]})
    dr = cfg.arm("hard_dr_grpo")
    assert (dr.select, dr.reward, dr.train) == ("hard", "verifier", {"loss_type": "dr_grpo", "scale_rewards": "none"})
    assert cfg.arm("random_reward_dr_grpo").reward == "bernoulli_control"  # a named arm takes the treatment too
    args = {}
    for arm in ("hard", "hard_dr_grpo"):
        acfg = cfg.for_arm(arm)
        with quiet_renamed_arguments():
            args[arm] = GRPOConfig(**train.grpo_kwargs(acfg, 0, tmp_path / arm))
    assert (args["hard_dr_grpo"].loss_type, args["hard_dr_grpo"].scale_rewards) == ("dr_grpo", "none")
    assert (args["hard"].loss_type, args["hard"].scale_rewards) == ("grpo", cfg.train.scale_rewards) == ("grpo", "group")
    hard_key, dr_key = (layout.run_key(cfg.for_arm(a), ["x"]) for a in ("hard", "hard_dr_grpo"))
    assert (dr_key["train"]["loss_type"], dr_key["train"]["scale_rewards"]) == ("dr_grpo", "none")
    assert {k for k in dr_key["train"] if dr_key["train"][k] != hard_key["train"][k]} == {"loss_type", "scale_rewards"}


# ---- online selection and the compute ledger (issue 31) -------------------------------------
@pytest.mark.e2e
def test_online_posterior_trains_on_the_prompts_its_thompson_draws_choose(make_cfg):
    """train.online.method posterior: each step generates the prompts the posterior of the
    earlier steps' groups chooses (replayed from groups.parquet), not the sampler's."""
    from diffgrpo import online

    cfg = make_cfg(max_steps=4, **{"online": {"method": "posterior"}})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    groups = groups.assign(rewards=groups["rewards"].map(list), scores=groups["scores"].map(list))
    ids = list(train.selected_rows(cfg, "hard")["id"])
    sel = online.build(cfg.train.online, 0, ids)
    history = groups.to_dict("records")
    for step, g in groups.groupby("step"):
        assert list(g["prompt_id"]) == sel.choose(ids[:2], history, step)[0]
    assert pd.read_parquet(run / "steps.parquet")["online_skipped"].eq(0).all()


@pytest.mark.e2e
def test_online_skip_zero_variance_skips_the_prompts_whose_groups_were_flat(make_cfg, monkeypatch):
    """Every group flat (a constant reward), recheck 0: the first epoch (4 steps x 2 of the 8
    prompts) generates each prompt once; in the second every prompt the sampler offers is
    skippable, so each is counted skipped (and, with no other prompt left, generated anyway)."""
    monkeypatch.setattr(EvenLength, "score", lambda self, completion, answer: 1.0)
    cfg = make_cfg(max_steps=6, **{"online": {"method": "skip_zero_variance", "recheck": 0.0}})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    assert groups[groups["step"] <= 4]["prompt_id"].nunique() == 8
    steps = pd.read_parquet(run / "steps.parquet").set_index("step")
    assert steps["online_skipped"].tolist() == [0, 0, 0, 0, 2, 2]


@pytest.mark.e2e
def test_online_band_keeps_only_groups_whose_mean_lies_in_the_band(make_cfg):
    """band [0.4, 0.6], G = 4: only groups of mean 0.5 enter an update; mixed groups outside the
    band are dropped like flat ones, and refilled."""
    cfg = make_cfg(max_steps=3, group_size=4, **{"online": {"method": "band", "band": [0.4, 0.6]},
                                                  "dynamic_sampling": {"enabled": False, "max_rounds": 4}})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    kept = groups[groups["kept"]]
    assert len(kept) and (kept["reward_mean"] == 0.5).all()
    assert (groups["learnable"] & ~groups["kept"]).any() and (groups["round"] > 1).any()


@pytest.mark.e2e
def test_online_learnability_trains_on_the_prompts_its_draws_choose(make_cfg):
    """learnability (LILO): each step's prompts are the draw, in proportion to p(1 - p) of the
    earlier steps' groups, replayed from groups.parquet."""
    from diffgrpo import online

    cfg = make_cfg(max_steps=3, **{"online": {"method": "learnability"}})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    groups = groups.assign(rewards=groups["rewards"].map(list), scores=groups["scores"].map(list))
    ids = list(train.selected_rows(cfg, "hard")["id"])
    sel, history = online.build(cfg.train.online, 0, ids), groups.to_dict("records")
    for step, g in groups.groupby("step"):
        assert list(g["prompt_id"]) == sel.choose(ids[:2], history, step)[0]
    assert (run / "checkpoints" / "checkpoint-3").is_dir()


@pytest.mark.e2e
def test_online_pilot_commit_pilots_then_trains_on_the_committed_prompts_and_charges_the_pilot(make_cfg):
    """pilot_commit: each step a pilot of 2 completions of 4 candidates (groups of round 0, not
    kept), then 2 groups of 4 on the candidates the pilot ranked first; the ledger counts the pilot."""
    from diffgrpo import online

    cfg = make_cfg(max_steps=3, **{"online": {"method": "pilot_commit", "pilot": 2}})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    groups = pd.read_parquet(run / "groups.parquet")
    groups = groups.assign(rewards=groups["rewards"].map(list), scores=groups["scores"].map(list))
    pilot, trained = groups[groups["round"] == 0], groups[groups["round"] != 0]
    assert len(pilot) == 3 * 4 and (pilot["rewards"].map(len) == 2).all() and not pilot["kept"].any()
    assert len(trained) == 3 * 2 and (trained["rewards"].map(len) == 4).all()
    sel, history = online.build(cfg.train.online, 0, list(train.selected_rows(cfg, "hard")["id"])), groups.to_dict("records")
    for step, g in trained.groupby("step"):
        assert set(g["prompt_id"]) <= set(pilot[pilot["step"] == step]["prompt_id"])
        assert list(g["prompt_id"]) == sel.choose(list(g["prompt_id"]), history, step)[0]
    led = json.loads((run / "manifest.json").read_text())["ledger"]
    assert led["train"]["completions_generated"] == 3 * 4 * 2 + 3 * 2 * 4  # the pilot charged


@pytest.mark.e2e
def test_the_ledger_in_a_run_manifest_adds_the_charged_probe_to_what_training_generated(make_cfg):
    cfg = make_cfg(max_steps=2, group_size=2, **{"dynamic_sampling": {"enabled": True, "max_rounds": 3}})
    probe = layout.probe_dir(cfg)
    artifacts.write_parquet(probe / layout.PROMPTS, pd.DataFrame({"id": ["a"] * 24, "k": [4] * 24,
                                                                  "mean_tokens": [5.0] * 24}))
    artifacts.write_json(probe / layout.MANIFEST, {"complete": True})
    run = train.train_run(cfg, "hard", seed=0, progress=False)
    manifest = json.loads((run / "manifest.json").read_text())
    groups = pd.read_parquet(run / "groups.parquet")
    led = manifest["ledger"]
    n = int(groups["rewards"].map(len).sum())
    assert led["probe"]["charged"] and led["probe"]["completions"] == 96 and led["probe"]["tokens"] == 480
    assert led["train"]["completions_generated"] == n == manifest["completions_generated"]
    assert led["train"]["completions_kept"] == int(groups[groups["kept"]]["rewards"].map(len).sum())
    assert led["train"]["completions_kept"] + led["train"]["completions_dropped"] == n
    assert led["train"]["tokens_generated"] == int(groups["completion_tokens"].sum()) > 0
    assert (groups["completion_tokens"] <= 2 * cfg.train.max_completion_length).all()
    assert led["total_rollouts"] == 96 + n and led["train"]["cpu_seconds"] > 0


# ---- the GPU path (issue 28): levels apart, rollout seeds, measured memory, vLLM's context --------
PLUGIN = ("import sys\nsys.path.insert(0, {tests!r})\nfrom test_train import EvenLength\nfrom diffgrpo import tasks\n"
          "tasks.register(EvenLength)\n")


def test_levels_apart_when_vllm_generates_an_eprli_run(eprli_cfg):
    assert not train.levels_apart(eprli_cfg, "eprli")  # HF generation: one process
    vllm = eprli_cfg.replace(**{"train.use_vllm": True})
    assert train.levels_apart(vllm, "eprli") and not train.levels_apart(vllm, "hard")  # one level: nothing apart
    # an arm that selects by level but trains one level (paper002_gpu's eprli_grpo): nothing apart (issue 39)
    vllm = vllm.replace(arms=["hard", "eprli", "eprli_grpo"])
    assert not train.levels_apart(vllm, "eprli_grpo") and not train.is_levels_run(vllm, "eprli_grpo")


@pytest.mark.e2e
def test_a_one_level_arm_asked_to_train_apart_finishes_complete(eprli_cfg):
    """Issue 39: eprli_grpo selects by level and trains one level from train.*; asked to train its
    levels apart (what paper002_gpu's vLLM asked of it), its run once waited for a level.json that a
    one-level run never writes and was recorded "stopped" every time. Now it trains in process and
    finishes "complete", its key still holding its one level's settings."""
    cfg = eprli_cfg.replace(arms=["hard", "eprli", "eprli_grpo"])
    artifacts.write_parquet(layout.selection_file(cfg, "eprli_grpo"),
                            pd.read_parquet(layout.selection_file(cfg, "eprli")))
    spec = train.resolve(cfg, "eprli_grpo", 0, apart=True)
    assert (spec.launch, spec.levels, spec.apart) == ("in_process", (None,), False)
    run = train.train_run(cfg, "eprli_grpo", seed=0, progress=False, apart=True)
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["status"], manifest["steps_done"]) == ("complete", 4)
    assert "levels" not in manifest and not (run / "levels").exists()
    assert [lv["name"] for lv in manifest["key"]["levels"]] == [None]  # the key's shape is unchanged
    assert sorted(layout.list_checkpoints(run / "checkpoints")) == [1, 2, 3, 4]


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_eprli_levels_in_their_own_processes_train_the_run_one_process_trains(eprli_cfg, tmp_path, monkeypatch):
    """Issue 28: each EPRLI level in a process of its own (what a colocated vLLM engine needs,
    the engine of one level gone with its process) trains the run that one process trains: the
    same groups, rewards, steps and level records; the levels' pids differ from each other and
    from this process's."""
    import os
    import shutil
    from pathlib import Path

    plugin = tmp_path / "even_length.py"
    plugin.write_text(PLUGIN.format(tests=str(Path(__file__).parent)))
    cfg = eprli_cfg.replace(plugins=[str(plugin)])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    together = train.train_run(cfg, "eprli", seed=0, progress=False, apart=False)
    shutil.move(together, tmp_path / "together")
    together = tmp_path / "together"
    apart = train.train_run(cfg, "eprli", seed=0, progress=False, apart=True)
    assert apart == layout.run_dir(cfg, "eprli", 0)
    one, two = (json.loads((r / "manifest.json").read_text()) for r in (together, apart))
    pids = [r.pop("pid") for r in two["levels"]]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert [r.pop("pid") for r in one["levels"]] == [os.getpid()] * 2
    assert two["status"] == "complete" and two["levels"] == one["levels"]
    for field in ("key", "steps_done", "checkpoints", "completions_generated", "train_loss", "resumed_from"):
        assert two[field] == one[field], field
    pd.testing.assert_frame_equal(pd.read_parquet(apart / "groups.parquet"), pd.read_parquet(together / "groups.parquet"))
    cols = ["step", "level", "loss", "reward", "learning_rate", "groups_kept"]
    pd.testing.assert_frame_equal(pd.read_parquet(apart / "steps.parquet")[cols],
                                  pd.read_parquet(together / "steps.parquet")[cols])
    # a rerun finds it finished, in this process
    assert train.train_run(cfg, "eprli", seed=0, progress=False, apart=True) == apart


def test_each_training_seed_seeds_its_own_colocated_vllm_engine(monkeypatch):
    """Issue 28: TRL 1.16 seeds its colocated engine with process_index // tp, the same for every
    training seed; the engine a run builds gets a seed of its own training seed (per TP group,
    alike within one), and the same in every session of the run."""
    import inspect
    import types
    from trl.generation import vllm_generation

    source = inspect.getsource(vllm_generation.VLLMGeneration)
    assert "self.llm = LLM(" in source and "seed=accelerator.process_index // self.tensor_parallel_size" in source

    built = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda *a, **kw: built.append(kw), raising=False)
    monkeypatch.setattr(GRPOTrainer, "__init__",  # what TRL's __init__ does with vLLM: build the engine, tp 2
                        lambda self, *a, **kw: [vllm_generation.LLM(model="m", seed=rank // 2) for rank in range(4)])
    for seed in (0, 1, 2, 0):
        args = types.SimpleNamespace(seed=seed, use_vllm=True, vllm_mode="colocate")
        train.Trainer(args=args, recorder=None, run_dir=None)
    seeds = [kw["seed"] for kw in built]
    assert seeds[:4] == [train.rollout_seed(0, 0)] * 2 + [train.rollout_seed(0, 1)] * 2  # one per TP group
    assert len({seeds[0], seeds[2], seeds[4], seeds[6], seeds[8], seeds[10]}) == 6  # per seed, per group
    assert seeds[12:] == seeds[:4]  # a resumed run's engine: the seed it had
    assert all(kw["model"] == "m" for kw in built)  # the rest of TRL's arguments pass through
    # vLLM's server mode (the server has its own seed) and the HF path: nothing is wrapped
    train.Trainer(args=types.SimpleNamespace(seed=0, use_vllm=True, vllm_mode="server"), recorder=None, run_dir=None)
    assert [kw["seed"] for kw in built[16:]] == [0, 0, 1, 1]


@pytest.mark.e2e
def test_gpu_memory_is_recorded_per_step_and_per_run_and_null_on_a_cpu(make_cfg):
    """Issue 28: each logged step records this process's GPU memory peaks since the step before
    (``peak_allocated_gib``, ``peak_reserved_gib``) and the manifest the run's; on a CPU both
    are null (no GPU to measure), not absent."""
    run = train.train_run(make_cfg(), "hard", seed=0, progress=False)
    steps = pd.read_parquet(run / "steps.parquet")
    assert {"peak_allocated_gib", "peak_reserved_gib"} <= set(steps) and steps["peak_reserved_gib"].isna().all()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["peak_memory"] == {"peak_allocated_gib": None, "peak_reserved_gib": None}
    assert devices.max_memory([{"peak_allocated_gib": 1.5, "peak_reserved_gib": None},
                               {"peak_allocated_gib": 2.0, "peak_reserved_gib": 3.0}]) == \
        {"peak_allocated_gib": 2.0, "peak_reserved_gib": 3.0}


def test_with_vllm_the_context_check_is_the_engines_max_model_length(make_cfg):
    """Issue 28: TRL's colocated engine refuses a sequence beyond ``vllm_max_model_length``; the
    check before training uses it when set, not the model's positions (256 here)."""
    from diffgrpo.models.generation import PromptTooLong

    cfg = make_cfg(use_vllm=True, trl={"vllm_max_model_length": 24})
    with pytest.raises(PromptTooLong, match="train.trl.vllm_max_model_length of 24 positions"):
        train.train_run(cfg, "hard", seed=0, progress=False)
    model = type("M", (), {"config": type("C", (), {"max_position_embeddings": 256})()})()
    assert train.training_context(make_cfg(use_vllm=True), model) == (256, "the model's context")
    assert train.training_context(make_cfg(trl={"vllm_max_model_length": 24}), model) == (256, "the model's context")
