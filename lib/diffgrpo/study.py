"""Run a whole study: the five stage notebooks in order, under papermill.

    python -m diffgrpo.study embedded                    # params/embedded.yaml
    python -m diffgrpo.study embedded --set train.max_steps=20 --stages 03_train 04_evaluate

The params are validated before any notebook starts; each executed notebook is kept in
``outputs/<study>/notebooks/``; stage times go to ``outputs/<study>/timings.json``.
Every stage skips work already done (probe chunks, finished runs, evaluated checkpoints),
so an interrupted study resumes where it stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import yaml

from . import artifacts, data, layout, params
from .notebooks import STAGES, NotebookParameterError, StageFailed, run_notebook
from .tasks import TaskError


def parse_overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key] = yaml.safe_load(value)
    return out


def notebook_parameters(params_file: str, overrides: dict, cfg: params.Config) -> dict:
    """What each stage notebook is given: every path absolute. The kernels run in
    ``notebooks/``; a path as the user typed it means the folder the command ran in."""
    resolved = data.resolve_paths(cfg, Path.cwd())
    paths = {k: v for k, v in (("model.path", resolved.model.path), ("dataset.source", resolved.dataset.source))
             if v != params.get(cfg, k)}
    return {"params_file": str(params.resolve(params_file).resolve()), "overrides": {**overrides, **paths}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m diffgrpo.study", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", help="a file in params/ (name or path)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a parameter, e.g. train.max_steps=20 (repeatable)")
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--kernel", default="diffgrpo", help="Jupyter kernel to run the notebooks in")
    args = ap.parse_args(argv)

    # a relative DIFFGRPO_OUTPUTS means the folder the command ran in, for the kernels too
    if os.environ.get(artifacts.OUTPUTS_ENV):
        os.environ[artifacts.OUTPUTS_ENV] = str(Path(os.environ[artifacts.OUTPUTS_ENV]).resolve())
    overrides = parse_overrides(args.overrides)
    cfg = params.load(args.params_file, overrides=overrides)  # fail before any work
    nb_params = notebook_parameters(args.params_file, overrides, cfg)
    cfg = params.load(nb_params["params_file"], overrides=nb_params["overrides"])
    data.task_of(cfg), data.check_model(cfg)  # an unknown task or a missing model fails here, not in a notebook
    out = layout.notebooks_dir(cfg)
    timings_file = layout.study_dir(cfg) / "timings.json"
    timings = artifacts.read_json(timings_file) if timings_file.exists() else {}
    total = time.perf_counter()
    for stage in args.stages:
        print(f"== {stage} ({cfg.study})", flush=True)
        t0 = time.perf_counter()
        run_notebook(stage, out / f"{stage}.ipynb", nb_params, kernel=args.kernel)
        timings[stage] = round(time.perf_counter() - t0, 1)
        print(f"   {stage} done in {timings[stage]:.1f} s", flush=True)
        artifacts.write_json(timings_file, timings)
    print(f"study {cfg.study!r}: {time.perf_counter() - total:.1f} s; notebooks in {out}")
    report = layout.report_dir(cfg)
    if (report / "summary.json").exists():
        print(f"report: {report}/ (summary.json, tables, figures)")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` for a terminal: a known error is one line naming the culprit (and, for a
    failed notebook, the executed copy that holds the traceback), not a traceback."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        print("\nstopped; rerun the same command to resume", file=sys.stderr)
        return 130
    except StageFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (params.ParamsError, data.ModelPathError, TaskError, NotebookParameterError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
