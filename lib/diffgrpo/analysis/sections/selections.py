"""The selections: a histogram of the probe's p_hat over the prompts each arm trains on (every
seed's selection, for a per-seed policy).

Writes ``fig_p_hat.png``; nothing in ``summary.json`` (the select stage's ``summary.csv`` has
each selection's size, mean p_hat and predicted learnable share).
"""

from __future__ import annotations

from diffgrpo.analysis import figures
from diffgrpo.store.artifacts import save_figure

TABLES = ()
FIGURES = ("fig_p_hat",)


def write(study) -> dict:
    save_figure(figures.plot_p_hat(study.selections), study.out / "fig_p_hat.png")
    return {}
