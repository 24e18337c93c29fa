"""Test session set-up: everything the tests write goes to a temporary outputs folder.

The stage notebooks that nbval runs (tests/notebooks/) read and write the study's files under
DIFFGRPO_OUTPUTS; their kernels inherit the variable from this process, so it is set before
collection and a test session never touches the repository's outputs/.
"""

import os
import tempfile
from pathlib import Path

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


def notebook_blemishes(path, machine_paths) -> list[str]:
    """What a reader should not find in an executed notebook, each named by notebook and cell: an
    error output, a warning or a traceback in what a cell shows, a bar redrawn in place (``\\r``),
    and anywhere in the file (outputs and metadata, images left out) one of ``machine_paths``."""
    import json
    import re

    book = json.loads(Path(path).read_text())
    found = []
    for i, cell in enumerate(book["cells"]):
        where = f"{Path(path).name} cell {i} ({cell.get('id', '')})"
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                found.append(f"{where}: raised {out.get('ename')}: {out.get('evalue')}")
            data = out.get("data", {})
            for key in [k for k in data if k.startswith("image/")]:
                del data[key]
            shown = "".join(out.get("text", "")) + "".join("".join(v) if isinstance(v, list) else str(v)
                                                           for v in data.values())
            hit = re.search(r"(?i)\bwarning\b|\w+Warning\b|Traceback \(most recent call last\)", shown)
            if hit:
                found.append(f"{where}: shows {hit.group(0)!r}: {shown[max(0, hit.start() - 80):hit.end() + 80]!r}")
            if "\r" in shown:
                found.append(f"{where}: a progress bar redrawn in place")
    text = json.dumps(book)
    found += [f"{Path(path).name}: holds the machine path {p}" for p in machine_paths if p and p in text]
    return found


def machine_paths() -> set[str]:
    """This machine's absolute paths that an executed notebook must not show: the checkout, the
    environment, the outputs folder, the home folder."""
    import sys

    from diffgrpo.store.artifacts import outputs_root

    paths = {str(Path(__file__).resolve().parents[1]), sys.prefix, str(Path(sys.prefix).resolve()),
             str(outputs_root().resolve()), os.environ.get("DIFFGRPO_OUTPUTS", ""), str(Path.home())}
    return {p for p in paths if len(p) > 4}


def tensorboard_scalars(logdir) -> dict[str, dict[int, float]]:
    """Every scalar of the TensorBoard event files in ``logdir``, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
