"""The compute: what each run cost (its manifest's ``ledger``, :mod:`diffgrpo.train.ledger`) and
each arm's gain against its total rollouts (probe completions charged + training completions
generated). The probe is charged in full to every arm whose selection read it.

Each run's labelled prompts (:func:`diffgrpo.train.ledger.labelled_prompts`: the distinct prompts
whose reward its training computed, with the probe's pool where it is charged the probe) are
computed here from the study's files (``groups.parquet``, the probe's ``prompts.parquet``), so a
study trained before the ledger had the column, a committed one included, shows it too.

Writes ``compute.csv`` / ``compute.md`` (one row per run) and ``fig_gain_vs_rollouts.png``
(each arm's gain with its 95% interval at its mean total rollouts). Its part of ``summary.json``::

    {"compute": {"probe_charge": how a shared probe is charged,
                 "runs": [{"strategy", "seed", "probe_completions", "train_completions", "kept", "dropped",
                           "total_rollouts", "labelled_prompts", "total_tokens", "cpu_seconds", "gpu_seconds",
                           "gain_pp"}],
                 "arms": {arm: {"total_rollouts", "labelled_prompts" (mean over its runs), "gain_pp", "ci95"}}}}

A run trained before the ledger existed has nulls in its row (and no point in the figure).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from diffgrpo.analysis.tables import DIGITS, method_of
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.store.artifacts import save_figure
from diffgrpo.analysis.figures import method_lines
from diffgrpo.store import artifacts, layout
from diffgrpo.train.ledger import PROBE_CHARGE, arm_kind, charged_part, labelled_prompts, probe_prompt_ids

TABLES = ("compute",)
FIGURES = ("fig_gain_vs_rollouts",)
MEASURED = ("cpu_seconds", "gpu_seconds")  # the machine's clock, not a result: two runs of one study differ here


def ledger_rows(study) -> pd.DataFrame:
    """One row per complete run: its ledger's numbers beside its gain."""
    gains = study.runs.set_index(["strategy", "seed"])["gain_pp"]
    labelled = run_labelled_prompts(study)
    rows = []
    for m in study.manifests:
        led = m.get("ledger") or {}
        probe, train = led.get("probe") or {}, led.get("train") or {}
        rows.append({"strategy": m["strategy"], "seed": int(m["seed"]), "probe_completions": probe.get("completions"),
                     "train_completions": train.get("completions_generated"), "kept": train.get("completions_kept"),
                     "dropped": train.get("completions_dropped"), "total_rollouts": led.get("total_rollouts"),
                     "labelled_prompts": labelled.get(m["run_id"]), "total_tokens": led.get("total_tokens"),
                     "cpu_seconds": _sum(probe.get("cpu_seconds"), train.get("cpu_seconds")),
                     "gpu_seconds": _sum(probe.get("gpu_seconds"), train.get("gpu_seconds")),
                     "gain_pp": float(gains.get((m["strategy"], int(m["seed"])), np.nan))})
    return pd.DataFrame(rows)


def run_labelled_prompts(study) -> dict[str, int | None]:
    """Each complete run's labelled prompts (run_id -> count), from its ``groups.parquet`` and the
    pool probe's prompt ids where its arm is charged the probe (read once per part)."""
    runs, probe, pool = layout.runs_dir(layout.study_dir(study.cfg)), layout.probe_dir(study.cfg), {}
    out = {}
    for m in study.manifests:
        arm = m["strategy"]
        acfg = study.cfg.for_arm(arm)
        part = charged_part(acfg, arm)
        if part is not None and part not in pool:
            pool[part] = probe_prompt_ids(probe, part)
        groups = artifacts.read_parquet(runs / m["run_id"] / layout.GROUPS, "03_train", columns=["prompt_id"])
        charged = pool.get(part)
        out[m["run_id"]] = None if part is not None and charged is None else labelled_prompts(acfg, arm, groups, charged)
    return out


def _sum(a, b):
    return None if a is None or b is None else round(a + b, 1)


def arm_rollouts(study) -> pd.DataFrame:
    """Per arm: mean total rollouts over its runs, and its gain with its interval (study.arms)."""
    rows = ledger_rows(study)
    mean = {c: pd.to_numeric(rows[c], errors="coerce").groupby(rows["strategy"]).mean()
            for c in ("total_rollouts", "labelled_prompts")}
    return study.arms[["strategy", "gain_pp", "ci_low", "ci_high"]].assign(
        **{c: study.arms["strategy"].map(m) for c, m in mean.items()})


def plot(arms: pd.DataFrame) -> Figure:
    """Each arm's gain at its mean total rollouts: one line per method across its budgets (an arm
    ``<method>.<label>``), its kind by line style (:func:`diffgrpo.analysis.figures.method_lines`)."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    method_lines(ax, arms, "total_rollouts", "gain_pp", "ci_low", "ci_high", method_of)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="total rollouts (probe charged + training generated; points dodged)",
           ylabel="gain (points), 95% interval")
    ax.legend(fontsize=7, ncol=2)
    return fig


def write(study) -> dict:
    rows = ledger_rows(study)
    study.write_table("compute", "Compute per run: completions (rollouts), labelled prompts, tokens and seconds; the "
                      f"probe is charged {PROBE_CHARGE}", rows.round(DIGITS),
                      note="labelled_prompts: the distinct prompts whose reward the run computed (every training group, "
                      "pilot rounds and dropped groups included), with the probe's pool where the run is charged the probe.")
    arms = arm_rollouts(study)
    if arms["total_rollouts"].notna().any():
        kinds = arms["strategy"].map(lambda a: arm_kind(study.cfg, a))
        save_figure(plot(arms.assign(kind=kinds)), study.out / "fig_gain_vs_rollouts.png")
    return {"compute": {
        "probe_charge": PROBE_CHARGE,
        "runs": rows.astype(object).where(rows.notna(), None).to_dict("records"),
        "arms": {r["strategy"]: {"total_rollouts": _round(r["total_rollouts"]),
                                 "labelled_prompts": _round(r["labelled_prompts"]), "gain_pp": _round(r["gain_pp"]),
                                 "ci95": [_round(r["ci_low"]), _round(r["ci_high"])]} for r in arms.to_dict("records")},
    }}
