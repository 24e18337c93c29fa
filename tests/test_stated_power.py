"""Issue 44: "a test simulates one contrast of each committed report at its stated size".

Each committed report (``docs/results/<study>/summary.json``, found by glob: a new report is covered
without a change here) states for each paired contrast a ``detectable_pp``: the true difference its
own test (``stats.intervals.mean_dist``, the seed part pooled across the contrasts of the report's
call by ``stats.pooling``, Holm's first step at alpha / m) would find with 80% power. Here one
contrast of each report is simulated at that size, with the report's own test, and must be found in
at least 80% of simulated studies, less 2.5 Monte Carlo standard errors (the statement must not
overstate), and in at most 99% (nor be absurdly conservative).

The contrast: the one the verdict names, the leader's lead over the runner-up (the two arms that are
not controls with the largest gains in ``summary["arms"]``: the verdict's own ranking,
``analysis.uncertainty.verdict_with_intervals``): its ``detectable_pp`` is the size the report's
verdict line and README quote ("a difference of about X points was detectable"). Nothing is
hard-coded: the stated size, the family (the contrast's ``family`` in ``summary["contrasts"]``: m its
rows there), the arms pooled (K, every arm of that list: one call of ``decide`` pools every row), the
test prompts n and the seeds S are read from summary.json and the committed inputs at test time.

Its variance components: the prompts' part and the runs' per-prompt noise its own
(``stats.power.components`` of its prompts x seeds difference, as ``analysis.power.committed_components``
forms it), the seed's part the pooled one its report used (the pool's tau^2 less the contrast's floor):
under the pooling model the seed's effect is common to the arms, and the stated size rests on the
pool's estimate, not on this contrast's 2 degrees of freedom. The test first recomputes the report's
own ``detectable_pp`` from the committed inputs (the same pooled call, the same bootstrap): so the
study simulated is the one the report's number describes.

The simulated study, and why not ``stats.calibration.simulated_power`` as it is. The committed scores
are greedy 0/1 answers, and the report's stated size leans on that: where few prompts carry a
difference the test's variance moves with its estimate (``stats.power.Design``'s kappa, from the
rows' skew). Normal errors (``simulated_power``) have no skew, so they do not reproduce the report's
test; they are run too, as a diagnostic in the failure message, not asserted. The asserted model is
the calibration module's 0/1 latent model (``stats.calibration``: a prompt's latent difficulty z_i,
each run's own noise r e_ij, each run's accuracy offset by its seed, ``calibration.noise_weight``'s
flip model) with one addition, an arm's own per-prompt term q u_ik, so that two arms at the same
accuracy differ on fixed prompts as the committed pair does (the calibration's arms share z exactly:
no prompt component at the null). r, q and the seed sd are solved in closed form (bivariate normal
probabilities) so that a null contrast of two arms at the pair's mean accuracy has the contrast's
three components; the contrast's first arm is then ``detectable_pp`` above the second (half above,
half below their mean accuracy, ``calibration.arms``'s ``split``), the study's other K - 2 arms at
the lower accuracy. A true difference of 0/1 scores brings more discordant prompts with it (their
variance grows with the size, the calibration grid's fixed point), which the report's size, taken
from the observed components, does not see: part of what this test measures.

The test run on each simulated study: every pair of the K arms (``calibration.family``: the report's
``pooled_dists``); where the family is large (more than ``FULL_POOL`` pairs: online_vs_offline's 33 arms)
the homogeneity check is run for the simulated contrast alone (``pooling._too_spread``) and the pool
taken over all pairs (``pool_seed_parts`` without the check): the check costs a degrees-of-freedom
computation per contrast per study (about 1 s a study at 528 pairs, against 0.08 s so), and in simulated homogeneous arms it
drops about 1% of the other contrasts, which moves the pool by about 1%. Called: p < alpha / m (Holm's
first step; the report's resample refinement at an edge is left out, as in ``stats.calibration``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import optimize, special

from diffgrpo.analysis.report import Scores, find_runs
from diffgrpo.stats import ALPHA, POWER, calibration, pooling, power
from diffgrpo.stats.intervals import Bootstrap, mean_dist

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
REPORTS = sorted(p.parent.name for p in RESULTS.glob("*/summary.json"))
N_SIMS = 2000  # simulated studies per report: Monte Carlo se about 0.9 points at 80%
N_SIMS_LARGE = 600  # where the family pools more than FULL_POOL pairs (0.08 s a study at 528): se about 1.6 points
N_BOOT = 400  # prompt resamples of each simulated study's test (the calibration grid's)
FULL_POOL = 66  # up to this many pairs (12 arms) every contrast's homogeneity check is run, as the report does
MC_SE_MARGIN = 2.5
MAX_POWER = 0.99


def latent_model(comp: dict[str, float], acc: float) -> tuple[float, float, float]:
    """(r, q, seed_sd) of the 0/1 model (module docstring) whose null contrast of two arms at
    accuracy ``acc`` has the components ``comp`` (points^2): a run's per-prompt noise variance
    E[P(1 - P)] = acc - Phi2(t, t; 1 - r^2) is half the residual; the arms' own per-prompt terms give
    Var(P_a - P_b) = 2 (Phi2(t, t; 1 - r^2) - Phi2(t, t; 1 - r^2 - q^2)), the prompts' component; the
    seed offsets (accuracy sd) give 2 sd^2 the seed's."""
    t = float(special.ndtri(acc))
    noise = comp["resid"] / 2e4
    r = optimize.brentq(lambda r: acc - calibration.phi2(t, 1 - r * r) - noise, 1e-4, 0.9999) if noise > 0 else 1e-4
    same = calibration.phi2(t, 1 - r * r)
    qmax = 0.9999 * np.sqrt(1 - r * r)
    gap = lambda q: same - calibration.phi2(t, 1 - r * r - q * q) - comp["prompt"] / 2e4  # noqa: E731
    q = 0.0 if comp["prompt"] <= 0 else (qmax if gap(qmax) < 0 else optimize.brentq(gap, 0.0, qmax))
    return r, q, float(np.sqrt(comp["seed"] / 2) / 100)


def binary_arms(rng, n: int, n_seeds: int, n_arms: int, acc: float, delta: float, model) -> list[np.ndarray]:
    """``n_arms`` arms' prompts x seeds 0/1 scores, the first ``delta`` points above the others."""
    r, q, sd = model
    z = rng.standard_normal(n)
    common = np.sqrt(max(0.0, 1 - r * r - q * q))
    out = []
    for k in range(n_arms):
        mean = acc + (delta / 200 if k == 0 else -delta / 200) + rng.normal(0, sd, n_seeds)
        latent = common * z[:, None] + q * rng.standard_normal(n)[:, None] + r * rng.standard_normal((n, n_seeds))
        out.append((latent < special.ndtri(np.clip(mean, 0.01, 0.99))[None, :]).astype(float))
    return out


def normal_arms(rng, n: int, n_seeds: int, n_arms: int, comp: dict[str, float], delta: float) -> list[np.ndarray]:
    """``calibration.simulated_power``'s arms (normal errors, each carrying half of each component), as scores."""
    sd = {k: np.sqrt(v / 2) for k, v in comp.items()}
    return [(rng.normal(0, sd["prompt"], n)[:, None] + rng.normal(0, sd["seed"], n_seeds)[None, :]
             + rng.normal(0, sd["resid"], (n, n_seeds)) + (delta if k == 0 else 0.0)) / 100 for k in range(n_arms)]


def first_contrast(scores: list[np.ndarray], boot: Bootstrap):
    """The report's test of the first pair (arm 0 - arm 1), its seed part pooled across every pair
    (module docstring: the homogeneity check for it alone where the family is large)."""
    pairs = calibration.pairs_of(len(scores))
    if len(pairs) <= FULL_POOL:
        return calibration.family(scores, boot)[0]
    diffs = [100.0 * (scores[a] - scores[b]) for a, b in pairs]
    units = pooling.pair_units([(str(a), str(b)) for a, b in pairs])
    first = mean_dist(diffs[0], boot)
    one = Bootstrap(boot.n_prompts, 1, 0)  # a seed part does not depend on the prompt resamples: one suffices
    parts = [first.seed] + [mean_dist(d, one, exact=False).seed for d in diffs[1:]]
    spread, floors = np.array([p.spread for p in parts]), np.array([p.floor for p in parts])
    if floors[0] <= 0 or pooling._too_spread(0, spread, floors, units, parts[0].n_seeds, pooling.HOMOGENEITY):
        return first
    seed = pooling.pool_seed_parts(parts, units, check=None)[0]
    return first if seed is first.seed else replace(first, seed=seed)


def simulated(delta: float, make, n: int, m: int, n_sims: int, seed: int) -> tuple[float, float]:
    """The share of ``n_sims`` studies (``make(rng, delta)``: their arms) whose first contrast has
    p < ALPHA / m, and its Monte Carlo standard error."""
    rng = np.random.default_rng([seed, 44, 2])
    boot = Bootstrap(n, N_BOOT, seed)
    hits = sum(first_contrast(make(rng, delta), boot).p_value()[0] < ALPHA / m for _ in range(n_sims))
    return hits / n_sims, calibration.mc_se(hits / n_sims, n_sims)


def the_contrast(study: str) -> dict:
    """The verdict's contrast of a committed report (module docstring), with what its test rests on."""
    root = RESULTS / study
    summary = json.loads((root / "summary.json").read_text())
    raw = yaml.safe_load((root / "inputs" / "report" / "params.yaml").read_text())  # raw: the schema may run ahead of it
    control = {a["name"] for a in raw["arms"] if a.get("role") == "control"}
    rows = pd.DataFrame(summary["contrasts"])
    gains = {a: v["gain_pp"] for a, v in summary["arms"].items() if a not in control}
    leader = max(gains, key=lambda a: gains[a])
    # the runner-up among the arms the leader is contrasted with (no family mixes budgets: the verdict's peers)
    peers = {b if a == leader else a for a, b in zip(rows["a"], rows["b"]) if leader in (a, b)} & set(gains)
    second = max(peers, key=lambda a: gains[a])
    i = int(rows.index[((rows["a"] == leader) & (rows["b"] == second)) | ((rows["a"] == second) & (rows["b"] == leader))][0])
    complete, _ = find_runs(root / "inputs")
    runs = pd.DataFrame([{"strategy": mf["strategy"], "seed": int(mf["seed"])} for mf in complete])
    scores = Scores(root / "inputs", runs, raw["analyze"]["metric"])
    common = [sorted(set(scores.seeds(a)) & set(scores.seeds(b))) for a, b in zip(rows["a"], rows["b"])]
    diffs = [100.0 * (scores.at(a, seeds=c) - scores.at(b, seeds=c)) for a, b, c in zip(rows["a"], rows["b"], common)]
    boot = Bootstrap(len(scores.prompts), raw["analyze"]["bootstrap"], raw["analyze"]["seed"])
    dist = pooling.pooled_dists(diffs, pooling.pair_units(list(zip(rows["a"], rows["b"]))), boot)[i]
    row, m = rows.loc[i], int((rows["family"] == rows.loc[i, "family"]).sum())
    own = power.components(diffs[i])
    comp = {"prompt": own["prompt"], "resid": own["resid"], "seed": max(0.0, dist.seed.tau2 - dist.seed.floor)}
    a, b = row["a"], row["b"]
    acc = float((scores.at(a, seeds=common[i]).mean() + scores.at(b, seeds=common[i]).mean()) / 2)
    return {"name": f"{a} - {b}", "family": row["family"], "m": m, "stated": float(row["detectable_pp"]),
            "recomputed": dist.detectable(ALPHA / m), "comp": comp, "acc": acc, "n": diffs[i].shape[0],
            "n_seeds": diffs[i].shape[1], "n_arms": len(set(rows["a"]) | set(rows["b"]))}


def test_every_committed_report_is_found():
    assert {"embedded", "online_vs_offline", "paper001_embedded", "paper002_embedded"} <= set(REPORTS), REPORTS


# At the reports committed at 059aa5f (0/1 model; normal errors in brackets, a quarter of the studies), 160 s
# on one core: embedded middle - hard, stated 4.06 in a family of 6: 74.2% +- 1.0 (74.2 +- 2.0), below;
# online_vs_offline all.b1344 - all_learnability.b1344, 3.73 in 528: 41.2% +- 2.0 (83.3 +- 3.0), far below
# (components 78 / 189 points^2: few discordant prompts, so a true 3.7-point difference brings several times
# the observed variance); online_vs_offline_skewed all_learnability.b1344 - hard.b1344, 7.30 in 528:
# 73.8% +- 1.8 (83.3 +- 3.0), below; paper001 all - base_right, 13.46 in 3: 81.1% +- 0.9 (76.2 +- 1.9), 1 point
# above 80%; paper002 eprli_dynamic - eprli_grpo, 10.94 in 3: 78.2% +- 0.9 (75.4 +- 1.9), within 2.5 se.
@pytest.mark.stats
@pytest.mark.parametrize("study", REPORTS)
def test_the_verdicts_contrast_simulated_at_its_stated_size_is_found_with_80_percent_power(study):
    c = the_contrast(study)
    # the size is the report's own: the same pooled call on the committed inputs gives it again
    assert c["recomputed"] == pytest.approx(c["stated"], abs=0.00051), (
        f"{study}: {c['name']}: detectable_pp {c['stated']} is not the committed inputs' all-pairs pooled test "
        f"at Holm's first step of its family ({c['recomputed']:.4f}): this test no longer simulates the report's test")
    n, s, k, m, size = c["n"], c["n_seeds"], c["n_arms"], c["m"], c["stated"]
    model = latent_model(c["comp"], c["acc"])
    sims = N_SIMS if k * (k - 1) // 2 <= FULL_POOL else N_SIMS_LARGE
    rate, se = simulated(size, lambda rng, d: binary_arms(rng, n, s, k, c["acc"], d, model), n, m, sims, seed=0)
    # the diagnostic (normal errors: no skew), a quarter as many studies
    normal, normal_se = simulated(size, lambda rng, d: normal_arms(rng, n, s, k, c["comp"], d), n, m, sims // 4, seed=1)
    said = (f"{study}: {c['name']} (family {c['family']!r} of {m}, {k} arms pooled, {n} prompts x {s} seeds, components "
            f"{ {key: round(v, 1) for key, v in c['comp'].items()} }, accuracy {c['acc']:.3f}): stated {size:.2f} points; "
            f"simulated power there {rate:.3f} (se {se:.3f}) with 0/1 scores, {normal:.3f} (se {normal_se:.3f}) with normal errors")
    print(said)
    assert rate >= POWER - MC_SE_MARGIN * se, "the stated size overstates the test's power: " + said
    assert rate <= MAX_POWER, "the stated size is far larger than the test needs: " + said
