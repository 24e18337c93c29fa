"""The contrasts: the pairs of arms the study compares, the gain of one minus the other's, paired on
the same test prompts and seeds, with its 95% interval, p, and Holm's adjustment within its family:
the study's declared question (``analyze.primary``, confirmatory), then, exploratory, the arms among
themselves and each arm against a control, per total-rollout budget where there are several
(:func:`diffgrpo.analysis.uncertainty.pair_families`).

Writes ``contrasts.csv`` / ``contrasts.md``. Its part of ``summary.json``::

    {"contrasts": [{"a", "b", "diff_pp", "ci95", "p", "p_holm", "n_seeds", "excludes_zero",
                    "significant_holm", "family", "question", "p_mc_se", "resamples", "decision", "detectable_pp"}],
     "holm_families": {family: {"what", "contrasts"}}}
"""

from __future__ import annotations

from diffgrpo.analysis.tables import DIGITS, markdown
from diffgrpo.analysis.uncertainty import PRIMARY, _round, holm_families
from diffgrpo.stats.holm import MAX_REFINE
from diffgrpo.store.artifacts import write_csv, write_text

TABLES = ("contrasts",)
FIGURES = ()


def _contrast(r: dict) -> dict:
    return {"a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]), "ci95": [_round(r["ci_low"]), _round(r["ci_high"])],
            "p": _round(r["p"]), "p_holm": _round(r["p_holm"]), "n_seeds": int(r["n_seeds"]),
            "excludes_zero": bool(r["excludes_zero"]), "significant_holm": bool(r["significant_holm"]),
            "family": r["family"], "question": r["question"], "p_mc_se": _round(r["p_mc_se"]), "resamples": int(r["resamples"]),
            "decision": r["decision"], "detectable_pp": _round(r["detectable_pp"])}


def write(study) -> dict:
    pairs = study.pairs
    families = holm_families(pairs)
    family_text = "; ".join(f"{f} ({v['what']}): {', '.join(v['contrasts'])}" for f, v in families.items())
    write_csv(study.out / "contrasts.csv", pairs.round(DIGITS))
    write_text(study.out / "contrasts.md", "# Contrasts: gain of a minus gain of b (points), paired on the same test "
               f"prompts and seeds; 95% interval over {study.over}; p two-sided from {study.cfg.analyze.bootstrap} prompt "
               f"resamples, more (up to {MAX_REFINE}x; column `resamples`) only where Holm's step-down compares it with a "
               "threshold its Monte Carlo error straddles (still so at the cap: undecided); decision by Holm's step-down, "
               "p_holm adjusted within each Holm family; detectable_pp: the true difference this contrast's own test "
               "finds with 80% power at Holm's first-step threshold, the test inverted (the size a 'not distinguishable' "
               "could have seen)\n\n"
               + (f"Confirmatory: the study's declared question (analyze.primary), Holm's correction over its "
                  f"{int((pairs['family'] == PRIMARY).sum())} contrast(s) alone. Every other contrast is exploratory"
                  if len(pairs) and (pairs["family"] == PRIMARY).any() else
                  "No question is declared (analyze.primary): every contrast is exploratory")
               + ", adjusted within its own family (column `question`)\n\n"
               f"Holm families: {family_text or 'none'}\n\n"
               + (markdown(pairs.round(DIGITS)) if len(pairs) else "(one arm)\n"))
    return {"contrasts": [_contrast(r) for r in pairs.to_dict("records")], "holm_families": families}
