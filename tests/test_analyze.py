"""Stage 5 on a synthetic study folder: the numbers behind every table and figure, and the
papers' reported numbers kept as data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest
from scipy import stats

matplotlib.use("Agg")

from diffgrpo.analysis import report as analyze, learnability, tables, uncertainty
from diffgrpo.stats import calibration, holm, intervals, lines
from diffgrpo.store import artifacts, layout
from diffgrpo import params  # noqa: E402
from diffgrpo.analysis import sections  # noqa: E402
from diffgrpo.analysis.papers import paper000, paper002, paper_numbers  # noqa: E402
from conftest import copy_renaming_arms  # noqa: E402

BASE = {"greedy_acc": 0.40, "pass@1": 0.30, "pass@8": 0.60}
# final greedy accuracy = base + DELTA[arm] + 0.01 * seed; pass@1 gains half of that
DELTA = {"easy": 0.02, "hard": 0.12}
# of 4 groups per step, how many have mixed rewards
MIXED = {"easy": 1, "hard": 3}
STEPS = (5, 10)
N_PROMPTS, N_SAMPLES = 200, 4  # every accuracy above is a whole number of prompts (samples) of these


def _groups(arm: str) -> pd.DataFrame:
    rows = []
    for step in (1, 2):
        for i in range(4):
            rewards = [1.0, 0.0, 1.0, 1.0] if i < MIXED[arm] else [1.0] * 4
            rows.append({"step": step, "prompt_id": f"p{i}", "rewards": rewards, "scores": rewards,
                         "reward_mean": float(np.mean(rewards)), "reward_std": float(np.std(rewards, ddof=1)),
                         "learnable": bool(np.ptp(rewards) > 0)})
    return pd.DataFrame(rows)


def _steps(arm: str) -> pd.DataFrame:
    """TRL's logged generation metrics: easy's completions grow a token a step, hard's are
    truncated a tenth of the time."""
    step = np.arange(1, STEPS[-1] + 1)
    return pd.DataFrame({"step": step, "loss": 0.0, "completions/mean_length": 20.0 + (step if arm == "easy" else 0),
                         "completions/clipped_ratio": 0.1 if arm == "hard" else 0.0})


def _acc(arm: str, seed: int, step: int) -> dict:
    """Accuracy rising linearly to the final value at the last checkpoint."""
    d = (DELTA[arm] + 0.01 * seed) * step / STEPS[-1]
    return {"greedy_acc": BASE["greedy_acc"] + d, "pass@1": BASE["pass@1"] + d / 2, "pass@8": BASE["pass@8"] + d}


def _tiers(rid: str, arm: str, seed, step: int, acc: dict) -> pd.DataFrame:
    return pd.DataFrame([{"tier": t, "greedy_acc": acc["greedy_acc"] + (0.1 if t == 1 else -0.1),
                          "pass@1": acc["pass@1"], "n_prompts": 10, "run_id": rid, "strategy": arm,
                          "seed": seed, "step": step} for t in (1, 2)])


def _samples(step: int, acc: dict) -> pd.DataFrame:
    """Per-sample rows (as the evaluate stage writes them) with exactly ``acc``'s greedy accuracy
    and pass@1: the first prompts (samples) are the correct ones, so checkpoints are nested."""
    greedy = pd.DataFrame({"step": step, "mode": "greedy", "prompt_id": [f"t{i:03d}" for i in range(N_PROMPTS)],
                           "sample": 0, "correct": np.arange(N_PROMPTS) < round(acc["greedy_acc"] * N_PROMPTS)})
    k = np.arange(N_PROMPTS * N_SAMPLES)
    sampled = pd.DataFrame({"step": step, "mode": "sampled", "prompt_id": [f"t{i // N_SAMPLES:03d}" for i in k],
                            "sample": k % N_SAMPLES, "correct": k < round(acc["pass@1"] * N_PROMPTS * N_SAMPLES)})
    return pd.concat([greedy, sampled], ignore_index=True)


def _write_eval(root, rid, arm, seed, accs: dict[int, dict], trained=None) -> None:
    out = root / "eval" / rid
    out.mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"steps": sorted(accs), "trained": trained}))
    pd.DataFrame([{"run_id": rid, "strategy": arm, "seed": seed, "step": s, **a, "n_prompts": N_PROMPTS}
                  for s, a in accs.items()]).to_parquet(out / "summary.parquet")
    # a run's samples.parquet holds its trained checkpoints; the base model's, step 0
    steps = [s for s in accs if s > 0] or [0]
    pd.concat([_samples(s, accs[s]) for s in steps], ignore_index=True).to_parquet(out / "samples.parquet")
    pd.concat([_tiers(rid, arm, seed, s, a) for s, a in accs.items()]).to_parquet(out / "tiers.parquet")


def make_study(root, arms=("easy", "hard"), seeds=(0, 1)):
    """A study folder as the train, evaluate and select stages write it (2 arms x 2 seeds)."""
    _write_eval(root, layout.BASE_RUN, layout.BASE_RUN, None, {0: BASE})
    for arm in arms:
        for seed in seeds:
            rid = layout.run_id(arm, seed)
            run = root / "runs" / rid
            run.mkdir(parents=True)
            manifest = {"key": {"train": {"seed": seed}, "selection_sha": arm}, "model": {"name": "tiny", "path": "x"},
                        "task": {"name": "shuffled_objects"},
                        "strategy": arm, "seed": seed, "status": "complete", "steps_done": STEPS[-1],
                        "num_prompts": 3 if arm == "easy" else 4,
                        "max_steps": STEPS[-1], "checkpoints": [f"checkpoints/checkpoint-{s}" for s in STEPS]}
            (run / "manifest.json").write_text(json.dumps(manifest))
            _groups(arm).to_parquet(run / "groups.parquet")
            _steps(arm).to_parquet(run / "steps.parquet")
            # the evaluate stage repeats the base row as each run's step 0
            _write_eval(root, rid, arm, seed, {0: BASE, **{s: _acc(arm, seed, s) for s in STEPS}},
                        trained=layout.trained_identity(manifest))
    select = root / "select"
    select.mkdir()
    for arm, p_hats in {"easy": [1.0, 1.0, 0.9], "hard": [0.0, 0.0, 0.1, 0.2]}.items():
        pd.DataFrame({"id": [f"{arm}{i}" for i in range(len(p_hats))], "p_hat": p_hats, "tier": 1,
                      "strategy": arm, "seed": 0}).to_parquet(select / f"{arm}.parquet")
    return root


@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    # the runs make_study writes are the ones this config plans (the report reads only those)
    cfg = params.load(overrides={"study": "synthetic", "arms": ["easy", "hard"], "train.seeds": [0, 1], "probe.k": 8})
    make_study(layout.study_dir(cfg))
    return cfg


# ---- learnable % ------------------------------------------------------------------------


def test_learnable_pct_counts_groups_with_mixed_rewards():
    groups = pd.DataFrame({"step": [1, 1, 2, 2], "prompt_id": ["a", "b", "a", "b"],
                           "rewards": [[1, 1, 1], [0, 1, 0], [0, 0, 0], [1.0, 0.0, 1.0]]})
    assert learnability.learnable_pct(groups) == 50.0
    with pytest.raises(ValueError):
        learnability.learnable_pct(groups.iloc[:0])


# ---- collecting runs --------------------------------------------------------------------


def test_collect_runs_gains_and_learnable(study):
    runs = analyze.collect_runs(study)
    assert list(runs.columns) == ["model", "dataset", "strategy", "seed", "base_acc", "final_acc",
                                  "gain_pp", "learnable_pct", "learnable_first_pct", "verifier_mixed_pct", "steps"]
    assert list(zip(runs["strategy"], runs["seed"])) == [("easy", 0), ("easy", 1), ("hard", 0), ("hard", 1)]
    assert runs["gain_pp"].tolist() == pytest.approx([2.0, 3.0, 12.0, 13.0])
    assert runs["learnable_pct"].tolist() == [25.0, 25.0, 75.0, 75.0] == runs["verifier_mixed_pct"].tolist()
    assert set(runs["model"]) == {"tiny"} and set(runs["dataset"]) == {"shuffled_objects"}
    assert (runs["steps"] == 10).all() and (runs["base_acc"] == 0.40).all()
    sampled = analyze.collect_runs(layout.study_dir(study), metric="pass@1")
    assert sampled["gain_pp"].tolist() == pytest.approx([1.0, 1.5, 6.0, 6.5])


def test_incomplete_runs_are_skipped_with_a_warning(study):
    """A planned run still training, or never trained, is named; a folder the study does not
    plan (another config's run) is not read at all."""
    run = layout.run_dir(study, "hard", 7)
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"strategy": "hard", "seed": 7, "status": "running"}))
    with pytest.warns(UserWarning, match="hard-seed7, easy-seed7"):
        runs = analyze.collect_runs(study.replace(**{"train.seeds": [0, 1, 7]}))
    assert len(runs) == 4
    stray = layout.run_dir(study, "hard", 9)
    shutil.copytree(layout.run_dir(study, "hard", 0), stray)
    assert len(analyze.collect_runs(study)) == 4


def test_missing_eval_summary_names_the_file(study):
    (layout.eval_dir(study, "hard-seed1") / "summary.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="hard-seed1"):
        analyze.collect_runs(study)


# ---- regression ---------------------------------------------------------------------------


def test_fit_line_matches_numpy():
    x, y = np.array([3.0, 10.0, 24.0, 30.0, 41.0]), np.array([1.0, 12.0, 20.0, 35.0, 38.0])
    fit = lines.fit_line(x, y)
    slope, intercept = np.polyfit(x, y, 1)
    assert fit["slope"] == pytest.approx(slope, abs=1e-4)
    assert fit["intercept"] == pytest.approx(intercept, abs=1e-4)
    assert fit["r2"] == pytest.approx(np.corrcoef(x, y)[0, 1] ** 2, abs=1e-4)
    assert fit["n"] == 5 and fit["note"] is None


@pytest.mark.parametrize("x, y, why", [([1, 2], [1, 2], "at least 3"), ([5, 5, 5], [1, 2, 3], "same learnable"),
                                       ([1, 2, 3], [4, 4, 4], "same gain")])
def test_fit_line_says_why_r2_is_undefined(x, y, why):
    fit = lines.fit_line(x, y)
    assert fit["r2"] is None and why in fit["note"]


def test_paper_regression_from_reported_numbers():
    """003's Figure 3 states R^2 = 0.66; its 28 (learnable %, gain) points (Tables 1+2: 3 models
    x 2 datasets x 4 arms, Table 3: 4 Llama points) give 0.641. Tables 1+2 alone give
    0.670 and the 16 GSM8K points 0.659, the subset nearest the stated value."""
    rep = paper_numbers.reported(["003"])
    points = paper_numbers.paper_points(rep)
    assert len(points) == 28
    fit = paper_numbers.paper_regression(points, rep)
    assert fit["n"] == 28 and fit["r2"] == pytest.approx(0.6407, abs=1e-3)
    assert fit["slope"] == pytest.approx(0.8729, abs=1e-3)
    assert "0.66" in fit["note"] and "gsm8k only" in fit["note"]
    regs = paper_numbers.paper_regressions(points).set_index("subset")
    assert regs.loc["Tables 1+2", "n"] == 24 and regs.loc["Tables 1+2", "r2"] == pytest.approx(0.6699, abs=1e-3)
    assert regs.loc["gsm8k only", "n"] == 16 and regs.loc["gsm8k only", "r2"] == pytest.approx(0.6591, abs=1e-3)


def test_reported_numbers_keep_every_paper():
    rep = paper_numbers.reported()
    assert list(rep.columns) == paper_numbers.REPORTED_COLUMNS and (rep["source"] != "").all()
    value = lambda **kw: rep.loc[np.logical_and.reduce([rep[k] == v for k, v in kw.items()]), "value"].item()  # noqa: E731
    assert value(table="Table 1", dataset="gsm8k", model="Qwen/Qwen3-14B", strategy="hard") == 39.42
    assert value(table="Table 2", dataset="bbh_shuffled_objects", model="microsoft/phi-4", strategy="random") == 19.3
    assert value(table="Table 3", metric="learnable_pct", strategy="hard") == 55.2
    assert value(table="Table 4", strategy="middle") == 26.7 and value(metric="r2") == 0.66
    assert value(paper="001", metric="rel_gain_vs_base_right_pct") == 14.3
    assert value(paper="001", strategy="all") == 82 and value(paper="001", metric="accuracy_pct", strategy="base_wrong") == 85
    assert value(paper="000", metric="steps_to_match_all_pct") == 45
    assert sorted(rep.loc[rep["paper"] == "000", "value"]) == [3, 5, 45]
    assert sorted(rep.loc[rep["paper"] == "002", "value"]) == [35.3, 50.0, 51.9, 77.1, 89.2]
    assert rep.groupby("paper").size().to_dict() == {"000": 3, "001": 7, "002": 5, "003": 62}
    with pytest.raises(ValueError, match="004"):
        paper_numbers.reported(["004"])


def test_paper002_numbers_are_the_benchmarks_the_kit_scores():
    """002 reports AIME24 50.0, MATH500 89.2, AMC 77.1, Minerva 35.3, OlympiadBench 51.9 (its abstract
    and results); each is named as paper002.BENCHMARKS names it, and a registered task scores it."""
    from diffgrpo import tasks

    rep = paper_numbers.reported(["002"]).set_index("dataset")
    assert rep["value"].to_dict() == {"aime24": 50.0, "math500": 89.2, "amc": 77.1, "minerva": 35.3,
                                      "olympiadbench": 51.9}
    assert sorted(paper002.BENCHMARKS.values()) == sorted(rep.index) and set(rep["metric"]) == {paper002.METRIC}
    for task in paper002.BENCHMARKS:
        assert task in tasks.names()


def _set_evals() -> pd.DataFrame:
    """Base and two eprli seeds on three sets: the training task's test set and two of 002's benchmarks."""
    rows = []
    for eval_set, n, base in (("test", 500, 0.50), ("aime", 30, 0.20), ("obench", 674, 0.40)):
        rows.append({"eval_set": eval_set, "run_id": "base", "strategy": "base", "seed": 0, "step": 0,
                     "greedy_acc": base, "pass@1": base, "pass@8": base + 0.2, "n_prompts": n})
        for seed, gain in ((0, 0.10), (1, 0.20)):
            for step, part in ((5, 0.5), (10, 1.0)):
                rows.append({"eval_set": eval_set, "run_id": f"eprli-seed{seed}", "strategy": "eprli", "seed": seed,
                             "step": step, "greedy_acc": base, "pass@1": base + part * gain,
                             "pass@8": base + 0.3, "n_prompts": n})
    return pd.DataFrame(rows)


def test_paper002_puts_our_pass_at_1_on_its_benchmarks_beside_its_numbers(tmp_path):
    ours = paper002.benchmark_rows(_set_evals(), {"test": "math", "aime": "aime2024", "obench": "olympiadbench"},
                                   "m")
    assert set(ours["dataset"]) == {"aime24", "olympiadbench"} and set(ours["eval_set"]) == {"aime", "obench"}
    got = ours.set_index(["eval_set", "strategy"])
    # the final checkpoints' pass@1, mean over the two seeds: 0.20 + (0.10 + 0.20) / 2
    assert got.loc[("aime", "eprli"), "value"] == pytest.approx(35.0) and got.loc[("aime", "eprli"), "n"] == 2
    assert got.loc[("aime", "base"), "value"] == pytest.approx(20.0) and got.loc[("obench", "base"), "n_prompts"] == 674
    lo, hi = intervals.prompt_bound(0.35, 30)
    assert (got.loc[("aime", "eprli"), "ci_low"], got.loc[("aime", "eprli"), "ci_high"]) == pytest.approx((100 * lo, 100 * hi))
    # 30 prompts leave a wide interval, 674 a narrower one
    aime_width = got.loc[("aime", "base"), "ci_high"] - got.loc[("aime", "base"), "ci_low"]
    assert aime_width > 25 > got.loc[("obench", "base"), "ci_high"] - got.loc[("obench", "base"), "ci_low"]

    study = SimpleNamespace(out=tmp_path)
    study.write_long = lambda name, title, long: analyze.StudyReport.write_long(study, name, title, long)
    paper002._write_benchmarks(study, ours, paper_numbers.reported(["002"]))
    table = (tmp_path / "table_benchmarks.md").read_text()
    long = pd.read_csv(tmp_path / "table_benchmarks.csv")
    assert set(long["source"]) == {"ours", "002 results"} and len(long[long["source"] == "002 results"]) == 5
    assert long.query("source == 'ours' and dataset == 'aime24' and strategy == 'eprli'")["value"].item() == 35.0
    assert long.query("source == '002 results' and dataset == 'aime24'")["strategy"].item() == "eprli"  # one column
    assert "| ours" in table and "aime24" in table and "50.00" in table
    assert "Not an evaluation set of this study: ['amc', 'math500', 'minerva']" in table


def test_the_002_report_of_a_study_that_scores_a_benchmark(study):
    """The report's path: a study with AIME 2024 as an evaluation set gets, in its "002" section
    and table_benchmarks, pass@1 of the base model and each arm on it beside the paper's 50.0."""
    cfg = study.replace(**{"analyze.reports": ["002"], "evaluate.sets": [
        {"name": "aime", "task": "aime2024", "source": "hub", "split": "test"}]})
    for rid in [layout.BASE_RUN, *(layout.run_id(a, s) for a in ("easy", "hard") for s in (0, 1))]:
        summary = pd.read_parquet(layout.eval_dir(cfg, rid) / "summary.parquet").assign(n_prompts=30)
        layout.eval_dir(cfg, rid, "aime").mkdir(parents=True)
        summary.to_parquet(layout.eval_dir(cfg, rid, "aime") / "summary.parquet")
    section = analyze.report(cfg)["002"]
    rows = {r["arm"]: r for r in section["benchmarks"]}
    assert set(rows) == {"base", "easy", "hard"} and {r["benchmark"] for r in rows.values()} == {"aime24"}
    assert rows["base"]["accuracy_pct"] == 100 * BASE["pass@1"] and rows["hard"]["n_prompts"] == 30
    lo, hi = rows["hard"]["ci95"]
    assert lo < rows["hard"]["accuracy_pct"] < hi
    assert "50.00" in (layout.report_dir(cfg) / "table_benchmarks.md").read_text()


@pytest.mark.parametrize("p, n", [(0.0, 30), (0.5, 30), (1.0, 40), (0.353, 272)])
def test_prompt_bound_holds_its_level_for_scores_in_0_1(p, n):
    """Wilson's interval from the mean alone: nonzero width at 0 and 1, inside [0, 1], and at least
    95% coverage for per-prompt pass@1 over 8 samples (a score in [0, 1], less variable than 0/1)."""
    lo, hi = intervals.prompt_bound(p, n)
    assert 0.0 <= lo <= p <= hi <= 1.0 and hi - lo > 0.02
    rng = np.random.default_rng(0)
    difficulty = rng.beta(0.5, 0.5, size=(2000, 1)) if 0 < p < 1 else np.full((2000, 1), p)
    scale = p / difficulty.mean() if 0 < p < 1 else 1.0
    prompts = np.clip(difficulty * scale, 0, 1)
    covered = 0
    for _ in range(400):
        draw = prompts[rng.integers(0, len(prompts), n)]
        mean = rng.binomial(8, draw).mean() / 8
        a, b = intervals.prompt_bound(mean, n)
        covered += a <= prompts.mean() <= b
    assert covered / 400 >= 0.93


# ---- tables and figures' data -----------------------------------------------------------


def test_accuracy_curves_start_at_the_base_model(study):
    root = layout.study_dir(study)
    evals = analyze.read_evals(root, ["easy-seed0", "easy-seed1", "hard-seed0", "hard-seed1"])
    curves = tables.accuracy_curves(evals, "greedy_acc")
    hard = curves[curves["strategy"] == "hard"].set_index("step")
    assert list(hard.index) == [0, 5, 10]
    assert hard["value"].tolist() == pytest.approx([0.40, 0.4625, 0.525])
    assert hard["n"].tolist() == [2, 2, 2] and hard.loc[10, "sd"] == pytest.approx(np.std([0.52, 0.53], ddof=1))


def test_steps_to_match_the_all_run_only_where_the_data_support_it():
    n, rng = 400, np.random.default_rng(1)
    scores = analyze.Scores.of(np.full(n, 0.4), {
        ("all", 0): _curve({50: 0.5, 100: 0.6}, n, rng), ("lower", 0): _curve({50: 0.7, 100: 0.7}, n, rng),
        ("easy", 0): _curve({50: 0.45, 100: 0.5}, n, rng)})
    curves = pd.DataFrame([{"strategy": s, "step": st, "value": float(df[st].mean())}
                           for (s, _), df in scores.runs.items() for st in df.columns])
    gained = pd.DataFrame({"strategy": ["all"], "gain_pp": [20.0], "ci_low": [12.0], "ci_high": [28.0]})
    boot = intervals.Bootstrap(n, 500, 0)
    out = paper000.steps_to_match(curves, gained, "lower", "all", 50, scores, boot, 2.0)
    assert (out["step"], out["frac_of_steps"], out["target_acc"], out["resolution_frac"], out["reason"]) == (
        50, 0.5, 0.6, 0.5, None)
    never = paper000.steps_to_match(curves, gained, "easy", "all", 50, scores, boot, 2.0)
    assert never["step"] is None and never["frac_of_steps"] is None and "not within 2 points" in never["reason"]
    # the tiny study's case: the all-tier arm gained nothing distinguishable from 0 -> null, not 50%
    flat = pd.DataFrame({"strategy": ["all"], "gain_pp": [0.0], "ci_low": [-3.0], "ci_high": [3.0]})
    nothing = paper000.steps_to_match(curves, flat, "lower", "all", 50, scores, boot, 2.0)
    assert nothing["frac_of_steps"] is None and "does not exclude 0" in nothing["reason"]
    missing = paper000.steps_to_match(curves, gained, "lower", None, 50, scores, boot, 2.0)
    assert missing["step"] is None and "policy `all`" in missing["reason"]


def _curve(accs: dict[int, float], n: int, rng) -> dict[int, np.ndarray]:
    """Per-prompt 0/1 scores with exactly these accuracies by step, the correct prompts drawn anew each step."""
    out = {}
    for step, acc in accs.items():
        v = np.zeros(n)
        v[rng.permutation(n)[:round(acc * n)]] = 1.0
        out[step] = v
    return out


def test_steps_to_match_is_non_inferiority_on_the_paired_difference_not_a_first_crossing():
    """Trained in epochs, the lower-tier arm's run (half the prompts) ends at step 50 of the
    all-tier arm's 100. A point estimate that touches the target (``close`` at 40 and 50) is
    not a match: its interval's lower end is far below -margin on 400 prompts. ``lower`` is
    non-inferior from step 40 on; ``dip`` is at 30 but not at 40, so the fixed sequence (last
    first) stops at 40 and the match is 50, not the first crossing 30."""
    n, rng = 400, np.random.default_rng(0)
    all_acc = {s: 0.4 + 0.2 * s / 100 for s in range(10, 101, 10)}
    scores = analyze.Scores.of(np.full(n, 0.4), {
        ("all", 0): _curve(all_acc, n, rng),
        ("lower", 0): _curve({10: 0.45, 20: 0.50, 30: 0.55, 40: 0.66, 50: 0.68}, n, rng),
        ("close", 0): _curve({10: 0.45, 20: 0.50, 30: 0.55, 40: 0.60, 50: 0.60}, n, rng),
        ("dip", 0): _curve({10: 0.45, 20: 0.50, 30: 0.68, 40: 0.55, 50: 0.68}, n, rng)})
    curves = pd.DataFrame([{"strategy": s, "step": st, "value": float(df[st].mean())}
                           for (s, _), df in scores.runs.items() for st in df.columns])
    gained = pd.DataFrame({"strategy": ["all"], "gain_pp": [20.0], "ci_low": [13.0], "ci_high": [27.0]})
    boot = intervals.Bootstrap(n, 1000, 0)
    out = paper000.steps_to_match(curves, gained, "lower", "all", 10, scores, boot, 2.0)
    assert (out["step"], out["frac_of_steps"], out["lower_final_step"], out["all_final_step"]) == (40, 0.4, 50, 100)
    at40 = out["checkpoints"][3]
    assert at40["step"] == 40 and at40["diff_pp"] == pytest.approx(6.0) and at40["ci_low"] > -2.0 and at40["non_inferior"]
    assert "non-inferior within 2 points" in paper000.describe(out) and "one seed" in out["interval_over"]
    close = paper000.steps_to_match(curves, gained, "close", "all", 10, scores, boot, 2.0)
    assert close["step"] is None and "not within 2 points" in close["reason"]
    assert close["checkpoints"][-1]["diff_pp"] == pytest.approx(0.0) and close["checkpoints"][-1]["ci_low"] < -2.0
    # a wide enough margin makes the touch a match: the margin is the claim, stated beside it
    assert paper000.steps_to_match(curves, gained, "close", "all", 10, scores, boot, 10.0)["step"] == 40
    dip = paper000.steps_to_match(curves, gained, "dip", "all", 10, scores, boot, 2.0)
    assert [c["non_inferior"] for c in dip["checkpoints"]] == [False, False, True, False, True] and dip["step"] == 50
    # the interval is the study bootstrap's: the same resamples give the same checkpoints
    assert paper000.steps_to_match(curves, gained, "lower", "all", 10, scores, intervals.Bootstrap(n, 1000, 0),
                                   2.0)["checkpoints"] == out["checkpoints"]


def test_tiers_and_selections(study):
    root = layout.study_dir(study)
    ids = ["easy-seed0", "easy-seed1", "hard-seed0", "hard-seed1"]
    tiers = tables.tier_accuracy(analyze.read_evals(root, ids, "tiers.parquet"),
                                  analyze.read_evals(root, ids), "greedy_acc")
    t = tiers.set_index(["strategy", "tier"])["value"]
    assert list(tiers["strategy"].unique()) == ["base", "easy", "hard"]
    assert t["base", 1] == pytest.approx(0.5) and t["hard", 2] == pytest.approx(0.425)
    selected = analyze.selection_p_hat(root)
    assert selected.groupby("strategy").size().to_dict() == {"easy": 3, "hard": 4}


# ---- the report -------------------------------------------------------------------------

REPORT_FILES = {
    "runs.csv", "runs.md", "table1_gain.csv", "table1_gain.md", "table2_learnable.csv", "table2_learnable.md",
    "table4_pass_k.csv", "table4_pass_k.md", "tiers.csv", "tiers.md", "paper_regression.csv", "paper_regression.md",
    "paper_tables.md", "fig2_accuracy_by_checkpoint.png", "fig3_learnable_vs_gain.png", "fig_p_hat.png",
    "fig_tiers.png", "summary.json", "arms.csv", "arms.md", "contrasts.csv", "contrasts.md", "fig_learnability.png",
    "confounds.csv", "confounds.md", "fig_length.png", "compute.csv", "compute.md", "budgets.csv", "budgets.md",
    "budget_contrasts.csv", "budget_contrasts.md", "checkpoint_contrasts.csv", "checkpoint_contrasts.md",
    "fig_checkpoint_contrasts.png", "params.yaml",
}


def test_report_writes_every_file_and_an_exact_summary(study, tmp_path):
    summary = analyze.report(study)
    out = layout.report_dir(study)
    assert {p.name for p in out.iterdir()} == REPORT_FILES
    text = (out / "summary.json").read_text()
    assert json.loads(text) == summary and str(tmp_path) not in text

    assert set(summary) == {"metric", "runs", "skipped", "best", "verdict", "regression", "paper_regression",
                            "arms", "contrasts", "bootstrap", "eval_sets", "holm_families", "learnability_prior",
                            "confounds", "test_difficulty", "plateau", "compute", "checkpoint_contrasts",
                            "trajectories", "staleness", "003"}  # analyze.reports: ["003"]
    assert summary["trajectories"] == {"count": 4, "nested": []}  # 2 arms x 2 seeds, none a prefix of another
    assert summary["plateau"] is None  # its test prompts are not the task's rows: no tiers to test
    # checkpoints 5 and 10 are evaluated: hard (policy hard, the reference) against easy at each, Holm over both
    (lead,) = summary["checkpoint_contrasts"]["leads"]
    assert (lead["ahead"], lead["from_step"]) == ("hard", 5) and "Holm-adjusted across 2 checkpoint" in lead["words"]
    assert [(r["step"], r["a"], r["b"], r["diff_pp"]) for r in summary["checkpoint_contrasts"]["rows"]] == [
        (5, "hard", "easy", 5.0), (10, "hard", "easy", 10.0)]
    # runs made before the compute ledger: their rows say nothing rather than a wrong number
    assert summary["compute"]["runs"][0]["total_rollouts"] is None
    # the length view: first and last step of 10 (FIRST_STEPS_FRAC), and the whole run
    assert summary["confounds"]["easy"] == {"mean_length_first": 21.0, "mean_length_last": 30.0, "mean_length_run": 25.5,
                                            "truncated_first": 0.0, "truncated_last": 0.0, "truncated_run": 0.0}
    assert summary["confounds"]["hard"]["truncated_run"] == 0.1
    assert summary["eval_sets"] == ["test"]
    assert summary["003"]["table4"] == [
        {"arm": arm, "eval_set": "test", "k": k, "pass_at_k": v} for k, vs in ((1, (0.3, 0.3125, 0.3625)),
                                                                              (8, (0.6, 0.625, 0.725)))
        for arm, v in zip(("base", "easy", "hard"), vs)]
    assert summary["metric"] == "greedy_acc" and summary["best"] == "hard" and summary["skipped"] == []
    # easy's selection has p_hat 1, 1, 0.9: predicted learnable = mean(1 - p^8 - (1-p)^8)
    easy_predicted = round(100 * (1 - 0.9**8 - 0.1**8) / 3, 4)
    assert summary["runs"][0] == {"model": "tiny", "dataset": "shuffled_objects", "strategy": "easy", "seed": 0,
                                  "base_acc": 0.4, "final_acc": 0.42, "gain_pp": 2.0, "learnable_pct": 25.0,
                                  "learnable_first_pct": 25.0, "steps": 10, "predicted_learnable_pct": easy_predicted}
    assert summary["verdict"].startswith("No question is declared (analyze.primary): every contrast below is exploratory")
    assert "hard beat the base model's greedy accuracy (0.40): +12.5 points [" in summary["verdict"]
    assert ("hard is the best arm of the 2 arms of family 'arms' (exploratory): it differs from every other after Holm's "
            "correction (its lead of +10.0 [") in summary["verdict"]
    assert summary["verdict"].endswith("1 of 1 contrasts of family 'arms' differ from 0 after Holm's correction within their family "
                                       "(95% intervals over 200 test prompts and 2 seeds, the seed part pooled across "
                                       "the study's contrasts where their seeds' spreads agree (else a t with 1 degrees "
                                       "of freedom), never narrower than the runs' own per-prompt noise)")
    hard = summary["arms"]["hard"]
    assert hard["gain_pp"] == 12.5 and hard["n_seeds"] == 2 and hard["learnable_pct"] == 75.0
    # seeds 0 and 1 differ by a point: the seed part (pooled across the 2 arms' gains: a t with 2 df) widens the interval
    assert 5 < hard["ci95"][0] < 12.5 < hard["ci95"][1] < 21
    assert summary["arms"]["easy"]["predicted_learnable_pct"] == easy_predicted
    (pair,) = summary["contrasts"]
    assert (pair["a"], pair["b"], pair["diff_pp"], pair["n_seeds"]) == ("easy", "hard", -10.0, 2)
    assert pair["ci95"][1] < 0 and pair["p_holm"] < 0.01 and pair["significant_holm"]
    assert summary["bootstrap"] == {"resamples": 2000, "seed": 0, "level": 0.95,
                                    "over": "test prompts (bootstrap) and seeds (pooled across the study's contrasts where "
                                            "their spreads agree, else a t with 1 df; floored at the runs' per-prompt "
                                            "noise; p never below the sign-flip test's)", "n_prompts": 200,
                                    "interval": "prompt bootstrap (shrunk to the prompts' own variance) convolved "
                                                "with a t seed part (1 df)", "max_resamples": 32000}
    assert summary["holm_families"] == {"arms": {"what": uncertainty.FAMILIES["arms"], "contrasts": ["easy - hard"]}}
    assert (pair["family"], pair["decision"], pair["resamples"]) == ("arms", "differs", 2000)
    # no probe of the pool in this folder: the posterior uses Jeffreys' prior
    assert summary["learnability_prior"] == {"alpha": 0.5, "beta": 0.5, "prior": "Jeffreys (no probe of the pool found)",
                                             "pool": None, "k": 8}
    easy_posterior = 100 * np.mean([learnability.posterior_learnable([round(8 * p)], 8, 8) for p in (1.0, 1.0, 0.9)])
    assert summary["arms"]["easy"]["predicted_posterior_pct"] == pytest.approx(easy_posterior, abs=1e-4)
    assert summary["arms"]["hard"]["reward"] == "verifier"
    x, y = [25, 25, 75, 75], [2, 3, 12, 13]
    slope, intercept = np.polyfit(x, y, 1)
    assert set(summary["regression"]) == {"slope", "intercept", "r2", "n", "note", "r2_ci95", "r2_arm_means", "arms",
                                          "excluded", "r2_ci95_resamples"}
    assert summary["regression"]["excluded"] == [] and summary["regression"]["arms"] == ["easy", "hard"]
    lo, hi = summary["regression"]["r2_ci95"]
    assert lo <= summary["regression"]["r2"] <= hi <= 1
    assert summary["regression"]["n"] == 4 and summary["regression"]["slope"] == pytest.approx(slope, abs=1e-4)
    assert summary["regression"]["intercept"] == pytest.approx(intercept, abs=1e-4)
    assert summary["regression"]["r2"] == pytest.approx(np.corrcoef(x, y)[0, 1] ** 2, abs=1e-4)
    assert summary["paper_regression"]["n"] == 28

    table1 = pd.read_csv(out / "table1_gain.csv")
    ours = table1[table1["source"] == "ours"].set_index("strategy")
    assert ours.loc["hard", "value"] == pytest.approx(12.5) and ours.loc["hard", "n"] == 2
    assert set(table1["source"]) == {"ours", "003 Table 1", "003 Table 3"} and len(table1) == 2 + 28
    md = (out / "table1_gain.md").read_text()
    cell = lambda arm: f"{arm['gain_pp']:.2f} [{arm['ci95'][0]:.2f}, {arm['ci95'][1]:.2f}]"  # noqa: E731
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines() if line.startswith("|")]
    assert ["ours", "shuffled_objects", "tiny", "gain_pp", cell(summary["arms"]["easy"]), "",
            cell(summary["arms"]["hard"]), ""] in rows
    pass_k = pd.read_csv(out / "table4_pass_k.csv")
    ours = pass_k[pass_k["source"] == "ours"]
    assert ours["strategy"].tolist() == ["base", "easy", "hard"] * 2 and set(ours["dataset"]) == {"test"}
    assert ours["metric"].tolist() == ["pass@1"] * 3 + ["pass@8"] * 3 and ours["value"].iloc[-1] == pytest.approx(72.5)
    assert pass_k.loc[pass_k["source"] == "003 Table 4", "value"].tolist() == [33.3, 33.3, 26.7, 40.0, 33.3]
    assert "14.3" in (out / "paper_tables.md").read_text()


def _best_seed_section():
    """A section as a researcher writes one (diffgrpo.analysis.sections): a metric, its table and
    its figure."""
    from matplotlib.figure import Figure

    from diffgrpo.store.artifacts import save_figure

    def write(study):
        best = study.runs.groupby("strategy", as_index=False)["gain_pp"].max()
        study.write_table("best_seed", "Best seed's gain per arm (points)", best)
        fig = Figure()
        fig.subplots().bar(best["strategy"], best["gain_pp"])
        save_figure(fig, study.out / "fig_best_seed.png")
        return {"best_seed": dict(zip(best["strategy"], best["gain_pp"].round(4)))}

    return SimpleNamespace(TABLES=("best_seed",), FIGURES=("fig_best_seed",), write=write)


NOTEBOOKS = [Path(__file__).parents[1] / "notebooks" / "05_analyze.ipynb", Path(__file__).parent / "notebooks" / "05_analyze.ipynb"]


def test_a_new_metric_is_one_section_and_its_figure(study):
    """Registered the way a plugin registers it, with no other file edited: the section's
    files are in the report folder, its metric in summary.json, its figure in the list the
    notebook shows (the notebook's own figure cell, run here)."""
    sections.register("best_seed", _best_seed_section())
    try:
        summary = analyze.report(study)
        out = layout.report_dir(study)
        assert {p.name for p in out.iterdir()} == REPORT_FILES | {"best_seed.csv", "best_seed.md", "fig_best_seed.png"}
        assert summary["best_seed"] == {"easy": 3.0, "hard": 13.0}
        assert json.loads((out / "summary.json").read_text())["best_seed"] == summary["best_seed"]
        assert (out / "best_seed.md").read_text().startswith("# Best seed's gain per arm (points)\n\n|")
        for notebook in NOTEBOOKS:
            cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
            (cell,) = [c for c in cells if "figure_files" in c]
            shown = []
            exec(cell, {"report": analyze, "cfg": study, "display": shown.append, "Image": lambda filename: filename})
            assert shown == [str(p) for p in analyze.figure_files(study)]
            assert shown[0].endswith("fig2_accuracy_by_checkpoint.png") and shown[-1] == str(out / "fig_best_seed.png")
    finally:
        sections.unregister("best_seed")
    assert "best_seed" not in sections.names()
    # a render without the section leaves none of its files behind (no stale figure for the notebook to show)
    analyze.report(study)
    assert {p.name for p in layout.report_dir(study).iterdir()} == REPORT_FILES
    # summary.json has one owner per key
    sections.register("clash", SimpleNamespace(TABLES=(), FIGURES=(), write=lambda study: {"arms": {}}))
    try:
        with pytest.raises(ValueError, match=r"'clash' writes summary.json keys another section wrote: \['arms'\]"):
            analyze.report(study)
    finally:
        sections.unregister("clash")


def test_a_section_declares_what_it_writes():
    with pytest.raises(TypeError, match="has no FIGURES"):
        sections.register("half", SimpleNamespace(TABLES=(), write=lambda study: {}))
    with pytest.raises(ValueError, match="registered already"):
        sections.register("arms", _best_seed_section())
    for name in sections.BUILT_IN:
        section = sections.get(name)
        assert isinstance(section.TABLES, tuple) and isinstance(section.FIGURES, tuple) and callable(section.write)


def test_report_without_a_paper(study):
    summary = analyze.report(study.replace(**{"analyze.reports": [], "analyze.metric": "pass@1"}))
    assert summary["metric"] == "pass@1" and summary["paper_regression"]["n"] == 0
    assert summary["paper_regression"]["r2"] is None and summary["paper_regression"]["note"]
    assert not {"003", "001", "000"} & set(summary)
    assert not (layout.report_dir(study) / "table1_gain.csv").exists()  # a paper's tables come with its report


def test_greedy_accuracy_is_reported_beside_a_sampled_metric(study):
    summary = analyze.report(study.replace(**{"analyze.reports": [], "analyze.metric": "pass@1"}))
    beside = summary["greedy_beside"]
    assert beside["metric"] == "pass@1"
    # gains: greedy easy 2, 3 and hard 12, 13; pass@1 half of that
    assert beside["arms"]["hard"] == {"gain_pp": 6.25, "greedy_gain_pp": 12.5}
    (row,) = beside["contrasts"]  # no declared question: every contrast
    assert {row["a"], row["b"]} == {"easy", "hard"}
    assert abs(row["diff_pp"]) == pytest.approx(5.0) and abs(row["greedy_diff_pp"]) == pytest.approx(10.0)
    assert row["greedy_decision"] and row["greedy_detectable_pp"] > 0
    assert "greedy answers by the same test" in (layout.report_dir(study) / "greedy_beside.md").read_text()
    # greedy is the metric: nothing to put beside it
    assert "greedy_beside" not in analyze.report(study.replace(**{"analyze.reports": []}))
    assert not (layout.report_dir(study) / "greedy_beside.md").exists()


def test_a_question_declared_after_the_runs_reads_as_exploratory_and_names_its_confirmation(study):
    cfg = study.replace(**{"analyze.reports": [], "analyze.primary": ["hard - easy"],
                           "analyze.confirmation": "paper003_confirmatory.yaml"})
    verdict = analyze.report(cfg)["verdict"]
    assert verdict.endswith("Read every contrast of this study as exploratory, its declared question and its control "
                            "arm's included: the question was declared after its runs were seen. The study that asks "
                            "it on fresh seeds is paper003_confirmatory.yaml (analyze.confirmation).")
    assert "asks it on fresh seeds" not in analyze.report(study.replace(**{"analyze.reports": []}))["verdict"]


def test_the_001_and_000_reports_say_why_a_number_is_missing(study):
    """The synthetic study has easy and hard arms only: no base-wrong / base-right pair, no
    lower-tier or all arm, no further evaluation set. Each section says so instead of a number."""
    summary = analyze.report(study.replace(**{"analyze.reports": ["003", "001", "000"]}))
    s001, s000 = summary["001"], summary["000"]
    assert s001["arms"] == {"easy": {"acc": 0.425, "gain_pp": 2.5, "n_train": 3},
                            "hard": {"acc": 0.525, "gain_pp": 12.5, "n_train": 4}}
    assert s001["rel_improvement_wrong_vs_right_pct"] is None and "no base-wrong / base-right pair" in s001["reason"]
    assert s000["steps_to_match"]["frac_of_steps"] is None and "policy `all`" in s000["steps_to_match"]["reason"]
    assert s000["transfer"] == [] and "evaluate.sets" in s000["transfer_reason"]
    tiers = {(r["arm"], r["tier"]): (r["base_acc"], r["final_acc"]) for r in s000["tiers"]}
    assert tiers["hard", 1] == (0.5, 0.625) and tiers["easy", 2] == (0.3, 0.325)
    out = layout.report_dir(study)
    for name in ("table_accuracy.md", "steps_to_match.md", "table_tiers_000.md", "transfer_000.md"):
        assert (out / name).stat().st_size > 0
    assert "Definition: earliest checkpoint from which on" in (out / "steps_to_match.md").read_text()


def test_the_001_report_compares_base_wrong_with_size_matched_base_right(study, tmp_path):
    """Arms named freely (a name that is no policy's): which is base-wrong is read from the policy."""
    cfg = study.replace(**{"study": "s001", "analyze.reports": ["001"], "arms": [
        {"name": "right", "select": "base_right_matched"}, {"name": "wrong", "select": "base_wrong_matched"}]})
    copy_renaming_arms(layout.study_dir(study), layout.study_dir(cfg), {"easy": "right", "hard": "wrong"})
    s001 = analyze.report(cfg)["001"]
    assert (s001["wrong_arm"], s001["right_arm"], s001["all_arm"]) == ("wrong", "right", None)
    assert s001["seed_variance"].startswith("included") and s001["contrasts"][0]["family"] == "arms"
    assert s001["rel_improvement_wrong_vs_right_pct"] == pytest.approx(100 * (0.525 - 0.425) / 0.425, abs=1e-4)
    (pair,) = s001["contrasts"]
    assert (pair["a"], pair["b"], pair["diff_pp"]) == ("right", "wrong", -10.0) and pair["ci95"][1] < 0
    # an arm named after a policy but selecting by another is refused (issue 37): reports would draw it as that arm
    with pytest.raises(params.ParamsError, match="rename it"):
        study.replace(arms=[{"name": "easy", "select": "base_right_matched"}])
    table = pd.read_csv(layout.report_dir(cfg) / "table_accuracy.csv")
    assert table.loc[table["metric"] == "rel_gain_vs_base_right_pct", "value"].tolist()[0] == pytest.approx(23.5294)


# ---- intervals (issue 11) ---------------------------------------------------------------


def _scores(final: dict, base=None, n=None):
    n = n or len(next(iter(final.values())))
    return analyze.Scores.of(np.zeros(n) if base is None else base, final)


def test_identical_arms_give_a_contrast_interval_around_zero_and_p_holm_one():
    rng = np.random.default_rng(1)
    base = (rng.random(300) < 0.4).astype(float)
    same = {s: (rng.random(300) < 0.5).astype(float) for s in range(3)}
    scores = _scores({**{("a", s): v for s, v in same.items()}, **{("b", s): v for s, v in same.items()},
                      # c: another draw from the same distribution, not the same numbers
                      **{("c", s): (rng.random(300) < 0.5).astype(float) for s in range(3)}}, base)
    boot = intervals.Bootstrap(300, 2000, 0)
    pairs = uncertainty.contrasts(scores, boot).set_index(["a", "b"])
    ab = pairs.loc[("a", "b")]
    assert ab["diff_pp"] == 0 and ab["ci_low"] == ab["ci_high"] == 0 and ab["p"] == 1 and ab["p_holm"] == 1
    ac = pairs.loc[("a", "c")]
    assert ac["ci_low"] < 0 < ac["ci_high"] and ac["p_holm"] > 0.5 and not ac["significant_holm"]
    arms = uncertainty.arm_intervals(scores, boot).set_index("strategy")
    assert arms.loc["a", "ci_low"] < arms.loc["a", "gain_pp"] < arms.loc["a", "ci_high"]
    assert arms.loc["a", "n_seeds"] == 3


def test_always_right_against_always_wrong_excludes_zero():
    n = 100
    scores = _scores({**{("right", s): np.ones(n) for s in range(2)}, **{("wrong", s): np.zeros(n) for s in range(2)},
                      ("noisy", 0): (np.arange(n) % 2).astype(float), ("noisy", 1): (np.arange(n) % 3 == 0).astype(float)})
    pairs = uncertainty.contrasts(scores, intervals.Bootstrap(n, 1000, 0)).set_index(["a", "b"])
    rw = pairs.loc[("right", "wrong")]  # tables.arm_order: alphabetical after 003's four
    assert rw["diff_pp"] == 100 and rw["ci_low"] == 100 and rw["excludes_zero"]
    assert rw["p"] == pytest.approx(2 / 1001) and rw["significant_holm"]
    # noisy's two seeds score 50% and 34%: with its own t of 1 degree of freedom, 2 seeds that disagree by 16
    # points cannot exclude a 58-point contrast (a crossed bootstrap did, which is what made it anti-conservative)
    nr = pairs.loc[("noisy", "right")]
    own = intervals.mean_dist(100.0 * (np.c_[np.arange(n) % 2, np.arange(n) % 3 == 0] - 1.0), intervals.Bootstrap(n, 1000, 0))
    lo, hi = own.interval()
    assert own.est == pytest.approx(-58.0) and lo < -58 < 0 < hi
    # the study's two noisy contrasts pool their seed parts (one noisy arm's seeds, and the homogeneity of the
    # arms' seed variances is assumed: right's and wrong's seeds never vary): narrower, around the same -58
    assert nr["diff_pp"] == pytest.approx(-58.0) and lo < nr["ci_low"] < -58 < nr["ci_high"] < hi


def test_interval_width_shrinks_with_more_prompts():
    rng = np.random.default_rng(0)
    widths = {}
    for n in (50, 200, 800):
        final = {("a", s): (rng.random(n) < 0.6).astype(float) for s in range(3)}
        arm = uncertainty.arm_intervals(_scores(final, (rng.random(n) < 0.4).astype(float)),
                                    intervals.Bootstrap(n, 2000, 0)).iloc[0]
        widths[n] = arm["ci_high"] - arm["ci_low"]
    assert widths[50] > widths[200] > widths[800]
    assert widths[50] / widths[800] == pytest.approx(4, rel=0.35)  # 1/sqrt(n)


def test_seed_spread_widens_the_interval():
    """Seeds are resampled too: three seeds that disagree give a wider interval than three
    that agree on the same mean; with one seed the interval is over prompts only."""
    n = 400
    base = np.zeros(n)
    agree = {("a", s): (np.arange(n) < 200).astype(float) for s in range(3)}
    spread = {("a", s): (np.arange(n) < k).astype(float) for s, k in enumerate((120, 200, 280))}
    boot = intervals.Bootstrap(n, 2000, 0)
    w = lambda f: np.ptp(uncertainty.arm_intervals(_scores(f, base), boot).iloc[0][["ci_low", "ci_high"]])  # noqa: E731
    assert w(spread) > 1.5 * w(agree)


def test_holm_on_known_p_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> raised to 0.06
    assert holm.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm.holm([0.02]) == pytest.approx([0.02])
    assert (holm.holm(p) >= np.array(p)).all()


def test_boot_p_is_two_sided():
    assert intervals.boot_p(np.zeros(99)) == 1.0
    assert intervals.boot_p(np.ones(99)) == pytest.approx(0.02)
    assert intervals.boot_p(np.r_[np.ones(89), -np.ones(10)]) == pytest.approx(0.22)


def test_verdict_names_a_best_arm_only_when_holm_puts_it_ahead_of_every_other():
    arms = pd.DataFrame({"strategy": ["hard", "easy"], "gain_pp": [5.0, 4.0], "ci_low": [1.0, 0.5],
                         "ci_high": [9.0, 8.0], "n_seeds": [1, 1]})
    pairs = pd.DataFrame({"a": ["easy"], "b": ["hard"], "diff_pp": [-1.0], "ci_low": [-4.0], "ci_high": [2.0],
                          "p": [0.5], "p_holm": [0.5], "significant_holm": [False], "detectable_pp": [4.24]})
    line, best = uncertainty.verdict_with_intervals(arms, pairs, "greedy_acc", 0.4, 300)
    assert best is None and "no arm differs from every other after Holm's correction: not distinguishable at this size" in line
    assert line.startswith("No question is declared (analyze.primary): every contrast below is exploratory")
    assert ("the leader's lead of +1.0 [-2.0, +4.0] points over easy, unadjusted; a difference of about 4.2 points was "
            "detectable with 80% power at Holm's first step") in line
    assert line.endswith("(95% intervals over 300 test prompts only (one seed: seed variance is not included))")
    # an unadjusted interval that excludes 0 is not enough: Holm's decision names the best arm
    line, best = uncertainty.verdict_with_intervals(arms, pairs.assign(ci_low=-6.0, ci_high=-0.5), "greedy_acc", 0.4, 300)
    assert best is None
    line, best = uncertainty.verdict_with_intervals(arms, pairs.assign(ci_low=-6.0, ci_high=-0.5, significant_holm=True),
                                                    "greedy_acc", 0.4, 300)
    assert best == "hard" and "its lead of +1.0 [+0.5, +6.0] points over easy" in line


def test_best_arm_is_the_one_holm_puts_ahead_of_all_others_not_the_top_point_estimate():
    """Three arms: a leads b (differs) but not c; c leads b. The top point estimate (a) is not
    named: Holm does not put it ahead of c. With a - c differing too, a is named."""
    pairs = pd.DataFrame({"a": ["a", "a", "b"], "b": ["b", "c", "c"], "diff_pp": [4.0, 1.0, -3.0],
                          "significant_holm": [True, False, True]})
    assert uncertainty.best_arm(["a", "c", "b"], pairs) is None
    assert uncertainty.best_arm(["a", "c", "b"], pairs.assign(significant_holm=True)) == "a"
    # a contrast that differs against the arm does not count for it
    assert uncertainty.best_arm(["a", "b"], pd.DataFrame({"a": ["a"], "b": ["b"], "diff_pp": [-2.0],
                                                          "significant_holm": [True]})) == "b"


def test_wide_tables_say_what_their_plus_minus_is():
    long = pd.DataFrame({"source": "ours", "dataset": "d", "model": "m", "metric": "learnable_pct",
                         "strategy": ["hard", "easy"], "value": [30.0, 10.0], "sd": [2.0, np.nan]})
    text = tables.wide_markdown(long)
    assert "30.00 ± 2.00" in text and "± : the standard deviation over seeds" in text and "[a, b]" not in text
    with_ci = long.assign(ci_low=[25.0, 8.0], ci_high=[35.0, 12.0])
    assert "30.00 [25.00, 35.00]" in tables.wide_markdown(with_ci) and "±" not in tables.wide_markdown(with_ci)


def test_plateau_is_a_test_of_the_hardest_tiers_gain_against_the_others():
    """Three tiers of 100 prompts, base 0.9 / 0.6 / 0.2: ``flat`` gains 20 points on tiers 1-2
    and nothing on tier 3 (a plateau: the contrast's interval is below 0); ``steep`` gains 30 on
    tier 3 (no plateau); ``noise`` gains 2 on every tier (cannot tell)."""
    from diffgrpo.analysis.sections import plateau

    rng = np.random.default_rng(0)
    tier = np.repeat([1, 2, 3], 100)

    def scores_at(accs):
        v = np.zeros(300)
        for t, acc in zip((1, 2, 3), accs):
            idx = np.flatnonzero(tier == t)
            v[rng.choice(idx, round(acc * 100), replace=False)] = 1.0
        return v
    base = scores_at((0.7, 0.4, 0.2))
    runs = {("flat", s): np.maximum(base, scores_at((0.9, 0.6, 0.0))) for s in range(3)}
    runs |= {("steep", s): np.maximum(base, scores_at((0.7, 0.4, 0.5))) for s in range(3)}
    runs |= {("noise", s): np.where(rng.random(300) < 0.02, 1.0, base) for s in range(3)}
    scores = analyze.Scores.of(base, runs)
    boot = intervals.Bootstrap(300, 1000, 0)
    tests = plateau.plateau_tests(scores, tier, boot).set_index("arm")
    assert tests.loc["flat", "ci_high"] < 0 and "consistent with a plateau" in tests.loc["flat", "reading"]
    assert tests.loc["steep", "ci_low"] > 0 and "no plateau" in tests.loc["steep", "reading"]
    assert tests.loc["noise", "ci_low"] < 0 < tests.loc["noise", "ci_high"] and "cannot say" in tests.loc["noise", "reading"]
    assert (tests["hardest_tier"] == 3).all()
    rows = plateau.per_tier(scores, tier, 1000, 0)
    flat3 = rows[(rows["arm"] == "flat") & (rows["tier"] == 3)].iloc[0]
    assert flat3["n_prompts"] == 100 and flat3["base_acc"] == pytest.approx(20.0) and flat3["ci_low"] <= flat3["gain_pp"]
    # the contrast is the difference of the two sides' mean gains
    gain = 100 * (scores.at("steep") - base[:, None])
    assert tests.loc["steep", "diff_pp"] == pytest.approx(gain[tier == 3].mean() - gain[tier < 3].mean())


def test_r2_interval_over_runs():
    x, y = np.arange(12.0), np.arange(12.0) + np.tile([0.0, 3.0], 6)
    lo, hi = lines.r2_interval(x, y, 1000, 0)
    r2 = lines.fit_line(x, y)["r2"]
    assert lo < r2 < hi <= 1
    assert lines.r2_interval([1, 2], [1, 2], 100, 0) is None


def test_report_per_seed_random_and_control_arm(tmp_path, monkeypatch):
    """A study with random drawn per seed and the control arm: predicted learnable % from each
    seed's own selection, the control's learnable % from the verifier's scores."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    cfg = params.load(overrides={"study": "synthetic", "arms": ["hard", "random", "random_reward"],
                                                "train.seeds": [0, 1, 2], "analyze.bootstrap": 500})
    DELTA.update(random=0.06, random_reward=0.0)
    MIXED.update(random=2, random_reward=2)
    try:
        make_study(layout.study_dir(cfg), arms=("hard", "random", "random_reward"), seeds=(0, 1, 2))
    finally:
        for k in ("random", "random_reward"):
            DELTA.pop(k), MIXED.pop(k)
    for s in (0, 1, 2):
        for arm in ("random", "random_reward"):
            pd.DataFrame({"id": ["r0", "r1"], "p_hat": [0.5, 0.1 * s], "strategy": arm, "seed": 0,
                          "train_seed": s}).to_parquet(layout.selection_file(cfg, arm, s))
        # the control's rewards are random (never mixed here); its verifier scores are what counts
        run = layout.run_dir(cfg, "random_reward", s) / "groups.parquet"
        g = pd.read_parquet(run)
        g.assign(scores=g["rewards"], rewards=[[0.0] * 4] * len(g)).to_parquet(run)
    # the pool's probe: the posterior's prior is fit to it
    pool = np.random.default_rng(0).binomial(8, np.random.default_rng(1).beta(0.6, 1.4, 500))
    layout.probe_dir(cfg).mkdir(parents=True)
    pd.DataFrame({"id": [f"q{i}" for i in range(500)], "k": 8, "n_correct": pool, "p_hat": pool / 8}).to_parquet(
        layout.probe_dir(cfg) / "prompts.parquet")
    summary = analyze.report(cfg)
    arms = summary["arms"]
    pred = [100 * np.mean([1 - 0.5**8 - 0.5**8, 1 - p**8 - (1 - p) ** 8]) for p in (0.0, 0.1, 0.2)]
    assert arms["random"]["predicted_learnable_pct"] == pytest.approx(np.mean(pred), abs=1e-3)
    # learnable % is that of the rewards trained on (the control's never mixed here); its verifier's beside it
    assert arms["random_reward"]["learnable_pct"] == 0.0 and arms["random_reward"]["verifier_mixed_pct"] == 50.0
    assert "verifier_mixed_pct" not in arms["random"] and arms["random"]["n_seeds"] == 3
    assert len(summary["contrasts"]) == 3 and len(summary["runs"]) == 9
    assert (layout.report_dir(cfg) / "fig_learnability.png").exists()

    # issue 19: the control is known by its definition (its reward); Figure 3 and the Holm family of the arms leave it out
    assert arms["random_reward"]["reward"] == "control" and arms["random"]["reward"] == "verifier"
    reg = summary["regression"]
    assert reg["excluded"] == ["random_reward"] and reg["arms"] == ["hard", "random"] and reg["n"] == 6
    real = [r for r in summary["runs"] if r["strategy"] != "random_reward"]
    r2 = np.corrcoef([r["learnable_pct"] for r in real], [r["gain_pp"] for r in real])[0, 1] ** 2
    assert reg["r2"] == pytest.approx(r2, abs=1e-4)
    families = {(c["a"], c["b"]): c["family"] for c in summary["contrasts"]}
    assert families == {("hard", "random"): "arms", ("hard", "random_reward"): "control",
                        ("random", "random_reward"): "control"}
    assert summary["holm_families"]["control"]["contrasts"] == ["hard - random_reward", "random - random_reward"]
    (arm_pair,) = [c for c in summary["contrasts"] if c["family"] == "arms"]
    assert arm_pair["p_holm"] == arm_pair["p"]  # a family of one: Holm changes nothing
    assert "contrasts of family 'control' differ from 0" in summary["verdict"]
    assert "Holm families: arms (" in (layout.report_dir(cfg) / "contrasts.md").read_text()
    prior = summary["learnability_prior"]
    assert prior["pool"] == 500 and prior["prior"].startswith("method of moments")
    assert prior["alpha"] == pytest.approx(0.6, rel=0.3) and prior["beta"] == pytest.approx(1.4, rel=0.3)
    # hard's selection has p_hat 0, 0, 0.1, 0.2: the plug-in predicts little, the posterior more
    assert arms["hard"]["predicted_posterior_pct"] > arms["hard"]["predicted_learnable_pct"]


def test_a_control_arm_is_the_one_its_params_declare_not_one_inferred_from_its_reward():
    """A researcher's partial-credit reward stays an arm (in Figure 3, in the arms' Holm family);
    only ``role: control`` makes a control, whatever the arm's name or reward."""
    arm = lambda name, role, inferred: SimpleNamespace(name=name, role=role, is_control=inferred)  # noqa: E731
    cfg = SimpleNamespace(arms=[arm("random_reward", "arm", True), arm("noise", "control", True),
                                arm("partial_credit", "arm", True), arm("hard", "arm", False),
                                arm("easy", "control", False)])
    assert analyze.control_arms(cfg) == ["easy", "noise"]


def test_the_control_role_comes_from_the_params_file():
    """Through the real schema: the arms the params declare ``role: control`` are the controls,
    a partial credit (verifier plus a control reward, no role) is an arm."""
    cfg = params.load("tiny", overrides={"arms": [
        {"name": "random_verifier", "select": "random"},
        {"name": "noise", "select": "random", "reward": "bernoulli_control", "role": "control"},
        {"name": "shaped", "select": "hard", "reward": {"verifier": 1.0, "bernoulli_control": 0.5}, "role": "control"},
        {"name": "partial", "select": "hard", "reward": {"verifier": 1.0, "bernoulli_control": 0.5}}, "hard", "easy"]})
    assert analyze.control_arms(cfg) == ["noise", "shaped"]  # the role decides, not the reward or the name
    with pytest.raises(params.ParamsError, match="rename it"):  # the named arm random_reward defined anew (issue 37)
        params.load("tiny", overrides={"arms": [{"name": "random_reward", "select": "random"}, "hard"]})


# ---- issue 19: error rates with few seeds, decided p-values, R^2 over arms, posterior learnability ----


def test_seeds_that_agree_exactly_still_count_each_runs_noise():
    """Issue 35's constructed tie: 300 prompts x 4 seeds, each seed's difference +2 prompts (10
    prompts +1, 8 prompts -1, other prompts in each seed). The seeds' means agree exactly, so the
    plain t seed part is 0 and the interval collapses to the point; the run-noise floor counts the
    18 flipping prompts a seed once: the interval holds 0 and p is about 0.35."""
    n, seeds = 300, 4
    diff = np.zeros((n, seeds))
    for j in range(seeds):
        diff[18 * j:18 * j + 10, j], diff[18 * j + 10:18 * (j + 1), j] = 100.0, -100.0
    boot = intervals.Bootstrap(n, 2000, 0)
    plain = intervals.mean_dist(diff, boot, run_noise_floor=False, exact=False)
    assert plain.interval()[1] - plain.interval()[0] < 1e-9 and plain.p_value()[0] < 0.01  # the collapse
    dist = intervals.mean_dist(diff, boot)
    lo, hi = dist.interval()
    assert lo < 0 < 2 / 3 < hi and 0.25 < dist.p_value()[0] < 0.45
    # the floor is the residual mean square over n: 18 cells of +-100 a seed, centred by prompt and seed
    assert dist.seed.floor > 0 and dist.seed.spread == 0 and dist.detectable() > hi - lo > 2


def test_identical_seeds_with_two_prompts_apart_hold_zero():
    """Issue 44's tie: arm a is arm b with 2 prompts turned right, the same 2 in all 4 seeds, so
    the seeds agree exactly, the residual is 0 and the floor with it; the prompt bootstrap alone
    read [+0.00, +1.67], p 0.27. Two discordant prompts, both one way, are what McNemar's exact test
    calls p 0.50: the p-value is never below the sign-flip test's, and the interval holds 0, alone
    and among the study's other contrasts (which pool their seed parts with it)."""
    n, seeds = 300, 4
    rng = np.random.default_rng(4)
    truth = rng.random(n) < 0.5
    run = lambda flip: np.array([truth ^ (rng.random(n) < flip) for _ in range(seeds)], float).T  # noqa: E731
    b = run(0.03)
    a = b.copy()
    wrong = np.flatnonzero((b == 0).all(axis=1))[:2]
    a[wrong] = 1.0
    diff = 100.0 * (a - b)
    boot = intervals.Bootstrap(n, 2000, 0)
    dist = intervals.mean_dist(diff, boot)
    assert dist.seed.empty and intervals.sign_flip_p(dist.rows) == pytest.approx(0.5)
    lo, hi = dist.interval()
    assert dist.p_value()[0] >= 0.3 and lo < 0 < hi
    scores = _scores({**{("a", s): a[:, s] for s in range(seeds)}, **{("b", s): b[:, s] for s in range(seeds)},
                      **{(arm, s): x for arm in ("c", "d") for s, x in enumerate(run(0.03).T)}},
                     (rng.random(n) < 0.4).astype(float))
    ab = uncertainty.contrasts(scores, boot).set_index(["a", "b"]).loc[("a", "b")]
    assert ab["diff_pp"] == pytest.approx(200 / 300) and ab["p"] >= 0.3 and ab["ci_low"] < 0 < ab["ci_high"]
    assert ab["decision"] == "not distinguishable"


def test_the_sign_flip_test_is_mcnemars_on_0_1_differences():
    """One seed of 0/1 differences: the sign-flip test of the per-prompt differences is McNemar's
    exact test (a binomial test of the discordant prompts); past 16 discordant prompts its normal
    approximation."""
    for wins, losses in ((2, 0), (7, 1), (5, 5), (12, 3)):
        rows = np.r_[np.full(wins, 100.0), np.full(losses, -100.0), np.zeros(50)]
        assert intervals.sign_flip_p(rows) == pytest.approx(stats.binomtest(wins, wins + losses).pvalue)
    rows = np.r_[np.full(30, 100.0), np.full(10, -100.0)]
    assert intervals.sign_flip_p(rows) == pytest.approx(2 * stats.norm.sf(20 / np.sqrt(40)))
    assert intervals.sign_flip_p(np.zeros(10)) == 1.0


def test_the_seed_part_is_issue_19s_t_without_a_floor_and_a_normal_at_the_floor():
    """With no per-run noise to floor it, the seed part is exactly Student's t with S - 1 df; seeds
    that agree exactly leave the normal of the per-run noise."""
    t = intervals.SeedPart(spread=2.0, floor=0.0, n_seeds=3)  # sample variance 1, se 1/sqrt(3)
    assert abs(t.quantile(0.975) - stats.t.ppf(0.975, 2) / np.sqrt(3)) < 1e-3
    tie = intervals.SeedPart(spread=0.0, floor=0.3, n_seeds=4)
    assert abs(tie.quantile(0.975) - 1.959964 * np.sqrt(0.3 / 4)) < 1e-6
    both = intervals.SeedPart(spread=2.0, floor=0.5, n_seeds=3)  # never narrower than either alone
    assert both.quantile(0.975) >= max(t.quantile(0.975), intervals.SeedPart(0.0, 0.5, 3).quantile(0.975)) - 1e-9
    z, u = np.random.default_rng(0).standard_normal(200_000), np.random.default_rng(1).random(200_000)
    drawn = both.sample(z, u)  # the draws (rollouts to a target) follow the same distribution as the quantiles
    for q in (0.5, 0.9, 0.975):
        assert abs((drawn <= both.quantile(q)).mean() - q) < 0.002


@pytest.mark.stats
def test_intervals_hold_their_error_rates_where_seeds_agree_and_where_they_do_not():
    """Two cells of docs/statistics.md's grid with 300 studies each (the whole grid is
    ``test_the_calibration_grid_holds_in_every_cell``, slow): the tie regime (2 seeds, no seed
    variance, 0.5% flips) where issue 19's plain t called a null contrast at about 8% and Holm's
    family of three at about 19%, and 2 seeds with a seed sd of 5 points and 0.5% flips, where
    pooling the ratio of seed to run noise (each contrast's few flipped cells) called 15% of Holm's
    families of 55: false calls, Holm's first step in families of 3, 6 and 55, and coverage held."""
    se = calibration.mc_se(0.05, 300)
    for cell in ((2, 0.0, 0.005, 300), (2, 5.0, 0.005, 300)):
        rates = calibration.cell(*cell, n_sims=300)
        assert max(rates[k] for k in ("false_call", "holm_3", "holm_6", "holm_55")) <= 0.05 + 2.5 * se, rates
        assert min(rates["gain_coverage"], rates["contrast_coverage"]) >= 0.95 - 2.5 * calibration.mc_se(0.95, 300), rates


def test_avg_at_k_scores_of_the_calibration_model_have_the_measured_sample_disagreement():
    """The grid's avg@k model (issue 46): two samples of one run disagree on SAMPLE_DISAGREE of the
    prompts (as measured), a run's expected score is its accuracy, scores are multiples of 1/k, and
    k = 1 is the greedy model draw for draw."""
    q = calibration.sample_weight(calibration.SAMPLE_DISAGREE, calibration.ARM_ACC)
    rng = np.random.default_rng(0)
    z = rng.standard_normal(20000)
    r = calibration.noise_weight(0.02, calibration.ARM_ACC)
    two = calibration._runs(np.random.default_rng(1), z, np.full(1, calibration.ARM_ACC), r, q, 2)[:, 0]
    assert abs((two == 0.5).mean() - calibration.SAMPLE_DISAGREE) < 0.015  # a score of 1/2: the two disagree
    four = calibration._runs(np.random.default_rng(2), z, np.full(3, calibration.ARM_ACC), r, q, 4)
    assert set(np.unique(four)) <= {0, 0.25, 0.5, 0.75, 1} and abs(four.mean() - calibration.ARM_ACC) < 0.01
    greedy = calibration._runs(np.random.default_rng(3), z, np.full(3, 0.6), r)
    assert np.array_equal(greedy, calibration._runs(np.random.default_rng(3), z, np.full(3, 0.6), r, 0.0, 1))


@pytest.mark.stats
def test_intervals_hold_their_error_rates_on_avg_at_4_scores():
    """One avg@4 cell (3 seeds, seed sd 2 points, 2% flips, 300 prompts; 300 studies): false calls,
    Holm's first step and coverage hold on scores averaged over 4 samples, as on 0/1 ones."""
    rates = calibration.cell(3, 2.0, 0.02, 300, n_sims=300, samples=4)
    se = calibration.mc_se(0.05, 300)
    assert max(rates[k] for k in ("false_call", "holm_3", "holm_6", "holm_55")) <= 0.05 + 2.5 * se, rates
    assert min(rates["gain_coverage"], rates["contrast_coverage"]) >= 0.95 - 2.5 * calibration.mc_se(0.95, 300), rates


@pytest.mark.stats
def test_pooling_the_seed_part_at_least_doubles_the_power_where_seeds_add_nothing():
    """Issue 44's cell: 2 seeds, no seed variance, 5% flips, 300 prompts. Each contrast's own seed
    part (one degree of freedom) found a 4-point difference in about 20% of studies; pooled across
    the study's 6 contrasts (3 degrees of freedom) in more than twice as many, calling null
    contrasts no more often than 5% (200 studies a method)."""
    pooled = calibration.cell(2, 0.0, 0.05, 300, n_sims=200)
    own = calibration.cell(2, 0.0, 0.05, 300, n_sims=200, method="per contrast")
    assert own["power"] < 0.3 and pooled["power"] >= 2 * own["power"], (pooled, own)
    assert pooled["false_call"] <= 0.05 + 2.5 * calibration.mc_se(0.05, 200)


@pytest.mark.slow
def test_the_calibration_grid_holds_in_every_cell():
    """docs/statistics.md's table: every cell of seeds x seed sd x flip rate x test prompts, 1000
    studies each (about 1.5 hours of one core): false calls (a null contrast; Holm's first step in
    families of 3, 6 and 55) at most 5% plus 2.5 Monte Carlo standard errors (6.7%), coverage within
    95% +- (2 points + 2.5 MC standard errors) with 4 seeds or more and at least that low bound with
    2-3, and the power at the stated detectable size 80% +- (3 points + 2.5 MC standard errors) where
    the flip rate is 2% or more or the seeds 2, and never below that elsewhere (with rare flips and
    3 or more seeds the stated size is conservative: docs/statistics.md)."""
    table = calibration.grid(1000)
    se = lambda rate: 2.5 * calibration.mc_se(rate, 1000)  # noqa: E731
    assert (table[["false_call", "holm_3", "holm_6", "holm_55"]] <= 0.05 + se(0.05)).all().all(), table
    cover = table[["gain_coverage", "contrast_coverage"]]
    assert (cover >= 0.93 - se(0.95)).all().all()
    assert (cover[table["seeds"] >= 4] <= 0.97 + se(0.95)).all().all()
    off = (table["power_at_stated"] - 0.8) / (0.03 + se(0.8))
    assert (off >= -1).all() and (off[(table["flip"] >= 0.02) | (table["seeds"] == 2)] <= 1).all(), table


def test_a_p_value_near_a_holm_threshold_is_decided_with_more_resamples_or_undecided():
    """One seed, a contrast with p near 0.05: the resamples double until the Monte Carlo
    interval of p excludes 0.05, so every bootstrap seed that decides decides the same."""
    n = 300
    diff = np.zeros(n)
    diff[:40], diff[40:40 + 23] = 1.0, -1.0  # mean 17/300, sd ~0.46: z about 2.1
    scores = _scores({("a", 0): diff, ("b", 0): np.zeros(n)})
    decisions = set()
    for seed in range(4):
        (pair,) = uncertainty.contrasts(scores, intervals.Bootstrap(n, 500, seed)).to_dict("records")
        assert pair["resamples"] > 500  # 500 resamples could not tell p from 0.05
        if pair["decision"] != "undecided":
            assert abs(pair["p"] - 0.05) > intervals.MC_Z * pair["p_mc_se"]
            decisions.add(pair["decision"])
        else:
            assert pair["resamples"] == 500 * holm.MAX_REFINE and not pair["significant_holm"]
    assert len(decisions) <= 1
    assert holm.side(0.05, 0.001, 0.05) == 0 and holm.side(0.2, 0.001, 0.05 / 3) == 1
    assert holm.side(0.001, 0.0001, 0.025) == -1


def _step_down(ps, se=0.001, better=None):
    """holm_step_down over fixed p-values; ``better``: {i: p after refinement}; returns the
    decisions and the contrasts it refined."""
    refined = []

    def p_of(i, refine):
        if not refine:
            return ps[i], se
        refined.append(i)
        return (better[i], se / 4) if better and i in better and refined.count(i) == 1 else None
    return holm_decisions(holm.holm_step_down(p_of, len(ps))), refined


def holm_decisions(d):
    return [d[i] for i in sorted(d)]


def test_holm_step_down_spends_no_resample_on_a_p_that_cannot_change_its_verdict():
    # the embedded study's arms family (issue 29): the smallest p fails alpha / 6, so nothing
    # after it can be rejected, whatever its Monte Carlo error: no refinement, no undecided
    ps = [0.012, 0.05, 0.0495, 0.3, 0.6, 0.9]
    decisions, refined = _step_down(ps)
    assert decisions == ["not distinguishable"] * 6 and refined == []
    # standard Holm: 0.001 < 0.05/3, 0.02 < 0.05/2, 0.04 < 0.05/1: all three rejected
    assert _step_down([0.02, 0.001, 0.04])[0] == ["differs"] * 3
    # 0.001 < 0.05/3 rejected; 0.03 > 0.05/2 stops: 0.04 is not distinguishable though below 0.05
    assert _step_down([0.001, 0.03, 0.04])[0] == ["differs", "not distinguishable", "not distinguishable"]
    assert holm_decisions({0: "x"}) == ["x"]


def test_holm_step_down_refines_only_the_p_on_its_own_threshold():
    # 0.0167 sits on 0.05/3: it alone is refined (to 0.010: rejected), then 0.02 < 0.05/2, 0.3 > 0.05
    decisions, refined = _step_down([0.0167, 0.02, 0.3], se=0.0005, better={0: 0.010})
    assert decisions == ["differs", "differs", "not distinguishable"] and refined == [0]
    # refined to 0.0175, above 0.05/3: the family stops there
    decisions, refined = _step_down([0.0167, 0.02, 0.3], se=0.0005, better={0: 0.0175})
    assert decisions == ["not distinguishable", "not distinguishable", "not distinguishable"] and refined == [0]
    # still on the edge at the cap: undecided, and so is the later p below alpha; the p clearly above alpha is not
    decisions, refined = _step_down([0.0167, 0.02, 0.3], se=0.0005)
    assert decisions == ["undecided", "undecided", "not distinguishable"] and refined == [0]


def test_r2_interval_resamples_arms_then_seeds():
    """Runs of one arm share a selection: 4 arms x 3 tight seeds are 4 points, not 12; the
    interval over arms is wider than one that treats the 12 runs as independent."""
    rng = np.random.default_rng(0)
    arm_x, arm_y = np.array([50.0, 60, 70, 80]), np.array([2.0, 8, 3, 9])
    x = np.repeat(arm_x, 3) + rng.normal(0, 0.5, 12)
    y = np.repeat(arm_y, 3) + rng.normal(0, 0.5, 12)
    groups = np.repeat(["a", "b", "c", "d"], 3)
    by_arm = lines.r2_interval(x, y, 2000, 0, groups=groups)
    by_run = lines.r2_interval(x, y, 2000, 0)
    r2 = lines.fit_line(x, y)["r2"]
    assert by_arm[0] <= r2 <= by_arm[1] and by_arm[1] - by_arm[0] > (by_run[1] - by_run[0]) + 0.1
    assert by_arm[1] > 0.95  # two of the four arms drawn: two tight clusters, a line through them


def test_posterior_learnability_of_never_solved_prompts_is_not_zero():
    from scipy.special import betaln

    # p_hat 0 of 8 with Jeffreys' prior: posterior Beta(0.5, 8.5)
    expected = 1 - np.exp(betaln(8.5, 8.5) - betaln(0.5, 8.5)) - np.exp(betaln(0.5, 16.5) - betaln(0.5, 8.5))
    assert learnability.predicted_learnable(np.zeros(3), 8) == 0
    assert learnability.posterior_learnable([0, 0, 0], 8, 8) == pytest.approx(expected) and expected > 0.2
    p = np.random.default_rng(0).beta(0.5, 8.5, 400_000)
    assert np.mean(1 - p**8 - (1 - p) ** 8) == pytest.approx(expected, abs=3e-3)
    rng = np.random.default_rng(1)
    alpha, beta = learnability.fit_beta_prior(rng.binomial(8, rng.beta(0.6, 1.4, 20_000)), 8)
    assert alpha == pytest.approx(0.6, rel=0.1) and beta == pytest.approx(1.4, rel=0.1)
    assert learnability.fit_beta_prior([0, 0, 0], 8) == learnability.JEFFREYS


def test_one_seed_intervals_are_the_percentile_bootstrap_as_before():
    """With one seed nothing changed: the interval is the percentile bootstrap over test prompts
    (the first analyze.bootstrap resamples, drawn as before issue 19)."""
    rng = np.random.default_rng(3)
    base, run = (rng.random(300) < 0.5).astype(float), (rng.random(300) < 0.6).astype(float)
    boot = intervals.Bootstrap(300, 2000, 0)
    arm = uncertainty.arm_intervals(_scores({("a", 0): run}, base), boot).iloc[0]
    legacy = np.random.default_rng([0, 0]).multinomial(300, np.full(300, 1 / 300), size=2000) / 300
    assert [arm["ci_low"], arm["ci_high"]] == intervals.interval(legacy @ (100.0 * (run - base)))


def test_the_compute_ledger_and_arms_at_equal_budget_in_the_report(tmp_path, monkeypatch):
    """Each run's ledger in the compute table; easy and hard planned at one total (the same
    completion budget, both charged the probe) are contrasted at that budget, Holm within it."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    arms = [{"name": a, "select": a, "train": {"max_completions": 500}} for a in ("easy", "hard")]
    cfg = params.load(overrides={"study": "budgets", "arms": arms, "train.seeds": [0, 1], "probe.k": 8,
                                 "dataset.pool_size": 100, "select.budget_frac": 0.1})
    root = make_study(layout.study_dir(cfg))
    for arm in ("easy", "hard"):
        for seed in (0, 1):
            path = root / "runs" / layout.run_id(arm, seed) / "manifest.json"
            m = json.loads(path.read_text())
            m["ledger"] = {"probe": {"charged": True, "completions": 800, "tokens": 8000, "cpu_seconds": 5.0,
                                     "gpu_seconds": 0.0},
                           "train": {"completions_generated": 504 + seed, "completions_kept": 400,
                                     "completions_dropped": 104 + seed, "tokens_generated": 5000, "cpu_seconds": 9.0,
                                     "gpu_seconds": 0.0},
                           "total_rollouts": 1304 + seed, "total_tokens": 13000}
            path.write_text(json.dumps(m))
    summary = analyze.report(cfg)
    out = layout.report_dir(cfg)
    compute = pd.read_csv(out / "compute.csv")
    assert compute["total_rollouts"].tolist() == [1304, 1305, 1304, 1305] and (compute["cpu_seconds"] == 14.0).all()
    assert summary["compute"]["arms"]["hard"]["total_rollouts"] == 1304.5
    assert summary["compute"]["arms"]["hard"]["gain_pp"] == summary["arms"]["hard"]["gain_pp"]
    assert "in full to every arm" in summary["compute"]["probe_charge"]
    (budget,) = summary["budgets"]
    assert cfg.probe.one_sample and budget == str(500 + 100 * 8 + 100)  # max_completions + pool x K + the greedy probe
    at = summary["budgets"][budget]
    assert at["arms"]["hard"]["kind"] == "offline" and at["arms"]["hard"]["accuracy"] == pytest.approx(0.525)
    (pair,) = at["contrasts"]
    assert (pair["a"], pair["b"], pair["diff_pp"], pair["decision"]) == ("easy", "hard", -10.0, "differs")
    assert at["verdict"].startswith("At 1,400 total rollouts hard (offline) gains most, +12.5 points [")
    assert at["verdict"].endswith("ahead of every other arm at this budget (exploratory, Holm-adjusted within each contrast's family).")
    assert (out / "fig_gain_vs_rollouts.png").exists() and (out / "fig_accuracy_vs_rollouts.png").exists()


def test_labelled_prompts_per_arm_from_the_study_s_files(tmp_path, monkeypatch):
    """The compute section's labelled prompts come from groups.parquet and the probe's
    prompts.parquet (not the manifest, so a committed study shows them): hard is charged the
    probe (its 10 pool prompts and training's 4, three of them probed), easy is not (training's 4)."""
    monkeypatch.setenv("DIFFGRPO_OUTPUTS", str(tmp_path))
    arms = [{"name": "easy", "select": "easy", "charge_probe": False}, {"name": "hard", "select": "hard"}]
    cfg = params.load(overrides={"study": "labels", "arms": arms, "train.seeds": [0, 1], "probe.k": 8})
    make_study(layout.study_dir(cfg))
    probe = layout.probe_dir(cfg)
    artifacts.write_parquet(probe / layout.PROMPTS, pd.DataFrame({"id": ["p0", "p1", "p2", *[f"q{i}" for i in range(7)]],
                                                                  "k": 8, "n_correct": 4, "mean_tokens": 10.0,
                                                                  "p_hat": 0.5}))
    summary = analyze.report(cfg)
    assert [r["labelled_prompts"] for r in summary["compute"]["runs"]] == [4, 4, 11, 11]
    assert {a: v["labelled_prompts"] for a, v in summary["compute"]["arms"].items()} == {"easy": 4.0, "hard": 11.0}
    assert "labelled_prompts" in (layout.report_dir(cfg) / "compute.md").read_text()


def test_staleness_of_the_probe_by_window_of_steps(study):
    """hard's runs train on its 4 probed prompts (p_hat 0, 0, 0.1, 0.2) over 10 steps, 4 windows:
    the probe's order first, reversed next, then every prompt solved, then none; easy's runs train
    on prompts its selection does not hold, so easy has no rows. Without any such run, nothing."""
    from scipy import stats

    assert analyze.report(study)["staleness"] is None and not (layout.report_dir(study) / "staleness.md").exists()
    rates = {1: [0, 1, 2, 4], 4: [4, 2, 1, 0], 7: [4, 4, 4, 4], 9: [0, 0, 0, 0]}  # correct of 4, per prompt
    groups = pd.DataFrame([{"step": step, "prompt_id": f"hard{i}", "rewards": [0.0] * 4,  # scores are what count
                            "scores": [1.0] * n + [0.0] * (4 - n)} for step, ns in rates.items() for i, n in enumerate(ns)])
    for seed in (0, 1):
        groups.to_parquet(layout.run_dir(study, "hard", seed) / "groups.parquet")
    summary = analyze.report(study)
    rho = round(float(stats.spearmanr([0, 1, 2, 4], [0, 0, 0.1, 0.2]).statistic), 4)
    assert list(summary["staleness"]) == ["hard"]
    assert summary["staleness"]["hard"] == [
        {"window": 1, "steps": "1-3", "spearman": rho, "n_prompts": 4, "all_correct": 1, "all_wrong": 1,
         "success": 0.4375, "p_hat": 0.075},
        {"window": 2, "steps": "4-6", "spearman": -rho, "n_prompts": 4, "all_correct": 1, "all_wrong": 1,
         "success": 0.4375, "p_hat": 0.075},
        {"window": 3, "steps": "7-8", "spearman": None, "n_prompts": 4, "all_correct": 4, "all_wrong": 0,
         "success": 1.0, "p_hat": 0.075},
        {"window": 4, "steps": "9-10", "spearman": None, "n_prompts": 4, "all_correct": 0, "all_wrong": 4,
         "success": 0.0, "p_hat": 0.075}]
    out = layout.report_dir(study)
    assert (out / "fig_staleness.png").exists() and pd.read_csv(out / "staleness.csv")["seeds"].tolist() == [2] * 4


def test_the_result_in_words_names_each_arm_by_gain_with_its_interval():
    """05_analyze shows this before its tables: the committed default study's summary, in words."""
    from diffgrpo.analysis.report import in_words

    summary = json.loads((Path(__file__).resolve().parents[1] / "docs/results/embedded/summary.json").read_text())
    text = in_words(summary)
    assert text.startswith(f"**Verdict:** {summary['verdict']}")
    bullets = [line for line in text.splitlines() if line.startswith("- **")]
    by_gain = sorted(summary["arms"], key=lambda a: -summary["arms"][a]["gain_pp"])
    assert [b.split("**")[1] for b in bullets] == by_gain
    hard = summary["arms"]["hard"]
    assert f"- **hard**: {hard['gain_pp']:+.1f} [{hard['ci95'][0]:+.1f}, {hard['ci95'][1]:+.1f}], 4 seeds" in text
    assert "random_reward** (a control" in text
    assert f"R² = {summary['regression']['r2']:.2f}" in text


def test_the_result_in_words_gives_the_equal_budget_verdict_and_the_leads_over_checkpoints():
    """The committed online_vs_offline study's budgets verdict, and a lead over checkpoints, appear in
    05_analyze's words only where the study has them."""
    from diffgrpo.analysis.report import in_words

    summary = json.loads((Path(__file__).resolve().parents[1] / "docs/results/online_vs_offline/summary.json").read_text())
    text = in_words(summary)
    assert f"**At equal total rollouts** (the probe charged): {summary['budgets_verdict']}" in text
    assert "Over the checkpoints" not in text  # it evaluates the final checkpoint only
    leads = {"leads": [{"words": "hard is ahead of easy from checkpoint 20 on (+4.0 [+1.0, +7.0] points there)"}]}
    text = in_words({**summary, "budgets_verdict": None, "checkpoint_contrasts": leads})
    assert "At equal total rollouts" not in text
    assert text.endswith("- hard is ahead of easy from checkpoint 20 on (+4.0 [+1.0, +7.0] points there)")


def test_figures_over_rollouts_draw_one_line_per_method_with_its_own_colour_and_kind():
    """Issue 38's figure: 14 arms (7 methods at 2 budgets) were 14 unconnected points whose colours
    repeated; now one line per method, no colour reused, the kind by line style, points dodged."""
    from matplotlib.colors import to_hex

    from diffgrpo.analysis.sections import compute

    kinds = ["offline"] * 3 + ["no probe"] + ["online"] * 3
    methods = [f"m{i}" for i in range(7)] + ["easy", "hard", "middle", "random"]  # 11 names: past C0-C9
    kinds += ["offline"] * 4
    arms = pd.DataFrame([{"strategy": f"{m}.b{b}", "kind": k, "total_rollouts": float(b), "gain_pp": 1.0 + i,
                          "ci_low": 0.0 + i, "ci_high": 2.0 + i}
                         for i, (m, k) in enumerate(zip(methods, kinds)) for b in (960, 1920)])
    ax = compute.plot(arms).axes[0]
    lines = [c.lines[0] for c in ax.containers]
    assert len(lines) == len(methods)
    assert len({to_hex(ln.get_color()) for ln in lines}) == len(methods)  # none reused
    assert {ln.get_linestyle() for ln in lines} == {"-", "--", ":"}
    xs = [tuple(ln.get_xdata()) for ln in lines]
    assert len({x[0] for x in xs}) == len(methods)  # dodged: no two methods at one x
    assert all(len(x) == 2 for x in xs)  # a line joins each method's two budgets


def test_runs_of_one_trajectory_share_their_seed_part_in_joint_draws():
    """Two budgets of one trajectory (a .b960 run the prefix of its .b1920 run) are one training per
    seed: given the same noise their seed parts move together; apart they are independent."""
    rng = np.random.default_rng(0)
    boot = intervals.Bootstrap(300, 2000, 0)
    x = rng.normal(0, 30, (300, 1)) + rng.normal(0, 3, (1, 4)) + rng.normal(0, 10, (300, 4))
    a, b = intervals.mean_dist(x, boot), intervals.mean_dist(x + 1.0, boot)
    noise = intervals.seed_noise(np.random.default_rng(1), boot.n_boot)
    shared = [intervals.draws(d, None, noise) - d.est - d.dev for d in (a, b)]
    assert np.allclose(shared[0], shared[1])
    apart = [intervals.draws(d, np.random.default_rng(k)) - d.est - d.dev for k, d in enumerate((a, b))]
    assert abs(np.corrcoef(*apart)[0, 1]) < 0.1


def test_the_verdict_opens_with_the_declared_question_and_names_the_family_of_its_best_arm():
    """A study with a declared question (family ``primary``) and arms at two budgets: the verdict's
    first sentence is the question's contrasts with Holm's decisions among them alone; the best-arm
    test runs among the arms of the leader's own budget and says which family."""
    arms = pd.DataFrame({"strategy": ["hard.b1", "random.b1", "hard.b2", "random.b2"], "gain_pp": [9.0, 3.0, 5.0, 4.0],
                         "ci_low": [4.0, -1.0, 1.0, 0.0], "ci_high": [14.0, 7.0, 9.0, 8.0], "n_seeds": [4] * 4})
    row = dict(p=0.01, p_holm=0.02, detectable_pp=5.0)
    pairs = pd.DataFrame([
        {"a": "hard.b1", "b": "random.b1", "family": "primary", "diff_pp": 6.0, "ci_low": 2.0, "ci_high": 10.0,
         "decision": "differs", "significant_holm": True, "undecided": False, **row},
        {"a": "hard.b2", "b": "random.b2", "family": "primary", "diff_pp": 1.0, "ci_low": -3.0, "ci_high": 5.0,
         "decision": "not distinguishable", "significant_holm": False, "undecided": False, **row},
    ])
    line, best = uncertainty.verdict_with_intervals(arms, pairs, "greedy_acc", 0.4, 300)
    assert line.startswith("The study's question (analyze.primary; confirmatory, Holm's correction over its 2 contrasts "
                           "alone): hard.b1 - random.b1 +6.0 [+2.0, +10.0] points: differs; hard.b2 - random.b2 +1.0 "
                           "[-3.0, +5.0] points: not distinguishable (about 5.0 points was detectable with 80% power). "
                           "Exploratory: "), line
    # the leader is compared only with the arm of its own budget: named from the primary pair
    assert best == "hard.b1" and "over random.b1" in line and "hard.b2" not in line.split("Exploratory: ")[1]
    # with an exploratory family at the leader's budget, the verdict names it
    more = pd.concat([pairs, pd.DataFrame([{"a": "hard.b1", "b": "easy.b1", "family": "arms at 1 rollouts", "diff_pp": 1.0,
                                            "ci_low": -2.0, "ci_high": 4.0, "decision": "not distinguishable",
                                            "significant_holm": False, "undecided": False, **row}])], ignore_index=True)
    arms3 = pd.concat([arms, pd.DataFrame([{"strategy": "easy.b1", "gain_pp": 8.0, "ci_low": 3.0, "ci_high": 13.0,
                                            "n_seeds": 4}])], ignore_index=True)
    line, best = uncertainty.verdict_with_intervals(arms3, more, "greedy_acc", 0.4, 300)
    assert best is None and "no arm of the 3 arms of family 'arms at 1 rollouts' (exploratory) differs" in line
    assert "0 of 1 contrasts of family 'arms at 1 rollouts' differ from 0" in line


def test_the_contrasts_a_report_forms_never_mix_budgets_unless_asked():
    fam = uncertainty.pair_families(["a.b1", "b.b1", "a.b2", "b.b2", "ctl"], control=["ctl"],
                                    budget_of={"a.b1": 1, "b.b1": 1, "a.b2": 2, "b.b2": 2, "ctl": 1},
                                    primary=[("b.b2", "a.b2")])
    assert fam == [("b.b2", "a.b2", "primary"), ("a.b1", "b.b1", "arms at 1 rollouts"),
                   ("a.b1", "ctl", "control at 1 rollouts"), ("b.b1", "ctl", "control at 1 rollouts")]
    wide = uncertainty.pair_families(["a.b1", "a.b2"], budget_of={"a.b1": 1, "a.b2": 2}, across_budgets=True)
    assert wide == [("a.b1", "a.b2", "across budgets")]
    # one budget (or none): the families are the plain ones
    assert uncertainty.pair_families(["x", "y", "z"], control=["z"]) == [("x", "y", "arms"), ("x", "z", "control"),
                                                                         ("y", "z", "control")]
