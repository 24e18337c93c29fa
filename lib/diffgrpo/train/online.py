"""A run's online method (``train.online``, :mod:`diffgrpo.online`: the registry, one module per
method, docs/online_selection.md) built for the trainer: over the run's selection, warm-started
from the probe's samples where its settings say so, and dynamic sampling's rule when
``train.dynamic_sampling`` is on without another method.
"""

from __future__ import annotations

import pandas as pd

from diffgrpo import online


def for_run(train, seed: int, rows: pd.DataFrame, k: int) -> online.Method | None:
    """The online method of a run with ``train`` settings over its selection ``rows`` (columns
    ``id``, and ``p_hat`` for a warm start: p_hat x ``k`` successes of ``k`` probe samples);
    None when training keeps every group as TRL does."""
    settings = train.online
    if settings.method == online.NONE:
        if not train.dynamic_sampling.enabled:
            return None
        settings = online.settings_class("dynamic_sampling")(method="dynamic_sampling")
    warm = None
    if "p_hat" in rows:
        warm = {pid: (round(p * k), k) for pid, p in zip(rows["id"], rows["p_hat"])}
    return online.build(settings, seed, list(rows["id"]), warm)
