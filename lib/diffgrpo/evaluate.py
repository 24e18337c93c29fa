"""Stage 4: accuracy of the base model and of every checkpoint on the held-out test set.

For each model: greedy accuracy (one completion at temperature 0) and ``n_samples`` sampled
completions per prompt, from which pass@k is computed with the unbiased estimator of Chen et
al. (2021) for every k in ``evaluate.pass_k`` (k <= n_samples); pass@1 is the mean sampled
accuracy. Everything is also broken down per tier.

Every checkpoint is scored on every evaluation set: the held-out test set of the training
task (``test``, in ``eval/``) and each of ``evaluate.sets`` (another task, a subset, an
out-of-distribution variant: ``eval-<set>/``, scored with the set's own settings,
:meth:`Config.for_eval_set`). The base model is evaluated once per set and settings, in
``eval/base/`` (``eval-<set>/base/``), and shared by every run (its step 0). Sampled completions use the same seed for every checkpoint, so
arms are compared on common random numbers. Each checkpoint's completions are written
in resumable chunks (see :mod:`diffgrpo.models.resumable_sampling`); a checkpoint already evaluated with the
same settings is not evaluated again.

Files per run (``eval/<run_id>/``): ``samples.parquet`` (step, mode, prompt_id, sample,
completion, correct, num_tokens, finished), ``summary.parquet`` (one row per step: run_id,
strategy (the arm), seed, step, greedy_acc, pass@1, pass@k..., n_prompts) and ``tiers.parquet``.
"""

from __future__ import annotations

import shutil
from math import comb
from pathlib import Path

import pandas as pd

from diffgrpo.tasks import splits
from diffgrpo.store import artifacts, layout, run_folder
from diffgrpo.store.run_folder import RunFolder
from diffgrpo import select
from diffgrpo.models.generation import LazyGenerator
from diffgrpo.params import TEST_SET, Config
from diffgrpo.models import devices
from diffgrpo.models.resumable_sampling import load_generator, sample_and_score


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples (n = {n})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def score_table(samples: pd.DataFrame, rows: pd.DataFrame, ks: list[int]) -> pd.DataFrame:
    """Per-prompt scores: greedy correctness, sampled pass@1 and pass@k, with the prompt's tier."""
    out = rows[["id", "tier"]].rename(columns={"id": "prompt_id"}).set_index("prompt_id")
    greedy = samples[samples["mode"] == "greedy"]
    if len(greedy):
        out["greedy_acc"] = greedy.groupby("prompt_id")["correct"].mean()
    sampled = samples[samples["mode"] == "sampled"]
    if len(sampled):
        g = sampled.groupby("prompt_id")["correct"]
        n, c = g.size(), g.sum().astype(int)
        out["pass@1"] = c / n
        for k in ks:
            if k != 1:
                out[f"pass@{k}"] = [pass_at_k(int(n[p]), int(c[p]), k) for p in out.index]
    return out.reset_index()


def summarize(per_prompt: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Mean of each metric overall and per tier."""
    metrics = [c for c in per_prompt.columns if c == "greedy_acc" or c.startswith("pass@")]
    overall = {m: round(float(per_prompt[m].mean()), 4) for m in metrics}
    overall["n_prompts"] = len(per_prompt)
    tiers = per_prompt.groupby("tier", dropna=False)[metrics].mean().round(4)
    tiers["n_prompts"] = per_prompt.groupby("tier", dropna=False).size()
    return overall, tiers.reset_index()


def _evaluate_model(cfg: Config, rows: pd.DataFrame, work_dir: Path, adapter: Path | None,
                    run_key: dict, progress: bool, label: str) -> pd.DataFrame:
    """Greedy and sampled completions of one model (base or base + adapter), scored.
    ``run_key`` is :func:`layout.eval_key`, computed once per run (it hashes the model files);
    the adapter's own identity is added here, so a retrained adapter is evaluated afresh."""
    ev = cfg.evaluate

    # loaded only if some chunk is missing; vLLM: one LoRA engine for the base and every checkpoint
    gen = LazyGenerator(lambda: load_generator(cfg, batch_size=ev.sampling.batch_size, adapter=adapter,
                                               serve_adapters=True))
    task = splits.task_of(cfg)
    key = {**run_key, "adapter": layout.adapter_identity(adapter) if adapter else None}
    frames = []
    if ev.greedy:
        g = sample_and_score(gen, task, rows, n=1, temperature=0.0, top_p=1.0,
                             max_new_tokens=ev.sampling.max_new_tokens, seed=ev.seed,
                             work_dir=work_dir / "greedy", key=key, progress=progress,
                             desc=f"{label} greedy")
        frames.append(g.assign(mode="greedy"))
    if ev.n_samples:
        s = sample_and_score(gen, task, rows, n=ev.n_samples, temperature=ev.sampling.temperature,
                             top_p=ev.sampling.top_p, max_new_tokens=ev.sampling.max_new_tokens,
                             seed=ev.seed, work_dir=work_dir / "sampled", key=key, progress=progress,
                             desc=f"{label} sampled x{ev.n_samples}")
        frames.append(s.assign(mode="sampled"))
    return pd.concat(frames, ignore_index=True)


FILES = [layout.SAMPLES, layout.EVAL_SUMMARY, layout.EVAL_TIERS]


def _write(out_dir: Path, samples: pd.DataFrame, summary: pd.DataFrame, tiers: pd.DataFrame) -> None:
    artifacts.write_parquet(out_dir / layout.SAMPLES, samples)
    artifacts.write_parquet(out_dir / layout.EVAL_SUMMARY, summary)
    artifacts.write_parquet(out_dir / layout.EVAL_TIERS, tiers)


def _evaluate_steps(cfg: Config, rid: str, arm: str, seed: int | None,
                    steps: dict[int, Path | None], progress: bool, trained: dict | None = None,
                    step0: tuple[pd.DataFrame, pd.DataFrame] | None = None, eval_set: str = TEST_SET,
                    adapters: dict | None = None) -> Path:
    """Evaluate the given checkpoints (step -> adapter folder, None = base) on ``eval_set``
    (``cfg`` is that set's, :meth:`Config.for_eval_set`); write the run's files. ``adapters``: the
    checkpoints' identities, recorded in the manifest (:func:`_done` reads them back)."""
    out_dir = layout.eval_dir(cfg, rid, eval_set)
    rows = splits.load_test(cfg)
    ks = sorted(set(cfg.evaluate.pass_k))  # each 1 <= k <= n_samples: checked with the params
    run_key = layout.eval_key(cfg)
    all_samples, summaries, tiers = [], [], []
    for step, adapter in sorted(steps.items()):
        samples = _evaluate_model(cfg, rows, out_dir / "work" / f"step-{step}", adapter, run_key,
                                  progress, label=f"{rid} step {step}")
        overall, tier = summarize(score_table(samples, rows, ks))
        head = {"run_id": rid, "strategy": arm, "seed": seed, "step": step}
        summaries.append({**head, **overall})
        tiers.append(tier.assign(**head))
        all_samples.append(samples.assign(step=step))
    summary, tier_table = pd.DataFrame(summaries), pd.concat(tiers, ignore_index=True)
    if step0 is not None:  # the base model is a run's step 0
        summary = pd.concat([step0[0], summary], ignore_index=True)
        tier_table = pd.concat([step0[1], tier_table], ignore_index=True)
    _write(out_dir, pd.concat(all_samples, ignore_index=True), summary, tier_table)
    artifacts.write_json(out_dir / layout.MANIFEST, {"key": run_key, "steps": sorted(steps), "trained": trained,
                                                   "sha256": artifacts.digests(out_dir, FILES),
                                                   "peak_memory": devices.peak_memory(),  # GPU peaks (None: CPU)
                                                   **({"adapters": adapters} if adapters is not None else {})})
    return out_dir


def evaluate_base(cfg: Config, progress: bool = True, eval_set: str = TEST_SET) -> Path:
    """The base model on evaluation set ``eval_set`` (default: the held-out test set), once per
    set and settings."""
    out_dir = layout.eval_dir(cfg, layout.BASE_RUN, eval_set)
    cfg = cfg.for_eval_set(eval_set)
    manifest = out_dir / layout.MANIFEST
    with artifacts.exclusive(out_dir, wait=True):  # every run's evaluation needs it: the others wait
        try:
            m = artifacts.read_manifest(manifest, "04_evaluate")
        except artifacts.ArtifactError:
            m = None  # a damaged record: evaluated again (its chunks are kept, keyed, and reused)
        if m is not None and m.get("key") == layout.eval_key(cfg) and not artifacts.damaged(out_dir, m):
            return out_dir
        return _evaluate_steps(cfg, layout.BASE_RUN, layout.BASE_RUN, None, {0: None}, progress, eval_set=eval_set)


def checkpoints(run_dir: Path) -> dict[int, Path]:
    """A run's saved adapters by step."""
    found = layout.list_checkpoints(run_dir / layout.CHECKPOINTS)
    if not found:
        raise layout.NotRunYet(f"{run_dir / layout.CHECKPOINTS}: no adapter checkpoints; train this run first (03_train)")
    return found


def check_finished(run_dir: Path, max_steps: int) -> dict:
    """Refuse to score a run that is not finished (``max_steps``: the run's steps,
    :meth:`Config.run_steps`): a killed or running train leaves checkpoints that look
    like a result and are not the study's."""
    folder = RunFolder(run_dir)
    path = folder.manifest_path
    if not path.exists():
        raise layout.NotRunYet(f"{run_dir}: no training run here; run the train stage (03_train) first")
    m = artifacts.read_manifest(path, "03_train")
    if not run_folder.finished(m, max_steps):
        raise RuntimeError(
            f"{run_dir}: the run is not finished (status {m.get('status')!r}, {m.get('steps_done')} of its {max_steps} "
            "steps: train.max_steps, or train.epochs passes over its selection); rerun the train stage (03_train), "
            "which resumes it, before evaluating")
    bad = folder.damaged(m)
    if bad:  # a truncated adapter would fail to load naming no file, or score another model
        raise artifacts.ArtifactError(
            f"{run_dir}: {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} missing or changed since the run "
            "finished; rerun the train stage (03_train), which sets the run aside and trains it anew, then this one")
    return layout.trained_identity(m)


def evaluate_run(cfg: Config, arm: str, seed: int, eval_set: str = TEST_SET, *, progress: bool = True) -> Path:
    """Every checkpoint of one (arm, seed) run (or only the last, with evaluate.checkpoints =
    final) on evaluation set ``eval_set`` (default: the held-out test set)."""
    run_dir = layout.run_dir(cfg, arm, seed)
    trained = check_finished(run_dir, cfg.run_steps(arm, select.selection_size(cfg, arm, seed)))
    steps: dict[int, Path | None] = dict(checkpoints(run_dir))
    if cfg.evaluate.checkpoints == "final":
        last = max(steps)
        steps = {last: steps[last]}
    base = read_summary(cfg, layout.BASE_RUN, evaluate_base(cfg, progress, eval_set))
    out_dir = layout.eval_dir(cfg, layout.run_id(arm, seed), eval_set)
    with artifacts.exclusive(out_dir):
        adapters = {str(step): layout.adapter_identity(a) for step, a in sorted(steps.items()) if a is not None}
        if _done(cfg.for_eval_set(eval_set), out_dir, sorted(steps), trained, adapters):
            return out_dir  # evaluated already, these very adapters with these settings (a study that took more seeds)
        out = _with_base_rows(cfg, arm, seed, base, steps, trained, progress, eval_set, adapters)
        if cfg.for_arm(arm).train.report_to == "tensorboard":
            write_curves(run_dir, read_summary(cfg, layout.run_id(arm, seed), out, eval_set), eval_set)
        return out


def _done(cfg: Config, out_dir: Path, steps: list[int], trained: dict, adapters: dict) -> bool:
    """Whether ``out_dir`` holds this run's evaluation already: the same settings and rows
    (:func:`diffgrpo.store.layout.eval_key`), checkpoints, training and adapter files (their
    digests), undamaged. Then its evaluation is read, not written again."""
    try:
        m = artifacts.read_manifest(out_dir / layout.MANIFEST, "04_evaluate")
    except artifacts.ArtifactError:
        return False
    return (m is not None and m.get("key") == layout.eval_key(cfg) and m.get("steps") == steps
            and m.get("trained") == artifacts.jsonable(trained) and m.get("adapters") == adapters
            and not artifacts.damaged(out_dir, m))


#: the summary's columns that are no accuracy (``write_curves`` leaves them out)
_NOT_CURVES = ("run_id", "strategy", "seed", "step", "n_prompts")


def write_curves(run_dir: Path, summary: pd.DataFrame, eval_set: str = TEST_SET) -> Path:
    """The run's accuracy at each evaluated checkpoint (step 0: the base model) as TensorBoard
    scalars ``eval/<set>/<metric>`` (greedy_acc, pass@1, ...), beside its training curves
    (``train.report_to: tensorboard``): ``runs/<run>/tensorboard/eval-<set>/``, written anew each
    time the run is evaluated (a copy of ``summary.parquet``, which stays the record)."""
    from torch.utils.tensorboard import SummaryWriter

    folder = RunFolder(run_dir).tensorboard / f"eval-{eval_set}"
    if folder.exists():
        shutil.rmtree(folder)
    with SummaryWriter(str(folder)) as writer:
        for row in summary.to_dict("records"):
            for metric, value in row.items():
                if metric not in _NOT_CURVES and isinstance(value, (int, float)) and value == value:
                    writer.add_scalar(f"eval/{eval_set}/{metric}", float(value), int(row["step"]))
    return folder


def _with_base_rows(cfg: Config, arm: str, seed: int, base: pd.DataFrame, steps: dict[int, Path | None],
                    trained: dict, progress: bool, eval_set: str = TEST_SET, adapters: dict | None = None) -> Path:
    """Evaluate the run's checkpoints, with the base model as its step 0."""
    rid = layout.run_id(arm, seed)
    base_tiers = artifacts.read_parquet(layout.eval_dir(cfg, layout.BASE_RUN, eval_set) / layout.EVAL_TIERS,
                                        "04_evaluate")
    step0 = tuple(df.assign(run_id=rid, strategy=arm, seed=seed) for df in (base, base_tiers))
    return _evaluate_steps(cfg.for_eval_set(eval_set), rid, arm, seed, steps, progress, trained, step0,
                           eval_set, adapters)


def read_summary(cfg: Config, rid: str, out_dir: Path | None = None, eval_set: str = TEST_SET) -> pd.DataFrame:
    path = (out_dir or layout.eval_dir(cfg, rid, eval_set)) / layout.EVAL_SUMMARY
    if not path.exists():
        raise layout.NotRunYet(f"{path}: no evaluation of {rid!r} on set {eval_set!r}; run the evaluate stage (04_evaluate)")
    return artifacts.read_parquet(path, "04_evaluate")


def evaluate_runs(cfg: Config, progress: bool = True, arm: str | None = None, seed: int | None = None) -> pd.DataFrame:
    """The base model, then every run of the study, on every
    evaluation set (``test`` first, then ``evaluate.sets``); the test set's summaries. With
    ``arm`` and/or ``seed`` only those runs; ``arm="base"``: the base model alone."""
    if arm == layout.BASE_RUN and seed is not None:
        raise ValueError(f"arm {layout.BASE_RUN!r} (the untrained model) has no seed; got seed {seed!r}")
    runs = [] if arm == layout.BASE_RUN else layout.planned_runs(cfg, arm, seed)  # an unknown arm fails first
    sets = cfg.eval_set_names()
    for eval_set in sets:
        evaluate_base(cfg, progress, eval_set)
    if arm == layout.BASE_RUN:
        return read_summary(cfg, layout.BASE_RUN)
    for eval_set in sets:  # one after the other here; the study runner evaluates `workers` runs at once
        for s, seed in runs:
            evaluate_run(cfg, s, seed, eval_set, progress=progress)
    return pd.concat([read_summary(cfg, layout.run_id(s, seed)) for s, seed in runs], ignore_index=True)

