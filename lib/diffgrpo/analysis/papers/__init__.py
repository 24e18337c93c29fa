"""One report per paper, each a module named after it: ``paper003`` (Tables 1-4, Figure 3),
``paper001`` (base-wrong vs base-right vs all), ``paper000`` (per tier, steps to match,
transfer), ``paper002`` (EPRLI vs GRPO vs dynamic sampling at one completion budget). A study asks for them by name (``analyze.reports: ["003", "001", "000"]``); each
module's ``write(study)`` writes its tables into the report folder and returns its section of
``summary.json`` (:func:`diffgrpo.analysis.report.report`). The numbers the papers report are data:
:mod:`.paper_numbers`.
"""

from __future__ import annotations

from types import ModuleType

# the papers a study can ask a report for live in the foundation layer, so that the params can
# check ``analyze.reports`` against their names without importing this one
from diffgrpo.registry import PAPERS

__all__ = ["PAPERS", "arm_selecting", "get", "names"]


def names() -> list[str]:
    return PAPERS.names()


def get(paper: str) -> ModuleType:
    """The report module of ``paper`` (``"003"`` -> :mod:`diffgrpo.analysis.papers.paper003`)."""
    return PAPERS.get(paper)


def arm_selecting(cfg, policy: str, ran: set[str]) -> str | None:
    """The first arm whose selection policy is ``policy`` and that has complete runs: a report
    finds an arm's role from its definition, not its name."""
    return next((a.name for a in cfg.arms if a.select == policy and a.name in ran), None)
