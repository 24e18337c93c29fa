"""Seeds in blocks: after each block of seeds, the group-sequential rule's decision for every
contrast of the declared question (``analyze.primary``; the rule, its boundaries and what each
decision means: :mod:`diffgrpo.stats.sequential`). Written only where ``analyze.sequential`` sets
``block`` and ``max_seeds``.

Writes ``sequential.csv`` / ``sequential.md``. Its part of ``summary.json``::

    {"sequential": {"block", "max_seeds", "margin", "looks": [seed counts], "n_seeds",
                    "rows": [{"a", "b", "diff_pp", "p", "level", "fraction", "interval", "decision"}],
                    "verdict": one sentence}}
"""

from __future__ import annotations

import pandas as pd

from diffgrpo.analysis.tables import DIGITS
from diffgrpo.analysis.uncertainty import PRIMARY, _round
from diffgrpo.stats import sequential

TABLES = ("sequential",)
FIGURES = ()


def write(study) -> dict:
    look = at_this_look(study)
    if look is None:
        return {}
    head, out, words = look
    if not out:
        study.write_table("sequential", "Seeds in blocks", pd.DataFrame(), words)
        return {"sequential": {**head, "rows": [], "verdict": words}}
    table = pd.DataFrame(out)
    study.write_table("sequential", "Seeds in blocks: the group-sequential rule at this look (the declared question; "
                      "interval at 1 - 2 x the look's level, the equivalence test's)", table.round(DIGITS), words)
    return {"sequential": {**head, "rows": [{"a": r["a"], "b": r["b"], "diff_pp": _round(r["diff_pp"]), "p": _round(r["p"]),
                                             "level": float(f"{r['level']:.6g}"), "fraction": _round(r["fraction"]),
                                             "interval": [_round(r["ci_low"]), _round(r["ci_high"])],
                                             "decision": r["decision"]} for r in out],
                           "verdict": words}}


def at_this_look(study) -> tuple[dict, list[dict], str] | None:
    """The rule at the study's seed count: (the schedule, a row per declared contrast, its words),
    or None where the study takes no seeds in blocks. The verdict quotes the words: the rule, not the
    fixed-sample test, decides the question of a study that looks after each block."""
    seq = study.cfg.analyze.sequential
    if seq.block is None:
        return None
    pairs = study.pairs
    rows, dists = pairs[pairs["family"] == PRIMARY], study.pair_dists
    schedule = sequential.looks(seq.block, seq.max_seeds)
    n_seeds = int(rows["n_seeds"].min()) if len(rows) else 0
    head = {"block": seq.block, "max_seeds": seq.max_seeds, "margin": seq.margin, "looks": schedule, "n_seeds": n_seeds}
    if n_seeds not in schedule:
        nxt = next((s for s in schedule if s > n_seeds), None)
        words = (f"The declared question has {n_seeds} seed(s), which is not a look of blocks of {seq.block} up to "
                 f"{seq.max_seeds} (looks at {schedule}): " + (f"add seeds to {nxt} (train.seeds) and rerun; only the new "
                                                                 "runs train" if nxt else "no look is left"))
        return head, [], words
    out = []
    for i, r in rows.iterrows():
        dist = dists[i]
        look = sequential.decide(float(r["p"]), dist.interval, n_seeds, seq.block, seq.max_seeds, seq.margin,
                                 m=len(rows))
        out.append({"a": r["a"], "b": r["b"], "diff_pp": r["diff_pp"], "p": r["p"], "level": look.level,
                    "fraction": look.fraction, "ci_low": look.interval[0], "ci_high": look.interval[1],
                    "decision": look.decision})
    k = schedule.index(n_seeds) + 1
    counts = pd.Series([r["decision"] for r in out]).value_counts()
    margin = f"+-{seq.margin:g} points" if seq.margin is not None else "no margin set (equivalence not tested)"
    words = (f"Look {k} of {len(schedule)} ({n_seeds} of at most {seq.max_seeds} seeds, blocks of {seq.block}; "
             f"O'Brien-Fleming alpha spending, alpha / {len(out)} a contrast; equivalence {margin}): "
             + ", ".join(f"{n} {d}" for d, n in counts.items()) + ". "
             + "; ".join(f"{r['a']} - {r['b']} {r['diff_pp']:+.1f} [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}] at level "
                         f"{r['level']:.4f}: {r['decision']}" for r in out))
    return head, out, words
