"""Params: layering, strict validation with the file and key named, effective values dumped."""

from pathlib import Path

import pytest
import yaml

from diffgrpo import params
from diffgrpo.params import ParamsError


def test_defaults_set_every_key_and_match_paper_003():
    cfg = params.load()
    t = cfg.train
    # paper 003 appendix B, set explicitly rather than left to TRL 1.16's defaults
    assert (t.group_size, t.beta, t.learning_rate, t.lr_scheduler, t.max_steps, t.prompts_per_step) == (
        8, 0.1, 3e-5, "cosine", 1000, 32)
    assert t.loss_type == "grpo" and cfg.select.budget_frac == 0.1 and cfg.probe.sampling.temperature == 1.0


def test_layers_apply_in_order(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("study: s\ntrain:\n  max_steps: 7\n  lora:\n    r: 4\n")
    cfg = params.load(study, overrides={"train.max_steps": 9, "probe": {"k": 3}})
    assert cfg.study == "s" and cfg.train.max_steps == 9 and cfg.train.lora.r == 4
    assert cfg.train.lora.alpha == params.load().train.lora.alpha  # untouched siblings survive
    assert cfg.probe.k == 3


def test_include_layers_underneath(tmp_path):
    (tmp_path / "base.yaml").write_text("study: base\ntrain:\n  max_steps: 3\n")
    (tmp_path / "top.yaml").write_text("include: base.yaml\nstudy: top\n")
    cfg = params.load(tmp_path / "top.yaml")
    assert (cfg.study, cfg.train.max_steps) == ("top", 3)


def test_task_options_layer_key_by_key_while_the_task_stays(tmp_path):
    """A layer that changes one of its task's options keeps the others (the three studies of issue 46
    set `task_options: {test_size: 1000}` over embedded.yaml when a layer replaced them whole, and
    ran on the generator's default 1-8 swaps instead of embedded's 1-5); another task, or `{}`,
    starts afresh."""
    (tmp_path / "one.yaml").write_text("include: embedded.yaml\ndataset:\n  task_options: {test_size: 1000}\n")
    one = params.load(tmp_path / "one.yaml").dataset.task_options
    assert one == {**params.load("embedded").dataset.task_options, "test_size": 1000}
    assert one["swaps"] == [1, 5] and one["people"] == [3, 5]
    over = params.load("embedded", overrides={"dataset.task_options.swaps": [1, 3]}).dataset.task_options
    assert over["swaps"] == [1, 3] and over["test_size"] == 400
    (tmp_path / "other.yaml").write_text("include: embedded.yaml\ndataset:\n  task: arithmetic\n")
    assert params.load(tmp_path / "other.yaml").dataset.task_options == {}
    (tmp_path / "afresh.yaml").write_text("include: embedded.yaml\ndataset:\n  task_options: {}\n")
    assert params.load(tmp_path / "afresh.yaml").dataset.task_options == {}
    (tmp_path / "same.yaml").write_text("include: embedded.yaml\ndataset:\n  task: shuffled_objects\n"
                                        "  task_options: {seed: 1}\n")
    assert params.load(tmp_path / "same.yaml").dataset.task_options["swaps"] == [1, 5]


@pytest.mark.parametrize("text, key, message", [
    ("train:\n  max_step: 5\n", "train.max_step", "did you mean `train.max_steps`"),
    ("trian:\n  max_steps: 5\n", "trian", "unknown key"),
    ("train:\n  max_steps: -5\n", "train.max_steps", "out of range"),
    ("train:\n  max_steps: ten\n", "train.max_steps", "valid integer"),
    ("train:\n  loss_type: dapoo\n", "train.loss_type", "Input should be 'grpo', 'dr_grpo', 'dapo' or 'bnpo'"),
    ("train:\n  lora: 16\n", "train.lora", "valid dictionary"),
    ("select:\n  budget_frac: 1.5\n", "select.budget_frac", "out of range"),
    ("evaluate:\n  greedy: 'yes'\n", "evaluate.greedy", "valid boolean"),
])
def test_bad_values_name_the_file_and_key(tmp_path, text, key, message):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ParamsError) as e:
        params.load(f)
    assert str(f) in str(e.value) and key in str(e.value) and message in str(e.value)


def test_bad_override_is_named_as_override():
    with pytest.raises(ParamsError, match=r"overrides: unknown key `train\.max_stpes`"):
        params.load("embedded", overrides={"train.max_stpes": 3})


def test_missing_file_is_named():
    with pytest.raises(ParamsError, match="no_such_study"):
        params.load("no_such_study")


def test_every_params_file_in_the_repo_validates():
    for f in sorted(params.params_dir().glob("*.yaml")):
        params.load(f)


def test_dump_round_trips():
    cfg = params.load("embedded")
    again = params.build(yaml.safe_load(params.dump(cfg)))
    assert again == cfg


# ---- arms: the study format -----------------------------------------------------------------
def test_a_bare_policy_name_is_an_arm_of_that_name_with_the_studys_options():
    short = params.load("embedded", overrides={"arms": ["hard", "random"]})
    long = params.load("embedded", overrides={"arms": [{"name": "hard", "select": "hard"},
                                                        {"name": "random", "select": "random"}]})
    assert short == long
    assert [(a.name, a.select, a.budget_frac, a.train) for a in short.arms] == [
        ("hard", "hard", None, {}), ("random", "random", None, {})]


def test_the_default_arms_keep_the_run_keys_of_the_strategies_they_replace():
    """003's four strategies (the paper's word) as arms: the same run ids, selection files and run keys (an arm
    without training settings trains with the study's own config, nothing arm-specific added)."""
    from diffgrpo.store import layout
    from diffgrpo import select

    cfg = params.load("tiny")
    assert [a.name for a in cfg.arms] == ["hard", "easy", "middle", "random"]
    assert layout.planned_runs(cfg) == [("hard", 0), ("easy", 0), ("middle", 0), ("random", 0)]
    assert [select.selection_path(cfg, a, 0).name for a in ("hard", "random")] == ["hard.parquet", "random-seed0.parquet"]
    assert cfg.for_arm("hard") is cfg
    assert set(layout.run_key(cfg, ["x"])) == {"model", "rows", "train", "selection_sha"}
    assert "seeds" not in layout.run_key(cfg, ["x"])["train"] and "sets" not in layout.eval_key(cfg)["evaluate"]


def test_an_arm_with_its_own_training_settings_trains_with_them():
    from diffgrpo.store import layout

    cfg = params.load("embedded", overrides={"arms": [
        "hard", {"name": "lower", "select": "tiers", "max_tier": 4, "train": {"max_steps": 40, "lora": {"r": 4}}}]})
    lower = cfg.for_arm("lower")
    assert (lower.train.max_steps, lower.train.lora.r, lower.train.lora.alpha) == (40, 4, cfg.train.lora.alpha)
    assert [a.name for a in lower.arms] == ["lower"] and lower.arm("lower").train == {}
    assert layout.run_key(lower, ["x"]) != layout.run_key(cfg, ["x"])  # lora.r is in the key
    assert cfg.for_arm("hard").train == cfg.train
    with pytest.raises(ParamsError, match="no arm 'nope'"):
        cfg.for_arm("nope")


# ---- evaluation sets ----------------------------------------------------------------------------
def test_an_evaluation_set_replaces_the_test_rows_and_settings_it_names():
    from diffgrpo.store import layout

    cfg = params.load("embedded", overrides={"evaluate.sets": [
        {"name": "ood", "task_options": {"people": [3, 5], "swaps": [9, 10]}, "size": 50, "max_new_tokens": 96,
         "n_samples": 2, "pass_k": [1, 2]}]})
    assert cfg.eval_set_names() == ["test", "ood"]
    ood = cfg.for_eval_set("ood")
    assert ood.dataset.task_options == {"people": [3, 5], "swaps": [9, 10]} and ood.dataset.test_size == 50
    assert (ood.evaluate.n_samples, ood.evaluate.pass_k, ood.evaluate.sampling.max_new_tokens) == (2, [1, 2], 96)
    assert ood.dataset.pool_size == cfg.dataset.pool_size and ood.model == cfg.model  # same pool rules, same model
    assert cfg.for_eval_set("test") is cfg
    assert layout.eval_key(ood) != layout.eval_key(cfg)
    assert layout.eval_dir(cfg, "base", "ood").parts[-2:] == ("eval-ood", "base")
    assert layout.eval_dir(cfg, "base").parts[-2:] == ("eval", "base")


def test_a_key_given_twice_is_an_error_not_the_last_one_silently(tmp_path):
    f = tmp_path / "twice.yaml"
    f.write_text("evaluate:\n  n_samples: 2\ntrain:\n  max_steps: 3\nevaluate:\n  pass_k: [1]\n")
    with pytest.raises(ParamsError, match=r"twice.yaml: not valid YAML.*\['evaluate'\] given twice"):
        params.load(f)


def test_an_evaluation_set_of_another_task_does_not_inherit_the_training_tasks_options():
    cfg = params.load("embedded")
    assert cfg.dataset.task_options["swaps"] == [1, 5]
    assert cfg.for_eval_set("ood_swaps").dataset.task_options["swaps"] == [6, 8]  # the set's own options
    cfg = cfg.replace(**{"evaluate.sets": [{"name": "arith", "task": "arithmetic", "size": 10}]})
    arith = cfg.for_eval_set("arith")
    assert (arith.dataset.task, arith.dataset.task_options, arith.dataset.test_size) == ("arithmetic", {}, 10)
    # nor the training data's file: a GSM8K study read from a local file scores arithmetic's own rows
    gsm = params.load("smoke", overrides={"dataset.task": "gsm8k", "dataset.source": "/data/gsm8k.jsonl",
                                          "evaluate.sets": [{"name": "arith", "task": "arithmetic"},
                                                            {"name": "gsm_again", "size": 4}]})
    assert gsm.for_eval_set("arith").dataset.source is None
    assert gsm.for_eval_set("gsm_again").dataset.source == "/data/gsm8k.jsonl"  # the same task keeps it


def test_an_evaluation_set_of_size_all_scores_its_whole_split():
    """A null size takes dataset.test_size: paper002_gpu draws 500 MATH test prompts, and AIME
    2024's 30 rows cannot give 500. ``size: all`` is every row of the set's split."""
    from diffgrpo.tasks import splits

    cfg = params.load("paper002_gpu")
    assert cfg.dataset.test_size == 500
    assert {s: cfg.for_eval_set(s).dataset.test_size for s in cfg.eval_set_names()} == {
        "test": 500, "math500": None, "aime2024": None, "amc23": None, "minerva_math": None, "olympiadbench": None}
    data = Path(__file__).parent / "data" / "hub" / "math-ai" / "amc23" / "test-00000-of-00001.jsonl"
    sets = [{"name": "amc", "task": "amc23", "source": str(data), "size": size} for size in ("all", None, 12)]
    for i, s in enumerate(sets):
        s["name"] = f"amc{i}"
    cfg = params.load("smoke", overrides={"dataset.test_size": 100, "evaluate.sets": sets})
    assert len(splits.load_test(cfg.for_eval_set("amc0"))) == 40 and len(splits.load_test(cfg.for_eval_set("amc2"))) == 12
    with pytest.raises(ValueError, match=r"dataset.test_size: 100 rows wanted but split 'test' of task 'amc23' has only 40"):
        splits.load_test(cfg.for_eval_set("amc1"))
    with pytest.raises(ParamsError, match=r"evaluate.sets.*size"):
        params.load("smoke", overrides={"evaluate.sets": [{"name": "amc", "task": "amc23", "size": "most"}]})


@pytest.mark.parametrize("compare, message", [
    (["no_such_study"], r"`analyze.compare` names 'no_such_study', which is not a params file"),
    (["tiny", "tiny"], r"`analyze.compare` = \['tiny', 'tiny'\] names a study more than once"),
])
def test_a_bad_study_to_compare_with_is_named(compare, message):
    with pytest.raises(ParamsError, match=message):
        params.load("embedded", overrides={"analyze.compare": compare})


# ---- paper 002: EPRLI levels (issue 10) ------------------------------------------------------
LEVEL = {"name": "one", "p_hat": [0.0, 0.5], "tiers": None, "prompts": 4, "steps": 1000, "max_completion_length": 64,
         "epsilon": 0.2, "epsilon_high": 0.28, "group_size": 8, "buffer_size": 4, "dynamic_sampling": True,
         "length_reward_weight": 0.0}


@pytest.mark.parametrize("levels, arms, message", [
    ([{k: v for k, v in LEVEL.items() if k != "buffer_size"}], None, r"eprli\.levels\[0\]` does not set \['buffer_size'\]"),
    ([{**LEVEL, "bufer_size": 4}], None, r"unknown key `eprli\.levels\[0\]\.bufer_size`"),
    ([{**LEVEL, "tiers": [1]}], None, r"eprli\.levels\[0\]` sets both or neither of p_hat and tiers"),
    ([{**LEVEL, "p_hat": [0.6, 0.5]}], None, r"eprli\.levels\[0\]\.p_hat` = \[0\.6, 0\.5\]"),
    ([{**LEVEL, "steps": 10}], None, r"steps add up to 10, not train\.max_steps = 1000"),
    ([LEVEL, LEVEL], None, r"each level needs its own non-empty name"),
    ([{**LEVEL, "group_size": 1}], None, r"eprli\.levels\[0\]\.group_size` = 1 is out of range"),
    ([], ["eprli", "random"], r"eprli\.levels` is empty, and arms \['eprli'\]"),
])
def test_bad_levels_name_the_file_and_key(tmp_path, levels, arms, message):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump({"eprli": {"levels": levels},
                                 **({"arms": arms} if arms else {})}))
    with pytest.raises(ParamsError, match=message) as e:
        params.load(f)
    assert str(f) in str(e.value)


def test_paper002_gpu_builds_every_object_a_run_would():
    """The GPU file of paper 002 (no GPU here): every arm's levels, each level's GRPOConfig
    (bf16 and the GPU switched off only so a CPU can build it), the LoRA config, the budget."""
    from pathlib import Path

    from trl import GRPOConfig

    from diffgrpo.train.trainer import check_levels_fit
    from diffgrpo.models import loading
    from diffgrpo import train

    cfg = params.load("paper002_gpu")
    assert cfg.model.path == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" and cfg.train.group_size == 16
    levels = {a.name: train.run_levels(cfg.for_arm(a.name), a.name) for a in cfg.arms}
    eprli = levels["eprli"]
    assert len(eprli) == 2 and all(lv.group_size == 16 for lv in eprli)
    assert eprli[1].max_completion_length < eprli[0].max_completion_length  # Len2_max < Len1_max
    assert sum(lv.max_completions for lv in eprli) == cfg.train.max_completions
    assert levels["eprli_grpo"][0].dynamic_rounds is None and levels["eprli_dynamic"][0].dynamic_rounds == 4
    for lvs in levels.values():
        for lv in lvs:
            kw = train.grpo_kwargs(cfg, 0, Path("unused"), 1, lv)
            assert (kw["num_generations"], kw["max_completion_length"], kw["epsilon_high"]) == (
                lv.group_size, lv.max_completion_length, lv.epsilon_high)
            with loading.quiet_renamed_arguments():
                args = GRPOConfig(**{**kw, "bf16": False, "use_cpu": True})
            assert args.num_generations == 16 and args.generation_batch_size == lv.prompts_per_step * 16
            # 1 prompt a pass (512 completions of 8,192 tokens in one pass need ~900 GiB): dynamic sampling and
            # the completion budget run with gradient accumulation, on one process or several (issue 17)
            assert kw["gradient_accumulation_steps"] == kw["steps_per_generation"] == lv.prompts_per_step
            for n_processes in (1, 2, 4):
                check_levels_fit([lv], cfg, n_processes)
            # what still cannot work is refused: bnpo normalises each pass by its own tokens
            if lv.dynamic_rounds is not None:
                with pytest.raises(ValueError, match="loss_type 'bnpo' needs one process and one pass per update"):
                    check_levels_fit([lv], cfg.replace(**{"train.loss_type": "bnpo"}), 1)
    train.lora_config(cfg)


def test_new_train_options_keep_the_keys_of_runs_that_do_not_use_them(monkeypatch):
    """dynamic sampling, the length reward and the completion budget enter a run's key only when
    they change training (off, a run trains as before they existed: its cached run stays valid)."""
    from diffgrpo.store import layout

    monkeypatch.setattr(layout, "model_identity", lambda cfg: {"name": cfg.model.name})
    cfg = params.load("tiny")
    key = lambda c: layout.run_key(c, ["a"])["train"]  # noqa: E731
    assert not {"dynamic_sampling", "length_reward", "max_completions"} & set(key(cfg))
    for override in ({"train.dynamic_sampling.max_rounds": 9}, {"train.length_reward.cache": 3}):
        assert key(cfg.replace(**override)) == key(cfg)
    for override in ({"train.dynamic_sampling.enabled": True}, {"train.length_reward.weight": 0.5},
                     {"train.max_completions": 100}):
        assert key(cfg.replace(**override)) != key(cfg)


# ---- budgets in steps or epochs (issue 19) ---------------------------------------------------
def test_steps_resolve_per_arm_from_epochs_over_its_own_selection():
    from diffgrpo.store import layout

    cfg = params.load("embedded", overrides={"train.max_steps": None, "train.epochs": 2, "arms": [
        "hard", {"name": "lower", "select": "tiers", "max_tier": 4},
        {"name": "short", "select": "all", "train": {"epochs": 0.5}}]})
    # prompts_per_step 8: an epoch of 100 prompts is 13 updates, of 494 is 62
    assert cfg.run_steps("hard", 100) == 26 and cfg.run_steps("lower", 494) == 124
    assert cfg.run_steps("short", 1000) == 63  # half of 125 updates, rounded up
    assert cfg.run_steps("hard", 8) == 2 and cfg.run_steps("hard", 9) == 4  # a part batch is an update
    # one generated batch feeds num_iterations updates: a pass is that many more steps
    assert cfg.replace(**{"train.num_iterations": 2}).run_steps("hard", 100) == 52
    with pytest.raises(ParamsError, match=r"train.epochs = 2 counts passes over a run's selection.*02_select"):
        cfg.run_steps("hard", None)
    steps = params.load("embedded")
    assert steps.run_steps("hard", 100) == steps.run_steps("hard", None) == steps.train.max_steps == 30
    # how far a run goes is out of its key, in steps or in epochs: a run may be extended either way
    assert layout.run_key(cfg, ["x"]) == layout.run_key(steps, ["x"])


@pytest.mark.parametrize("overrides, message", [
    ({"train.epochs": 1}, r"`train.epochs` = 1 and train.max_steps = 30 are both set; exactly one .* `max_steps: null`"),
    ({"train.max_steps": None}, r"`train.max_steps` and train.epochs are both null; set one"),
    ({"train.max_steps": None, "train.epochs": 0}, r"`train.epochs` = 0 is out of range"),
    ({"train.max_steps": None, "train.epochs": 1, "arms": [{"name": "h", "select": "hard", "train": {"max_steps": 5}}]},
     r"arms\[0\] \(h\): its train settings do not validate: .*both set"),
    ({"train.trl": {"num_train_epochs": 2}}, r"`train.trl.num_train_epochs` is set by diffgrpo from train.epochs"),
])
def test_steps_and_epochs_exactly_one_of_them(overrides, message):
    with pytest.raises(ParamsError, match=message):
        params.load("embedded", overrides=overrides)


def test_epochs_cannot_size_the_eprli_levels():
    with pytest.raises(ParamsError, match=r"eprli.levels` set their own steps \(they add up to 60\); train.max_steps "
                                          r"must be that sum, not train.epochs = 1"):
        params.load("paper002_embedded", overrides={"train.max_steps": None, "train.epochs": 1})


def test_an_arms_role_is_said_not_guessed_from_its_reward():
    """``role: control`` marks a control arm (the named arm random_reward says it); another reward
    without it, partial credit or a shaped one, is an ordinary arm. The role is in no run key."""
    from diffgrpo.store import layout

    cfg = params.load("embedded_full")
    assert {a.name: a.role for a in cfg.arms} == {"hard": "arm", "easy": "arm", "middle": "arm", "random": "arm",
                                                 "random_reward": "control"}
    assert params.load("tiny", overrides={"arms": ["random_reward"]}).arm("random_reward").is_control
    shaped = params.load("tiny", overrides={"arms": [
        {"name": "shaped", "select": "random", "reward": {"verifier": 1.0, "bernoulli_control": 0.5}}]})
    assert not shaped.arm("shaped").is_control
    as_control = params.load("tiny", overrides={"arms": [
        {"name": "shaped", "select": "random", "reward": {"verifier": 1.0, "bernoulli_control": 0.5}, "role": "control"}]})
    assert layout.run_key(as_control.for_arm("shaped"), ["a"]) == layout.run_key(shaped.for_arm("shaped"), ["a"])
