"""The probe's budget: how far a cheaper probe's selections fall from the study's probe, from its
samples alone (:mod:`diffgrpo.analysis.probe_budget`): the K sweep (the first K samples of each
prompt, K = 1, 2, 4, ... up to probe.k) and adaptive probing (rounds of 2 samples, a prompt
stopped once its Beta posterior places it all-wrong or all-right), for hard, middle and easy at
the study's budget (``select.budget_*``), and the frontier of every cheaper probe tried (share of
the completions against agreement with the full probe's selection), with the cheaper probe that
keeps 90% agreement at half the completions where one does (:func:`probe_budget.cheaper_probe`).
Agreement counts ties, so a selection drawn at random agrees in part: ``chance_pct`` beside every
agreement is that chance level (a random selection of the same size from the pool, its expected
agreement, exact: :func:`probe_budget.chance_agreement`), in the table, its title and the words.

Writes ``probe_k_sweep.csv`` / ``.md``, ``probe_adaptive.csv`` / ``.md``, ``probe_frontier.csv`` /
``.md``, ``fig_probe_k_sweep.png`` and ``fig_probe_frontier.png``. Its part of ``summary.json`` (nothing when the pool's probe is not in
the study folder)::

    {"probe_budget": {"budget": prompts selected,
                      "k_sweep": [{"k", "policy", "completions", "overlap_pct", "p_hat_error",
                                   "predicted_learnable_pct"}],
                      "adaptive": {"k", "round_size", "edge", "confidence", "completions_full",
                                   "completions_adaptive", "saved_pct", "p_hat_error_pool",
                                   "policies": [{"policy", "overlap_pct", "p_hat_error"}]},
                      "frontier": [{"rule", "policy", "completions", "completions_pct", "agreement_pct",
                                    "chance_pct", "overlap_pct"}],
                      "chance_pct": {policy: a random selection's agreement on average, exact},
                      "cheaper_probe": {policy: {"rule", "completions_pct", "agreement_pct", "chance_pct"} | null},
                      "cheaper_probe_in_words": str}}
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from diffgrpo.analysis import probe_budget
from diffgrpo.analysis.tables import DIGITS
from diffgrpo.params import budget_size
from diffgrpo.policies import SelectionError
from diffgrpo.store import layout
from diffgrpo.store.artifacts import read_parquet, save_figure

TABLES = ("probe_k_sweep", "probe_adaptive", "probe_frontier")
FIGURES = ("fig_probe_k_sweep", "fig_probe_frontier")


def plot(sweep) -> Figure:
    fig = Figure(figsize=(8, 3.5))
    left, right = fig.subplots(1, 2)
    for pol, g in sweep.groupby("policy", sort=False):
        left.plot(g["k"], g["overlap_pct"], marker="o", label=pol)
        right.plot(g["k"], g["predicted_learnable_pct"], marker="o", label=pol)
    left.set(xscale="log", xlabel="probe samples per prompt (K)", ylabel="overlap with the full probe's selection (%)")
    right.set(xscale="log", xlabel="probe samples per prompt (K)", ylabel="predicted learnable % (full p_hat)")
    left.legend(fontsize=7)
    return fig


def plot_frontier(front) -> Figure:
    """Agreement against the share of completions, one panel per policy, the target corner shaded."""
    fig = Figure(figsize=(10, 3.5))
    axes = fig.subplots(1, len(probe_budget.POLICIES), sharey=True)
    for ax, pol in zip(axes, probe_budget.POLICIES):
        g = front[front["policy"] == pol]
        fixed = g["rule"].str.startswith(("first", "full"))
        ax.axvspan(0, probe_budget.HALF, ymin=probe_budget.AGREEMENT / 105, ymax=1, color="0.9", zorder=0,
                   label=f">= {probe_budget.AGREEMENT:g}% at <= {probe_budget.HALF:g}%: worth charging instead")
        ax.plot(g.loc[fixed, "completions_pct"], g.loc[fixed, "agreement_pct"], marker="o", label="first K' samples")
        ax.plot(g.loc[~fixed, "completions_pct"], g.loc[~fixed, "agreement_pct"], marker="s", linestyle="none",
                label="adaptive stopping rules")
        ax.set(title=pol, xlim=(0, 105), ylim=(0, 105), xlabel="completions (% of the full probe's)")
    axes[0].set_ylabel("agreement with the full probe's selection (%)")
    axes[0].legend(fontsize=7, loc="lower right")
    return fig


def write(study) -> dict:
    cfg = study.cfg
    path = layout.probe_dir(cfg) / layout.SAMPLES
    if not path.exists():
        return {}
    samples = read_parquet(path, "01_probe")
    n = budget_size(samples["prompt_id"].nunique(), cfg.select.budget_frac, cfg.select.budget_count)
    try:
        sweep = probe_budget.k_sweep(samples, n, cfg.train.group_size, cfg.select.seed)
        totals, per_policy = probe_budget.adaptive(samples, n, cfg.select.seed)
        front = probe_budget.frontier(samples, n, cfg.select.seed)
    except SelectionError as err:  # e.g. middle: too few prompts in the interquartile range
        study.write_table("probe_k_sweep", "Probe K sweep", pd.DataFrame(), f"Not computed: {err}")
        study.write_table("probe_adaptive", "Adaptive probing", pd.DataFrame(), f"Not computed: {err}")
        study.write_table("probe_frontier", "Cheaper probes", pd.DataFrame(), f"Not computed: {err}")
        return {}
    found = probe_budget.cheaper_probe(front)
    words = probe_budget.cheaper_probe_in_words(front, found)
    study.write_table("probe_k_sweep", f"Probe K sweep: the first K samples of each prompt, selections of {n} prompts "
                      "against the full probe's", sweep.round(DIGITS))
    study.write_table("probe_adaptive", f"Adaptive probing: rounds of {totals['round_size']}, a prompt stopped once "
                      f"its Beta(1, 1) posterior puts >= {totals['confidence']} on p < {totals['edge']} or p > "
                      f"{1 - totals['edge']:g}; {totals['completions_adaptive']:,} of {totals['completions_full']:,} "
                      f"completions ({totals['saved_pct']}% saved)", per_policy.round(DIGITS))
    chance = front.drop_duplicates("policy").set_index("policy")["chance_pct"]
    levels = ", ".join(f"{pol} {v:.0f}%" for pol, v in chance.items())
    study.write_table("probe_frontier", f"Cheaper probes against the full one ({n} prompts selected): agreement "
                      "counts ties (a prompt the full probe ranks level with one it chose), so a selection of "
                      f"{n} drawn at random from the pool agrees by chance (chance_pct, its expected agreement, "
                      f"exact: {levels}); a cheaper probe would be "
                      f"worth charging instead where it keeps >= {probe_budget.AGREEMENT:g}% agreement at <= "
                      f"{probe_budget.HALF:g}% of the completions. {words}", front.round(DIGITS))
    save_figure(plot(sweep), study.out / "fig_probe_k_sweep.png")
    save_figure(plot_frontier(front), study.out / "fig_probe_frontier.png")
    return {"probe_budget": {"budget": n, "k_sweep": sweep.round(DIGITS).to_dict("records"),
                             "adaptive": {**totals, "policies": per_policy.round(DIGITS).to_dict("records")},
                             "frontier": front.round(DIGITS).to_dict("records"),
                             "chance_pct": {pol: round(float(v), DIGITS) for pol, v in chance.items()},
                             "cheaper_probe": {pol: None if hit is None else {k: (round(v, DIGITS) if isinstance(v, float)
                                                                                  else v) for k, v in hit.items()}
                                               for pol, hit in found.items()},
                             "cheaper_probe_in_words": words}}
