"""Simulated error rates of the report's intervals (:mod:`diffgrpo.analysis.uncertainty`) at the seeds a
study has: how often a null contrast is called (p < 0.05) and how often an arm's gain interval
covers the true gain.

The simulated study (issue 19's setting): ``n_prompts`` test prompts, each with a latent
difficulty z_i ~ N(0, 1) that the base model and every run share; a run is right on prompt i
when sqrt(rho) z_i + sqrt(1 - rho) e_i < c, with e_i ~ N(0, 1) its own per-prompt noise and c
set so that its expected accuracy is the arm's plus a seed offset ~ N(0, seed_sd). The base
model (accuracy ``base_acc``) is one such run. An arm's true gain is its accuracy minus the
base's; a null contrast is two arms of the same accuracy, each with its own seed offsets.

    .venv/bin/python -m diffgrpo.analysis.calibration            # 2000 simulations per setting (minutes)
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from diffgrpo.analysis.uncertainty import ALPHA, Bootstrap, mean_dist


def _runs(rng, z: np.ndarray, acc: np.ndarray, rho: float) -> np.ndarray:
    """prompts x runs correctness, run j at expected accuracy acc[j]."""
    noise = rng.standard_normal((len(z), len(acc)))
    latent = np.sqrt(rho) * z[:, None] + np.sqrt(1 - rho) * noise
    return (latent < stats.norm.ppf(np.clip(acc, 0.01, 0.99))[None, :]).astype(float)


def error_rates(n_seeds: int, seed_sd_pp: float, n_sims: int = 400, n_prompts: int = 300, n_boot: int = 1000,
                rho: float = 0.6, base_acc: float = 0.55, arm_acc: float = 0.62, seed: int = 0) -> dict:
    """Share of null contrasts called (p < ALPHA) and share of arm-gain intervals that cover the
    true gain, over ``n_sims`` simulated studies; with their Monte Carlo standard errors."""
    rng = np.random.default_rng([seed, n_seeds, int(10 * seed_sd_pp)])
    boot = Bootstrap(n_prompts, n_boot, seed)
    called, covered = [], []
    truth = 100.0 * (arm_acc - base_acc)
    for _ in range(n_sims):
        z = rng.standard_normal(n_prompts)
        base = _runs(rng, z, np.array([base_acc]), rho)[:, 0]
        a, b = (_runs(rng, z, arm_acc + rng.normal(0, seed_sd_pp / 100, n_seeds), rho) for _ in range(2))
        p, _ = mean_dist(100.0 * (a - b), boot).p_value()
        called.append(p < ALPHA)
        lo, hi = mean_dist(100.0 * (a - base[:, None]), boot).interval(1 - ALPHA)
        covered.append(lo <= truth <= hi)
    fp, cov = float(np.mean(called)), float(np.mean(covered))
    return {"n_seeds": n_seeds, "seed_sd_pp": seed_sd_pp, "n_sims": n_sims, "false_positive": fp,
            "false_positive_mc_se": float(np.sqrt(ALPHA * (1 - ALPHA) / n_sims)), "coverage": cov,
            "coverage_mc_se": float(np.sqrt(0.95 * 0.05 / n_sims))}


def table(n_sims: int = 2000, **kw) -> pd.DataFrame:
    return pd.DataFrame([error_rates(s, sd, n_sims, **kw) for s in (2, 3) for sd in (3.0, 5.0)])


if __name__ == "__main__":
    print(table().round(4).to_string(index=False))
