"""Seeds in blocks (issue 46): the group-sequential rule's boundaries and decisions
(diffgrpo.stats.sequential), and a finished study that takes more seeds trains only the new runs
and looks again (the report's ``sequential`` section)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from diffgrpo import params, study
from diffgrpo.stats import sequential
from diffgrpo.store import layout

ROOT = Path(__file__).resolve().parents[1]


def test_one_look_is_the_plain_test_and_the_looks_together_spend_alpha():
    assert sequential.boundaries([1.0]) == [pytest.approx(1.959964, abs=1e-5)]
    fractions = [0.25, 0.5, 0.75, 1.0]
    c = sequential.boundaries(fractions)
    assert all(a > b for a, b in zip(c, c[1:])) and c[0] > 3.5  # O'Brien-Fleming: strict early, near 1.96 last
    # the rejection probability under the null, exactly: 1 - P(every |Z_k| < c_k) = alpha(1) = 0.05
    t = np.asarray(fractions)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    assert 1 - sequential._inside(c, cov) == pytest.approx(0.05, abs=2e-4)
    # and by simulation of the looks' z as a Brownian motion in t: 4,000 nulls, Monte Carlo se 0.34 points
    rng = np.random.default_rng(0)
    steps = rng.normal(size=(4000, 4)) * np.sqrt(np.diff(np.r_[0.0, t]))
    z = np.cumsum(steps, axis=1) / np.sqrt(t)
    assert abs((np.abs(z) >= np.asarray(c)).any(axis=1).mean() - 0.05) < 0.012
    # the nominal levels are the boundaries' two-sided tails
    assert sequential.nominal_levels([0.5, 1.0])[1] == pytest.approx(0.0478, abs=2e-4)


def test_a_look_says_differs_equivalent_another_block_or_not_resolved():
    narrow = lambda level: (-0.8, 0.9)  # noqa: E731
    wide = lambda level: (-4.0, 3.0)  # noqa: E731
    assert sequential.looks(2, 7) == [2, 4, 6, 7]
    first = sequential.decide(0.003, wide, 2, 2, 6, margin=1.0)
    assert first.decision == "another block" and first.level < 0.003  # p 0.003 is not enough at the first look
    assert sequential.decide(1e-5, wide, 2, 2, 6, margin=1.0).decision == "differs"
    assert sequential.decide(0.6, narrow, 4, 2, 6, margin=1.0).decision == "equivalent"
    assert sequential.decide(0.6, narrow, 4, 2, 6, margin=None).decision == "another block"
    assert sequential.decide(0.6, wide, 6, 2, 6, margin=1.0).decision == "not resolved"
    # the declared question's m contrasts share alpha: a stricter level each
    assert sequential.decide(0.6, wide, 6, 2, 6, None, m=3).level < sequential.decide(0.6, wide, 6, 2, 6, None).level
    with pytest.raises(ValueError, match="not a look"):
        sequential.decide(0.5, wide, 3, 2, 6, None)


def test_the_rule_is_checked_with_the_params():
    with pytest.raises(params.ParamsError, match="analyze.sequential"):
        params.load("tiny", overrides={"analyze.sequential.block": 2})
    with pytest.raises(params.ParamsError, match="declare it"):
        params.load("tiny", overrides={"analyze.primary": [], "analyze.sequential.block": 1,
                                       "analyze.sequential.max_seeds": 2})
    with pytest.raises(params.ParamsError, match="margin is the rule's"):
        params.load("tiny", overrides={"analyze.sequential.margin": 1.0})


def _study_file(folder, seeds):
    path = folder / "blocks.yaml"
    path.write_text(yaml.safe_dump({
        "include": str(ROOT / "params" / "tiny.yaml"), "study": "seeds_in_blocks", "arms": ["hard", "random"],
        "dataset": {"pool_size": 16, "test_size": 8}, "probe": {"k": 2},
        "train": {"seeds": seeds, "max_steps": 1, "save_steps": 1}, "evaluate": {"sets": [], "n_samples": 0, "pass_k": []},
        "analyze": {"primary": ["hard - random"], "sequential": {"block": 1, "max_seeds": 2, "margin": 50.0}}}))
    return path


@pytest.mark.e2e
def test_a_finished_study_takes_more_seeds_and_trains_only_the_new_runs(tmp_path):
    path = _study_file(tmp_path, [0])
    assert study.main([str(path), "--kernel", "python3"]) == 0
    cfg = params.load(path)
    root = layout.study_dir(cfg)
    first = json.loads((root / "report" / layout.REPORT_SUMMARY).read_text())["sequential"]
    assert first["n_seeds"] == 1 and first["looks"] == [1, 2] and len(first["rows"]) == 1
    assert first["rows"][0]["decision"] in ("differs", "equivalent", "another block")
    # a run's training files and its evaluation (the TensorBoard copy of its eval curves is written
    # anew at each evaluation by design: diffgrpo.evaluate.write_curves)
    old = {p: p.stat().st_mtime_ns for rid in ("hard-seed0", "random-seed0")
           for folder in (root / "runs" / rid, layout.eval_dir(cfg, rid))
           for p in folder.rglob("*") if p.is_file() and "eval-" not in p.parent.name}
    probe = {p: p.stat().st_mtime_ns for p in (root / "probe").rglob("*.parquet")}
    assert old and probe

    path = _study_file(tmp_path, [0, 1])
    assert study.main([str(path), "--kernel", "python3"]) == 0
    # the seed-0 runs and the probe are read, not trained or evaluated again: no file of theirs was rewritten
    assert {p: p.stat().st_mtime_ns for p in old} == old
    assert {p: p.stat().st_mtime_ns for p in probe} == probe
    for rid in ("hard-seed1", "random-seed1"):
        assert json.loads((root / "runs" / rid / "manifest.json").read_text())["status"] == "complete"
    second = json.loads((root / "report" / layout.REPORT_SUMMARY).read_text())["sequential"]
    assert second["n_seeds"] == 2 and second["rows"][0]["decision"] in ("differs", "equivalent", "not resolved")
    assert "Look 2 of 2" in (root / "report" / "sequential.md").read_text()
    # the verdict reads the question by the rule, which counts the looks, not by the fixed-sample test alone
    verdict = json.loads((root / "report" / layout.REPORT_SUMMARY).read_text())["verdict"]
    assert "decision by its group-sequential rule" in verdict and "Look 2 of 2" in verdict
    # the next block is planned from the study's own runs (two seeds now: components to take)
    from diffgrpo.analysis import power

    assert "this study's own finished runs" in power.plan_lines(params.load(path))[0]


def test_the_plan_prints_what_each_later_look_would_detect():
    from diffgrpo.analysis import power

    cfg = params.load("online_vs_offline", overrides={"analyze.sequential": {"block": 3, "max_seeds": 9, "margin": 2.0}})
    line = power.plan_lines(cfg)[-1]
    assert line.strip().startswith("seeds in blocks, the declared question at each look") and "alpha / 6" in line
    sizes = [float(part.split(": ")[1].split()[0]) for part in line.split(": ", 1)[1].split("; ")]
    assert len(sizes) == 3 and sizes[0] > sizes[1] > sizes[2] > 0
