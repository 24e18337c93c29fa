"""Budgets as checkpoints (issue 46): a run of a smaller budget made from a checkpoint of the
largest budget's run of the same trajectory, instead of training it.

Arms that differ only in their own ``train.max_completions`` (and ``charge_probe``) train the same
steps, seed by seed, under a schedule that does not depend on the budget
(:func:`diffgrpo.params.budgets.checkpoint_of`): a run of the smaller budget stops at the first step
whose generated completions reach it, and up to there it is the larger run. So the larger run
trains once, saves a checkpoint at each smaller budget's step (its Budget callback's marks), and
:func:`derive` writes each smaller run's folder from it: the same files a run of its own would
hold (its params, its steps and groups up to the step, its adapters at the steps it would have
saved, hard-linked, a manifest with its own key and ledger), plus ``derived_from`` (the run, its
key and the step). Evaluation and the report read it as any run.
``tests/test_budgets_as_checkpoints.py`` checks that a derived run's adapter, steps and groups are
those of the same run trained on its own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd

from diffgrpo.models import devices
from diffgrpo.store import artifacts, layout
from diffgrpo.store.run_folder import RunFolder
from diffgrpo.tasks import splits
from diffgrpo.train import ledger
from diffgrpo.train import run as training


class NotDerivable(Exception):
    """The longer run holds no checkpoint at the step a budget ends (trained before its marks)."""


def budget_step(groups: pd.DataFrame, budget: int, steps_done: int) -> tuple[int, bool]:
    """The step a run of ``budget`` training completions stops at, read from the longer run's
    groups: the first whose completions, counted from the first step, reach it (the Budget
    callback's rule), and True; or the longer run's last step and False where it never did (its
    ``max_steps`` came first: a run of the smaller budget would have stopped there too)."""
    per_step = groups.groupby("step")["rewards"].apply(lambda r: int(sum(len(x) for x in r))).sort_index()
    total = per_step.cumsum()
    reached = total[total >= budget]
    if len(reached):
        return int(reached.index[0]), True
    return int(steps_done), False


def derive(spec, parent) -> Path:
    """Write the run ``spec`` says (a :class:`~diffgrpo.train.launch.RunSpec`) from the finished
    run ``parent`` of its trajectory (module docstring); nothing when it is there already.
    :class:`NotDerivable` when the parent has no checkpoint at the step (the run then trains on
    its own). The caller holds neither run's lock; this takes the derived run's."""
    cfg = spec.arm_cfg
    rows, max_steps, _, key = training.identity(spec)
    ledger.check_probe(cfg, spec.arm, spec.selection)
    folder = RunFolder(spec.folder)
    with artifacts.exclusive(spec.folder):
        manifest, done = folder.previous(key, max_steps, True)
        if done:
            return spec.folder
        pfolder = RunFolder(parent.folder)
        pman = artifacts.read_manifest(pfolder.manifest_path, "03_train")
        if pman is None or pman.get("status") != "complete":
            raise RuntimeError(f"{parent.folder}: run {layout.run_id(parent.arm, parent.seed)} is not finished; "
                               f"{layout.run_id(spec.arm, spec.seed)} is a checkpoint of it (train.budgets_as_checkpoints)")
        groups = artifacts.read_parquet(pfolder.groups, "03_train")
        steps = artifacts.read_parquet(pfolder.steps, "03_train")
        step, spent = budget_step(groups, cfg.train.max_completions, pman["steps_done"])
        have = layout.list_checkpoints(pfolder.checkpoints)
        if step not in have:
            raise NotDerivable(f"{parent.folder}: no checkpoint at step {step}, where "
                               f"{layout.run_id(spec.arm, spec.seed)}'s budget of {cfg.train.max_completions} "
                               "completions ends (the run was trained before that budget was an arm)")
        save_steps = cfg.train.save_steps
        keep = [s for s in have if s <= step and (s % save_steps == 0 or s == step)]
        if manifest is not None or spec.folder.exists():  # an unfinished run of its own: kept, never deleted
            artifacts.set_aside(spec.folder, "superseded")
        tmp = spec.folder.with_name(f".{spec.folder.name}.deriving")
        if tmp.exists():  # an interrupted derivation: ours, partial
            shutil.rmtree(tmp)
        out = RunFolder(tmp)
        out.write_params(cfg)
        trl_config = artifacts.read_json(parent.folder / layout.TRL_CONFIG, "03_train")
        if isinstance(trl_config.get("grpo"), dict) and "output_dir" in trl_config["grpo"]:
            trl_config["grpo"]["output_dir"] = str(folder.checkpoints)
        out.write_trl_config(trl_config)
        mine = groups[groups["step"] <= step].reset_index(drop=True)
        artifacts.write_parquet(out.steps, steps[steps["step"] <= step].reset_index(drop=True))
        artifacts.write_parquet(out.groups, mine)
        for s in keep:
            shutil.copytree(have[s], layout.checkpoint(out.checkpoints, s), copy_function=_link)
        mine_steps = steps[steps["step"] <= step]
        times = mine_steps.get("step_time", pd.Series(dtype=float))
        share = float(times.sum() / steps["step_time"].sum()) if "step_time" in steps and steps["step_time"].sum() > 0 \
            else step / max(pman["steps_done"], 1)
        earlier = (pman.get("ledger") or {}).get("train", {})
        seconds = {k: (earlier.get(f"{k}_seconds") or 0.0) * share for k in ("cpu", "gpu", "wall")}
        fields = training.manifest_fields(spec, key, rows, max_steps, splits.task_of(cfg), pman.get("num_processes", 1))
        record = ledger.ledger(cfg, spec.arm, mine.to_dict("records"), seconds)
        out.write_manifest({
            **fields, "resumed_from": [],
            "derived_from": {"run": layout.run_id(parent.arm, parent.seed), "key": layout.key_hash(pman["key"]),
                             "step": step, "seconds_share": round(share, 4)},
            "sha256": out.digests(),
            "seconds_this_session": 0.0,
            "mean_step_seconds": round(float(times.mean()), 3) if len(times) else None,
            "peak_memory": devices.max_memory(mine_steps.to_dict("records")),
            "train_loss": None,
            "completions_generated": record["train"]["completions_generated"],
            "budget_spent": spent,
            "ledger": record,
        }, "complete", step)
        tmp.rename(spec.folder)
    return spec.folder


def _link(src: str, dst: str) -> None:
    """A checkpoint's file: a hard link to the longer run's (an adapter is written once and never
    changed; deleting either copy keeps the other), a copy across file systems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
