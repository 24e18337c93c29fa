"""Figure 2: accuracy by checkpoint, one line per arm (mean over seeds, a band for its 95%
interval), every line starting from the base model at step 0.

Writes ``fig2_accuracy_by_checkpoint.png``; nothing in ``summary.json``.
"""

from __future__ import annotations

from diffgrpo.analysis import figures
from diffgrpo.store.artifacts import save_figure

TABLES = ()
FIGURES = ("fig2_accuracy_by_checkpoint",)


def write(study) -> dict:
    save_figure(figures.plot_accuracy_curves(study.curves, study.metric), study.out / "fig2_accuracy_by_checkpoint.png")
    return {}
