"""Test prompts by difficulty (probe.test): the test set's probe, gains per test-difficulty bin,
each arm scored on the test prompts of its own training difficulty (paper 003's released code)
beside the common test set, and the p_hat_band policy that selects whole buckets as that code did."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from diffgrpo.tasks import splits
from diffgrpo.analysis import report as analyze, by_test_difficulty
from diffgrpo.store import layout
from diffgrpo import params, policies, probe  # noqa: E402
from diffgrpo.params import ParamsError  # noqa: E402

from test_analyze import N_PROMPTS, make_study  # noqa: E402

# test prompts t000..t089 are easy for the base model (p_hat 0.9), t090..t199 hard (0.1)
N_EASY = 90


@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    cfg = params.load(overrides={"study": "synthetic", "arms": ["easy", "hard"], "train.seeds": [0, 1],
                                 "probe.k": 8, "probe.test": True})
    make_study(layout.study_dir(cfg))
    p_hat = np.where(np.arange(N_PROMPTS) < N_EASY, 0.9, 0.1)
    test_probe = pd.DataFrame({"id": [f"t{i:03d}" for i in range(N_PROMPTS)], "tier": 1, "k": 10,
                               "n_correct": (10 * p_hat).astype(int), "p_hat": p_hat})
    folder = layout.probe_dir(cfg, "test")
    folder.mkdir(parents=True)
    test_probe.to_parquet(folder / "prompts.parquet")
    return cfg


def test_gains_per_test_bin_and_on_each_arm_s_own_difficulty(study):
    # the synthetic runs: the first round(acc x 200) test prompts are right. Base 80 right
    # (t000..t079); easy 84 / 86 right (seeds 0 / 1), hard 104 / 106
    summary = analyze.report(study)
    td = summary["test_difficulty"]
    bins = pd.DataFrame(td["bins"]).set_index(["bin", "strategy"])
    hard_bin, easy_bin = "[0, 0.3]", "(0.7, 1]"
    assert bins.loc[(hard_bin, "hard"), "n_prompts"] == 110 and bins.loc[(easy_bin, "hard"), "n_prompts"] == 90
    assert bins.loc[("(0.3, 0.7]", "hard"), "n_prompts"] == 0  # an empty bin is listed, without a gain
    assert np.isnan(bins.loc[("(0.3, 0.7]", "hard"), "gain_pp"])
    # hard gains on the hard test prompts: 14 and 16 of 110 more; on the easy ones: all 10 missing of 90
    assert bins.loc[(hard_bin, "hard"), "gain_pp"] == pytest.approx(100 * 15 / 110, abs=1e-4)
    assert bins.loc[(easy_bin, "hard"), "gain_pp"] == pytest.approx(100 * 10 / 90, abs=1e-4)
    assert bins.loc[(hard_bin, "easy"), "gain_pp"] == 0.0
    assert bins.loc[(hard_bin, "hard"), "base_acc"] == 0.0
    lo, hi = bins.loc[(hard_bin, "hard"), ["ci_low", "ci_high"]]
    assert lo < 100 * 15 / 110 < hi and lo > 0

    # easy trained on p_hat 0.9-1.0: its matched test prompts are the easy 90; hard on 0-0.2: the hard 110
    m = pd.DataFrame(td["matched"]).set_index(["strategy", "scoring"])
    assert m.loc[("easy", "matched"), "n_prompts"] == 90 and m.loc[("hard", "matched"), "n_prompts"] == 110
    assert m.loc[("easy", "matched"), "p_hat_range"] == "[0.9, 1]"
    assert m.loc[("easy", "matched"), "gain_pp"] == pytest.approx(100 * 5 / 90, abs=1e-4)
    assert m.loc[("hard", "common"), "gain_pp"] == pytest.approx(12.5, abs=1e-4)
    assert m.loc[("easy", "common"), "gain_pp"] == pytest.approx(2.5, abs=1e-4)
    sp = td["spread"]
    assert (sp["first"], sp["last"]) == ("hard", "easy")
    assert sp["matched"]["diff_pp"] == pytest.approx(100 * 15 / 110 - 100 * 5 / 90, abs=1e-4)
    assert sp["common"]["diff_pp"] == pytest.approx(10.0, abs=1e-4)
    assert sp["common"]["excludes_zero"] and sp["common"]["ranking"] == ["hard", "easy"]
    # matched: the two arms' sets differ, so their seed parts (t, 1 df) add up unpaired: wide
    assert not sp["matched"]["excludes_zero"]
    assert sp["matched"]["ci95"][1] - sp["matched"]["ci95"][0] > sp["common"]["ci95"][1] - sp["common"]["ci95"][0]
    assert "hard minus easy is +8.1 points [" in td["verdict"]
    assert "the spread is inside the noise already under matched scoring" in td["verdict"]
    # the share of the matched spread the scoring makes: 1 - 10 / 8.08 on the points, but the matched
    # spread's interval holds 0, so no finite interval (the README's 1 - 4.6 / 18.3 case)
    share = sp["share_removed"]
    assert share["pct"] == pytest.approx(100 * (1 - 10 / (100 * 15 / 110 - 100 * 5 / 90)), abs=1e-4)
    assert share["ci95"] is None and "no finite 95% interval" in share["words"] and share["words"] in td["verdict"]

    out = layout.report_dir(study)
    for name in ("test_bins.csv", "test_bins.md", "fig_test_bins.png", "matched_test.csv", "matched_test.md",
                 "fig_matched_test.png"):
        assert (out / name).stat().st_size > 0, name
    assert json.loads((out / "summary.json").read_text())["test_difficulty"]["verdict"] == td["verdict"]


def test_without_probe_test_the_report_has_no_test_difficulty(study):
    assert analyze.report(study.replace(**{"probe.test": False}))["test_difficulty"] is None


def test_a_test_prompt_the_probe_does_not_cover_is_named(study):
    path = layout.probe_dir(study, "test") / "prompts.parquet"
    pd.read_parquet(path).iloc[1:].to_parquet(path)
    with pytest.raises(ValueError, match="test prompt 't000' is scored but not in the test set's probe"):
        analyze.report(study)


def test_the_share_of_the_spread_the_scoring_makes_has_an_interval_only_where_the_spread_is_known():
    """1 - common / matched per resample; its interval narrows with the matched spread's, is
    called wide past WIDE points, and is not given where the matched spread may be 0."""
    rng = np.random.default_rng(0)
    common = rng.normal(5.0, 1.0, 4000)
    tight = by_test_difficulty.removed_share({"diff_pp": 20.0, "excludes_zero": True}, {"diff_pp": 5.0},
                                             rng.normal(20.0, 1.0, 4000), common)
    assert tight["pct"] == pytest.approx(75.0)
    lo, hi = tight["ci95"]
    assert 60 < lo < 75 < hi < 85 and "[" in tight["words"] and "wide" not in tight["words"]
    loose = by_test_difficulty.removed_share({"diff_pp": 20.0, "excludes_zero": True}, {"diff_pp": 5.0},
                                             rng.normal(20.0, 6.0, 4000), rng.normal(5.0, 6.0, 4000))
    assert loose["ci95"][1] - loose["ci95"][0] > by_test_difficulty.WIDE and "a wide interval" in loose["words"]
    unknown = by_test_difficulty.removed_share({"diff_pp": 18.3, "excludes_zero": False}, {"diff_pp": 4.6},
                                               rng.normal(18.3, 11.0, 4000), common)
    assert unknown["pct"] == pytest.approx(100 * (1 - 4.6 / 18.3)) and unknown["ci95"] is None
    assert "On the point estimates the matched scoring makes 75% of the spread (1 - 4.6 / 18.3)" in unknown["words"]
    none = by_test_difficulty.removed_share({"diff_pp": 0.0, "excludes_zero": False}, {"diff_pp": 4.6}, common, common)
    assert none["pct"] is None and none["ci95"] is None


def test_bins_hold_their_lower_edge_first():
    edges = [0.0, 0.3, 0.7, 1.0]
    assert by_test_difficulty.bin_labels(edges) == ["[0, 0.3]", "(0.3, 0.7]", "(0.7, 1]"]
    assert list(by_test_difficulty.bin_of([0.0, 0.3, 0.31, 0.7, 1.0], edges)) == [0, 0, 1, 1, 2]


@pytest.mark.parametrize("bins", [[0.0, 1.0, 0.5], [0.1, 1.0], [0.0, 0.5], [0.0]])
def test_bad_test_bins_are_refused_by_key(bins):
    with pytest.raises(ParamsError, match="analyze.test_bins"):
        params.load(overrides={"analyze.test_bins": bins})


def test_p_hat_band_takes_a_whole_bucket():
    prompts = pd.DataFrame({"id": list("abcde"), "p_hat": [0.0, 0.3, 0.31, 0.7, 1.0], "tier": 1})
    rng = np.random.default_rng(0)
    band = policies.get("p_hat_band").fn
    assert list(band(prompts, None, rng, low=0.0, high=0.3)["id"]) == ["a", "b"]
    assert list(band(prompts, None, rng, low=0.7, high=0.7)["id"]) == ["d"]
    with pytest.raises(policies.SelectionError, match="no pool prompt has p_hat in"):
        band(prompts, None, rng, low=0.4, high=0.6)
    with pytest.raises(policies.SelectionError, match="low = 0.5, high = 0.2"):
        band(prompts, None, rng, low=0.5, high=0.2)


@pytest.mark.e2e
def test_the_real_probe_of_the_test_set_is_keyed_apart_from_the_pool_s(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    off = params.load("tiny", overrides={"dataset.pool_size": 16, "dataset.test_size": 12, "probe.k": 2})
    cfg = off.replace(**{"probe.test": True})
    assert probe.read_test_prompts(off) is None
    with pytest.raises(FileNotFoundError, match="the test set is not probed yet"):
        probe.read_test_prompts(cfg)
    assert layout.probe_dir(cfg) == layout.probe_dir(off)  # the pool's probe is not moved by probe.test
    assert layout.probe_dir(cfg, "test") != layout.probe_dir(cfg)
    assert layout.probe_dir(cfg.replace(**{"dataset.test_size": 10}), "test") != layout.probe_dir(cfg, "test")

    probe.run_probe(cfg, progress=False)
    test = probe.read_test_prompts(cfg)
    assert list(test["id"]) == list(splits.load_test(cfg)["id"]) and (test["k"] == 2).all()
    assert set(test["p_hat"]) <= {0.0, 0.5, 1.0}
    assert "base_correct" not in test  # the one-sample probe is the pool's only
    assert len(probe.read_prompts(cfg)) == 16
    manifest = json.loads((layout.probe_dir(cfg, "test") / "manifest.json").read_text())
    assert manifest["role"] == "test" and manifest["key"]["rows"]["role"] == "test"


# ---- paper 003 as its released code ran --------------------------------------------------


def test_the_released_code_layer_composes_with_a_model_and_dataset_file():
    cfg = params.load("paper003_released_code_gsm8k_qwen3_4b")
    assert (cfg.model.name, cfg.dataset.task) == ("qwen3-4b", "gsm8k")  # from paper003_gsm8k_qwen3_4b.yaml
    assert cfg.probe.k == 10 and cfg.probe.test and cfg.analyze.metric == "pass@1"  # the layer, last, wins
    assert [(a.name, a.select, a.options) for a in cfg.arms[:3]] == [
        ("hard", "p_hat_band", {"low": 0.0, "high": 0.3}), ("middle", "p_hat_band", {"low": 0.4, "high": 0.6}),
        ("easy", "p_hat_band", {"low": 0.7, "high": 1.0})]
    assert cfg.train.trl["adam_beta2"] == 0.99 and cfg.train.learning_rate == 5e-6
    # the same layer on the embedded default (a different model and task) loads as well
    embedded = params.load("embedded", "paper003_released_code")
    assert embedded.dataset.task == "shuffled_objects" and embedded.arms[0].select == "p_hat_band"


def test_gsm8k_released_code_prompt_and_strict_scorer():
    from diffgrpo.tasks import get
    from diffgrpo.tasks.gsm8k import strict_boxed_int

    default, code = get("gsm8k"), get("gsm8k", prompt="released_code", scorer="strict_boxed_int")
    assert default.describe() == {"name": "gsm8k"}  # keys of studies that set no option are unchanged
    assert code.describe() == {"name": "gsm8k", "prompt": "released_code", "scorer": "strict_boxed_int"}
    assert strict_boxed_int(r"first \boxed{3}, then \boxed{18}") == 18
    assert [strict_boxed_int(t) for t in (r"\boxed{1,600}", r"\boxed{18.0}", r"\boxed{\$18}", "18")] == [None] * 4
    assert code.score(r"so \boxed{1600}", "1,600") == 1.0  # the gold's comma is removed, as the code does
    assert code.score(r"so \boxed{1,600}", "1,600") == 0.0 and default.score(r"so \boxed{1,600}", "1,600") == 1.0
    assert code.score("#### 18", "18") == 0.0 and default.score("#### 18", "18") == 1.0
    row = code.load("test", source="offline").iloc[0]
    assert row["prompt"] == [{"role": "user", "content": row["question"] + ".\nPut your final answer within \\boxed{}."}]
    assert default.load("test", source="offline").iloc[0]["prompt"][0]["role"] == "system"
    with pytest.raises(Exception, match="task_options.scorer = 'loose'"):
        get("gsm8k", scorer="loose")


def test_the_plan_counts_the_test_set_s_probe():
    from diffgrpo.study import graph, plan

    def probe_row(cfg):
        table = plan.plan(cfg, graph.jobs(cfg, {"params_file": "", "overrides": {}}))
        return table[table["stage"] == "01_probe"].iloc[0]

    off = params.load("tiny", overrides={"probe.test": False})
    on = off.replace(**{"probe.test": True})
    k, pool, test = off.probe.k, off.dataset.pool_size, off.dataset.test_size
    assert probe_row(off)["completions"] == pool * (k + 1)  # K samples + the one-sample probe
    assert probe_row(on)["completions"] == pool * (k + 1) + test * k
    assert probe_row(on)["prompts"] == pool + test
