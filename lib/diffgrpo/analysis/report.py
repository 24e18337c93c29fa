"""Stage 5, analyze: read a study's files and write its report, section by section, then one
report per paper asked for.

Reads only files the earlier stages wrote (run manifests, per-group rewards, eval summaries and
tiers on every evaluation set, selections) and writes ``outputs/<study>/report/``: tables as
CSV + markdown, figures as PNG, and ``summary.json``. This module reads the study once
(:func:`read_study`: the runs, each arm's gain with its interval, the paired contrasts, accuracy
by checkpoint, learnability, Figure 3's fit) into a :class:`StudyReport`; :func:`report` hands it
to every section of :mod:`diffgrpo.analysis.sections` (what every study gets: runs, arms,
contrasts, accuracy by checkpoint, contrasts at every checkpoint, learnability, per tier, the selections' p_hat, length, test
difficulty) and to one module per name in ``analyze.reports`` (:mod:`diffgrpo.analysis.papers`:
``paper003`` Tables 1, 2, 4, Figure 3; ``paper001`` base-wrong vs base-right vs all;
``paper000`` accuracy per tier, steps to match, transfer). Statistics:
:mod:`diffgrpo.analysis.uncertainty`; learnability: :mod:`diffgrpo.analysis.learnability`;
figures: :mod:`diffgrpo.analysis.figures`; the long table format: :mod:`diffgrpo.analysis.tables`;
the papers' numbers: :mod:`diffgrpo.analysis.papers.paper_numbers`.

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
  0.5) when the pool's probe is not there): :mod:`diffgrpo.analysis.learnability`.
- a control arm is one its params file declares so (``role: control``, :func:`control_arms`),
  not one inferred from its reward: Figure 3's fit leaves it out (it is drawn apart, labelled)
  and its contrasts form their own Holm family (:mod:`diffgrpo.analysis.uncertainty`).
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

from diffgrpo import params, select
from diffgrpo.analysis import learnability, papers, sections
from diffgrpo.analysis.papers import grid, paper_numbers
from diffgrpo.analysis.tables import DIGITS, accuracy_curves, arm_order, base_accuracy, final_checkpoints, markdown, _sorted
from diffgrpo.analysis.uncertainty import arm_intervals, contrasts, curve_intervals
from diffgrpo.stats.intervals import Bootstrap
from diffgrpo.stats.lines import fit_line, r2_interval
from diffgrpo.params import Config
from diffgrpo.store import layout
from diffgrpo.store.artifacts import ArtifactError, read_json, read_parquet, write_csv, write_json, write_text


# ------------------------------------------------------------------------------------
# Reading a study's files
# ------------------------------------------------------------------------------------


def study_path(study: Config | str | Path) -> Path:
    return layout.study_dir(study) if isinstance(study, Config) else Path(study)



def find_runs(study_dir: Path, run_ids: Iterable[str] | None = None) -> tuple[list[dict], list[str]]:
    """Manifests of the complete runs (with ``run_id`` added), and the ids of incomplete ones.
    ``run_ids``: only these (the study's planned runs), not every folder under runs/."""
    paths = sorted(layout.runs_dir(study_dir).glob("*/manifest.json"))
    if run_ids is not None:
        wanted = set(run_ids)
        paths = [p for p in paths if p.parent.name in wanted]
    if not paths:
        raise layout.NotRunYet(f"no runs/<run_id>/manifest.json under {study_dir}: run the train stage (03_train) first")
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



def collect_runs(study: Config | str | Path, metric: str = "greedy_acc",
                 run_ids: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per complete run: base and final accuracy at ``metric``, gain in points, learnable %.

    Incomplete runs are skipped with a warning that names them: their last checkpoint is not
    the budget the arms are compared at.
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
            "learnable_pct": learnability.learnable_pct(groups),
            "learnable_first_pct": learnability.learnable_pct(learnability.first_steps(groups, int(m["steps_done"]))),
            "verifier_mixed_pct": learnability.verifier_mixed_pct(groups),
            "steps": int(m["steps_done"]),
        })
    return _sorted(pd.DataFrame(rows), "seed")



def selection_p_hat(study_dir: Path) -> pd.DataFrame:
    """p_hat of every selected prompt, per arm (the data behind the p_hat figure)."""
    files = sorted(layout.selections_dir(study_dir).glob("*.parquet"))
    if not files:
        raise layout.NotRunYet(f"no select/<arm>.parquet under {study_dir}: run the select stage (02_select) first")
    frames = [read_parquet(f, "02_select").pipe(_selection_rows, f.stem) for f in files]
    return _sorted(pd.concat(frames, ignore_index=True), "id")



def _selection_rows(sel: pd.DataFrame, stem: str) -> pd.DataFrame:
    """id, p_hat, strategy (the arm) and train_seed (None: shared by every seed) of one selection file."""
    arm = sel["strategy"].iloc[0] if "strategy" in sel and len(sel) else stem
    seed = sel["train_seed"] if "train_seed" in sel else None
    return sel[["id", "p_hat"]].assign(strategy=arm, train_seed=seed)



def study_selections(cfg: Config) -> pd.DataFrame:
    """p_hat of every prompt the study's planned runs train on: one block per arm, or per
    (arm, seed) for a per-seed policy."""
    frames = []
    for arm in dict.fromkeys(s for s, _ in layout.planned_runs(cfg)):
        for seed in cfg.train.seeds if select.per_seed(cfg.arm(arm).select) else [None]:
            path = layout.selection_file(cfg, arm, seed)
            frames.append(read_parquet(path, "02_select").pipe(_selection_rows, path.stem))
    return _sorted(pd.concat(frames, ignore_index=True), "id")



def control_arms(cfg: Config) -> list[str]:
    """The study's control arms, as its params file declares them (``role: control``, e.g. the
    Bernoulli-reward arm ``random_reward``), in the report's arm order. A control is drawn apart
    from Figure 3's fit and its contrasts form their own Holm family; an arm trained on another
    reward of its own (a partial credit) stays an arm unless its params say otherwise."""
    return arm_order([a.name for a in cfg.arms if a.role == "control"])



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
        for arm, seed in zip(runs["strategy"], runs["seed"]):
            rid = layout.run_id(arm, seed)
            scores = prompt_scores(study_dir, rid, metric)
            if set(scores.index) != set(self.prompts) or scores.isna().any().any():
                raise ValueError(f"eval/{rid}/samples.parquet does not score the base model's {len(self.prompts)} "
                                 "test prompts at every step: rerun the evaluate stage (04_evaluate)")
            self.runs[arm, int(seed)] = scores.reindex(self.prompts)

    @classmethod
    def of(cls, base: np.ndarray, final: dict[tuple[str, int], np.ndarray | dict[int, np.ndarray]],
           step: int = 1) -> "Scores":
        """Scores from arrays (base: per prompt; final: per (arm, seed), per prompt at ``step``,
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

    def only(self, arms: Iterable[str]) -> "Scores":
        """The runs of ``arms`` alone, on the same test prompts (contrasts within a subset of arms)."""
        out = Scores.__new__(Scores)
        out.prompts, out.base, keep = self.prompts, self.base, set(arms)
        out.runs = {k: v for k, v in self.runs.items() if k[0] in keep}
        return out

    def seeds(self, arm: str) -> list[int]:
        return sorted(seed for s, seed in self.runs if s == arm)

    def steps(self, arm: str) -> list[int]:
        """Trained steps evaluated in every seed of the arm."""
        sets = [set(self.runs[arm, seed].columns) - {0} for seed in self.seeds(arm)]
        return sorted(set.intersection(*sets))

    def at(self, arm: str, step: int | None = None, seeds: list[int] | None = None) -> np.ndarray:
        """prompts x seeds scores of one arm at ``step`` (None: each run's final checkpoint)."""
        cols = []
        for seed in seeds or self.seeds(arm):
            df = self.runs[arm, seed]
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
    """What every section and paper of the report reads (:func:`read_study`): the study's runs
    and evaluations, already checked and aligned, the numbers they share, and where to write."""

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
    control: list[str] = dataclasses.field(default_factory=list)  # the control arms (control_arms)
    scores: Scores | None = None  # every run's per-prompt scores by checkpoint (intervals of a report's own numbers)
    boot: Bootstrap | None = None  # the test-prompt resamples every interval of the study shares
    skipped: list[str] = dataclasses.field(default_factory=list)  # planned runs not complete (left out)
    selections: pd.DataFrame | None = None  # p_hat of every prompt the runs train on (study_selections)
    prior: dict | None = None   # the Beta prior of the posterior learnability (learnability.learnability_prior)
    trajectories: dict[str, str] = dataclasses.field(default_factory=dict)  # run_id -> layout.trajectory_id
    pair_dists: list = dataclasses.field(default_factory=list)  # each row of pairs: its MeanDist (diffgrpo.stats.intervals)

    def nested_arms(self) -> list[list[str]]:
        """Groups of arms whose runs are, seed by seed, points of one trajectory (one a prefix of
        the other: :func:`diffgrpo.store.layout.trajectory_id`); each group shares one seed part in
        joint draws. Arms alone in their trajectories are left out."""
        by_arm: dict[str, dict[int, str]] = {}
        for r in self.runs[["strategy", "seed"]].itertuples():
            rid = layout.run_id(r.strategy, int(r.seed))
            if rid in self.trajectories:
                by_arm.setdefault(r.strategy, {})[int(r.seed)] = self.trajectories[rid]
        groups: list[list[str]] = []
        for arm, traj in by_arm.items():
            home = next((g for g in groups if by_arm[g[0]] == traj), None)
            (home.append(arm) if home is not None else groups.append([arm]))
        return [g for g in groups if len(g) > 1]

    @property
    def n_seeds(self) -> int:
        """The most seeds any arm has (the intervals' seed part: diffgrpo.stats.pooling)."""
        return int(self.arms["n_seeds"].max())

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




def figure3_regression(runs: pd.DataFrame, control: Iterable[str], n_boot: int, seed: int) -> dict:
    """Figure 3's line over the runs that train on the verifier's reward (``control`` arms
    left out, named in ``excluded``), its R^2 with an interval that resamples arms then seeds
    within them, and the R^2 over the arms' means."""
    real = runs[~runs["strategy"].isin(list(control))]
    regression = fit_line(real["learnable_pct"], real["gain_pp"], DIGITS)
    regression["r2_ci95"] = (r2_interval(real["learnable_pct"], real["gain_pp"], n_boot, seed, groups=real["strategy"], digits=DIGITS)
                             if regression["r2"] is not None else None)
    means = real.groupby("strategy", sort=False)[["learnable_pct", "gain_pp"]].mean()
    regression["r2_arm_means"] = fit_line(means["learnable_pct"], means["gain_pp"], DIGITS)["r2"]
    regression["arms"] = arm_order(real["strategy"])
    regression["excluded"] = [a for a in arm_order(runs["strategy"]) if a in set(control)]
    regression["r2_ci95_resamples"] = "arms, then seeds within each drawn arm"
    return regression


def contrast_plan(cfg: Config) -> dict:
    """What decides the report's contrasts and their Holm families beside the arms
    (:func:`diffgrpo.analysis.uncertainty.pair_families`): each arm's planned total rollouts, the
    declared question (``analyze.primary``) and ``analyze.across_budgets``: each arm's budget level
    (:func:`diffgrpo.params.budgets.budget_level`)."""
    from diffgrpo.params.schema import primary_pairs
    from diffgrpo.params.budgets import budget_level

    return {"budget_of": {a.name: budget_level(cfg, a.name) for a in cfg.arms}, "primary": primary_pairs(cfg),
            "across_budgets": cfg.analyze.across_budgets}


def read_study(cfg: Config) -> StudyReport:
    """Read the study's planned runs that are complete, their evaluations and selections, and
    compute what the sections and papers share: each run's learnability observed and predicted,
    each arm's gain with its interval, the paired contrasts, accuracy by checkpoint, Figure 3's fit."""
    root, metric, group_size = layout.study_dir(cfg), cfg.analyze.metric, cfg.train.group_size
    ids = [layout.run_id(a, seed) for a, seed in layout.planned_runs(cfg)]
    runs = collect_runs(root, metric, ids)
    complete, skipped = find_runs(root, ids)
    ids = [m["run_id"] for m in complete]
    evals = read_evals(root, ids)
    selections, prior = study_selections(cfg), learnability.learnability_prior(cfg)
    runs["predicted_learnable_pct"] = learnability.arm_predicted_learnable(selections, runs, group_size)
    posterior = learnability.arm_posterior_learnable(selections, runs, group_size, prior)
    control = control_arms(cfg)
    scores = Scores(root, runs, metric)
    boot = Bootstrap(len(scores.prompts), cfg.analyze.bootstrap, cfg.analyze.seed)
    learn = runs.assign(predicted_posterior_pct=posterior).groupby("strategy")[
        ["learnable_pct", "learnable_first_pct", "predicted_learnable_pct", "predicted_posterior_pct"]].mean()
    arms = arm_intervals(scores, boot).merge(learn, left_on="strategy", right_index=True)
    curves = accuracy_curves(evals, metric).merge(curve_intervals(scores, boot), on=["strategy", "step"], how="left")
    seeds, pair_dists = int(arms["n_seeds"].max()), []
    over = (f"test prompts (bootstrap) and seeds (pooled across the study's contrasts where their spreads agree, else a t "
            f"with {seeds - 1} df; floored at the runs' per-prompt noise; p never below the sign-flip test's)" if seeds > 1
            else "test prompts only (one seed per arm: seed variance is not included)")
    return StudyReport(
        cfg=cfg, out=layout.report_dir(cfg), metric=metric, runs=runs, manifests=complete, evals=evals,
        tiers=read_evals(root, ids, layout.EVAL_TIERS), set_evals=read_set_evals(cfg, ids), curves=curves, arms=arms,
        pairs=contrasts(scores, boot, control, **contrast_plan(cfg), keep=pair_dists), pair_dists=pair_dists,
        rep=paper_numbers.reported(cfg.analyze.reports),
        regression=figure3_regression(runs, control, cfg.analyze.bootstrap, cfg.analyze.seed), over=over,
        control=control, scores=scores, boot=boot, skipped=skipped, selections=selections, prior=prior,
        trajectories={m["run_id"]: layout.trajectory_id(m) for m in complete})


def report(cfg: Config) -> dict:
    """Read the study (:func:`read_study`), write every section's tables and figures
    (:mod:`diffgrpo.analysis.sections`, each module's docstring says its part of ``summary.json``),
    then each paper's of ``analyze.reports`` (:mod:`diffgrpo.analysis.papers`, a part of
    ``summary.json`` named after it: ``"003"``, ``"001"``, ``"000"``, ``"002"``) and, with
    ``analyze.compare``, the grid over several studies (``"grid"``); write ``summary.json`` to
    ``layout.report_dir(cfg)`` and return it. ``params.yaml`` beside it records the params the
    report was computed with (a committed report is re-rendered from them:
    :mod:`diffgrpo.analysis.inputs`). The report folder is the report's: the tables and figures
    an earlier render left there are removed first, so a section that has nothing to say this
    time (a figure drawn only where the study has its data) leaves no stale file behind."""
    study = read_study(cfg)
    for old in [*study.out.glob("*.csv"), *study.out.glob("*.md"), *study.out.glob("*.png")]:
        old.unlink()
    summary = {}
    for name in sections.names():
        part = sections.get(name).write(study)
        if taken := sorted(set(part) & set(summary)):
            raise ValueError(f"report section {name!r} writes summary.json keys another section wrote: {taken}")
        summary |= part
    for paper in cfg.analyze.reports:
        summary[paper] = papers.get(paper).write(study)
    if cfg.analyze.compare:
        summary["grid"] = grid.write(study, summary)
    write_json(study.out / layout.REPORT_SUMMARY, summary)
    write_text(study.out / layout.PARAMS, params.dump(cfg))
    return summary


def figure_files(cfg: Config) -> list[Path]:
    """The figures every section declares (``FIGURES``), in the sections' order, that the
    study's report holds (a section draws one only where the study has its data: no length
    view without logged lengths, no test-difficulty bins without ``probe.test``). The papers'
    figures come with them: ``papers.get(paper).FIGURES``."""
    out = layout.report_dir(cfg)
    paths = [out / f"{fig}.png" for name in sections.names() for fig in sections.get(name).FIGURES]
    return [p for p in paths if p.exists()]


def in_words(summary: dict) -> str:
    """The study's result as a short page of Markdown, for 05_analyze to show before its tables:
    the verdict, each arm's gain with its interval (largest first), the Figure 3 fit and, where
    the study has them, the verdict at equal total rollouts (``budgets_verdict``) and each
    pair's lead over the checkpoints (``checkpoint_contrasts``)."""
    arms = summary.get("arms", {})
    runs = summary.get("runs", [])
    base = f" over the base model's {summary['metric']} of {runs[0]['base_acc']:.3f}" if runs else ""
    lines = [f"**Verdict:** {summary['verdict']}.", "",
             f"Each arm's gain{base}, in points, with its 95% interval:", ""]
    for name, arm in sorted(arms.items(), key=lambda kv: -kv[1]["gain_pp"]):
        lo, hi = arm["ci95"]
        control = "" if arm.get("reward") == "verifier" else " (a control: trained on another reward than the verifier's)"
        seeds = f"{arm['n_seeds']} seed" + ("" if arm["n_seeds"] == 1 else "s")
        lines.append(f"- **{name}**{control}: {arm['gain_pp']:+.1f} [{lo:+.1f}, {hi:+.1f}], {seeds}, "
                     f"{arm['learnable_pct']:.0f}% of its groups learnable")
    fit, paper = summary.get("regression", {}), summary.get("paper_regression", {})
    if fit.get("n"):
        r2 = "undefined (the gains do not vary)" if fit.get("r2") is None else f"{fit['r2']:.2f}"
        ci = fit.get("r2_ci95")
        lines += ["", f"Learnable % against gain (Figure 3): R² = {r2}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
                  + f" over {fit['n']} runs" + (f"; the paper's own points give {paper['r2']:.2f}." if paper.get("r2")
                                               is not None else ".")]
    if summary.get("budgets_verdict"):
        lines += ["", f"**At equal total rollouts** (the probe charged): {summary['budgets_verdict']}"]
    leads = (summary.get("checkpoint_contrasts") or {}).get("leads") or []
    if leads:
        lines += ["", "**Over the checkpoints** (is one arm ahead, and from when):", ""]
        lines += [f"- {lead['words']}" for lead in leads]
    return "\n".join(lines)
