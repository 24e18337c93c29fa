"""The test runner itself: `make test`'s two pytest-xdist workers and the scheduler in
tests/conftest.py. A worker that dies (a segfault in a C extension) must fail the run, naming
the test, not leave it waiting for the dead worker forever."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _xdist_flags(target: str) -> list[str]:
    """The pytest-xdist options of a Makefile target's pytest command."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{re.escape(target)}:.*\n\t(.*pytest.*)$", text, re.M).group(1)
    return re.findall(r"-n \d+|--max-worker-restart=\d+", recipe)


@pytest.mark.parametrize("target", ["test", "test-times", "test-unit"])
def test_every_parallel_target_stops_at_a_crashed_worker(target):
    assert _xdist_flags(target) == ["-n 2", "--max-worker-restart=0"]


@pytest.mark.e2e  # two worker processes start (about 10 s)
def test_a_worker_that_dies_fails_the_run_instead_of_hanging(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tests / "conftest.py")  # the scheduler under test
    (tests / "test_dies.py").write_text("import os, signal\n\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGSEGV)\n")
    (tests / "test_fine.py").write_text("".join(f"def test_fine_{i}():\n    pass\n\n" for i in range(4)))
    flags = " ".join(_xdist_flags("test")).split()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbval", *flags,
                          "tests"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout[-2000:]
    assert "crashed while running 'tests/test_dies.py::test_dies'" in run.stdout
