"""`make reproduce`'s comparison (diffgrpo.study.reproduce): a rerun's report against the committed
one, where the machine's seconds are the one thing excepted."""

import json
import shutil
from pathlib import Path

import pytest

from diffgrpo.study import reproduce

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "results" / "paper001_embedded"


@pytest.fixture()
def two_reports(tmp_path):
    from diffgrpo.analysis import inputs

    a, b = tmp_path / "rerun", tmp_path / "committed"
    for folder in (a, b):
        folder.mkdir()
        for name in inputs.report_files(COMMITTED):
            shutil.copy(COMMITTED / name, folder / name)
    return a, b


def test_identical_reports_differ_nowhere(two_reports):
    assert reproduce.compare(*two_reports) == ([], [])


def test_the_machine_s_seconds_alone_are_excepted(two_reports):
    rerun, committed = two_reports
    text = (rerun / "compute.md").read_text().replace("|         165   |", "|         171.2 |")
    assert text != (committed / "compute.md").read_text()
    (rerun / "compute.md").write_text(text)
    summary = json.loads((rerun / "summary.json").read_text())
    summary["compute"]["runs"][0]["cpu_seconds"] = 1.0
    (rerun / "summary.json").write_text(json.dumps(summary, indent=2))
    assert reproduce.compare(rerun, committed) == ([], ["compute.md", "summary.json"])


def test_a_moved_number_is_a_difference(two_reports):
    rerun, committed = two_reports
    (rerun / "compute.md").write_text((rerun / "compute.md").read_text().replace("|     12.67 |", "|     12.68 |", 1))
    found, seconds = reproduce.compare(rerun, committed)
    assert [line.split(":")[0] for line in found] == ["compute.md"] and seconds == []
    assert "12.68" in found[0]


def test_a_study_without_committed_inputs_is_named_with_the_ones_there_are():
    with pytest.raises(reproduce.NotCommitted, match="no committed report with inputs for study 'nope'.*paper001_embedded"):
        reproduce.committed_params("nope")
