"""A training run's folder as the stages read it: the newest usable checkpoint and the rows
recorded before it (resuming), a run trained with other settings set aside (never deleted),
and what a finished run's manifest vouches for (``RUN_FILES`` and every adapter, by digest).
Light on purpose (no torch): the evaluate and analyze stages read runs too."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from diffgrpo.store import artifacts, layout

#: files every finished run holds besides its checkpoints (covered by the manifest's digests)
RUN_FILES = ("steps.parquet", "groups.parquet", "params.yaml", "trl_config.json")


def resume_point(ckpt_dir: Path, tidy: bool = True) -> tuple[int, Path | None]:
    """The newest checkpoint a resume can use (full trainer state); ``tidy``: removes
    half-written ones (only the main process of a multi-process job does)."""
    usable = {s: p for s, p in layout.list_checkpoints(ckpt_dir).items() if (p / layout.OPTIMIZER_FILE).exists()}
    step, path = max(usable.items()) if usable else (0, None)
    for s, p in layout.list_checkpoints(ckpt_dir, complete=False).items():
        if s > step and tidy:  # written after the last usable state: never trusted
            shutil.rmtree(p)
    return step, path


def previous_rows(run_dir: Path, upto: int) -> tuple[list[dict], list[dict]]:
    """Rows recorded up to step ``upto`` (those after it belong to the lost part of the run)."""
    out = []
    for name in ("steps.parquet", "groups.parquet"):
        path = run_dir / name
        df = pd.read_parquet(path) if upto and path.exists() else pd.DataFrame(columns=["step"])
        df = df[df["step"] <= upto]
        if name == "groups.parquet" and len(df):
            df = df.assign(rewards=df["rewards"].map(list), scores=df["scores"].map(list))
        out.append(df.to_dict("records"))
    return out[0], out[1]


def set_aside(run_dir: Path, old_key: dict) -> Path:
    """Move a run trained with other settings out of the way, never deleting it."""
    base = run_dir.with_name(f"{run_dir.name}.superseded-{layout.key_hash(old_key)}")
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    run_dir.rename(target)
    return target


def changed(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix.rstrip(".") or "(all)"]
    return [c for k in sorted(set(old) | set(new)) for c in changed(old.get(k), new.get(k), f"{prefix}{k}.")]


def adapter_files(run_dir: Path) -> list[str]:
    """The files of every checkpoint's adapter, relative to the run folder (trainer state,
    which a later stage never reads, left out: only the newest checkpoint keeps it)."""
    out = []
    for path in layout.list_checkpoints(run_dir / layout.CHECKPOINTS, complete=False).values():
        out += [artifacts.relative(f, run_dir) for f in sorted(path.rglob("*"))
                if f.is_file() and f.name not in layout.ADAPTER_STATE_FILES]
    return out


def run_damaged(run_dir: Path, manifest: dict) -> list[str]:
    """What a finished run lost or had changed since it finished: files its manifest recorded
    (``sha256``: records, adapters), the checkpoints it lists, and its params and TRL config."""
    bad = artifacts.damaged(run_dir, manifest)
    bad += [c for c in manifest.get("checkpoints", []) if not (run_dir / c / "adapter_config.json").is_file()]
    bad += [f for f in RUN_FILES if f not in manifest.get("sha256", {}) and not (run_dir / f).is_file()]
    return bad


def finished(manifest: dict, max_steps: int) -> bool:
    """A run is finished at ``max_steps`` steps, or earlier when its completion budget was spent."""
    return manifest["status"] == "complete" and (manifest["steps_done"] == max_steps or bool(manifest.get("budget_spent")))


def check_nothing_lost(run_dir: Path, saved: set[int], manifest_path: Path) -> None:
    """Before a run is recorded: every checkpoint this session found or saved, and the run's
    params and TRL config, are still there. A run folder deleted (or thinned) while it trained
    is set aside and refused, not recorded as finished with what was written after."""
    have = set(layout.list_checkpoints(run_dir / layout.CHECKPOINTS, complete=False))
    lost = [f"{layout.CHECKPOINTS}/checkpoint-{s}" for s in sorted(saved - have)]
    lost += [f for f in ("params.yaml", "trl_config.json") if not (run_dir / f).is_file()]
    if lost:
        kept = artifacts.set_aside(run_dir, "damaged")
        raise artifacts.ArtifactError(f"{run_dir}: files of the run disappeared while it trained ({', '.join(lost)}); "
                                      f"kept what is left as {kept.name}; rerun the train stage (03_train), which "
                                      "trains the run anew")


def previous(run_dir: Path, key: dict, max_steps: int, is_main: bool) -> tuple[dict | None, bool]:
    """What a run folder holds for a training of ``key`` that ends at ``max_steps`` (the run's
    steps, :meth:`diffgrpo.params.Config.run_steps`): (its manifest, finished?) when it can
    be resumed or kept, (None, False) when the run trains anew. What cannot be trusted (a
    damaged manifest or level record, checkpoints without a manifest, other settings, files
    damaged since the run finished) is set aside, never deleted, by the main process."""
    manifest_path = run_dir / "manifest.json"
    try:
        manifest = artifacts.read_manifest(manifest_path, "03_train")
        if manifest is not None and not {"key", "status", "steps_done"} <= set(manifest):
            raise artifacts.ArtifactError(f"{manifest_path}: damaged, not a run manifest")
    except artifacts.ArtifactError as err:  # its records cannot be trusted: set aside, trained anew
        if is_main:
            kept = artifacts.set_aside(run_dir, "damaged")
            warnings.warn(f"{run_dir.name}: {err}; kept the run as {kept.name} and training this one anew",
                          stacklevel=2)
        manifest = None
    if manifest is not None and manifest["key"] == key and damaged_level_record(run_dir):
        # an interrupted EPRLI run whose record of a finished level is damaged: the rows of the
        # levels after it cannot be put back in order without it, so the run trains anew
        if is_main:
            kept = artifacts.set_aside(run_dir, "damaged")
            warnings.warn(f"{run_dir.name}: {damaged_level_record(kept)}; kept the run as {kept.name} and training "
                          "this one anew", stacklevel=2)
        manifest = None
    if manifest is None and run_dir.exists() and layout.list_checkpoints(run_dir / layout.CHECKPOINTS, complete=False):
        # a run writes its manifest before its first step: checkpoints without one are the rest of a
        # folder that lost files (deleted while it trained); its history cannot be trusted
        if is_main:
            kept = artifacts.set_aside(run_dir, "damaged")
            warnings.warn(f"{run_dir.name}: checkpoints without a manifest (the folder lost files); kept it as "
                          f"{kept.name} and training this one anew", stacklevel=2)
    if manifest is not None and manifest["key"] != key:
        if is_main:  # under a launcher, the one process that moves files
            kept = set_aside(run_dir, manifest["key"])
            warnings.warn(f"{run_dir.name}: the run there was trained with other settings "
                          f"({', '.join(changed(manifest['key'], key))} differ); kept it as {kept.name} and "
                          "training this one anew", stacklevel=2)
        manifest = None
    if manifest is not None:
        if manifest["steps_done"] > max_steps:
            raise ValueError(f"{run_dir}: {manifest['steps_done']} steps done, more than the run's {max_steps} "
                             "(train.max_steps, or train.epochs passes over its selection); raise them, or delete "
                             "that folder to retrain it")
        if finished(manifest, max_steps):
            bad = run_damaged(run_dir, manifest)  # every process sees the same files
            if not bad:
                return manifest, True
            if is_main:
                kept = set_aside(run_dir, manifest["key"])
                warnings.warn(f"{run_dir.name}: {bad} damaged since the run finished (its records cannot be "
                              f"rebuilt without training); kept it as {kept.name} and training this one anew",
                              stacklevel=2)
            manifest = None
    return manifest, False


def damaged_level_record(run_dir: Path) -> str | None:
    """What is wrong with the first unreadable ``levels/*/level.json`` of a run, or None."""
    for path in sorted(run_dir.glob("levels/*/level.json")):
        try:
            artifacts.read_json(path, "03_train")
        except artifacts.ArtifactError as err:
            return str(err)
    return None
