"""Probe and evaluation throughput against raw batched generation, measured in the same run.

    .venv/bin/python scripts/bench_stage_throughput.py                # embedded, 256 prompts
    .venv/bin/python scripts/bench_stage_throughput.py --prompts 128

For each stage it times the stage as the study runs it (``probe.run_probe`` with
``probe.one_sample`` off; ``evaluate.evaluate_base``: greedy + ``evaluate.n_samples`` samples),
from a fresh outputs folder: model load, chat template, batching, generation, decoding,
scoring, chunk files. "Raw" is ``model.generate`` alone on the same token ids, in the same
batches and with the same generation settings, after the model is loaded: the most a stage
could do with transformers on this machine. Raw runs before and after the stage and the two
are averaged, so a change of load during the run does not favour either side. Prints
generated tokens/s of each and the stage's share of raw.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import pandas as pd
import torch


def raw_generation(cfg, rows: pd.DataFrame, n: int, temperature: float, top_p: float,
                   max_new_tokens: int, batch_size: int) -> tuple[int, float]:
    """(generated tokens, seconds in model.generate) for n completions of each row."""
    from diffgrpo.models import resolve
    from diffgrpo.models.generation import HFGenerator, encode_prompt, left_pad

    model, tokenizer = resolve.load_model(cfg)
    gen = HFGenerator(model, tokenizer, batch_size=batch_size)
    encoded = [encode_prompt(tokenizer, p, dict(cfg.model.chat_template_kwargs)) for p in rows["prompt"]]
    jobs = sorted((len(e), i) for i, e in enumerate(encoded) for _ in range(n))[::-1]
    config = gen._config(temperature, top_p, max_new_tokens)
    batches = [left_pad([encoded[i] for _, i in jobs[s:s + batch_size]], gen.pad_id)
               for s in range(0, len(jobs), batch_size)]
    tokens, seconds = 0, 0.0
    with torch.inference_mode():
        torch.manual_seed(0)
        for ids, mask in batches:
            t0 = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
            seconds += time.perf_counter() - t0
            for row in out[:, ids.shape[1]:].tolist():
                ends = [k for k, t in enumerate(row) if t in gen.eos_ids]
                tokens += ends[0] + 1 if ends else len(row)
    return tokens, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", nargs="?", default="embedded")
    ap.add_argument("--prompts", type=int, default=256)
    args = ap.parse_args()
    os.environ["DIFFGRPO_OUTPUTS"] = tempfile.mkdtemp(prefix="diffgrpo-bench-throughput-")

    from diffgrpo.tasks import splits
    from diffgrpo import evaluate, params, probe
    from diffgrpo.store import layout

    cfg = params.load(args.params_file, overrides={
        "dataset.pool_size": args.prompts, "dataset.test_size": args.prompts, "probe.one_sample": False})
    torch.set_num_threads(cfg.model.torch_threads or torch.get_num_threads())
    p, ev = cfg.probe, cfg.evaluate
    stages = {
        "probe": (lambda: probe.run_probe(cfg, progress=False), splits.load_pool(cfg),
                  lambda: probe.read_samples(cfg)["num_tokens"].sum(),
                  [(p.k, p.sampling.temperature, p.sampling.top_p, p.sampling.max_new_tokens, p.sampling.batch_size)]),
        "evaluate": (lambda: evaluate.evaluate_base(cfg, progress=False), splits.load_test(cfg),
                     lambda: pd.read_parquet(layout.eval_dir(cfg, layout.BASE_RUN) / layout.SAMPLES)["num_tokens"].sum(),
                     ([(1, 0.0, 1.0, ev.sampling.max_new_tokens, ev.sampling.batch_size)] if ev.greedy else [])
                     + [(ev.n_samples, ev.sampling.temperature, ev.sampling.top_p, ev.sampling.max_new_tokens,
                         ev.sampling.batch_size)]),
    }
    print(f"{args.params_file}: {args.prompts} prompts, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'stage':<10}{'stage tok/s':>12}{'raw tok/s':>11}{'share':>8}")
    for name, (run, rows, count, passes) in stages.items():
        def raw() -> float:  # tokens/s over all of the stage's passes
            done = [raw_generation(cfg, rows, *ps) for ps in passes]
            return sum(t for t, _ in done) / sum(s for _, s in done)

        before = raw()
        t0 = time.perf_counter()
        run()
        stage_rate = count() / (time.perf_counter() - t0)
        raw_rate = (before + raw()) / 2
        print(f"{name:<10}{stage_rate:>12.0f}{raw_rate:>11.0f}{100 * stage_rate / raw_rate:>7.0f}%")


if __name__ == "__main__":
    main()
