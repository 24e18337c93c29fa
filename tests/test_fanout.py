"""The study's notebook executions as a job graph: what waits for what, how many run at once,
and what a failed job does to the rest. The executor's jobs here are short scripts standing in
for notebooks (the whole study through real notebooks is tests/test_study.py)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from diffgrpo import fanout, layout, params, study
from diffgrpo.notebooks import StageFailed


@dataclass(frozen=True)
class ScriptJob(fanout.NotebookJob):
    """Records its start and end in ``<out_path>.json``, sleeping ``seconds`` between; fails if asked."""

    def argv(self, kernel):
        p = self.parameters
        code = (f"import json, sys, time; t0 = time.time(); time.sleep({p.get('seconds', 0.3)}); "
                f"json.dump({{'start': t0, 'end': time.time()}}, open({str(self.out_path)!r}, 'w'))\n"
                + (f"print('error: {self.stage}: ValueError: {p['fail']}', file=sys.stderr); sys.exit(1)"
                   if p.get("fail") else ""))
        return [sys.executable, "-c", code]


def job(tmp_path: Path, name: str, after=(), **p) -> ScriptJob:
    return ScriptJob(name, "03_train", tmp_path / f"{name}.json", p, tuple(after))


def spans(tmp_path: Path) -> dict[str, tuple[float, float]]:
    return {p.stem: (d["start"], d["end"]) for p in tmp_path.glob("*.json")
            for d in [json.loads(p.read_text())]}


def test_jobs_wait_for_what_they_read_and_never_exceed_the_workers(tmp_path):
    jobs = [job(tmp_path, "probe"), job(tmp_path, "base"), job(tmp_path, "train-a", ["probe"]),
            job(tmp_path, "train-b", ["probe"]), job(tmp_path, "eval-a", ["train-a", "base"]),
            job(tmp_path, "report", ["eval-a", "train-b"])]
    seconds = fanout.LocalExecutor(workers=2, progress=False, poll_s=0.05).run(jobs)
    assert set(seconds) == {j.name for j in jobs}
    s = spans(tmp_path)
    for j in jobs:
        for a in j.after:
            assert s[a][1] <= s[j.name][0], f"{j.name} started before {a} ended"
    events = sorted([(t0, 1) for t0, _ in s.values()] + [(t1, -1) for _, t1 in s.values()])
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    assert peak == 2  # two at a time: the probe beside the base model's evaluation, and so on


def test_a_failed_job_names_itself_and_its_dependents_never_start(tmp_path):
    jobs = [job(tmp_path, "train-a", fail="loss is nan", seconds=0.1), job(tmp_path, "train-b", seconds=1.0),
            job(tmp_path, "eval-a", ["train-a"]), job(tmp_path, "report", ["eval-a", "train-b"])]
    with pytest.raises(StageFailed, match=r"^train-a: ValueError: loss is nan\n  its output is in .*train-a\.log; "
                                          r"not started: 2 job\(s\)"):
        fanout.LocalExecutor(workers=2, progress=False, poll_s=0.05).run(jobs)
    assert set(spans(tmp_path)) == {"train-a", "train-b"}  # the running job was let finish


@pytest.mark.parametrize("jobs, error", [
    ([("a", ["b"]), ("b", ["a"])], "cycle"),
    ([("a", ["nope"])], "unknown job"),
    ([("a", []), ("a", [])], "duplicate"),
])
def test_a_malformed_graph_is_refused_before_anything_runs(tmp_path, jobs, error):
    with pytest.raises(ValueError, match=error):
        fanout.LocalExecutor(progress=False).run([job(tmp_path, n, after) for n, after in jobs])
    assert not list(tmp_path.iterdir())


def test_the_study_graph_trains_and_evaluates_each_run_alone():
    cfg = params.load("tiny")
    nb = {"params_file": "tiny", "overrides": {"train.max_steps": 4}}
    jobs = {j.name: j for j in study.jobs(cfg, nb)}
    runs = [layout.run_id(a, s) for a, s in layout.planned_runs(cfg)]
    assert list(jobs) == ["01_probe", "02_select", "04_evaluate base",
                          *[f"{stage} {rid}" for rid in runs for stage in ("03_train", "04_evaluate")], "05_analyze"]
    assert jobs["04_evaluate base"].after == ()  # beside the probe
    for (arm, seed), rid in zip(layout.planned_runs(cfg), runs):
        train, ev = jobs[f"03_train {rid}"], jobs[f"04_evaluate {rid}"]
        assert train.after == ("02_select",) and ev.after == (f"03_train {rid}", "04_evaluate base")
        for j in (train, ev):
            assert j.parameters == {**nb, "overrides": {"train.max_steps": 4, "workers": 1}, "arm": arm, "seed": seed}
            assert j.out_path == layout.notebooks_dir(cfg) / j.stage / f"{rid}.ipynb"
    assert set(jobs["05_analyze"].after) == set(jobs) - {"05_analyze"}
    assert jobs["01_probe"].parameters == nb  # one notebook for the stage: the study's own workers

    # a stage left out is taken as done: nothing waits for it
    only = study.jobs(cfg, nb, stages=["03_train", "04_evaluate"])
    after = {j.name: j.after for j in only}
    assert after[f"03_train {runs[0]}"] == () and "01_probe" not in after and "05_analyze" not in after
    assert after[f"04_evaluate {runs[0]}"] == (f"03_train {runs[0]}", "04_evaluate base")


def test_the_planned_runs_refuse_an_arm_or_seed_the_study_does_not_have():
    cfg = params.load("tiny")
    with pytest.raises(ValueError, match=r"arm 'hardest' is not an arm of study 'tiny'; its arms are \['hard'"):
        layout.planned_runs(cfg, "hardest")
    with pytest.raises(ValueError, match=r"seed 7 is not one of the train.seeds \[0\] of study 'tiny'"):
        layout.planned_runs(cfg, "hard", 7)
    assert layout.planned_runs(cfg, "easy", 0) == [("easy", 0)]
