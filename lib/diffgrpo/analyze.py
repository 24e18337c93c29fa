"""Stage 5, analyze: the papers' tables and figures from our runs, beside the numbers they report.

Reads only files the earlier stages wrote (run manifests, per-group rewards, eval summaries and
tiers, selections) and writes ``outputs/<study>/report/``: tables as CSV + markdown, figures as
PNG, and ``summary.json``. Our numbers and the papers' (``reported/paper_<id>.csv``) share one long
format (source, dataset, model, strategy, metric, value), so each table shows ours beside
theirs in the paper's own layout: a row per dataset x model, a column per strategy.

Choices where the papers are vague:

- gain = accuracy at the last evaluated checkpoint minus the base model's, in points, at
  ``analyze.metric`` (003 does not say whether its accuracy is greedy or sampled).
- learnable % counts (step, prompt) groups: we train on several prompts per step, where 003's
  definition (section 4.1) has one group per update.
- 003's Figure 3 states R^2 = 0.66 without listing its points. Refitting the points its
  Tables 1-3 report gives 0.641 over all 28, 0.670 over the 24 of Tables 1+2, and 0.659 over
  the 16 GSM8K points (Qwen3-4B, Qwen3-14B, Phi-4 and Llama): the figure was most likely
  drawn from those. :func:`paper_regressions` recomputes all of these from the data file.

Uncertainty (issue 11; the papers report single runs):

- every arm's gain has a 95% percentile interval from a two-way bootstrap over the per-prompt
  scores of ``eval/<run>/samples.parquet`` (final checkpoint vs the base model): each resample
  draws the test prompts and the arm's seeds with replacement, independently (prompts and seeds
  are crossed: every seed is scored on the same prompts). With one seed the interval covers
  test-prompt noise only, and the report says so;
- every pair of arms gets a paired contrast: the same resampled prompts and seeds for both arms
  (over the seeds both ran), its interval, a two-sided bootstrap p-value (the share of
  resamples on either side of 0, doubled, with the +1 correction) and the Holm-adjusted
  p-value over all the pairs;
- ``analyze.bootstrap`` resamples, drawn from ``analyze.seed``; both are in ``summary.json``;
- Figure 3's R^2 gets a percentile interval from resampling the (arm, seed) runs;
- the verdict names the best arm only when its lead over the runner-up has an interval that
  excludes 0; otherwise it says the arms are not distinguishable at this size;
- predicted learnable % = 100 * mean of 1 - p^G - (1-p)^G over an arm's selected prompts (the
  probe's p_hat; per seed for random), against the observed learnable %, over the first
  ``FIRST_STEPS_FRAC`` of the steps and over the whole run. For the control arm (random
  reward) the observed learnable % is that of the verifier's scores (``groups.scores``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy import stats

from . import layout, select
from .artifacts import ArtifactError, read_json, read_parquet, save_figure, write_csv, write_json, write_text
from .params import Config

#: 003's column order; other strategies follow alphabetically, the base model comes first
STRATEGY_ORDER = ("easy", "middle", "hard", "random")
DATA_DIR = Path(__file__).parent / "reported"  # the papers' numbers, one CSV per paper
METRIC_NAMES = {"greedy_acc": "greedy accuracy", "pass@1": "pass@1"}
#: columns of every "ours beside theirs" table
LONG_COLUMNS = ["source", "dataset", "model", "metric", "strategy", "value", "sd", "n"]
REPORTED_COLUMNS = ["paper", "table", "dataset", "model", "strategy", "metric", "value", "unit", "source", "note"]
DIGITS = 4  # rounding of everything written, so notebook outputs compare exactly
FIRST_STEPS_FRAC = 0.1  # "first steps" of the learnability figure: the first 10% of a run's steps (at least 1)


def strategy_order(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    head = [s for s in (layout.BASE_RUN, *STRATEGY_ORDER) if s in names]
    return head + sorted(set(names) - set(head))


def _sorted(df: pd.DataFrame, *then: str) -> pd.DataFrame:
    rank = {s: i for i, s in enumerate(strategy_order(df["strategy"]))}
    key = lambda col: col.map(rank) if col.name == "strategy" else col  # noqa: E731
    return df.sort_values(["strategy", *then], key=key, kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------------------------
# The papers' reported numbers
# ------------------------------------------------------------------------------------


def reported(papers: Iterable[str] | None = None) -> pd.DataFrame:
    """The numbers the papers report, one row each (all papers, or only ``papers``).

    Kept as data, not code, so a reader can check every value against the paper's text; the
    ``source`` and ``note`` columns say where each one comes from and how exact it is.
    """
    files = {p.stem.removeprefix("paper_"): p for p in sorted(DATA_DIR.glob("paper_*.csv"))}
    wanted = list(files) if papers is None else list(papers)
    unknown = sorted(set(wanted) - set(files))
    if unknown:
        raise ValueError(f"no reported numbers for paper(s) {unknown}; known: {sorted(files)}")
    frames = [pd.read_csv(files[p], dtype=str, keep_default_na=False) for p in wanted]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=REPORTED_COLUMNS)
    return df[REPORTED_COLUMNS].astype({"value": float})


def paper_points(rep: pd.DataFrame) -> pd.DataFrame:
    """Figure 3's points from reported numbers: (learnable %, gain) wherever a paper gives both."""
    keys = ["dataset", "model", "strategy"]
    gain = rep[rep["metric"] == "gain_pp"][keys + ["table", "value"]].rename(columns={"value": "gain_pp"})
    learn = rep[rep["metric"] == "learnable_pct"][keys + ["value"]].rename(columns={"value": "learnable_pct"})
    return gain.merge(learn, on=keys, validate="one_to_one").reset_index(drop=True)


def paper_regressions(points: pd.DataFrame) -> pd.DataFrame:
    """The paper's regression refit on several subsets of its points, since it does not say
    which points its R^2 used: all of them, Tables 1+2 only, and each dataset alone."""
    if points.empty:
        return pd.DataFrame(columns=["subset", "slope", "intercept", "r2", "n"])
    subsets = {"all reported points": points, "Tables 1+2": points[points["table"] == "Table 1"]}
    subsets |= {f"{d} only": g for d, g in points.groupby("dataset")}
    rows = [{"subset": name, **fit_line(g["learnable_pct"], g["gain_pp"])} for name, g in subsets.items()]
    return pd.DataFrame(rows).drop(columns="note")


def paper_regression(points: pd.DataFrame, rep: pd.DataFrame) -> dict:
    """Figure 3's fit over every reported point, its note comparing with the R^2 the paper states."""
    fit, stated = fit_line(points["learnable_pct"], points["gain_pp"]), stated_r2(rep)
    if points.empty:
        fit["note"] = "no paper chosen, or it reports no (learnable %, gain) pairs"
    elif fit["r2"] is not None and stated is not None:
        fit["note"] = _paper_note(paper_regressions(points), stated)
    return fit


def stated_r2(rep: pd.DataFrame) -> float | None:
    """The R^2 a paper states for its Figure 3 (003: 0.66), if it states one."""
    stated = rep.loc[rep["metric"] == "r2", "value"]
    return float(stated.iloc[0]) if len(stated) else None


def _paper_note(regs: pd.DataFrame, stated: float) -> str:
    everything = regs.iloc[0]
    closest = regs.loc[(regs["r2"] - stated).abs().idxmin()]
    return (
        f"the paper states R^2 = {stated:g} without listing its points; its {everything.n} reported "
        f"(learnable %, gain) points give {everything.r2:.3f}; the closest subset is "
        f"'{closest.subset}' ({closest.n} points, R^2 = {closest.r2:.3f})"
    )


# ------------------------------------------------------------------------------------
# Reading a study's files
# ------------------------------------------------------------------------------------


def study_path(study: Config | str | Path) -> Path:
    return layout.study_dir(study) if isinstance(study, Config) else Path(study)


def find_runs(study_dir: Path, run_ids: Iterable[str] | None = None) -> tuple[list[dict], list[str]]:
    """Manifests of the complete runs (with ``run_id`` added), and the ids of incomplete ones.
    ``run_ids``: only these (the study's planned runs), not every folder under runs/."""
    paths = sorted((study_dir / "runs").glob("*/manifest.json"))
    if run_ids is not None:
        wanted = set(run_ids)
        paths = [p for p in paths if p.parent.name in wanted]
    if not paths:
        raise FileNotFoundError(f"no runs/<run_id>/manifest.json under {study_dir}: run the train stage first")
    manifests = [{**read_json(p), "run_id": p.parent.name} for p in paths]
    done = [_complete(m) for m in manifests]
    untrained = sorted(set(run_ids or []) - {m["run_id"] for m in manifests})  # planned, never trained
    return ([m for m, d in zip(manifests, done) if d],
            [m["run_id"] for m, d in zip(manifests, done) if not d] + untrained)


def _complete(manifest: dict) -> bool:
    """The train stage writes ``status: complete``; a bare ``complete: true`` is accepted too."""
    return manifest.get("status") == "complete" or manifest.get("complete") is True


def _name(v: str | dict) -> str:
    """Manifests record the model and the task as ``{"name": ..., options...}``: keep the name."""
    return v["name"] if isinstance(v, dict) else v


def read_evals(study_dir: Path, run_ids: Iterable[str], name: str = "summary.parquet") -> pd.DataFrame:
    """One eval table (``summary.parquet`` or ``tiers.parquet``) of the base model and of each run, stacked."""
    frames = []
    for rid in [layout.BASE_RUN, *run_ids]:
        path = study_dir / "eval" / rid / name
        frames.append(read_parquet(path, "04_evaluate").assign(run_id=rid))
    return pd.concat(frames, ignore_index=True)


def learnable_pct(groups: pd.DataFrame) -> float:
    """Percent of (step, prompt) groups whose rewards differ (003 section 4.1).

    Recomputed from the reward vectors, not the logged flag: a group whose rewards are all
    equal has zero advantage everywhere, so GRPO learns nothing from it.
    """
    if groups.empty:
        raise ValueError("no (step, prompt) groups: learnable % is undefined")
    return 100.0 * float(groups[_score_column(groups)].map(lambda r: np.ptp(np.asarray(r, float)) > 0).mean())


def _score_column(groups: pd.DataFrame) -> str:
    """The verifier's scores (``scores``, which the control arm keeps beside its random
    rewards), or ``rewards`` in runs recorded before that column existed."""
    return "scores" if "scores" in groups else "rewards"


def first_steps(groups: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The groups of the first ``FIRST_STEPS_FRAC`` of a run's ``steps`` (at least step 1)."""
    return groups[groups["step"] <= max(1, int(np.ceil(FIRST_STEPS_FRAC * steps)))]


def base_accuracy(evals: pd.DataFrame, metric: str) -> float:
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    if base.empty:
        raise ValueError(f"eval/{layout.BASE_RUN}/summary.parquet has no step-0 row for the base model")
    if metric not in base.columns:
        raise KeyError(f"eval summaries have no {metric!r} column (columns: {sorted(base.columns)})")
    return float(base[metric].iloc[0])


def final_checkpoints(evals: pd.DataFrame) -> pd.DataFrame:
    """Each trained run's last evaluated checkpoint (one row per run)."""
    trained = evals[(evals["run_id"] != layout.BASE_RUN) & (evals["step"] > 0)]
    return trained.loc[trained.groupby("run_id")["step"].idxmax()].reset_index(drop=True)


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
        raise FileNotFoundError(f"no complete run under {root / 'runs'}")
    evals = read_evals(root, [m["run_id"] for m in runs])
    base = base_accuracy(evals, metric)
    final = final_checkpoints(evals).set_index("run_id")
    rows = []
    for m in runs:
        rid = m["run_id"]
        if rid not in final.index:
            raise ValueError(f"{root / 'eval' / rid / 'summary.parquet'} has no trained checkpoint (step > 0)")
        evaluated = read_json(root / "eval" / rid / "manifest.json").get("trained")
        if evaluated != layout.trained_identity(m):
            raise ArtifactError(f"{root / 'eval' / rid}: scores an earlier training of run {rid!r}, not the one "
                                "in runs/ now; rerun the evaluate stage (04_evaluate)")
        groups = read_parquet(root / "runs" / rid / "groups.parquet", "03_train")
        acc = float(final.loc[rid, metric])
        rows.append({
            "model": _name(m["model"]), "dataset": _name(m["task"]), "strategy": m["strategy"], "seed": int(m["seed"]),
            "base_acc": base, "final_acc": acc, "gain_pp": 100.0 * (acc - base),
            "learnable_pct": learnable_pct(groups),
            "learnable_first_pct": learnable_pct(first_steps(groups, int(m["steps_done"]))),
            "steps": int(m["steps_done"]),
        })
    return _sorted(pd.DataFrame(rows), "seed")


def selection_p_hat(study_dir: Path) -> pd.DataFrame:
    """p_hat of every selected prompt, per strategy (the data behind the p_hat figure)."""
    files = sorted((study_dir / "select").glob("*.parquet"))
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
    (strategy, seed) for a per-seed policy (``select.PER_SEED``)."""
    frames = []
    for strategy in dict.fromkeys(s for s, _ in layout.planned_runs(cfg)):
        for seed in cfg.train.seeds if select.per_seed(strategy) else [None]:
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


# ------------------------------------------------------------------------------------
# Our numbers in the papers' long format
# ------------------------------------------------------------------------------------


def _mean_sd(df: pd.DataFrame, by: list[str], column: str) -> pd.DataFrame:
    """Mean over seeds, with the spread (sd) only where there are 2+ seeds."""
    return df.groupby(by, sort=False)[column].agg(value="mean", sd="std", n="count").reset_index()


def summarize(runs: pd.DataFrame, column: str, metric: str | None = None) -> pd.DataFrame:
    """A per-run column as the long format: mean +- sd over seeds per dataset x model x strategy."""
    return _mean_sd(runs, ["dataset", "model", "strategy"], column).assign(metric=metric or column)


def accuracy_long(runs: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy in percent per strategy, the base model's as strategy ``base``, and blog
    001's comparison: base-wrong's relative improvement over base-right, when both ran (the
    size-matched pair when it ran, as 001 compares at equal size)."""
    acc = summarize(runs.assign(acc=100.0 * runs["final_acc"]), "acc", "accuracy_pct")
    base = runs.iloc[[0]].assign(strategy=layout.BASE_RUN, acc=100.0 * runs["base_acc"].iloc[0])
    out = pd.concat([summarize(base, "acc", "accuracy_pct"), acc], ignore_index=True)
    means = acc.set_index("strategy")["value"]
    for wrong, right in (("base_wrong_matched", "base_right_matched"), ("base_wrong", "base_right")):
        if {wrong, right} <= set(means.index):
            rel = 100.0 * (means[wrong] - means[right]) / means[right]
            row = {**out.iloc[0].to_dict(), "strategy": wrong, "metric": "rel_gain_vs_base_right_pct",
                   "value": rel, "sd": np.nan, "n": np.nan}
            return pd.concat([out, pd.DataFrame([row])], ignore_index=True)
    return out


def pass_k_long(evals: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Table 4's measure, pass@k in percent at the largest k evaluated, base and final checkpoints."""
    ks = [c for c in evals.columns if c.startswith("pass@") and c != "pass@1"]
    if not ks:
        return pd.DataFrame(columns=["dataset", "model", "strategy", "value", "sd", "n", "metric"])
    col = max(ks, key=lambda c: int(c.removeprefix("pass@")))
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    points = pd.concat([base, final_checkpoints(evals)]).assign(pct=lambda d: 100.0 * d[col])
    points = points.assign(dataset=runs["dataset"].iloc[0], model=runs["model"].iloc[0])
    return summarize(points, "pct", col)


def accuracy_curves(evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Figure 2's data: mean accuracy over seeds per strategy and checkpoint, every line
    starting from the base model at step 0."""
    trained = evals[(evals["run_id"] != layout.BASE_RUN) & (evals["step"] > 0)]
    starts = trained.drop_duplicates("run_id").assign(step=0, **{metric: base_accuracy(evals, metric)})
    curves = _mean_sd(pd.concat([starts, trained]), ["strategy", "step"], metric)
    return _sorted(curves, "step")


def steps_to_match(curves: pd.DataFrame, reference: str = "all") -> pd.DataFrame:
    """Paper 000's efficiency measure: the first checkpoint at which a strategy reaches the
    reference's final accuracy, in percent of the reference's steps (NaN: never reached)."""
    ref = curves[curves["strategy"] == reference]
    if ref.empty:
        return pd.DataFrame(columns=["strategy", "value"])
    target = ref.loc[ref["step"].idxmax()]
    others = curves[(curves["strategy"] != reference) & (curves["step"] > 0)]
    rows = [
        {"strategy": s, "value": 100.0 * c.loc[c["value"] >= target["value"], "step"].min() / target["step"]}
        for s, c in others.groupby("strategy", sort=False)
    ]
    return pd.DataFrame(rows, columns=["strategy", "value"])


def tier_accuracy(tiers: pd.DataFrame, evals: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Accuracy per difficulty tier of the base model and of each strategy's final checkpoint
    (mean over seeds): where along the difficulty axis a strategy's gain comes from."""
    base = evals[(evals["run_id"] == layout.BASE_RUN) & (evals["step"] == 0)]
    final = pd.concat([base, final_checkpoints(evals)])[["run_id", "strategy", "step"]]
    per_tier = tiers.drop(columns="strategy", errors="ignore").merge(final, on=["run_id", "step"])
    return _sorted(_mean_sd(per_tier, ["strategy", "tier"], metric), "tier")


def beside(ours: pd.DataFrame, rep: pd.DataFrame, metrics: Iterable[str]) -> pd.DataFrame:
    """Our rows (source "ours") above the papers' rows for the same metrics."""
    metrics = list(metrics)
    columns = LONG_COLUMNS + [c for c in ("ci_low", "ci_high") if c in ours]  # intervals: ours only
    theirs = rep[rep["metric"].isin(metrics)].assign(source=lambda d: d["paper"] + " " + d["table"], sd=np.nan, n=np.nan)
    theirs = theirs.assign(**{c: np.nan for c in columns[len(LONG_COLUMNS):]})
    frames = [df[columns] for df in (ours.assign(source="ours"), theirs) if not df.empty]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True).round(DIGITS)


# ------------------------------------------------------------------------------------
# Regression and verdict
# ------------------------------------------------------------------------------------


def _round(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else round(float(v), DIGITS)


def fit_line(x: Iterable[float], y: Iterable[float]) -> dict:
    """Least-squares ``y = slope * x + intercept`` and its R^2 (Figure 3: gain on learnable %).

    R^2 is None, with the reason in ``note``, when it means nothing: fewer than 3 points (a
    line fits 2 exactly) or no spread in x or y. The slope needs only 2 points with distinct x.
    """
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    out = {"slope": None, "intercept": None, "r2": None, "n": len(x), "note": None}
    x_spread = len(x) > 1 and np.ptp(x) > 0
    if x_spread:
        fit = stats.linregress(x, y)
        out.update(slope=_round(fit.slope), intercept=_round(fit.intercept))
    if len(x) < 3:
        out["note"] = f"{len(x)} point(s): R^2 needs at least 3"
    elif not x_spread:
        out["note"] = "every point has the same learnable %: no line to fit"
    elif np.ptp(y) == 0:
        out["note"] = "every point has the same gain: R^2 is undefined"
    else:
        out["r2"] = _round(fit.rvalue**2)
    return out


def mean_gains(runs: pd.DataFrame) -> pd.DataFrame:
    out = runs.groupby("strategy", sort=False).agg(
        gain_pp=("gain_pp", "mean"), final_acc=("final_acc", "mean"), seeds=("seed", "count"))
    return out.reset_index()


# ------------------------------------------------------------------------------------
# Intervals: a two-way bootstrap over test prompts and seeds (issue 11)
# ------------------------------------------------------------------------------------


def prompt_scores(study_dir: Path, rid: str, metric: str) -> pd.DataFrame:
    """Per-prompt score of one evaluation at every evaluated step (columns: step x prompt_id):
    greedy correctness for ``greedy_acc``, the mean over sampled completions for ``pass@1``."""
    mode = {"greedy_acc": "greedy", "pass@1": "sampled"}.get(metric)
    if mode is None:
        raise ValueError(f"analyze.metric {metric!r}: intervals need per-sample scores (greedy_acc or pass@1)")
    samples = read_parquet(study_dir / "eval" / rid / "samples.parquet", "04_evaluate",
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
    def of(cls, base: np.ndarray, final: dict[tuple[str, int], np.ndarray], step: int = 1) -> "Scores":
        """Scores from arrays (base: per prompt; final: per (strategy, seed), per prompt at ``step``)."""
        self = cls.__new__(cls)
        self.prompts = pd.Index([f"t{i}" for i in range(len(base))], name="prompt_id")
        self.base = np.asarray(base, float)
        self.runs = {k: pd.DataFrame({step: np.asarray(v, float)}, index=self.prompts) for k, v in final.items()}
        return self

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


class Bootstrap:
    """Two-way bootstrap weights: each resample draws the ``n_prompts`` test prompts and the S
    seeds with replacement, independently. The prompt draws are shared by every arm and
    contrast; the seed draws by every matrix with the same number of seeds (a contrast's two
    arms are one matrix, their difference, so both see the same draws)."""

    def __init__(self, n_prompts: int, n_boot: int, seed: int):
        self.n_prompts, self.n_boot, self.seed = n_prompts, n_boot, seed
        rng = np.random.default_rng([seed, 0])
        self.prompt_w = rng.multinomial(n_prompts, np.full(n_prompts, 1 / n_prompts), size=n_boot) / n_prompts

    def seed_w(self, n_seeds: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 1, n_seeds])
        return rng.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=self.n_boot) / n_seeds

    def means(self, x: np.ndarray) -> np.ndarray:
        """The resampled means of a prompts x seeds matrix (one value per resample)."""
        x = np.asarray(x, float).reshape(self.n_prompts, -1)
        return ((self.prompt_w @ x) * self.seed_w(x.shape[1])).sum(axis=1)


def interval(boot: np.ndarray, level: float = 0.95) -> list[float]:
    """Percentile interval of the resampled values."""
    tail = 100 * (1 - level) / 2
    return [float(v) for v in np.percentile(boot, [tail, 100 - tail])]


def boot_p(boot: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the mean is 0": twice the smaller share of resamples on
    either side of 0 (ties count on both sides), with the +1 of a resampling test, capped at 1."""
    n = len(boot)
    tail = min(int((boot <= 0).sum()), int((boot >= 0).sum()))
    return float(min(1.0, 2 * (tail + 1) / (n + 1)))


def holm(p: Iterable[float]) -> np.ndarray:
    """Holm's step-down adjustment: the i-th smallest of m p-values times (m - i + 1), made
    monotone, capped at 1; controls the family-wise error rate over the m contrasts."""
    p = np.asarray(list(p), float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


def arm_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Per arm: mean gain over seeds (points, final checkpoint vs base) and its 95% interval."""
    rows = []
    for strategy in strategy_order(s for s, _ in scores.runs):
        gain = 100.0 * (scores.at(strategy) - scores.base[:, None])
        lo, hi = interval(boot.means(gain))
        rows.append({"strategy": strategy, "gain_pp": float(gain.mean()), "ci_low": lo, "ci_high": hi,
                     "n_seeds": gain.shape[1]})
    return pd.DataFrame(rows)


def contrasts(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Every pair of arms, paired on the same test prompts and the seeds both ran: difference of
    gains in points (a - b), its interval, bootstrap p-value, and Holm's over all pairs."""
    arms = strategy_order(s for s, _ in scores.runs)
    rows = []
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            common = sorted(set(scores.seeds(a)) & set(scores.seeds(b)))
            if not common:
                continue
            diff = 100.0 * (scores.at(a, seeds=common) - scores.at(b, seeds=common))
            draws = boot.means(diff)
            lo, hi = interval(draws)
            rows.append({"a": a, "b": b, "diff_pp": float(diff.mean()), "ci_low": lo, "ci_high": hi,
                         "p": boot_p(draws), "n_seeds": len(common)})
    out = pd.DataFrame(rows, columns=["a", "b", "diff_pp", "ci_low", "ci_high", "p", "n_seeds"])
    out["p_holm"] = holm(out["p"]) if len(out) else []
    out["excludes_zero"] = (out["ci_low"] > 0) | (out["ci_high"] < 0)
    out["significant_holm"] = out["p_holm"] < 0.05
    return out


def curve_intervals(scores: Scores, boot: Bootstrap) -> pd.DataFrame:
    """Figure 2's bands: per arm and checkpoint, the 95% interval of the mean accuracy over
    seeds (step 0: the base model's, over prompts only)."""
    base = interval(boot.means(scores.base))
    rows = []
    for strategy in strategy_order(s for s, _ in scores.runs):
        rows.append({"strategy": strategy, "step": 0, "ci_low": base[0], "ci_high": base[1]})
        for step in scores.steps(strategy):
            lo, hi = interval(boot.means(scores.at(strategy, step)))
            rows.append({"strategy": strategy, "step": step, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def r2_interval(x: Iterable[float], y: Iterable[float], n_boot: int, seed: int) -> list[float] | None:
    """Percentile interval of R^2 over resamples of the (arm, seed) runs; None with fewer than
    3 runs or no spread (resamples without spread in x or y are dropped)."""
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    idx = np.random.default_rng([seed, 2]).integers(0, len(x), size=(n_boot, len(x)))
    xs, ys = x[idx], y[idx]
    ok = (np.ptp(xs, axis=1) > 0) & (np.ptp(ys, axis=1) > 0)
    xc = xs[ok] - xs[ok].mean(axis=1, keepdims=True)
    yc = ys[ok] - ys[ok].mean(axis=1, keepdims=True)
    r2 = (xc * yc).sum(1) ** 2 / ((xc**2).sum(1) * (yc**2).sum(1))
    return [_round(v) for v in interval(r2)]


def verdict_with_intervals(arms: pd.DataFrame, pairs: pd.DataFrame, metric: str, base_acc: float,
                           n_prompts: int) -> tuple[str, str | None]:
    """One honest line, and the best arm: named only when its lead over the runner-up has an
    interval that excludes 0; otherwise the arms are not distinguishable at this size."""
    name = METRIC_NAMES.get(metric, metric)
    ranked = arms.sort_values("gain_pp", ascending=False, kind="stable").reset_index(drop=True)
    top = ranked.iloc[0]
    ci = lambda r: f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]"  # noqa: E731
    seeds = int(arms["n_seeds"].max())
    scope = (f"95% intervals over {n_prompts} test prompts and {seeds} seeds" if seeds > 1 else
             f"95% intervals over {n_prompts} test prompts only (one seed: seed-to-seed spread is not in them)")
    if top["ci_high"] < 0:
        head = f"every arm lost {name} against the base model ({base_acc:.2f}); the best, {top['strategy']}, "
    elif top["ci_low"] <= 0:
        tied = int(np.isclose(ranked["gain_pp"], top["gain_pp"]).sum())
        best_mean = f"{tied} arms tie for the best mean at" if tied > 1 else f"the best mean, {top['strategy']},"
        head = f"no arm's gain over the base model's {name} ({base_acc:.2f}) excludes 0; {best_mean} "
    else:
        head = f"{top['strategy']} beat the base model's {name} ({base_acc:.2f}): "
    line = head + f"{top['gain_pp']:+.1f} points {ci(top)}"
    if len(ranked) == 1:
        return f"{line} ({scope})", str(top["strategy"])
    second = ranked.iloc[1]
    pair = pairs[((pairs["a"] == top["strategy"]) & (pairs["b"] == second["strategy"]))
                 | ((pairs["b"] == top["strategy"]) & (pairs["a"] == second["strategy"]))].iloc[0]
    sign = 1 if pair["a"] == top["strategy"] else -1
    lead = {"diff": sign * pair["diff_pp"], "lo": min(sign * pair["ci_low"], sign * pair["ci_high"]),
            "hi": max(sign * pair["ci_low"], sign * pair["ci_high"])}
    lead_text = f"{lead['diff']:+.1f} [{lead['lo']:+.1f}, {lead['hi']:+.1f}] points over {second['strategy']}"
    n_sig = int(pairs["significant_holm"].sum())
    sig = f"; {n_sig} of {len(pairs)} contrasts differ from 0 after Holm's correction"
    if lead["lo"] > 0:
        best = str(top["strategy"])
        line += f"; {best} is the best arm: its lead of {lead_text} excludes 0"
    else:
        best = None
        line += f"; the arms are not distinguishable at this size: the lead of {lead_text} includes 0"
    return f"{line}{sig} ({scope})", best


# ------------------------------------------------------------------------------------
# Figures (matplotlib Figure objects, no pyplot state: safe in tests and notebooks)
# ------------------------------------------------------------------------------------


def _colors(strategies: Iterable[str]) -> dict[str, str]:
    """One color per strategy, the same in every figure: 003's four first, the base grey."""
    others = [s for s in strategy_order(strategies) if s not in (layout.BASE_RUN, *STRATEGY_ORDER)]
    return {layout.BASE_RUN: "grey"} | {s: f"C{i}" for i, s in enumerate([*STRATEGY_ORDER, *others])}


def plot_accuracy_curves(curves: pd.DataFrame, metric: str) -> Figure:
    """Figure 2: accuracy by checkpoint, one line per strategy (mean over seeds); band = the 95%
    bootstrap interval over test prompts and seeds when ``curves`` has ``ci_low``/``ci_high``,
    else the sd over seeds."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    colors = _colors(curves["strategy"])
    has_ci = {"ci_low", "ci_high"} <= set(curves.columns)
    for s, c in curves.groupby("strategy", sort=False):
        ax.plot(c["step"], c["value"], marker="o", color=colors[s], label=s)
        lo, hi = ((c["ci_low"], c["ci_high"]) if has_ci else
                  (c["value"] - c["sd"].fillna(0), c["value"] + c["sd"].fillna(0)))
        ax.fill_between(c["step"], lo, hi, color=colors[s], alpha=0.15, linewidth=0)
    ax.axhline(curves.loc[curves["step"] == 0, "value"].iloc[0], color="grey", ls=":", label="base")
    band = "95% interval (prompts x seeds)" if has_ci else "sd over seeds"
    ax.set(xlabel="training step", ylabel=METRIC_NAMES.get(metric, metric), title=f"Accuracy by checkpoint; band: {band}")
    ax.legend()
    return fig


def plot_learnable_vs_gain(runs: pd.DataFrame, points: pd.DataFrame, paper: str | None = None,
                           stated_r2: float | None = None, r2_ci95: list[float] | None = None) -> Figure:
    """Figure 3: learnable % vs gain with the least-squares line; ours, and the paper's reported
    points refit (its title also gives the R^2 the paper states, which the refit need not match)."""
    stated = "" if stated_r2 is None else f" (paper states {stated_r2:g})"
    ours = "" if r2_ci95 is None else f" [{r2_ci95[0]:.2f}, {r2_ci95[1]:.2f}]"
    panels = [("ours", runs, ours)] + ([(f"paper {paper}, refit", points, stated)] if len(points) else [])
    fig = Figure(figsize=(5.5 * len(panels), 4.5))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    colors = _colors(pd.concat([runs["strategy"], points["strategy"]]))
    for ax, (title, df, note) in zip(axes, panels):
        markers = dict(zip(df["model"].unique(), "osD^vP*X"))
        for (s, m), d in df.groupby(["strategy", "model"], sort=False):
            ax.scatter(d["learnable_pct"], d["gain_pp"], color=colors[s], marker=markers[m])
        handles = [Line2D([], [], ls="", marker="o", color=colors[s], label=s) for s in strategy_order(df["strategy"])]
        handles += [Line2D([], [], ls="", marker=mk, color="k", label=m) for m, mk in markers.items()]
        fit = fit_line(df["learnable_pct"], df["gain_pp"])
        if fit["slope"] is not None:
            xs = np.linspace(df["learnable_pct"].min(), df["learnable_pct"].max(), 2)
            ax.plot(xs, fit["intercept"] + fit["slope"] * xs, "k--", lw=1)
        r2 = "undefined" if fit["r2"] is None else f"{fit['r2']:.2f}"
        ax.set(xlabel="learnable %", ylabel="gain (points)", title=f"{title}: n = {fit['n']}, R² = {r2}{note}")
        ax.legend(handles=handles, fontsize="x-small")
    return fig


def plot_learnability(arms: pd.DataFrame, group_size: int) -> Figure:
    """Predicted learnable % at step 0 (from the probe's p_hat) against the observed one, over
    the first steps and the whole run, per arm (mean over seeds); the diagonal is agreement."""
    fig = Figure(figsize=(5.5, 4.5))
    ax = fig.subplots()
    colors = _colors(arms["strategy"])
    for col, marker in (("learnable_first_pct", "o"), ("learnable_pct", "s")):
        ax.scatter(arms["predicted_learnable_pct"], arms[col], c=[colors[s] for s in arms["strategy"]], marker=marker)
    values = arms[["predicted_learnable_pct", "learnable_first_pct", "learnable_pct"]].to_numpy(float)
    top = max(5.0, float(np.nanmax(values)) * 1.1) if np.isfinite(values).any() else 100.0
    ax.plot([0, top], [0, top], color="grey", ls=":", lw=1)
    handles = [Line2D([], [], ls="", marker="o", color=colors[s], label=s) for s in arms["strategy"]]
    handles += [Line2D([], [], ls="", marker="o", mfc="none", color="k", label=f"first {FIRST_STEPS_FRAC:.0%} of steps"),
                Line2D([], [], ls="", marker="s", mfc="none", color="k", label="whole run")]
    ax.set(xlim=(0, top), ylim=(0, top), xlabel=f"predicted learnable % (mean of 1 - p^{group_size} - (1-p)^{group_size})",
           ylabel="observed learnable %", title="Learnability: predicted from the probe vs observed")
    ax.legend(handles=handles, fontsize="x-small")
    return fig


def plot_p_hat(selected: pd.DataFrame) -> Figure:
    """Histogram of the base model's p_hat over each selection: what each strategy trains on."""
    strategies = list(dict.fromkeys(selected["strategy"]))
    fig = Figure(figsize=(6, 1.6 * len(strategies) + 0.6))
    axes = np.atleast_1d(fig.subplots(len(strategies), 1, sharex=True))
    colors = _colors(strategies)
    for ax, s in zip(axes, strategies):
        ax.hist(selected.loc[selected["strategy"] == s, "p_hat"], bins=np.linspace(0, 1, 21), color=colors[s])
        ax.set_ylabel(s)
    axes[-1].set_xlabel("p_hat (base model's success rate)")
    axes[0].set_title("Difficulty of each selection")
    return fig


def plot_tiers(tiers: pd.DataFrame, metric: str) -> Figure:
    """Accuracy per tier: grouped bars, base and each strategy's final checkpoint."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    wide = tiers.pivot(index="tier", columns="strategy", values="value")
    strategies = strategy_order(wide.columns)
    width = 0.8 / max(len(strategies), 1)
    colors = _colors(strategies)
    x = np.arange(len(wide.index))
    for i, s in enumerate(strategies):
        ax.bar(x + i * width, wide[s], width, color=colors[s], label=s)
    ax.set_xticks(x + width * (len(strategies) - 1) / 2, [str(t) for t in wide.index])
    ax.set(xlabel="tier", ylabel=METRIC_NAMES.get(metric, metric), title="Accuracy per difficulty tier")
    ax.legend(fontsize="small")
    return fig


# ------------------------------------------------------------------------------------
# Markdown
# ------------------------------------------------------------------------------------


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if np.isnan(v) else f"{v:.4g}"
    return str(v)


def markdown(df: pd.DataFrame) -> str:
    """A plain pipe table (no tabulate dependency)."""
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def wide_markdown(long: pd.DataFrame) -> str:
    """A long table in the paper's layout: a row per source x dataset x model x metric, a column
    per strategy, cells "mean [95% interval]" where the table has intervals, else "mean ± sd"
    where seeds vary."""
    if long.empty:
        return "(no rows)\n"
    lo, hi = (long[c].astype(float) if c in long else pd.Series(np.nan, index=long.index) for c in ("ci_low", "ci_high"))
    cells = [f"{v:.2f}" + (f" [{a:.2f}, {b:.2f}]" if np.isfinite(a) else "" if np.isnan(sd) else f" ± {sd:.2f}")
             for v, sd, a, b in zip(long["value"], long["sd"].astype(float), lo, hi)]
    wide = long.assign(cell=cells).pivot_table(
        index=["source", "dataset", "model", "metric"], columns="strategy", values="cell", aggfunc="first", sort=False)
    return markdown(wide[strategy_order(long["strategy"])].reset_index().fillna(""))


# ------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------


def report(cfg: Config) -> dict:
    """Read the study's files, write every table, figure and ``summary.json`` to
    ``layout.report_dir(cfg)``, and return the summary.

    ``summary.json``: ``runs`` (one row per (arm, seed)), ``arms`` (per arm: mean gain over
    seeds, its ``ci95``, learnable % observed and predicted, ``n_seeds``), ``contrasts`` (per
    pair: ``diff_pp``, ``ci95``, ``p``, ``p_holm``), ``bootstrap`` (resamples, seed, what was
    resampled), ``regression`` (with ``r2_ci95``), ``paper_regression``, ``best`` (None unless its
    lead excludes 0), ``verdict``, ``metric``, ``skipped``.

    Beside-rows come from ``analyze.paper`` (none when null); ``paper_tables.md`` lists every
    number all four papers report, as the reference sheet.
    """
    root, out, metric, paper = layout.study_dir(cfg), layout.report_dir(cfg), cfg.analyze.metric, cfg.analyze.paper
    ids = [layout.run_id(s, seed) for s, seed in layout.planned_runs(cfg)]
    runs = collect_runs(root, metric, ids)
    complete, skipped = find_runs(root, ids)
    ids = [m["run_id"] for m in complete]
    evals, tiers = read_evals(root, ids), read_evals(root, ids, "tiers.parquet")
    rep = reported([paper] if paper else [])
    points = paper_points(rep)
    label = runs[["dataset", "model"]].iloc[0].to_dict()  # one model and dataset per study

    selections = study_selections(cfg)
    runs["predicted_learnable_pct"] = predicted_learnable(selections, runs, cfg.train.group_size)
    scores = Scores(root, runs, metric)
    boot = Bootstrap(len(scores.prompts), cfg.analyze.bootstrap, cfg.analyze.seed)
    learn = runs.groupby("strategy")[["learnable_pct", "learnable_first_pct", "predicted_learnable_pct"]].mean()
    arms = arm_intervals(scores, boot).merge(learn, left_on="strategy", right_index=True)
    pairs = contrasts(scores, boot)
    curves = accuracy_curves(evals, metric).merge(curve_intervals(scores, boot), on=["strategy", "step"], how="left")
    n_prompts = len(scores.prompts)
    over = "test prompts x seeds" if arms["n_seeds"].max() > 1 else "test prompts only (one seed per arm)"

    def write_long(name: str, title: str, long: pd.DataFrame) -> None:
        write_csv(out / f"{name}.csv", long)
        write_text(out / f"{name}.md", f"# {title}\n\n{wide_markdown(long)}")

    write_csv(out / "runs.csv", runs.round(DIGITS))
    write_text(out / "runs.md", f"# Runs ({metric}; gain in points)\n\n{markdown(runs.round(DIGITS))}")
    gains = summarize(runs, "gain_pp").merge(arms[["strategy", "ci_low", "ci_high"]], on="strategy", how="left")
    write_long("table1_gain", f"Table 1: accuracy change from the base model (points, {metric}, final checkpoint; "
               f"ours: mean over seeds [95% bootstrap interval over {over}])",
               beside(gains, rep, ["gain_pp"]))
    write_csv(out / "arms.csv", arms.round(DIGITS))
    write_text(out / "arms.md", f"# Arms: gain (points, {metric}) with its 95% interval over {over}; learnable % "
               f"observed (first {FIRST_STEPS_FRAC:.0%} of steps, whole run) and predicted from the probe\n\n"
               + markdown(arms.round(DIGITS)))
    write_csv(out / "contrasts.csv", pairs.round(DIGITS))
    write_text(out / "contrasts.md", f"# Contrasts: gain of a minus gain of b (points), paired on the same test prompts "
               f"and seeds; 95% interval over {over}; p two-sided from {cfg.analyze.bootstrap} bootstrap resamples, "
               "p_holm adjusted over all pairs (Holm)\n\n" + (markdown(pairs.round(DIGITS)) if len(pairs) else "(one arm)\n"))
    write_long("table2_learnable", "Table 2: learnable % ((step, prompt) groups with nonzero reward std)",
               beside(summarize(runs, "learnable_pct"), rep, ["learnable_pct"]))
    pass_k = pass_k_long(evals, runs)
    pass_metrics = set(pass_k["metric"]) | {m for m in rep["metric"] if m.startswith("pass@")}
    write_long("table4_pass_k", "Table 4: pass@k (percent) of the base model and each strategy's final checkpoint "
               "(ours: the study's test set; 003: AIME 2025-I)", beside(pass_k, rep, sorted(pass_metrics)))
    write_long("table_accuracy", f"Final accuracy (percent, {metric}); base-wrong vs base-right vs all (blog 001)",
               beside(accuracy_long(runs), rep, ["accuracy_pct", "rel_gain_vs_base_right_pct"]))
    steps = steps_to_match(curves).assign(metric="steps_to_match_all_pct", sd=np.nan, n=np.nan, **label)
    write_long("steps_to_match", "Steps to reach the `all` run's final accuracy (percent of its steps; paper 000)",
               beside(steps, rep, ["steps_to_match_all_pct"]))

    per_tier = tier_accuracy(tiers, evals, metric).round(DIGITS)
    write_csv(out / "tiers.csv", per_tier)
    tier_wide = per_tier.pivot(index="tier", columns="strategy", values="value")
    write_text(out / "tiers.md", f"# Accuracy per tier ({metric}): base and final checkpoints\n\n"
               + markdown(tier_wide[strategy_order(tier_wide.columns)].reset_index()))

    regression = fit_line(runs["learnable_pct"], runs["gain_pp"])
    regression["r2_ci95"] = (r2_interval(runs["learnable_pct"], runs["gain_pp"], cfg.analyze.bootstrap, cfg.analyze.seed)
                             if regression["r2"] is not None else None)
    regs, paper_fit = paper_regressions(points), paper_regression(points, rep)
    write_csv(out / "paper_regression.csv", regs)
    write_text(out / "paper_regression.md", "# Figure 3 refit from the paper's reported points\n\n"
               + (markdown(regs) if len(regs) else "(no reported points)\n") + f"\n{paper_fit['note'] or ''}\n")
    write_text(out / "paper_tables.md", _paper_tables(reported()))

    save_figure(plot_accuracy_curves(curves, metric), out / "fig2_accuracy_by_checkpoint.png")
    save_figure(plot_learnable_vs_gain(runs, points, paper, stated_r2(rep), regression["r2_ci95"]),
                out / "fig3_learnable_vs_gain.png")
    save_figure(plot_learnability(arms, cfg.train.group_size), out / "fig_learnability.png")
    save_figure(plot_p_hat(selections), out / "fig_p_hat.png")
    save_figure(plot_tiers(per_tier, metric), out / "fig_tiers.png")

    line, best = verdict_with_intervals(arms, pairs, metric, runs["base_acc"].iloc[0], n_prompts)
    summary = {
        "metric": metric,
        "runs": runs.round(DIGITS).to_dict("records"),
        "skipped": skipped,
        "best": best,
        "verdict": line,
        "regression": regression,
        "paper_regression": paper_fit,
        "arms": {r["strategy"]: {
            "gain_pp": _round(r["gain_pp"]), "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
            "learnable_pct": _round(r["learnable_pct"]), "learnable_first_pct": _round(r["learnable_first_pct"]),
            "predicted_learnable_pct": _round(r["predicted_learnable_pct"]), "n_seeds": int(r["n_seeds"]),
        } for r in arms.to_dict("records")},
        "contrasts": [{
            "a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]), "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
            "p": _round(r["p"]), "p_holm": _round(r["p_holm"]), "n_seeds": int(r["n_seeds"]),
            "excludes_zero": bool(r["excludes_zero"]), "significant_holm": bool(r["significant_holm"]),
        } for r in pairs.to_dict("records")],
        "bootstrap": {"resamples": cfg.analyze.bootstrap, "seed": cfg.analyze.seed, "level": 0.95,
                      "over": over, "n_prompts": n_prompts, "interval": "percentile"},
    }
    if runs["strategy"].isin(select.EPRLI).any():
        summary["002"] = paper002(cfg, runs)
        write_text(out / "paper002.md", paper002_markdown(summary["002"]))
    write_json(out / "summary.json", summary)
    return summary


def paper002(cfg: Config, runs: pd.DataFrame) -> dict:
    """Paper 002's section of ``summary.json``: per EPRLI-family arm (``select.EPRLI``), its
    accuracy, the completions it generated (the budget the arms are compared at), its updates,
    learnable % of the groups generated (before dynamic sampling's filter) and of those kept
    (after it), and for ``eprli`` its levels' records with the accuracy at each level's last
    step (``acc_at_end``, null when that checkpoint was not evaluated); beside the paper's reported numbers
    (another model and other test sets: context, not a comparison)."""
    root = layout.study_dir(cfg)
    arms = {}
    for r in runs[runs["strategy"].isin(select.EPRLI)].to_dict("records"):
        rid = layout.run_id(r["strategy"], r["seed"])
        manifest = read_json(root / "runs" / rid / "manifest.json")
        groups = read_parquet(root / "runs" / rid / "groups.parquet", "03_train")
        kept = groups[groups["kept"]] if "kept" in groups else groups
        evals = read_parquet(root / "eval" / rid / "summary.parquet", "04_evaluate").set_index("step")[cfg.analyze.metric]
        levels = [{**lv, "acc_at_end": _round(evals.get(lv["last_step"], np.nan))} for lv in manifest.get("levels") or []]
        arms[rid] = {
            "strategy": r["strategy"], "seed": int(r["seed"]), "acc": _round(r["final_acc"]),
            "base_acc": _round(r["base_acc"]), "gain_pp": _round(r["gain_pp"]), "steps": int(r["steps"]),
            "completions_generated": int(groups["rewards"].map(len).sum()),
            "learnable_generated_pct": _round(100.0 * groups["learnable"].mean()),
            "learnable_kept_pct": _round(100.0 * kept["learnable"].mean()) if len(kept) else None,
            "levels": levels or None,
        }
    rep = reported(["002"])
    return {
        "metric": cfg.analyze.metric,
        "budget": {"max_completions": cfg.train.max_completions,
                   "how": "each arm stops at the first update whose generated completions (dropped groups "
                          "included) reach train.max_completions; EPRLI's levels each get their steps' share"},
        "arms": arms,
        "reported": rep[["dataset", "model", "strategy", "metric", "value", "source"]].to_dict("records"),
    }


def paper002_markdown(section: dict) -> str:
    rows = pd.DataFrame([{"run": rid, **{k: v for k, v in a.items() if k not in ("levels", "strategy", "seed")}}
                         for rid, a in section["arms"].items()])
    levels = pd.DataFrame([{"run": rid, **lv} for rid, a in section["arms"].items() for lv in a["levels"] or []])
    rep = pd.DataFrame(section["reported"])
    return (f"# Paper 002: EPRLI vs single-level GRPO vs dynamic sampling alone ({section['metric']})\n\n"
            f"Budget: {section['budget']['max_completions']} generated completions per arm; "
            f"{section['budget']['how']}.\n\n{markdown(rows)}\n"
            + (f"\n## EPRLI levels\n\n{markdown(levels)}\n" if len(levels) else "")
            + f"\n## Reported by paper 002 (a 1.5B model, math benchmarks)\n\n{markdown(rep)}\n")


def _paper_tables(rep: pd.DataFrame) -> str:
    """Every reported number, grouped by paper and table, with its source."""
    parts = ["# Numbers the papers report\n"]
    for (paper, table), g in rep.groupby(["paper", "table"], sort=False):
        parts.append(f"## {paper} {table}\n\nSource: {g['source'].iloc[0]}\n")
        parts.append(markdown(g[["dataset", "model", "strategy", "metric", "value", "unit", "note"]]))
    return "\n".join(parts)
