"""Simulated error rates of the report's intervals (:mod:`diffgrpo.analysis.uncertainty`) over the
regimes a study can be in: how often a null contrast is called, how often Holm's family of null
contrasts calls any, how often an interval covers the truth, and how often a real difference is
found, for the method the report uses and for issue 19's plain t (whose seed part collapses when
the seeds agree).

The simulated study. Each test prompt has a latent difficulty z_i ~ N(0, 1); the base model
answers it right when z_i < Phi^-1(base_acc) (greedy: no noise). A run of an arm answers it
right when sqrt(1 - r^2) z_i + r e_ij < Phi^-1(acc + d_j), with e_ij ~ N(0, 1) the run's own
per-prompt noise, r set so that a run's answer differs from its arm's noiseless one on a share
``flip`` of the prompts (the per-run flip rate), and d_j ~ N(0, seed_sd) the seed's own offset.
Arms A, B and D have one accuracy (three null contrasts, one Holm family); arm C is
``effect_pp`` points better (the non-null contrast C - A). Scores are 0/1: few flips give
per-seed means on a coarse lattice, where seeds often agree exactly (the regime issue 35 found).

Each check is one evaluation of the mean's distribution function: an interval covers a value v
when P(mean <= v) lies within [2.5%, 97.5%]; a contrast is called when p < ALPHA; Holm's family
calls any of its three when the smallest p is below ALPHA / 3, Holm's first step (the report's
resample refinement at an edge is left out: it moves a p only within its Monte Carlo error).

    .venv/bin/python -m diffgrpo.analysis.calibration            # the grid of docs/statistics.md (minutes)
    .venv/bin/python -m diffgrpo.analysis.calibration --sims 200  # a quicker, noisier one
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from diffgrpo.analysis.uncertainty import ALPHA, Bootstrap, mean_dist
from diffgrpo.progress import bar

#: the grid of docs/statistics.md (issue 35): seeds, the seed sd (points), the per-run flip rate, test prompts
SEEDS, SEED_SD, FLIPS, PROMPTS = (2, 3, 4, 8, 16), (0.0, 0.5, 2.0, 5.0), (0.005, 0.02, 0.05), (300, 1000)
BASE_ACC, ARM_ACC, EFFECT_PP = 0.55, 0.62, 4.0
KEYS = ["seeds", "seed_sd_pp", "flip", "prompts", "n_sims"]  # a cell's identity in the table


def noise_weight(flip: float, acc: float) -> float:
    """r such that a run's answer differs from the noiseless 1[z < Phi^-1(acc)] on a share ``flip`` of prompts."""
    tau = stats.norm.ppf(acc)

    def disagree(r: float) -> float:
        rho = np.sqrt(1 - r * r)
        both = stats.multivariate_normal([0, 0], [[1, rho], [rho, 1]], allow_singular=True).cdf([tau, tau])
        return 2 * (stats.norm.cdf(tau) - both) - flip
    return optimize.brentq(disagree, 1e-6, 0.999)


def _runs(rng, z: np.ndarray, acc: np.ndarray, r: float) -> np.ndarray:
    """prompts x runs 0/1 scores, run j at expected accuracy acc[j]."""
    latent = np.sqrt(1 - r * r) * z[:, None] + r * rng.standard_normal((len(z), len(acc)))
    return (latent < special.ndtri(np.clip(acc, 0.01, 0.99))[None, :]).astype(float)


def _covers(dist, v: float) -> bool:
    below = float(dist._below(v).mean())
    return ALPHA / 2 <= below <= 1 - ALPHA / 2


def one_study(rng, boot: Bootstrap, n_seeds: int, seed_sd: float, r: float, floor: bool) -> dict:
    """One simulated study's checks (module docstring), for the method with or without the run-noise floor."""
    n = boot.n_prompts
    z = rng.standard_normal(n)
    base = (z < special.ndtri(BASE_ACC)).astype(float)
    arm = {k: _runs(rng, z, acc + rng.normal(0, seed_sd / 100, n_seeds), r)
           for k, acc in (("A", ARM_ACC), ("B", ARM_ACC), ("D", ARM_ACC), ("C", ARM_ACC + EFFECT_PP / 100))}
    dist = lambda x: mean_dist(100.0 * x, boot, run_noise_floor=floor)  # noqa: E731
    nulls = [dist(arm[a] - arm[b]) for a, b in (("A", "B"), ("A", "D"), ("B", "D"))]
    p_null = [d.p_value()[0] for d in nulls]
    effect = dist(arm["C"] - arm["A"])
    gain = dist(arm["A"] - base[:, None])
    return {"null_called": p_null[0] < ALPHA, "holm_any": min(p_null) < ALPHA / len(p_null),
            "contrast_covered": _covers(effect, EFFECT_PP), "power": effect.p_value()[0] < ALPHA,
            "gain_covered": _covers(gain, 100.0 * (ARM_ACC - BASE_ACC)), "detectable": effect.detectable()}


def cell(n_seeds: int, seed_sd: float, flip: float, n_prompts: int, n_sims: int = 1000, n_boot: int = 400,
         seed: int = 0) -> list[dict]:
    """Both methods' rates in one cell of the grid, over ``n_sims`` studies (the same studies for both)."""
    r = noise_weight(flip, ARM_ACC)
    boot = Bootstrap(n_prompts, n_boot, seed)
    out = []
    for floor in (True, False):
        rng = np.random.default_rng([seed, n_seeds, int(10 * seed_sd), int(1000 * flip), n_prompts])
        rows = pd.DataFrame([one_study(rng, boot, n_seeds, seed_sd, r, floor) for _ in range(n_sims)])
        rates = rows.drop(columns="detectable").mean()
        out.append({"method": "run-noise floor" if floor else "plain t (issue 19)", "seeds": n_seeds,
                    "seed_sd_pp": seed_sd, "flip": flip, "prompts": n_prompts, "n_sims": n_sims,
                    "false_call": rates["null_called"], "holm_family_false_call": rates["holm_any"],
                    "contrast_coverage": rates["contrast_covered"], "gain_coverage": rates["gain_covered"],
                    "power": rates["power"], "detectable_pp": float(rows["detectable"].median())})
    return out


def mc_se(rate: float, n_sims: int) -> float:
    """The Monte Carlo standard error of a rate over ``n_sims`` studies."""
    return float(np.sqrt(rate * (1 - rate) / n_sims))


def grid(n_sims: int = 1000, seeds=SEEDS, seed_sd=SEED_SD, flips=FLIPS, prompts=PROMPTS, out: str | None = None,
         **kw) -> pd.DataFrame:
    """Every cell of the grid; with ``out`` (a CSV), each cell is appended as it finishes and the
    cells already there (at this ``n_sims``) are read back, so an interrupted grid resumes."""
    cells = list(itertools.product(seeds, seed_sd, flips, prompts))
    done = pd.read_csv(out) if out and Path(out).exists() else pd.DataFrame(columns=KEYS)
    have = set(map(tuple, done[KEYS].itertuples(index=False)))
    shown = bar(len(cells), "calibration cells", unit="cell", initial=0)
    for s, sd, f, n in cells:
        if (s, sd, f, n, n_sims) not in have:
            rows = pd.DataFrame(cell(s, sd, f, n, n_sims, **kw))
            if out:
                rows.to_csv(out, mode="a", header=not Path(out).exists(), index=False)
            done = pd.concat([done, rows], ignore_index=True) if len(done) else rows
        shown.update(1)
    shown.close()
    key = lambda df: df[KEYS[:-1]].apply(tuple, axis=1).isin(cells) & (df["n_sims"] == n_sims)  # noqa: E731
    return done[key(done)].reset_index(drop=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulated studies a cell (default 1000)")
    ap.add_argument("--out", help="also write the table as CSV here, a cell at a time (a rerun resumes it)")
    args = ap.parse_args(argv)
    table = grid(args.sims, out=args.out)
    print(f"Monte Carlo standard error at 95%: {100 * mc_se(0.95, args.sims):.2f} points; at 5%: "
          f"{100 * mc_se(0.05, args.sims):.2f}")
    print(table.round(4).to_markdown(index=False))


if __name__ == "__main__":
    main()
