"""Where every artifact of a study lives, derived from one root (``outputs/``).

    outputs/<study>/
      probe/<model>/<key>/      samples.parquet, prompts.parquet, one_sample.parquet, manifest.json
      select/<arm>.parquet      selections (prompt ids, p_hat, policy, seed) + summary.csv;
                                a per-seed policy (random) has select/<arm>-seed<seed>.parquet
      runs/<run_id>/            params.yaml, trl_config.json, manifest.json, steps.parquet, groups.parquet,
                                checkpoints/checkpoint-<step>/ (LoRA adapters), tensorboard/ (event files);
                                an EPRLI run also levels/<i>-<name>/ (checkpoints/, trl_config.json, level.json)
                                (one run's folder: diffgrpo.store.run_folder.RunFolder)
      eval/<run_id>/            samples.parquet, summary.parquet, tiers.parquet (run_id "base" for the base model)
                                on the held-out test set; eval-<set>/<run_id>/ the same on evaluation set <set>
      report/                   tables (CSV + markdown), figures (PNG), summary.json, params.yaml (the params
                                it was computed with: a committed report's inputs, diffgrpo.analysis.inputs)
      notebooks/                executed notebooks (and each one's log, <name>.log)
      slurm/                    the Slurm executor's job records (jobs.json, submitit's files)

``run_id`` is ``<arm>-seed<seed>`` (an arm named after its policy, as 003's four are, keeps
the run ids of the strategies it replaced). Paths inside manifests are relative to the study folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from diffgrpo.store import artifacts
from diffgrpo.store.artifacts import outputs_root
from diffgrpo.models.resolve import files_fingerprint, generation_key, model_fingerprint, source_fingerprint
from diffgrpo.tasks.splits import task_of
from diffgrpo.params import TEST_SET, Config

BASE_RUN = "base"

# ---- file names ---------------------------------------------------------------------------
# Every file name of a study folder, in the tree above; the stages build paths from these.
#: every folder's record (key, status, digests of its files); artifacts checks a file against it
MANIFEST = artifacts.MANIFEST
#: the params a probe, a run or a report was computed with
PARAMS = "params.yaml"
#: probe/<model>/<key>/: every sample, the per-prompt results (p_hat), the greedy one-sample probe
SAMPLES, PROMPTS, ONE_SAMPLE = "samples.parquet", "prompts.parquet", "one_sample.parquet"
#: select/: the arms' selections side by side
SELECTION_SUMMARY = "summary.csv"
#: runs/<run_id>/: TRL's logged metrics, every generated group, the effective GRPOConfig and LoRA
STEPS, GROUPS, TRL_CONFIG = "steps.parquet", "groups.parquet", "trl_config.json"
#: runs/<run_id>/levels/<i>-<name>/: an EPRLI level's folder (paper 002) and its record once finished
LEVELS, LEVEL_RECORD = "levels", "level.json"
#: runs/<run_id>/tensorboard/: the TensorBoard event files (``train.report_to: tensorboard``)
TENSORBOARD = "tensorboard"
#: eval/<run_id>/: every sample, the per-step summary, the per-tier table (SAMPLES, as a probe's)
EVAL_SUMMARY, EVAL_TIERS = "summary.parquet", "tiers.parquet"
#: report/: the headline numbers a grid of studies and the runner read
REPORT_SUMMARY = "summary.json"
#: the study folder's record of each notebook's wall time (the study runner)
TIMINGS = "timings.json"
#: slurm/: the job id of each notebook job last submitted
SLURM_JOBS = "jobs.json"


class NotRunYet(FileNotFoundError):
    """A file of a study that the stage writing it has not written yet: the message names the
    stage to run first (``python -m diffgrpo.train`` before the select stage)."""


def study_dir(cfg: Config) -> Path:
    """``<outputs>/<study>``: a folder strictly inside the outputs root (``params`` checks the
    name, :data:`diffgrpo.params.SAFE_NAME`; this checks the path it makes)."""
    artifacts.check_outputs_root(write=False)  # a file as the root: named, not a raw OSError later
    path = artifacts.inside_outputs(outputs_root() / cfg.study, "study")
    if os.path.abspath(path) == os.path.abspath(outputs_root()):
        raise artifacts.OutputsError(f"study {cfg.study!r}: the study folder would be the outputs root itself")
    return path


# ---- run identity -----------------------------------------------------------------------
# The one place that says what decides each cached artifact. A probe folder, a training run
# and an evaluation are reused only when every part of their key matches; everything that can
# change a result is in it (the model's files, the rows, the settings, the exact adapter).


def model_identity(cfg: Config) -> dict[str, Any]:
    """The model as the params name it, plus a digest of its files (a rebuilt checkpoint behind
    the same path is another model)."""
    return {**cfg.model.model_dump(), "fingerprint": model_fingerprint(cfg)}


def rows_identity(cfg: Config, role: str) -> dict[str, Any]:
    """What decides the rows of the pool (``role`` "pool") or of the held-out set ("test"):
    the task and its options, the source (a local file: with the digest of its bytes, so an
    edited file is other rows), both splits and sizes (one split may feed both), and the study
    seed that cuts them (:func:`diffgrpo.tasks.splits.load_pool`)."""
    d = cfg.dataset
    digest = source_fingerprint(d.source)
    return {"task": task_of(cfg).describe(), "source": d.source, **({"source_sha256": digest} if digest else {}),
            "role": role, "split": d.train_split if role == "pool" else d.test_split,
            "splits": [d.train_split, d.test_split], "sizes": [d.pool_size, d.test_size], "seed": cfg.seed}


def probe_key(cfg: Config, role: str = "pool") -> dict[str, Any]:
    """Everything that decides a probe's result: a probe is reused only when all match. ``role``:
    the training pool ("pool") or the held-out test set ("test", with ``probe.test``)."""
    return artifacts.jsonable({
        "model": model_identity(cfg),
        "rows": rows_identity(cfg, role),
        "k": cfg.probe.k,
        "one_sample": cfg.probe.one_sample,
        "sampling": cfg.probe.sampling.model_dump(),
        "seed": cfg.probe.seed,
        **generation_key(cfg),
    })


#: train.* keys out of a run's key: how far it goes (max_steps or epochs: a finished run may be extended where its
#: schedule allows, diffgrpo.train.config.check_extension), the seeds (each run has its own), where and how often its
#: metrics are logged, whether a budget's run is a checkpoint of a longer one (the same steps either way:
#: tests/test_budgets_as_checkpoints.py); every other key decides the result
NOT_IN_RUN_KEY = ("max_steps", "epochs", "seeds", "trl", "report_to", "logging_steps", "budgets_as_checkpoints")
#: train.* options that enter a run's key only when they change training: switched off they
#: train exactly as before they existed, so the runs cached before them stay valid
_OFF = {"dynamic_sampling": lambda v: not v["enabled"], "length_reward": lambda v: v["weight"] == 0,
        "max_completions": lambda v: v is None, "num_processes": lambda v: v == 1,
        "online": lambda v: v["method"] == "none"}
#: TRL options (``train.trl``) that change where a run logs, not what it learns; every other
#: one enters the key, beside the train.* keys
TRL_NOT_IN_RUN_KEY = ("report_to", "logging_dir", "run_name", "project", "disable_tqdm",
                      "log_completions", "num_completions_to_print", "vllm_enable_sleep_mode", "vllm_max_model_length",
                      "dataloader_num_workers", "logging_strategy", "logging_first_step", "log_on_each_node",
                      "logging_nan_inf_filter", "log_level", "log_level_replica", "log_unique_prompts", "log_multimodal",
                      "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor")


def run_key(cfg: Config, selection_ids: list[str], reward: dict[str, Any] | None = None,
            levels: list[dict] | None = None) -> dict[str, Any]:
    """What decides a training run's result, bar :data:`NOT_IN_RUN_KEY` (a finished run may be
    extended; where its metrics are also sent changes no number): a resume must match it, and an evaluation of the run's adapters carries it. ``cfg`` is the
    arm's (:meth:`Config.for_arm`), so an arm's own training settings are in ``train``; what its
    policy decides is in the selection's ids and, for the control arm, in ``reward`` (the
    verifier's reward adds nothing, so the runs of 003's four arms keep their keys); ``levels``:
    the run's effective levels (paper 002's policies, :func:`diffgrpo.train.run_levels`)."""
    train = {k: v for k, v in cfg.train.model_dump().items() if k not in NOT_IN_RUN_KEY and not (k in _OFF and _OFF[k](v))}
    train.update({f"trl.{k}": v for k, v in cfg.train.trl.items() if k not in TRL_NOT_IN_RUN_KEY})
    return artifacts.jsonable({
        "model": model_identity(cfg),
        "rows": rows_identity(cfg, "pool"),
        "train": train,
        "selection_sha": hashlib.sha256("\n".join(selection_ids).encode()).hexdigest()[:16],
        **({"reward": reward} if reward is not None else {}),
        **({"levels": levels} if levels is not None else {}),
    })


def eval_key(cfg: Config) -> dict[str, Any]:
    """What decides the evaluation of the base model on the held-out set (on an evaluation set:
    ``cfg`` is the set's, :meth:`Config.for_eval_set`, its rows and settings in ``dataset`` and
    ``evaluate``, so the list of further sets is no part of it); a checkpoint's key adds
    :func:`adapter_identity`."""
    ev = {k: v for k, v in cfg.evaluate.model_dump().items() if k not in ("checkpoints", "sets")}
    return artifacts.jsonable({"model": model_identity(cfg), "rows": rows_identity(cfg, "test"), "evaluate": ev,
                               **generation_key(cfg)})


def adapter_identity(adapter: Path) -> dict[str, Any]:
    """An adapter checkpoint by the digest of its files: a run retrained under the same
    folder name is another adapter, and its evaluation is recomputed."""
    return {"folder": adapter.name, "fingerprint": files_fingerprint(adapter, skip=ADAPTER_STATE_FILES)}


def trained_identity(run_manifest: dict[str, Any]) -> dict[str, Any]:
    """Which training of a run an evaluation scored (kept in the evaluation's manifest, so the
    report refuses an evaluation older than the run it stands for)."""
    return {"key": key_hash(run_manifest["key"]), "steps_done": run_manifest["steps_done"]}


#: files of a checkpoint folder that are trainer state, not the adapter
ADAPTER_STATE_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin")


#: train.* keys of a run's key that end or charge a run without changing any step it trains
NOT_IN_TRAJECTORY = ("max_completions", "charge_probe")


def trajectory_id(run_manifest: dict[str, Any]) -> str:
    """Which training trajectory a run is a point of: its key without ``train.max_completions``
    (a budget that stops a run early ends it on the way, it does not change a step before), its
    seed and its schedule's length (``max_steps``: the learning rate's schedule runs over it). Runs
    with one trajectory id trained the same steps, one a prefix of the other: the report gives them
    one seed part (:func:`diffgrpo.stats.intervals.draws`) and counts them as one trajectory."""
    key = dict(run_manifest.get("key") or {})
    key["train"] = {k: v for k, v in (key.get("train") or {}).items() if k not in NOT_IN_TRAJECTORY}
    return key_hash({"key": key, "seed": run_manifest.get("seed"), "max_steps": run_manifest.get("max_steps")})


def key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]


def probe_dir(cfg: Config, role: str = "pool") -> Path:
    """The probe of the pool, or (``role`` "test") of the held-out test set."""
    key = probe_key(cfg, role)
    name = f"{cfg.dataset.task}-{'' if role == 'pool' else 'test-'}{key['rows']['split']}-k{cfg.probe.k}-{key_hash(key)}"
    return artifacts.inside_outputs(study_dir(cfg) / "probe" / cfg.model.name / name, "model.name")


def selections_dir(study: Path) -> Path:
    """``select/`` of a study folder: one selection file per arm (and seed, for a per-seed policy)."""
    return study / "select"


def select_dir(cfg: Config) -> Path:
    return selections_dir(study_dir(cfg))


def selection_file(cfg: Config, arm: str, seed: int | None = None) -> Path:
    """``select/<arm>.parquet``; with ``seed``, the selection of one training seed,
    ``select/<arm>-seed<seed>.parquet`` (a per-seed policy's: :mod:`diffgrpo.policies`)."""
    return artifacts.inside_outputs(select_dir(cfg) / f"{arm if seed is None else run_id(arm, seed)}.parquet", "arm")


def run_id(arm: str, seed: int) -> str:
    return f"{arm}-seed{seed}"


def planned_runs(cfg: Config, arm: str | None = None, seed: int | None = None) -> list[tuple[str, int]]:
    """The study's (arm, seed) runs: every arm x train.seeds, in the params' order; with
    ``arm`` and/or ``seed``, only those (a name the study does not declare is an error)."""
    arms = [a.name for a in cfg.arms]
    if arm is not None and arm not in arms:
        raise ValueError(f"arm {arm!r} is not an arm of study {cfg.study!r}; its arms are {arms}")
    if seed is not None and seed not in cfg.train.seeds:
        raise ValueError(f"seed {seed!r} is not one of the train.seeds {list(cfg.train.seeds)} of study {cfg.study!r}")
    return [(a, s) for a in arms for s in cfg.train.seeds
            if (arm is None or a == arm) and (seed is None or s == seed)]


def runs_dir(study: Path) -> Path:
    """``runs/`` of a study folder: one folder per run."""
    return study / "runs"


def evals_dir(study: Path, eval_set: str = TEST_SET) -> Path:
    """``eval/`` of a study folder (the held-out test set), ``eval-<set>/`` for another set."""
    return study / ("eval" if eval_set == TEST_SET else f"eval-{eval_set}")


def run_dir(cfg: Config, arm: str, seed: int) -> Path:
    return artifacts.inside_outputs(runs_dir(study_dir(cfg)) / run_id(arm, seed), "arm")


def eval_dir(cfg: Config, rid: str, eval_set: str = TEST_SET) -> Path:
    """``eval/<run_id>/`` on the held-out test set; ``eval-<set>/<run_id>/`` on another set."""
    return artifacts.inside_outputs(evals_dir(study_dir(cfg), eval_set) / rid, "evaluation set")


#: a run's adapter checkpoints, ``checkpoints/checkpoint-<step>/``; HF writes the trainer state
#: last (a checkpoint without it is incomplete) and only the newest keeps its optimizer state
CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
#: PEFT's record of an adapter (a checkpoint without it cannot be loaded)
ADAPTER_CONFIG = "adapter_config.json"


def checkpoint(ckpt_dir: Path, step: int) -> Path:
    """The folder of the checkpoint of ``step`` (HF's name, ``checkpoint-<step>``)."""
    return ckpt_dir / f"checkpoint-{step}"


def list_checkpoints(ckpt_dir: Path, complete: bool = True) -> dict[int, Path]:
    """Checkpoint folders by step, in order; ``complete``: only those HF finished writing. The
    one listing of checkpoints (training resumes from them, evaluation scores them)."""
    found = {}
    for d in ckpt_dir.glob("checkpoint-*"):
        if d.is_dir() and d.name.split("-")[-1].isdigit() and (not complete or (d / STATE_FILE).exists()):
            found[int(d.name.split("-")[-1])] = d
    return dict(sorted(found.items()))


def tensorboard_dir(run: Path) -> Path:
    """A run's TensorBoard event files (``train.report_to: tensorboard``), so that
    ``tensorboard --logdir outputs/<study>/runs`` shows every run's curves side by side."""
    return run / TENSORBOARD


def slurm_dir(cfg: Config) -> Path:
    """The Slurm executor's records of a study: submitit's files (``<job id>_*``) and
    ``jobs.json``, the job id of each notebook job last submitted (docs/cluster.md)."""
    return study_dir(cfg) / "slurm"


def report_dir(cfg: Config) -> Path:
    return study_dir(cfg) / "report"


def notebooks_dir(cfg: Config) -> Path:
    return study_dir(cfg) / "notebooks"


def executed_notebook(cfg: Config, stage: str, rid: str | None = None) -> Path:
    """Where the study keeps a stage's executed notebook: ``notebooks/<stage>.ipynb``, or for a
    stage run once per run (or for the base model), ``notebooks/<stage>/<run_id>.ipynb``."""
    return artifacts.inside_outputs(notebooks_dir(cfg) / (f"{stage}.ipynb" if rid is None else f"{stage}/{rid}.ipynb"),
                                    "notebook")
