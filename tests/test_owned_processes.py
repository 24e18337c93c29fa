"""Issue 45 item 1, orphans: ``kill -9`` of any one process of a study, while the probe's helper
works, leaves nothing of the study running once the runner has exited, and the rerun's probe is
an uninterrupted one's (docs/reliability.md, "Owned processes").

The study probes ``tiny`` with a pool of 300 prompts (3 chunks of 128: the fewest that start a
helper process, ``resumable_sampling.HELPER_MIN_CHUNKS``), K=2 and 16 tokens, ``workers: 2`` (one
helper). Its processes, by role: the runner (``python -m diffgrpo.study``), the notebook job
(``diffgrpo.study.notebooks``), the Jupyter kernel its papermill started (``ipykernel_launcher``),
and the helper (``multiprocessing.spawn``) with its resource tracker. Every one carries the study's
DIFFGRPO_OUTPUTS in its environment, which is how survivors are found (as in
tests/test_interrupted_study.py).

The kill comes while the helper works: once two chunks are taken and not written (two
``.claim`` files without their parts: each process that generates holds one at most, so one is
the helper's, which has loaded its model), the kernel is paused (SIGSTOP), so the probe cannot
end before the kill (checked: its tables are not written); then the process of the role is
killed and the kernel let go (SIGCONT). A study that ends before two chunks are taken at once (the
kernel took all three before its helper had loaded its model) is started again, up to ``STARTS``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from diffgrpo import params, probe, processes
from diffgrpo.store import layout
from diffgrpo.study import executors

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = {"dataset.pool_size": 300, "probe.k": 2, "probe.sampling.max_new_tokens": 16, "workers": 2}
ROLES = ("runner", "job", "kernel", "helper")


def study(outputs: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "diffgrpo.study", "tiny", "--stages", "01_probe", "--kernel", "python3"]
    argv += [f"--set={k}={json.dumps(v)}" for k, v in OVERRIDES.items()]
    return subprocess.Popen(argv, env={**os.environ, "DIFFGRPO_OUTPUTS": str(outputs)}, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def of_study(outputs: Path) -> dict[int, tuple[int, str]]:
    """The study's live processes: pid -> (parent pid, command line)."""
    found = {}
    for pid in processes.marked("DIFFGRPO_OUTPUTS", str(outputs)):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[pid] = (int(stat.rsplit(")", 1)[1].split()[1]), cmd)
    return found


def role_of(pid: int, cmd: str, runner: int) -> str | None:
    if pid == runner:
        return "runner"
    if "diffgrpo.study.notebooks" in cmd:
        return "job"
    if "ipykernel_launcher" in cmd:
        return "kernel"
    if "multiprocessing.spawn" in cmd:
        return "helper"
    return None


def roles(outputs: Path, runner: int) -> dict[str, int]:
    return {role: pid for pid, (_, cmd) in of_study(outputs).items() if (role := role_of(pid, cmd, runner))}


def taken(outputs: Path) -> list[Path]:
    """The probe's chunks taken and not written yet: a ``.claim`` without its part."""
    return [c for c in outputs.glob("tiny/probe/*/*/work/*/*.claim") if not c.with_suffix(".parquet").exists()]


#: studies started before the kill test gives up finding its scenario: on a busy machine the kernel
#: can take all three chunks before its helper has loaded its model (a fresh clone's make test, 2026-11-28)
STARTS = 3


class StudyEnded(AssertionError):
    """The study ended before what :func:`wait_for` waited for."""


def wait_for(what: str, ready, proc: subprocess.Popen, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = ready()
        if found:
            return found
        if proc.poll() is not None:
            raise StudyEnded(f"the study ended before {what}: {proc.stderr.read()}")
        time.sleep(0.02)
    raise AssertionError(f"no {what} in {timeout_s} s")


def probe_tables(outputs: Path) -> dict[str, pd.DataFrame]:
    [folder] = outputs.glob("tiny/probe/*/*/")
    return {name: pd.read_parquet(folder / name) for name in (layout.PROMPTS, layout.SAMPLES, layout.ONE_SAMPLE)}


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a process that has ended but was not reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """The probe run whole, in this process, without helpers (a chunk is seeded by its index)."""
    outputs = tmp_path_factory.mktemp("uninterrupted")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DIFFGRPO_OUTPUTS", str(outputs))
        probe.run_probe(params.load("tiny", overrides={**OVERRIDES, "workers": 1}), progress=False)
    return probe_tables(outputs)


@pytest.mark.e2e  # a study killed and rerun (30-50 s each on 2 cores)
@pytest.mark.parametrize("role", ROLES)
def test_kill_9_of_any_process_of_the_study_leaves_none_and_the_rerun_matches(role, tmp_path, uninterrupted):
    for attempt in range(STARTS):  # the scenario needs the helper at work beside the kernel (module docstring)
        outputs = tmp_path / f"outputs-{attempt}"
        proc = study(outputs)
        try:
            wait_for("chunk taken by the helper", lambda: len(taken(outputs)) >= 2, proc)
            break
        except StudyEnded:  # the kernel took every chunk before the helper had its model: a busy machine
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
    else:
        pytest.fail(f"in {STARTS} studies the helper never held a chunk beside the kernel's")
    kernel = roles(outputs, proc.pid)["kernel"]
    os.kill(kernel, signal.SIGSTOP)  # the probe cannot end now
    try:
        assert not list(outputs.glob(f"tiny/probe/*/*/{layout.PROMPTS}")), "the probe ended before the kill"
        targets = roles(outputs, proc.pid)
        assert set(ROLES) <= set(targets), targets
        os.kill(targets[role], signal.SIGKILL)
    finally:
        try:
            os.kill(kernel, signal.SIGCONT)
        except ProcessLookupError:
            pass
    err = proc.communicate(timeout=300)[1]
    code = proc.returncode
    assert code == (-signal.SIGKILL if role == "runner" else 1), err
    if role == "runner":  # no owner left: each process dies with its parent, level by level
        deadline = time.monotonic() + 10
        while of_study(outputs) and time.monotonic() < deadline:
            time.sleep(0.1)
    else:  # the one line of a failed stage
        assert any(line.startswith("error: 01_probe: ") for line in err.splitlines()), err
    assert of_study(outputs) == {}, f"processes of the study left after kill -9 of its {role}"

    rerun = study(outputs)
    err = rerun.communicate(timeout=600)[1]
    assert rerun.returncode == 0, err
    assert of_study(outputs) == {}
    for name, table in probe_tables(outputs).items():
        pd.testing.assert_frame_equal(table, uninterrupted[name], obj=name)


@dataclass(frozen=True)
class LeavesADaemon(executors.NotebookJob):
    """Starts ``sleep 300`` in a session of its own, with no parent-death signal (as a library
    that daemonizes would), writes its pid to ``<out_path>``, and exits 0; with ``check``, writes
    instead whether that job's sleeper still runs."""

    def argv(self, kernel):
        if "check" in self.parameters:
            other = Path(self.parameters["check"])
            code = (f"import os; pid = int(open({str(other)!r}).read()); "
                    f"open({str(self.out_path)!r}, 'w').write(str(os.path.exists(f'/proc/{{pid}}/cmdline') and "
                    f"open(f'/proc/{{pid}}/stat').read().rsplit(')', 1)[1].split()[0] not in 'ZX'))")
        else:
            code = ("import subprocess; p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
                    f"open({str(self.out_path)!r}, 'w').write(str(p.pid))")
        return [sys.executable, "-c", code]


def test_what_a_job_leaves_running_is_ended_when_it_ends(tmp_path):
    """The local executor owns every process its jobs start: a daemon a job left (another session,
    its parent gone) is killed once the job has ended, before the next job starts."""
    daemon = tmp_path / "daemon.pid"
    jobs = [LeavesADaemon("a", "03_train", daemon, {}),
            LeavesADaemon("b", "03_train", tmp_path / "b.txt", {"check": str(daemon)}, after=("a",))]
    executors.LocalExecutor(workers=1, progress=False, poll_s=0.01).run(jobs)
    assert (tmp_path / "b.txt").read_text() == "False"
    assert not running(int(daemon.read_text()))


def test_a_process_dies_with_its_parent(tmp_path):
    """:func:`processes.die_with_parent`: a child that asked for it is killed with its parent
    (the parent is SIGKILLed: nothing of it runs to end the child)."""
    pidfile = tmp_path / "child.pid"
    child = (f"import os, time; from diffgrpo.processes import die_with_parent; die_with_parent({{parent}}); "
             f"open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)")
    parent = ("import os, subprocess, sys, time; "
              f"subprocess.Popen([sys.executable, '-c', {child!r}.format(parent=os.getpid())]); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", parent])
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid), "the child outlived its parent"


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    code = "from diffgrpo.processes import die_with_parent; die_with_parent(1 << 22); print('ran on')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (1, "")


def test_the_marked_processes_and_those_below_are_found_and_ended():
    """:func:`processes.marked` reads the environment each process started with; :func:`processes.end`
    kills them and returns once they have ended."""
    mark = f"test-{os.getpid()}"
    started = {value: subprocess.Popen(["sleep", "60"], env={**os.environ, processes.OWNER_ENV: value})
               for value in (mark, f"{mark}/3", f"{mark}x", "other")}
    try:
        found = set(processes.marked(processes.OWNER_ENV, mark))
        assert found == {started[mark].pid, started[f"{mark}/3"].pid}
        assert set(processes.marked(processes.OWNER_ENV, f"{mark}/3")) == {started[f"{mark}/3"].pid}
        processes.end(sorted(found))
        assert started[mark].poll() == -signal.SIGKILL and started[f"{mark}/3"].poll() == -signal.SIGKILL
        assert started[f"{mark}x"].poll() is None and started["other"].poll() is None
        assert processes.marked(processes.OWNER_ENV, mark) == []
    finally:
        for p in started.values():
            p.kill()
            p.wait()


def test_the_parent_death_signal_is_asked_for_in_one_place():
    """One helper (:func:`processes.die_with_parent`) for every process of a study: no other
    ``prctl`` call in the package."""
    package = ROOT / "lib" / "diffgrpo"
    calls = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if ".prctl(" in p.read_text())
    assert calls == ["processes.py"]


def _kernel_that_dies(tmp_path: Path, deaths: int) -> tuple[str, Path]:
    """A kernel spec (in a JUPYTER_PATH of its own) whose first ``deaths`` starts exit before they
    answer, as a kernel whose port was taken does; later starts are python's own kernel. Each
    start writes a line to the returned file."""
    starts = tmp_path / "starts"
    spec = tmp_path / "jupyter" / "kernels" / "dies_starting"
    spec.mkdir(parents=True)
    code = (f"import pathlib, runpy, sys; p = pathlib.Path({str(starts)!r}); "
            f"n = len(p.read_text().splitlines()) if p.exists() else 0; "
            f"p.write_text('start\\n' * (n + 1)); "
            f"sys.exit(1) if n < {deaths} else None; "
            f"sys.argv = ['ipykernel_launcher'] + sys.argv[1:]; runpy.run_module('ipykernel_launcher', run_name='__main__')")
    (spec / "kernel.json").write_text(json.dumps(
        {"argv": [sys.executable, "-c", code, "-f", "{connection_file}"], "display_name": "dies", "language": "python"}))
    return "dies_starting", starts


def _one_cell_notebook(tmp_path: Path) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 6 * 7\nprint(x)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "one_cell.ipynb"
    nbformat.write(nb, str(path))
    return path


@pytest.mark.e2e  # real kernels started (3-10 s)
def test_a_kernel_that_dies_before_it_answers_is_started_again(tmp_path, monkeypatch, capsys):
    """A notebook's kernel that dies before answering kernel_info (another process took one of its
    ports: jupyter_client#154) costs its job a start, not the job: no cell had run."""
    from diffgrpo.study import notebooks

    kernel, starts = _kernel_that_dies(tmp_path, deaths=1)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    out = tmp_path / "out.ipynb"
    nb = _one_cell_notebook(tmp_path)
    notebooks._execute("05_analyze", nb, out, out.with_suffix(".running.ipynb"), out.with_suffix(".failed.ipynb"),
                       {}, kernel, progress=False)
    assert len(starts.read_text().splitlines()) == 2  # died once, then answered
    assert "42" in out.read_text() and not out.with_suffix(".running.ipynb").exists()
    assert "its kernel died before it answered (start 1 of 3); starting it again" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_kernel_that_never_answers_fails_its_job_saying_what_to_run(tmp_path, monkeypatch):
    from diffgrpo.study import notebooks

    kernel, starts = _kernel_that_dies(tmp_path, deaths=notebooks.KERNEL_STARTS)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    out = tmp_path / "out.ipynb"
    nb = _one_cell_notebook(tmp_path)
    with pytest.raises(notebooks.StageFailed, match=r"05_analyze: its kernel \('dies_starting'\) died before it "
                                                     r"answered, 3 starts in a row: .*jupyter console --kernel dies_starting"):
        notebooks._execute("05_analyze", nb, out, out.with_suffix(".running.ipynb"), out.with_suffix(".failed.ipynb"),
                           {}, kernel, progress=False)
    assert len(starts.read_text().splitlines()) == notebooks.KERNEL_STARTS
    assert not out.exists()
