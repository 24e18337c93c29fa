"""A run's online method (``train.online``, :mod:`diffgrpo.online`: the registry, one module per
method, docs/online_selection.md) built for the trainer: over the run's selection, warm-started
from the probe's samples where its settings say so.

Dynamic sampling is no method here: a loaded config says it one way,
``train.dynamic_sampling.enabled`` (``online.method: dynamic_sampling`` is folded into it at load,
:class:`diffgrpo.params.TrainConfig`), and the trainer reads it as its level's
``dynamic_rounds`` (:func:`diffgrpo.train.levels.run_levels`), keeping the groups whose rewards
differ when no method decides (:meth:`diffgrpo.train.trainer.Trainer._keep`).
"""

from __future__ import annotations

import pandas as pd

from diffgrpo import online


def for_run(train, seed: int, rows: pd.DataFrame, k: int) -> online.Method | None:
    """The online method of a run with ``train`` settings over its selection ``rows`` (columns
    ``id``, and ``p_hat`` for a warm start: p_hat x ``k`` successes of ``k`` probe samples);
    None when ``train.online.method`` is ``none`` (dynamic sampling on or off: the module's
    docstring)."""
    settings = train.online
    if settings.method == online.NONE:
        return None
    warm = None
    if "p_hat" in rows:
        warm = {pid: (round(p * k), k) for pid, p in zip(rows["id"], rows["p_hat"])}
    return online.build(settings, seed, list(rows["id"]), warm)
