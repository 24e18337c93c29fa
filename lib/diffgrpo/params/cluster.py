"""The ``cluster:`` params section: what each notebook job asks a Slurm cluster for.

Read only by the Slurm executor (``python -m diffgrpo.study <params> --executor slurm``,
:mod:`diffgrpo.study.slurm`); a local study ignores it, and no run's key holds it. Every job gets
the section's resources; ``stages`` changes them for one stage (a GPU for training and
evaluation, none for the selection)::

    cluster:
      partition: gpu
      account: my-lab
      time: "4:00:00"
      cpus: 8
      mem_gb: 64
      gpus: 1
      stages:
        02_select: {gpus: 0, cpus: 2, mem_gb: 8}
        03_train: {time: "1-00:00:00"}
      sbatch: {constraint: a100}

A pydantic model: a key that is not here, a value of the wrong type or out of range is a
:class:`params.ParamsError` naming the params file and the key (:func:`check`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from diffgrpo.params.files import ParamsError
from diffgrpo.params.stages import STAGES

Stage = Literal["01_probe", "02_select", "03_train", "04_evaluate", "05_analyze"]
assert Stage.__args__ == STAGES  # type: ignore[attr-defined]

#: sbatch options the executor sets itself (or the keys above set): refused in ``cluster.sbatch``
RESERVED = {"job-name": "the executor names each job <study>/<stage>/<run>",
            "output": "each job's log goes beside its executed notebook", "error": "as output",
            "dependency": "the study's graph sets each job's dependencies",
            "kill-on-invalid-dep": "always yes: a failed job's dependants are cancelled",
            "partition": "cluster.partition", "account": "cluster.account", "qos": "cluster.qos",
            "time": "cluster.time", "cpus-per-task": "cluster.cpus", "mem": "cluster.mem_gb",
            "gpus-per-node": "cluster.gpus", "gres": "cluster.gpus", "array": "one job per notebook",
            "open-mode": "set by submitit", "signal": "set by submitit (it requeues on a time limit)"}

_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def minutes(time: str | int) -> int:
    """A Slurm time limit as whole minutes (rounded up): ``90``, ``"90"`` (minutes),
    ``"MM:SS"``, ``"H:MM:SS"``, ``"D-H"``, ``"D-H:MM"``, ``"D-H:MM:SS"`` (sbatch's formats)."""
    if isinstance(time, bool):
        raise ValueError(f"{time!r} is not a time limit")
    if isinstance(time, int):
        parts_s = time * 60
    else:
        m = _TIME.match(str(time).strip())
        if not m:
            raise ValueError(f"{time!r} is not a Slurm time limit (minutes, H:MM:SS or D-HH:MM:SS)")
        d, a, b, c = (int(m[k]) if m[k] is not None else None for k in "dabc")
        if d is None:  # minutes | minutes:seconds | hours:minutes:seconds
            parts_s = a * 60 if b is None else (a * 60 + b if c is None else a * 3600 + b * 60 + c)
        else:  # days-hours | days-hours:minutes | days-hours:minutes:seconds
            parts_s = d * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if parts_s <= 0:
        raise ValueError(f"{time!r}: a time limit must be positive")
    return math.ceil(parts_s / 60)


class Resources(BaseModel):
    """One stage's resources where they differ from the section's (null: the section's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    time: str | int | None = Field(None, description="time limit of each job of the stage")
    cpus: int | None = Field(None, ge=1, description="CPUs per job (sbatch --cpus-per-task)")
    mem_gb: float | None = Field(None, gt=0, description="memory per job, GB (sbatch --mem)")
    gpus: int | None = Field(None, ge=0, description="GPUs per job (sbatch --gpus-per-node)")

    @field_validator("time")
    @classmethod
    def _time(cls, v):
        if v is not None:
            minutes(v)
        return v


class ClusterConfig(BaseModel):
    """``cluster:`` in params; every key's value is set by params/defaults.yaml (the one place
    defaults live)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: str | None = Field(description="sbatch --partition (null: the cluster's default)")
    account: str | None = Field(description="sbatch --account (null: the user's default)")
    qos: str | None = Field(description="sbatch --qos (null: none)")
    time: str | int = Field(description="each job's time limit: minutes, H:MM:SS or D-HH:MM:SS")
    cpus: int = Field(ge=1, description="CPUs per job")
    mem_gb: float = Field(gt=0, description="memory per job, GB")
    gpus: int = Field(ge=0, description="GPUs per job")
    stages: dict[Stage, Resources] = Field(description="per stage, the resources that differ from the above")
    sbatch: dict[str, str | int | float | bool] = Field(
        description="further sbatch options by their long name, e.g. {constraint: a100, exclude: node07}")

    @field_validator("time")
    @classmethod
    def _time(cls, v):
        minutes(v)
        return v

    @field_validator("sbatch")
    @classmethod
    def _sbatch(cls, v: dict) -> dict:
        for key in v:
            name = key.replace("_", "-").lstrip("-")
            if name in RESERVED:
                raise ValueError(f"{key}|is not yours to set here: {RESERVED[name]}")
            if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                raise ValueError(f"{key}|is not an sbatch long option name (e.g. constraint, exclude)")
        return v

    def resources(self, stage: str) -> dict[str, Any]:
        """The submitit parameters of one job of ``stage`` (``slurm_*`` keys of its executor)."""
        own = self.stages.get(stage)  # type: ignore[call-overload]
        pick = lambda key: getattr(own, key) if own is not None and getattr(own, key) is not None else getattr(self, key)  # noqa: E731
        out: dict[str, Any] = {"timeout_min": minutes(pick("time")), "cpus_per_task": pick("cpus"),
                               "mem_gb": pick("mem_gb"), "slurm_additional_parameters": {}}
        if pick("gpus"):
            out["gpus_per_node"] = pick("gpus")
        for key in ("partition", "account", "qos"):
            if getattr(self, key) is not None:
                out[f"slurm_{key}"] = getattr(self, key)
        out["slurm_additional_parameters"].update({k.replace("_", "-").lstrip("-"): v for k, v in self.sbatch.items()})
        return out


def check(raw: Any, where: Callable[[str], str]) -> ClusterConfig:
    """``raw`` (the merged ``cluster`` mapping) as a :class:`ClusterConfig`; else a
    ``params.ParamsError`` naming the file that set the key (``where(dotted key)``) and the key."""
    if not isinstance(raw, dict):
        raise ParamsError(f"{where('cluster')}: `cluster` must be a mapping, got {raw!r}")
    try:
        return ClusterConfig.model_validate(raw)
    except ValidationError as err:
        e = err.errors()[0]
        loc = [str(p) for p in e["loc"]]
        # past the key itself, a union's error names the member type it tried (`time.str`)
        loc = loc[:3 if loc[0] == "stages" else 2 if loc[0] == "sbatch" else 1]
        msg = e["msg"].removeprefix("Value error, ")
        if loc == ["sbatch"] and "|" in msg:  # the option at fault, named by the validator
            option, msg = msg.split("|", 1)
            loc.append(option)
        if loc[0] == "stages" and len(loc) == 3 and loc[2] == "[key]":
            loc.pop()
        key = "cluster." + ".".join(loc)
        if e["type"] == "extra_forbidden":
            model = ClusterConfig if len(loc) == 1 else Resources
            known = sorted(model.model_fields)
            why = f"unknown key `{key}`; known keys here: {known}"
        elif e["type"] == "missing":
            why = f"key `{key}` is not set (params/defaults.yaml sets every cluster key)"
        elif e["type"] == "literal_error" and len(loc) == 2 and loc[0] == "stages":
            why = f"`{key}`: {loc[1]!r} is not a stage; stages are {list(STAGES)}"
        elif loc[0] == "sbatch" and len(loc) == 2:
            why = f"`{key}` {msg}"
        else:
            why = f"`{key}` = {e.get('input')!r}: {msg}"
        # the file: the one that set the key, else the one that set its mapping
        parts = key.split(".")
        file = next((where(".".join(parts[:i])) for i in range(len(parts), 0, -1) if where(".".join(parts[:i]))),
                    "params")
        raise ParamsError(f"{file}: {why}") from None


def settings(cfg) -> ClusterConfig:
    """A loaded study's ``cluster:`` section (validated when the params were loaded)."""
    return cfg.cluster
