"""How large a difference a study can see, before it runs (``python -m diffgrpo.study <params>
--plan``): the detectable difference of each Holm family from the variance components of a
committed study of the same task and model. The statistics are :mod:`diffgrpo.stats.power` (the
test inverted: :func:`~diffgrpo.stats.power.detectable`); this module finds the components and the
families.

A contrast's mean difference over n test prompts and S seeds varies as

    sigma_prompt^2 / n + sigma_seed^2 / S + sigma_resid^2 / (n S)

(points^2; the same two-way decomposition the intervals use): sigma_prompt^2 the prompts' own
spread of the two arms' difference, sigma_seed^2 the seed's effect on it, sigma_resid^2 each run's
per-prompt noise. The plan takes the three from a committed study of the same task and model
(``docs/results/<study>/inputs/``, the median over its contrasts among the verifier's arms; the
study is named), else from :data:`ASSUMED` (stated). The detectable difference is the true one the
report's test rejects with 80% power at Holm's first step (alpha / m, m the family's size: later
steps resolve less), its seed part pooled as the report pools it: across every pair of the arms one
call of the report contrasts (all the study's arms; a budget's arms), (K - 1)(S - 1) degrees of freedom.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from diffgrpo import params
from diffgrpo.params import Config
from diffgrpo.stats import ALPHA
from diffgrpo.stats.power import components, detectable  # noqa: F401  (detectable: the plan's, diffgrpo.study)
from diffgrpo.store import artifacts, layout

#: the components assumed where no committed study shares the task and model (points^2): two arms'
#: greedy answers differ on about 10% of prompts (0.1 x 100^2), a seed moves an arm's mean by a sd of
#: 2 points (a difference: 2 x 4), and a run's answer flips on about 5% of prompts (2 x 0.05 x 100^2)
ASSUMED = {"prompt": 1000.0, "seed": 8.0, "resid": 1000.0}


def committed_components(inputs: Path) -> tuple[dict[str, float], int]:
    """The median components over a committed study's contrasts among its verifier arms that its
    report forms (:func:`diffgrpo.analysis.uncertainty.pair_families`: none across budgets; seeds
    both ran, at least two), and how many contrasts they come from."""
    from diffgrpo.analysis.report import Scores, contrast_plan, control_arms, find_runs
    from diffgrpo.analysis.uncertainty import pair_families

    cfg = params.load(Path(inputs) / "report" / layout.PARAMS, defaults=False)
    complete, _ = find_runs(Path(inputs))
    runs = pd.DataFrame([{"strategy": m["strategy"], "seed": int(m["seed"])} for m in complete])
    scores = Scores(Path(inputs), runs, cfg.analyze.metric)
    arms = sorted(set(runs["strategy"]) - set(control_arms(cfg)))
    found = []
    for a, b, _ in pair_families(arms, **contrast_plan(cfg)):
        common = sorted(set(scores.seeds(a)) & set(scores.seeds(b)))
        if len(common) >= 2:
            found.append(components(100.0 * (scores.at(a, seeds=common) - scores.at(b, seeds=common))))
    if not found:
        raise ValueError(f"{inputs}: no two verifier arms share two seeds: no variance components to take")
    return {k: float(np.median([c[k] for c in found])) for k in ("prompt", "seed", "resid")}, len(found)


def _identity(cfg: Config) -> tuple[str, str]:
    return cfg.dataset.task, cfg.model.name


def matching_study(cfg: Config) -> Path | None:
    """The committed study (``docs/results/<study>/inputs``) of the same task, model and metric as
    ``cfg``: the study itself where it is committed, else the one with the most runs; or None."""
    root = artifacts.checkout_root() / "docs" / "results"
    found = {}
    for p in sorted(root.glob(f"*/inputs/report/{layout.PARAMS}")):
        other = params.load(p, defaults=False)
        if _identity(other) == _identity(cfg) and other.analyze.metric == cfg.analyze.metric:
            found[p.parents[2].name] = (p.parents[1], len(list((p.parents[1] / "runs").glob("*/manifest.json"))))
    if cfg.study in found:
        return found[cfg.study][0]
    return max(found.values(), key=lambda v: v[1])[0] if found else None


def families(cfg: Config) -> dict[str, int]:
    """Each Holm family the report will form (:func:`diffgrpo.analysis.uncertainty.pair_families`:
    the declared question, the verifier arms' pairs and each arm against a control, per budget),
    and its size."""
    return {f: m for f, (m, _) in _families(cfg).items()}


def _families(cfg: Config) -> dict[str, tuple[int, float]]:
    """Each family's size, and the degrees of freedom per seed of the pool its contrasts' seed
    parts share (every contrast the report forms, equal floors: :func:`diffgrpo.stats.pooling.pooled_df`
    over S = 2), so that a study of S seeds pools (S - 1) x that many."""
    from diffgrpo.analysis.report import contrast_plan
    from diffgrpo.analysis.uncertainty import pair_families
    from diffgrpo.stats.pooling import pair_units, pooled_df

    control = {a.name for a in cfg.arms if a.role == "control"}
    pairs = pair_families([a.name for a in cfg.arms], control, **contrast_plan(cfg))
    per_seed = pooled_df(pair_units([(a, b) for a, b, _ in pairs]), np.ones(len(pairs)), 2) if pairs else 0.0
    out: dict[str, tuple[int, float]] = {}
    for _, _, family in pairs:
        out[family] = (out.get(family, (0, per_seed))[0] + 1, per_seed)
    return out


def plan_lines(cfg: Config) -> list[str]:
    """What ``--plan`` prints: the detectable difference per Holm family for this study's seeds and
    test prompts, and where the variance components come from."""
    n, s = cfg.dataset.test_size, len(cfg.train.seeds)
    if not n:
        return ["detectable differences: dataset.test_size is the whole split; set it to plan them"]
    source, own = matching_study(cfg), _own_components(cfg)
    if own is not None:  # a study that has run seeds already plans its next block from them
        comp, k = own
        where = f"variance components of this study's own finished runs ({layout.study_dir(cfg)}; median over {k} contrasts)"
    elif source is not None:
        comp, k = committed_components(source)
        where = (f"variance components of the committed study {source.parent.name!r} (same task, model and metric; median "
                 f"over its {k} contrasts)")
    else:
        comp, where = ASSUMED, "assumed variance components (no committed study of this task and model; diffgrpo.analysis.power.ASSUMED)"
    sds = ", ".join(f"{k} sd {np.sqrt(v):.1f}" for k, v in comp.items())
    lines = [f"detectable differences (80% power, Holm's first step of the report's own test, {n} test prompts x {s} "
             f"seed(s), the seed part pooled across the contrasts of the arms compared together), from the {where}: {sds} points"]
    families = _families(cfg)
    lines += [f"  {family}: {m} contrast(s): {detectable(comp, n, s, m, pool_df=per_seed * (s - 1)):.1f} points"
              for family, (m, per_seed) in families.items()]
    seq = cfg.analyze.sequential
    if seq.block is not None:  # seeds in blocks: what each later look of the declared question would detect
        from diffgrpo.stats import sequential

        m, per_seed = families.get("primary", (1, 0.0))
        every = sequential.looks(seq.block, seq.max_seeds)
        levels = dict(zip(every, sequential.nominal_levels([x / seq.max_seeds for x in every], ALPHA / m)))
        lines.append("  seeds in blocks, the declared question at each look from here (its O'Brien-Fleming level, "
                     f"alpha / {m} a contrast): " + "; ".join(
                         f"{x} seeds: {detectable(comp, n, x, 1, alpha=levels[x], pool_df=per_seed * (x - 1)):.1f} points"
                         for x in every if x >= s))
    return lines


def _own_components(cfg: Config) -> tuple[dict[str, float], int] | None:
    """The study's own components where its outputs hold a report of two or more seeds, else None."""
    root = layout.study_dir(cfg)
    if not (root / "report" / layout.PARAMS).is_file():
        return None
    try:
        comp, k = committed_components(root)
    except (ValueError, FileNotFoundError, KeyError):
        return None
    return comp, k
