"""The verdict: in one paragraph, whether GRPO beat the base model, and the best arm only when
Holm's decisions put it ahead of every other arm (:func:`diffgrpo.analysis.uncertainty.verdict_with_intervals`);
with seeds in blocks, the question's decision by its group-sequential rule
(:func:`diffgrpo.analysis.sections.sequential.at_this_look`); with ``analyze.confirmation``, that every
contrast is exploratory and which study confirms the question.

Writes no file. Its part of ``summary.json``: ``{"best": arm or null, "verdict": the paragraph}``.
"""

from __future__ import annotations

from diffgrpo.analysis.sections import sequential
from diffgrpo.analysis.uncertainty import verdict_with_intervals

TABLES = ()
FIGURES = ()


def write(study) -> dict:
    line, best = verdict_with_intervals(study.arms, study.pairs, study.metric, study.runs["base_acc"].iloc[0],
                                        len(study.scores.prompts), study.control)
    look = sequential.at_this_look(study)
    if look is not None and look[1]:  # seeds in blocks: the rule decides the question, not the fixed-sample test
        line += (" The question's decision by its group-sequential rule (seeds in blocks, analyze.sequential; the "
                 f"fixed-sample decisions above do not count the looks): {look[2]}.")
    if study.cfg.analyze.confirmation:
        line += (" Read every contrast of this study as exploratory, its declared question and its control arm's "
                 "included: the question was declared after its runs were seen. The study that asks it on fresh "
                 f"seeds is {study.cfg.analyze.confirmation} (analyze.confirmation).")
    return {"best": best, "verdict": line}
