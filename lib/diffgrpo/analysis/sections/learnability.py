"""Learnability predicted against observed: per arm, the learnable % the probe predicts (plug-in
p_hat, Beta posterior) against the one observed over the first steps and the whole run
(:mod:`diffgrpo.analysis.learnability`; the numbers are in the arms table).

Writes ``fig_learnability.png``. Its part of ``summary.json``: ``{"learnability_prior": {"alpha",
"beta", "prior" (how it was fit), "pool" (prompts probed, null without the pool's probe), "k"}}``.
"""

from __future__ import annotations

from diffgrpo.analysis import figures
from diffgrpo.store.artifacts import save_figure

TABLES = ()
FIGURES = ("fig_learnability",)


def write(study) -> dict:
    save_figure(figures.plot_learnability(study.arms, study.cfg.train.group_size), study.out / "fig_learnability.png")
    return {"learnability_prior": study.prior}
