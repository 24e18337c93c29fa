"""Simulated error rates and power of the report's test (:mod:`diffgrpo.stats.intervals`, its seed part
pooled across a study's contrasts by :mod:`diffgrpo.stats.pooling`) over the regimes a study can be
in: how often a null contrast is called, how often Holm's first step calls any contrast of a family
of 3, 6 or 55 null ones, how often an interval covers the truth, the power at 4 points, and the
power at the detectable size the kit states (:func:`diffgrpo.stats.power.detectable`), which should
be 80%.

The simulated study. Each test prompt has a latent difficulty z_i ~ N(0, 1); the base model
answers it right when z_i < Phi^-1(base_acc) (greedy: no noise). A run of an arm answers it
right when sqrt(1 - r^2) z_i + r e_ij < Phi^-1(acc + d_j), with e_ij ~ N(0, 1) the run's own
per-prompt noise, r set so that a run's answer differs from its arm's noiseless one on a share
``flip`` of the prompts (the per-run flip rate), and d_j ~ N(0, seed_sd) the seed's own offset,
drawn for each run. Scores are 0/1: few flips give per-seed means on a coarse lattice, where seeds
often agree exactly (the regime issue 35 found).

avg@k (``samples`` k > 1, issue 46): a run scores a prompt by the share of k sampled completions that
are right, sample l right when sqrt(1 - q^2) x_ij + q u_ijl < Phi^-1(acc + d_j), x_ij the run's
latent above (unit variance) and u_ijl ~ N(0, 1) each sample's own; q is set so that two samples of
one run disagree on a share ``SAMPLE_DISAGREE`` of the prompts (measured, below). The base model is
scored alike (sqrt(1 - q^2) z_i + q u_il). k = 1 is the greedy model above, draw for draw.

Each simulated study of a cell holds:

- three null studies of 3, 4 and 11 arms of one accuracy, every pair of arms one Holm family (3, 6
  and 55 contrasts), each study's contrasts pooling their seed part as the report's do: the share
  of studies where Holm's first step calls any (smallest p < ALPHA / m), and, in the 4-arm study,
  the share where one named null contrast has p < ALPHA (a false call);
- an effect study of 4 arms, arm C ``EFFECT_PP`` points above the other three: the power of C - A
  at ALPHA, the coverage of its interval, and the coverage of arm A's gain over the base model
  (the arms' gains pool their seed part too);
- a study of 4 arms with C at the cell's *stated detectable size* (C half of it above the arms'
  accuracy, the others half below, so that 40 points stay inside 0-1): the power of C - A at
  Holm's first step in its family of 6. The stated size is what :func:`diffgrpo.stats.power.detectable`
  says for the contrast's variance components at that size (they grow with it: 0/1 scores that
  differ on more prompts), and the test's variance moves with its estimate where few prompts carry
  the difference (kappa): the fixed point, each size's components and kappa from ``PILOT`` studies.

Each check is one evaluation of the mean's distribution function: an interval covers a value v
when P(mean <= v) lies within [2.5%, 97.5%] (or the reflected interval holds it,
:meth:`~diffgrpo.stats.intervals.MeanDist.interval`); a contrast is called when p < ALPHA, or its
family's threshold (the report's resample refinement at an edge is left out: it moves a p only
within its Monte Carlo error). ``method`` "per contrast" is the test before issue 44 (each
contrast's own seeds, no sign-flip floor), for comparison.

    .venv/bin/python -m diffgrpo.stats.calibration --out grid.csv            # the grid of docs/statistics.md
    .venv/bin/python -m diffgrpo.stats.calibration --sims 200 --seeds 2 4    # a part of it, quicker and noisier
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from diffgrpo.progress import bar
from diffgrpo.stats import ALPHA, POWER
from diffgrpo.stats.anova import mean_squares
from diffgrpo.stats.intervals import Bootstrap, MeanDist, mean_dist
from diffgrpo.stats.pooling import all_pairs_df, pair_units, pooled_dists
from diffgrpo.stats.power import detectable

#: the grid of docs/statistics.md (issue 35): seeds, the seed sd (points), the per-run flip rate, test prompts
SEEDS, SEED_SD, FLIPS, PROMPTS = (2, 3, 4, 8, 16), (0.0, 0.5, 2.0, 5.0), (0.005, 0.02, 0.05), (300, 1000)
BASE_ACC, ARM_ACC, EFFECT_PP = 0.55, 0.62, 4.0
NULL_ARMS = (3, 4, 11)  # the null studies: Holm families of 3, 6 and 55 pairs
EFFECT_ARMS = 4  # the effect studies' arms: a family of 6 pairs, the default study's
#: two sampled completions (temperature 1) of one run disagree on this share of the prompts:
#: 0.31-0.33 in paper003_confirmatory's committed evaluations (the base model and four trained runs,
#: 4 samples a prompt on 1,000 prompts: mean over prompts of 2 p (1 - p) k / (k - 1); docs/statistics.md)
SAMPLE_DISAGREE = 0.32
SAMPLES = (1,)  # the grid of docs/statistics.md is greedy's; avg@4's cells: --samples 4
PILOT = 500  # studies whose mean squares give the stated size's variance components
STATED = 50  # studies of a cell whose report's stated detectable size is computed (its median: detectable_pp)
METHODS = ("pooled", "per contrast")
KEYS = ["method", "seeds", "seed_sd_pp", "flip", "prompts", "samples", "n_sims"]  # a cell's identity in the table


def phi2(t: float, rho: float) -> float:
    """P(X < t, Y < t) for standard normals X, Y of correlation ``rho``."""
    if rho >= 1.0:
        return float(stats.norm.cdf(t))
    return float(stats.multivariate_normal([0, 0], [[1, rho], [rho, 1]], allow_singular=True).cdf([t, t]))


def _disagreement(tau: float, rho: float) -> float:
    """The share of prompts on which 1[X < tau] and 1[Y < tau] differ, X and Y of correlation ``rho``."""
    return 2 * (stats.norm.cdf(tau) - phi2(tau, rho))


def noise_weight(flip: float, acc: float) -> float:
    """r such that a run's answer differs from the noiseless 1[z < Phi^-1(acc)] on a share ``flip`` of prompts."""
    tau = stats.norm.ppf(acc)
    return optimize.brentq(lambda r: _disagreement(tau, np.sqrt(1 - r * r)) - flip, 1e-6, 0.999)


def sample_weight(disagree: float, acc: float) -> float:
    """q such that two samples of one run (module docstring) disagree on a share ``disagree`` of the
    prompts at accuracy ``acc``: 2 (acc - Phi2(t, t; 1 - q^2)) = disagree."""
    tau = stats.norm.ppf(acc)
    return optimize.brentq(lambda q: _disagreement(tau, 1 - q * q) - disagree, 1e-6, 0.999)


def _scored(rng, latent: np.ndarray, tau: np.ndarray, q: float, k: int) -> np.ndarray:
    """0/1 answers (k = 1, q = 0) or avg@k scores of unit-variance ``latent`` against ``tau``."""
    if k == 1 and q == 0.0:
        return (latent < tau).astype(float)
    u = rng.standard_normal((*latent.shape, k))
    return (np.sqrt(1 - q * q) * latent[..., None] + q * u < tau[..., None]).mean(axis=-1)


def _runs(rng, z: np.ndarray, acc: np.ndarray, r: float, q: float = 0.0, k: int = 1) -> np.ndarray:
    """prompts x runs scores, run j at expected accuracy acc[j]: 0/1, or avg@k (``q``, ``k``)."""
    latent = np.sqrt(1 - r * r) * z[:, None] + r * rng.standard_normal((len(z), len(acc)))
    return _scored(rng, latent, special.ndtri(np.clip(acc, 0.01, 0.99))[None, :], q, k)


def arms(rng, z: np.ndarray, n_arms: int, n_seeds: int, seed_sd: float, r: float, shift_pp: float = 0.0,
         split: bool = False, q: float = 0.0, k: int = 1) -> list[np.ndarray]:
    """``n_arms`` arms' prompts x seeds scores (0/1, or avg@k: ``q``, ``k``); the first ``shift_pp``
    points above the others (``split``: half above ARM_ACC, the others half below, so that a large
    shift stays inside 0-1)."""
    low = ARM_ACC - (shift_pp / 200 if split else 0.0)
    return [_runs(rng, z, low + (shift_pp / 100 if j == 0 else 0.0) + rng.normal(0, seed_sd / 100, n_seeds), r, q, k)
            for j in range(n_arms)]


def pairs_of(n_arms: int) -> list[tuple[int, int]]:
    return list(itertools.combinations(range(n_arms), 2))


def family(scores: list[np.ndarray], boot: Bootstrap, method: str = "pooled") -> list[MeanDist]:
    """Every pair's (a - b, points) distribution, as the report forms them: seed parts pooled
    across the pairs, or ("per contrast") each its own, without the sign-flip floor (before issue 44)."""
    pairs = pairs_of(len(scores))
    diffs = [100.0 * (scores[a] - scores[b]) for a, b in pairs]
    if method == "per contrast":
        return [mean_dist(d, boot, exact=False) for d in diffs]
    return pooled_dists(diffs, pair_units([(str(a), str(b)) for a, b in pairs]), boot)


def gains(scores: list[np.ndarray], base: np.ndarray, boot: Bootstrap, method: str = "pooled") -> list[MeanDist]:
    """Each arm's gain over the base model (points), seed parts pooled across the arms."""
    diffs = [100.0 * (x - base[:, None]) for x in scores]
    if method == "per contrast":
        return [mean_dist(d, boot, exact=False) for d in diffs]
    return pooled_dists(diffs, np.eye(len(diffs)), boot)


def covers(dist: MeanDist, v: float) -> bool:
    """Whether ``dist``'s 95% interval holds ``v``."""
    below = float(dist._below(v).mean())
    if ALPHA / 2 <= below <= 1 - ALPHA / 2:
        return True
    if dist.exact_p is None or dist.exact_p < ALPHA:
        return False
    lo, hi = dist.interval()
    return lo <= v <= hi


def one_study(rng, boot: Bootstrap, n_seeds: int, seed_sd: float, r: float, stated_pp: float, method: str,
              state: bool = True, q: float = 0.0, samples: int = 1) -> dict:
    """One simulated study's checks (module docstring); ``state``: also the detectable size its
    report would state for C - A (a tenth of a second: the first ``STATED`` studies of a cell)."""
    n = boot.n_prompts
    z = rng.standard_normal(n)
    base = _scored(rng, z, np.full(n, special.ndtri(BASE_ACC)), q, samples)
    out = {}
    for k in NULL_ARMS:
        ps = [d.p_value()[0] for d in family(arms(rng, z, k, n_seeds, seed_sd, r, q=q, k=samples), boot, method)]
        out[f"holm_{len(ps)}"] = min(ps) < ALPHA / len(ps)
        if k == EFFECT_ARMS:
            out["null_called"] = ps[0] < ALPHA
    effect = arms(rng, z, EFFECT_ARMS, n_seeds, seed_sd, r, EFFECT_PP, q=q, k=samples)
    c_a = family(effect, boot, method)[0]
    m = EFFECT_ARMS * (EFFECT_ARMS - 1) // 2
    out.update(power=c_a.p_value()[0] < ALPHA, contrast_covered=covers(c_a, EFFECT_PP),
               gain_covered=covers(gains(effect, base, boot, method)[1], 100.0 * (ARM_ACC - BASE_ACC)),
               detectable=c_a.detectable(ALPHA / m) if state else np.nan)
    at_stated = family(arms(rng, z, EFFECT_ARMS, n_seeds, seed_sd, r, stated_pp, split=True, q=q, k=samples),
                       boot, method)[0]
    out["power_stated"] = at_stated.p_value()[0] < ALPHA / m
    return out


def contrast_components(seed: list[int], n_prompts: int, n_seeds: int, seed_sd: float, r: float, shift_pp: float,
                        n_studies: int = PILOT, q: float = 0.0, samples: int = 1) -> tuple[dict[str, float], float]:
    """The variance components of C - A at ``shift_pp`` points, and the test's kappa there
    (:class:`~diffgrpo.stats.power.Design`): the prompts' and the runs' components from the mean of
    its two-way mean squares over ``n_studies`` simulated studies (each unbiased) drawn from
    ``seed`` (the same draws at every size: a smooth function of the size), the seed's known
    (2 seed_sd^2: each run's accuracy offset is drawn with that sd), and kappa the regression slope,
    over those studies, of the test's prompt-part variance (MS_prompts - MS_resid) / (n S) on est."""
    rng = np.random.default_rng(seed)
    ms = []
    for _ in range(n_studies):
        z = rng.standard_normal(n_prompts)
        c, a = arms(rng, z, 2, n_seeds, seed_sd, r, shift_pp, split=True, q=q, k=samples)
        m = mean_squares(100.0 * (c - a))
        ms.append((m.prompts, m.seeds, m.resid, m.est))
    ms = np.array(ms)
    p, s, e = ms[:, :3].mean(axis=0)
    v_hat, est = np.maximum(ms[:, 0] - ms[:, 2], 0.0) / (n_prompts * n_seeds), ms[:, 3]
    kappa = max(0.0, float(np.cov(v_hat, est)[0, 1] / est.var(ddof=1))) if est.var() > 0 else 0.0
    return {"prompt": max(0.0, (p - e) / n_seeds), "seed": 2 * seed_sd ** 2, "resid": float(e)}, kappa


def stated_size(seed: list[int], n_prompts: int, n_seeds: int, seed_sd: float, r: float, method: str = "pooled",
                q: float = 0.0, samples: int = 1) -> float:
    """The detectable size the kit states for C - A in its family of 6 (80% power at Holm's first
    step, :func:`diffgrpo.stats.power.detectable`) from the contrast's true variance components and
    kappa at that size: the fixed point detectable(size) = size, by root finding."""
    m = EFFECT_ARMS * (EFFECT_ARMS - 1) // 2
    pool_df = all_pairs_df(EFFECT_ARMS, n_seeds) if method == "pooled" else None

    def excess(size: float) -> float:
        comp, kappa = contrast_components(seed, n_prompts, n_seeds, seed_sd, r, size, q=q, samples=samples)
        return detectable(comp, n_prompts, n_seeds, m, pool_df=pool_df, kappa=kappa, grow=False) - size
    hi = EFFECT_PP
    while excess(hi) > 0:
        hi *= 2
    lo = hi / 2
    while lo > 0.05 and excess(lo) < 0:
        lo /= 2
    return float(optimize.brentq(excess, lo, hi, xtol=0.01))


def cell(n_seeds: int, seed_sd: float, flip: float, n_prompts: int, n_sims: int = 1000, n_boot: int = 400,
         seed: int = 0, method: str = "pooled", samples: int = 1) -> dict:
    """One cell's rates over ``n_sims`` studies (module docstring); ``samples``: scored by avg@k."""
    r = noise_weight(flip, ARM_ACC)
    q = sample_weight(SAMPLE_DISAGREE, ARM_ACC) if samples > 1 else 0.0
    boot = Bootstrap(n_prompts, n_boot, seed)
    key = [seed, n_seeds, int(10 * seed_sd), int(1000 * flip), n_prompts] + ([samples] if samples > 1 else [])
    rng = np.random.default_rng(key)
    stated = stated_size([*key, 1], n_prompts, n_seeds, seed_sd, r, method, q=q, samples=samples)
    rows = pd.DataFrame([one_study(rng, boot, n_seeds, seed_sd, r, stated, method, k < STATED, q=q, samples=samples)
                         for k in range(n_sims)])
    rates = rows.drop(columns="detectable").mean()
    return {"method": method, "seeds": n_seeds, "seed_sd_pp": seed_sd, "flip": flip, "prompts": n_prompts,
            "samples": samples, "n_sims": n_sims, "false_call": rates["null_called"],
            **{f"holm_{k * (k - 1) // 2}": rates[f"holm_{k * (k - 1) // 2}"] for k in NULL_ARMS},
            "contrast_coverage": rates["contrast_covered"], "gain_coverage": rates["gain_covered"],
            "power": rates["power"], "detectable_pp": float(rows["detectable"].dropna().median()),
            "stated_pp": stated, "power_at_stated": rates["power_stated"]}


def mc_se(rate: float, n_sims: int) -> float:
    """The Monte Carlo standard error of a rate over ``n_sims`` studies."""
    return float(np.sqrt(rate * (1 - rate) / n_sims))


def grid(n_sims: int = 1000, seeds=SEEDS, seed_sd=SEED_SD, flips=FLIPS, prompts=PROMPTS, methods=("pooled",),
         out: str | None = None, samples=SAMPLES, **kw) -> pd.DataFrame:
    """Every cell of the grid; with ``out`` (a CSV), each cell is appended as it finishes and the
    cells already there (at this ``n_sims``) are read back, so an interrupted grid resumes."""
    cells = list(itertools.product(methods, seeds, seed_sd, flips, prompts, samples))
    done = pd.read_csv(out) if out and Path(out).exists() else pd.DataFrame(columns=KEYS)
    if "samples" not in done:  # a table written before avg@k's cells: greedy's
        done.insert(KEYS.index("samples"), "samples", 1)
    have = set(map(tuple, done[KEYS].itertuples(index=False)))
    shown = bar(len(cells), "calibration cells", unit="cell", initial=0)
    for method, s, sd, f, n, k in cells:
        if (method, s, sd, f, n, k, n_sims) not in have:
            row = pd.DataFrame([cell(s, sd, f, n, n_sims, method=method, samples=k, **kw)])
            if out:
                row.to_csv(out, mode="a", header=not Path(out).exists(), index=False)
            done = pd.concat([done, row], ignore_index=True) if len(done) else row
        shown.update(1)
    shown.close()
    key = lambda df: df[KEYS[:-1]].apply(tuple, axis=1).isin(cells) & (df["n_sims"] == n_sims)  # noqa: E731
    return done[key(done)].reset_index(drop=True)


def simulated_power(delta: float, comp: dict[str, float], n_prompts: int, n_seeds: int, n_arms: int = 2,
                    m: int = 1, n_sims: int = 400, n_boot: int = 400, seed: int = 0) -> tuple[float, float]:
    """The power of the report's test for one contrast at a true difference ``delta`` (points),
    simulated (normal errors) from a contrast's variance components ``comp``: ``n_arms`` arms, every
    pair one family whose seed parts pool, each arm's prompts, seeds and runs carrying half of each
    component (so that a pair carries all of it), the first arm ``delta`` above; the share of
    ``n_sims`` studies (seeded by ``seed``) where its contrast with the second has p < ALPHA / m,
    and the Monte Carlo standard error of that share."""
    rng = np.random.default_rng([seed, 44])
    boot = Bootstrap(n_prompts, n_boot, seed)
    sd = {k: np.sqrt(v / 2) for k, v in comp.items()}
    hits = 0
    for _ in range(n_sims):
        points = [rng.normal(0, sd["prompt"], n_prompts)[:, None] + rng.normal(0, sd["seed"], n_seeds)[None, :]
                  + rng.normal(0, sd["resid"], (n_prompts, n_seeds)) + (delta if k == 0 else 0.0) for k in range(n_arms)]
        dists = family([x / 100 for x in points], boot)  # family() takes scores, and differences them in points
        hits += dists[0].p_value()[0] < ALPHA / m
    rate = hits / n_sims
    return rate, mc_se(rate, n_sims)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulated studies a cell (default 1000)")
    ap.add_argument("--seeds", type=int, nargs="*", default=SEEDS, help="the cells' seeds (default: all)")
    ap.add_argument("--seed-sd", type=float, nargs="*", default=SEED_SD, help="the cells' seed sd, points (default: all)")
    ap.add_argument("--flips", type=float, nargs="*", default=FLIPS, help="the cells' flip rates (default: all)")
    ap.add_argument("--prompts", type=int, nargs="*", default=PROMPTS, help="the cells' test prompts (default: all)")
    ap.add_argument("--method", nargs="*", default=["pooled"], choices=METHODS, help="the test (default: pooled)")
    ap.add_argument("--samples", type=int, nargs="*", default=SAMPLES,
                    help="completions a prompt: 1 greedy 0/1 scores, k > 1 avg@k (default: 1)")
    ap.add_argument("--out", help="also write the table as CSV here, a cell at a time (a rerun resumes it)")
    args = ap.parse_args(argv)
    table = grid(args.sims, args.seeds, args.seed_sd, args.flips, args.prompts, tuple(args.method), out=args.out,
                 samples=tuple(args.samples))
    print(f"Monte Carlo standard error at 95%: {100 * mc_se(0.95, args.sims):.2f} points; at 5%: "
          f"{100 * mc_se(0.05, args.sims):.2f}; at 80%: {100 * mc_se(POWER, args.sims):.2f}")
    print(table.round(4).to_markdown(index=False))


if __name__ == "__main__":
    main()
