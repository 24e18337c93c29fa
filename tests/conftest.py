"""Test session set-up: everything the tests write goes to a temporary outputs folder.

The stage notebooks that nbval runs (tests/notebooks/) read and write the study's files under
DIFFGRPO_OUTPUTS; their kernels inherit the variable from this process, so it is set before
collection and a test session never touches the repository's outputs/.
"""

import os
import tempfile

import matplotlib
import pytest

matplotlib.use("Agg")

_SESSION_OUTPUTS = tempfile.mkdtemp(prefix="diffgrpo-test-outputs-")

# The tests run tiny models: one thread is as fast as two on an idle machine and 25-40x faster
# when another process wants the second core (docs/benchmarks.md). Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    os.environ.setdefault("DIFFGRPO_OUTPUTS", _SESSION_OUTPUTS)


def pytest_collection_modifyitems(config, items):
    """The stage notebooks nbval runs (tests/notebooks/) are `e2e` tests: `make test` runs them,
    `make test-unit` leaves them out."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.e2e)


def executed_notebooks(study_root, cfg) -> list:
    """The notebooks a whole study keeps: one per stage, and per (arm, seed) run one 03_train and
    one 04_evaluate, plus the base model's 04_evaluate."""
    from diffgrpo.store import layout

    nb = study_root / "notebooks"
    runs = [layout.run_id(a, s) for a, s in layout.planned_runs(cfg)]
    return ([nb / f"{s}.ipynb" for s in ("01_probe", "02_select", "05_analyze")] + [nb / "04_evaluate" / "base.ipynb"]
            + [nb / stage / f"{rid}.ipynb" for stage in ("03_train", "04_evaluate") for rid in runs])


def tensorboard_scalars(logdir) -> dict[str, dict[int, float]]:
    """Every scalar of the TensorBoard event files in ``logdir``, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
