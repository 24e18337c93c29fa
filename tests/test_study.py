"""The whole study through its runner (papermill, as `make study` runs it) on params/tiny.yaml.

Checks the values the notebooks record, with tolerances, and that a bad parameter stops the
study before any notebook runs. When the nbval notebooks ran earlier in the session the
stages find their work done and only re-read it.
"""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo.store import layout
from diffgrpo.study import notebooks
from diffgrpo import params, select, study

from conftest import executed_notebooks, machine_paths, notebook_blemishes, tensorboard_scalars

ROOT = Path(__file__).resolve().parents[1]
from diffgrpo.params import ParamsError

pytestmark = pytest.mark.e2e  # the whole study through its notebooks: `make test`, not `make test-unit`


@pytest.fixture(scope="module")
def tiny_study():
    assert study.main(["tiny", "--kernel", "python3"]) == 0
    return Path(os.environ["DIFFGRPO_OUTPUTS"]) / "tiny"


def test_study_writes_every_stage_and_the_report(tiny_study):
    cfg = params.load("tiny")
    for nb in executed_notebooks(tiny_study, cfg):
        assert nb.exists(), nb
    timings = json.loads((tiny_study / "timings.json").read_text())
    assert set(timings["stages"]) == set(notebooks.STAGES) and timings["wall_s"] > 0
    assert set(timings["notebooks"]) == {"01_probe", "02_select", "05_analyze", "04_evaluate base"} | {
        f"{stage} {layout.run_id(a, s)}" for stage in ("03_train", "04_evaluate") for a, s in layout.planned_runs(cfg)}
    report = tiny_study / "report"
    for name in ("table1_gain.md", "table2_learnable.md", "fig2_accuracy_by_checkpoint.png",
                 "fig3_learnable_vs_gain.png", "fig_p_hat.png"):
        assert (report / name).stat().st_size > 0


def test_the_executed_notebooks_read_as_pages(tiny_study):
    """What a researcher opens after `make study`: no warning, traceback or machine path in any
    executed notebook, and each long loop's progress as a few lines (diffgrpo.progress "record",
    which the runner asks for), not a redraw per step."""
    cfg = params.load("tiny")
    found = [b for nb in executed_notebooks(tiny_study, cfg) for b in notebook_blemishes(nb, machine_paths())]
    assert found == []
    train = json.loads((tiny_study / "notebooks" / "03_train" / "hard-seed0.ipynb").read_text())
    printed = ["".join(o.get("text", "")) for c in train["cells"] for o in c.get("outputs", [])]
    record = [line for text in printed for line in text.splitlines() if line.startswith("hard-seed0: ")]
    assert len(record) <= 5  # none when the nbval notebooks of this session trained the run already
    assert not record or record[-1].startswith(f"hard-seed0: {cfg.train.max_steps}/{cfg.train.max_steps} step")
    assert not any("Loading weights" in text for text in printed)


def test_each_run_has_its_curves_in_tensorboard(tiny_study):
    """train.report_to: tensorboard (the default): `tensorboard --logdir outputs/<study>/runs`
    shows each run's training curves and its accuracy at each evaluated checkpoint."""
    cfg = params.load("tiny")
    for arm, seed in layout.planned_runs(cfg):
        run = tiny_study / "runs" / layout.run_id(arm, seed)
        train_curves = tensorboard_scalars(layout.tensorboard_dir(run))
        steps = pd.read_parquet(run / "steps.parquet")
        assert sorted(train_curves["train/reward"]) == list(steps["step"])
        evals = tensorboard_scalars(layout.tensorboard_dir(run) / "eval-test")
        summary = pd.read_parquet(tiny_study / "eval" / layout.run_id(arm, seed) / "summary.parquet")
        assert evals["eval/test/greedy_acc"] == pytest.approx(dict(zip(summary["step"], summary["greedy_acc"])))
        assert 0 in evals["eval/test/pass@1"]  # the base model is step 0


def test_summary_json_agrees_with_the_run_files(tiny_study):
    cfg = params.load("tiny")
    summary = json.loads((tiny_study / "report" / "summary.json").read_text())
    assert {"runs", "regression", "paper_regression", "metric", "best", "verdict"} <= set(summary)
    runs = pd.DataFrame(summary["runs"])
    assert sorted(runs["strategy"]) == sorted(a.name for a in cfg.arms)
    assert (runs["steps"] == cfg.train.max_steps).all()
    base = pd.read_parquet(tiny_study / "eval" / "base" / "summary.parquet")["greedy_acc"].iloc[0]
    for row in runs.itertuples():
        groups = pd.read_parquet(tiny_study / "runs" / f"{row.strategy}-seed{row.seed}" / "groups.parquet")
        # one row per generated group; each feeds num_iterations optimizer steps
        generations = -(-cfg.train.max_steps // cfg.train.num_iterations)
        assert len(groups) == generations * cfg.train.prompts_per_step
        assert row.learnable_pct == pytest.approx(100 * groups["learnable"].mean(), abs=1e-3)
        final = pd.read_parquet(tiny_study / "eval" / f"{row.strategy}-seed{row.seed}" / "summary.parquet")
        final = final.loc[final["step"].idxmax(), "greedy_acc"]
        assert row.base_acc == pytest.approx(base, abs=1e-3)
        assert row.gain_pp == pytest.approx(100 * (final - base), abs=1e-2)
    assert summary["regression"]["n"] == len(runs)
    assert summary["paper_regression"]["r2"] == pytest.approx(0.641, abs=1e-3)


def test_selections_hold_the_budget(tiny_study):
    cfg = params.load("tiny")
    for arm in cfg.arms:
        for seed in cfg.train.seeds if select.per_seed(arm.select) else [None]:  # random: one file per seed
            name = arm.name if seed is None else f"{arm.name}-seed{seed}"
            sel = pd.read_parquet(tiny_study / "select" / f"{name}.parquet")
            assert len(sel) == int(cfg.select.budget_frac * cfg.dataset.pool_size)


def test_a_misspelled_override_stops_the_study_before_any_notebook(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    with pytest.raises(ParamsError, match=r"train\.max_stpes"):
        study.main(["tiny", "--set", "train.max_stpes=3"])
    assert not any(tmp_path.iterdir())


def test_an_unknown_notebook_parameter_is_an_error(tmp_path):
    with pytest.raises(notebooks.NotebookParameterError, match="param_file"):
        notebooks.run_notebook("02_select", tmp_path / "x.ipynb", {"param_file": "tiny"})
    assert not (tmp_path / "x.ipynb").exists()


def test_one_run_alone_by_papermill_with_arm_and_seed(tiny_study, tmp_path):
    """What the runner executes per run, and what a user types: `papermill 03_train.ipynb out.ipynb
    -p params_file tiny -p arm hard -p seed 0`. The study's run is finished, so it is only read."""
    import papermill

    done = tiny_study / "runs" / "hard-seed0" / "manifest.json"
    before = done.read_text()
    out = tmp_path / "hard-seed0.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / "03_train.ipynb"), str(out), kernel_name="python3",
                               parameters={"params_file": "tiny", "arm": "hard", "seed": 0, "progress": False},
                               progress_bar=False, cwd=str(ROOT / "notebooks"))
    printed = "".join("".join(o.get("text", "")) for c in json.loads(out.read_text())["cells"] for o in c.get("outputs", []))
    assert "1 runs: hard-seed0" in printed and done.read_text() == before
    with pytest.raises(papermill.PapermillExecutionError, match=r"arm 'hardest' is not an arm of study 'tiny'"):
        papermill.execute_notebook(str(ROOT / "notebooks" / "04_evaluate.ipynb"), str(tmp_path / "x.ipynb"),
                                   kernel_name="python3", parameters={"params_file": "tiny", "arm": "hardest"},
                                   progress_bar=False, cwd=str(ROOT / "notebooks"))
