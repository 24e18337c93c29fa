"""Issue 45: every write has a lock, what a plugin online method returns is checked like a reward,
and every entry point names a known error in one line (docs/reliability.md, "Locked, checked and
named"). Unit tier unless marked e2e: the race of two `make results` renders the committed inputs
of docs/results/embedded/ (no stage runs); the probe-helper tests and the online method's run
through `python -m diffgrpo.train` load the embedded model.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diffgrpo.analysis import inputs
from diffgrpo.store import artifacts
from test_nothing_lost import beside, checkout, export_dir, tree  # noqa: F401  (checkout, export_dir: fixtures)

# ---- items 2-3: one writer per committed report; a study's name is a name ----

RESULTS = [sys.executable, "-m", "diffgrpo.analysis.inputs", "results", "embedded"]


@pytest.mark.e2e  # two real processes, one renders the report (15-30 s on 2 cores)
def test_two_make_results_at_once_one_is_refused_by_name_and_the_inputs_survive(checkout):
    """The audit's race: the same `make results` twice, 0.3 s apart, both real processes. One
    renders, the other is refused naming the folder and the first's pid; the committed inputs and
    report are whole, nothing half-built is left (before: both exited 0 and the inputs were gone)."""
    folder = inputs.results_dir("embedded")
    before = tree(folder / "inputs")
    first = subprocess.Popen(RESULTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    second = subprocess.Popen(RESULTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {p.pid: (p.wait(timeout=300), p.communicate()[1]) for p in (first, second)}
    assert sorted(rc for rc, _ in out.values()) == [0, 2], out
    (winner,) = [pid for pid, (rc, _) in out.items() if rc == 0]
    (refused,) = [err for rc, err in out.values() if rc == 2]
    (line,) = refused.strip().splitlines()
    assert line.startswith(f"error: {folder}: another process (pid {winner}) is writing it"), line
    # whole: every file again (an export writes an evaluation's samples without the completions' text,
    # inputs.DROPPED, so a file exported before that rule is rewritten, not lost), and the winner rendered from them
    assert sorted(tree(folder / "inputs")) == sorted(before)
    assert inputs.written_before(folder, inputs.RENDERED) and (folder / "README.md").is_file()
    assert beside(folder) == ["embedded"]


@pytest.mark.parametrize("command", [["results", "embedded"], ["render", "{inputs}", "{folder}"],
                                     ["export", "{outputs}", "{folder}/inputs"]])
def test_a_second_writer_of_a_committed_report_is_refused_before_it_touches_it(checkout, command, capsys):
    """`make results`, `inputs export` and `inputs render` into docs/results/<study> take one lock:
    while another process holds it, each is refused in one line, and nothing there changes."""
    folder = inputs.results_dir("embedded")
    before = tree(folder)
    names = {"inputs": folder / "inputs", "folder": folder, "outputs": artifacts.outputs_root() / "embedded"}
    argv = [a.format(**names) for a in command]
    with artifacts.exclusive(folder):  # as a running `make results` holds it
        assert inputs.main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {folder}: another process (pid {os.getpid()}) is writing it; wait for it to finish or " \
                   "stop it, then rerun"
    assert tree(folder) == before and beside(folder) == ["embedded"]


@pytest.mark.parametrize("study", ["{outputs}/embedded", "../x", "./embedded", "embedded/", "", ".hidden", "a/b"])
def test_a_path_as_a_study_s_name_is_refused_before_any_work(checkout, study, capsys):
    """`make results STUDY=/abs/path/to/outputs/tiny` copied the study folder, renamed it away and
    deleted it; `STUDY=../x` wrote docs/x. Now: one line, and neither folder is touched."""
    study = study.format(outputs=artifacts.outputs_root())
    docs, outputs = checkout / "docs", artifacts.outputs_root()
    before = (tree(docs), tree(outputs))
    assert inputs.main(["results", study]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: STUDY={study!r}: not a study's name; name the study") and "not a path" in line
    if study.endswith("/embedded"):
        assert "(STUDY=embedded)" in line
    assert (tree(docs), tree(outputs)) == before and not (checkout / "docs" / "x").exists()


# ---- item 6: one error wrapper for every entry point, knowing every error class ----

import ast  # noqa: E402
import importlib  # noqa: E402

import inspect  # noqa: E402

from diffgrpo import errors  # noqa: E402

LIB = Path(__file__).resolve().parents[1] / "lib" / "diffgrpo"
#: error classes a module turns into a named one before it leaves (never seen by a command)
INTERNAL = {"YamlTooLarge": "params.files reads it as a ParamsError naming the file and the line"}


def _error_classes() -> dict[str, tuple[str, list[str]]]:
    """Every exception class defined under lib/diffgrpo: name -> (module, its bases' names)."""
    found = {}
    for path in sorted(LIB.rglob("*.py")):
        module = ".".join(("diffgrpo", *path.relative_to(LIB).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                found[node.name] = (module, bases)
    known = {n for n in dir(__builtins__) if n.endswith(("Error", "Exception"))} | {"Exception", "YAMLError"}
    errors_, grew = {}, True
    while grew:  # the classes deriving, at any depth, from an exception
        grew = False
        for name, (module, bases) in found.items():
            if name not in errors_ and any(b in known or b in errors_ for b in bases):
                errors_[name], grew = (module, bases), True
    return errors_


def test_every_error_class_of_the_project_is_named_by_the_one_wrapper():
    """The study's and the train command's wrappers kept their own lists and drifted (the study's
    lacked RewardError and LedgerError, the train command's TaskError and TrackerError): now
    diffgrpo.errors.NAMED is the one list, and every error class defined in lib/diffgrpo is in it,
    derives from one that is, or is turned into one before a command sees it."""
    named = {name for names in errors.NAMED.values() for name in names}
    for module, names in errors.NAMED.items():
        for name in names:
            assert issubclass(getattr(importlib.import_module(module), name), Exception), (module, name)
    classes = _error_classes()

    def covered(name: str) -> bool:
        return name in named or name in INTERNAL or any(covered(b) for b in classes.get(name, ("", []))[1])

    assert {"RewardError", "LedgerError", "TaskError", "TrackerError", "OnlineMethodError", "ParamsError"} <= named
    missing = sorted(f"{module}.{name}" for name, (module, _) in classes.items() if not covered(name))
    assert not missing, f"error classes no command names in one line: {missing} (add them to diffgrpo.errors.NAMED)"


def test_every_entry_point_runs_through_the_one_wrapper():
    from diffgrpo.study import runner
    from diffgrpo.train import launch

    for entry in (runner.cli, launch.cli, inputs.main):
        assert "errors.run(" in inspect.getsource(entry), entry
    assert not hasattr(launch, "NAMED_ERRORS")


@pytest.mark.parametrize("module, name", [(m, n) for m, names in errors.NAMED.items() for n in names])
def test_each_named_error_is_one_line_with_its_exit_status(module, name, capsys):
    cls = getattr(importlib.import_module(module), name)
    try:
        err = cls("what is wrong; what to do")
    except TypeError:  # a class whose constructor takes more: made as Python would, message set after
        err = cls.__new__(cls)
        err.args = ("what is wrong; what to do",)

    def fails():
        raise err

    expected = errors.FAILED if name == "StageFailed" else errors.REFUSED
    assert errors.run(fails, stopped="stopped") == expected
    assert capsys.readouterr().err == "error: what is wrong; what to do\n"


def test_an_unknown_error_keeps_its_traceback():
    def bug():
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        errors.run(bug, stopped="stopped")


# ---- item 5: raw or misnamed errors, each one line with what to do ----


def test_outputs_under_proc_is_named_with_the_outputs_folder(monkeypatch, capsys):
    """`DIFFGRPO_OUTPUTS=/proc/x`: /proc passes the writable check (as root) and takes no folder;
    it was a raw FileNotFoundError from the run's lock."""
    from diffgrpo.study import runner
    from diffgrpo.train import launch

    monkeypatch.setenv(artifacts.OUTPUTS_ENV, "/proc/x")
    assert launch.cli(["tiny", "--arm", "hard", "--seed", "0", "--no-progress"]) == 2
    assert runner.cli(["tiny", "--kernel", "python3"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and not Path("/proc/x").exists()
    for line in lines:
        assert line.startswith("error: /proc/x/tiny") and "cannot be created" in line
        assert "the outputs folder /proc/x" in line and "point DIFFGRPO_OUTPUTS at a folder you can write" in line


def test_training_before_the_select_stage_is_one_line_that_says_run_it(tmp_path, monkeypatch, capsys):
    """`python -m diffgrpo.train tiny --arm hard --seed 0` on a fresh outputs folder was a 27-line traceback."""
    monkeypatch.setenv(artifacts.OUTPUTS_ENV, str(tmp_path))
    from diffgrpo.train import launch

    assert launch.cli(["tiny", "--arm", "hard", "--seed", "0", "--no-progress"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {tmp_path}/tiny/select/hard.parquet: no selection 'hard' yet; run the probe and "
                           "select stages first"), line


# ---- item 4: what an online method returns, checked as a reward's values are ----

import math  # noqa: E402

import numpy as np  # noqa: E402

from diffgrpo import online  # noqa: E402
from diffgrpo.online import OnlineMethodError  # noqa: E402

HERE = str(Path(__file__).resolve())
RUN = ["a", "b", "c", "d", "e", "f"]
BATCH = ["a", "b", "c", "d"]


@online.register("issue45_one_of_four")
class OneOfFour(online.Method):
    """The audit's plugin: one prompt of the sampler's four (a step trained one group of four)."""
    when = "before"

    def choose(self, batch, history, step):
        return [batch[0]], len(batch) - 1


@online.register("issue45_foreign")
class Foreign(online.Method):
    when = "before"

    def choose(self, batch, history, step):
        return ["a", "b", "c", "zz"], 0


@online.register("issue45_raises")
class Raises(online.Method):
    when = "before"

    def choose(self, batch, history, step):
        return [batch[i] for i in range(len(batch))][len(history) // 0:], 0


@online.register("issue45_ids_alone")
class IdsAlone(online.Method):
    when = "before"

    def choose(self, batch, history, step):
        return list(batch)  # no skipped count


@online.register("issue45_refilled")
class Refilled(online.Method):
    """Chooses fewer, declaring that dynamic sampling's rounds refill the step."""
    when = "before"
    refills = True

    def choose(self, batch, history, step):
        return list(batch[:step]), 0


@online.register("issue45_nan_keep")
class NanKeep(online.Method):
    refills = True

    def keep(self, group):
        return group["reward_mean"] if group["learnable"] else math.nan


@online.register("issue45_keep_raises")
class KeepRaises(online.Method):
    refills = True

    def keep(self, group):
        return group["no_such_column"] > 0


@online.register("issue45_bad_pilot")
class BadPilot(online.Method):
    when = "before"

    def pilot(self, batch, history, step):
        return list(batch), 0  # zero completions each


def _method(name: str) -> online.Method:
    return online.get(name)(online.Settings.model_validate({"method": name}), 0, RUN)


@pytest.mark.parametrize("name, says", [
    ("issue45_one_of_four", r"returned \(\['a'\], 3\) from `choose` at step 5: 1 ids for a step of 4 groups; "
                            r"`choose` returns \(ids, skipped\): 4 ids of the run's prompts.*`refills = True`"),
    ("issue45_foreign", r"returned \(\['a', 'b', 'c', 'zz'\], 0\) from `choose` at step 5: 1 of its ids are not "
                        r"prompts of the run \(e.g. 'zz'\)"),
    ("issue45_raises", r"line \d+\) raised ZeroDivisionError: integer division or modulo by zero in `choose` at step 5"),
    ("issue45_ids_alone", r"returned \['a', 'b', 'c', 'd'\] from `choose` at step 5: `choose` returns \(ids, skipped\)"),
])
def test_what_choose_returns_is_checked_before_any_generation(name, says):
    """choose returning 1 of 4 trained one group a step and the run was recorded complete; an id not
    in the run was a raw KeyError; a choose that raised was a raw traceback."""
    with pytest.raises(OnlineMethodError, match=rf"^online method '{name}' \({HERE}.*{says}.*fix the method, "
                                                r"nothing of this step was trained$"):
        online.chosen(_method(name), BATCH, [], 5)


def test_an_error_inside_a_method_keeps_its_own_traceback():
    with pytest.raises(OnlineMethodError) as caught:
        online.chosen(_method("issue45_raises"), BATCH, [], 5)
    assert isinstance(caught.value.__cause__, ZeroDivisionError)


def test_a_method_that_refills_may_choose_fewer_but_one_at_least():
    method = _method("issue45_refilled")
    assert online.chosen(method, BATCH, [], 2) == (["a", "b"], 0)
    with pytest.raises(OnlineMethodError, match=r"0 ids for a step of 4 groups.*one at least: dynamic sampling"):
        online.chosen(method, BATCH, [], 0)


@pytest.mark.parametrize("name, group, says", [
    ("issue45_nan_keep", {"learnable": False, "reward_mean": 0.0, "prompt_id": "c"},
     r"returned nan from `keep` at step 3: `keep` returns True or False \(a bool: not NaN, a number or None\) for "
     r"each generated group \(here prompt id 'c'\)"),
    ("issue45_nan_keep", {"learnable": True, "reward_mean": 0.5, "prompt_id": "a"}, r"returned 0.5 from `keep`"),
    ("issue45_keep_raises", {"learnable": True, "reward_mean": 0.5, "prompt_id": "a"},
     r"raised KeyError: 'no_such_column' in `keep` at step 3"),
])
def test_what_keep_returns_is_a_bool_or_named(name, group, says):
    """keep returning NaN kept every group, flat ones included."""
    with pytest.raises(OnlineMethodError, match=rf"^online method '{name}' \({HERE}.*{says}"):
        online.kept(_method(name), group, 3)


def test_a_bool_from_keep_numpy_s_included_is_taken():
    method = _method("issue45_refilled")  # the default keep: the group's rewards differ
    assert online.kept(method, {"learnable": np.bool_(True)}, 1) is True
    assert online.kept(method, {"learnable": False}, 1) is False


def test_what_pilot_returns_is_checked():
    with pytest.raises(OnlineMethodError, match=r"returned \(\['a', 'b', 'c', 'd'\], 0\) from `pilot` at step 2"):
        online.piloted(_method("issue45_bad_pilot"), BATCH, [], 2)


@pytest.mark.parametrize("name", ["posterior", "skip_zero_variance", "learnability", "pilot_commit", "band"])
def test_the_built_in_methods_pass_the_checks(name):
    method = online.build(online.Settings.model_validate({"method": name}), 0, RUN)
    history = [{"step": 1, "prompt_id": pid, "learnable": pid in "ace", "scores": [1.0, 0.0] if pid in "ace" else
                [0.0, 0.0], "round": 1, "reward_mean": 0.5} for pid in RUN]
    pilot = online.piloted(method, BATCH, history, 2)
    if pilot is not None:
        history += [{**g, "step": 2, "round": 0} for g in history if g["prompt_id"] in pilot[0]]
    if method.chooses:
        ids, skipped = online.chosen(method, BATCH, history, 2)
        assert len(ids) == len(BATCH) and set(ids) <= set(RUN) and 0 <= skipped <= len(BATCH)
    assert online.kept(method, history[0], 2) in (True, False)


@pytest.mark.e2e  # the tiny model's trainer starts (seconds), no step is trained
def test_a_plugin_choose_that_returns_too_few_is_named_before_any_update(tmp_path, monkeypatch, capsys):
    """Through `python -m diffgrpo.train`: one line naming the method, its file and the step;
    the run is not recorded complete and no checkpoint is saved."""
    import pandas as pd

    from diffgrpo import params
    from diffgrpo.store import layout
    from diffgrpo.tasks import splits
    from diffgrpo.train import launch

    monkeypatch.setenv(artifacts.OUTPUTS_ENV, str(tmp_path))
    arm = {"name": "mine", "select": "random", "train": {"online": {"method": "issue45_one_of_four"}}}
    overrides = {"arms": [arm], "train": {"max_steps": 2, "save_steps": 1}}
    cfg = params.load("tiny", overrides=overrides)
    pool = splits.load_pool(cfg)
    artifacts.write_parquet(layout.selection_file(cfg, "mine", 0), pd.DataFrame({"id": pool["id"][:8], "p_hat": 0.5}))
    argv = ["tiny", "--arm", "mine", "--seed", "0", "--no-progress", "--set", f"arms=[{arm}]".replace("'", ""),
            "--set", "train.max_steps=2", "--set", "train.save_steps=1"]
    assert launch.cli(argv) == 2
    err = capsys.readouterr().err  # transformers' bar for loading the weights, then the one line
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "Traceback" not in err
    assert line.startswith(f"error: online method 'issue45_one_of_four' ({HERE}) returned (['") and \
        "from `choose` at step 1: 1 ids for a step of 4 groups" in line, line
    run = layout.run_dir(cfg, "mine", 0)
    manifest = artifacts.read_manifest(run / layout.MANIFEST) or {}
    assert manifest.get("status") != "complete" and not list(run.glob("checkpoints/checkpoint-*"))


# ---- item 5 (cont.): the probe's helper processes ----

import functools  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402

from diffgrpo.models import resumable_sampling as sampling  # noqa: E402

#: the probe's pass with one helper process, as a command runs it (argv[1]: the work folder)
PROBE_WITH_A_HELPER = """
import functools, sys
from pathlib import Path
from diffgrpo import errors, params
from diffgrpo.models import resumable_sampling as sampling
from diffgrpo.tasks import splits

cfg = params.load("tiny")
rows, task = splits.load_pool(cfg).iloc[:12], splits.task_of(cfg)
make = functools.partial(sampling.load_generator, cfg, batch_size=16)
with sampling.Helpers(1, make) as helpers:
    sys.exit(errors.run(lambda: sampling.sample_and_score(
        make(), task, rows, n=2, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0, work_dir=Path(sys.argv[1]),
        key={}, chunk_size=4, progress=False, helpers=helpers) is None, stopped="stopped"))
"""


def _private_mounts() -> bool:
    """Whether this process may mount in a mount namespace of its own (root, unshare allowed)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


@pytest.mark.e2e  # a process loads the embedded model (about 10 s)
@pytest.mark.skipif(not _private_mounts(), reason="needs root and a mount namespace of its own (unshare -m)")
def test_a_read_only_dev_shm_is_named_as_the_helpers_shared_memory(tmp_path):
    """The pool's queues need a SemLock in /dev/shm: a read-only one was blamed on the outputs folder.
    The probe's pass runs in a mount namespace of its own, where a read-only tmpfs hides /dev/shm
    (the machine's /dev/shm is not touched: the mount is private to that process)."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE_WITH_A_HELPER)
    shell = f"mount -t tmpfs -o ro,size=1m tmpfs /dev/shm && exec {sys.executable} {script} {tmp_path / 'work'}"
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", shell], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: the probe's 1 helper process(es) cannot start: their shared-memory lock "
                           "(multiprocessing's SemLock, in /dev/shm) failed (OSError: [Errno 30] Read-only file "
                           "system); mount /dev/shm read-write"), line
    assert "`--set workers=1`" in line and "outputs" not in line
    assert not list((tmp_path / "work").glob("part-*"))  # refused before any chunk


class KillsTheHelper:
    """The calling process's generator: before its first chunk, the helper process is killed
    (SIGKILL, as the kernel's OOM killer does) and reaped by its pool."""

    def __init__(self, inner, pid: int):
        self.inner, self.pid = inner, pid

    def generate(self, *args, **kwargs):
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while Path(f"/proc/{self.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the pool's thread marks its futures broken
            self.pid = None
        return self.inner.generate(*args, **kwargs)


@pytest.mark.e2e  # a helper process: its interpreter, imports and model (about 10 s)
def test_a_killed_helper_stops_the_pass_at_once_named_and_a_rerun_resumes(tmp_path):
    """A killed helper's chunks were generated again by the caller, then the stage died late with a
    raw BrokenProcessPool (the next pass submitted to the broken pool). Now the pass stops after the
    chunk in hand, one line naming BrokenProcessPool and that a rerun resumes; the rerun reads the
    chunks written, and generates only the rest."""
    from diffgrpo import params
    from diffgrpo.tasks import splits

    cfg = params.load("tiny")
    rows, task = splits.load_pool(cfg).iloc[:16], splits.task_of(cfg)
    make = functools.partial(sampling.load_generator, cfg, batch_size=16)
    kw = dict(n=2, temperature=1.0, top_p=1.0, max_new_tokens=16, seed=3, key={"issue": 45}, chunk_size=2,
              progress=False, work_dir=tmp_path)
    generator = make()
    with sampling.Helpers(1, make) as helpers:
        pid = helpers.executor().submit(os.getpid).result(timeout=300)  # the helper is up, its model loaded
        with pytest.raises(sampling.HelpersFailed) as caught:
            sampling.sample_and_score(KillsTheHelper(generator, pid), task, rows, helpers=helpers, **kw)
        line = errors.line(caught.value)
        assert line.startswith(f"{tmp_path}: a helper process of the probe died (BrokenProcessPool: ") and \
            "the chunks written are kept, so a rerun resumes from them" in line and "`--set workers=1`" in line
        with pytest.raises(sampling.HelpersFailed, match="BrokenProcessPool"):  # a later pass: named, not raw
            sampling.sample_and_score(generator, task, rows.iloc[:8], helpers=helpers, **{**kw, "work_dir": tmp_path / "later"})
    kept = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("part-*.parquet")}
    assert 1 <= len(kept) < 8, kept  # stopped after the chunk in hand, not after redoing the helper's
    out = sampling.sample_and_score(generator, task, rows, **kw)  # the rerun: no helper, resumed
    assert len(out) == 16 * 2 and out["prompt_id"].tolist()[::2] == rows["id"].tolist()
    assert {p: t for p, t in ((p.name, p.stat().st_mtime_ns) for p in tmp_path.glob("part-*.parquet"))
            if p in kept} == kept  # the chunks written were read, not generated again
