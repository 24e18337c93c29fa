"""Learnability: the share of GRPO groups whose rewards differ (003 section 4.1), observed in a
run and predicted from the probe before it.

A group whose G rewards are all equal has zero advantage, so GRPO learns nothing from it. What
a run trained on is counted from its groups (:func:`learnable_pct`; for a control arm also
:func:`verifier_mixed_pct`, the verifier's scores); what a selection should give is predicted
from the probe's p_hat:

- plug-in: mean of 1 - p^G - (1-p)^G over the prompts (:func:`predicted_learnable`); it predicts
  0 for a prompt probed 0 (or K) of K;
- posterior: the same expectation under each prompt's Beta posterior
  (:func:`posterior_learnable`), with a Beta prior fit to the whole pool's probe by the method
  of moments (:func:`fit_beta_prior`; Jeffreys' Beta(0.5, 0.5) when there is nothing to fit).

The select stage writes the plug-in prediction into its summary; the report predicts each
run's (:func:`arm_predicted_learnable`, :func:`arm_posterior_learnable`) from its own selection.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diffgrpo.analysis.tables import DIGITS, FIRST_STEPS_FRAC
from diffgrpo.params import Config
from diffgrpo.store import layout
from diffgrpo.store.artifacts import read_parquet

#: the prior of the posterior prediction when the pool cannot be fit (Jeffreys)
JEFFREYS = (0.5, 0.5)


# ------------------------------------------------------------------------------------
# Observed: a run's groups
# ------------------------------------------------------------------------------------


def learnable_pct(groups: pd.DataFrame, column: str = "rewards") -> float:
    """Percent of (step, prompt) groups whose rewards trained on differ (003 section 4.1): a
    group whose rewards are all equal has zero advantage, so GRPO learns nothing from it.
    Recomputed from the reward vectors, not the logged flag."""
    if groups.empty:
        raise ValueError("no (step, prompt) groups: learnable % is undefined")
    return 100.0 * float(groups[column].map(lambda r: np.ptp(np.asarray(r, float)) > 0).mean())


def verifier_mixed_pct(groups: pd.DataFrame) -> float:
    """Percent of groups whose *verifier scores* differ: the learnable % the run would have had
    on the verifier's reward (equal to :func:`learnable_pct` for an arm that trains on it)."""
    return learnable_pct(groups, "scores")


def first_steps(groups: pd.DataFrame, steps: int) -> pd.DataFrame:
    """The groups of the first ``FIRST_STEPS_FRAC`` of a run's ``steps`` (at least step 1)."""
    return groups[groups["step"] <= max(1, int(np.ceil(FIRST_STEPS_FRAC * steps)))]


# ------------------------------------------------------------------------------------
# Predicted: a selection's p_hat
# ------------------------------------------------------------------------------------


def predicted_learnable(p_hat: np.ndarray, group_size: int) -> float:
    """Expected share of groups with mixed rewards: mean of 1 - p^G - (1-p)^G."""
    p = np.asarray(p_hat, dtype=float)
    return float(np.mean(1 - p**group_size - (1 - p) ** group_size))


def fit_beta_prior(n_correct: np.ndarray, k: np.ndarray | int) -> tuple[float, float]:
    """Beta(alpha, beta) prior of the prompts' success rates, fit to the pool's probe by the
    method of moments of the beta-binomial: the mean m of p_hat and its spread beyond the
    binomial's (Var p_hat = m (1 - m) / K x (1 + (K - 1) rho), rho = 1 / (alpha + beta + 1)).
    Jeffreys' Beta(0.5, 0.5) when the pool is too small or shows no spread to fit."""
    n_correct, k = np.asarray(n_correct, float), np.broadcast_to(np.asarray(k, float), np.shape(n_correct))
    if len(n_correct) < 10 or k.min() < 2:
        return JEFFREYS
    p = n_correct / k
    m, v, kk = p.mean(), p.var(ddof=1), k.mean()
    if not 0 < m < 1:
        return JEFFREYS
    rho = float(np.clip((kk * v / (m * (1 - m)) - 1) / (kk - 1), 1e-3, 1 - 1e-3))
    total = 1 / rho - 1
    return float(m * total), float((1 - m) * total)


def posterior_learnable(n_correct: np.ndarray, k: np.ndarray | int, group_size: int,
                        prior: tuple[float, float] = JEFFREYS) -> float:
    """Expected share of groups with mixed rewards under each prompt's posterior success rate,
    Beta(alpha + n_correct, beta + k - n_correct): mean of 1 - E[p^G] - E[(1-p)^G], where
    E[p^G] = B(a + G, b) / B(a, b). Unlike the plug-in, a prompt probed 0 of K is not certain
    to stay unsolved."""
    from scipy.special import betaln

    n_correct, k = np.asarray(n_correct, float), np.asarray(k, float)
    a, b = prior[0] + n_correct, prior[1] + k - n_correct
    all_right = np.exp(betaln(a + group_size, b) - betaln(a, b))
    all_wrong = np.exp(betaln(a, b + group_size) - betaln(a, b))
    return float(np.mean(1 - all_right - all_wrong))


def learnability_prior(cfg: Config) -> dict:
    """The Beta prior of the posterior learnability prediction: fit to the pool's probe
    (:func:`fit_beta_prior`), or Jeffreys' when the probe's prompts.parquet is not there."""
    path = layout.probe_dir(cfg) / "prompts.parquet"
    if path.exists():
        pool = read_parquet(path, "01_probe", columns=["n_correct", "k"])
        alpha, beta = fit_beta_prior(pool["n_correct"], pool["k"])
        fit = "method of moments of the beta-binomial over the pool's probe" if (alpha, beta) != JEFFREYS \
            else "Jeffreys (the pool's probe gave nothing to fit)"
        return {"alpha": round(alpha, DIGITS), "beta": round(beta, DIGITS), "prior": fit, "pool": len(pool), "k": cfg.probe.k}
    return {"alpha": 0.5, "beta": 0.5, "prior": "Jeffreys (no probe of the pool found)", "pool": None, "k": cfg.probe.k}


def _run_selections(selections: pd.DataFrame, runs: pd.DataFrame):
    """Each run's selected prompts (its own seed's for a per-seed policy); the ``strategy``
    column holds the arm's name."""
    for arm, seed in zip(runs["strategy"], runs["seed"]):
        sel = selections[selections["strategy"] == arm]
        yield sel[sel["train_seed"] == seed] if sel["train_seed"].notna().any() else sel


def arm_predicted_learnable(selections: pd.DataFrame, runs: pd.DataFrame, group_size: int) -> pd.Series:
    """Each run's predicted learnable % at step 0: 100 * :func:`predicted_learnable` of the
    p_hat of its selection."""
    out = [100.0 * predicted_learnable(sel["p_hat"].to_numpy(float), group_size) if len(sel) else np.nan
           for sel in _run_selections(selections, runs)]
    return pd.Series(out, index=runs.index, dtype=float)


def arm_posterior_learnable(selections: pd.DataFrame, runs: pd.DataFrame, group_size: int, prior: dict) -> pd.Series:
    """Each run's predicted learnable % at step 0 under each selected prompt's Beta posterior
    (n_correct = p_hat x K of the probe; ``prior``: :func:`learnability_prior`)."""
    out = []
    for sel in _run_selections(selections, runs):
        n_correct = np.round(sel["p_hat"].to_numpy(float) * prior["k"])
        out.append(100.0 * posterior_learnable(n_correct, prior["k"], group_size, (prior["alpha"], prior["beta"]))
                   if len(sel) else np.nan)
    return pd.Series(out, index=runs.index, dtype=float)
