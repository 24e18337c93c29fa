"""The study graph: a study's notebook jobs, each after the jobs whose files it reads.

One ``01_probe``, one ``02_select``, the base model's ``04_evaluate``, one ``03_train`` and one
``04_evaluate`` per (arm, seed) run, and one ``05_analyze`` (:func:`jobs`); a campaign's graph
is its studies' graphs side by side, the last analysis after every other
(:func:`campaign_jobs`). Building the graph reads the params only: no notebook, no executor,
no cluster, so a notebook's plan cell (:mod:`diffgrpo.study.plan`) imports it without the runner.
The runner (:mod:`diffgrpo.study.runner`) hands the graph to an executor.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

from diffgrpo import params, select
from diffgrpo.params import budgets
from diffgrpo.store import artifacts, layout
from diffgrpo.study import plan
from diffgrpo.study.executors import NotebookJob
from diffgrpo.study.notebooks import STAGES


def jobs(cfg: params.Config, nb_params: dict, stages: Sequence[str] = STAGES) -> list[NotebookJob]:
    """The study's notebook executions, each after the ones it reads from (only among
    ``stages``: a stage left out is taken as done). One ``03_train`` and one ``04_evaluate`` per
    (arm, seed) (no ``03_train`` for a smaller budget that is a checkpoint of a larger one's run,
    :func:`diffgrpo.params.budgets.checkpoint_of`: that run's job writes it, and its evaluation
    waits for that job), with ``workers: 1`` (the executor runs ``workers`` notebooks at once); the base
    model's evaluation needs nothing before it, so it runs beside the probe."""
    out: list[NotebookJob] = []

    def add(stage: str, rid: str | None, after: list[str], priority=None, gpus: int = 1, **extra) -> None:
        if stage not in stages:
            return
        parameters = {**nb_params, **extra}
        if rid is not None:
            parameters["overrides"] = {**nb_params["overrides"], "workers": 1}
        name = stage if rid is None else f"{stage} {rid}"
        out.append(NotebookJob(name, stage, layout.executed_notebook(cfg, stage, rid), parameters,
                               tuple(a for a in after if a.split(" ")[0] in stages), priority, gpus))

    add("01_probe", None, [])
    add("02_select", None, ["01_probe"])
    add("04_evaluate", layout.BASE_RUN, [], arm=layout.BASE_RUN)
    of = budgets.checkpoint_of(cfg)  # a smaller budget's run: a checkpoint of its trajectory's largest
    for arm, seed in layout.planned_runs(cfg):
        rid = layout.run_id(arm, seed)
        if arm not in of:
            add("03_train", rid, ["02_select"], functools.cache(functools.partial(training_cost, cfg, arm, seed)),
                gpus=cfg.for_arm(arm).train.num_processes, arm=arm, seed=seed)
        trained = f"03_train {layout.run_id(of.get(arm, arm), seed)}"
        add("04_evaluate", rid, [trained, f"04_evaluate {layout.BASE_RUN}"], arm=arm, seed=seed)
    add("05_analyze", None, [j.name for j in out])
    return out


def training_cost(cfg: params.Config, arm: str, seed: int) -> float:
    """A run's expected work, to start the longest first: update steps (the run's:
    :meth:`Config.run_steps`) x completions a step x
    the probe's mean completion length over the run's selection (``train.max_completion_length``
    where the probe or the selection cannot be read yet). Read when the run is ready to start, after 02_select.
    Only the order of the jobs depends on it, never a result."""
    acfg = cfg.for_arm(arm)
    t = acfg.train
    steps = None
    try:
        path = select.selection_path(acfg, arm, seed)
        ids = artifacts.read_parquet(path, "02_select")["id"].astype(str)
        steps = acfg.run_steps(arm, len(ids))
        probe = artifacts.read_parquet(layout.probe_dir(acfg) / layout.PROMPTS, "01_probe").set_index("id")
        tokens = float(probe.loc[probe.index.intersection(ids), "mean_tokens"].mean())
    except (OSError, KeyError, ValueError, artifacts.ArtifactError):
        tokens = float("nan")
    if math.isnan(tokens):  # nothing to read, or no selected id in the probe
        tokens = float(t.max_completion_length)
    if steps is None:  # no selection yet: its planned size (its budget, or the pool)
        try:
            steps = acfg.run_steps(arm, plan.selected_prompts(acfg, arm))
        except (params.ParamsError, select.SelectionError, OSError, artifacts.ArtifactError):
            steps = 1
    return float(steps * t.prompts_per_step * t.group_size * tokens)


def campaign_jobs(studies: Sequence[tuple[params.Config, dict]], stages: Sequence[str] = STAGES
                  ) -> tuple[list[NotebookJob], dict[str, tuple[params.Config, str]]]:
    """The jobs of every study (:func:`jobs`), and ``{job name: (its study's config, its name
    in the study)}``. One study: its jobs as they are. Several (a campaign): each name
    prefixed ``<study>/``, and the last study's analysis waits for every other study's, so
    that the grid it draws (``analyze.compare``) holds them all."""
    if len(studies) == 1:
        cfg, nb_params = studies[0]
        todo = jobs(cfg, nb_params, stages)
        return todo, {j.name: (cfg, j.name) for j in todo}
    names = [c.study for c, _ in studies]
    if len(set(names)) != len(names):
        raise params.ParamsError(f"analyze.compare: the campaign names a study more than once ({names})")
    out: list[NotebookJob] = []
    owner: dict[str, tuple[params.Config, str]] = {}
    for cfg, nb_params in studies:
        for j in jobs(cfg, nb_params, stages):
            name = f"{cfg.study}/{j.name}"
            out.append(dataclasses.replace(j, name=name, after=tuple(f"{cfg.study}/{a}" for a in j.after)))
            owner[name] = (cfg, j.name)
    last = f"{names[-1]}/05_analyze"
    if last in owner:
        others = [f"{n}/05_analyze" for n in names[:-1] if f"{n}/05_analyze" in owner]
        out = [dataclasses.replace(j, after=j.after + tuple(others)) if j.name == last else j for j in out]
    return out, owner
