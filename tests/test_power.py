"""The detectable difference: the variance components it is built from, its formula against the
report's own, and what ``--plan`` prints (diffgrpo.analysis.power)."""

import numpy as np

from diffgrpo import params
from diffgrpo.analysis import power, uncertainty


def _matrix(rng, n=2000, s=8, prompt=30.0, seed=2.0, resid=10.0):
    return (rng.normal(0, prompt, n)[:, None] + rng.normal(0, seed, s)[None, :] + rng.normal(0, resid, (n, s)))


def test_the_three_components_are_recovered_from_a_prompts_x_seeds_matrix():
    rng = np.random.default_rng(0)
    comp = [power.components(_matrix(rng)) for _ in range(40)]
    prompt, seed, resid = (np.mean([c[k] for c in comp]) for k in ("prompt", "seed", "resid"))
    assert abs(prompt - 900) < 40 and abs(resid - 100) < 3 and 1.5 < seed < 7  # seed: 8 seeds, 40 studies
    assert power.components(np.zeros((10, 3))) == {"prompt": 0.0, "seed": 0.0, "resid": 0.0}


def test_the_detectable_difference_shrinks_with_prompts_and_seeds_and_grows_with_holm():
    comp = {"prompt": 1000.0, "seed": 8.0, "resid": 1000.0}
    d = power.detectable(comp, 300, 3)
    assert power.detectable(comp, 1000, 3) < d and power.detectable(comp, 300, 8) < d < power.detectable(comp, 300, 3, m=10)
    # one contrast with the seed part negligible: (1.96 + 0.84) x sqrt(1000 / 300 + 1000 / 900)
    big = power.detectable({"prompt": 1000.0, "seed": 0.0, "resid": 0.0}, 300, 16)
    assert abs(big - 2.80 * np.sqrt(1000 / 300)) < 0.1


def test_the_report_and_the_plan_agree_on_a_studys_detectable_difference():
    """The report's detectable_pp (from a contrast's bootstrap and seed part) and the plan's (from
    its components) are one formula: within 10% on the same matrix."""
    rng = np.random.default_rng(1)
    x = _matrix(rng, n=400, s=4, prompt=25.0, seed=3.0, resid=15.0)
    dist = uncertainty.mean_dist(x, uncertainty.Bootstrap(400, 2000, 0))
    planned = power.detectable(power.components(x), 400, 4)
    assert abs(dist.detectable() / planned - 1) < 0.1, (dist.detectable(), planned)


def test_plan_names_the_committed_study_it_takes_its_components_from_or_says_they_are_assumed():
    cfg = params.load("embedded")
    lines = power.plan_lines(cfg)
    assert "committed study 'embedded' (same task, model and metric" in lines[0], lines
    assert [ln.split(":")[0].strip() for ln in lines[1:]] == list(power.families(cfg)) and "arms" in power.families(cfg)
    assert all(float(ln.rsplit(":", 1)[1].split()[0]) > 0 for ln in lines[1:])
    other = params.load("embedded", overrides={"model.name": "not-committed"})
    assert "assumed variance components" in power.plan_lines(other)[0]
