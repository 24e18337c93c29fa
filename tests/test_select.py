"""Selection policies: exact sizes, the right extremes, seeded tie-breaking."""

import warnings
import zlib

import numpy as np
import pandas as pd
import pytest

from diffgrpo import params, policies, select
from diffgrpo.analysis import learnability
from diffgrpo.select import SelectionError


@pytest.fixture
def pool():
    rng = np.random.default_rng(0)
    k = 8
    p_hat = rng.binomial(k, rng.beta(0.7, 0.7, size=500)) / k  # many ties, many 0s and 1s
    return pd.DataFrame({
        "id": [f"q{i:04d}" for i in range(500)], "p_hat": p_hat,
        "tier": rng.integers(1, 6, size=500), "base_correct": rng.random(500) < p_hat,
    })


@pytest.mark.parametrize("frac, size", [(0.1, 500), (0.1, 37), (0.33, 500)])
def test_budget_is_floor(frac, size):
    assert select.budget(size, frac, None) == int(np.floor(frac * size))


def test_budget_count_and_bad_budget():
    assert select.budget(100, 0.1, 7) == 7
    with pytest.raises(SelectionError):
        select.budget(10, 0.01, None)


@pytest.mark.parametrize("policy", [p for p in policies.names() if policies.get(p).budgeted])
def test_exact_size_unique_ids_from_pool(pool, policy):
    sel = select.select(pool, policy, 50, seed=1, train_seed=0)
    assert len(sel) == 50 and sel["id"].is_unique and set(sel["id"]) <= set(pool["id"])


def test_hard_and_easy_take_the_extremes(pool):
    hard = select.select(pool, "hard", 50, seed=0)
    easy = select.select(pool, "easy", 50, seed=0)
    rest_hard = pool[~pool["id"].isin(hard["id"])]
    rest_easy = pool[~pool["id"].isin(easy["id"])]
    assert hard["p_hat"].max() <= rest_hard["p_hat"].min()
    assert easy["p_hat"].min() >= rest_easy["p_hat"].max()


def test_ties_are_broken_by_the_seed(pool):
    a = select.select(pool, "hard", 50, seed=0)
    b = select.select(pool, "hard", 50, seed=0)
    c = select.select(pool, "hard", 50, seed=1)
    assert list(a["id"]) == list(b["id"])
    assert set(a["id"]) != set(c["id"])  # the pool has far more than 50 prompts at p_hat 0
    assert (pool["p_hat"] == 0).sum() > 50


def test_middle_stays_in_the_interquartile_range_nearest_the_median(pool):
    sel = select.select(pool, "middle", 50, seed=0)
    q1, med, q3 = np.quantile(pool["p_hat"], [0.25, 0.5, 0.75])
    assert sel["p_hat"].between(q1, q3).all()
    rest = pool[~pool["id"].isin(sel["id"]) & pool["p_hat"].between(q1, q3)]
    assert (sel["p_hat"] - med).abs().max() <= (rest["p_hat"] - med).abs().min()


def test_middle_warns_when_it_would_train_on_hard_prompts():
    """smollm2's case: most of the pool at p_hat 0, so the median equals the first quartile and
    the prompts nearest the median are hard's. A warning says so; a spread pool gives none."""
    p_hat = np.r_[np.zeros(300), np.full(100, 0.25), np.full(100, 0.75)]
    skewed = pd.DataFrame({"id": [f"q{i:04d}" for i in range(500)], "p_hat": p_hat, "tier": 1, "base_correct": False})
    with pytest.warns(policies.MiddleIsNotMiddle, match=r"median p_hat \(0.000\) equals the first quartile.*as hard's"):
        sel = select.select(skewed, "middle", 50, seed=0)
    assert (sel["p_hat"] == 0).all()
    spread = skewed.assign(p_hat=np.linspace(0, 1, 500))
    with warnings.catch_warnings():
        warnings.simplefilter("error", policies.MiddleIsNotMiddle)
        select.select(spread, "middle", 50, seed=0)


def test_p_hat_tiers_number_the_easiest_bin_1():
    prompts = pd.DataFrame({"p_hat": [0.0, 0.3, 0.6, 0.9], "tier": [None] * 4})
    assert list(policies.prompt_tiers(prompts, None)) == [4, 3, 2, 1]


def test_random_is_seeded_and_uniform(pool):
    a = select.select(pool, "random", 50, seed=3, train_seed=0)
    assert list(a["id"]) == list(select.select(pool, "random", 50, seed=3, train_seed=0)["id"])
    # uniform: over many seeds every prompt is chosen about 10% of the time
    counts = pd.concat([select.select(pool, "random", 50, seed=s, train_seed=0)["id"]
                        for s in range(400)]).value_counts()
    freq = counts.reindex(pool["id"], fill_value=0) / 400
    assert abs(freq.mean() - 0.1) < 1e-9 and freq.between(0.02, 0.2).all()
    # and not tied to p_hat
    assert abs(pool.set_index("id")["p_hat"].corr(freq)) < 0.15


def test_per_seed_random_differs_across_seeds_and_deterministic_policies_do_not(pool):
    """(issue 11) random draws its own subset for every training seed; the control arm trains on
    random's subset of the same seed; a deterministic policy ignores the training seed."""
    draws = {s: select.select(pool, "random", 50, seed=0, train_seed=s) for s in range(3)}
    assert len({frozenset(d["id"]) for d in draws.values()}) == 3
    assert [d["train_seed"].iloc[0] for d in draws.values()] == [0, 1, 2]
    again = select.select(pool, "random", 50, seed=0, train_seed=1)
    assert list(again["id"]) == list(draws[1]["id"])
    cfg = params.load("tiny", overrides={"arms": ["random", "random_reward"], "train.seeds": [0, 1]})
    control = select.select_arm(cfg, pool, cfg.arm("random_reward"), train_seed=1)
    same = select.select(pool, "random", len(control), seed=cfg.select.seed, train_seed=1)
    assert list(control["id"]) == list(same["id"]) and set(control["strategy"]) == {"random_reward"}
    for policy in ("hard", "easy", "middle"):
        a, b = (select.select(pool, policy, 50, seed=0, train_seed=s) for s in (0, 1))
        assert list(a["id"]) == list(b["id"]) and "train_seed" not in a
    with pytest.raises(SelectionError, match="train_seed"):
        select.select(pool, "random", 50, seed=0)


def test_seed_0_random_is_what_a_one_seed_study_drew(pool):
    """Adding seeds to a study never changes the runs it has: training seed 0's random subset
    is the stream (select.seed, "random") alone, as before selections were per seed."""
    old = np.random.default_rng([0, zlib.crc32(b"random")]).choice(len(pool), size=50, replace=False)
    assert list(select.select(pool, "random", 50, seed=0, train_seed=0)["id"]) == list(pool["id"].iloc[np.sort(old)])


def test_run_select_writes_one_file_per_seed_for_random_only(tmp_path, monkeypatch, pool):
    from diffgrpo.store import layout
    from diffgrpo import probe

    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    monkeypatch.setattr(probe, "read_prompts", lambda cfg: pool)
    cfg = params.load(overrides={"study": "sel", "arms": ["hard", "random", "random_reward"],
                                         "train.seeds": [0, 1]})
    select.run_select(cfg)
    names = sorted(p.name for p in layout.select_dir(cfg).glob("*.parquet"))
    assert names == ["hard.parquet", "random-seed0.parquet", "random-seed1.parquet",
                     "random_reward-seed0.parquet", "random_reward-seed1.parquet"]
    assert select.selection_path(cfg, "hard", 1) == layout.selection_file(cfg, "hard")
    assert select.selection_path(cfg, "random", 1).name == "random-seed1.parquet"
    assert set(select.read_selections(cfg)) == {"hard", "random-seed0", "random-seed1",
                                                 "random_reward-seed0", "random_reward-seed1"}


def test_base_wrong_and_right_and_matched(pool):
    wrong = select.select(pool, "base_wrong", 0, seed=0)
    right = select.select(pool, "base_right", 0, seed=0)
    assert not wrong["base_correct"].any() and right["base_correct"].all()
    assert len(wrong) + len(right) == len(pool)
    mw = select.select(pool, "base_wrong_matched", 0, seed=0)
    mr = select.select(pool, "base_right_matched", 0, seed=0)
    assert len(mw) == len(mr) == min(len(wrong), len(right))
    assert not mw["base_correct"].any() and mr["base_correct"].all()


def test_all_and_tiers(pool):
    assert len(select.select(pool, "all", 0, seed=0)) == len(pool)
    low = select.select(pool, "tiers", 0, seed=0, max_tier=2)
    assert set(low["tier"]) == {1, 2} and len(low) == (pool["tier"] <= 2).sum()


def test_tiers_from_p_hat_bins_when_the_task_has_none(pool):
    no_tier = pool.assign(tier=None)
    tiers = select.prompt_tiers(no_tier, [0.0, 0.25, 0.5, 0.75, 1.0])
    # tier 1 = easiest (highest p_hat), like MATH level 1
    assert set(tiers[no_tier["p_hat"] == 1.0]) == {1} and set(tiers[no_tier["p_hat"] == 0.0]) == {4}


def test_unknown_policy(pool):
    with pytest.raises(SelectionError, match="unknown selection policy 'hardest'; registered: .*plugins:"):
        select.select(pool, "hardest", 5, seed=0)


def test_predicted_learnable():
    assert learnability.predicted_learnable(np.array([0.0, 1.0]), 8) == 0.0
    assert learnability.predicted_learnable(np.array([0.5]), 2) == pytest.approx(0.5)


def test_an_arm_selects_with_its_own_budget_and_records_its_name(tmp_path, monkeypatch, pool):
    from diffgrpo.store import layout
    from diffgrpo import probe

    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    monkeypatch.setattr(probe, "read_prompts", lambda cfg: pool)
    cfg = params.load(overrides={"study": "arms", "select.budget_frac": 0.1, "train.prompts_per_step": 7, "arms": [
        "hard", {"name": "hard_small", "select": "hard", "budget_count": 7},
        {"name": "lower", "select": "tiers", "max_tier": 2}, {"name": "wrong_m", "select": "base_wrong_matched"}]})
    select.run_select(cfg)
    sel = select.read_selections(cfg)
    assert len(sel["hard"]) == 50 and len(sel["hard_small"]) == 7
    assert list(sel["hard_small"]["id"]) == list(sel["hard"]["id"][:7])  # one policy, one tie-breaking stream
    assert (sel["lower"]["tier"] <= 2).all() and len(sel["lower"]) == (pool["tier"] <= 2).sum()
    assert set(sel["hard_small"]["strategy"]) == {"hard_small"} and set(sel["hard"]["strategy"]) == {"hard"}
    right = (pool["base_correct"]).sum()
    assert len(sel["wrong_m"]) == min(right, len(pool) - right) and not sel["wrong_m"]["base_correct"].any()
    assert layout.selection_file(cfg, "hard_small").exists()


def test_eprli_levels_draw_their_prompts_from_their_bands(pool):
    """(issue 10) Paper 002's D_l: each level's count, from its p_hat band or its tiers, levels
    disjoint and in order; the three EPRLI arms share the prompts; seeded."""
    from diffgrpo.params import LevelParams

    def level(name, **kw):
        base = dict(name=name, p_hat=None, tiers=None, prompts=20, steps=1, max_completion_length=8, epsilon=0.2,
                    epsilon_high=0.2, group_size=2, buffer_size=2, dynamic_sampling=True, length_reward_weight=0.0)
        return LevelParams(**{**base, **kw})

    levels = [level("easy", p_hat=[0.5, 0.875]), level("hard", tiers=[4, 5], prompts=30)]
    sel = select.select(pool, "levels", None, 0, levels=levels, levels_seed=3)
    assert sel["level"].tolist() == ["easy"] * 20 + ["hard"] * 30 and sel["id"].is_unique
    easy, hard = sel[sel["level"] == "easy"], sel[sel["level"] == "hard"]
    assert easy["p_hat"].between(0.5, 0.875).all() and hard["tier"].isin([4, 5]).all()
    assert select.select(pool, "levels", None, 0, levels=levels, levels_seed=3)["id"].tolist() == sel["id"].tolist()
    assert select.select(pool, "levels", None, 0, levels=levels, levels_seed=4)["id"].tolist() != sel["id"].tolist()
    with pytest.raises(SelectionError, match=r"level 'easy': \d+ pool prompts with p_hat in \[0\.5, 0\.875\]"):
        select.select(pool, "levels", None, 0, levels=[level("easy", p_hat=[0.5, 0.875], prompts=10_000)])
