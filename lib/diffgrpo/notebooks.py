"""Run the stage notebooks under papermill, refusing unknown parameters.

papermill only warns when a parameter name matches nothing in the notebook's ``parameters``
cell, so a typo would silently run the default. :func:`run_notebook` checks the names first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .artifacts import project_root

STAGES = ("01_probe", "02_select", "03_train", "04_evaluate", "05_analyze")
KERNEL = "diffgrpo"


class NotebookParameterError(ValueError):
    pass


def notebook_path(stage: str) -> Path:
    path = project_root() / "notebooks" / f"{stage}.ipynb"
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
    """
    import papermill

    nb = notebook_path(stage)
    check_parameters(nb, parameters)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    running = out_path.with_suffix(".running.ipynb")
    try:
        papermill.execute_notebook(str(nb), str(running), parameters=parameters, kernel_name=kernel,
                                   progress_bar=progress, cwd=str(nb.parent))
    except BaseException:
        if running.exists():
            running.replace(out_path.with_suffix(".failed.ipynb"))
        raise
    running.replace(out_path)
    return out_path
