"""Reproduce a committed study: run it afresh and compare its report with the committed one.

    make reproduce STUDY=paper001_embedded
    python -m diffgrpo.study.reproduce paper001_embedded [--outputs DIR]

Runs the study with the params its committed report was computed with
(``docs/results/<study>/inputs/report/params.yaml``; a drift of ``params/<study>.yaml`` from them is
named first) into a fresh outputs folder (``outputs/reproduce/``: the study's folder there is
removed first, so nothing is reused), exports and renders its report as ``make results`` would,
and compares it with ``docs/results/<study>/`` file by file: arms, contrasts, runs, tables and
figures. The machine's seconds (columns and keys named ``*seconds*``) are the one thing excepted.
Prints each difference and a last line to record in docs/benchmarks.md (date, commit, wall);
exits 1 when anything but the seconds differs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diffgrpo import params
from diffgrpo.store import artifacts, layout

#: the machine's seconds: a markdown column or JSON key whose name holds this is not compared
SECONDS = "seconds"


class NotCommitted(FileNotFoundError):
    """A study with no committed report and inputs to reproduce."""


def committed_params(study: str) -> Path:
    from diffgrpo.analysis import inputs

    path = inputs.results_dir(study) / "inputs" / "report" / layout.PARAMS
    if not path.is_file():
        have = sorted(p.parents[2].name for p in inputs.results_dir(study).parent.glob("*/inputs/report/params.yaml"))
        raise NotCommitted(f"{path}: no committed report with inputs for study {study!r}; committed: {', '.join(have)}")
    return path


def params_drift(study: str, committed: Path) -> str | None:
    """How ``params/<study>.yaml`` differs from the params of the committed report (None: the same)."""
    try:
        today = params.dump(params.load(f"{study}.yaml")).splitlines()
    except Exception as err:  # noqa: BLE001 - a file that no longer loads is itself the drift to name
        return f"params/{study}.yaml does not load today ({type(err).__name__}: {err})"
    then = params.dump(params.load(committed)).splitlines()
    if today == then:
        return None
    i = next((i for i, (a, b) in enumerate(zip(today, then)) if a != b), min(len(today), len(then)))
    line = lambda lines: repr(lines[i]) if i < len(lines) else "(no line)"  # noqa: E731
    return f"params/{study}.yaml differs from the committed params at line {i + 1}: today {line(today)}, committed {line(then)}"


def _masked_md(text: str) -> list[str]:
    """A markdown file's lines with every table cell under a ``*seconds*`` header blanked."""
    out, masked = [], set()
    for line in text.splitlines():
        if line.startswith("|"):
            cells = line.split("|")
            if any(SECONDS in c for c in cells):
                masked = {i for i, c in enumerate(cells) if SECONDS in c}
            elif not set(line) <= set("|:- "):
                cells = ["" if i in masked else c for i, c in enumerate(cells)]
            out.append("|".join(c.strip() for c in cells))
        else:
            masked = set()
            out.append(line)
    return out


def _masked_json(value):
    if isinstance(value, dict):
        return {k: _masked_json(v) for k, v in value.items() if SECONDS not in k}
    if isinstance(value, list):
        return [_masked_json(v) for v in value]
    return value


def seconds_only(ours: Path, theirs: Path) -> bool:
    """Whether two differing report files are the same once the machine's seconds are blanked."""
    if ours.suffix == ".md":
        return _masked_md(ours.read_text()) == _masked_md(theirs.read_text())
    if ours.suffix == ".json":
        return _masked_json(json.loads(ours.read_text())) == _masked_json(json.loads(theirs.read_text()))
    return False


def compare(rendered: Path, committed: Path) -> tuple[list[str], list[str]]:
    """(differences, files that differ in the machine's seconds alone) between two reports."""
    from diffgrpo.analysis import inputs

    found, seconds = [], []
    for line in inputs.differences(rendered, committed):
        name = line.split(":")[0]
        both = (rendered / name).is_file() and (committed / name).is_file()
        (seconds if both and seconds_only(rendered / name, committed / name) else found).append(line)
    return found, [line.split(":")[0] for line in seconds]


def reproduce(study: str, outputs: Path) -> int:
    from diffgrpo.analysis import inputs

    inputs.check_study(study)
    committed = committed_params(study)
    drift = params_drift(study, committed)
    print(f"== reproducing {study} from {artifacts.relative(committed, artifacts.project_root())}")
    if drift:
        print(f"note: {drift}; the committed params are the ones run")
    folder = outputs / study
    if folder.exists():
        shutil.rmtree(folder)
    outputs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, artifacts.OUTPUTS_ENV: str(outputs.resolve())}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "diffgrpo.study", str(committed)], env=env)
    wall = time.monotonic() - start
    if done.returncode != 0:
        print(f"error: the study stopped (exit {done.returncode}) after {wall:.0f} s; nothing compared")
        return done.returncode or 1
    with tempfile.TemporaryDirectory(prefix=f"reproduce-{study}-") as tmp:
        inputs.export(folder, Path(tmp) / "inputs")
        inputs.render(Path(tmp) / "inputs", Path(tmp) / "report")
        found, seconds = compare(Path(tmp) / "report", inputs.results_dir(study))
    for line in found:
        print(f"  differs: {line}")
    if seconds:
        print(f"  the machine's seconds alone differ in: {', '.join(seconds)}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=artifacts.project_root()).stdout.strip() or "unknown"
    verdict = "identical to the committed report" if not found else f"{len(found)} file(s) differ from the committed report"
    print(f"reproduced {study}: {datetime.date.today().isoformat()}, commit {commit}, {wall:.0f} s wall: {verdict}"
          + (" (the machine's seconds excepted)" if seconds else ""))
    return 0 if not found else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m diffgrpo.study.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("study", help="a study with a committed report in docs/results/<study>/inputs")
    ap.add_argument("--outputs", type=Path, default=None,
                    help="the outputs folder to run it in (default: outputs/reproduce; its study folder is removed first)")
    args = ap.parse_args(argv)
    outputs = args.outputs or artifacts.project_root() / "outputs" / "reproduce"
    from diffgrpo import errors

    return errors.run(lambda: reproduce(args.study, outputs), stopped="stopped; rerun the same command to start afresh")


if __name__ == "__main__":  # run as the module itself, so diffgrpo.errors knows its NotCommitted
    from diffgrpo.study.reproduce import main as _main

    sys.exit(_main())
