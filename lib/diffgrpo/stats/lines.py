"""Figure 3's least-squares line (gain on learnable %) and an interval on its R^2 that resamples the
arms, then each drawn arm's seeds (an arm's seeds share one selection, so its runs are not
independent points). ``digits``: round what is returned (the report's tables round to 4)."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from diffgrpo.stats.intervals import interval


def _round(v: float | None, digits: int | None) -> float | None:
    if v is None or not np.isfinite(v):
        return None
    return float(v) if digits is None else round(float(v), digits)


def fit_line(x: Iterable[float], y: Iterable[float], digits: int | None = None) -> dict:
    """Least-squares ``y = slope * x + intercept`` and its R^2 (Figure 3: gain on learnable %).

    R^2 is None, with the reason in ``note``, when it means nothing: fewer than 3 points (a
    line fits 2 exactly) or no spread in x or y. The slope needs only 2 points with distinct x.
    """
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    out = {"slope": None, "intercept": None, "r2": None, "n": len(x), "note": None}
    x_spread = len(x) > 1 and np.ptp(x) > 0
    if x_spread:
        fit = stats.linregress(x, y)
        out.update(slope=_round(fit.slope, digits), intercept=_round(fit.intercept, digits))
    if len(x) < 3:
        out["note"] = f"{len(x)} point(s): R^2 needs at least 3"
    elif not x_spread:
        out["note"] = "every point has the same learnable %: no line to fit"
    elif np.ptp(y) == 0:
        out["note"] = "every point has the same gain: R^2 is undefined"
    else:
        out["r2"] = _round(fit.rvalue**2, digits)
    return out


def r2_interval(x: Iterable[float], y: Iterable[float], n_boot: int, seed: int,
                groups: Iterable | None = None, digits: int | None = None) -> list[float] | None:
    """Percentile interval of R^2 over resamples of the arms (``groups``, one label per run),
    then of each drawn arm's runs (its seeds); ``groups`` None: every run its own arm. None with
    fewer than 3 runs or no spread (resamples without spread in x or y are dropped)."""
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    labels = np.arange(len(x)) if groups is None else pd.factorize(pd.Series(list(groups)))[0]
    members = [np.flatnonzero(labels == g) for g in range(labels.max() + 1)]
    sizes = np.array([len(m) for m in members])
    padded = np.array([np.pad(m, (0, sizes.max() - len(m)), mode="edge") for m in members])
    rng = np.random.default_rng([seed, 2])
    arm = rng.integers(0, len(members), size=(n_boot, len(members)))          # arms, with replacement
    pos = (rng.random((n_boot, len(members), sizes.max())) * sizes[arm][..., None]).astype(int)  # then seeds
    idx = padded[arm[..., None], pos].reshape(n_boot, -1)
    w = (np.arange(sizes.max()) < sizes[arm][..., None]).reshape(n_boot, -1).astype(float)
    xs, ys = x[idx], y[idx]
    xc = xs - (w * xs).sum(1, keepdims=True) / w.sum(1, keepdims=True)
    yc = ys - (w * ys).sum(1, keepdims=True) / w.sum(1, keepdims=True)
    sxx, syy, sxy = (w * xc * xc).sum(1), (w * yc * yc).sum(1), (w * xc * yc).sum(1)
    ok = (sxx > 1e-12) & (syy > 1e-12)
    return [_round(v, digits) for v in interval(sxy[ok] ** 2 / (sxx[ok] * syy[ok]))]
