"""The detectable difference: the variance components it is built from, the test it inverts (its
power at the stated size, simulated), the report's and the plan's agreeing, and what ``--plan``
prints (diffgrpo.stats.power, diffgrpo.analysis.power)."""

import numpy as np
import pytest
from scipy import stats

from diffgrpo import params
from diffgrpo.analysis import power as plan
from diffgrpo.stats import calibration, intervals, pooling, power


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
    # one contrast without a seed part: the normal's (1.96 + 0.84) x its standard error
    big = power.detectable({"prompt": 1000.0, "seed": 0.0, "resid": 0.0}, 300, 16, grow=False)
    assert abs(big - 2.80 * np.sqrt(1000 / 300)) < 0.1


def test_the_report_and_the_plan_agree_on_a_studys_detectable_difference():
    """The report's detectable_pp (from a contrast's bootstrap and seed part) and the plan's (from
    its components) invert one test: within 10% on the same matrix."""
    rng = np.random.default_rng(1)
    x = _matrix(rng, n=400, s=4, prompt=25.0, seed=3.0, resid=15.0)
    dist = intervals.mean_dist(x, intervals.Bootstrap(400, 2000, 0))
    planned = power.detectable(power.components(x), 400, 4)
    assert abs(dist.detectable() / planned - 1) < 0.1, (dist.detectable(), planned)


def test_plan_names_the_committed_study_it_takes_its_components_from_or_says_they_are_assumed():
    cfg = params.load("embedded")
    lines = plan.plan_lines(cfg)
    assert "committed study 'embedded' (same task, model and metric" in lines[0], lines
    assert [ln.split(":")[0].strip() for ln in lines[1:]] == list(plan.families(cfg)) and "arms" in plan.families(cfg)
    assert all(float(ln.rsplit(":", 1)[1].split()[0]) > 0 for ln in lines[1:])
    other = params.load("embedded", overrides={"model.name": "not-committed"})
    assert "assumed variance components" in plan.plan_lines(other)[0]
    # the plan's figure is the report's test inverted, its seed part pooled over every pair of the study's arms
    comp, _ = plan.committed_components(plan.matching_study(cfg))
    n, s, k = cfg.dataset.test_size, len(cfg.train.seeds), len(cfg.arms)
    arms = float(next(ln for ln in lines if ln.strip().startswith("arms:")).rsplit(":", 1)[1].split()[0])
    expected = power.detectable(comp, n, s, plan.families(cfg)["arms"], pool_df=pooling.all_pairs_df(k, s))
    assert arms == pytest.approx(expected, abs=0.051)


def test_the_critical_point_is_the_tests_own_and_the_old_formula_understated_it():
    """Issue 44: the test the report runs is the floored t_{S-1} pivot; at Holm's first step of a
    family of 6, with 4 seeds and the default study's components, its critical point is beyond
    3.5 SE, where the (t_{1 - alpha/2m} + t_{0.8}) x SE formula took 2.85 SE, and the power at that
    formula's size is near 50%, not 80%. The detectable difference is where this test's power is
    80%; pooled across every pair of the study's 5 arms (12 degrees of freedom, not 3) it is smaller."""
    comp = {"prompt": 243.0, "seed": 0.0, "resid": 605.0}  # prompt sd 15.6, per-run noise sd 24.6 points
    design = power.design_of(comp, 300, 4)
    thresholds = design.thresholds(0.05 / 6)
    assert (thresholds.crit[:, 0] @ thresholds.weights) / design.sd > 3.5
    # with no prompt part the critical point is the seed part's own quantile
    seed = intervals.SeedPart(spread=3 * design.tau2, floor=design.floor, n_seeds=4)
    assert power.critical_point(0.0, design.tau2, design.floor, 3, 4, 0.05 / 6) == pytest.approx(
        seed.quantile(1 - 0.05 / 12), rel=1e-6)
    assert power.power_at(2.85 * design.sd, comp, 300, 4, 6) < 0.6
    d = power.detectable(comp, 300, 4, 6, grow=False)
    assert power.power_at(d, comp, 300, 4, 6) == pytest.approx(0.8, abs=1e-4) and d > 1.3 * 2.85 * design.sd
    assert power.detectable(comp, 300, 4, 6, pool_df=pooling.all_pairs_df(5, 4), grow=False) < 0.75 * d


@pytest.mark.parametrize("n_seeds, comp", [
    (2, {"prompt": 243.0, "seed": 0.0, "resid": 605.0}),   # no seed variance: the pool earns the df
    (4, {"prompt": 243.0, "seed": 20.0, "resid": 605.0}),  # a seed sd of 4.5 points a difference
])
def test_one_contrast_simulated_at_its_stated_size_is_found_with_80_percent_power(n_seeds, comp):
    """A contrast of a 4-arm study (a family of 6) simulated from its variance components at the
    size the kit states for it (normal errors; the report's own test: prompt bootstrap, pooled
    seed part, sign-flip floor) is found at Holm's first step in 80% of studies, within 3 Monte
    Carlo standard errors (400 studies: 2 points)."""
    n, m = 300, 6
    stated = power.detectable(comp, n, n_seeds, m, pool_df=pooling.all_pairs_df(4, n_seeds), grow=False)
    rate, se = calibration.simulated_power(stated, comp, n, n_seeds, n_arms=4, m=m, n_sims=400, n_boot=400, seed=1)
    assert abs(rate - 0.8) <= 3 * se, (stated, rate, se)


def test_where_few_prompts_carry_a_difference_the_tests_variance_moves_with_its_estimate():
    """0/1 scores that differ on a few prompts, all one way: a study that drew more of them sees a
    larger difference and a larger variance, so the test finds more than a normal model with the
    same components says. kappa (the rows' third moment over n^2, over the mean's variance) is 0
    for symmetric values and positive here, and the detectable difference it gives is smaller."""
    rng = np.random.default_rng(0)
    symmetric = rng.normal(0, 30, 300)
    assert power.kappa_of(symmetric - symmetric.mean() + 2.0, 2.0, 3.0) < 0.02
    few = np.r_[np.full(9, 100.0), np.zeros(291)]  # 3 points, from 9 prompts won in every seed
    v = few.var() / 300
    kappa = power.kappa_of(few, few.mean(), v)
    assert kappa == pytest.approx(((few - few.mean()) ** 3).mean() / 300 ** 2 / v) and 0.2 < kappa < 0.4
    flat = power.Design(v, 0.0, 0.0, 0.0, 1)
    skewed = power.Design(v, 0.0, 0.0, 0.0, 1, kappa=kappa)
    d = power.detectable_difference(skewed, 0.05 / 6)
    assert d < 0.92 * power.detectable_difference(flat, 0.05 / 6)
    # at that size, studies that draw the winning prompts as a Poisson count, each testing with its own
    # variance (wins x 100^2 / n^2), reject in 80% of cases (the flat design's size would be ~90%)
    wins = rng.poisson(d * 300 / 100, 20000)
    est, sd = wins * 100 / 300, np.sqrt(wins) * 100 / 300
    assert abs((est > stats.norm.ppf(1 - 0.05 / 12) * sd).mean() - 0.8) < 0.04


def test_the_plan_forms_the_reports_families_the_question_first_and_none_across_budgets():
    """online_vs_offline: 11 arms at each of 3 budgets. Its declared question (6 contrasts, 2 a
    budget) is one family; every other pair is in its budget's family (55 pairs a budget, less the
    2 declared); no pair of arms at different budgets is formed unless analyze.across_budgets."""
    from diffgrpo.analysis.report import contrast_plan
    from diffgrpo.analysis.uncertainty import pair_families

    cfg = params.load("online_vs_offline")
    fams = plan.families(cfg)
    assert fams == {"primary": 6, "arms at 576 rollouts": 53, "arms at 960 rollouts": 53, "arms at 1344 rollouts": 53}
    budget = {a: b for a, b in contrast_plan(cfg)["budget_of"].items()}
    pairs = pair_families([a.name for a in cfg.arms], **contrast_plan(cfg))
    assert pairs[:6] == [(a, b, "primary") for a, b in params.schema.primary_pairs(cfg)]
    assert all(budget[a] == budget[b] for a, b, _ in pairs)
    wide = params.load("online_vs_offline", overrides={"analyze.across_budgets": True})
    assert plan.families(wide)["across budgets"] == 33 * 32 // 2 - 3 * 55
    # the plan's pool is every pair formed: 3 budgets' 11 arms span 3 x 10 seed contrasts a seed
    assert plan._families(cfg)["primary"][1] == pytest.approx(30.0)


def test_a_declared_question_is_checked_before_any_work():
    for primary, words in [(["hard - nowhere"], "'nowhere' is not an arm of this study"),
                           (["hard-random"], "two arms' names apart by ' - '"),
                           (["hard - hard"], "contrasts an arm with itself"),
                           (["hard - random", "random - hard"], "declared more than once")]:
        with pytest.raises(params.ParamsError, match="analyze.primary") as err:
            params.load("embedded", overrides={"analyze.primary": primary})
        assert words in str(err.value)
    with pytest.raises(params.ParamsError, match="placed at different total-rollout budgets") as err:
        params.load("online_vs_offline", overrides={"analyze.primary": ["middle.b576 - random.b960"]})
    assert "analyze.across_budgets: true" in str(err.value)
    ok = params.load("online_vs_offline", overrides={"analyze.primary": ["middle.b576 - random.b960"],
                                                     "analyze.across_budgets": True})
    assert plan.families(ok)["primary"] == 1


def test_new_arms_without_a_question_of_their_own_declare_none():
    """The question names arms: an override (or a file) that sets ``arms`` and not ``analyze.primary``
    drops the inherited one (the report then says no question is declared); with both, its own."""
    assert params.load("embedded").analyze.primary == ["hard - random"]
    assert params.load("embedded", overrides={"arms": ["hard", "easy"]}).analyze.primary == []
    both = params.load("embedded", overrides={"arms": ["hard", "easy"], "analyze.primary": ["easy - hard"]})
    assert both.analyze.primary == ["easy - hard"]


def test_the_study_that_confirms_a_question_is_named_checked_and_not_inherited():
    """``analyze.confirmation``: a study whose question was declared after its runs names the study
    that asks it on fresh seeds; a file naming a new study (paper003_confirmatory includes
    embedded.yaml) does not inherit it; a name that is no params file, or no question, is refused."""
    assert params.load("embedded").analyze.confirmation == "paper003_confirmatory.yaml"
    assert params.load("paper003_confirmatory").analyze.confirmation is None
    assert params.load("online_vs_offline_resolved").analyze.confirmation is None
    with pytest.raises(params.ParamsError, match="analyze.confirmation.*not a params file"):
        params.load("embedded", overrides={"analyze.confirmation": "no_such_study.yaml"})
    with pytest.raises(params.ParamsError, match="analyze.confirmation.*analyze.primary is empty"):
        params.load("embedded", overrides={"analyze.primary": []})
    with pytest.raises(params.ParamsError, match="this study itself"):
        params.load("embedded", overrides={"analyze.confirmation": "embedded.yaml"})


def test_the_size_is_found_where_the_scores_vary_as_they_would_at_that_size():
    """0/1 scores: a true difference of d points is more prompts one arm wins, so one run's
    per-prompt difference varies by (d - e)(100 - d - e) points^2 more than at the observed e. The
    stated size is the fixed point d = detectable(components at d), larger than the size at the
    observed components, and the test's power at the grown components is 80% there."""
    assert power.growth(4.0) == pytest.approx(4 * 96) and power.growth(4.0, est=1.0) == pytest.approx(3 * 95)
    assert power.growth(1.0, est=3.0) == 0.0
    comp = {"prompt": 78.0, "seed": 0.0, "resid": 189.0}  # few discordant prompts (online_vs_offline's)
    n, s = 300, 3
    plain = power.detectable(comp, n, s, 6, grow=False)
    d = power.detectable(comp, n, s, 6)
    assert d > 1.3 * plain
    at_d = power.grown(power.design_of(comp, n, s), power.growth(d), n)
    assert power.power_of_test(d, at_d, 0.05 / 6) == pytest.approx(0.8, abs=0.01)
    # the growth splits as the contrast's own prompt and per-run parts do; one seed: all to the prompts
    share = 78 / (78 + 189)
    assert at_d.v_prompt - 78 / n == pytest.approx(share * power.growth(d) / n)
    one = power.grown(power.design_of(comp, n, 1), 100.0, n)
    assert one.v_prompt == pytest.approx((78 + 189 + 100) / n) and one.floor == 0.0


def test_an_exact_tie_still_states_the_size_its_test_would_need():
    """Two arms that answer alike on every prompt and seed: the observed variance is 0, but a true
    difference would bring discordant prompts, so the size is the fixed point, not 0."""
    tie = intervals.mean_dist(np.zeros((300, 3)), intervals.Bootstrap(300, 400, 0))
    d = tie.detectable(0.05)
    assert 1.0 < d < 20.0
    one = power.detectable({"prompt": 0.0, "seed": 0.0, "resid": 0.0}, 300, 1)
    assert one == pytest.approx(power.detectable_difference(power.grown(power.design_of(
        {"prompt": 0.0, "seed": 0.0, "resid": 0.0}, 300, 1), power.growth(one), 300)), abs=0.02)
