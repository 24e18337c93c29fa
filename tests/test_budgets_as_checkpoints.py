"""Budgets as checkpoints (issue 46): a method's smaller budgets are checkpoints of its largest
budget's run (diffgrpo.params.budgets.checkpoint_of, diffgrpo.train.derived), and a run made that
way is the run its budget would have trained on its own: the same adapter, steps and groups."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from safetensors.torch import load_file

from diffgrpo import params, tasks, train
from diffgrpo.params import budgets
from diffgrpo.store import artifacts, layout
from diffgrpo.study.graph import jobs
from diffgrpo.train import derived

from test_train import TASK_OPTIONS, EvenLength, one_thread, tiny_model  # noqa: F401  (fixtures)


def test_the_online_vs_offline_study_trains_one_run_per_method_and_seed():
    cfg = params.load("online_vs_offline")
    of = budgets.checkpoint_of(cfg)
    assert of["middle.b576"] == of["middle.b960"] == "middle.b1344" and "middle.b1344" not in of
    # the probe's charge does not change a step: random with the probe charged is a checkpoint of random's run
    assert of["random_charged.b1344"] == of["random_charged.b576"] == of["random.b960"] == "random.b1344"
    assert budgets.checkpoint_marks(cfg, "random.b1344") == [384, 576, 768, 960, 1152]
    names = [j.name for j in jobs(cfg, {"params_file": "online_vs_offline", "overrides": {}})]
    trains = [n for n in names if n.startswith("03_train ")]
    assert len(trains) == 10 * 3  # ten trajectories (random and random_charged are one) x 3 seeds
    evaluate = {j.name: j.after for j in jobs(cfg, {"params_file": "online_vs_offline", "overrides": {}})}
    assert "03_train middle.b1344-seed2" in evaluate["04_evaluate middle.b576-seed2"]
    # switched off, or a budget the study does not set per arm: every arm trains its own runs
    assert budgets.checkpoint_of(cfg.replace(**{"train.budgets_as_checkpoints": False})) == {}
    assert budgets.checkpoint_of(params.load("tiny")) == {}


def test_a_budget_ends_at_the_first_step_that_reaches_it():
    groups = pd.DataFrame({"step": [1, 1, 2, 3, 3], "rewards": [[0] * 4, [1] * 4, [0] * 8, [1] * 4, [0] * 4]})
    assert derived.budget_step(groups, 8, 3) == (1, True)
    assert derived.budget_step(groups, 9, 3) == (2, True)
    assert derived.budget_step(groups, 24, 3) == (3, True)
    assert derived.budget_step(groups, 25, 3) == (3, False)  # the ceiling (max_steps) came first


def _cfg(tiny_model, **train):
    tasks.register(EvenLength)
    arms = [{"name": f"hard.b{b}", "select": "hard", "train": {"max_completions": b}} for b in (16, 40)]
    cfg = params.load(overrides={
        "study": "nested", "model.name": "tiny", "model.path": str(tiny_model), "arms": arms,
        "dataset.task": EvenLength.name, "dataset.task_options": TASK_OPTIONS,
        "train.max_steps": 8, "train.prompts_per_step": 2, "train.group_size": 4,  # 8 completions a step
        "train.max_completion_length": 8, "train.save_steps": 3, "train.learning_rate": 1e-3,
        "train.lora.r": 4, "train.lora.alpha": 8, "train.warmup_ratio": 0.25,
        **{f"train.{k}": v for k, v in train.items()}})
    pool = tasks.get(EvenLength.name, **TASK_OPTIONS).load("train")
    sel = pd.DataFrame({"id": pool["id"][:6], "p_hat": np.linspace(0, 1, 6)})
    for a in ("hard.b16", "hard.b40"):
        artifacts.write_parquet(layout.selection_file(cfg, a), sel)
    return cfg


def _adapter(run, step):
    return load_file(str(layout.checkpoint(run / layout.CHECKPOINTS, step) / "adapter_model.safetensors"))


@pytest.mark.e2e
def test_a_budget_s_run_made_from_a_checkpoint_is_the_run_it_would_have_trained(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "outputs"))
    cfg = _cfg(tiny_model)
    assert budgets.checkpoint_of(cfg) == {"hard.b16": "hard.b40"}
    small = train.train_run(cfg, "hard.b16", seed=0, progress=False)  # trains hard.b40 once, writes hard.b16 from it
    large = layout.run_dir(cfg.for_arm("hard.b40"), "hard.b40", 0)
    big = json.loads((large / "manifest.json").read_text())
    # 16 completions end at step 2 (a mark: saved though save_steps is 3), 40 at step 5
    assert big["steps_done"] == 5 and big["budget_spent"]
    assert sorted(layout.list_checkpoints(large / layout.CHECKPOINTS)) == [2, 3, 5]
    manifest = json.loads((small / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["steps_done"] == 2 and manifest["budget_spent"]
    assert manifest["derived_from"]["run"] == "hard.b40-seed0" and manifest["derived_from"]["step"] == 2
    assert sorted(layout.list_checkpoints(small / layout.CHECKPOINTS)) == [2]  # the checkpoints a run of its own saves
    assert manifest["ledger"]["train"]["completions_generated"] == 16
    kept = tmp_path / "derived"
    shutil.copytree(small, kept)
    before = (small / "manifest.json").stat().st_mtime_ns
    train.train_run(cfg, "hard.b16", seed=0, progress=False)  # finished: nothing is written again
    assert (small / "manifest.json").stat().st_mtime_ns == before

    # the same run trained on its own (budgets_as_checkpoints off; not in the run's key)
    alone = train.train_run(cfg.replace(**{"train.budgets_as_checkpoints": False}), "hard.b16", seed=0,
                            progress=False, force=True)
    own = json.loads((alone / "manifest.json").read_text())
    assert "derived_from" not in own and own["key"] == manifest["key"] and own["steps_done"] == 2
    a, b = _adapter(kept, 2), _adapter(alone, 2)
    assert a.keys() == b.keys() and all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
    later = _adapter(large, 5)  # training moved the adapter: equal at step 2 is no accident of a frozen one
    assert not all(np.array_equal(a[k].numpy(), later[k].numpy()) for k in a)
    g1, g2 = pd.read_parquet(kept / layout.GROUPS), pd.read_parquet(alone / layout.GROUPS)
    assert g1[["step", "prompt_id"]].equals(g2[["step", "prompt_id"]])
    assert g1["rewards"].map(list).tolist() == g2["rewards"].map(list).tolist()
    s1, s2 = pd.read_parquet(kept / layout.STEPS), pd.read_parquet(alone / layout.STEPS)
    assert list(s1["step"]) == list(s2["step"]) == [1, 2]
    assert np.allclose(s1["loss"], s2["loss"]) and np.allclose(s1["learning_rate"], s2["learning_rate"])
    assert manifest["ledger"]["total_rollouts"] == own["ledger"]["total_rollouts"]


@pytest.mark.e2e
def test_a_budget_the_longer_run_kept_no_checkpoint_for_trains_on_its_own(tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path / "outputs"))
    cfg = _cfg(tiny_model, max_steps=3)
    train.train_run(cfg.replace(**{"train.budgets_as_checkpoints": False}), "hard.b40", seed=0, progress=False)
    run = train.train_run(cfg, "hard.b16", seed=0, progress=False)  # hard.b40 was trained before hard.b16 was an arm
    assert "no checkpoint at step 2" in capsys.readouterr().out
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["steps_done"] == 2 and "derived_from" not in manifest
