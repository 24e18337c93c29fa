"""Issue 37: nothing lost, nothing silent. Unit tier: nothing here trains.

`python -m diffgrpo.analysis.inputs export/render/results` remove only what they recorded writing
(``exported.json``, ``rendered.json``); ``results`` swaps a new inputs + report pair in only after
the render succeeded. The sources are the committed inputs of docs/results/embedded/ (a study
folder of what the report reads), so no stage runs.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from diffgrpo.analysis import inputs
from diffgrpo.store import artifacts, layout

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / inputs.RESULTS / "embedded"


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and the sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


@pytest.fixture
def export_dir(tmp_path) -> Path:
    """An export (the committed inputs of docs/results/embedded/), which is also a study folder."""
    return Path(shutil.copytree(COMMITTED / "inputs", tmp_path / "export"))


@pytest.fixture
def study_dir(tmp_path) -> Path:
    """An analysed study folder as a study leaves it: checkpoints, notebooks, report/params.yaml."""
    study = tmp_path / "outputs" / "embedded"
    for rel in ("report/params.yaml", "runs/hard-seed0/checkpoints/checkpoint-2/adapter_model.safetensors",
                "notebooks/03_train.ipynb", "runs/hard-seed0/tensorboard/events.out"):
        (study / rel).parent.mkdir(parents=True, exist_ok=True)
        (study / rel).write_text(rel)
    return study


def test_export_with_its_arguments_swapped_removes_nothing(export_dir, study_dir):
    before = tree(study_dir)
    with pytest.raises(FileExistsError, match=r"notebooks/03_train.ipynb: not written by an earlier .*export.*"
                                              r"nothing was changed"):
        inputs.export(export_dir, study_dir)
    assert tree(study_dir) == before


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_export_onto_its_own_study_folder_is_refused(export_dir, where):
    before = tree(export_dir)
    dest = {"same": export_dir, "inside": export_dir / "copy", "around": export_dir.parent}[where]
    with pytest.raises(FileExistsError, match="name a folder of its own"):
        inputs.export(export_dir, dest)
    assert tree(export_dir) == before


def test_export_again_replaces_what_it_wrote_and_refuses_anything_else(export_dir, tmp_path):
    dest = tmp_path / "inputs"
    sizes = inputs.export(export_dir, dest)
    assert set(tree(dest)) == set(sizes) | {inputs.EXPORTED}
    recorded = inputs.written_before(dest, inputs.EXPORTED)
    assert recorded == set(sizes)
    # a file an earlier export wrote and this one does not is removed; the rest replaced
    artifacts.write_json(dest / inputs.EXPORTED, {"files": sorted(recorded | {"runs/retired/steps.parquet"}),
                                                  "written_by": inputs.WRITER[inputs.EXPORTED]})
    (dest / "runs" / "retired").mkdir()
    (dest / "runs" / "retired" / "steps.parquet").write_text("old")
    inputs.export(export_dir, dest)
    assert not (dest / "runs" / "retired").exists() and set(tree(dest)) == set(sizes) | {inputs.EXPORTED}
    # a file no export wrote: refused, named, and nothing changed
    (dest / "select" / "notes.txt").write_text("mine")
    before = tree(dest)
    with pytest.raises(FileExistsError, match=r"select/notes.txt: not written by an earlier"):
        inputs.export(export_dir, dest)
    assert tree(dest) == before


def test_render_into_docs_removes_nothing(export_dir, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("architecture.md", "reliability.md", "params.yaml"):
        (docs / name).write_text(name)
    before = tree(docs)
    with pytest.raises(FileExistsError, match=r"docs/architecture.md: not written by an earlier .*render"):
        inputs.render(export_dir, docs)
    assert tree(docs) == before


def test_publish_removes_a_retired_report_file_it_recorded_and_keeps_the_rest(tmp_path):
    report, out = tmp_path / "report", tmp_path / "out"
    report.mkdir()
    (report / "table1_gain.md").write_text("new")
    (report / "summary.json").write_text("{}")
    assert inputs._publish(report, out) == ["summary.json", "table1_gain.md"]
    (out / "README.md").write_text("hand-written")
    (out / "notes.txt").write_text("mine")
    (report / "table1_gain.md").unlink()
    (report / "arms.md").write_text("arms")
    inputs._publish(report, out)
    assert sorted(tree(out)) == ["README.md", "arms.md", "notes.txt", inputs.RENDERED, "summary.json"]
    (out / "fig_mine.png").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="fig_mine.png: not written by an earlier"):
        inputs._publish(report, out)


@pytest.fixture
def checkout(tmp_path, monkeypatch, export_dir) -> Path:
    """A checkout whose docs/results/embedded/ is the committed one, and an outputs root whose
    ``embedded`` study is the committed inputs (an analysed study folder)."""
    root = tmp_path / "checkout"
    for d in ("lib/diffgrpo", "notebooks"):
        (root / d).mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    shutil.copytree(COMMITTED, root / inputs.RESULTS / "embedded")
    shutil.copytree(export_dir, tmp_path / "outputs" / "embedded")
    artifacts.write_json(tmp_path / "outputs" / "embedded" / layout.TIMINGS, {"wall_s": 2.0})
    monkeypatch.setenv(artifacts.PROJECT_ENV, str(root))
    monkeypatch.setenv(artifacts.OUTPUTS_ENV, str(tmp_path / "outputs"))
    return root


def beside(folder: Path) -> list[str]:
    """What docs/results holds beside the study's folder, less the study's lock (kept, like every lock)."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name != f".{folder.name}.lock")


def _fake_render(fail: bool):
    """A render that writes one report file into ``out``, then fails (a run extended after its
    evaluation) or returns."""
    def render(inputs_dir, out):
        report = Path(inputs_dir).parents[3] / "fake-report"
        report.mkdir(exist_ok=True)
        (report / "table1_gain.md").write_text("today's\n")
        names = inputs._publish(report, Path(out))
        if fail:
            raise ValueError("docs/results/embedded/inputs: hard-seed0's evaluation scores an earlier training")
        return names
    return render


def test_a_failed_render_in_make_results_leaves_the_old_inputs_and_report(checkout, monkeypatch):
    folder = inputs.results_dir("embedded")
    before = tree(folder)
    monkeypatch.setattr(inputs, "render", _fake_render(fail=True))
    with pytest.raises(ValueError, match="scores an earlier training"):
        inputs.results("embedded")
    assert tree(folder) == before
    assert beside(folder) == ["embedded"]  # nothing half-built left


def test_make_results_swaps_the_pair_in_and_keeps_the_hand_written_files(checkout, monkeypatch):
    folder = inputs.results_dir("embedded")
    readme = (folder / "README.md").read_bytes()
    (folder / "notes").mkdir()
    (folder / "notes" / "mine.txt").write_text("keep")
    monkeypatch.setattr(inputs, "render", _fake_render(fail=False))
    sizes = inputs.results("embedded")
    assert (folder / "README.md").read_bytes() == readme and (folder / "notes" / "mine.txt").read_text() == "keep"
    assert (folder / "table1_gain.md").read_text() == "today's\n" and not (folder / "arms.md").exists()
    assert inputs.written_before(folder / "inputs", inputs.EXPORTED) == set(sizes)
    assert (folder / layout.TIMINGS).read_text().strip().endswith("}") and "2.0" in (folder / layout.TIMINGS).read_text()
    assert beside(folder) == ["embedded"]


def test_an_interrupted_swap_is_undone_by_the_next_make_results(checkout, monkeypatch):
    folder = inputs.results_dir("embedded")
    before = tree(folder)
    folder.rename(folder.with_name(".embedded.replaced"))  # killed between the two renames
    (folder.parent / ".embedded.building").mkdir()
    monkeypatch.setattr(inputs, "render", _fake_render(fail=True))
    with pytest.raises(ValueError):
        inputs.results("embedded")
    assert tree(folder) == before and beside(folder) == ["embedded"]


def test_make_results_refuses_a_committed_report_file_no_render_wrote(checkout, monkeypatch):
    folder = inputs.results_dir("embedded")
    (folder / "table_mine.md").write_text("mine")
    before = tree(folder)
    monkeypatch.setattr(inputs, "render", _fake_render(fail=False))
    with pytest.raises(FileExistsError, match="table_mine.md: not written by an earlier"):
        inputs.results("embedded")
    assert tree(folder) == before


def test_make_results_of_a_study_that_is_not_there_says_so(checkout):
    with pytest.raises(FileNotFoundError, match=r"no analysed study 'nosuch'.*make study STUDY=nosuch.*'embedded'"):
        inputs.results("nosuch")


# ---- item 4: rewards checked where they enter training ----

from types import SimpleNamespace  # noqa: E402

from diffgrpo import rewards  # noqa: E402
from diffgrpo.train.records import Recorder  # noqa: E402


class _Task:
    def score(self, text, answer):
        return float(text == answer)


@pytest.mark.parametrize("bad, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (None, "(None|nan)"),
                                        ("1.0", "'1.0'"), ([1.0], r"\[1.0\]")])
def test_a_reward_that_is_not_one_finite_number_per_completion_is_named_before_any_update(bad, shown):
    name = "issue37_bad"

    def plugin(prompts, completions, **kwargs):  # a plugin reward with one bad value
        return [1.0, 0.0, bad, 1.0]

    rewards.register(name)(plugin)
    try:
        groups: list[dict] = []
        rec = Recorder(_Task(), group_size=2, steps=[], groups=groups, reward={name: 1.0}, rows=None)
        with pytest.raises(rewards.RewardError, match=rf"reward 'issue37_bad' \(.*test_nothing_lost.py\) returned "
                                                      rf"{shown} for prompt id 'p2' \(completion 2\) at step 4"):
            rec.correct(prompts=["q"] * 4, completions=["a", "b", "a", "b"], answer=["a"] * 4,
                        id=["p1", "p1", "p2", "p2"], tier=[0] * 4, trainer_state=SimpleNamespace(global_step=3))
        assert groups == []  # nothing recorded, nothing for the update
    finally:
        rewards._REWARDS.remove(name)


@pytest.mark.parametrize("values, match", [([1.0], "returned 1 values for 4 completions"),
                                           (None, "returned None"), ("1010", "returned '1010'")])
def test_a_reward_of_the_wrong_length_or_kind_is_named(values, match):
    with pytest.raises(rewards.RewardError, match=match):
        rewards.checked("mine", values, ["a"] * 4, ["p"] * 4)
    assert rewards.checked("mine", [1, 0.5, True, 0], ["a"] * 4, ["p"] * 4).tolist() == [1.0, 0.5, 1.0, 0.0]


# ---- item 5: the ledger cannot go stale ----

from diffgrpo import params  # noqa: E402
from diffgrpo.train import ledger  # noqa: E402


def test_a_kept_run_s_ledger_follows_today_s_charge_probe(tmp_path, monkeypatch):
    """charge_probe is not in the run key (run keys stay): a finished run that 03_train keeps gets its
    probe charge recomputed from today's params and probe; its training's own cost is kept."""
    import pandas as pd

    monkeypatch.setenv(artifacts.OUTPUTS_ENV, str(tmp_path))
    charged = params.load("tiny", overrides={"arms": [{"name": "r", "select": "random", "charge_probe": True}]})
    free = params.load("tiny", overrides={"arms": [{"name": "r", "select": "random"}]})
    probe = layout.probe_dir(charged)
    artifacts.write_parquet(probe / layout.PROMPTS, pd.DataFrame({"id": ["a", "b"], "k": [4, 4], "mean_tokens": [10.0, 20.5]}))
    artifacts.write_json(probe / layout.MANIFEST, {"seconds": {"cpu": 7.0, "gpu": 0.0}})
    groups = [{"rewards": [0.0, 1.0], "kept": True, "completion_tokens": 30}]
    was = {"ledger": ledger.ledger(free, "r", groups, {"cpu": 3.0, "gpu": 0.0, "wall": 4.0})}
    assert was["ledger"]["total_rollouts"] == 2 and ledger.refreshed(free, "r", was) is None  # already today's
    now = ledger.refreshed(charged, "r", was)
    assert now["probe"]["charged"] and now["probe"]["completions"] == 8 and now["total_rollouts"] == 10
    assert now["train"] == was["ledger"]["train"] and now["total_tokens"] == 122 + 30
    assert ledger.refreshed(charged, "r", {"status": "complete"}) is None  # before the ledger: left alone


def test_a_run_charged_a_probe_that_is_not_there_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(artifacts.OUTPUTS_ENV, str(tmp_path))
    cfg = params.load("tiny", overrides={"arms": [{"name": "random_charged", "select": "random", "charge_probe": True}]})
    sel = layout.selection_file(cfg, "random_charged")
    ledger.check_probe(cfg, "random_charged", sel)  # a selection written by hand: the ledger records `missing`
    artifacts.write_json(layout.select_dir(cfg) / layout.MANIFEST, {"sha256": {sel.name: "0" * 64}})
    with pytest.raises(ledger.LedgerError, match=r"prompts.parquet: arm 'random_charged' is charged the probe "
                                                 r"\(charge_probe: true\).*01_probe.*or drop charge_probe"):
        ledger.check_probe(cfg, "random_charged", sel)


# ---- items 6-8: bands, budgets and arm names checked before work ----

from diffgrpo.params import ParamsError  # noqa: E402


@pytest.mark.parametrize("band, group_size", [([0, 0], 4), ([1, 1], 4), ([0.8, 1], 4), ([0.3, 0.45], 2)])
def test_a_band_no_group_of_the_arm_s_size_can_enter_is_refused(band, group_size):
    with pytest.raises(ParamsError, match=rf"train.online.band.*holds no mean a learnable group of train.group_size = "
                                          rf"{group_size} can have.*widen the band"):
        params.load("tiny", overrides={"arms": ["hard_online_band"], "train.online.band": band,
                                       "train.group_size": group_size})
    params.load("tiny", overrides={"arms": ["hard_online_band"], "train.online.band": [0.25, 0.25], "train.group_size": 4})


def test_a_completion_budget_under_one_step_is_refused():
    with pytest.raises(ParamsError, match=r"train.max_completions.*= 15 is under one step .*16 completions.*spend 16"):
        params.load("tiny", overrides={"train.max_completions": 15})
    with pytest.raises(ParamsError, match=r"train.max_completions.*arms\[0\] \(hard\): = 20 is under one step"):
        params.load("tiny", overrides={"arms": [{"name": "hard", "select": "hard", "train": {"max_completions": 20,
                                                                                          "group_size": 8}}]})
    params.load("tiny", overrides={"train.max_completions": 16})


@pytest.mark.parametrize("arm, differ", [({"name": "hard", "select": "easy"}, "select"),
                                         ({"name": "hard.b960", "select": "easy"}, "select"),
                                         ({"name": "hard_dr_grpo", "select": "easy"}, "select, train.loss_type"),
                                         ({"name": "hard_dr_grpo", "select": "hard"}, "train.loss_type"),
                                         ({"name": "random_reward", "select": "hard"}, "select, reward, role")])
def test_an_arm_whose_name_says_another_arm_is_refused(arm, differ):
    with pytest.raises(ParamsError, match=rf"its name says .* but its {differ}.* say otherwise.*rename it"):
        params.load("tiny", overrides={"arms": [arm]})


def test_the_arms_that_do_what_their_names_say_are_accepted():
    params.load("tiny", overrides={"arms": ["hard_dr_grpo", "random_reward", {"name": "hard.b2", "select": "hard"},
                                            {"name": "mine", "select": "easy"},
                                            {"name": "hard_wide", "select": "p_hat_band", "options": {"low": 0.0, "high": 0.5}}]})


# ---- items 9-10: a full disk, a read-only outputs folder, a busy run: one line each, from every entry point ----

import errno  # noqa: E402


@pytest.mark.parametrize("err, says", [
    (OSError(errno.ENOSPC, "No space left on device", "/tmp/o/run/x.parquet"), r"^disk full at /tmp/o/run/x.parquet: [\d,]+ MB free.*rerun the same command: it resumes"),
    (RuntimeError("basic_ios::clear: iostream error"), r"^disk full at .*: [\d,]+ MB free"),
    (RuntimeError("[Errno 28] No space left on device: '/tmp/o/eval/w'"), r"^disk full at /tmp/o/eval/w:"),
    (OSError(errno.EROFS, "Read-only file system", "/ro/outputs"), r"^/ro/outputs: cannot be written \(a read-only file system\).*DIFFGRPO_OUTPUTS"),
    (PermissionError(errno.EACCES, "Permission denied", "/o/t"), r"^/o/t: cannot be written \(no permission to write\)"),
])
def test_a_full_disk_or_an_unwritable_folder_is_one_line_with_what_to_do(err, says):
    line = artifacts.storage_problem(err)
    assert line is not None and "\n" not in line
    import re
    assert re.search(says, line), line
    assert artifacts.storage_problem(RuntimeError("a bug")) is None and artifacts.storage_problem(OSError(errno.EIO, "x")) is None


def _entry_points():
    from diffgrpo.study import runner
    from diffgrpo.train import launch as train_launch
    return {"train": (train_launch, "main", train_launch.cli), "study": (runner, "main", runner.cli),
            "results": (inputs, "_command", lambda argv: inputs.main(["results", "embedded"]))}


@pytest.mark.parametrize("entry", ["train", "study", "results"])
@pytest.mark.parametrize("err, says", [
    (artifacts.FolderBusy("/o/t/runs/hard-seed0: another process (pid 7) is writing it; wait for it to finish or "
                          "stop it, then rerun"), "another process (pid 7)"),
    (OSError(errno.ENOSPC, "No space left on device", "/o/t/runs/hard-seed0"), "disk full at /o/t/runs/hard-seed0"),
    (RuntimeError("basic_ios::clear: iostream error"), "disk full at"),
    (PermissionError(errno.EROFS, "Read-only file system", "/o/t"), "/o/t: cannot be written"),
])
def test_every_entry_point_names_them_in_one_line(entry, err, says, monkeypatch, capsys):
    module, name, cli = _entry_points()[entry]

    def fails(*args, **kwargs):
        raise err

    monkeypatch.setattr(module, name, fails)
    if entry == "results" and isinstance(err, (artifacts.FolderBusy, RuntimeError)) and not isinstance(err, OSError):
        if isinstance(err, artifacts.FolderBusy) or artifacts.storage_problem(err) is not None:
            pytest.skip("make results takes no run's lock and saves no checkpoint")
    assert cli([]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and says in line


def test_make_results_of_a_study_that_is_not_there_is_one_line(checkout, capsys):
    assert inputs.main(["results", "nosuch"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "no analysed study 'nosuch'" in line and "make study STUDY=nosuch" in line


# ---- item 11: plugin policies and task rows named with what is wrong ----

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from diffgrpo import policies, select  # noqa: E402
from diffgrpo.tasks import TaskError  # noqa: E402
from diffgrpo.tasks.gsm8k import GSM8K  # noqa: E402


@pytest.mark.parametrize("answer, says", [
    ("She has 3 apples.", "has the answer 'She has 3 apples.', which does not end with '#### N'"),
    (None, "has an empty or null answer"), ("so 3 #### three", "has the answer 'so 3 #### three', which does not end"),
    ("#### ", "has an empty or null answer")])
def test_a_gsm8k_row_with_a_bad_answer_names_the_file_and_the_row(tmp_path, answer, says):
    path = tmp_path / "gsm8k_train.jsonl"
    rows = pd.DataFrame({"question": ["q1", "q2", "q3"], "answer": ["x #### 1", answer, "y #### 2,000"]})
    rows.to_json(path, orient="records", lines=True)
    with pytest.raises(TaskError, match=rf"{path}: row 2 \(counting from 1; id 'gsm8k/train/00001'\) {says}.*1 such row"):
        GSM8K().load("train", source=str(path))


def test_the_offline_gsm8k_copy_passes():
    assert len(GSM8K().load("test", source="offline")) == 1319  # every real answer ends with '#### N'



@pytest.fixture
def plugin_policy():
    """A plugin policy returning what the test sets (``returns[0]``: rows of the prompts given)."""
    returns = []

    def mine(prompts, n, rng, **kwargs):
        return returns[0](prompts)

    policies.register("issue37_policy")(mine)
    yield returns
    policies._POLICIES.remove("issue37_policy")


@pytest.mark.parametrize("make, says", [
    (lambda p: pd.concat([p.iloc[:3], p.iloc[[1, 2]]]), r"repeated ids \['p1', 'p2'\] \(2\)"),
    (lambda p: pd.concat([p.iloc[:2], pd.DataFrame({"id": ["zz", "yy"], "p_hat": [0.5, 0.5]})]),
     r"ids not in the pool \['yy', 'zz'\] \(2\)"),
])
def test_a_plugin_policy_s_repeated_or_foreign_ids_are_named(plugin_policy, make, says):
    plugin_policy.append(make)
    prompts = pd.DataFrame({"id": [f"p{i}" for i in range(6)], "p_hat": np.linspace(0, 1, 6), "tier": np.nan})
    with pytest.raises(select.SelectionError, match=rf"policy 'issue37_policy' .*not distinct pool prompts: {says}"):
        select.select(prompts, "issue37_policy", 3, seed=0)


def test_a_selection_smaller_than_a_step_is_refused_at_select(plugin_policy, tmp_path, monkeypatch):
    monkeypatch.setenv(artifacts.OUTPUTS_ENV, str(tmp_path))
    plugin_policy.append(lambda p: p.iloc[:3])
    cfg = params.load("tiny", overrides={"arms": ["hard", {"name": "mine", "select": "issue37_policy"}]})
    pool = pd.DataFrame({"id": [f"p{i}" for i in range(cfg.dataset.pool_size)], "p_hat": 0.5, "tier": 1, "k": 4,
                         "mean_tokens": 1.0})
    artifacts.write_parquet(layout.probe_dir(cfg) / layout.PROMPTS, pool)
    with pytest.raises(select.SelectionError, match=rf"arm 'mine' \(policy 'issue37_policy'\) selected 3 prompts, fewer "
                                                    rf"than one step needs \(train.prompts_per_step = {cfg.train.prompts_per_step}\)"):
        select.run_select(cfg)
