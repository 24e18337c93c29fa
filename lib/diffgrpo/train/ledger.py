"""A run's compute ledger (its manifest's ``ledger``, the report's ``compute`` section): what the
run cost in completions (rollouts), tokens and seconds, the probe that chose its prompts included.

How the probe is charged: **in full to every run whose selection read it** (a policy that reads
p_hat, :attr:`diffgrpo.policies.Policy.reads_probe`; a posterior warm-started from it,
``train.online.warm_start``; or an arm that says so, ``charge_probe: true``). A policy that
reads only the greedy one-sample pass (``base_wrong``: paper 001's cheaper filter) is charged
that pass alone, its completions and tokens (its seconds are not measured apart from the
probe's: None). A probe that several arms share is charged to each of them in full, not split:
each arm's selection needed the whole probe, and an arm compared alone (one arm of a study
against an online method) would otherwise look cheaper the more arms shared its probe. A run
whose selection did not read it (``random``, ``all``) is charged nothing for it.

Training: every completion generated (those of groups dynamic sampling or an online band
dropped too), kept and dropped, their tokens (``groups.parquet``'s ``completion_tokens``; None
for groups recorded before it existed), and the seconds of the sessions that finished: CPU
seconds of the training process, GPU seconds (wall seconds x processes on a cuda device; 0 on
a CPU). ``total_rollouts`` = probe completions charged + training completions generated.

Labelled prompts (``labelled_prompts``, the ledger's second column; 003's annotation budget): the
distinct prompts whose reward the run computed, every group of ``groups.parquet`` (pilot rounds
and dropped groups included), together with the probe's pool prompts where the run is charged
the probe (the probe computed each one's reward). An online arm that draws from the whole pool
labels what it drew; an offline arm, the pool it probed. None when a run's groups do not name
their prompts or the probe it is charged is not there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diffgrpo import online
from diffgrpo.params import Config
from diffgrpo.params.budgets import budget_level, charged_part, charges_probe, planned_rollouts  # noqa: F401  (the plan's, re-read here)
from diffgrpo.store import artifacts, layout

#: how a probe several arms share is charged, in words (the manifest and the report say it)
PROBE_CHARGE = (
    "in full to every arm whose selection read it (each arm's selection needed the whole probe); the greedy "
    "one-sample pass alone to an arm that read only it (base_wrong, base_right)")


def refreshed(cfg: Config, arm: str, manifest: dict, groups: list[dict] | pd.DataFrame | None = None) -> dict | None:
    """A finished run's ledger with its probe charge recomputed from today's params and probe
    files (what its training generated and took is the run's own, kept), or None when it is
    the manifest's already. ``charge_probe`` and the probe decide no number the run learns, so
    they are not in its key: a run kept by ``03_train`` gets the ledger today's settings say
    (else switching ``charge_probe`` kept the earlier setting's ledger, and the report's compute
    section contradicted its budgets section). ``groups``: the run's (its ``groups.parquet``), for
    its labelled prompts (:func:`labelled_prompts`), which follow the probe charge too."""
    old = manifest.get("ledger")
    if not old or "train" not in old:
        return None  # a run made before the ledger: the report says nothing rather than a guess
    part = charged_part(cfg, arm)
    probe = {"charged": part is not None, "part": part, "charge": PROBE_CHARGE,
             **(probe_cost(cfg, part) if part else {"completions": 0, "tokens": 0, "cpu_seconds": 0.0, "gpu_seconds": 0.0})}
    labelled = {} if groups is None else {"labelled_prompts": labelled_prompts(cfg, arm, groups)}
    if probe == old.get("probe") and all(old.get(k) == v for k, v in labelled.items()):
        return None
    return {"probe": probe, "train": old["train"], **_totals(probe, old["train"]), **labelled}


def _totals(probe: dict, train: dict) -> dict[str, Any]:
    unknown = probe["completions"] is None
    tokens = None if unknown or train.get("tokens_generated") is None else probe["tokens"] + train["tokens_generated"]
    return {"total_rollouts": None if unknown else probe["completions"] + train["completions_generated"],
            "total_tokens": tokens}


class LedgerError(FileNotFoundError):
    """A run charged the probe, whose files are not there."""


def check_probe(cfg: Config, arm: str, selection: Path) -> None:
    """A run charged the probe that chose its selection (by the select stage: its folder's
    manifest records it) needs that probe's files for its ledger; without them the ledger's
    ``total_rollouts`` would be null without a word. A selection written by hand (no select
    manifest) keeps the ledger's ``missing`` record."""
    if charged_part(cfg, arm) is None or (layout.probe_dir(cfg) / layout.PROMPTS).exists():
        return
    manifest = artifacts.read_manifest(layout.select_dir(cfg) / layout.MANIFEST, "02_select") or {}
    if selection.name not in manifest.get("sha256", {}):
        return
    why = "charge_probe: true" if cfg.arm(arm).charge_probe else "its policy reads the probe"
    raise LedgerError(f"{layout.probe_dir(cfg) / layout.PROMPTS}: arm {arm!r} is charged the probe ({why}) and "
                      "the probe is not there (deleted, or probe settings changed since the select stage), so its "
                      "compute ledger cannot be written; run the probe stage (01_probe) and the select stage "
                      "(02_select) again" + (", or drop charge_probe" if cfg.arm(arm).charge_probe else ""))


def probe_cost(cfg: Config, part: str = "all") -> dict[str, Any]:
    """The pool probe's completions and tokens (K samples a prompt, and the greedy one-sample
    probe's when it ran; ``part="one_sample"``: that pass alone) from its files, and the seconds
    its manifest recorded (None: a probe made before the ledger, or a part, which is not timed
    apart). No probe folder: None for each, and ``missing`` its path."""
    out = layout.probe_dir(cfg)
    if not (out / layout.PROMPTS).exists():  # a selection written without a probe (tests, a plugin's own)
        return {"completions": None, "tokens": None, "cpu_seconds": None, "gpu_seconds": None,
                "missing": artifacts.relative(out, layout.study_dir(cfg))}
    completions, tokens = 0, 0.0
    if part == "all":
        prompts = artifacts.read_parquet(out / layout.PROMPTS, "01_probe")
        completions, tokens = int(prompts["k"].sum()), float((prompts["k"] * prompts["mean_tokens"]).sum())
    if (out / layout.ONE_SAMPLE).exists():
        one = artifacts.read_parquet(out / layout.ONE_SAMPLE, "01_probe")
        completions += len(one)
        tokens += float(one["num_tokens"].sum())
    seconds = artifacts.read_json(out / layout.MANIFEST, "01_probe").get("seconds") or {} if part == "all" else {}
    return {"completions": completions, "tokens": int(round(tokens)),
            "cpu_seconds": seconds.get("cpu"), "gpu_seconds": seconds.get("gpu")}


def training_cost(groups: list[dict]) -> dict[str, Any]:
    """Completions generated, kept and dropped, and their tokens, from a run's groups."""
    df = pd.DataFrame(groups)
    if df.empty:
        return {"completions_generated": 0, "completions_kept": 0, "completions_dropped": 0, "tokens_generated": 0}
    n = df["rewards"].map(len)
    kept = int(n[df["kept"].astype(bool)].sum())
    tokens = df["completion_tokens"] if "completion_tokens" in df else pd.Series([np.nan] * len(df))
    return {"completions_generated": int(n.sum()), "completions_kept": kept, "completions_dropped": int(n.sum()) - kept,
            "tokens_generated": None if tokens.isna().any() else int(tokens.sum())}


def ledger(cfg: Config, arm: str, groups: list[dict], seconds: dict[str, float]) -> dict[str, Any]:
    """The run's ledger: the probe's charge, its training's cost (:func:`training_cost`) and
    ``seconds`` (cpu, gpu, wall: every finished session's), and the totals."""
    part = charged_part(cfg, arm)
    probe = {"charged": part is not None, "part": part, "charge": PROBE_CHARGE,
             **(probe_cost(cfg, part) if part else {"completions": 0, "tokens": 0, "cpu_seconds": 0.0, "gpu_seconds": 0.0})}
    train = {**training_cost(groups), **{f"{k}_seconds": round(v, 1) for k, v in seconds.items()}}
    return {"probe": probe, "train": train, **_totals(probe, train), "labelled_prompts": labelled_prompts(cfg, arm, groups)}


def probe_prompt_ids(probe_dir: Path, part: str = "all") -> set[str] | None:
    """The pool prompts the probe in ``probe_dir`` computed a reward for (its ``prompts.parquet``;
    ``part="one_sample"``: the greedy pass's ``one_sample.parquet`` where it is there, the same
    pool), or None when neither file is there."""
    # one_sample.parquet is a table of completions (``prompt_id``), prompts.parquet one of prompts (``id``)
    names = ((layout.ONE_SAMPLE, "prompt_id"), (layout.PROMPTS, "id")) if part == "one_sample" else ((layout.PROMPTS, "id"),)
    for name, column in names:
        if (probe_dir / name).exists():
            return set(artifacts.read_parquet(probe_dir / name, "01_probe", columns=[column])[column])
    return None


def labelled_prompts(cfg: Config, arm: str, groups: list[dict] | pd.DataFrame,
                     probe_ids: set[str] | None = None) -> int | None:
    """The labelled prompts of a run of ``arm`` (module docstring): the distinct prompt ids of
    ``groups`` (every group, kept or dropped, pilot rows included), with the probe's pool prompts
    where the arm is charged the probe (``probe_ids``: those, already read; else read from the
    probe folder ``cfg`` names). None: groups without prompt ids, or a charged probe not there."""
    df = pd.DataFrame(groups)
    if len(df) and "prompt_id" not in df:
        return None
    ids = set(df["prompt_id"]) if len(df) else set()
    part = charged_part(cfg, arm)
    if part is not None:
        pool = probe_ids if probe_ids is not None else probe_prompt_ids(layout.probe_dir(cfg), part)
        if pool is None:
            return None
        ids |= pool
    return len(ids)


def arm_kind(cfg: Config, arm: str) -> str:
    """``online`` (train.online or dynamic sampling chooses inside training), ``offline`` (its
    selection read the probe) or ``no probe`` (neither: random or the whole pool as it is)."""
    acfg = cfg.for_arm(arm)
    if acfg.train.online.method != online.NONE or acfg.train.dynamic_sampling.enabled:
        return "online"
    return "offline" if charges_probe(acfg, arm) else "no probe"
