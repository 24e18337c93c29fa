"""The stage notebooks' own contract: the parameters they declare, that a notebook run
directly refuses a parameter it does not declare, and that the nbval references in
tests/notebooks/ are executions of the current notebooks (same cells), not of older ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import papermill
import pytest

from diffgrpo.study import notebooks

from conftest import machine_paths, notebook_blemishes

ROOT = Path(__file__).resolve().parents[1]


def code_cells(path: Path) -> list[str]:
    """Code cell sources, without the cell papermill injects."""
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"
            and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("stage", notebooks.STAGES)
def test_the_nbval_reference_runs_the_current_notebook(stage):
    current, reference = ROOT / "notebooks" / f"{stage}.ipynb", ROOT / "tests" / "notebooks" / f"{stage}.ipynb"
    assert code_cells(reference) == code_cells(current), (
        f"tests/notebooks/{stage}.ipynb was executed from another version of notebooks/{stage}.ipynb; "
        "run `make references` and review the diff")


@pytest.mark.parametrize("stage", notebooks.STAGES)
def test_the_committed_reference_holds_no_warning_traceback_or_machine_path(stage):
    reference = ROOT / "tests" / "notebooks" / f"{stage}.ipynb"
    assert notebook_blemishes(reference, machine_paths()) == []
    absolute = re.findall(r"(?<![\w.])/(?:work|tmp|home|root|usr|opt|var)/[\w./-]*", reference.read_text())
    assert absolute == [], f"tests/notebooks/{stage}.ipynb names this machine's paths; run `make references`"


@pytest.mark.parametrize("stage", notebooks.STAGES)
def test_every_notebook_declares_its_parameters(stage):
    declared = papermill.inspect_notebook(str(ROOT / "notebooks" / f"{stage}.ipynb"))
    assert sorted(declared) == sorted(notebooks.parameters_of(stage))


@pytest.mark.e2e
def test_a_misspelled_parameter_fails_a_directly_run_notebook(tmp_path, monkeypatch):
    """`papermill nb out -p params_fil tiny` would only warn and run the default study."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    with pytest.raises(papermill.PapermillExecutionError, match=r"unknown parameter\(s\) \['params_fil'\]"):
        papermill.execute_notebook(str(ROOT / "notebooks" / "02_select.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"params_fil": "tiny"}, kernel_name="python3", progress_bar=False)
    assert not (tmp_path / "embedded").exists()  # nothing of the default study was written
