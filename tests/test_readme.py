"""The README shows the default study's key figures inline: each image is a file the report of
`make study` wrote (a figure some report section or paper report declares), committed with that
report in docs/results/embedded/, and each has a line under it saying what it shows."""

import re
from pathlib import Path

from diffgrpo.analysis import papers, sections

ROOT = Path(__file__).resolve().parents[1]
IMAGE = re.compile(r"^!\[([^\]]+)\]\(([^)]+)\)\s*$")


def _readme_images() -> list[tuple[int, str, str]]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [(i, *m.groups()) for i, line in enumerate(lines) if (m := IMAGE.match(line))]


def test_readme_shows_figure_2_figure_3_and_the_test_difficulty_bins():
    shown = {Path(path).stem for _, _, path in _readme_images()}
    assert {"fig2_accuracy_by_checkpoint", "fig3_learnable_vs_gain", "fig_test_bins"} <= shown


def test_each_readme_figure_is_one_the_committed_report_wrote():
    declared = {f for name in sections.names() for f in sections.get(name).FIGURES}
    declared |= {f for name in papers.names() for f in papers.get(name).FIGURES}
    lines = (ROOT / "README.md").read_text().splitlines()
    for i, alt, path in _readme_images():
        file = ROOT / path
        assert file.parent == ROOT / "docs" / "results" / "embedded", f"README line {i + 1}: {path} is not the committed report's"
        assert file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"README line {i + 1}: {path} is not a PNG"
        assert file.stem in declared, f"README line {i + 1}: {path} is no figure the report writes"
        caption = next((line for line in lines[i + 1:] if line.strip()), "")
        assert caption.startswith("*") and len(caption) > 20, f"README line {i + 1}: {path} has no line saying what it shows"
    assert (ROOT / "docs" / "results" / "embedded" / "summary.json").exists()
