"""Issue 30's audit, each case as a test (docs/reliability.md lists them): nothing leaves the
machine that a params file did not name, no secret lands on disk, no number changes without a
word, and a params file cannot exhaust memory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from diffgrpo import params, study
from diffgrpo.params import ParamsError
from diffgrpo.params.files import MAX_ALIASES, YamlTooLarge
from diffgrpo.store import layout, trackers

ROOT = Path(__file__).resolve().parents[1]
FAKE_TOKEN = "hf_FAKEtokenThatMustNeverReachDisk0123456789"


# ---- nothing leaves without being named -----------------------------------------------------
@pytest.mark.parametrize("key, value", [
    ("train.trl.push_to_hub", True), ("train.trl.hub_model_id", "attacker/leak"), ("train.trl.hub_token", FAKE_TOKEN),
    ("train.trl.hub_strategy", "every_save"), ("train.trl.hub_private_repo", False),
    ("train.trl.trackio_space_id", "attacker/space"), ("train.trl.log_completions_hub_repo", "attacker/logs"),
])
def test_an_option_that_publishes_or_authenticates_is_refused_with_what_to_do(key, value):
    with pytest.raises(ParamsError, match=rf"^overrides: `{key}` is refused: a params file may not publish a run .*"
                                          r"upload its folder yourself.*HF_TOKEN"):
        params.load("tiny", overrides={key: value})


def test_an_arms_own_publishing_option_is_refused():
    arm = {"name": "hard", "select": "hard", "train": {"trl": {"push_to_hub": True}}}
    with pytest.raises(ParamsError, match=r"`train.trl.push_to_hub` is refused"):
        params.load("tiny", overrides={"arms": [arm]})


@pytest.mark.parametrize("key", ["dataset.task_options.token", "model.chat_template_kwargs.api_key",
                                 "train.trl.wandb_token"])
def test_a_credential_anywhere_in_params_is_refused(key):
    with pytest.raises(ParamsError, match=rf"`{key}` is refused"):
        params.load("tiny", overrides={key: FAKE_TOKEN})


def test_the_error_names_the_params_file_that_set_the_trl_option(tmp_path):
    """Not defaults.yaml (it sets `train.trl: {}`): the file or --set that brought the option."""
    f = tmp_path / "mine.yaml"
    f.write_text(f"include: {ROOT / 'params' / 'tiny.yaml'}\ntrain:\n  trl:\n    push_to_hub: true\n")
    with pytest.raises(ParamsError, match=rf"^{f}: `train.trl.push_to_hub` is refused"):
        params.load(str(f))
    f.write_text(f"include: {ROOT / 'params' / 'tiny.yaml'}\ntrain:\n  trl:\n    adam_beta9: 0.9\n")
    with pytest.raises(ParamsError, match=rf"^{f}: `train.trl.adam_beta9` is not an option"):
        params.load(str(f))


def test_the_cli_refuses_a_publishing_option_before_writing_anything(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    argv = ["tiny", "--set", "train.trl.push_to_hub=true", "--set", "train.trl.hub_model_id=attacker/leak",
            "--set", f"train.trl.hub_token={FAKE_TOKEN}"]
    assert study.cli(argv) == 2
    err = capsys.readouterr().err
    assert "is refused" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tracker", ["wandb", "mlflow", "trackio"])
def test_a_tracker_that_cannot_run_is_named_before_any_notebook(tracker, tmp_path, monkeypatch, capsys):
    """Not installed here (or wandb: not logged in), so refused before the probe and the selection run."""
    import importlib.util

    if tracker != "wandb" and importlib.util.find_spec(tracker) is not None:
        pytest.skip(f"{tracker} is installed here")
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login
    for var in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    assert study.cli(["smoke", "--set", f"train.report_to={tracker}", "--kernel", "python3"]) == 2
    err = capsys.readouterr().err
    assert f"train.report_to = {tracker}" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.ipynb"))


def test_tracker_records_stay_under_the_outputs_root(tmp_path, monkeypatch):
    """mlflow's default store would land in notebooks/ (where the kernels run); wandb's and trackio's in ~."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    for var in ("MLFLOW_TRACKING_URI", "WANDB_DIR", "TRACKIO_DIR"):
        monkeypatch.delenv(var, raising=False)
    assert trackers.environment(params.load("tiny")) == {}  # tensorboard: the run's own folder
    for name, var in (("mlflow", "MLFLOW_TRACKING_URI"), ("wandb", "WANDB_DIR"), ("trackio", "TRACKIO_DIR")):
        cfg = params.load("tiny", overrides={"train.report_to": name})
        value = trackers.environment(cfg)[var]
        path = Path(value.removeprefix("file://"))
        assert path == layout.study_dir(cfg) / "trackers" / name and path.is_relative_to(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")  # the user's own choice stays
    assert trackers.environment(params.load("tiny", overrides={"train.report_to": "mlflow"})) == {}


# ---- bounded input ------------------------------------------------------------------------------
def _alias_bomb(levels: int = 9) -> str:
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for prev, cur in zip("abcdefghij", "bcdefghijk"[:levels - 1]):
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines)


@pytest.mark.parametrize("under", ["description", "model.chat_template_kwargs"])
def test_an_alias_bomb_is_refused_before_anything_is_built(under, tmp_path):
    """0.5 KB that expands to 9**9 values: refused while composing (no value is built, no key hashed)."""
    head, _, leaf = under.rpartition(".")
    body = "\n".join("  " * (head.count(".") + 2) + line for line in _alias_bomb().splitlines())
    nest = (f"{head.split('.')[0]}:\n  {leaf}:\n" if head else f"{leaf}:\n") + body
    f = tmp_path / "bomb.yaml"
    f.write_text(f"include: {ROOT / 'params' / 'tiny.yaml'}\n{nest}\n")
    assert f.stat().st_size < 1024
    with pytest.raises(ParamsError, match=rf"^{f}: refused before it is read: .*alias bomb"):
        params.load(str(f))


def test_an_alias_bomb_on_the_command_line_is_refused():
    value = "{" + _alias_bomb().replace("\n", ", ") + "}"
    with pytest.raises(ParamsError, match=r"--set 'description=.*alias bomb"):
        params.parse_overrides([f"description={value}"])
    assert study.cli(["tiny", "--set", f"description={value}", "--plan"]) == 2


def test_many_aliases_or_a_self_reference_are_refused_and_a_few_are_read():
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]"
    with pytest.raises(YamlTooLarge, match="more than 100 aliases"):
        params.read_yaml_value(many)
    with pytest.raises(YamlTooLarge, match="contains it"):
        params.read_yaml_value("a: &a [1, *a]")
    assert params.read_yaml_value("a: &a [1, 2]\nb: *a") == {"a": [1, 2], "b": [1, 2]}


# ---- no secret reaches disk -----------------------------------------------------------------------
@pytest.mark.slow
def test_a_token_in_the_environment_reaches_no_artifact_of_a_study(tmp_path, monkeypatch):
    """The smoke study, every stage, with fake credentials where a user keeps them: not one file it
    writes (manifests, params.yaml, trl_config.json, executed notebooks and their logs,
    training_args.bin, reports) holds one."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY"):
        monkeypatch.setenv(var, FAKE_TOKEN)
    assert study.cli(["smoke", "--set", "arms=[hard]", "--kernel", "python3"]) == 0
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"manifest.json", "params.yaml", "trl_config.json", "training_args.bin", "hard-seed0.ipynb", "summary.json"} <= names
    leaked = [str(p) for p in files if FAKE_TOKEN.encode() in p.read_bytes()]
    assert leaked == []


# ---- no number changes without a word ------------------------------------------------------------
def _gsm_file(path: Path, n: int = 24, answer_of=lambda i: i + 1) -> Path:
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {answer_of(i)}\n#### {answer_of(i)}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_dataset_file_edited_in_place_is_probed_trained_and_evaluated_anew(tmp_path, monkeypatch):
    """gsm8k ids are positional, so an edited answer keeps every id: only the file's digest, in
    the probe, run and evaluation keys, tells the old rows from the new."""
    import warnings

    from diffgrpo import evaluate, probe, select, train
    from diffgrpo.models.resolve import source_fingerprint

    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    data = _gsm_file(tmp_path / "gsm.jsonl")
    cfg = params.load("smoke", overrides={"dataset.task": "gsm8k", "dataset.source": str(data), "workers": 1,
                                          "dataset.train_split": "test", "arms": ["hard"], "train.max_steps": 1})
    before = source_fingerprint(str(data))
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    run = train.train_run(cfg, "hard", 0, progress=False)
    evaluate.evaluate_base(cfg, progress=False)
    old_probe, old_run = layout.probe_dir(cfg), json.loads((run / "manifest.json").read_text())
    assert old_run["key"]["rows"]["source_sha256"] == before

    mtime = data.stat().st_mtime_ns
    _gsm_file(data, answer_of=lambda i: i + 2)  # same size, same ids, other answers
    if data.stat().st_mtime_ns == mtime:  # the digest is cached by (file, size, mtime): an edit moves the mtime
        os.utime(data, ns=(mtime + 10**9, mtime + 10**9))
    after = source_fingerprint(str(data))
    assert after != before and layout.probe_dir(cfg) != old_probe
    probe.run_probe(cfg, progress=False)
    assert (layout.probe_dir(cfg) / layout.MANIFEST).exists()
    select.run_select(cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train.train_run(cfg, "hard", 0, progress=False)
    assert any("trained with other settings" in str(w.message) for w in caught)  # set aside, trained anew
    assert json.loads((run / "manifest.json").read_text())["key"]["rows"]["source_sha256"] == after
    evaluate.evaluate_base(cfg, progress=False)
    base = json.loads((layout.eval_dir(cfg, "base") / layout.MANIFEST).read_text())
    assert base["key"]["rows"]["source_sha256"] == after


@pytest.mark.parametrize("overrides", [
    {"train.logging_steps": 5}, {"train.trl.logging_first_step": True}, {"train.trl.log_level": "error"},
    {"train.trl.logging_nan_inf_filter": False}, {"train.trl.dataloader_pin_memory": False},
])
def test_a_key_that_only_changes_logging_leaves_the_run_key(overrides):
    """Issue 30: train.logging_steps retrained a byte-identical run."""
    assert layout.run_key(params.load("tiny", overrides=overrides), ["x"]) == layout.run_key(params.load("tiny"), ["x"])
    assert layout.run_key(params.load("tiny", overrides={"train.trl.adam_epsilon": 1e-6}), ["x"]) != \
        layout.run_key(params.load("tiny"), ["x"])  # one that changes training stays in


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -float("inf"), [0.9, float("inf")]])
def test_a_trl_number_that_is_not_finite_is_refused(value):
    """Issue 30: adam_epsilon=.inf trained nothing and was recorded complete."""
    with pytest.raises(ParamsError, match=r"^overrides: `train.trl.adam_\w+` = .*expected a finite number"):
        params.load("tiny", overrides={"train.trl.adam_epsilon" if not isinstance(value, list) else
                                       "train.trl.adam_beta1": value})
    with pytest.raises(ParamsError, match=r"expected a finite number"):
        params.load("tiny", overrides=params.parse_overrides(["train.trl.adam_epsilon=.inf"]))


# ---- the smaller cases: a named error before any work ---------------------------------------------
@pytest.mark.parametrize("key", ["seed", "probe.seed", "select.seed", "evaluate.seed", "analyze.seed"])
def test_a_seed_numpy_cannot_take_is_refused_at_validation(key):
    with pytest.raises(ParamsError, match=rf"`{key}` = 4294967296 is out of range"):
        params.load("tiny", overrides={key: 2**32})
    with pytest.raises(ParamsError, match=r"`train.seeds\[0\]` = 4294967296 is out of range"):
        params.load("tiny", overrides={"train.seeds": [2**32]})
    params.load("tiny", overrides={key: 2**32 - 1})


def test_one_probe_sample_with_a_middle_arm_is_refused():
    with pytest.raises(ParamsError, match=r"`probe.k` = 1: one sample makes every p_hat 0 or 1.*\['middle'\]"):
        params.load("tiny", overrides={"probe.k": 1})


def test_a_dataset_source_that_is_not_a_data_file_is_named_before_any_notebook(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    other = tmp_path / "notes.txt"
    other.write_text("not rows\n")
    assert study.cli(["smoke", "--set", "dataset.task=gsm8k", "--set", f"dataset.source={other}",
                      "--kernel", "python3"]) == 2
    err = capsys.readouterr().err
    assert f"dataset.source: {other} is not a data file (.txt)" in err and err.count("\n") == 1
    assert not any((tmp_path / "out").rglob("*.ipynb"))


def test_a_diamond_include_is_layered_once_and_a_cycle_is_still_named(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(f"include: {ROOT / 'params' / 'tiny.yaml'}\n")
    (tmp_path / "left.yaml").write_text("include: base\ndescription: left\n")
    (tmp_path / "right.yaml").write_text("include: base\nseed: 3\n")
    top = tmp_path / "top.yaml"
    top.write_text("include: [left, right]\n")
    cfg = params.load(str(top))
    assert (cfg.description, cfg.seed) == ("left", 3)
    (tmp_path / "loop.yaml").write_text("include: loop2\n")
    (tmp_path / "loop2.yaml").write_text("include: loop\n")
    with pytest.raises(ParamsError, match=r"include cycle"):
        params.load(str(tmp_path / "loop.yaml"))


def test_a_plugin_found_through_the_working_folder_reaches_the_notebooks_by_its_path(tmp_path, monkeypatch):
    """It validated at the command line, then failed in every notebook (the kernels run in notebooks/)."""
    from diffgrpo.study.runner import notebook_parameters

    (tmp_path / "here_plugin.py").write_text("X = 1\n")
    f = tmp_path / "elsewhere" / "study.yaml"
    f.parent.mkdir()
    f.write_text(f"include: {ROOT / 'params' / 'tiny.yaml'}\nplugins: [here_plugin.py]\n")
    monkeypatch.chdir(tmp_path)
    cfg = params.load(str(f))
    nb = notebook_parameters(str(f), {}, cfg)
    assert nb["overrides"]["plugins"] == [str(tmp_path / "here_plugin.py")]
    monkeypatch.chdir(ROOT / "notebooks")  # where a kernel runs: the notebook's load finds it by that path
    assert params.load(nb["params_file"], overrides=nb["overrides"]).plugins == [str(tmp_path / "here_plugin.py")]
