"""Stage 5, analyze: read a study's files and write its report, one section per paper asked for.

Reads only files the earlier stages wrote (run manifests, per-group rewards, eval summaries and
tiers on every evaluation set, selections) and writes ``outputs/<study>/report/``: tables as
CSV + markdown, figures as PNG, and ``summary.json``. What every study gets (this module):
the runs, each arm's gain with its interval, the paired contrasts, accuracy by checkpoint,
learnability, accuracy per tier, the selections' p_hat. What a paper asks is one module each,
named after it, run for every name in ``analyze.reports`` (:mod:`diffgrpo.analysis.papers`):
``paper003`` (Tables 1, 2, 4, Figure 3), ``paper001`` (base-wrong vs base-right vs all),
``paper000`` (accuracy per tier, steps to match, transfer). Statistics: :mod:`diffgrpo.analysis.uncertainty`;
figures: :mod:`diffgrpo.analysis.figures`; the long table format: :mod:`diffgrpo.analysis.tables`; the papers'
numbers: :mod:`diffgrpo.analysis.papers.paper_numbers`.

Choices where the papers are vague:

- gain = accuracy at the last evaluated checkpoint minus the base model's, in points, at
  ``analyze.metric`` (003 does not say whether its accuracy is greedy or sampled).
- learnable % counts (step, prompt) groups: we train on several prompts per step, where 003's
  definition (section 4.1) has one group per update.
- predicted learnable % = 100 * mean of 1 - p^G - (1-p)^G over an arm's selected prompts (the
  probe's p_hat; per seed for random), against the observed learnable %, over the first
  ``FIRST_STEPS_FRAC`` of the steps and over the whole run. Learnable % is that of the rewards
  a run trained on (one definition: :mod:`diffgrpo.train.records`); the share of groups whose
  verifier scores are mixed is ``verifier_mixed_pct``, shown for the control arms (for an arm
  trained on the verifier's reward the two are one number).
  The plug-in p_hat predicts 0 for a prompt probed 0 (or K) of K; the posterior prediction
  (``predicted_posterior_pct``) takes the expectation over each prompt's Beta posterior, with
  a Beta prior fit to the whole pool's probe by the method of moments (Jeffreys' Beta(0.5,
  0.5) when the pool's probe is not there): ``select.posterior_learnable``.
- a control arm is one whose definition trains on a reward other than the verifier's alone
  (``ArmConfig.is_control``): Figure 3's fit leaves it out (it is drawn apart, labelled) and
  its contrasts form their own Holm family (:mod:`diffgrpo.analysis.uncertainty`).
- ``analyze.bootstrap`` resamples, drawn from ``analyze.seed``; both are in ``summary.json``.
- with ``probe.test`` (the base model probed on the test set too): every arm's gain per
  test-difficulty bin, and on the test prompts of its own training difficulty beside the common
  test set, as 003's released code scored its arms (:mod:`diffgrpo.analysis.by_test_difficulty`).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from diffgrpo.analysis import figures, papers as reports
from diffgrpo.store import layout
from diffgrpo import probe, select
from diffgrpo.analysis import by_test_difficulty
from diffgrpo.analysis.papers import grid
from diffgrpo.store.artifacts import ArtifactError, read_json, read_parquet, save_figure, write_csv, write_json, write_text
from diffgrpo.params import Config
from diffgrpo.analysis.papers import paper_numbers
from diffgrpo.analysis.tables import DIGITS, FIRST_STEPS_FRAC, accuracy_curves, base_accuracy, final_checkpoints, markdown, strategy_order, tier_accuracy, _sorted
from diffgrpo.analysis.uncertainty import MAX_REFINE, Bootstrap, _round, arm_intervals, contrasts, curve_intervals, fit_line, holm_families, r2_interval, verdict_with_intervals


# ------------------------------------------------------------------------------------
# Reading a study's files
# ------------------------------------------------------------------------------------


def study_path(study: Config | str | Path) -> Path:
    return layout.study_dir(study) if isinstance(study, Config) else Path(study)



def find_runs(study_dir: Path, run_ids: Iterable[str] | None = None) -> tuple[list[dict], list[str]]:
    """Manifests of the complete runs (with ``run_id`` added), and the ids of incomplete ones.
    ``run_ids``: only these (the study's planned runs), not every folder under runs/."""
    paths = sorted(layout.runs_dir(study_dir).glob(f"*/{layout.MANIFEST}"))
    if run_ids is not None:
        wanted = set(run_ids)
        paths = [p for p in paths if p.parent.name in wanted]
    if not paths:
        raise FileNotFoundError(f"no runs/<run_id>/manifest.json under {study_dir}: run the train stage first")
    manifests = [{**read_json(p), "run_id": p.parent.name} for p in paths]
    done = [m.get("status") == "complete" for m in manifests]
    untrained = sorted(set(run_ids or []) - {m["run_id"] for m in manifests})  # planned, never trained
    return ([m for m, d in zip(manifests, done) if d],
            [m["run_id"] for m, d in zip(manifests, done) if not d] + untrained)



def _name(v: str | dict) -> str:
    """Manifests record the model and the task as ``{"name": ..., options...}``: keep the name."""
    return v["name"] if isinstance(v, dict) else v



def read_evals(study_dir: Path, run_ids: Iterable[str], name: str = layout.EVAL_SUMMARY) -> pd.DataFrame:
    """One eval table (``summary.parquet`` or ``tiers.parquet``) of the base model and of each run, stacked."""
    frames = []
    for rid in [layout.BASE_RUN, *run_ids]:
        path = layout.evals_dir(study_dir) / rid / name
        frames.append(read_parquet(path, "04_evaluate").assign(run_id=rid))
    return pd.concat(frames, ignore_index=True)



def learnable_pct(groups: pd.DataFrame, column: str = "rewards") -> float:
    """Percent of (step, prompt) groups whose rewards trained on differ (003 section 4.1): a
    group whose rewards are all equal has zero advantage, so GRPO learns nothing from it.
    Recomputed from the reward vectors, not the logged flag."""
    if groups.empty:
        raise ValueError("no (step, prompt) groups: learnable % is undefined")
    return 100.0 * float(groups[column].map(lambda r: np.ptp(np.asarray(r, float)) > 0).mean())


def verifier_mixed_pct(groups: pd.DataFrame) -> float:
    """Percent of groups whose *verifier scores* differ: the learnable % the run would have had
    on the verifier's reward (equal to :func:`learnable_pct` for an arm that trains on it)."""
    return learnable_pct(groups, "scores")



def first_steps(groups: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The groups of the first ``FIRST_STEPS_FRAC`` of a run's ``steps`` (at least step 1)."""
    return groups[groups["step"] <= max(1, int(np.ceil(FIRST_STEPS_FRAC * steps)))]



def collect_runs(study: Config | str | Path, metric: str = "greedy_acc",
                 run_ids: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per complete run: base and final accuracy at ``metric``, gain in points, learnable %.

    Incomplete runs are skipped with a warning that names them: their last checkpoint is not
    the budget the strategies are compared at.
    """
    root = study_path(study)
    if run_ids is None and isinstance(study, Config):
        run_ids = [layout.run_id(s, seed) for s, seed in layout.planned_runs(study)]
    runs, incomplete = find_runs(root, run_ids)
    if incomplete:
        warnings.warn(f"skipping incomplete runs: {', '.join(incomplete)}", stacklevel=2)
    if not runs:
        raise FileNotFoundError(f"no complete run under {layout.runs_dir(root)}")
    evals = read_evals(root, [m["run_id"] for m in runs])
    base = base_accuracy(evals, metric)
    final = final_checkpoints(evals).set_index("run_id")
    rows = []
    for m in runs:
        rid = m["run_id"]
        if rid not in final.index:
            raise ValueError(f"{layout.evals_dir(root) / rid / 'summary.parquet'} has no trained checkpoint (step > 0)")
        evaluated = read_json(layout.evals_dir(root) / rid / layout.MANIFEST).get("trained")
        if evaluated != layout.trained_identity(m):
            raise ArtifactError(f"{layout.evals_dir(root) / rid}: scores an earlier training of run {rid!r}, not the one "
                                "in runs/ now; rerun the evaluate stage (04_evaluate)")
        groups = read_parquet(layout.runs_dir(root) / rid / layout.GROUPS, "03_train")
        acc = float(final.loc[rid, metric])
        rows.append({
            "model": _name(m["model"]), "dataset": _name(m["task"]), "strategy": m["strategy"], "seed": int(m["seed"]),
            "base_acc": base, "final_acc": acc, "gain_pp": 100.0 * (acc - base),
            "learnable_pct": learnable_pct(groups),
            "learnable_first_pct": learnable_pct(first_steps(groups, int(m["steps_done"]))),
            "verifier_mixed_pct": verifier_mixed_pct(groups),
            "steps": int(m["steps_done"]),
        })
    return _sorted(pd.DataFrame(rows), "seed")



def selection_p_hat(study_dir: Path) -> pd.DataFrame:
    """p_hat of every selected prompt, per strategy (the data behind the p_hat figure)."""
    files = sorted(layout.selections_dir(study_dir).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no select/<strategy>.parquet under {study_dir}: run the select stage first")
    frames = [read_parquet(f, "02_select").pipe(_selection_rows, f.stem) for f in files]
    return _sorted(pd.concat(frames, ignore_index=True), "id")



def _selection_rows(sel: pd.DataFrame, stem: str) -> pd.DataFrame:
    """id, p_hat, strategy and train_seed (None: shared by every seed) of one selection file."""
    strategy = sel["strategy"].iloc[0] if "strategy" in sel and len(sel) else stem
    seed = sel["train_seed"] if "train_seed" in sel else None
    return sel[["id", "p_hat"]].assign(strategy=strategy, train_seed=seed)



def study_selections(cfg: Config) -> pd.DataFrame:
    """p_hat of every prompt the study's planned runs train on: one block per strategy, or per
    (strategy, seed) for a per-seed policy."""
    frames = []
    for strategy in dict.fromkeys(s for s, _ in layout.planned_runs(cfg)):
        for seed in cfg.train.seeds if select.per_seed(cfg.arm(strategy).select) else [None]:
            path = layout.selection_file(cfg, strategy, seed)
            frames.append(read_parquet(path, "02_select").pipe(_selection_rows, path.stem))
    return _sorted(pd.concat(frames, ignore_index=True), "id")



def predicted_learnable(selections: pd.DataFrame, runs: pd.DataFrame, group_size: int) -> pd.Series:
    """Each run's predicted learnable % at step 0: 100 * mean of 1 - p^G - (1-p)^G over the
    prompts of its selection (its own seed's for a per-seed policy)."""
    out = []
    for strategy, seed in zip(runs["strategy"], runs["seed"]):
        sel = selections[selections["strategy"] == strategy]
        if sel["train_seed"].notna().any():
            sel = sel[sel["train_seed"] == seed]
        out.append(100.0 * select.predicted_learnable(sel["p_hat"].to_numpy(float), group_size) if len(sel) else np.nan)
    return pd.Series(out, index=runs.index, dtype=float)



def learnability_prior(cfg: Config) -> dict:
    """The Beta prior of the posterior learnability prediction: fit to the pool's probe
    (``select.fit_beta_prior``), or Jeffreys' when the probe's prompts.parquet is not there."""
    path = layout.probe_dir(cfg) / layout.PROMPTS
    if path.exists():
        pool = read_parquet(path, "01_probe", columns=["n_correct", "k"])
        alpha, beta = select.fit_beta_prior(pool["n_correct"], pool["k"])
        fit = "method of moments of the beta-binomial over the pool's probe" if (alpha, beta) != select.JEFFREYS \
            else "Jeffreys (the pool's probe gave nothing to fit)"
        return {"alpha": _round(alpha), "beta": _round(beta), "prior": fit, "pool": len(pool), "k": cfg.probe.k}
    return {"alpha": 0.5, "beta": 0.5, "prior": "Jeffreys (no probe of the pool found)", "pool": None, "k": cfg.probe.k}



def posterior_learnable(selections: pd.DataFrame, runs: pd.DataFrame, group_size: int, prior: dict) -> pd.Series:
    """Each run's predicted learnable % at step 0 under each selected prompt's Beta posterior
    (n_correct = p_hat x K of the probe)."""
    out = []
    for strategy, seed in zip(runs["strategy"], runs["seed"]):
        sel = selections[selections["strategy"] == strategy]
        if sel["train_seed"].notna().any():
            sel = sel[sel["train_seed"] == seed]
        n_correct = np.round(sel["p_hat"].to_numpy(float) * prior["k"])
        out.append(100.0 * select.posterior_learnable(n_correct, prior["k"], group_size, (prior["alpha"], prior["beta"]))
                   if len(sel) else np.nan)
    return pd.Series(out, index=runs.index, dtype=float)



def control_arms(cfg: Config, manifests: list[dict]) -> list[str]:
    """Arms that do not train on the verifier's reward alone, by their definition
    (``ArmConfig.is_control``)."""
    return strategy_order({a.name for a in cfg.arms if a.is_control})



def prompt_scores(study_dir: Path, rid: str, metric: str) -> pd.DataFrame:
    """Per-prompt score of one evaluation at every evaluated step (columns: step x prompt_id):
    greedy correctness for ``greedy_acc``, the mean over sampled completions for ``pass@1``."""
    mode = {"greedy_acc": "greedy", "pass@1": "sampled"}.get(metric)
    if mode is None:
        raise ValueError(f"analyze.metric {metric!r}: intervals need per-sample scores (greedy_acc or pass@1)")
    samples = read_parquet(layout.evals_dir(study_dir) / rid / layout.SAMPLES, "04_evaluate",
                           columns=["step", "mode", "prompt_id", "correct"])
    samples = samples[samples["mode"] == mode]
    if samples.empty:
        raise ValueError(f"{study_dir / 'eval' / rid / 'samples.parquet'} has no {mode} samples for {metric}")
    return samples.astype({"correct": float}).pivot_table(index="prompt_id", columns="step", values="correct",
                                                          aggfunc="mean")



class Scores:
    """Every run's per-prompt scores, aligned on the base model's test prompts."""

    def __init__(self, study_dir: Path, runs: pd.DataFrame, metric: str):
        base = prompt_scores(study_dir, layout.BASE_RUN, metric)
        self.prompts = base.index
        self.base = base[0].to_numpy(float)
        self.runs: dict[tuple[str, int], pd.DataFrame] = {}
        for strategy, seed in zip(runs["strategy"], runs["seed"]):
            rid = layout.run_id(strategy, seed)
            scores = prompt_scores(study_dir, rid, metric)
            if set(scores.index) != set(self.prompts) or scores.isna().any().any():
                raise ValueError(f"eval/{rid}/samples.parquet does not score the base model's {len(self.prompts)} "
                                 "test prompts at every step: rerun the evaluate stage (04_evaluate)")
            self.runs[strategy, int(seed)] = scores.reindex(self.prompts)

    @classmethod
    def of(cls, base: np.ndarray, final: dict[tuple[str, int], np.ndarray | dict[int, np.ndarray]],
           step: int = 1) -> "Scores":
        """Scores from arrays (base: per prompt; final: per (strategy, seed), per prompt at ``step``,
        or a curve: {step: per prompt})."""
        self = cls.__new__(cls)
        self.prompts = pd.Index([f"t{i}" for i in range(len(base))], name="prompt_id")
        self.base = np.asarray(base, float)
        self.runs = {k: pd.DataFrame({s: np.asarray(x, float) for s, x in (v if isinstance(v, dict) else {step: v}).items()},
                                     index=self.prompts) for k, v in final.items()}
        return self

    def subset(self, mask: np.ndarray) -> "Scores":
        """The same runs on the test prompts where ``mask`` is true."""
        mask = np.asarray(mask, bool)
        out = Scores.__new__(Scores)
        out.prompts, out.base = self.prompts[mask], self.base[mask]
        out.runs = {k: v.loc[out.prompts] for k, v in self.runs.items()}
        return out

    def seeds(self, strategy: str) -> list[int]:
        return sorted(seed for s, seed in self.runs if s == strategy)

    def steps(self, strategy: str) -> list[int]:
        """Trained steps evaluated in every seed of the arm."""
        sets = [set(self.runs[strategy, seed].columns) - {0} for seed in self.seeds(strategy)]
        return sorted(set.intersection(*sets))

    def at(self, strategy: str, step: int | None = None, seeds: list[int] | None = None) -> np.ndarray:
        """prompts x seeds scores of one arm at ``step`` (None: each run's final checkpoint)."""
        cols = []
        for seed in seeds or self.seeds(strategy):
            df = self.runs[strategy, seed]
            cols.append(df[max(c for c in df.columns if c > 0) if step is None else step].to_numpy(float))
        return np.column_stack(cols)


def read_set_evals(cfg: Config, run_ids: Iterable[str], name: str = layout.EVAL_SUMMARY) -> pd.DataFrame:
    """One eval table of the base model and of each run on every evaluation set (``test`` and
    ``evaluate.sets``), stacked, with an ``eval_set`` column."""
    frames = []
    for eval_set in cfg.eval_set_names():
        for rid in [layout.BASE_RUN, *run_ids]:
            path = layout.eval_dir(cfg, rid, eval_set) / name
            frames.append(read_parquet(path, "04_evaluate").assign(run_id=rid, eval_set=eval_set))
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------


@dataclass
class StudyReport:
    """What the per-paper report modules read: the study's runs and evaluations, already
    checked and aligned, and where to write."""

    cfg: Config
    out: Path                   # the report folder
    metric: str                 # analyze.metric
    runs: pd.DataFrame          # one row per complete (arm, seed) run (collect_runs)
    manifests: list[dict]       # their run manifests
    evals: pd.DataFrame         # eval summaries on the held-out test set, base and every run
    tiers: pd.DataFrame         # per-tier eval summaries on the test set
    set_evals: pd.DataFrame     # eval summaries on every evaluation set (column eval_set)
    curves: pd.DataFrame        # accuracy by checkpoint per arm (mean over seeds, 95% interval)
    arms: pd.DataFrame          # per arm: gain, its interval, learnable %
    pairs: pd.DataFrame         # paired contrasts between arms
    rep: pd.DataFrame           # the reported numbers of the papers in analyze.reports
    regression: dict            # Figure 3's fit over our runs (those that train on the verifier's reward)
    over: str                   # what the intervals resample, in words
    control: list[str] = dataclasses.field(default_factory=list)  # arms not trained on the verifier's reward
    scores: Scores | None = None  # every run's per-prompt scores by checkpoint (intervals of a report's own numbers)
    boot: Bootstrap | None = None  # the test-prompt resamples every interval of the study shares

    @property
    def label(self) -> dict:
        """dataset and model of the study (one of each per study)."""
        return self.runs[["dataset", "model"]].iloc[0].to_dict()

    def write_long(self, name: str, title: str, long: pd.DataFrame) -> None:
        """A long table as CSV and in the paper's wide layout as markdown."""
        from diffgrpo.analysis.tables import wide_markdown

        write_csv(self.out / f"{name}.csv", long)
        write_text(self.out / f"{name}.md", f"# {title}\n\n{wide_markdown(long)}")

    def write_table(self, name: str, title: str, df: pd.DataFrame, note: str = "") -> None:
        write_csv(self.out / f"{name}.csv", df)
        write_text(self.out / f"{name}.md", f"# {title}\n\n" + (markdown(df) if len(df) else "(no rows)\n")
                   + (f"\n{note}\n" if note else ""))


#: steps.parquet columns of the length / format view (TRL's logged generation metrics)
CONFOUND_METRICS = {"completions/mean_length": "mean_length", "completions/clipped_ratio": "truncated",
                    "completions/mean_terminated_length": "mean_terminated_length"}


def confound_steps(study_dir: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run and step, the completion length and truncation rate TRL logged (steps.parquet):
    whether an arm's gain may come with a length change rather than with reasoning. Runs
    without those columns (or without steps.parquet) are left out."""
    frames = []
    for strategy, seed in zip(runs["strategy"], runs["seed"]):
        path = layout.runs_dir(study_dir) / layout.run_id(strategy, seed) / layout.STEPS
        if not path.exists():
            continue
        steps = read_parquet(path, "03_train")
        have = [c for c in CONFOUND_METRICS if c in steps]
        if "completions/mean_length" not in have:
            continue
        frames.append(steps[["step", *have]].rename(columns=CONFOUND_METRICS).assign(strategy=strategy, seed=int(seed)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["strategy", "seed", "step"])


def confound_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per arm (mean over seeds): completion length and truncation rate over the first and last
    ``FIRST_STEPS_FRAC`` of the steps and the whole run."""
    if steps.empty:
        return pd.DataFrame(columns=["strategy", "n_seeds"])
    rows = []
    for (strategy, seed), g in steps.groupby(["strategy", "seed"], sort=False):
        cut = max(1, int(np.ceil(FIRST_STEPS_FRAC * g["step"].max())))
        first, last = g[g["step"] <= cut], g[g["step"] > g["step"].max() - cut]
        row = {"strategy": strategy, "seed": seed}
        for col in [c for c in CONFOUND_METRICS.values() if c in g]:
            row |= {f"{col}_first": first[col].mean(), f"{col}_last": last[col].mean(), f"{col}_run": g[col].mean()}
        rows.append(row)
    per_run = pd.DataFrame(rows)
    out = per_run.drop(columns="seed").groupby("strategy", sort=False).mean()
    out.insert(0, "n_seeds", per_run.groupby("strategy", sort=False).size())
    return _sorted(out.reset_index())


def figure3_regression(runs: pd.DataFrame, control: Iterable[str], n_boot: int, seed: int) -> dict:
    """Figure 3's line over the runs that train on the verifier's reward (``control`` arms
    left out, named in ``excluded``), its R^2 with an interval that resamples arms then seeds
    within them, and the R^2 over the arms' means."""
    real = runs[~runs["strategy"].isin(list(control))]
    regression = fit_line(real["learnable_pct"], real["gain_pp"])
    regression["r2_ci95"] = (r2_interval(real["learnable_pct"], real["gain_pp"], n_boot, seed, groups=real["strategy"])
                             if regression["r2"] is not None else None)
    means = real.groupby("strategy", sort=False)[["learnable_pct", "gain_pp"]].mean()
    regression["r2_arm_means"] = fit_line(means["learnable_pct"], means["gain_pp"])["r2"]
    regression["arms"] = strategy_order(real["strategy"])
    regression["excluded"] = [s for s in strategy_order(runs["strategy"]) if s in set(control)]
    regression["r2_ci95_resamples"] = "arms, then seeds within each drawn arm"
    return regression



def test_difficulty_report(cfg: Config, out: Path, scores: Scores, boot: Bootstrap, pairs: pd.DataFrame,
                           selections: pd.DataFrame, control: list[str]) -> dict | None:
    """With ``probe.test``: every arm's gain per test-difficulty bin (``test_bins.*``,
    ``fig_test_bins.png``) and on the test prompts of its own training difficulty beside the
    common test set (``matched_test.*``, ``fig_matched_test.png``: 003's released code), and the
    spread between the first and last arm under both (:mod:`diffgrpo.analysis.by_test_difficulty`)."""
    test_probe = probe.read_test_prompts(cfg)
    if test_probe is None:
        return None
    n_boot, seed, edges = cfg.analyze.bootstrap, cfg.analyze.seed, cfg.analyze.test_bins
    p_hat = by_test_difficulty.test_p_hat(test_probe, scores.prompts)
    bins = by_test_difficulty.by_bin(scores, p_hat, edges, n_boot, seed)
    write_csv(out / "test_bins.csv", bins.round(DIGITS))
    write_text(out / "test_bins.md", f"# Gain per test-difficulty bin (points, {cfg.analyze.metric}): the test prompts "
               f"binned by the base model's p_hat (K={cfg.probe.k}); 95% interval over the bin's test prompts and "
               "seeds\n\n" + markdown(bins.round(DIGITS)))
    save_figure(figures.plot_test_bins(bins), out / "fig_test_bins.png")
    table, dists = by_test_difficulty.matched(scores, p_hat, by_test_difficulty.training_ranges(selections), boot)
    sp = by_test_difficulty.spread(table, dists, pairs, control, seed)
    line = by_test_difficulty.verdict(sp)
    write_csv(out / "matched_test.csv", table.round(DIGITS))
    write_text(out / "matched_test.md", "# Each arm scored on the common test set and on the test prompts of its own "
               "training difficulty (p_hat within the range of its training prompts' p_hat), as 003's released code "
               f"scored its arms (points, {cfg.analyze.metric}; 95% intervals)\n\n" + markdown(table.round(DIGITS))
               + f"\n\n{line}\n")
    save_figure(figures.plot_matched_test(table), out / "fig_matched_test.png")
    return {"bins": bins.round(DIGITS).to_dict("records"), "matched": table.round(DIGITS).to_dict("records"),
            "spread": sp, "verdict": line, "edges": edges, "k": cfg.probe.k}


def report(cfg: Config) -> dict:
    """Read the study's files, write every table, figure and ``summary.json`` to
    ``layout.report_dir(cfg)``, and return the summary.

    ``summary.json``: ``runs`` (one row per (arm, seed)), ``arms`` (per arm: mean gain over
    seeds, its ``ci95``, learnable % observed and predicted (plug-in and posterior), ``n_seeds``,
    ``reward``: verifier or control), ``contrasts`` (per pair: ``diff_pp``, ``ci95``, ``p``, its
    Monte Carlo ``p_mc_se`` and ``resamples``, ``family``, ``p_holm`` within the family,
    ``decision``), ``holm_families``, ``learnability_prior``, ``bootstrap`` (resamples, seed, what
    was resampled, the interval's method), ``regression`` (over the verifier-reward arms, with
    ``r2_ci95`` over arms then seeds, ``r2_arm_means``, ``excluded``), ``paper_regression``,
    ``best`` (None unless its lead excludes 0), ``verdict``, ``metric``, ``skipped``,
    ``eval_sets``, ``test_difficulty`` (None without ``probe.test``: ``bins``, ``matched``,
    ``spread``, ``verdict``); then one section per
    paper of ``analyze.reports``, named after it (``"003"``, ``"001"``, ``"000"``:
    :mod:`diffgrpo.analysis.papers`). ``paper_tables.md`` lists every number all four papers report,
    as the reference sheet.
    """
    root, out, metric = layout.study_dir(cfg), layout.report_dir(cfg), cfg.analyze.metric
    ids = [layout.run_id(s, seed) for s, seed in layout.planned_runs(cfg)]
    runs = collect_runs(root, metric, ids)
    complete, skipped = find_runs(root, ids)
    ids = [m["run_id"] for m in complete]
    evals, tiers = read_evals(root, ids), read_evals(root, ids, layout.EVAL_TIERS)
    rep = paper_numbers.reported(cfg.analyze.reports)
    points = paper_numbers.paper_points(rep)

    selections = study_selections(cfg)
    runs["predicted_learnable_pct"] = predicted_learnable(selections, runs, cfg.train.group_size)
    prior = learnability_prior(cfg)
    posterior = posterior_learnable(selections, runs, cfg.train.group_size, prior)
    control = control_arms(cfg, complete)
    scores = Scores(root, runs, metric)
    boot = Bootstrap(len(scores.prompts), cfg.analyze.bootstrap, cfg.analyze.seed)
    learn = runs.assign(predicted_posterior_pct=posterior).groupby("strategy")[
        ["learnable_pct", "learnable_first_pct", "predicted_learnable_pct", "predicted_posterior_pct"]].mean()
    arms = arm_intervals(scores, boot).merge(learn, left_on="strategy", right_index=True)
    pairs = contrasts(scores, boot, control)
    curves = accuracy_curves(evals, metric).merge(curve_intervals(scores, boot), on=["strategy", "step"], how="left")
    n_prompts = len(scores.prompts)
    seeds = int(arms["n_seeds"].max())
    over = (f"test prompts (bootstrap) and seeds (t, {seeds - 1} df)" if seeds > 1
            else "test prompts only (one seed per arm: seed variance is not included)")
    families = holm_families(pairs)
    family_text = "; ".join(f"{f} ({v['what']}): {', '.join(v['contrasts'])}" for f, v in families.items())

    write_csv(out / "runs.csv", runs.round(DIGITS))
    write_text(out / "runs.md", f"# Runs ({metric}; gain in points)\n\n{markdown(runs.round(DIGITS))}")
    write_csv(out / "arms.csv", arms.round(DIGITS))
    write_text(out / "arms.md", f"# Arms: gain (points, {metric}) with its 95% interval over {over}; learnable % "
               f"observed (first {FIRST_STEPS_FRAC:.0%} of steps, whole run) and predicted from the probe (plug-in "
               f"p_hat; posterior: Beta({prior['alpha']:g}, {prior['beta']:g}) prior, {prior['prior']})\n\n"
               + markdown(arms.round(DIGITS)))
    write_csv(out / "contrasts.csv", pairs.round(DIGITS))
    write_text(out / "contrasts.md", f"# Contrasts: gain of a minus gain of b (points), paired on the same test prompts "
               f"and seeds; 95% interval over {over}; p two-sided from {cfg.analyze.bootstrap} prompt resamples, more "
               f"(up to {MAX_REFINE}x; column `resamples`) where its Monte Carlo error straddles a Holm threshold "
               "(still so at the cap: undecided); p_holm adjusted within each Holm family\n\n"
               f"Holm families: {family_text or 'none'}\n\n"
               + (markdown(pairs.round(DIGITS)) if len(pairs) else "(one arm)\n"))
    per_tier = tier_accuracy(tiers, evals, metric).round(DIGITS)
    write_csv(out / "tiers.csv", per_tier)
    tier_wide = per_tier.pivot(index="tier", columns="strategy", values="value")
    write_text(out / "tiers.md", f"# Accuracy per tier ({metric}): base and final checkpoints\n\n"
               + markdown(tier_wide[strategy_order(tier_wide.columns)].reset_index()))

    regression = figure3_regression(runs, control, cfg.analyze.bootstrap, cfg.analyze.seed)
    paper_fit = paper_numbers.paper_regression(points, rep)
    write_text(out / "paper_tables.md", paper_numbers.paper_tables(paper_numbers.reported()))

    save_figure(figures.plot_accuracy_curves(curves, metric), out / "fig2_accuracy_by_checkpoint.png")
    save_figure(figures.plot_learnability(arms, cfg.train.group_size), out / "fig_learnability.png")
    save_figure(figures.plot_p_hat(selections), out / "fig_p_hat.png")
    save_figure(figures.plot_tiers(per_tier, metric), out / "fig_tiers.png")
    steps = confound_steps(root, runs)
    confounds = confound_table(steps)
    write_csv(out / "confounds.csv", confounds.round(DIGITS))
    write_text(out / "confounds.md", "# Length and format over training: completion length (tokens) and the share of "
               f"completions truncated at max_completion_length, first and last {FIRST_STEPS_FRAC:.0%} of the steps and "
               "the whole run, mean over seeds (TRL's logged metrics, steps.parquet). The answer-format rate is not "
               "recorded during training (groups.parquet keeps the scores, not the completions).\n\n"
               + (markdown(confounds.round(DIGITS)) if len(confounds) else "(no run logged completion lengths)\n"))
    if not steps.empty:
        save_figure(figures.plot_confounds(steps), out / "fig_length.png")

    by_difficulty = test_difficulty_report(cfg, out, scores, boot, pairs, selections, control)

    line, best = verdict_with_intervals(arms, pairs, metric, runs["base_acc"].iloc[0], n_prompts, control)
    summary = {
        "metric": metric,
        "runs": runs.drop(columns=["verifier_mixed_pct"]).round(DIGITS).to_dict("records"),
        "skipped": skipped,
        "best": best,
        "verdict": line,
        "regression": regression,
        "paper_regression": paper_fit,
        "arms": {r["strategy"]: {
            "gain_pp": _round(r["gain_pp"]), "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
            "learnable_pct": _round(r["learnable_pct"]), "learnable_first_pct": _round(r["learnable_first_pct"]),
            "predicted_learnable_pct": _round(r["predicted_learnable_pct"]),
            "predicted_posterior_pct": _round(r["predicted_posterior_pct"]), "n_seeds": int(r["n_seeds"]),
            "reward": "control" if r["strategy"] in control else "verifier",
            **({"verifier_mixed_pct": _round(runs.loc[runs["strategy"] == r["strategy"], "verifier_mixed_pct"].mean())}
               if r["strategy"] in control else {}),
        } for r in arms.to_dict("records")},
        "contrasts": [{
            "a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]), "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
            "p": _round(r["p"]), "p_holm": _round(r["p_holm"]), "n_seeds": int(r["n_seeds"]),
            "excludes_zero": bool(r["excludes_zero"]), "significant_holm": bool(r["significant_holm"]),
            "family": r["family"], "p_mc_se": _round(r["p_mc_se"]), "resamples": int(r["resamples"]),
            "decision": r["decision"],
        } for r in pairs.to_dict("records")],
        "holm_families": families,
        "confounds": {r["strategy"]: {k: _round(v) for k, v in r.items() if k not in ("strategy", "n_seeds")}
                      for r in confounds.to_dict("records")},
        "learnability_prior": prior,
        "bootstrap": {"resamples": cfg.analyze.bootstrap, "seed": cfg.analyze.seed, "level": 0.95,
                      "over": over, "n_prompts": n_prompts,
                      "interval": ("prompt bootstrap (shrunk to the prompts' own variance) convolved with a t seed part "
                                   f"({seeds - 1} df)") if seeds > 1 else "percentile (test prompts)",
                      "max_resamples": MAX_REFINE * cfg.analyze.bootstrap},
        "eval_sets": cfg.eval_set_names(),
        "test_difficulty": by_difficulty,
    }
    study = StudyReport(cfg=cfg, out=out, metric=metric, runs=runs, manifests=complete, evals=evals, tiers=tiers,
                        set_evals=read_set_evals(cfg, ids), curves=curves, arms=arms, pairs=pairs, rep=rep,
                        regression=regression, over=over, control=control, scores=scores, boot=boot)
    for paper in cfg.analyze.reports:
        summary[paper] = reports.get(paper).write(study)
    if cfg.analyze.compare:
        summary["grid"] = grid.write(study, summary)
    write_json(out / layout.REPORT_SUMMARY, summary)
    return summary
