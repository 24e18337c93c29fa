"""The sections of every study's report, one module each, in the order the report writes them
(and the notebook shows their figures): ``runs``, ``verdict``, ``regression``, ``arms``,
``contrasts``, ``curves``, ``checkpoint_contrasts`` (each pair at every evaluated checkpoint),
``learnability``, ``tiers``, ``plateau``, ``selections``, ``confounds``,
``compute`` (the ledger: gain against total rollouts), ``budgets`` (arms at equal total
rollouts, online against offline), ``probe_budget`` (a cheaper probe: K sweep, adaptive
probing), ``staleness`` (each trained prompt's success by window of steps against its probe
p_hat), ``sequential`` (seeds in blocks: the declared question at each look), ``greedy_beside``
(greedy accuracy's contrasts beside a sampled metric's), ``test_difficulty``, ``paper_tables``. A section has the contract of a paper's report
(:mod:`diffgrpo.analysis.papers`):

- ``TABLES``: the names of the markdown tables it writes into the report folder (``<name>.md``,
  most with a ``<name>.csv`` beside it);
- ``FIGURES``: the names of its figures (``<name>.png``; one it cannot draw for a study, for
  want of data, is simply not there);
- ``write(study) -> dict``: writes them from the :class:`~diffgrpo.analysis.report.StudyReport`
  and returns its part of ``summary.json`` (top-level keys, ``{}`` for none).

:func:`diffgrpo.analysis.report.report` runs every section, then the papers of
``analyze.reports``; the notebook ``05_analyze`` shows every declared figure
(:func:`diffgrpo.analysis.report.figure_files`).

**Adding a section** (a new metric: one section plus its figure, no other file edited): write a
module (or any object) with ``TABLES``, ``FIGURES`` and ``write(study)``, and register it, from
a plugin file the params key ``plugins:`` names (docs/extending.md) or before the report runs::

    # best_seed.py
    import sys

    from matplotlib.figure import Figure

    from diffgrpo.analysis import sections
    from diffgrpo.store.artifacts import save_figure

    TABLES, FIGURES = ("best_seed",), ("fig_best_seed",)

    def write(study):
        best = study.runs.groupby("strategy", as_index=False)["gain_pp"].max()  # column `strategy`: the arm
        study.write_table("best_seed", "Best seed's gain per arm (points)", best)
        fig = Figure()
        fig.subplots().bar(best["strategy"], best["gain_pp"])
        save_figure(fig, study.out / "fig_best_seed.png")
        return {"best_seed": dict(zip(best["strategy"], best["gain_pp"].round(4)))}

    sections.register("best_seed", sys.modules[__name__])

(docs/extending.md shows the same; ``tests/test_analyze.py`` registers it and finds its table,
its metric and its figure in the report and in the notebook's figure list.) It runs after the
built-in sections; a key of ``summary.json`` another section wrote already is refused (one owner
per key). A section that belongs to every study's report goes here instead, as
``sections/<name>.py``, named in :data:`BUILT_IN`.
"""

from __future__ import annotations

from typing import Any

from diffgrpo.registry import Registry

#: the built-in sections (modules of this package), in report order; the name is the section's
#: (its summary.json key where it writes one), the module says what it holds
BUILT_IN = {name: f"{__name__}.{name}" for name in (
    "runs", "verdict", "regression", "arms", "contrasts", "curves", "checkpoint_contrasts", "learnability", "tiers",
    "plateau", "selections", "confounds", "compute", "budgets", "probe_budget", "staleness", "sequential",
    "greedy_beside")} | {"test_difficulty": f"{__name__}.gains_by_test_difficulty", "paper_tables": f"{__name__}.paper_tables"}

#: every section: the built-in ones, then those a plugin or a notebook registered, in that order
SECTIONS: Registry[Any] = Registry("report section", ValueError, BUILT_IN,
                                   hint="a section declares TABLES, FIGURES and write(study) (diffgrpo.analysis.sections)")


def register(name: str, section: Any) -> None:
    """Add ``section`` (a module or object with ``TABLES``, ``FIGURES``, ``write(study)``) to
    every report after the built-in ones; the same section registered again (a reloaded plugin)
    is accepted, another under a taken name refused."""
    missing = [a for a in ("TABLES", "FIGURES", "write") if not hasattr(section, a)]
    if missing:
        raise TypeError(f"report section {name!r} has no {', '.join(missing)}: a section declares TABLES, FIGURES "
                        "and write(study) -> its part of summary.json")
    if name in BUILT_IN:
        raise ValueError(f"report section {name!r} is registered already; sections: {names()}")
    SECTIONS.add(name, section)


def unregister(name: str) -> None:
    """Remove a registered section (a notebook or a test that added one for a while)."""
    SECTIONS.remove(name)


def names() -> list[str]:
    """Every section, in report order: the built-in ones, then those registered."""
    return SECTIONS.names()


def get(name: str) -> Any:
    """The section ``name`` (``"arms"`` -> :mod:`diffgrpo.analysis.sections.arms`)."""
    return SECTIONS.get(name)
