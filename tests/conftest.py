"""Test session set-up: everything the tests write goes to a temporary outputs folder.

The stage notebooks that nbval runs (tests/notebooks/) read and write the study's files under
DIFFGRPO_OUTPUTS; their kernels inherit the variable from this process, so it is set before
collection and a test session never touches the repository's outputs/.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

_SESSION_OUTPUTS = tempfile.mkdtemp(prefix="diffgrpo-test-outputs-")

# The tests run tiny models: one thread is as fast as two on an idle machine and 25-40x faster
# when another process wants the second core (docs/benchmarks.md). Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# No network here: huggingface_hub's telemetry thread (started by every Trainer.train) resolves the
# hub's name in a thread, and that getaddrinfo once took a test worker down with a segfault.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def pytest_configure(config):
    os.environ.setdefault("DIFFGRPO_OUTPUTS", _SESSION_OUTPUTS)


def pytest_collection_modifyitems(config, items):
    """The stage notebooks nbval runs (tests/notebooks/) are `e2e` tests: `make test` runs them,
    `make test-unit` leaves them out."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.e2e)


def _shares_fixtures(path: str) -> bool:
    """Whether a test file holds a module- or session-scoped fixture (a study trained once for
    every test of the file): its tests must then run on one worker."""
    text = (Path(__file__).resolve().parents[1] / path).read_text() if path.endswith(".py") else ""
    return 'scope="module"' in text or 'scope="session"' in text


@pytest.hookimpl(optionalhook=True)  # an environment without pytest-xdist runs the tests in one process
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs two pytest-xdist workers. The stage notebooks (tests/notebooks/) go to one
    worker together, in order: each reads the files the one before it wrote. A file with a module-
    or session-scoped fixture goes to one worker whole, so the fixture is built once. Every other
    test is scheduled alone, which keeps both workers busy. Every worker has its own outputs
    folder (above). (xdist's own `loadgroup` marks do nothing under pytest 9: it can no longer
    rename a test's node id.) `_split_scope` is xdist's private method, so pyproject.toml's test
    extra pins pytest and pytest-xdist to the versions this was written against."""
    import functools

    from xdist.scheduler import LoadScopeScheduling

    shares = functools.cache(_shares_fixtures)

    class Scopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.startswith("tests/notebooks/"):
                return "tests/notebooks"
            return path if shares(path) else nodeid

    return Scopes(config, log)


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


def _tier(keywords) -> str:
    return next((t for t in ("e2e", "download", "slow", "cluster", "lab") if t in keywords), "unit")


def pytest_terminal_summary(terminalreporter):
    """``make test-times`` (DIFFGRPO_TEST_TIMES=1): each tier's seconds (setup, call and teardown of
    its tests, summed over the workers) and the 30 slowest tests, so the next addition shows its cost."""
    if not os.environ.get("DIFFGRPO_TEST_TIMES"):
        return
    seconds: dict[str, float] = {}
    tiers: dict[str, str] = {}
    for reports in terminalreporter.stats.values():
        for r in reports:
            if getattr(r, "when", None) in ("setup", "call", "teardown"):
                seconds[r.nodeid] = seconds.get(r.nodeid, 0.0) + r.duration
                tiers.setdefault(r.nodeid, _tier(r.keywords))
    totals: dict[str, list] = {}
    for node, s in seconds.items():
        t = totals.setdefault(tiers[node], [0, 0.0])
        t[0], t[1] = t[0] + 1, t[1] + s
    write = terminalreporter.write_line
    write("")
    write("test seconds by tier (summed over workers; wall time is about the sum over the workers' count):")
    for tier, (n, s) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        write(f"  {tier:9s} {n:5d} tests {s:8.1f} s")
    write("the 30 slowest tests (setup + call + teardown):")
    for node, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:30]:
        write(f"  {s:7.1f} s  {tiers[node]:8s} {node}")


def copy_renaming_arms(src: Path, dst: Path, names: dict) -> None:
    """A copy of a study folder whose arms are renamed (folders, files, manifests' and tables'
    ``strategy``): a study of the same runs under other arm names (an arm named after a policy
    must select by it, issue 37)."""
    import re

    import pandas as pd

    def renamed(text: str) -> str:
        return re.sub(r"^(%s)(?=[-.]|$)" % "|".join(names), lambda m: names[m.group(1)], text)

    for path in sorted(src.rglob("*")):
        out = dst / Path(*[renamed(part) for part in path.relative_to(src).parts])
        if path.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        elif path.suffix == ".json":
            data = json.loads(path.read_text())
            if isinstance(data, dict) and data.get("strategy") in names:
                data["strategy"] = names[data["strategy"]]
            out.write_text(json.dumps(data))
        elif path.suffix == ".parquet" and "strategy" in (df := pd.read_parquet(path)):
            df.assign(strategy=df["strategy"].replace(names)).to_parquet(out)
        else:
            shutil.copyfile(path, out)
