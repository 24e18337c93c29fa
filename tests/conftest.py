"""Test session set-up: everything the tests write goes to a temporary outputs folder.

The stage notebooks that nbval runs (tests/notebooks/) read and write the study's files under
DIFFGRPO_OUTPUTS; their kernels inherit the variable from this process, so it is set before
collection and a test session never touches the repository's outputs/.
"""

import os
import tempfile

import matplotlib

matplotlib.use("Agg")

_SESSION_OUTPUTS = tempfile.mkdtemp(prefix="diffgrpo-test-outputs-")

# The tests run tiny models: one thread is as fast as two on an idle machine and 25-40x faster
# when another process wants the second core (docs/benchmarks.md). Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    os.environ.setdefault("DIFFGRPO_OUTPUTS", _SESSION_OUTPUTS)
