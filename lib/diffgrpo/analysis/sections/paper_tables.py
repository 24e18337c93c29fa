"""The reference sheet: every number all four papers report (:mod:`diffgrpo.analysis.papers.paper_numbers`),
whichever papers ``analyze.reports`` asks for.

Writes ``paper_tables.md``; nothing in ``summary.json``.
"""

from __future__ import annotations

from diffgrpo.analysis.papers import paper_numbers
from diffgrpo.store.artifacts import write_text

TABLES = ("paper_tables",)
FIGURES = ()


def write(study) -> dict:
    write_text(study.out / "paper_tables.md", paper_numbers.paper_tables(paper_numbers.reported()))
    return {}
