"""What the audit of issue 20 found, each case as a test (docs/reliability.md lists them):
nothing escapes the outputs root, no damage survives a rerun, no number changes without a
word, and the raw errors of careless input are named ones that say what to do.

The damaged-artifact cases run the real stages on ``smoke`` (a random 2-layer model, seconds
per stage) in their own outputs folder: a probe, a selection, one trained and evaluated run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo.tasks import splits
from diffgrpo.analysis import report
from diffgrpo.store import artifacts, layout
from diffgrpo import evaluate, params, probe, select, study, tasks, train
from diffgrpo.store.artifacts import ArtifactError, OutputsError
from diffgrpo.models.generation import PromptTooLong
from diffgrpo.params import ParamsError
from diffgrpo.tasks import TaskError

ROOT = Path(__file__).resolve().parents[1]


# ---- 1. nothing escapes the outputs root -------------------------------------------------
BAD_NAMES = ["../../x", "", ".", "..", "/abs", ".hidden", "a/b", "a" * 101, "a" * 300]


@pytest.mark.parametrize("value", BAD_NAMES)
@pytest.mark.parametrize("key", ["study", "model.name", "dataset.train_split"])
def test_a_name_that_becomes_a_path_part_is_refused_at_validation(key, value):
    with pytest.raises(ParamsError, match=rf"overrides: `{key}` = .* cannot name a folder"):
        params.load("tiny", overrides={key: value})


@pytest.mark.parametrize("entry, key", [
    ({"arms": [{"name": "../x", "select": "hard"}]}, "arms"),
    ({"arms": [{"name": "a" * 101, "select": "hard"}]}, "arms"),
    ({"arms": [{"name": ".h", "select": "hard"}]}, "arms"),
    ({"evaluate.sets": [{"name": "../../ood"}]}, "evaluate.sets"),
    ({"evaluate.sets": [{"name": ""}]}, "evaluate.sets"),
])
def test_arm_and_evaluation_set_names_follow_the_same_rule(entry, key):
    with pytest.raises(ParamsError, match=rf"`{key}` .*must be a letter or digit"):
        params.load("tiny", overrides=entry)


def test_the_error_names_the_params_file_that_set_the_name(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(f"include: {ROOT / 'params' / 'tiny.yaml'}\nstudy: ../../elsewhere\n")
    with pytest.raises(ParamsError, match=rf"^{f}: `study` = '../../elsewhere' cannot name a folder"):
        params.load(str(f))


def test_the_cli_refuses_an_escaping_study_before_writing_anything(tmp_path, monkeypatch, capsys):
    root = tmp_path / "a" / "b" / "outputs"
    root.mkdir(parents=True)
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(root))
    for value in ("../../x", "/abs", "", "."):
        assert study.cli(["tiny", "--set", f"study={value}"]) == 2
        err = capsys.readouterr().err
        assert "`study`" in err and "Traceback" not in err and err.count("\n") == 1
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", "a/b", "a/b/outputs"]


def test_every_layout_path_is_checked_under_the_outputs_root(tmp_path, monkeypatch):
    """Belt and braces: a Config built around validation still cannot point a path outside."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    cfg = params.load("tiny")
    assert layout.study_dir(cfg) == tmp_path / "out" / "tiny"
    with pytest.raises(OutputsError, match="outside the outputs root"):
        layout.study_dir(cfg.model_copy(update={"study": "../x"}))
    with pytest.raises(OutputsError, match="the outputs root itself"):
        layout.study_dir(cfg.model_copy(update={"study": "."}))
    with pytest.raises(OutputsError, match=r"\(model.name\): would be written outside"):
        layout.probe_dir(cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": "../../../../x"})}))
    with pytest.raises(OutputsError, match=r"\(arm\): would be written outside"):
        layout.run_dir(cfg, "../../../x", 0)
    with pytest.raises(OutputsError, match=r"\(evaluation set\)"):
        layout.eval_dir(cfg, "base", "x/../../../../y")


# ---- 4. raw errors become named ones -------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["--set", "train.max_steps=[4"], ["--set 'train.max_steps=[4'", "not valid YAML"]),
    (["--set", "train.max_steps"], ["--set 'train.max_steps'", "expected key=value"]),
    (["--set", "dataset.task_options.peple=3"], ["has no option 'peple'", "did you mean 'people'"]),
    (["--set", "select.budget_frac=0.01"], ["`select.budget_frac`", "selects 0 prompts", "at least"]),
])
def test_careless_command_lines_get_one_line_that_says_what_to_do(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.cli(["tiny", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    assert not any(tmp_path.iterdir())


def test_a_budget_that_selects_no_prompt_or_too_many_is_refused_at_validation():
    with pytest.raises(ParamsError, match=r"`select.budget_frac` \(arm hard\) budget_frac = 0.01 of dataset.pool_size = 48 "
                                          r"selects 0 prompts; raise it to at least 0.0834"):
        params.load("tiny", overrides={"select.budget_frac": 0.01})
    with pytest.raises(ParamsError, match=r"`arms` arms\[0\] \(h\): budget_count = 100 selects 100 prompts, more than"):
        params.load("tiny", overrides={"arms": [{"name": "h", "select": "hard", "budget_count": 100}]})


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_an_outputs_root_that_cannot_be_a_folder_is_named(kind, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(blocker if kind == "a file" else blocker / "out"))
    assert study.cli(["tiny"]) == 2
    err = capsys.readouterr().err
    assert "DIFFGRPO_OUTPUTS=" in err and "is not a directory" in err and "Traceback" not in err
    assert blocker.read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_outputs_root_is_named(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(ro / "out"))
    with pytest.raises(OutputsError, match="cannot be created"):
        artifacts.check_outputs_root()


def test_overrides_given_as_a_string_are_named_or_read_as_yaml():
    with pytest.raises(ParamsError, match=r"overrides = 'train.max_steps=3': expected a mapping.*-y 'overrides:"):
        params.load("tiny", overrides="train.max_steps=3")
    assert params.load("tiny", overrides="{train.max_steps: 3}").train.max_steps == 3


@pytest.mark.e2e
def test_papermill_with_overrides_as_a_string_names_the_parameter(tmp_path):
    """The audit's command: ``papermill ... -p overrides train.max_steps=3``."""
    done = subprocess.run(
        [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "02_select.ipynb"), str(tmp_path / "o.ipynb"),
         "-p", "params_file", "tiny", "-p", "overrides", "train.max_steps=3", "-k", "python3", "--cwd",
         str(ROOT / "notebooks")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "DIFFGRPO_OUTPUTS": str(tmp_path / "out")})
    assert done.returncode != 0
    assert "ParamsError" in done.stderr and "expected a mapping" in done.stderr and "'str' object" not in done.stderr


def test_a_dataset_source_that_is_a_folder_is_named_before_any_notebook(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    folder = tmp_path / "data"
    folder.mkdir()
    assert study.cli(["smoke", "--set", "dataset.task=gsm8k", "--set", f"dataset.source={folder}",
                      "--set", "dataset.train_split=test"]) == 2
    err = capsys.readouterr().err
    assert f"dataset.source: {folder} is a folder" in err and not (tmp_path / "out").exists()
    with pytest.raises(TaskError, match="is a folder"):
        tasks.get("gsm8k").load("test", source=str(folder))


def test_a_missing_include_names_the_including_file_and_its_folder_is_searched(tmp_path):
    (tmp_path / "base.yaml").write_text(f"include: {ROOT / 'params' / 'tiny.yaml'}\nstudy: from_base\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("include: base\n")  # a bare name: found beside the including file
    assert params.load(str(mine)).study == "from_base"
    mine.write_text("include: nothere.yaml\n")
    with pytest.raises(ParamsError, match=rf"^{mine}: `include: nothere.yaml` names no file \(looked in {tmp_path}"):
        params.load(str(mine))


# ---- 3. dataset rows validated at load -----------------------------------------------------
def _gsm_file(path: Path, n: int = 30, **special: str) -> Path:
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(n)]
    for i, (field, value) in enumerate(special.items()):
        row = int(field.split("_")[1])
        rows[row][field.split("_")[0]] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_empty_answer_is_named_with_file_and_row(tmp_path):
    path = _gsm_file(tmp_path / "gsm.jsonl", answer_3="nothing to see ####   ")
    with pytest.raises(TaskError, match=rf"{path}: row 4 \(counting from 1; id 'gsm8k/test/00003'\) has an empty or null answer"):
        tasks.get("gsm8k").load("test", source=str(path))
    rows = pd.DataFrame({"id": ["a", "b"], "prompt": [[{"role": "user", "content": "q"}]] * 2,
                         "answer": ["1", None], "tier": [None, None]})
    with pytest.raises(TaskError, match=r"where: row 2 .*id 'b'.* empty or null answer"):
        tasks.validate_rows(rows, "where")


@pytest.mark.parametrize("size", ["1 MB", "5000 tokens"])
def test_an_over_long_prompt_is_named_before_any_generation(size, tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    path = _gsm_file(tmp_path / "gsm.jsonl")
    cfg = params.load("smoke", overrides={"dataset.task": "gsm8k", "dataset.source": str(path),
                                          "dataset.train_split": "test"})
    pid = splits.load_pool(cfg)["id"].iloc[2]  # a row the pool holds: the third prompt the probe generates for
    _gsm_file(path, **{f"question_{int(pid.rsplit('/', 1)[1])}": "x" * 1_000_000 if size == "1 MB" else "word " * 5000})
    t0 = time.perf_counter()
    with pytest.raises(PromptTooLong, match=rf"{path}: id '{pid}' \(prompt 3 of the 16 to generate for\): its prompt is "
                                            r"\d+ (characters|tokens); with max_new_tokens = 8 it needs more than the "
                                            r"model's context of 4096"):
        probe.run_probe(cfg, progress=False)
    assert time.perf_counter() - t0 < 60
    assert not list((layout.probe_dir(cfg) / "work").rglob("part-*.parquet"))


# ---- 2. damaged artifacts: rebuilt on rerun, or refused naming the stage ----------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A smoke study with one trained and evaluated run, in an outputs folder of its own."""
    out = tmp_path_factory.mktemp("reliability-outputs")
    old = os.environ.get("DIFFGRPO_OUTPUTS")
    os.environ["DIFFGRPO_OUTPUTS"] = str(out)
    try:
        cfg = params.load("smoke")
        probe.run_probe(cfg, progress=False)
        select.run_select(cfg)
        train.train_run(cfg, "hard", 0, progress=False)
        evaluate.evaluate_run(cfg, "hard", 0, progress=False)
        yield cfg
    finally:
        if old is None:
            os.environ.pop("DIFFGRPO_OUTPUTS", None)
        else:
            os.environ["DIFFGRPO_OUTPUTS"] = old


@pytest.fixture
def fresh(trained, tmp_path, monkeypatch):
    """A copy of the trained study, for one test to damage."""
    src = Path(os.environ["DIFFGRPO_OUTPUTS"])
    shutil.copytree(src, tmp_path / "out", symlinks=True)
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    return trained


def _summary(cfg) -> pd.DataFrame:
    return pd.read_parquet(layout.eval_dir(cfg, "hard-seed0") / "summary.parquet")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 3)])


def test_the_run_manifest_covers_adapters_params_and_trl_config(trained):
    m = json.loads((layout.run_dir(trained, "hard", 0) / "manifest.json").read_text())
    assert {"steps.parquet", "groups.parquet", "params.yaml", "trl_config.json",
            "checkpoints/checkpoint-1/adapter_model.safetensors", "checkpoints/checkpoint-2/adapter_model.safetensors",
            "checkpoints/checkpoint-2/adapter_config.json"} <= set(m["sha256"])
    assert not any(Path(n).name in layout.ADAPTER_STATE_FILES for n in m["sha256"])


def test_adapters_follow_the_umask(trained):
    mode = 0o666 & ~artifacts._umask()
    for f in (layout.run_dir(trained, "hard", 0) / "checkpoints").rglob("*"):
        if f.is_file():
            assert f.stat().st_mode & 0o777 == mode, f


@pytest.mark.e2e
def test_a_truncated_adapter_is_named_by_evaluate_and_retrained_by_a_rerun(fresh):
    cfg, before = fresh, _summary(fresh)
    adapter = layout.run_dir(cfg, "hard", 0) / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"
    _truncate(adapter)
    with pytest.raises(ArtifactError, match=r"checkpoints/checkpoint-2/adapter_model.safetensors missing or changed.*"
                                            r"rerun the train stage \(03_train\)"):
        evaluate.evaluate_run(cfg, "hard", 0, progress=False)
    with pytest.warns(UserWarning, match=r"checkpoint-2/adapter_model.safetensors'\] damaged since the run finished"):
        train.train_run(cfg, "hard", 0, progress=False)
    evaluate.evaluate_run(cfg, "hard", 0, progress=False)
    pd.testing.assert_frame_equal(_summary(cfg), before)  # the rerun repaired it: the same numbers
    assert list((layout.study_dir(cfg) / "runs").glob("hard-seed0.superseded-*"))  # the damaged one kept


@pytest.mark.e2e
def test_a_finished_run_that_lost_a_checkpoint_is_not_finished(fresh):
    cfg = fresh
    shutil.rmtree(layout.run_dir(cfg, "hard", 0) / "checkpoints" / "checkpoint-1")
    with pytest.raises(ArtifactError, match="checkpoint-1.*rerun the train stage"):
        evaluate.check_finished(layout.run_dir(cfg, "hard", 0), cfg.train.max_steps)
    with pytest.warns(UserWarning, match="damaged since the run finished"):
        train.train_run(cfg, "hard", 0, progress=False)
    assert (layout.run_dir(cfg, "hard", 0) / "checkpoints" / "checkpoint-1" / "adapter_config.json").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["run", "probe", "base evaluation"])
def test_a_truncated_manifest_is_named_where_read_and_rebuilt_by_its_stage(which, fresh):
    cfg = fresh
    if which == "run":
        path = layout.run_dir(cfg, "hard", 0) / "manifest.json"
        _truncate(path)
        with pytest.raises(ArtifactError, match=rf"{path}: damaged, not valid JSON.*rerun the 03_train stage"):
            evaluate.check_finished(path.parent, cfg.train.max_steps)
        with pytest.raises(ArtifactError, match=r"rerun the 03_train stage"):
            report.find_runs(layout.study_dir(cfg))
        with pytest.warns(UserWarning, match=r"damaged, not valid JSON.*kept the run as hard-seed0.damaged-1"):
            train.train_run(cfg, "hard", 0, progress=False)
        assert json.loads(path.read_text())["status"] == "complete"
    elif which == "probe":
        path = layout.probe_dir(cfg) / "manifest.json"
        prompts = pd.read_parquet(path.parent / "prompts.parquet")
        _truncate(path)
        probe.run_probe(cfg, progress=False)  # rebuilt from its chunks, the same numbers
        assert json.loads(path.read_text())["complete"]
        pd.testing.assert_frame_equal(probe.read_prompts(cfg), prompts)
    else:
        path = layout.eval_dir(cfg, "base") / "manifest.json"
        _truncate(path)
        summary = pd.read_parquet(path.parent / "summary.parquet")
        evaluate.evaluate_base(cfg, progress=False)
        assert json.loads(path.read_text())["sha256"]
        pd.testing.assert_frame_equal(pd.read_parquet(path.parent / "summary.parquet"), summary)


def test_an_edited_samples_file_is_refused_by_the_analysis(fresh):
    cfg = fresh
    path = layout.eval_dir(cfg, "hard-seed0") / "samples.parquet"
    samples = pd.read_parquet(path)
    samples["correct"] = 1.0  # valid parquet, other numbers
    samples.to_parquet(path, index=False)
    with pytest.raises(ArtifactError, match=rf"{path}: damaged, changed since the 04_evaluate stage wrote it"):
        report.prompt_scores(layout.study_dir(cfg), "hard-seed0", "greedy_acc")
    evaluate.evaluate_run(cfg, "hard", 0, progress=False)  # the rerun rewrites it from its chunks
    assert report.prompt_scores(layout.study_dir(cfg), "hard-seed0", "greedy_acc").notna().all().all()


def test_a_selection_that_repeats_an_id_is_refused(fresh):
    cfg = fresh
    path = layout.selection_file(cfg, "hard")
    sel = pd.read_parquet(path)
    sel.iloc[1] = sel.iloc[0]
    artifacts.write_parquet(path, sel)
    with pytest.raises(ArtifactError, match=rf"{path}: damaged, changed since the 02_select stage"):
        train.selected_rows(cfg, "hard")
    (path.parent / "manifest.json").unlink()  # a selection written before selections had digests
    with pytest.raises(ValueError, match=rf"{path}: id '{sel['id'].iloc[0]}' is selected more than once \(row 2"):
        train.selected_rows(cfg, "hard")


@pytest.mark.e2e
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # no raw TensorBoard error
def test_a_run_folder_deleted_while_training_is_refused_then_retrained(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "out"))
    cfg = params.load("smoke", overrides={"train.max_steps": 12, "train.save_steps": 2})
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)
    run_dir = layout.run_dir(cfg, "hard", 0)
    deleted = threading.Event()

    def delete_after_first_checkpoint():
        deadline = time.time() + 300
        while time.time() < deadline and not (run_dir / "checkpoints" / "checkpoint-2" / "trainer_state.json").exists():
            time.sleep(0.005)
        time.sleep(0.1)  # let HF finish that save
        shutil.rmtree(run_dir, ignore_errors=True)
        deleted.set()

    watcher = threading.Thread(target=delete_after_first_checkpoint, daemon=True)
    watcher.start()
    try:
        train.train_run(cfg, "hard", 0, progress=False)
    except ArtifactError as err:  # noticed before the run is recorded, or named when it hit a save in progress
        # what it names depends on when the deletion landed: checkpoint-2 once its save was recorded,
        # else the run's params and TRL config (gone with the folder) alone
        named = str(err).split("disappeared while it trained (")[1].split(")")[0]
        assert "rerun the train" in str(err) and ("checkpoints/checkpoint-2" in named or "params.yaml" in named), named
    else:
        pytest.fail("a run whose folder was deleted while it trained was recorded as trained")
    watcher.join()
    assert deleted.is_set() and not (run_dir / "manifest.json").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # what was left may be set aside
        train.train_run(cfg, "hard", 0, progress=False)
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "complete" and m["checkpoints"] == [f"checkpoints/checkpoint-{s}" for s in range(2, 13, 2)]
    assert (run_dir / "params.yaml").exists() and (run_dir / "trl_config.json").exists()
    assert len(pd.read_parquet(run_dir / "steps.parquet")) == 12


@pytest.mark.e2e
def test_checkpoints_left_without_their_manifest_are_set_aside(fresh):
    cfg = fresh
    run_dir = layout.run_dir(cfg, "hard", 0)
    (run_dir / "manifest.json").unlink()
    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-1")
    with pytest.warns(UserWarning, match=r"checkpoints without a manifest .*kept it as hard-seed0.damaged-1"):
        train.train_run(cfg, "hard", 0, progress=False)
    assert (run_dir / "checkpoints" / "checkpoint-1").exists()


# ---- 7. a refused second study touches none of the first's files; timings kept as they finish
def test_a_second_study_on_a_busy_folder_is_refused_and_touches_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    cfg = params.load("smoke")
    nb = layout.notebooks_dir(cfg)
    nb.mkdir(parents=True)
    files = {nb / "01_probe.running.ipynb": "{}", nb / "01_probe.log": "the first study's log\n",
             layout.study_dir(cfg) / "timings.json": '{"notebooks": {"01_probe": 1.0}}'}
    for f, text in files.items():
        f.write_text(text)
    with artifacts.exclusive(nb):  # the first study holds its folder, as run_study does
        assert study.cli(["smoke", "--kernel", "python3"]) == 2
    err = capsys.readouterr().err
    assert "another study" in err and "nothing was written" in err
    assert {f: f.read_text() for f in files} == files
    assert sorted(p.name for p in nb.iterdir()) == ["01_probe.log", "01_probe.running.ipynb"]


@pytest.mark.e2e
def test_timings_are_kept_per_notebook_when_the_study_fails(tmp_path, monkeypatch, capsys):
    """01_probe succeeds while 03_train (no selection: 02_select left out) fails beside it."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    assert study.cli(["smoke", "--stages", "01_probe", "03_train", "--kernel", "python3"]) == 1
    assert "03_train" in capsys.readouterr().err
    timings = json.loads((tmp_path / "smoke" / "timings.json").read_text())
    assert timings["notebooks"]["01_probe"] > 0 and "01_probe" in timings["stages"]
    assert not any(k.startswith("03_train") for k in timings["notebooks"])



def test_a_later_session_that_finds_the_work_done_keeps_what_the_work_cost(tmp_path, monkeypatch):
    """A study's next block executes its earlier runs' notebooks again, which find them done in
    seconds: timings.json keeps each notebook's longest execution and every session's wall."""
    from diffgrpo.study.runner import _Timings

    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    cfg = params.load("smoke")
    layout.study_dir(cfg).mkdir(parents=True)
    first = _Timings(cfg)
    first.add("03_train hard-seed0", 300.0, 290.0)
    first.close(320.0)
    second = _Timings(cfg)
    second.add("03_train hard-seed0", 4.0, 3.5)  # found done
    second.add("03_train hard-seed1", 280.0, 270.0)
    second.close(300.0)
    t = json.loads((layout.study_dir(cfg) / "timings.json").read_text())
    assert t["notebooks"] == {"03_train hard-seed0": 300.0, "03_train hard-seed1": 280.0}
    assert t["cpu_s"]["notebooks"]["03_train hard-seed0"] == 290.0 and t["stages"]["03_train"] == 580.0
    assert (t["wall_s"], t["sessions_wall_s"]) == (300.0, [320.0, 300.0])


# ---- 5. the checkout the command runs in, not the installed one -----------------------------
def _clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    (clone / "lib" / "diffgrpo").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", clone)
    shutil.copytree(ROOT / "notebooks", clone / "notebooks")
    shutil.copytree(ROOT / "params", clone / "params")
    tiny = clone / "params" / "tiny.yaml"
    tiny.write_text(tiny.read_text().replace("study: tiny", "study: clone_tiny"))
    return clone


@pytest.mark.e2e
def test_notebooks_params_and_outputs_resolve_in_the_checkout_the_command_runs_in(tmp_path):
    clone = _clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("DIFFGRPO_OUTPUTS", "DIFFGRPO_PROJECT")}
    code = ("from diffgrpo import params; from diffgrpo.store import artifacts; from diffgrpo.study import notebooks\n"
            "print(params.load('tiny').study, notebooks.notebook_path('01_probe'), artifacts.outputs_root())")
    done = subprocess.run([sys.executable, "-c", code], cwd=clone / "notebooks", env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.split() == ["clone_tiny", str(clone / "notebooks" / "01_probe.ipynb"), str(clone / "outputs")]
    # the runner says that the code is another checkout's, and a named root is used from anywhere
    done = subprocess.run([sys.executable, "-m", "diffgrpo.study", "tiny", "--set", "select.budget_frac=.nan",
                           "--project", str(clone)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    note, error = done.stderr.strip().splitlines()
    assert note.startswith(f"note: using the notebooks, params and outputs of {clone}, but the diffgrpo code "
                           f"imported here is {ROOT}'s")
    assert error.startswith("error: overrides: `select.budget_frac` = nan")
    assert not (clone / "outputs").exists()
    done = subprocess.run([sys.executable, "-m", "diffgrpo.study", "tiny", "--project", str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "is not a diffgrpo checkout" in done.stderr and "Traceback" not in done.stderr
