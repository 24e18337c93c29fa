"""Bad input gets one clear error that names the culprit (file, key, row or prompt) and says what
to do, before any work starts where it can be known then; relative paths mean the folder the
command ran in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diffgrpo.tasks import splits
from diffgrpo.models import resolve as data
from diffgrpo import params, study, tasks
from diffgrpo.params import ParamsError
from diffgrpo.tasks import TaskError, base

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


# ---- params: caught at validation, before any notebook -----------------------------------
@pytest.mark.parametrize("override, message", [
    ({"arms": ["hard", "hardest"]}, r"`arms` arms\[1\] \(hardest\): unknown selection policy 'hardest'; registered: .*plugin file listed in `plugins:`"),
    ({"select.budget_frac": float("nan")}, r"`select.budget_frac` = nan: expected a finite number"),
    ({"train.seeds": [0, 1, 0]}, r"`train.seeds` lists \[0\] more than once"),
    ({"arms": ["easy", "easy"]}, r"`arms` names \['easy'\] more than once"),
    ({"arms": []}, r"`arms` is empty"),
    ({"arms": [{"name": "h-1", "select": "hard"}]}, r"name 'h-1' must be a letter or digit"),
    ({"arms": [{"name": "w", "select": "base_wrong", "budget_frac": 0.2}]}, r"policy 'base_wrong' is defined by a set"),
    ({"arms": [{"name": "h", "select": "hard", "max_tier": 2}]}, r"max_tier applies to a policy that reads it \(tiers\), not 'hard'"),
    ({"arms": [{"name": "h", "select": "hard", "train": {"max_step": 3}}]}, r"unknown key `train.max_step`"),
    ({"arms": [{"name": "h", "select": "hard", "train": {"seeds": [1]}}]}, r"train.seeds is the study's"),
    ({"arms": [{"name": "h", "selct": "hard"}]}, r"unknown key `arms\[0\].selct` \(did you mean `arms\[0\].select`\?\)"),
    ({"arms": [{"name": "h", "select": "hard", "reward": "nope"}]}, r"unknown reward 'nope'; registered: \['verifier'"),
    ({"arms": [{"name": "h", "select": "hard", "options": {"x": 1}}]}, r"policy 'hard' takes no option 'x'"),
    ({"arms": [{"name": "c", "select": "random", "role": "control"}]},
     r"`arms` arms\[0\] \(c\): role `control` with the verifier's reward; a control arm trains on a control reward"),
    ({"arms": [{"name": "noise", "select": "random", "reward": "bernoulli_control"}]},
     r"`arms` arms\[0\] \(noise\): trains on the control reward 'bernoulli_control' alone; set `role: control`"),
    ({"arms": [{"name": "c", "select": "random", "role": "baseline"}]}, r"`arms\[0\].role` = 'baseline': Input should be 'arm' or 'control'"),
    ({"train.trl": {"adam_beta3": 0.9}}, r"`train.trl.adam_beta3` is not an option of TRL's GRPOConfig \(did you mean `adam_beta2`\?\)"),
    ({"train.trl": {"num_generations": 4}}, r"`train.trl.num_generations` is set by diffgrpo from train.group_size"),
    ({"train.trl": {"beta": 0.0}}, r"`train.trl.beta` is set by diffgrpo from train.beta"),
    ({"train.trl": {"adam_beta2": "high"}}, r"`train.trl.adam_beta2` = 'high': Input should be a valid number"),
    ({"arms": [{"name": "h", "select": "hard", "budget": 3}]}, r"unknown key `arms\[0\].budget`"),
    ({"evaluate.sets": [{"name": "test"}]}, r"`evaluate.sets` names \['test'\] more than once"),
    ({"evaluate.sets": [{"name": "x", "task": "nope"}]}, r"unknown task 'nope'"),
    ({"evaluate.sets": [{"name": "x", "pass_k": [1, 99]}]}, r"evaluate.sets\[0\] \(x\): its settings do not validate"),
    ({"evaluate.pass_k": [1, 16]}, r"`evaluate.pass_k` has k = \[16\]; pass@k needs 1 <= k <= evaluate.n_samples"),
])
def test_inconsistent_params_are_refused_at_validation(override, message):
    with pytest.raises(ParamsError, match=message):
        params.load("tiny", overrides=override)


def test_the_runner_refuses_before_any_notebook_and_prints_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.cli(["tiny", "--set", "select.budget_frac=.nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "select.budget_frac" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.e2e
def test_a_failed_notebook_is_one_line_naming_the_error_and_the_executed_copy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.cli(["smoke", "--stages", "02_select", "--kernel", "python3"]) == 1  # no probe yet
    err = capsys.readouterr().err
    failed = tmp_path / "smoke" / "notebooks" / "02_select.failed.ipynb"
    assert "02_select: NotRunYet" in err and "01_probe" in err
    assert str(failed) in err and failed.exists() and "Traceback" not in err


# ---- model paths ---------------------------------------------------------------------------
def test_a_missing_model_folder_is_named(tmp_path):
    cfg = params.load("tiny", overrides={"model.path": str(tmp_path / "no-such-model")})
    with pytest.raises(data.ModelPathError, match=f"no such folder: {tmp_path / 'no-such-model'}"):
        data.check_model(cfg)


def test_a_missing_relative_model_path_fails_at_once_with_its_absolute_path(monkeypatch):
    monkeypatch.setattr(base, "hub_usable", lambda: False)  # as on this machine: no hub
    cfg = params.load("tiny", overrides={"model.path": "models/my-model"})
    with pytest.raises(data.ModelPathError, match=f"no such folder: {Path.cwd() / 'models/my-model'}.*neither reachable"):
        data.check_model(cfg)
    cfg = params.load("tiny", overrides={"model.path": "./models/my-model"})
    with pytest.raises(data.ModelPathError, match="give an existing model folder, a hub id"):
        data.check_model(cfg)


def test_a_folder_without_a_model_is_named(tmp_path):
    cfg = params.load("tiny", overrides={"model.path": str(tmp_path)})
    with pytest.raises(data.ModelPathError, match="holds no config.json"):
        data.check_model(cfg)


# ---- local dataset files -----------------------------------------------------------------
def test_a_malformed_jsonl_line_is_named_with_file_and_line(tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text('{"question": "q", "answer": "a #### 1"}\n{"question": "q2", "answer": \n')
    with pytest.raises(TaskError, match=rf"{path}:2: not valid JSON"):
        tasks.get("gsm8k").load("test", source=str(path))


def test_a_file_missing_a_column_and_an_empty_file_are_named(tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text('{"question": "q"}\n')
    with pytest.raises(TaskError, match=rf"{path}: gsm8k rows need columns question and answer"):
        tasks.get("gsm8k").load("test", source=str(path))
    path.write_text("\n")
    with pytest.raises(TaskError, match=rf"{path}: the file holds no rows"):
        tasks.get("gsm8k").load("test", source=str(path))


def test_one_local_file_as_both_splits_is_refused_rather_than_overlapping():
    cfg = params.load("smoke", overrides={"dataset.task": "math", "dataset.source": str(DATA / "math_hub_schema.jsonl"),
                                          "dataset.train_split": "train", "dataset.test_split": "test"})
    with pytest.raises(ValueError, match="share 40 prompt.*set dataset.train_split equal to dataset.test_split"):
        splits.load_test(cfg)


# ---- relative paths mean the folder the command ran in -------------------------------------
@pytest.mark.e2e
def test_relative_paths_are_resolved_where_the_command_ran(tmp_path):
    """A relative params file, dataset.source and DIFFGRPO_OUTPUTS, from a folder that is not
    the repository: the kernels run in notebooks/, yet every path means what was typed."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    shutil.copy(DATA / "math_hub_schema.jsonl", work / "data" / "math.jsonl")
    shutil.copy(ROOT / "params" / "smoke.yaml", work / "my_smoke.yaml")
    (work / "my_smoke.yaml").write_text((work / "my_smoke.yaml").read_text().replace(
        "include: embedded.yaml", f"include: {ROOT / 'params' / 'embedded.yaml'}"))
    argv = [sys.executable, "-m", "diffgrpo.study", "./my_smoke.yaml", "--stages", "01_probe", "02_select",
            "--kernel", "python3", "--set", "dataset.task=math", "--set", "dataset.source=data/math.jsonl",
            "--set", "dataset.train_split=test"]
    env = {**os.environ, "DIFFGRPO_OUTPUTS": "out"}
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = work / "out" / "smoke"
    assert (out / "notebooks" / "02_select.ipynb").exists() and (out / "select" / "summary.csv").exists()
    assert (out / "timings.json").exists() and not (ROOT / "notebooks" / "out").exists()
    nb = json.loads((out / "notebooks" / "01_probe.ipynb").read_text())
    injected = "".join(next(c["source"] for c in nb["cells"]
                            if "injected-parameters" in c["metadata"].get("tags", [])))
    assert str(work / "data" / "math.jsonl") in injected and str(work / "my_smoke.yaml") in injected


# ---- issue 30's late errors, now named before work ------------------------------------------------
def test_a_pool_larger_than_the_tasks_split_is_named_before_work():
    """GSM8K's train split has 7,473 rows (its dataset card, ``GSM8K.split_rows``): a pool of
    8,000 is refused at load, naming the key, not by the probe after the model loaded."""
    with pytest.raises(params.ParamsError, match=r"`dataset.pool_size` = 8000: task 'gsm8k''s split 'train' has 7473 rows"):
        params.load("tiny", overrides={"dataset.task": "gsm8k", "dataset.source": "hub", "dataset.pool_size": 8000,
                                       "dataset.test_size": 100})
    # one split feeding both: the pool and the held-out set together
    with pytest.raises(params.ParamsError, match=r"1400 wanted with dataset.test_size"):
        params.load("tiny", overrides={"dataset.task": "gsm8k", "dataset.source": "offline", "dataset.train_split": "test",
                                       "dataset.test_split": "test", "dataset.pool_size": 1300, "dataset.test_size": 100})
    params.load("tiny", overrides={"dataset.task": "gsm8k", "dataset.source": "hub", "dataset.pool_size": 7473,
                                   "dataset.test_size": 100})  # the whole split is fine


def test_middle_with_the_whole_pool_is_named_before_work():
    with pytest.raises(params.ParamsError, match=r"selects the whole pool for `middle`"):
        params.load("tiny", overrides={"arms": [{"name": "m", "select": "middle"}], "select.budget_frac": 1.0})
    params.load("tiny", overrides={"arms": [{"name": "m", "select": "middle"}], "select.budget_frac": 0.4})
