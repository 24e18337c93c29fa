"""Figure 3's fit: learnable % against gain, over this study's runs that train on the
verifier's reward (the control arms left out), and over the papers' reported points.

Writes no file (the figure and the paper's refit come with paper 003's report). Its part of
``summary.json``::

    {"regression": {"slope", "intercept", "r2", "n", "note", "r2_ci95" (resampling arms, then
                    seeds within them), "r2_arm_means", "arms", "excluded", "r2_ci95_resamples"},
     "paper_regression": the same fit over the reported points of the papers in analyze.reports}
"""

from __future__ import annotations

from diffgrpo.analysis.papers import paper_numbers

TABLES = ()
FIGURES = ()


def write(study) -> dict:
    paper_fit = paper_numbers.paper_regression(paper_numbers.paper_points(study.rep), study.rep)
    return {"regression": study.regression, "paper_regression": paper_fit}
