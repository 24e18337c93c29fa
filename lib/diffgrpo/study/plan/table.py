"""The plan itself: one row per job of the study graph (:func:`plan`), the check that refuses a
cuda study that does not fit its GPU (:func:`check`), and the plan as text (:func:`render`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from diffgrpo.models.generation import hf_cache
from diffgrpo.params import Config, ParamsError
from diffgrpo.store import layout
from diffgrpo.study.plan.hours import decode_seconds, generation_batch, start_seconds, train_seconds
from diffgrpo.study.plan.memory import USABLE, GenMemory, generation_memory, train_memory
from diffgrpo.study.plan.shapes import gpu_of, model_shape
from diffgrpo.study.plan.work import checkpoints, eval_work, prompt_tokens, split_rows, train_work


class PlanDoesNotFit(ParamsError):
    """A pass of a job needs more memory than the GPU has."""


def plan(cfg: Config, jobs) -> pd.DataFrame:
    """One row per job of the study graph (``jobs``: :func:`diffgrpo.study.graph.jobs`): counts,
    memory of its largest pass, and a time range in hours."""
    shape, gpu = model_shape(cfg), gpu_of(cfg)
    prompt = prompt_tokens(cfg)
    rows = []
    for job in jobs:
        arm = job.parameters.get("arm")
        row: dict[str, Any] = {"job": job.name, "stage": job.stage, "arm": arm}
        if job.stage == "01_probe":
            p = cfg.probe
            n = split_rows(cfg, "pool")
            n_test = split_rows(cfg, "test") if p.test else 0  # probe.test: the held-out set too, K each
            completions = n * (p.k + (1 if p.one_sample else 0)) + n_test * p.k
            mem = generation_memory(cfg, shape, gpu, p.sampling.batch_size, prompt, p.sampling.max_new_tokens, False)
            times = [decode_seconds(cfg, shape, gpu, completions, prompt, p.sampling.max_new_tokens,
                                     cfg.generation.backend, generation_batch(cfg, p.sampling.batch_size), e,
                                     cache=hf_cache(cfg.model.device)) for e in (0, 1)]
            times = [x + start_seconds(cfg, e, 1) for e, x in enumerate(times)]
            row.update(prompts=n + n_test, completions=completions,
                       tokens_generated=completions * p.sampling.max_new_tokens,
                       tokens_trained=0, **_gen_columns(mem), pass_="generation")
        elif job.stage == "04_evaluate":
            models = 1 if arm == layout.BASE_RUN else checkpoints(cfg, arm)
            work = eval_work(cfg)
            batch = cfg.evaluate.sampling.batch_size
            new = max(x[3] for x in work)
            mem = generation_memory(cfg, shape, gpu, batch, prompt, new, arm != layout.BASE_RUN)
            times = []
            for e in (0, 1):
                x = sum(decode_seconds(cfg, shape, gpu, n * c, prompt, m, cfg.generation.backend,
                                        generation_batch(cfg, batch), e, cache=hf_cache(cfg.model.device))
                        for _, n, c, m in work) * models
                times.append(x + start_seconds(cfg, e, models, shape))
            prompts = sum(n for _, n, _, _ in work)
            comps = sum(n * c for _, n, c, _ in work)
            row.update(prompts=prompts * models, completions=comps * models,
                       tokens_generated=sum(n * c * m for _, n, c, m in work) * models, tokens_trained=0,
                       models=models, **_gen_columns(mem), pass_="generation")
        elif job.stage == "03_train":
            acfg = cfg.for_arm(arm)
            works = train_work(cfg, arm)
            mems = [train_memory(acfg, shape, w, gpu, prompt) for w in works]
            worst = max(range(len(works)), key=lambda i: max(mems[i].train_pass_gib, mems[i].generation_gib))
            m, w = mems[worst], works[worst]
            times = [sum(train_seconds(acfg, shape, gpu, x, prompt, e) for x in works) for e in (0, 1)]
            notes = []
            if acfg.train.epochs is not None and cfg.arm(arm).selected_count(cfg.select, split_rows(cfg, "pool")) is None:
                notes.append("train.epochs over the whole pool: an upper bound until 02_select sizes the arm's set")
            row.update(prompts=sum(x.steps * x.rounds * x.prompts_per_step for x in works),
                       completions=sum(x.completions for x in works),
                       tokens_generated=sum(x.completions * x.completion for x in works),
                       tokens_trained=sum(min(x.completions, x.steps * x.generation_batch) * (prompt + x.completion)
                                          for x in works),
                       level=w.level, per_pass=f"{w.per_pass_prompts}x{w.group_size}", accumulation=w.accumulation,
                       **{k: v for k, v in dataclasses.asdict(m).items()}, note="; ".join(notes),
                       pass_="train")
        else:
            times = [0.0, 0.0]
            row.update(prompts=0, completions=0, tokens_generated=0, tokens_trained=0, pass_="-")
        row["hours_low"], row["hours_high"] = round(times[0] / 3600, 2), round(times[1] / 3600, 2)
        rows.append(row)
    df = pd.DataFrame(rows).rename(columns={"pass_": "pass"})
    for col in ("accumulation", "models"):
        if col in df:
            df[col] = df[col].astype("Int64").astype(object).where(df[col].notna(), "")
    df.attrs.update(model=shape.source, gpu=gpu.name, gpu_gib=gpu.memory_gib, usable_gib=round(USABLE * gpu.memory_gib, 1),
                    prompt_tokens=prompt, params=shape.params, study=cfg.study,
                    backend=f"generation.backend={cfg.generation.backend}, train.use_vllm={cfg.train.use_vllm}")
    return df



def _gen_columns(mem: GenMemory) -> dict[str, float]:
    return {"weights_gib": mem.weights_gib, "kv_gib": mem.kv_gib, "generation_gib": mem.total_gib,
            "vllm_kv_need_gib": mem.vllm_kv_need_gib, "vllm_share_gib": mem.vllm_share_gib}


# ---- refusing a study that does not fit ----------------------------------------------------


def problems(cfg: Config, df) -> list[str]:
    """Why each pass that does not fit the GPU fails, naming the key to change; empty if all fit."""
    gpu = gpu_of(cfg)
    usable = USABLE * gpu.memory_gib
    out = []
    for _, r in df.iterrows():
        job = r["job"]
        if r["pass"] == "train":
            acfg = cfg.for_arm(r["arm"])
            t = acfg.train
            if r["train_pass_gib"] > usable:
                out.append(f"{job}, training pass ({r['per_pass']} prompts x completions a pass, "
                           f"{r['accumulation']} accumulation step(s)): {r['train_pass_gib']:.1f} GiB > {usable:.1f} GiB "
                           f"usable of {gpu.name} ({gpu.memory_gib} GiB x {USABLE}); {_smaller_pass(acfg, r['arm'], usable)}")
            if r["generation_gib"] > usable:
                key = ("train.vllm_gpu_memory_utilization (lower it)" if t.use_vllm else
                       "train.use_vllm (true: vLLM bounds the KV cache by its share)"
                       + (" or train.merge_lora_for_generation (false)" if t.merge_lora_for_generation else ""))
                out.append(f"{job}, generation during training: {r['generation_gib']:.1f} GiB > {usable:.1f} GiB "
                           f"usable of {gpu.name}; change {key}")
            longest = max(w.completion for w in train_work(cfg, r["arm"]))
            context = t.trl.get("vllm_max_model_length")
            if t.use_vllm and context is not None and context <= longest:
                out.append(f"{job}, colocated vLLM context: train.trl.vllm_max_model_length = {context} "
                           f"holds no prompt before a {longest}-token completion; set it to prompt + completion tokens")
            if t.use_vllm and t.vllm_mode == "colocate" and r["vllm_kv_need_gib"] > r["vllm_share_gib"]:
                out.append(f"{job}, colocated vLLM start: its weights and one sequence of "
                           f"{context or 'the model' + chr(39) + 's full'} context need "
                           f"{r['vllm_kv_need_gib']:.1f} GiB > its share of {r['vllm_share_gib']:.1f} GiB "
                           f"(train.vllm_gpu_memory_utilization = {t.vllm_gpu_memory_utilization}); set "
                           "train.trl.vllm_max_model_length to prompt + completion tokens, or raise the share")
        elif r["pass"] == "generation":
            stage_key = "probe.sampling.batch_size" if r["stage"] == "01_probe" else "evaluate.sampling.batch_size"
            if cfg.generation.backend == "vllm":
                if r["vllm_kv_need_gib"] > r["vllm_share_gib"]:
                    out.append(f"{job}, vLLM engine start: weights and one sequence of the context need "
                               f"{r['vllm_kv_need_gib']:.1f} GiB > its share of {r['vllm_share_gib']:.1f} GiB; set "
                               "generation.vllm_max_model_len or raise generation.vllm_gpu_memory_utilization")
            elif r["generation_gib"] > usable:
                out.append(f"{job}, generation: {r['generation_gib']:.1f} GiB > {usable:.1f} GiB usable of "
                           f"{gpu.name}; lower {stage_key} or set generation.backend: vllm")
    return out


def _smaller_pass(cfg: Config, arm: str, usable: float) -> str:
    """The key to change, with the largest train.per_device_prompts that fits where one does."""
    shape, gpu = model_shape(cfg), gpu_of(cfg)
    t = cfg.train
    now = "null: the whole update in one pass" if t.per_device_prompts is None else str(t.per_device_prompts)
    shares = {w.prompts_per_step for w in train_work(cfg, arm)}
    for n in range(min(shares), 0, -1):
        if any(s % n for s in shares):
            continue
        trial = cfg.replace(**{"train.per_device_prompts": n})
        if all(train_memory(trial, shape, w, gpu, prompt_tokens(trial)).train_pass_gib <= usable
               for w in train_work(trial, arm)):
            return f"set train.per_device_prompts (now {now}) to {n} or less"
    ckpt = "" if t.gradient_checkpointing else "turn on train.gradient_checkpointing, or "
    return (f"even train.per_device_prompts: 1 does not fit; {ckpt}lower train.max_completion_length "
            f"(now {t.max_completion_length})")


def check(cfg: Config, df: pd.DataFrame) -> None:
    """Refuse a cuda study whose plan (:func:`plan`) does not fit its GPU (:class:`PlanDoesNotFit`)."""
    if cfg.model.device != "cuda":
        return
    why = problems(cfg, df)
    if why:
        # the runs of one study usually fail alike: name the first, count the others
        alike: dict[str, list[str]] = {}
        for w in why:
            job, rest = w.split(", ", 1)
            alike.setdefault(rest, []).append(job)
        parts = [f"{jobs[0]}" + (f" (and {len(jobs) - 1} more job(s) alike)" if len(jobs) > 1 else "") + f", {rest}"
                 for rest, jobs in alike.items()]
        raise PlanDoesNotFit(f"study {cfg.study!r} does not fit one {gpu_of(cfg).name} (params key gpu = {cfg.gpu!r}): "
                             + " | ".join(parts) + " (python -m diffgrpo.study <params> --plan shows every job)")


def render(cfg: Config, df) -> str:
    """The plan as text: a header, the work and time per job, the memory per job, totals."""
    a = df.attrs
    head = (f"plan of study {a['study']!r}: model {a['params'] / 1e9:.3g}B parameters ({a['model']}), "
            f"{a['gpu']} ({a['gpu_gib']} GiB; a pass may use {a['usable_gib']}), {a['backend']}, "
            f"prompts sized at {a['prompt_tokens']} tokens"
            + ("" if cfg.model.device == "cuda" else "; model.device is cpu: the figures say what the study would "
               "cost on that GPU, and nothing is refused"))
    work_cols = [c for c in ("job", "prompts", "completions", "tokens_generated", "tokens_trained", "per_pass",
                             "accumulation", "hours_low", "hours_high") if c in df]
    mem_cols = [c for c in ("job", "pass", "weights_gib", "lora_gib", "activations_ckpt_gib", "activations_no_ckpt_gib",
                            "logits_gib", "logits_naive_gib", "padding_gib", "vllm_gib", "merged_gib", "kv_gib", "train_pass_gib",
                            "generation_gib", "vllm_kv_need_gib", "vllm_share_gib") if c in df]
    with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_colwidth", 40):
        work = df[work_cols].astype(object).fillna("").to_string(index=False)
        mem = df[df["pass"] != "-"][mem_cols].astype(object).fillna("").to_string(index=False)
    total = (f"whole study on one GPU, one job at a time: {df['hours_low'].sum():.1f}-{df['hours_high'].sum():.1f} h "
             f"(by stage: " + ", ".join(f"{s} {g['hours_low'].sum():.1f}-{g['hours_high'].sum():.1f} h"
                                        for s, g in df.groupby("stage", sort=False)) + ")")
    notes = [n for n in df.get("note", pd.Series(dtype=str)).dropna().unique() if n]
    return "\n".join([head, "", work, "", "memory (GiB) of each job's largest pass:", mem, "", total]
                     + [f"note: {n}" for n in notes])


def brief(cfg: Config, df) -> str:
    """The plan in a few lines, as a notebook's plan cell prints it: one row per stage (jobs,
    completions, tokens, the largest pass's GiB, hours) and the whole; :func:`render` has every job."""
    a = df.attrs
    peak = df[[c for c in ("train_pass_gib", "generation_gib") if c in df]].max(axis=1)
    stages = (df.assign(peak_gib=peak).groupby("stage")
              .agg(jobs=("job", "size"), completions=("completions", "sum"), tokens_generated=("tokens_generated", "sum"),
                   tokens_trained=("tokens_trained", "sum"), peak_gib=("peak_gib", "max"),
                   hours_low=("hours_low", "sum"), hours_high=("hours_high", "sum")))
    stages["hours"] = [f"{lo:.1f}-{hi:.1f}" for lo, hi in zip(stages.pop("hours_low"), stages.pop("hours_high"))]
    stages["peak_gib"] = stages["peak_gib"].round(2).astype(object).where(stages["peak_gib"].notna(), "")
    where = (f"on one {a['gpu']}" if cfg.model.device == "cuda"
             else f"as it would cost on one {a['gpu']} (model.device is cpu: nothing is refused)")
    size = f"{a['params'] / 1e9:.3g}B" if a["params"] >= 1e9 else f"{a['params'] / 1e6:.3g}M"
    head = f"plan of study {a['study']!r}: {len(df)} jobs, a {size}-parameter model, {where}"
    total = f"whole study, one job at a time: {df['hours_low'].sum():.1f}-{df['hours_high'].sum():.1f} h"
    return "\n".join([head, "", stages.reset_index().to_string(index=False), "", total,
                      "every job, its memory term by term: print(plan.render(cfg, study_plan))"])
