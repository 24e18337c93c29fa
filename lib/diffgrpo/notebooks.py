"""Run the stage notebooks under papermill, refusing unknown parameters.

papermill only warns when a parameter name matches nothing in the notebook's ``parameters``
cell, so a typo would silently run the default. :func:`run_notebook` checks the names first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .artifacts import atomic_path, project_root

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
    """Execute one stage notebook into ``out_path`` (written atomically)."""
    import papermill

    nb = notebook_path(stage)
    check_parameters(nb, parameters)
    with atomic_path(out_path) as tmp:
        tmp_nb = tmp.with_suffix(".ipynb")
        try:
            papermill.execute_notebook(
                str(nb), str(tmp_nb), parameters=parameters, kernel_name=kernel,
                progress_bar=progress, cwd=str(nb.parent),
            )
        finally:
            if tmp_nb.exists():
                tmp_nb.replace(tmp)
    return out_path
