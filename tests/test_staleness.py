"""The staleness section's decay and its interval (diffgrpo.analysis.sections.staleness), on
constructed runs whose answer is known; the windows table itself is tested in test_analyze."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from diffgrpo.analysis.sections import staleness


def test_weighted_spearman_is_scipys_on_the_resample_it_stands_for():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, 15) / 4, rng.random(15)  # ties in a, as at a K = 4 probe
    w = rng.multinomial(15, np.full(15, 1 / 15), size=50)
    got = staleness.weighted_spearman(a, b, w)
    for row, rho in zip(w, got):
        ra, rb = np.repeat(a, row), np.repeat(b, row)
        want = staleness._spearman(ra, rb)
        assert (np.isnan(rho) and np.isnan(want)) or rho == pytest.approx(want, abs=1e-12)
    assert staleness.weighted_spearman(a, b, np.ones(15))[0] == pytest.approx(stats.spearmanr(a, b).statistic)
    assert np.isnan(staleness.weighted_spearman(np.ones(5), b[:5], np.ones(5))[0])  # a constant side


def _run(p_hat: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[pd.DataFrame, pd.Series]:
    ids = [f"q{i}" for i in range(len(p_hat))]
    return pd.DataFrame({1: first, 2: (first + last) / 2, 3: last}, index=ids), pd.Series(p_hat, index=ids)


def test_a_ranking_that_reverses_decays_with_an_interval_that_excludes_0():
    """20 prompts: training's success follows the probe's order in the first window and runs
    against it in the last (plus noise): the decay is near 2 and its interval far from 0."""
    rng = np.random.default_rng(1)
    p = np.linspace(0, 1, 20)
    runs = [_run(p, p + rng.normal(0, 0.1, 20), 1 - p + rng.normal(0, 0.1, 20)) for _ in range(3)]
    d = staleness.decay(runs, n_boot=500, seed=0)
    assert d["decay"] == pytest.approx(d["spearman_first"] - d["spearman_last"]) and d["decay"] > 1.5
    assert 0 < d["ci95"][0] < d["decay"] < d["ci95"][1] and d["resamples_used"] == 500
    assert d["p_hat_values"] == 20 and not d["few_p_hat"]
    assert staleness.decay(runs, n_boot=500, seed=0) == d  # seeded: the same numbers again


def test_a_ranking_that_holds_has_an_interval_that_holds_0_and_few_p_hat_values_are_named():
    """The same noisy ranking in both windows: no decay the prompts can tell. hard's 12 prompts
    at two p_hat values (0 and 0.25): flagged, and the words say the prompts tie."""
    rng = np.random.default_rng(2)
    p = np.repeat([0.0, 0.25], 6)
    signal = p + rng.normal(0, 0.15, 12)
    runs = [_run(p, signal + rng.normal(0, 0.1, 12), signal + rng.normal(0, 0.1, 12)) for _ in range(3)]
    d = staleness.decay(runs, n_boot=500, seed=0)
    assert d["ci95"][0] < 0 < d["ci95"][1] and d["p_hat_values"] == 2 and d["few_p_hat"]
    row = {"strategy": "hard.b3", "first_steps": "1-5", "last_steps": "15-18", "spearman_first": d["spearman_first"],
           "spearman_last": d["spearman_last"], "decay": d["decay"], "ci_low": d["ci95"][0], "ci_high": d["ci95"][1],
           "n_prompts": 12, "p_hat_values": 2, "few_p_hat": True}
    words = staleness.decay_in_words(row)
    assert words.startswith("hard.b3: Spearman") and "no change the prompts can tell" in words
    assert "its 12 prompts take 2 p_hat values, so most of them tie" in words


def test_one_p_hat_value_has_no_rank_and_no_decay():
    p = np.zeros(12)
    d = staleness.decay([_run(p, np.linspace(0, 1, 12), np.linspace(1, 0, 12))], n_boot=200, seed=0)
    assert np.isnan(d["decay"]) and np.isnan(d["ci95"][0]) and d["resamples_used"] == 0 and d["p_hat_values"] == 1
    assert staleness.decay_in_words({"decay": np.nan}) is None


def test_nested_arms_are_listed_once_by_the_longest():
    """hard.b1, .b2, .b3 are prefixes of one trajectory (5, 9, 18 steps): hard.b3 holds the others;
    easy stands alone; an arm not probed (all) is not listed even if nested."""
    manifests = [{"strategy": a, "steps_done": n} for a, n in
                 (("hard.b1", 5), ("hard.b2", 9), ("hard.b3", 18), ("easy", 7), ("all.b1", 3), ("all.b2", 6))]
    study = SimpleNamespace(manifests=manifests,
                            nested_arms=lambda: [["hard.b3", "hard.b1", "hard.b2"], ["all.b1", "all.b2"]])
    held = staleness.listed_arms(study, ["easy", "hard.b1", "hard.b2", "hard.b3", "all.b2"])
    assert held == {"easy": [], "hard.b3": ["hard.b1", "hard.b2"], "all.b2": []}
