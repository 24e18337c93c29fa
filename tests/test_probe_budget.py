"""A cheaper probe from one probe's samples (diffgrpo.analysis.probe_budget): the K sweep and
adaptive probing, on samples whose answers are known."""

import numpy as np
import pandas as pd
import pytest

from diffgrpo.analysis import probe_budget


def samples(rows: list[list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"prompt_id": f"q{i:02d}", "sample": j, "correct": bool(c)}
                         for i, row in enumerate(rows) for j, c in enumerate(row)])


@pytest.fixture
def pool():
    """40 prompts x 16 samples: 10 never right, 10 always right, 20 at success rates spread over (0, 1)."""
    rng = np.random.default_rng(0)
    rows = [[0] * 16] * 10 + [[1] * 16] * 10
    rows += [list((rng.random(16) < p).astype(int)) for p in np.linspace(0.2, 0.8, 20)]
    return samples(rows)


def test_the_full_k_reproduces_the_full_probe_and_fewer_samples_drift(pool):
    sweep = probe_budget.k_sweep(pool, n=8, group_size=8).set_index(["k", "policy"])
    assert sorted({k for k, _ in sweep.index}) == [1, 2, 4, 8, 16]
    full = sweep.loc[16]
    assert (full["overlap_pct"] == 100).all() and (full["p_hat_error"] == 0).all()
    assert sweep.loc[(1, "hard"), "p_hat_error"] > sweep.loc[(8, "hard"), "p_hat_error"] > 0
    assert (sweep["completions"] == sweep.index.get_level_values("k") * 40).all()
    # hard at K = 16 picks the never-right prompts: nothing learnable predicted
    assert full.loc["hard", "predicted_learnable_pct"] == 0
    assert full.loc["middle", "predicted_learnable_pct"] > 90


def test_adaptive_probing_stops_flat_prompts_early_and_says_what_it_cost(pool):
    _, x = probe_budget.correct_matrix(pool)
    taken = probe_budget.adaptive_n(x, round_size=2, edge=0.3, confidence=0.75)
    # all wrong after m samples: P(p < 0.3) = 1 - 0.7^(m + 1), first >= 0.75 at m = 4
    assert (taken[:20] == 4).all()
    assert (taken[20:] > 4).any()
    totals, per_policy = probe_budget.adaptive(pool, n=8)
    assert totals["completions_full"] == 640 and totals["completions_adaptive"] == int(taken.sum())
    assert totals["saved_pct"] == pytest.approx(100 * (1 - taken.sum() / 640), abs=0.01)
    assert list(per_policy["policy"]) == ["hard", "middle", "easy"]
    # hard picks 8 of the prompts at p_hat 0: a mixed prompt stopped at 0 of 4 ties with them, nothing else
    hard = per_policy.set_index("policy").loc["hard"]
    stopped_at_zero = int(((taken[20:] == 4) & (x[20:, :4].sum(axis=1) == 0)).sum())
    assert hard["overlap_pct"] >= 100 * (8 - stopped_at_zero) / 8 - 1e-9


@pytest.mark.parametrize("rule", probe_budget.ADAPTIVE_RULES + ((3, 0.25, 0.8),))
@pytest.mark.parametrize("k", [1, 2, 4, 8, 10])
def test_adaptive_stopping_follows_its_rule_prompt_by_prompt(rule, k):
    """The stopping rule evaluated once per (round end, successes) stops each prompt where the
    rule, applied to that prompt's own samples round by round, stops it."""
    from scipy.stats import beta

    round_size, edge, confidence = rule
    rng = np.random.default_rng(k)
    x = (rng.uniform(size=(300, k)) < rng.uniform(size=(300, 1))).astype(float)
    expected = []
    for row in x:
        stop = [m for m in range(round_size, k, round_size)
                if max(beta.cdf(edge, 1 + row[:m].sum(), 1 + m - row[:m].sum()),
                       beta.sf(1 - edge, 1 + row[:m].sum(), 1 + m - row[:m].sum())) >= confidence]
        expected.append(stop[0] if stop else k)
    taken = probe_budget.adaptive_n(x, round_size, edge, confidence)
    assert taken.tolist() == expected
    if rule == probe_budget.ADAPTIVE_RULES[0] and k >= 8:
        assert (taken < k).any() and (taken == k).any()  # some prompts stop early, not all


def test_a_prompt_short_of_samples_is_named():
    bad = samples([[0, 1], [1, 1]]).iloc[:-1]
    with pytest.raises(ValueError, match="q01"):
        probe_budget.correct_matrix(bad)


def test_the_sweep_always_ends_at_the_full_k():
    """Issue 37: K = 3 gave rows for 1 and 2 alone."""
    rows = [[0, 1, 1], [1, 1, 1], [0, 0, 0], [1, 0, 0]] * 3
    sweep = probe_budget.k_sweep(samples(rows), n=4, group_size=4)
    assert sorted(set(sweep["k"])) == [1, 2, 3] and (sweep[sweep["k"] == 3]["overlap_pct"] == 100).all()


def test_the_frontier_counts_ties_as_agreement_and_charges_a_cheaper_probe_only_at_90_at_half(pool):
    front = probe_budget.frontier(pool, n=8)
    rules = list(dict.fromkeys(front["rule"]))
    assert rules[0] == "first 1 of 16" and rules[-1] == "full (16 a prompt)"
    assert len(rules) == 15 + len(probe_budget.ADAPTIVE_RULES) + 1
    full = front[front["rule"] == rules[-1]]
    assert (full["agreement_pct"] == 100).all() and (full["completions_pct"] == 100).all()
    # hard's 8 of the 10 never-right prompts: any of the 10 agrees, the exact overlap need not
    hard = front[(front["policy"] == "hard") & (front["rule"] == "first 8 of 16")].iloc[0]
    assert hard["completions_pct"] == 50 and hard["agreement_pct"] == 100 and hard["overlap_pct"] <= 100
    assert (front["agreement_pct"] >= front["overlap_pct"]).all()
    found = probe_budget.cheaper_probe(front)
    # 16 samples of a never-right prompt: the first 4 say so as well; hard and easy are cheap
    assert found["hard"]["completions_pct"] <= 50 and found["hard"]["agreement_pct"] >= 90
    assert "hard: first" in probe_budget.cheaper_probe_in_words(front, found)


def test_no_cheaper_probe_is_charged_where_none_keeps_90_percent_at_half():
    rng = np.random.default_rng(1)
    rows = [list((rng.random(4) < p).astype(int)) for p in rng.uniform(0.2, 0.8, 40)]  # no prompt flat: ties everywhere
    front = probe_budget.frontier(samples(rows), n=10)
    found = probe_budget.cheaper_probe(front)
    at_half = front[front["completions_pct"] <= probe_budget.HALF]
    for pol, hit in found.items():
        best = at_half[at_half["policy"] == pol]["agreement_pct"].max()
        assert (hit is None) == (best < probe_budget.AGREEMENT)
    words = probe_budget.cheaper_probe_in_words(front, found)
    assert all(f"{pol}: " in words for pol in probe_budget.POLICIES)


def test_chance_is_a_random_selections_agreement_on_average_and_stands_beside_every_agreement(pool):
    """Issue 44: agreement counts ties, so a random selection scores above 0. chance_pct is exact:
    the mean agreement of 4,000 random selections of 8 lies within 4 Monte Carlo errors of it."""
    ids, x = probe_budget.correct_matrix(pool)
    full = x.mean(axis=1)
    full_of = dict(zip(ids, full))
    truth = probe_budget._selections(ids, full, 8, 0)
    rng = np.random.default_rng(0)
    for pol in probe_budget.POLICIES:
        chance = probe_budget.chance_agreement(truth[pol], full_of)
        drawn = [probe_budget._agreement(set(rng.choice(ids, 8, replace=False)), truth[pol], full_of)
                 for _ in range(4000)]
        assert 0 < chance < 100 and abs(np.mean(drawn) - chance) < 4 * np.std(drawn) / np.sqrt(len(drawn))
    front = probe_budget.frontier(pool, n=8)
    assert (front.groupby("policy")["chance_pct"].nunique() == 1).all()
    assert front.loc[front["policy"] == "hard", "chance_pct"].iloc[0] == 25.0  # the 10 never-right prompts of 40
    words = probe_budget.cheaper_probe_in_words(front, probe_budget.cheaper_probe(front))
    assert words.count("by chance") == 3 and "against 25% by chance" in words
