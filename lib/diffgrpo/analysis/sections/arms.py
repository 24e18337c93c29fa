"""The arms: each arm's gain over the base model (points, mean over seeds) with its 95%
interval, and its learnable % observed (first steps, whole run) and predicted from the probe
(plug-in p_hat and Beta posterior: :mod:`diffgrpo.analysis.learnability`).

Writes ``arms.csv`` / ``arms.md``. Its part of ``summary.json``::

    {"arms": {arm: {"gain_pp", "ci95", "learnable_pct", "learnable_first_pct",
                    "predicted_learnable_pct", "predicted_posterior_pct", "n_seeds",
                    "reward": "verifier" or "control",
                    "verifier_mixed_pct" (control arms only: the verifier's scores' learnable %)}},
     "bootstrap": {"resamples", "seed", "level", "over", "n_prompts", "interval", "max_resamples"}}
"""

from __future__ import annotations

from diffgrpo.analysis.tables import DIGITS, FIRST_STEPS_FRAC, markdown
from diffgrpo.analysis.uncertainty import _round
from diffgrpo.stats.holm import MAX_REFINE
from diffgrpo.store.artifacts import write_csv, write_text

TABLES = ("arms",)
FIGURES = ()


def _arm(study, r: dict) -> dict:
    arm, runs = r["strategy"], study.runs  # column `strategy`: the arm's name
    control = arm in study.control
    return {
        "gain_pp": _round(r["gain_pp"]), "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
        "learnable_pct": _round(r["learnable_pct"]), "learnable_first_pct": _round(r["learnable_first_pct"]),
        "predicted_learnable_pct": _round(r["predicted_learnable_pct"]),
        "predicted_posterior_pct": _round(r["predicted_posterior_pct"]), "n_seeds": int(r["n_seeds"]),
        "reward": "control" if control else "verifier",
        **({"verifier_mixed_pct": _round(runs.loc[runs["strategy"] == arm, "verifier_mixed_pct"].mean())}
           if control else {}),
    }


def write(study) -> dict:
    cfg, arms, prior, seeds = study.cfg, study.arms, study.prior, study.n_seeds
    write_csv(study.out / "arms.csv", arms.round(DIGITS))
    write_text(study.out / "arms.md", f"# Arms: gain (points, {study.metric}) with its 95% interval over {study.over}; "
               f"learnable % observed (first {FIRST_STEPS_FRAC:.0%} of steps, whole run) and predicted from the probe "
               f"(plug-in p_hat; posterior: Beta({prior['alpha']:g}, {prior['beta']:g}) prior, {prior['prior']})\n\n"
               + markdown(arms.round(DIGITS)))
    return {
        "arms": {r["strategy"]: _arm(study, r) for r in arms.to_dict("records")},
        "bootstrap": {"resamples": cfg.analyze.bootstrap, "seed": cfg.analyze.seed, "level": 0.95,
                      "over": study.over, "n_prompts": len(study.scores.prompts),
                      "interval": ("prompt bootstrap (shrunk to the prompts' own variance) convolved with a t seed part "
                                   f"({seeds - 1} df)") if seeds > 1 else "percentile (test prompts)",
                      "max_resamples": MAX_REFINE * cfg.analyze.bootstrap},
    }
