"""Accuracy per difficulty tier of the base model and of each arm's final checkpoint (mean over
seeds): where along the difficulty axis an arm's gain comes from.

Writes ``tiers.csv`` (long), ``tiers.md`` (a column per arm) and ``fig_tiers.png``; nothing in
``summary.json``.
"""

from __future__ import annotations

from diffgrpo.analysis import figures
from diffgrpo.analysis.tables import DIGITS, arm_order, markdown, tier_accuracy
from diffgrpo.store.artifacts import save_figure, write_csv, write_text

TABLES = ("tiers",)
FIGURES = ("fig_tiers",)


def write(study) -> dict:
    per_tier = tier_accuracy(study.tiers, study.evals, study.metric).round(DIGITS)
    write_csv(study.out / "tiers.csv", per_tier)
    wide = per_tier.pivot(index="tier", columns="strategy", values="value")
    write_text(study.out / "tiers.md", f"# Accuracy per tier ({study.metric}): base and final checkpoints\n\n"
               + markdown(wide[arm_order(wide.columns)].reset_index()))
    save_figure(figures.plot_tiers(per_tier, study.metric), study.out / "fig_tiers.png")
    return {}
