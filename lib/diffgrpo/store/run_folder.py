"""One training run's folder, ``runs/<run_id>/`` (:class:`RunFolder`): its files, its manifest
and level records, where an interrupted run resumes (the newest usable checkpoint and the rows
recorded before it), a run trained with other settings set aside (never deleted), and what a
finished run's manifest vouches for (``RUN_FILES`` and every adapter, by digest).
Light on purpose (no torch): the evaluate and analyze stages read runs too."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from diffgrpo import params
from diffgrpo.params import Config
from diffgrpo.store import artifacts, layout

#: files every finished run holds besides its checkpoints (covered by the manifest's digests)
RUN_FILES = (layout.STEPS, layout.GROUPS, layout.PARAMS, layout.TRL_CONFIG)
#: what the train stage is called in errors (its rerun rebuilds the folder)
STAGE = "03_train"


def finished(manifest: dict, max_steps: int) -> bool:
    """A run is finished at ``max_steps`` steps, or earlier when its completion budget was spent."""
    return manifest.get("status") == "complete" and (manifest.get("steps_done") == max_steps
                                                     or bool(manifest.get("budget_spent")))


def _changed(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix.rstrip(".") or "(all)"]
    return [c for k in sorted(set(old) | set(new)) for c in _changed(old.get(k), new.get(k), f"{prefix}{k}.")]


class RunFolder:
    """``runs/<run_id>/``: ``manifest.json`` (the run's key, status, steps done, checkpoints,
    digests), ``params.yaml``, ``trl_config.json``, ``steps.parquet``, ``groups.parquet``,
    ``checkpoints/checkpoint-<step>/``, ``tensorboard/``; an EPRLI run (paper 002) also has
    ``levels/<i>-<name>/`` per level (its checkpoints, trainer config and, once finished, its
    record ``level.json``). Only the main process of a launched run moves or writes files."""

    def __init__(self, path: Path):
        self.path = Path(path)

    # ---- paths --------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / layout.MANIFEST

    @property
    def checkpoints(self) -> Path:
        return self.path / layout.CHECKPOINTS

    @property
    def steps(self) -> Path:
        return self.path / layout.STEPS

    @property
    def groups(self) -> Path:
        return self.path / layout.GROUPS

    @property
    def tensorboard(self) -> Path:
        return layout.tensorboard_dir(self.path)

    def level_dir(self, i: int, name: str) -> Path:
        """``levels/<i + 1>-<name>/``: the ``i``-th level's folder (counting from 0)."""
        return artifacts.inside_outputs(self.path / layout.LEVELS / f"{i + 1}-{name}", "eprli.levels")

    def level_checkpoints(self, i: int, name: str | None) -> Path:
        """Where the trainer of level ``i`` saves: the run's own checkpoints for a one-level run
        (``name`` None), the level folder's for an EPRLI level."""
        return self.checkpoints if name is None else self.level_dir(i, name) / layout.CHECKPOINTS

    def level_records(self) -> list[Path]:
        """Every ``levels/*/level.json``, in level order."""
        return sorted(self.path.glob(f"{layout.LEVELS}/*/{layout.LEVEL_RECORD}"))

    # ---- writing --------------------------------------------------------------------------
    def write_params(self, cfg: Config) -> None:
        artifacts.write_text(self.path / layout.PARAMS, params.dump(cfg))

    def write_trl_config(self, config: dict, level: Path | None = None) -> None:
        """The trainer's effective configuration (``{"grpo": ..., "peft": ...}``), in the run's
        folder or (``level``: a level's folder) in a level's."""
        artifacts.write_json((level or self.path) / layout.TRL_CONFIG, config)

    def write_manifest(self, fields: dict, status: str, steps_done: int) -> None:
        """The run's manifest: ``fields`` (its key, model, task, ...), the status, the steps done
        and the checkpoints saved so far."""
        ckpts = [artifacts.relative(p, self.path) for p in layout.list_checkpoints(self.checkpoints).values()]
        artifacts.write_json(self.manifest_path, {**fields, "status": status, "steps_done": steps_done,
                                                  "checkpoints": ckpts})

    def read_level_record(self, i: int, name: str) -> dict | None:
        """The record of a level an interrupted run finished, or None (readable: the folder's
        level records are checked before the first level, :meth:`previous`)."""
        path = self.level_dir(i, name) / layout.LEVEL_RECORD
        return artifacts.read_json(path, STAGE) if path.exists() else None

    def write_level_record(self, i: int, name: str, record: dict) -> None:
        artifacts.write_json(self.level_dir(i, name) / layout.LEVEL_RECORD, record)

    def digests(self) -> dict[str, str]:
        """sha256 of what a finished run's manifest vouches for: ``RUN_FILES``, every adapter
        and every level record."""
        names = [f for f in RUN_FILES if (self.path / f).is_file()] + self.adapter_files()
        names += [artifacts.relative(p, self.path) for p in self.level_records()]
        return artifacts.digests(self.path, names)

    # ---- resuming -------------------------------------------------------------------------
    @staticmethod
    def resume_point(ckpt_dir: Path, tidy: bool = True) -> tuple[int, Path | None]:
        """The newest checkpoint of ``ckpt_dir`` a resume can use (full trainer state); ``tidy``:
        removes half-written ones (only the main process of a multi-process job does)."""
        usable = {s: p for s, p in layout.list_checkpoints(ckpt_dir).items() if (p / layout.OPTIMIZER_FILE).exists()}
        step, path = max(usable.items()) if usable else (0, None)
        for s, p in layout.list_checkpoints(ckpt_dir, complete=False).items():
            if s > step and tidy:  # written after the last usable state: never trusted
                shutil.rmtree(p)
        return step, path

    def previous_rows(self, upto: int) -> tuple[list[dict], list[dict]]:
        """Steps and groups recorded up to step ``upto`` (those after it belong to the lost part of the run)."""
        out = []
        for path in (self.steps, self.groups):
            df = pd.read_parquet(path) if upto and path.exists() else pd.DataFrame(columns=["step"])
            df = df[df["step"] <= upto]
            if path == self.groups and len(df):
                df = df.assign(rewards=df["rewards"].map(list), scores=df["scores"].map(list))
            out.append(df.to_dict("records"))
        return out[0], out[1]

    # ---- damage ---------------------------------------------------------------------------
    def adapter_files(self) -> list[str]:
        """The files of every checkpoint's adapter, relative to the run folder (trainer state,
        which a later stage never reads, left out: only the newest checkpoint keeps it)."""
        out = []
        for path in layout.list_checkpoints(self.checkpoints, complete=False).values():
            out += [artifacts.relative(f, self.path) for f in sorted(path.rglob("*"))
                    if f.is_file() and f.name not in layout.ADAPTER_STATE_FILES]
        return out

    def damaged(self, manifest: dict) -> list[str]:
        """What a finished run lost or had changed since it finished: files its manifest recorded
        (``sha256``: records, adapters), the checkpoints it lists, and its params and TRL config."""
        bad = artifacts.damaged(self.path, manifest)
        bad += [c for c in manifest.get("checkpoints", []) if not (self.path / c / layout.ADAPTER_CONFIG).is_file()]
        bad += [f for f in RUN_FILES if f not in manifest.get("sha256", {}) and not (self.path / f).is_file()]
        return bad

    def damaged_level_record(self) -> str | None:
        """What is wrong with the first unreadable ``levels/*/level.json`` of the run, or None."""
        for path in self.level_records():
            try:
                artifacts.read_json(path, STAGE)
            except artifacts.ArtifactError as err:
                return str(err)
        return None

    def check_nothing_lost(self, saved: set[int]) -> None:
        """Before a run is recorded: every checkpoint this session found or saved, and the run's
        params and TRL config, are still there. A run folder deleted (or thinned) while it trained
        is set aside and refused, not recorded as finished with what was written after."""
        have = set(layout.list_checkpoints(self.checkpoints, complete=False))
        lost = [f"{layout.CHECKPOINTS}/checkpoint-{s}" for s in sorted(saved - have)]
        lost += [f for f in (layout.PARAMS, layout.TRL_CONFIG) if not (self.path / f).is_file()]
        if lost:
            left = (f"kept what is left as {artifacts.set_aside(self.path, 'damaged').name}" if self.path.exists()
                    else "nothing of it is left")
            raise artifacts.ArtifactError(f"{self.path}: files of the run disappeared while it trained ({', '.join(lost)}); "
                                          f"{left}; rerun the train stage (03_train), which trains the run anew")

    def set_aside(self, old_key: dict) -> Path:
        """Move a run trained with other settings out of the way, never deleting it."""
        base = self.path.with_name(f"{self.path.name}.superseded-{layout.key_hash(old_key)}")
        target, n = base, 1
        while target.exists():
            n += 1
            target = base.with_name(f"{base.name}-{n}")
        self.path.rename(target)
        return target

    def _set_aside_damaged(self, message: Callable[[Path], str], is_main: bool) -> None:
        """Move a folder that cannot be trusted aside (``<run>.damaged-<n>``) and warn with
        ``message(kept folder)``; under a launcher only the main process moves files."""
        if is_main:
            kept = artifacts.set_aside(self.path, "damaged")
            warnings.warn(message(kept), stacklevel=4)

    # ---- what the folder holds --------------------------------------------------------------
    def _read_manifest(self, is_main: bool) -> dict | None:
        """The run's manifest; a damaged one (its records cannot be trusted) is set aside: None."""
        try:
            manifest = artifacts.read_manifest(self.manifest_path, STAGE)
            if manifest is not None and not {"key", "status", "steps_done"} <= set(manifest):
                raise artifacts.ArtifactError(f"{self.manifest_path}: damaged, not a run manifest")
            return manifest
        except artifacts.ArtifactError as err:
            why = str(err)
            self._set_aside_damaged(lambda kept: f"{self.path.name}: {why}; kept the run as {kept.name} and training "
                                    "this one anew", is_main)
            return None

    def previous(self, key: dict, max_steps: int, is_main: bool) -> tuple[dict | None, bool]:
        """What the folder holds for a training of ``key`` that ends at ``max_steps`` (the run's
        steps, :meth:`diffgrpo.params.Config.run_steps`): (its manifest, finished?) when it can
        be resumed or kept, (None, False) when the run trains anew. What cannot be trusted (a
        damaged manifest or level record, checkpoints without a manifest, other settings, files
        damaged since the run finished) is set aside, never deleted, by the main process."""
        manifest = self._read_manifest(is_main)
        if manifest is not None and manifest["key"] == key and self.damaged_level_record():
            # an interrupted EPRLI run whose record of a finished level is damaged: the rows of the
            # levels after it cannot be put back in order without it, so the run trains anew
            self._set_aside_damaged(lambda kept: f"{self.path.name}: {RunFolder(kept).damaged_level_record()}; kept "
                                    f"the run as {kept.name} and training this one anew", is_main)
            manifest = None
        if manifest is None and self.path.exists() and layout.list_checkpoints(self.checkpoints, complete=False):
            # a run writes its manifest before its first step: checkpoints without one are the rest of a
            # folder that lost files (deleted while it trained); its history cannot be trusted
            self._set_aside_damaged(lambda kept: f"{self.path.name}: checkpoints without a manifest (the folder lost "
                                    f"files); kept it as {kept.name} and training this one anew", is_main)
        if manifest is not None and manifest["key"] != key:
            if is_main:
                kept = self.set_aside(manifest["key"])
                warnings.warn(f"{self.path.name}: the run there was trained with other settings "
                              f"({', '.join(_changed(manifest['key'], key))} differ); kept it as {kept.name} and "
                              "training this one anew", stacklevel=2)
            manifest = None
        if manifest is None:
            return None, False
        if manifest["steps_done"] > max_steps:
            raise ValueError(f"{self.path}: {manifest['steps_done']} steps done, more than the run's {max_steps} "
                             "(train.max_steps, or train.epochs passes over its selection); raise them, or delete "
                             "that folder to retrain it")
        if not finished(manifest, max_steps):
            return manifest, False
        bad = self.damaged(manifest)  # every process sees the same files
        if not bad:
            return manifest, True
        if is_main:
            kept = self.set_aside(manifest["key"])
            warnings.warn(f"{self.path.name}: {bad} damaged since the run finished (its records cannot be "
                          f"rebuilt without training); kept it as {kept.name} and training this one anew",
                          stacklevel=2)
        return None, False
