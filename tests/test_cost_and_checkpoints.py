"""The report's cost and timing claims on synthetic studies: the total rollouts each method needs
to reach a target gain (budgets section), the paired contrasts at every evaluated checkpoint
("hard is ahead by checkpoint N"), and paper 001's gain per 1,000 rollouts."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from diffgrpo import params  # noqa: E402
from diffgrpo.analysis import report as analyze  # noqa: E402
from diffgrpo.stats import intervals  # noqa: E402
from diffgrpo.analysis.sections import budgets, checkpoint_contrasts  # noqa: E402
from diffgrpo.store import layout  # noqa: E402
from conftest import copy_renaming_arms  # noqa: E402

from test_analyze import DELTA, MIXED, make_study, study  # noqa: E402,F401  (study: the fixture)


def _ledger(root, totals: dict[str, int], seeds=(0, 1)) -> None:
    """Give every run of ``totals``' arms a compute ledger with that many total rollouts."""
    for arm, total in totals.items():
        for seed in seeds:
            path = root / "runs" / layout.run_id(arm, seed) / "manifest.json"
            m = json.loads(path.read_text())
            m["ledger"] = {"probe": {"charged": True, "completions": 900, "tokens": 9000},
                           "train": {"completions_generated": total - 900, "completions_kept": total - 900,
                                     "completions_dropped": 0, "tokens_generated": 5000},
                           "total_rollouts": total, "total_tokens": 14000}
            path.write_text(json.dumps(m))


def _exact(acc: float, n: int, rng, order: np.ndarray | None = None) -> np.ndarray:
    """0/1 scores of n prompts with exactly this accuracy, the right ones drawn at random (or the
    first of ``order``: an arm's seeds then agree on which prompts are easy, as real runs do)."""
    v = np.zeros(n)
    v[(rng.permutation(n) if order is None else order)[:round(acc * n)]] = 1.0
    return v


# ---- rollouts to reach a target -----------------------------------------------------------


def test_crossing_interpolates_between_budgets_and_censors_both_ends():
    totals = np.array([1000.0, 2000.0, 3000.0])
    gains = np.array([[2.0, 12.0, 20.0],    # crosses 10 between the first two budgets
                      [10.0, 11.0, 12.0],   # there already at the smallest budget: "at or below"
                      [1.0, 4.0, 9.0],      # never: not reached, not extrapolated
                      [1.0, 12.0, 5.0],     # the first crossing counts, not the last value
                      [1.0, 5.0, 15.0]])    # between the second and third
    assert budgets.crossing(totals, gains, 10.0).tolist() == [1800.0, 1000.0, np.inf, 1818.1818181818182, 2500.0]
    assert budgets.crossing(totals[:1], gains[:, :1], 10.0).tolist() == [np.inf, 1000.0, np.inf, np.inf, np.inf]
    assert budgets.reading(1000.0, totals) == "at or below 1,000" and budgets.reading(np.inf, totals) == (
        "not reached within 3,000") and budgets.reading(1800.0, totals) == "1,800"


def _budget_study(gains: dict[str, tuple[float, float]], n: int, seeds: int, seed_sd: float = 0.0,
                  flip: bool = False):
    """A study's view for the target: per method two arms (``<method>.b1`` at 1,000 total
    rollouts, ``.b2`` at 2,000) with these gains in points (base 0), the seeds ``seed_sd`` apart
    (``flip``: in the opposite order at 2,000, the budgets' seeds correlated -1)."""
    rng = np.random.default_rng(0)
    runs, rows = {}, []
    for method, (g1, g2) in gains.items():
        for label, total, g in (("b1", 1000, g1), ("b2", 2000, g2)):
            arm, order = f"{method}.{label}", rng.permutation(n)
            sign = -1 if flip and label == "b2" else 1
            for s in range(seeds):
                runs[arm, s] = _exact((g + sign * seed_sd * (s - (seeds - 1) / 2)) / 100, n, rng, order)
            rows.append({"strategy": arm, "budget": total, "total_rollouts": float(total), "gain_pp": g,
                         "accuracy": g / 100, "kind": "offline"})
    scores = analyze.Scores.of(np.zeros(n), runs)
    view = SimpleNamespace(cfg=SimpleNamespace(analyze=SimpleNamespace(seed=0)), scores=scores,
                           boot=intervals.Bootstrap(n, 1000, 0), nested_arms=lambda: [])
    return view, pd.DataFrame(rows)


def test_the_cheapest_method_is_named_only_when_its_interval_lies_below_the_others():
    """The target is the most any arm gains at the smallest budget (fast: 10 points at 1,000):
    fast is there at or below 1,000, slow crosses it at 1,000 + 8/10 x 1,000 = 1,800, flat never."""
    view, table = _budget_study({"fast": (10, 15), "slow": (2, 12), "flat": (1, 2)}, n=3000, seeds=3)
    target, rows = budgets.target_rows(view, table)
    assert target == {"gain_pp": 10.0, "accuracy": 0.1, "budget": 1000, "set_by": "fast.b1"}
    rows = rows.set_index("method")
    assert rows.loc["fast", "reading"] == "at or below 1,000" and rows.loc["slow", "rollouts"] == pytest.approx(1800)
    assert rows.loc["flat", "reading"] == "not reached within 2,000" and np.isinf(rows.loc["flat", "ci_low"])
    # the resamples: fast's gain at 1,000 falls below its own point (the target) about half the time
    assert rows.loc["fast", "ci_low"] == 1000 and 1000 < rows.loc["fast", "ci_high"] < rows.loc["slow", "ci_low"]
    assert rows.loc["slow", "ci_low"] < 1800 < rows.loc["slow", "ci_high"] < 2000
    line = budgets.target_verdict(target, rows.reset_index(), "over")
    assert line.startswith("To reach a gain of +10.0 points (the most any arm gains at the smallest budget, fast.b1 "
                           "at 1,000 total rollouts), fast needs the fewest")
    assert line.endswith("its 95% interval lies below every other method's (over).")


def test_overlapping_intervals_say_the_data_cannot_tell():
    view, table = _budget_study({"fast": (10, 12), "slow": (8, 14)}, n=100, seeds=2, seed_sd=4.0)
    target, rows = budgets.target_rows(view, table)
    assert rows["method"].tolist() == ["fast", "slow"]
    assert rows.loc[1, "rollouts"] == pytest.approx(1000 + 2 / 6 * 1000)
    assert "overlaps slow's: the data cannot tell which method gets there with fewest rollouts" in (
        budgets.target_verdict(target, rows, "over"))


def _nested_scores(rho: float, methods: int, seeds: int, n: int = 50, sd: float = 3.0, seed: int = 0):
    """Scores of ``methods`` methods at budgets b1 and b2 (one trajectory per seed): each seed moves
    every prompt of a run by its seed effect (points), b2's effect ``rho``-correlated with b1's."""
    rng = np.random.default_rng(seed)
    base, runs = rng.random(n), {}
    for m in range(methods):
        e1 = rng.standard_normal(seeds)
        e2 = rho * e1 + np.sqrt(1 - rho ** 2) * rng.standard_normal(seeds)
        for s in range(seeds):
            runs[f"m{m}.b1", s] = base + 0.05 + sd * e1[s] / 100
            runs[f"m{m}.b2", s] = base + 0.08 + sd * e2[s] / 100
    return analyze.Scores.of(base, runs), [[f"m{m}.b1", f"m{m}.b2"] for m in range(methods)]


@pytest.mark.parametrize("rho", [0.0, 0.64, 0.9])
def test_the_seed_correlation_of_a_methods_budgets_is_measured_from_the_data(rho):
    """Issue 44: nested arms were drawn as one (correlation 1). A constructed correlation between
    two budgets' per-seed gains is recovered (200 methods x 3 seeds: standard error about 0.05),
    pooled and per pair of budget labels, and the joint draws carry it."""
    scores, groups = _nested_scores(rho, methods=200, seeds=3)
    corr = budgets.seed_correlation(scores, groups)
    assert corr["r"] == pytest.approx(rho, abs=0.15) and corr["by_budget"]["b1 - b2"] == corr["r"]
    assert (corr["pairs"], corr["cells"]) == (200, 600) and f"r = {corr['r']:.2f}" in corr["words"]
    noise = budgets.joint_seed_noise(np.random.default_rng(0), 20_000, groups[:1], corr)
    (z1, u1), (z2, u2) = noise["m0.b1"], noise["m0.b2"]
    assert np.corrcoef(z1, z2)[0, 1] == pytest.approx(corr["r"], abs=0.03) and np.array_equal(u1, u2)


def test_one_seed_measures_no_correlation_and_draws_nested_arms_as_one():
    scores, groups = _nested_scores(0.5, methods=3, seeds=1)
    corr = budgets.seed_correlation(scores, groups)
    assert corr["r"] is None and corr["pairs"] == 0 and "one seed part" in corr["words"]
    noise = budgets.joint_seed_noise(np.random.default_rng(0), 100, groups, corr)
    assert np.array_equal(noise["m0.b1"][0], noise["m0.b2"][0])
    assert "drawn apart" in budgets.seed_correlation(scores, [])["words"]


def test_a_correlation_matrix_the_budget_pairs_disagree_on_is_made_a_correlation():
    corr = {"r": 0.5, "by_budget": {"b1 - b2": 0.95, "b2 - b3": 0.95, "b1 - b3": -0.9}}
    mat = budgets.correlation_matrix(["m.b1", "m.b2", "m.b3"], corr)
    assert np.allclose(np.diag(mat), 1) and np.linalg.eigvalsh(mat).min() > -1e-9
    assert budgets.correlation_matrix(["m.b1", "m.b4"], corr)[0, 1] == 0.5  # a pair not measured: the pooled r


def test_nested_groups_split_a_trajectory_by_method_and_the_note_prints_the_correlation():
    """random.b* and random_charged.b* are prefixes of one trajectory: each method's budgets are a
    group of their own, by total rollouts."""
    table = pd.DataFrame({"strategy": ["random.b2", "random.b1", "random_charged.b1", "random_charged.b2", "hard.b1"],
                          "budget": [2000, 1000, 1000, 2000, 1000],
                          "total_rollouts": [2000.0, 1000.0, 1100.0, np.nan, 1000.0]})
    view = SimpleNamespace(nested_arms=lambda: [["random.b2", "random.b1", "random_charged.b1", "random_charged.b2"]])
    assert budgets.nested_groups(view, table) == [["random.b1", "random.b2"], ["random_charged.b1", "random_charged.b2"]]


def test_rollouts_to_target_draws_nested_budgets_with_the_measured_correlation(monkeypatch):
    """A method's two budgets one trajectory whose seeds run in opposite orders (correlation -1,
    measured): the draws use it. The crossing falls as either budget's gain rises, so gains that
    move in opposite directions offset each other: the interval is narrower than the old draws'
    (the two budgets as one seed part, correlation 1, the deviations adding up)."""
    view, table = _budget_study({"fast": (10, 15), "slow": (4, 20)}, n=3000, seeds=3, seed_sd=1.0, flip=True)
    view.nested_arms = lambda: [["slow.b1", "slow.b2"], ["fast.b1", "fast.b2"]]
    corr = budgets.seed_correlation(view.scores, budgets.nested_groups(view, table))
    assert corr["r"] == pytest.approx(-1.0) and corr["pairs"] == 2
    _, measured = budgets.target_rows(view, table)
    monkeypatch.setattr(budgets, "seed_correlation", lambda scores, groups: {**corr, "r": None})
    _, as_one = budgets.target_rows(view, table)
    slow = [t.set_index("method").loc["slow"] for t in (measured, as_one)]
    assert slow[0]["rollouts"] == slow[1]["rollouts"] == pytest.approx(1375)
    assert 1000 < slow[1]["ci_low"] < slow[0]["ci_low"] < 1375 < slow[0]["ci_high"] < slow[1]["ci_high"] < 2000


def test_rollouts_to_target_in_the_report_and_absent_with_one_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    names = ["hard.b1", "easy.b1", "hard.b2", "easy.b2"]
    arms = [{"name": a, "select": a.split(".")[0], "train": {"max_completions": 500 if a.endswith("b1") else 1000}}
            for a in names]
    cfg = params.load(overrides={"study": "budgets2", "arms": arms, "train.seeds": [0, 1], "probe.k": 8,
                                 "dataset.pool_size": 100, "select.budget_frac": 0.1, "analyze.bootstrap": 500})
    DELTA.update({"hard.b1": 0.06, "hard.b2": 0.12, "easy.b1": 0.02, "easy.b2": 0.10})
    MIXED.update(dict.fromkeys(names, 2))
    try:
        root = make_study(layout.study_dir(cfg), arms=names)
    finally:
        for a in names:
            DELTA.pop(a), MIXED.pop(a)
    for a in names:
        sel = pd.read_parquet(root / "select" / f"{a.split('.')[0]}.parquet")
        sel.assign(strategy=a).to_parquet(layout.selection_file(cfg, a))
    _ledger(root, {a: 1400 if a.endswith("b1") else 1900 for a in names})
    summary = analyze.report(cfg)
    to = summary["rollouts_to_target"]
    # gains (mean of seeds 0, 1): hard 6.5 -> 12.5, easy 2.5 -> 10.5; target: hard's 6.5 at 1,400
    assert to["target"] == {"gain_pp": 6.5, "accuracy": 0.465, "budget": 1400, "set_by": "hard.b1"}
    assert to["methods"]["hard"]["reading"] == "at or below 1,400" and to["methods"]["hard"]["totals"] == [1400, 1900]
    assert to["methods"]["easy"]["rollouts"] == pytest.approx(1400 + 4 / 8 * 500)
    assert summary["budgets_verdict"].endswith(to["verdict"])
    out = layout.report_dir(cfg)
    assert to["verdict"] in (out / "rollouts_to_target.md").read_text()
    assert to["seed_correlation"]["words"] in (out / "rollouts_to_target.md").read_text()
    assert pd.read_csv(out / "rollouts_to_target.csv")["method"].tolist() == ["hard", "easy"]
    # one budget only: the budgets at equal total are there, no target
    one = cfg.replace(**{"study": "budgets1", "arms": arms[:2]})
    shutil.copytree(root, layout.study_dir(one), ignore=shutil.ignore_patterns("report"))
    summary = analyze.report(one)
    assert list(summary["budgets"]) == ["1400"] and "rollouts_to_target" not in summary
    assert not (layout.report_dir(one) / "rollouts_to_target.md").exists()


# ---- contrasts at every checkpoint --------------------------------------------------------


def _arms(*names):
    return SimpleNamespace(arms=[SimpleNamespace(name=n, select=n if n in ("hard", "easy") else "random")
                                 for n in names])


def test_a_lead_is_established_from_the_first_checkpoint_it_holds_at_every_later_one():
    n, rng = 1000, np.random.default_rng(2)
    curve = lambda accs: {step: _exact(a, n, rng) for step, a in zip((10, 20, 30, 40), accs)}  # noqa: E731
    scores = analyze.Scores.of(np.full(n, 0.0), {
        ("hard", 0): curve((0.40, 0.50, 0.55, 0.60)), ("easy", 0): curve((0.40, 0.40, 0.40, 0.40)),
        ("dip", 0): curve((0.40, 0.40, 0.55, 0.45)), ("close", 0): curve((0.40, 0.40, 0.40, 0.60))})
    ref, pairs = checkpoint_contrasts.pairs_of(_arms("hard", "easy", "dip", "close"), ["easy", "hard", "close", "dip"])
    assert ref == "hard" and pairs == [("hard", "easy"), ("hard", "close"), ("hard", "dip")]
    rows = checkpoint_contrasts.by_checkpoint(scores, intervals.Bootstrap(n, 2000, 0), pairs)
    assert len(rows) == 12 and set(rows["family"]) == {"arms"}
    assert rows["p_holm"].max() <= 1 and (rows["p_holm"] >= rows["p"]).all()
    leads = {lead["b"]: lead for lead in (checkpoint_contrasts.lead(g, 12) for _, g in rows.groupby("b"))}
    assert (leads["easy"]["ahead"], leads["easy"]["from_step"]) == ("hard", 20)
    assert leads["easy"]["words"].startswith("hard is ahead of easy from checkpoint 20 on (+10.0 [")
    assert (leads["dip"]["ahead"], leads["dip"]["from_step"]) == ("hard", 40)  # ahead at 20, level at 30: not "by 20"
    assert leads["close"]["ahead"] is None and "never established (last checkpoint 40: +0.0" in leads["close"]["words"]


def test_without_a_hard_arm_every_pair_and_with_one_checkpoint_nothing():
    ref, pairs = checkpoint_contrasts.pairs_of(_arms("a", "b", "c"), ["a", "b", "c"])
    assert ref is None and pairs == [("a", "b"), ("a", "c"), ("b", "c")]
    n, rng = 200, np.random.default_rng(0)
    final_only = analyze.Scores.of(np.zeros(n), {("hard", 0): _exact(0.5, n, rng), ("easy", 0): _exact(0.4, n, rng)},
                                   step=30)
    view = SimpleNamespace(scores=final_only, boot=intervals.Bootstrap(n, 200, 0), control=[],
                           cfg=_arms("hard", "easy"))
    assert checkpoint_contrasts.write(view) == {}


def test_the_checkpoint_contrasts_in_the_report(study):
    """The synthetic study evaluates checkpoints 5 and 10 of easy and hard."""
    summary = analyze.report(study)
    cc = summary["checkpoint_contrasts"]
    assert cc["reference"] == "hard" and cc["holm"] == {"arms": "2 contrasts: 2 checkpoints x 1 pairs"}
    out = layout.report_dir(study)
    text = (out / "checkpoint_contrasts.md").read_text()
    assert "hard (policy hard) against every other arm" in text and cc["leads"][0]["words"] in text
    assert (out / "fig_checkpoint_contrasts.png").stat().st_size > 0
    assert str(out / "fig_checkpoint_contrasts.png") in map(str, analyze.figure_files(study))


# ---- paper 001: "a cheaper filter" as a number --------------------------------------------


def test_the_001_report_puts_the_gain_per_1000_rollouts_beside_the_gain(study):
    cfg = study.replace(**{"study": "s001cost", "analyze.reports": ["001"], "arms": [
        {"name": "right", "select": "base_right_matched"}, {"name": "wrong", "select": "base_wrong_matched"}]})
    copy_renaming_arms(layout.study_dir(study), layout.study_dir(cfg), {"easy": "right", "hard": "wrong"})
    assert analyze.report(cfg)["001"]["cost"]["reason"].startswith("no run of the study has a compute ledger")
    _ledger(layout.study_dir(cfg), {"wrong": 5000, "right": 8000})
    summary = analyze.report(cfg)
    cost, gain = summary["001"]["cost"]["arms"], summary["arms"]
    assert list(cost) == ["wrong", "right"]  # base-wrong, base-right, all: the blog's order
    assert cost["wrong"]["total_rollouts"] == 5000 and cost["wrong"]["gain_per_1k_rollouts"] == pytest.approx(12.5 / 5)
    assert cost["wrong"]["ci95"] == pytest.approx([v / 5 for v in gain["wrong"]["ci95"]], abs=1e-4)
    assert cost["right"]["gain_per_1k_rollouts"] == pytest.approx(2.5 / 8, abs=1e-4)
    assert "in full to every arm" in summary["001"]["cost"]["probe_charge"]
    assert summary["001"]["cost"]["words"].startswith("wrong +2.50 [")
    assert "per 1,000 rollouts (5,000 rollouts)" in (layout.report_dir(cfg) / "table_cost.md").read_text()
