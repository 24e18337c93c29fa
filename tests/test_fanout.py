"""The study's notebook executions as a job graph: what waits for what, how many run at once,
and what a failed job does to the rest. The executor's jobs here are short scripts standing in
for notebooks (the whole study through real notebooks is tests/test_study.py)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from diffgrpo.study import executors, graph
from diffgrpo.store import layout
from diffgrpo import params
from diffgrpo.study.notebooks import StageFailed


@dataclass(frozen=True)
class ScriptJob(executors.NotebookJob):
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
    seconds = executors.LocalExecutor(workers=2, progress=False, poll_s=0.05).run(jobs)
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
        executors.LocalExecutor(workers=2, progress=False, poll_s=0.05).run(jobs)
    assert set(spans(tmp_path)) == {"train-a", "train-b"}  # the running job was let finish


@pytest.mark.parametrize("jobs, error", [
    ([("a", ["b"]), ("b", ["a"])], "cycle"),
    ([("a", ["nope"])], "unknown job"),
    ([("a", []), ("a", [])], "duplicate"),
])
def test_a_malformed_graph_is_refused_before_anything_runs(tmp_path, jobs, error):
    with pytest.raises(ValueError, match=error):
        executors.LocalExecutor(progress=False).run([job(tmp_path, n, after) for n, after in jobs])
    assert not list(tmp_path.iterdir())


def test_the_study_graph_trains_and_evaluates_each_run_alone():
    cfg = params.load("tiny")
    nb = {"params_file": "tiny", "overrides": {"train.max_steps": 4}}
    jobs = {j.name: j for j in graph.jobs(cfg, nb)}
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
    only = graph.jobs(cfg, nb, stages=["03_train", "04_evaluate"])
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


def test_an_earlier_stage_then_the_highest_priority_starts_first_and_ties_keep_the_list_order(tmp_path):
    ranks = {"a": 1.0, "b": 5.0, "c": 3.0, "d": 3.0}
    jobs = [ScriptJob(n, "03_train", tmp_path / f"{n}.json", {"seconds": 0.05}, (), (lambda r=r: r))
            for n, r in ranks.items()] + [job(tmp_path, "e", seconds=0.05)]  # no priority: rank 0
    jobs += [ScriptJob("ev", "04_evaluate", tmp_path / "ev.json", {"seconds": 0.05}, (), lambda: 9.0),
             ScriptJob("probe", "01_probe", tmp_path / "probe.json", {"seconds": 0.05})]
    executors.LocalExecutor(workers=1, progress=False, poll_s=0.01).run(jobs)
    s = spans(tmp_path)
    assert sorted(s, key=lambda n: s[n][0]) == ["probe", "b", "c", "d", "a", "e", "ev"]


def test_the_study_starts_the_run_with_the_longest_completions_first(tmp_path, monkeypatch):
    """training_cost reads the probe's mean completion length over each run's selection (and
    the arm's own steps): the hard selection's long traces outrank the easy one's."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    import pandas as pd

    cfg = params.load("tiny", overrides={"arms": ["hard", "easy", {"name": "easy_long", "select": "easy",
                                                                     "train": {"max_steps": 40}}]})
    probe = layout.probe_dir(cfg)
    probe.mkdir(parents=True)
    pd.DataFrame({"id": ["p1", "p2", "p3", "p4"], "mean_tokens": [60.0, 50.0, 14.0, 20.0]}).to_parquet(probe / "prompts.parquet")
    layout.select_dir(cfg).mkdir(parents=True)
    for arm, ids in {"hard": ["p1", "p2"], "easy": ["p3", "p4"], "easy_long": ["p3", "p4"]}.items():
        pd.DataFrame({"id": ids}).to_parquet(layout.selection_file(cfg, arm))
    t = cfg.train
    assert graph.training_cost(cfg, "hard", 0) == t.max_steps * t.prompts_per_step * t.group_size * 55.0
    assert graph.training_cost(cfg, "easy", 0) == t.max_steps * t.prompts_per_step * t.group_size * 17.0
    assert graph.training_cost(cfg, "easy_long", 0) == 40 * t.prompts_per_step * t.group_size * 17.0
    nb = {"params_file": "tiny", "overrides": {}}
    ranks = {j.name: j.rank() for j in graph.jobs(cfg, nb)}
    assert ranks["03_train easy_long-seed0"] > ranks["03_train hard-seed0"] > ranks["03_train easy-seed0"] > 0
    assert ranks["04_evaluate hard-seed0"] == 0  # evaluations fill in behind the trainings
    # before the selection exists, the length limit stands in
    (layout.selection_file(cfg, "hard")).unlink()
    assert graph.training_cost(cfg, "hard", 0) == t.max_steps * t.prompts_per_step * t.group_size * t.max_completion_length


@dataclass(frozen=True)
class BurnJob(executors.NotebookJob):
    """Spends ``burn`` CPU seconds in a child process it waits for (as a notebook's kernel)."""

    def argv(self, kernel):
        burn = self.parameters["burn"]
        child = f"import time; t = time.process_time()\nwhile time.process_time() - t < {burn}: pass"
        return [sys.executable, "-c", f"import subprocess, sys, time; time.sleep(0.2); "
                                      f"subprocess.run([sys.executable, '-c', {child!r}], check=True)"]


def test_the_executor_counts_each_jobs_cpu_seconds_its_childrens_included(tmp_path):
    jobs = [BurnJob("busy", "03_train", tmp_path / "busy.ipynb", {"burn": 1.0}),
            BurnJob("idle", "03_train", tmp_path / "idle.ipynb", {"burn": 0.0})]
    cpu = {}
    seconds = executors.LocalExecutor(workers=2, progress=False, poll_s=0.05).run(
        jobs, on_done=lambda name, s, c: cpu.update({name: c}))
    assert set(cpu) == {"busy", "idle"}
    # the child's 1.0 s is counted; the two jobs' own starts differ by a little on a busy machine
    assert cpu["busy"] >= 1.0 and 0.7 <= cpu["busy"] - cpu["idle"] <= 1.5
    assert cpu["idle"] < seconds["idle"]  # it slept: wall time is not CPU time


@dataclass(frozen=True)
class KernelJob(executors.NotebookJob):
    """Executes the notebook ``parameters["notebook"]`` with papermill, as a stage's job does (its
    Jupyter kernel started by jupyter_client, a child of the job), then writes its own CPU seconds
    (without its children's) to ``<out_path>``."""

    def argv(self, kernel):
        nb = self.parameters["notebook"]
        code = ("import json, resource, papermill; "
                f"papermill.execute_notebook({nb!r}, {nb + '.out'!r}, kernel_name={kernel!r}, progress_bar=False); "
                "u = resource.getrusage(resource.RUSAGE_SELF); "
                f"json.dump(u.ru_utime + u.ru_stime, open({str(self.out_path)!r}, 'w'))")
        return [sys.executable, "-c", code]


def test_a_jobs_cpu_seconds_count_its_notebook_kernels(tmp_path):
    """timings.json's CPU seconds of a notebook are its job's and its kernel's: the kernel, a child
    of the job's papermill, burns 1 s and writes its own CPU seconds; the job's count holds both."""
    import nbformat

    burnt = tmp_path / "kernel.json"
    cell = ("import json, time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
            f"json.dump(time.process_time(), open({str(burnt)!r}, 'w'))")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), tmp_path / "burn.ipynb")
    cpu = {}
    executors.LocalExecutor(kernel="python3", progress=False).run(
        [KernelJob("burn", "03_train", tmp_path / "job.json", {"notebook": str(tmp_path / "burn.ipynb")})],
        on_done=lambda name, s, c: cpu.update({name: c}))
    kernel, job_alone = json.loads(burnt.read_text()), json.loads((tmp_path / "job.json").read_text())
    assert kernel >= 1.0
    assert cpu["burn"] >= job_alone + kernel - 0.1  # rounded to 0.1 s


# ---- issue 17: a node with several GPUs ------------------------------------------------------
@dataclass(frozen=True)
class GpuJob(executors.NotebookJob):
    """Records the GPUs it was given (``CUDA_VISIBLE_DEVICES``) and when it ran."""

    def argv(self, kernel):
        code = ("import json, os, time; t0 = time.time(); time.sleep(0.4); "
                f"json.dump({{'gpus': os.environ.get('CUDA_VISIBLE_DEVICES'), 'start': t0, 'end': time.time()}}, "
                f"open({str(self.out_path)!r}, 'w'))")
        return [sys.executable, "-c", code]


def gpu_runs(tmp_path, gpus, per_job, workers):
    jobs = [GpuJob(f"train-{i}", "03_train", tmp_path / f"train-{i}.json", {}, gpus=per_job) for i in range(4)]
    jobs += [GpuJob("select", "02_select", tmp_path / "select.json", {}),
             GpuJob("eval-0", "04_evaluate", tmp_path / "eval-0.json", {}, ("train-0",), gpus=per_job)]
    executors.LocalExecutor(workers=workers, progress=False, poll_s=0.05, gpus=gpus).run(jobs)
    return {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}


@pytest.mark.parametrize("gpus, per_job, workers", [(("0", "1"), 1, 3), (("4", "5", "6", "7"), 2, 4)])
def test_each_job_that_runs_the_model_gets_gpus_of_its_own(tmp_path, gpus, per_job, workers):
    ran = gpu_runs(tmp_path, gpus, per_job, workers)
    assert ran["select"]["gpus"] == ""  # the selection loads no model: it is given no GPU
    model_jobs = {k: v for k, v in ran.items() if k != "select"}
    for name, r in model_jobs.items():
        given = r["gpus"].split(",")
        assert len(given) == per_job and set(given) <= set(gpus), name
    for a, ra in model_jobs.items():  # two jobs never share a GPU while both run
        for b, rb in model_jobs.items():
            if a < b and set(ra["gpus"].split(",")) & set(rb["gpus"].split(",")):
                assert ra["end"] <= rb["start"] or rb["end"] <= ra["start"], (a, b)
    assert len({r["gpus"] for r in model_jobs.values()}) == len(gpus) // per_job  # every GPU slot was used


def test_the_runner_lends_the_gpus_it_may_use(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert executors.visible_gpus() == ("2", "3")
    job = GpuJob("train", "03_train", Path("unused.json"), {}, gpus=2)
    with pytest.raises(ValueError, match=r"job 'train' needs 2 GPU\(s\), but only \['0'\] are lent.*train.num_processes"):
        executors.LocalExecutor(progress=False, gpus=("0",)).run([job])


def test_a_training_that_spans_several_gpus_gets_them_and_the_others_one_each(tmp_path):
    """train.num_processes: 2 on a node lending 4 GPUs: each study training job is given 2 GPUs
    of its own (what its accelerate launch spreads over), the evaluations 1, selection none."""
    cfg = params.load("embedded", overrides={"train.num_processes": 2, "train.seeds": [0, 1], "arms": ["hard"]})
    todo = graph.jobs(cfg, {"params_file": "embedded", "overrides": {}, "progress": False})
    assert {j.name: j.gpus for j in todo if j.stage == "03_train"} == {"03_train hard-seed0": 2,
                                                                       "03_train hard-seed1": 2}
    assert {j.gpus for j in todo if j.stage in ("01_probe", "04_evaluate")} == {1}
    jobs = [GpuJob(j.name, j.stage, tmp_path / f"{j.name.replace(' ', '_')}.json", {}, j.after, gpus=j.gpus)
            for j in todo]
    executors.LocalExecutor(workers=3, progress=False, poll_s=0.05, gpus=("0", "1", "2", "3")).run(jobs)
    ran = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    given = {name: r["gpus"].split(",") if r["gpus"] else [] for name, r in ran.items()}
    assert all(len(g) == 2 for n, g in given.items() if n.startswith("03_train"))
    assert all(len(g) == 1 for n, g in given.items() if n.startswith(("01_probe", "04_evaluate")))
    assert given["02_select"] == [] and given["05_analyze"] == []
    for a in ran:  # two jobs never share a GPU while both run
        for b in ran:
            if a < b and set(given[a]) & set(given[b]):
                assert ran[a]["end"] <= ran[b]["start"] or ran[b]["end"] <= ran[a]["start"], (a, b)


@dataclass(frozen=True)
class EnvJob(executors.NotebookJob):
    """Writes the allocator variables it started with to ``<out_path>``."""

    def argv(self, kernel):
        return [sys.executable, "-c", "import json, os; json.dump({k: v for k, v in os.environ.items() "
                f"if k.startswith('MALLOC_')}}, open({str(self.out_path)!r}, 'w'))"]


def test_a_cpu_study_starts_its_jobs_with_the_allocator_that_reuses_pages(tmp_path, monkeypatch):
    """A CPU study's jobs (and their kernels) start with glibc told to
    keep freed memory for reuse (executors.CPU_ALLOCATOR); a GPU study's do not; a variable the
    user set wins."""
    for name in executors.CPU_ALLOCATOR:
        monkeypatch.delenv(name, raising=False)
    cpu = executors.local_executor([(params.load("tiny"), None)])
    cuda = executors.local_executor([(params.load("gpu_smoke"), None)])
    assert cpu.env == executors.CPU_ALLOCATOR and cuda.env == {}
    monkeypatch.setenv("MALLOC_TOP_PAD_", "4096")
    for name, ex in (("cpu", cpu), ("cuda", cuda)):
        ex.progress = False
        ex.run([EnvJob(name, "03_train", tmp_path / f"{name}.json", {}, ())])
    seen = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("cpu", "cuda")}
    assert seen["cpu"] == {**executors.CPU_ALLOCATOR, "MALLOC_TOP_PAD_": "4096"}
    assert seen["cuda"] == {"MALLOC_TOP_PAD_": "4096"}
