"""Run the stage notebooks under papermill, refusing unknown parameters.

papermill only warns when a parameter name matches nothing in the notebook's ``parameters``
cell, so a typo would silently run the default. :func:`run_notebook` checks the names first.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

from diffgrpo import processes
from diffgrpo.params.stages import STAGES
from diffgrpo.store.artifacts import checkout_root

KERNEL = "diffgrpo"
#: what every stage notebook's ``parameters`` cell declares (a test checks each notebook)
PARAMETERS = ("params_file", "overrides", "progress")
#: the stages that run once per (arm, seed): their notebooks also declare these two (None: every run)
RUN_STAGES = ("03_train", "04_evaluate")
RUN_PARAMETERS = ("arm", "seed")
#: the pid a notebook job process dies with (set by diffgrpo.study.executors for the processes it starts)
DIE_WITH_ENV = "DIFFGRPO_DIE_WITH_PID"


#: how long a notebook's kernel may take to start and answer (papermill's default, 60 s, failed
#: make test once with both cores busy: a kernel's start is waited on, not a clock's minute)
KERNEL_START_S = 600
#: how many times a notebook's kernel is started before its job fails: one that dies before it has
#: answered is started again. jupyter_client picks a kernel's five ports by binding and closing
#: them, and the kernel binds them a moment later; a kernel started meanwhile by another process can
#: take one, and the first dies with ZMQError "Address already in use" (jupyter_client#154,
#: papermill#511 reports 1 start in 20 failing so with many at once). CI's make test-params, four kernels
#: starting together, lost a job to it once.
KERNEL_STARTS = 3
#: what jupyter_client raises when a kernel process ends before it answers kernel_info
_DIED_STARTING = "Kernel died before replying to kernel_info"


def parameters_of(stage: str) -> tuple[str, ...]:
    """The names a stage notebook's ``parameters`` cell declares."""
    return PARAMETERS + (RUN_PARAMETERS if stage in RUN_STAGES else ())
#: names IPython itself puts in a kernel's namespace
_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


class NotebookParameterError(ValueError):
    pass


class StageFailed(RuntimeError):
    """A stage notebook raised; the message names the error and the executed copy to read."""


def refuse_unknown_parameters(namespace: dict[str, Any], stage: str) -> None:
    """Called first thing after a notebook's parameters cell: papermill run directly (not
    through :func:`run_notebook`) injects a misspelled parameter (``-p params_fil tiny``) with
    only a warning and the notebook would run its default study. Here any name beside the
    declared parameters is an error."""
    declared = parameters_of(stage)
    unknown = sorted(k for k, v in namespace.items()
                     if not k.startswith("_") and k not in _KERNEL_NAMES and k not in declared
                     and not isinstance(v, types.ModuleType))
    if unknown:
        raise NotebookParameterError(f"unknown parameter(s) {unknown}; this notebook's parameters are "
                                     f"{list(declared)}")


def notebook_path(stage: str) -> Path:
    path = checkout_root() / "notebooks" / f"{stage}.ipynb"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such notebook; stages are {list(STAGES)}")
    return path


def check_parameters(notebook: Path, parameters: dict[str, Any]) -> None:
    import papermill

    declared = papermill.inspect_notebook(str(notebook))
    unknown = sorted(set(parameters) - set(declared))
    if unknown:
        raise NotebookParameterError(
            f"{notebook.name}: unknown parameter(s) {unknown}; its parameters cell declares {sorted(declared)}"
        )


def run_notebook(stage: str, out_path: Path, parameters: dict[str, Any], kernel: str | None = KERNEL,
                 progress: bool = True) -> Path:
    """Execute one stage notebook into ``out_path``.

    The executed notebook appears at ``out_path`` only when every cell succeeded; a failed
    run is kept beside it as ``<stage>.failed.ipynb`` with the error in place, for reading.
    One execution of a notebook at a time: a second is refused before it touches the first's
    ``.running.ipynb`` or ``.failed.ipynb``.
    """
    nb = notebook_path(stage)
    check_parameters(nb, parameters)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    running = out_path.with_suffix(".running.ipynb")
    failed = out_path.with_suffix(".failed.ipynb")
    from diffgrpo.store.artifacts import FolderBusy, exclusive

    lock = exclusive(out_path)  # one execution of a notebook at a time: a second touches none of its files
    try:
        lock.__enter__()
    except FolderBusy as err:
        raise StageFailed(f"{stage}: {err}") from None
    try:
        return _execute(stage, nb, out_path, running, failed, parameters, kernel, progress)
    finally:
        lock.__exit__(None, None, None)


def _execute(stage: str, nb: Path, out_path: Path, running: Path, failed: Path, parameters: dict[str, Any],
             kernel: str | None, progress: bool) -> Path:
    import papermill

    from diffgrpo import progress as progress_bars

    # the kernel papermill starts inherits this process's environment: its bars print a few lines
    # (diffgrpo.progress "record") instead of a redraw per step that the executed notebook would keep
    was = os.environ.get(progress_bars.ENV)
    os.environ[progress_bars.ENV] = "record"
    try:
        _papermill(stage, nb, running, parameters, kernel, progress)
    except papermill.PapermillExecutionError as err:
        if running.exists():
            _paths_relative(running, nb, failed)
            running.replace(failed)
        from diffgrpo.store.artifacts import storage_problem

        named = storage_problem(RuntimeError(err.evalue)) if err.ename in ("OSError", "RuntimeError") else None
        raise StageFailed(f"{stage}: {named or f'{err.ename}: {err.evalue}'}\n  the traceback is in {failed}") from None
    except BaseException:
        if running.exists():
            running.replace(failed)
        raise
    finally:
        if was is None:
            os.environ.pop(progress_bars.ENV, None)
        else:
            os.environ[progress_bars.ENV] = was
    failed.unlink(missing_ok=True)
    _paths_relative(running, nb, out_path)
    running.replace(out_path)
    return out_path


def _papermill(stage: str, nb: Path, running: Path, parameters: dict[str, Any], kernel: str | None,
               progress: bool) -> None:
    """papermill's execution of ``nb`` into ``running``, its kernel started again (up to
    :data:`KERNEL_STARTS` times in all) when it dies before answering: no cell has run then."""
    import papermill

    for start in range(1, KERNEL_STARTS + 1):
        try:
            papermill.execute_notebook(str(nb), str(running), parameters=parameters, kernel_name=kernel,
                                       progress_bar=progress, cwd=str(nb.parent), start_timeout=KERNEL_START_S)
            return
        except RuntimeError as err:
            if _DIED_STARTING not in str(err):
                raise
            if start == KERNEL_STARTS:
                raise StageFailed(
                    f"{stage}: its kernel ({kernel!r}) died before it answered, {KERNEL_STARTS} starts in a "
                    f"row: start it alone to read why (`jupyter console --kernel {kernel}`), or list the "
                    "kernels this environment has (`jupyter kernelspec list`)") from None
            print(f"{stage}: its kernel died before it answered (start {start} of {KERNEL_STARTS}); "
                  "starting it again", file=sys.stderr, flush=True)
            running.unlink(missing_ok=True)


def _paths_relative(executed: Path, nb: Path, final: Path) -> None:
    """papermill records the notebook's and its copy's absolute paths in the copy's metadata;
    a shared or committed copy names them relative to the checkout and to the outputs folder."""
    import nbformat

    from diffgrpo.store.artifacts import outputs_root

    book = nbformat.read(str(executed), as_version=4)
    meta = book.metadata.get("papermill", {})
    meta["input_path"] = _relative(nb, checkout_root())
    meta["output_path"] = _relative(final, outputs_root())
    nbformat.write(book, str(executed))


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return Path(path).name


def main(argv: list[str] | None = None) -> int:
    """One notebook execution, as a study's executor runs it (:mod:`diffgrpo.study.executors`):

        python -m diffgrpo.study.notebooks 03_train out.ipynb --parameters '{"params_file": "embedded", "arm": "hard", "seed": 0}'

    Exits 1 with one line ``error: <stage>: <error>`` when the notebook fails (the executed
    copy, with the traceback, is kept as ``<out>.failed.ipynb``)."""
    import argparse
    import json

    # papermill validates notebooks with jsonschema, which imports rfc3987_syntax when installed
    # (jupyterlab brings it) only to check "iri" strings, which no notebook schema uses; building
    # its grammar takes 2.3 s, paid again by every notebook a study runs (docs/benchmarks.md)
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    if os.environ.get(DIE_WITH_ENV):  # started by a study's executor: die with it (its kernel follows)
        processes.die_with_parent(int(os.environ[DIE_WITH_ENV]))
    ap = argparse.ArgumentParser(prog="python -m diffgrpo.study.notebooks", description=main.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("out_path", type=Path)
    ap.add_argument("--parameters", type=json.loads, default={}, help="the notebook's parameters, as JSON")
    ap.add_argument("--kernel", default=KERNEL)
    args = ap.parse_args(argv)
    try:
        run_notebook(args.stage, args.out_path, args.parameters, kernel=args.kernel, progress=False)
    except (StageFailed, NotebookParameterError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"error: {args.stage}: stopped; the executed copy is kept as "
              f"{args.out_path.with_suffix('.failed.ipynb')}", file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
