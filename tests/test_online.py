"""Online selection (diffgrpo.train.online) and the compute ledger (diffgrpo.train.ledger) as
functions of a run's history and files; the trainer running them on a model is in
tests/test_train.py (``test_online_*``, ``test_the_ledger_*``)."""

import numpy as np
import pandas as pd
import pytest

from diffgrpo import policies, params
from diffgrpo.params import ParamsError
from diffgrpo.store import artifacts, layout
from diffgrpo.train import ledger, run_levels
from diffgrpo.train import online as train_online
from diffgrpo import online

IDS = [f"p{i}" for i in range(10)]


def method(settings, seed, ids, warm=None):
    """The registered method ``settings`` name (``none``: dynamic sampling's rule, the one a run
    with ``train.dynamic_sampling`` on and no method keeps groups by)."""
    name = "dynamic_sampling" if settings.method == online.NONE else settings.method
    return online.get(name)(settings, seed, ids, warm)


def settings(**kw):
    return params.load("tiny", overrides={f"train.online.{k}": v for k, v in kw.items()}).train.online


def group(step, pid, scores):
    r = np.asarray(scores, float)
    return {"step": step, "prompt_id": pid, "rewards": list(r), "scores": list(r), "reward_mean": float(r.mean()),
            "learnable": bool(r.max() > r.min()), "kept": True}


def test_band_keeps_mixed_groups_whose_mean_lies_in_it():
    sel = method(settings(method="band", band=[0.25, 0.5]), 0, IDS)
    assert [sel.keep(group(1, "p0", s)) for s in ([0, 0, 0, 1], [0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1])] == \
        [True, True, False, False]
    off = method(settings(method="none"), 0, IDS)  # dynamic sampling's own rule: any mixed group
    assert off.keep(group(1, "p0", [0, 1, 1, 1])) and not off.keep(group(1, "p0", [1, 1, 1, 1]))


def test_the_posterior_counts_every_earlier_group_and_the_probe_when_warm():
    past = [group(1, "p0", [1, 1, 0, 1]), group(2, "p0", [0, 0, 0, 0]), group(3, "p0", [1, 1, 1, 1])]
    cold = method(settings(method="posterior"), 0, IDS)
    a, b = cold.posterior(past, step=3)  # step 3's own group is not yet evidence
    assert (a[0], b[0]) == (1 + 3, 1 + 5) and (a[1], b[1]) == (1, 1)
    warm = method(settings(method="posterior", warm_start=True), 0, IDS, {"p1": (2, 8)})
    a, b = warm.posterior(past, step=3)
    assert (a[1], b[1]) == (1 + 2, 1 + 6)
    decayed = method(settings(method="posterior", decay=0.5), 0, IDS)
    a, b = decayed.posterior(past, step=3)  # step 1's group is 1 step older than step 2's
    assert (a[0], b[0]) == (1 + 0.5 * 3, 1 + 0.5 * 1 + 4)


def test_thompson_sampling_prefers_prompts_near_the_target_and_replays_by_seed():
    """Prompts seen 40 times all-right or all-wrong are almost never drawn near 0.5; prompts at
    0.5 are; the same (seed, step) draws the same prompts, another step others."""
    past = [group(1, pid, [1] * 40) for pid in IDS[:4]] + [group(1, pid, [0] * 40) for pid in IDS[4:8]]
    past += [group(1, pid, [1] * 20 + [0] * 20) for pid in IDS[8:]]
    sel = method(settings(method="posterior", target=0.5), 3, IDS)
    chosen, skipped = sel.choose(IDS[:2], past, step=2)
    assert sorted(chosen) == ["p8", "p9"] and skipped == 0
    assert sel.choose(IDS[:2], past, step=2)[0] == chosen
    high = method(settings(method="posterior", target=1.0), 3, IDS).choose(IDS[:4], past, step=2)[0]
    assert set(high) == set(IDS[:4])
    fresh = method(settings(method="posterior"), 3, IDS)
    draws = {tuple(fresh.choose(IDS[:3], [], step=s)[0]) for s in range(1, 6)}
    assert len(draws) > 1  # with no evidence the draw varies by step


def test_skip_zero_variance_skips_flat_prompts_and_fills_with_others():
    past = [group(1, "p0", [1, 1, 1, 1]), group(1, "p1", [0, 1, 0, 1]), group(2, "p2", [0, 0, 0, 0])]
    never = method(settings(method="skip_zero_variance", recheck=0.0), 0, IDS)
    chosen, skipped = never.choose(["p0", "p1", "p2"], past, step=3)
    assert skipped == 2 and chosen[0] == "p1" and not {"p0", "p2"} & set(chosen) and len(set(chosen)) == 3
    always = method(settings(method="skip_zero_variance", recheck=1.0), 0, IDS)
    assert always.choose(["p0", "p1", "p2"], past, step=3) == (["p0", "p1", "p2"], 0)
    window = method(settings(method="skip_zero_variance", recheck=0.0, window=2), 0, IDS)
    assert window.choose(["p0", "p2"], past, step=3) == (["p0", "p2"], 0)  # one flat group is not two
    everyone_flat = [group(1, pid, [1, 1]) for pid in IDS]
    chosen, skipped = never.choose(IDS[:2], everyone_flat, step=2)  # nothing else to take: the skipped come back
    assert chosen == IDS[:2] and skipped == 2


def test_online_treatments_compose_with_any_policy_and_are_keyed_only_when_on():
    cfg = params.load("tiny", overrides={"arms": ["hard", "all_posterior", "random_online_band",
                                                  "middle_skip_zero_variance", "all_posterior_warm"]})
    assert cfg.arm("all_posterior").select == "all" and cfg.arm("random_online_band").select == "random"
    assert cfg.for_arm("all_posterior_warm").train.online.warm_start
    keys = {a.name: layout.run_key(cfg.for_arm(a.name), ["x"])["train"] for a in cfg.arms}
    assert "online" not in keys["hard"]
    assert keys["all_posterior"]["online"]["method"] == "posterior"
    assert keys["middle_skip_zero_variance"]["online"]["method"] == "skip_zero_variance"
    assert run_levels(cfg.for_arm("random_online_band"), "random_online_band", 12)[0].dynamic_rounds == \
        cfg.train.dynamic_sampling.max_rounds  # the band refills as dynamic sampling does


@pytest.mark.parametrize("key, value, says", [
    ("train.online.band", [0.8, 0.2], "low <= high"),
    ("train.online.prior", [1.0], "Beta prior"),
    ("train.online.method", "thompson", "train.online.method"),
])
def test_bad_online_settings_name_their_key(key, value, says):
    with pytest.raises(ParamsError, match=says):
        params.load("tiny", overrides={key: value})


def test_choosing_methods_need_one_process():
    with pytest.raises(ParamsError, match="train.online.method.*num_processes"):
        params.load("tiny", overrides={"train.online.method": "posterior", "train.num_processes": 2})


def test_the_probe_is_charged_to_the_arms_whose_selection_read_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    arms = ["hard", "random", "all_posterior", "all_posterior_warm",
            {"name": "random_charged", "select": "random", "charge_probe": True}]
    cfg = params.load("tiny", overrides={"arms": arms})
    charged = {a.name: ledger.charges_probe(cfg.for_arm(a.name), a.name) for a in cfg.arms}
    assert charged == {"hard": True, "random": False, "all_posterior": False, "all_posterior_warm": True,
                       "random_charged": True}
    probe = layout.probe_dir(cfg)
    artifacts.write_parquet(probe / layout.PROMPTS, pd.DataFrame({"id": ["a", "b"], "k": [4, 4],
                                                                  "mean_tokens": [10.0, 20.5]}))
    artifacts.write_json(probe / layout.MANIFEST, {"seconds": {"cpu": 7.0, "gpu": 0.0, "wall": 8.0}})
    groups = [{**group(1, "a", [0, 1, 1, 1]), "completion_tokens": 30},
              {**group(1, "b", [1, 1, 1, 1]), "completion_tokens": 12, "kept": False}]
    seconds = {"cpu": 3.0, "gpu": 0.0, "wall": 4.0}
    hard = ledger.ledger(cfg, "hard", groups, seconds)
    assert hard["probe"] | {"charge": None} == {"charged": True, "part": "all", "charge": None, "completions": 8,
                                                 "tokens": 122, "cpu_seconds": 7.0, "gpu_seconds": 0.0}
    assert hard["train"] == {"completions_generated": 8, "completions_kept": 4, "completions_dropped": 4,
                             "tokens_generated": 42, "cpu_seconds": 3.0, "gpu_seconds": 0.0, "wall_seconds": 4.0}
    assert (hard["total_rollouts"], hard["total_tokens"]) == (16, 164)
    rand = ledger.ledger(cfg, "random", groups, seconds)
    assert rand["probe"]["completions"] == 0 and rand["total_rollouts"] == 8


def test_labelled_prompts_are_training_s_prompts_and_the_probed_pool_where_charged(tmp_path, monkeypatch):
    """The ledger's second column: distinct prompts whose reward was computed; a dropped group
    and a pilot row count, a prompt seen twice once; the probe's pool is added only to an arm
    charged the probe; a charged probe that is not there says nothing (None)."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    cfg = params.load("tiny", overrides={"arms": ["hard", "random"]})
    groups = [group(1, "a", [0, 1]), group(2, "a", [1, 1]), {**group(1, "z", [0, 0]), "kept": False, "round": 0}]
    assert ledger.labelled_prompts(cfg, "random", groups) == 2
    assert ledger.labelled_prompts(cfg, "hard", groups) is None  # no probe written yet
    probe = layout.probe_dir(cfg)
    artifacts.write_parquet(probe / layout.PROMPTS, pd.DataFrame({"id": ["a", "b", "c"], "k": [4] * 3,
                                                                  "mean_tokens": [10.0] * 3}))
    artifacts.write_json(probe / layout.MANIFEST, {"seconds": {"cpu": 1.0, "gpu": 0.0}})
    assert ledger.labelled_prompts(cfg, "hard", groups) == 4  # a, b, c probed; z trained on
    assert ledger.ledger(cfg, "hard", groups, {"cpu": 1.0})["labelled_prompts"] == 4
    assert ledger.ledger(cfg, "random", groups, {"cpu": 1.0})["labelled_prompts"] == 2
    assert ledger.labelled_prompts(cfg, "random", [{"rewards": [1.0], "kept": True}]) is None  # no prompt ids


def test_a_policy_that_reads_only_the_one_sample_pass_is_charged_that_pass_alone(tmp_path, monkeypatch):
    """Paper 001's "cheaper filter": base_wrong reads the greedy one-sample pass, not p_hat's K samples."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    cfg = params.load("tiny", overrides={"arms": ["hard", "base_wrong"], "probe.one_sample": True,
                                         "train.max_completions": 64})
    probe = layout.probe_dir(cfg)
    artifacts.write_parquet(probe / layout.PROMPTS, pd.DataFrame({"id": ["a", "b"], "k": [4, 4],
                                                                  "mean_tokens": [10.0, 20.5]}))
    # as probe.py writes it: one row per completion, its prompt's id in `prompt_id` (a hand-written `id`
    # here once hid that the ledger read the wrong column: issue 47)
    artifacts.write_parquet(probe / layout.ONE_SAMPLE, pd.DataFrame({"prompt_id": ["a", "b"], "num_tokens": [9, 11]}))
    artifacts.write_json(probe / layout.MANIFEST, {"seconds": {"cpu": 7.0, "gpu": 0.0, "wall": 8.0}})
    whole = ledger.ledger(cfg, "base_wrong", [{"prompt_id": "c", "rewards": [1.0], "kept": True}], {"cpu": 1.0})
    assert whole["labelled_prompts"] == 3  # the greedy pass's a, b and the trained c
    wrong = whole["probe"]
    assert (wrong["part"], wrong["completions"], wrong["tokens"], wrong["cpu_seconds"]) == ("one_sample", 2, 20, None)
    hard = ledger.ledger(cfg, "hard", [], {"cpu": 1.0})["probe"]
    assert (hard["part"], hard["completions"], hard["tokens"]) == ("all", 10, 142)
    pool = cfg.dataset.pool_size
    assert ledger.planned_rollouts(cfg, "base_wrong") == 64 + pool
    assert ledger.planned_rollouts(cfg, "hard") == 64 + pool * cfg.probe.k + pool
    with pytest.raises(policies.SelectionError, match="reads_probe must be"):
        policies.register("odd", reads_probe="p_hat")


# ---- the registry (issue 38) --------------------------------------------------------------------
def test_the_registry_holds_six_methods_each_declaring_settings_when_and_cost():
    # the package's own six, registered first (a test module's plugins may follow them in this process)
    assert online.names()[:6] == ["band", "posterior", "skip_zero_variance", "dynamic_sampling", "learnability",
                                  "pilot_commit"]
    for name in online.names()[:6]:
        m = online.get(name)
        assert m.name == name and m.when in ("before", "after") and m.cost
        assert issubclass(m.Settings, online.Settings)
    assert [n for n in online.names()[:6] if online.get(n).when == "before"] == [
        "posterior", "skip_zero_variance", "learnability", "pilot_commit"]


def test_the_flat_block_s_defaults_are_defaults_yaml_s():
    """The four methods of the flat block dump it whole (their run keys); its model's defaults (used
    when a layer switches back to one of them) are defaults.yaml's."""
    assert params.load("tiny").train.online.model_dump() == online.FlatSettings(method="none").model_dump()


def test_a_new_method_takes_only_its_own_keys_and_the_flat_keys_below_it_are_dropped():
    cfg = params.load("tiny", overrides={"arms": ["all_learnability", "all_pilot_commit", "all_posterior"]})
    assert cfg.for_arm("all_learnability").train.online.model_dump() == {
        "method": "learnability", "window": 1, "unseen": 0.5, "floor": 0.01}
    assert cfg.for_arm("all_pilot_commit").train.online.model_dump() == {
        "method": "pilot_commit", "pilot": 2, "candidates": None}
    key = layout.run_key(cfg.for_arm("all_learnability"), ["x"])["train"]["online"]
    assert key["method"] == "learnability"


@pytest.mark.parametrize("overrides, says", [
    ({"train.online.method": "learnability", "train.online.band": [0.2, 0.8]}, r"unknown key `train.online.band`"),
    ({"train.online.method": "learnability", "train.online.floor": 0.0}, r"train.online.floor.*out of range"),
    ({"train.online.method": "learnability", "train.online.unseen": 1.5}, r"train.online.unseen.*out of range"),
    ({"train.online.method": "pilot_commit", "train.online.pilot": 4}, r"train.online.pilot.*smaller than a group"),
    ({"train.online.method": "pilot_commit", "train.online.pilot": 1}, r"train.online.pilot.*out of range"),
    ({"train.online.method": "pilot_commit", "train.online.candidates": 4}, r"train.online.candidates.*more than"),
    ({"train.online.method": "pilot_commit", "train.online.recheck": 0.5}, r"unknown key `train.online.recheck`"),
    ({"train.online.method": "learnability", "train.num_processes": 2}, r"train.online.method.*num_processes"),
])
def test_bad_settings_of_the_new_methods_are_refused_by_key(overrides, says):
    with pytest.raises(ParamsError, match=says):
        params.load("tiny", overrides=overrides)


def test_dynamic_sampling_as_a_method_is_the_same_run_as_its_switch():
    as_method = params.load("tiny", overrides={"train.online.method": "dynamic_sampling"})
    as_switch = params.load("tiny", overrides={"train.dynamic_sampling.enabled": True})
    assert as_method.train.online.method == "none" and as_method.train.dynamic_sampling.enabled
    assert layout.run_key(as_method, ["x"]) == layout.run_key(as_switch, ["x"])


def test_every_reader_sees_dynamic_sampling_one_way():
    """Issue 45: once loaded, dynamic sampling is said one way, ``train.dynamic_sampling.enabled``
    (an arm's ``online.method: dynamic_sampling``, as online_vs_offline writes it, is folded at
    load too); the trainer's online method, the level's rounds and the ledger's kind read that
    switch alone, and agree for both spellings."""
    cfg = params.load("tiny", overrides={"arms": [
        "hard", {"name": "as_method", "select": "all", "train": {"online": {"method": "dynamic_sampling"}}},
        {"name": "as_switch", "select": "all", "train": {"dynamic_sampling": {"enabled": True}}}]})
    rows = pd.DataFrame({"id": IDS, "p_hat": 0.5})

    def read(arm):
        acfg = cfg.for_arm(arm)
        t = acfg.train
        return (t.online.method, t.dynamic_sampling.enabled, train_online.for_run(t, 0, rows, cfg.probe.k),
                run_levels(acfg, arm, len(IDS))[0].dynamic_rounds, ledger.arm_kind(cfg, arm))

    rounds = cfg.train.dynamic_sampling.max_rounds
    assert read("as_method") == read("as_switch") == ("none", True, None, rounds, "online")
    assert read("hard") == ("none", False, None, None, "offline")
    study = params.load("online_vs_offline")
    spelled = [a.name for a in study.arms if a.train.get("online", {}).get("method") == "dynamic_sampling"]
    assert spelled and all(study.for_arm(a).train.online.method == "none"
                           and study.for_arm(a).train.dynamic_sampling.enabled for a in spelled)


def test_learnability_draws_in_proportion_to_p_one_minus_p():
    sel = method(settings(method="learnability", floor=0.001), 0, IDS)
    past = [group(1, pid, [1, 1, 1, 1]) for pid in IDS[:4]] + [group(1, pid, [0, 0, 0, 0]) for pid in IDS[4:8]]
    past += [group(1, "p8", [1, 0, 1, 0]), group(1, "p9", [1, 1, 1, 0])]
    w = sel.weights(past)
    assert w[8] > w[9] > w[0] and np.isclose(w[0], w[4]) and np.isclose(w.sum(), 1.0)
    assert np.isclose(w[8] / w[9], (0.25 + 0.001) / (0.1875 + 0.001))
    counts = pd.Series([p for s in range(2, 202) for p in sel.choose(IDS[:2], past, step=s)[0]]).value_counts()
    assert set(counts.index[:2]) == {"p8", "p9"} and counts.get("p0", 0) < 20  # two of 10 drawn a step
    assert sel.choose(IDS[:2], past, step=5) == sel.choose(IDS[:2], past, step=5)  # seeded by (seed, step)
    unseen = sel.estimates([])
    assert (unseen == 0.5).all()


def test_pilot_commit_pilots_candidates_then_commits_to_the_informative():
    sel = method(settings(method="pilot_commit", candidates=6, pilot=2), 0, IDS)
    ids, m = sel.pilot(["p0", "p1"], [], step=3)
    assert ids[:2] == ["p0", "p1"] and len(set(ids)) == 6 and m == 2
    pilots = [{**group(3, pid, s), "round": 0} for pid, s in zip(ids, ([1, 1], [0, 0], [1, 0], [0, 0], [0, 1], [1, 1]))]
    chosen, skipped = sel.choose(["p0", "p1"], pilots, step=3)
    assert chosen == [ids[2], ids[4]] and skipped == 2
    older = [{**g, "step": 2} for g in pilots]  # an earlier step's pilot is not this step's
    assert sel.choose(["p0", "p1"], older, step=3) == (["p0", "p1"], 0)
