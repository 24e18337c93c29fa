"""TRL's trackers (``train.report_to``): only the one a params file names runs, it is checked
before any work, and its local records stay under the outputs root.

``tensorboard`` writes event files into each run's folder (:func:`diffgrpo.store.layout.tensorboard_dir`);
``wandb``, ``mlflow`` and ``trackio`` keep their local records in ``outputs/<study>/trackers/<name>/``
(:func:`environment`, applied by the training process). ``wandb`` sends a run to its server unless
``WANDB_MODE=offline``; ``mlflow`` sends it only to a ``MLFLOW_TRACKING_URI`` the user set; a
trackio Space (``trackio_space_id``) is refused in params like every publishing option
(:data:`diffgrpo.params.NOT_FROM_PARAMS`). No tracker is started that ``train.report_to`` does not name.
"""

from __future__ import annotations

import importlib.util
import netrc
import os
from pathlib import Path

from diffgrpo.params import Config
from diffgrpo.store import layout
from diffgrpo.store.artifacts import outputs_root

#: trackers that write nothing outside the run's folder
LOCAL = ("none", "tensorboard")
#: each other tracker: its package, and the environment variable that puts its local records under the outputs root
STORES = {"wandb": ("wandb", "WANDB_DIR"), "mlflow": ("mlflow", "MLFLOW_TRACKING_URI"),
          "trackio": ("trackio", "TRACKIO_DIR")}


class TrackerError(ValueError):
    """A tracker ``train.report_to`` names cannot run here (not installed, not configured)."""


def named(cfg: Config) -> list[str]:
    """The trackers the study's runs report to (each arm's own ``train.report_to``), in order."""
    return list(dict.fromkeys(cfg.for_arm(a.name).train.report_to for a in cfg.arms))


def check(cfg: Config) -> None:
    """Fail now, naming ``train.report_to``, when a tracker it names is not installed or (wandb)
    neither logged in nor offline, rather than after the probe and the selection have run."""
    for name in named(cfg):
        package = "tensorboard" if name == "tensorboard" else STORES.get(name, (None,))[0]
        if package and importlib.util.find_spec(package) is None:
            raise TrackerError(f"train.report_to = {name}: the package `{package}` is not installed in this "
                               f"environment; install it, or set `train.report_to: tensorboard` (event files in "
                               "each run's folder) or `none`")
        if name == "wandb" and not _wandb_configured():
            raise TrackerError("train.report_to = wandb: wandb is not logged in (no WANDB_API_KEY, no `wandb login`); "
                               "log in to send the runs to wandb, or set WANDB_MODE=offline to keep them under "
                               f"{outputs_root()}/<study>/trackers/wandb/")


def _wandb_configured() -> bool:
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun") or os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def store_dir(cfg: Config, name: str) -> Path:
    """``outputs/<study>/trackers/<name>/``: a tracker's local records."""
    return layout.study_dir(cfg) / "trackers" / name


def environment(cfg: Config) -> dict[str, str]:
    """The variables that keep the named trackers' local records under the outputs root (mlflow's
    default store would land in the folder the kernel runs in, ``notebooks/``); a variable the
    user set stays theirs."""
    out = {}
    for name in named(cfg):
        if name in STORES and not os.environ.get(STORES[name][1]):
            folder = store_dir(cfg, name)
            out[STORES[name][1]] = folder.as_uri() if name == "mlflow" else str(folder)
    return out
