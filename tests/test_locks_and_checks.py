"""Issue 45: every write has a lock, what a plugin online method returns is checked like a reward,
and every entry point names a known error in one line (docs/reliability.md, "Locked, checked and
named"). Unit tier unless marked: the lock tests render the committed inputs of
docs/results/embedded/ (seconds, no stage runs).
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
    assert tree(folder / "inputs") == before
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
