"""How a run is launched (issue 39, diffgrpo.train.launch): every arm of every params file
resolves to the launch it should, before anything loads. A levels run (``curriculum: levels``)
with vLLM generating trains its levels apart; an arm that only selects by level (paper 002's
``eprli_grpo``, ``eprli_dynamic``) is a one-level run and trains in process, vLLM or not (it
once went "apart" and was recorded "stopped" every time); ``train.num_processes`` > 1 is an
accelerate launch; a process started by a launch trains in process."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo import params, select, train
from diffgrpo.store import artifacts, layout
from diffgrpo.train import launch

FILES = sorted(p.name for p in params.params_dir().glob("*.yaml") if p.name != params.DEFAULTS_FILE)


def expected_launch(cfg, arm) -> tuple[str, tuple]:
    """What the params say, read from the arm's definition, not from the launch module."""
    a = cfg.arm(arm)
    levels = tuple(lv.name for lv in cfg.eprli.levels) if a.curriculum == "levels" else (None,)
    if a.curriculum == "levels" and cfg.for_arm(arm).train.use_vllm:
        return "levels_apart", levels
    return ("accelerate" if cfg.for_arm(arm).train.num_processes > 1 else "in_process"), levels


@pytest.mark.parametrize("name", FILES)
def test_every_arm_of_every_params_file_resolves_to_its_launch(name):
    cfg = params.load(name)
    for arm in cfg.arms:
        for seed in cfg.train.seeds:
            spec = launch.resolve(cfg, arm.name, seed, processes_here=1)
            assert (spec.launch, spec.levels) == expected_launch(cfg, arm.name), (name, arm.name)
            # the folder and selection the stages use: a run's place does not move
            assert spec.folder == layout.run_dir(cfg.for_arm(arm.name), arm.name, seed)
            assert spec.selection == select.selection_path(cfg, arm.name, seed)
            assert spec.num_processes == cfg.for_arm(arm.name).train.num_processes
            assert spec.is_levels_run == train.is_levels_run(cfg, arm.name) == (spec.levels != (None,))
            assert spec.apart == train.levels_apart(cfg, arm.name)
            # a process a launch started (a level's, or one of accelerate's) trains in process
            assert launch.resolve(cfg, arm.name, seed, level=0, processes_here=1).launch == "in_process"
            assert launch.resolve(cfg, arm.name, seed, processes_here=spec.num_processes + 1).launch == "in_process"


def test_paper002_gpu_trains_only_eprli_apart():
    """paper002_gpu (use_vllm on): eprli's two levels apart; eprli_grpo and eprli_dynamic, which
    select the same prompts by level but train one level from train.*, in process."""
    cfg = params.load("paper002_gpu.yaml")
    assert cfg.train.use_vllm
    got = {a.name: (launch.resolve(cfg, a.name, 0, processes_here=1).launch,
                    launch.resolve(cfg, a.name, 0, processes_here=1).levels) for a in cfg.arms}
    assert got == {"eprli": ("levels_apart", ("level1", "level2")),
                   "eprli_grpo": ("in_process", (None,)), "eprli_dynamic": ("in_process", (None,))}
    # asked to go apart, a one-level run still trains in process (it has no level records to wait for)
    assert launch.resolve(cfg, "eprli_grpo", 0, apart=True, processes_here=1).launch == "in_process"
    # HF generation: every arm in process
    hf = cfg.replace(**{"train.use_vllm": False})
    assert {launch.resolve(hf, a.name, 0, processes_here=1).launch for a in hf.arms} == {"in_process"}


def test_several_processes_launch_through_accelerate_and_a_levels_run_per_level(tmp_path):
    cfg = params.load("paper002_gpu.yaml", overrides={"train.num_processes": 4})
    assert launch.resolve(cfg, "eprli_grpo", 0, processes_here=1).launch == "accelerate"
    spec = launch.resolve(cfg, "eprli", 0, processes_here=1)
    assert spec.launch == "levels_apart"
    cmd = launch.level_command(spec, tmp_path / "params.yaml", 1, progress=False)
    assert cmd[1:4] == ["-m", "accelerate.commands.launch", "--multi_gpu"]
    assert cmd[cmd.index("--num_processes") + 1] == "4" and cmd[-3:] == ["--level", "1", "--no-progress"]
    one = launch.level_command(launch.resolve(cfg.replace(**{"train.num_processes": 1}), "eprli", 0), tmp_path / "p.yaml",
                               0, progress=True)
    assert one == [sys.executable, "-m", "diffgrpo.train", str(tmp_path / "p.yaml"), "--arm", "eprli", "--seed", "0",
                   "--level", "0"]


def test_a_started_process_never_launches_again(monkeypatch, capsys):
    """The command line (what every launched process runs) resolves its own spec: with --level
    or under a launcher it trains in process, and never goes back through train_run."""
    trained = []
    monkeypatch.setattr(launch, "train_run", lambda *a, **kw: pytest.fail("train_run from a started process"))
    monkeypatch.setattr(launch, "_levels_apart", lambda *a, **kw: pytest.fail("levels apart from a started process"))
    monkeypatch.setattr(launch, "_accelerate", lambda *a, **kw: pytest.fail("accelerate from a started process"))
    monkeypatch.setattr(launch, "_in_process", lambda spec, **kw: trained.append(spec) or spec.folder)
    assert launch.main(["paper002_gpu", "--arm", "eprli", "--seed", "0", "--level", "1", "--no-progress"]) == 0
    monkeypatch.setenv("WORLD_SIZE", "4")  # one of accelerate's 4 processes
    assert launch.main(["paper002_gpu", "--arm", "eprli_grpo", "--seed", "0", "--set", "train.num_processes=4"]) == 0
    assert [(s.arm, s.level, s.processes_here, s.launch) for s in trained] == [
        ("eprli", 1, 1, "in_process"), ("eprli_grpo", None, 4, "in_process")]


def test_a_run_trains_on_the_selection_its_spec_names(tmp_path, monkeypatch):
    """Issue 45: train.run reads the run's selection where its RunSpec says (resolve works it out
    once), not at a path it works out again: a spec naming another file is what the run reads,
    though the study's own selection of the arm is there."""
    monkeypatch.setenv(artifacts.OUTPUTS_ENV, str(tmp_path))
    cfg = params.load("tiny")
    spec = launch.resolve(cfg, "hard", 0, processes_here=1)
    artifacts.write_parquet(spec.selection, pd.DataFrame({"id": ["p0"], "p_hat": [0.5]}))  # the study's own
    elsewhere = dataclasses.replace(spec, selection=tmp_path / "elsewhere" / "hard.parquet")
    with pytest.raises(layout.NotRunYet, match=rf"^{elsewhere.selection}: no selection 'hard' yet"):
        launch.launch(elsewhere, progress=False)
