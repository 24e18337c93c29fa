"""Generation throughput on this machine: HF batched vs one prompt at a time, or HF vs vLLM.

    python scripts/bench_generation.py --prompts 64 --n 8 --max-new-tokens 48
    .venv-vllm/bin/python scripts/bench_generation.py --backends hf vllm --params embedded --prompts 64

The first prints completions/s and generated tokens/s (EOS included) of HFGenerator, batched
and with batch size 1 (on fewer prompts: it is slow). ``--backends`` instead runs the probe's
and the evaluation's generation, as the params file sets them (the probe: ``probe.k`` samples
at ``probe.sampling``; the evaluation: one greedy completion and ``evaluate.n_samples`` samples
at ``evaluate.sampling``), on ``--prompts`` pool prompts, through each backend's generator
(``load_generator``: what the stages use), and prints each backend's start-up time and
generated tokens/s. vLLM needs ``.venv-vllm`` (``make vllm-env``) or the GPU environment. The
figures go to docs/benchmarks.md ("Generation", "HF vs vLLM").
"""

from __future__ import annotations

import argparse
import time

import torch

from diffgrpo import tasks
from diffgrpo.models.generation import HFGenerator
from diffgrpo.models.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--single-prompts", type=int, default=8, help="prompts for the one-at-a-time run (it is slow)")
    parser.add_argument("--backends", nargs="+", choices=["hf", "vllm"], help="compare these backends instead")
    parser.add_argument("--params", default="embedded", help="--backends: the params file (model, probe, evaluate)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="--backends: a params override")
    args = parser.parse_args()
    if args.backends:
        return compare_backends(args)

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    prompts = list(tasks.get("shuffled_objects").load("test")["prompt"][: args.prompts])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.prompts} prompts x {args.n} completions, "
          f"max {args.max_new_tokens} new tokens, temperature {args.temperature}")
    for batch_size, subset in ((args.batch_size, prompts), (1, prompts[: args.single_prompts])):
        gen = HFGenerator(model, tokenizer, batch_size=batch_size)
        start = time.perf_counter()
        out = gen.generate(subset, n=args.n, temperature=args.temperature, max_new_tokens=args.max_new_tokens, progress=False)
        seconds = time.perf_counter() - start
        completions = [c for per_prompt in out for c in per_prompt]
        tokens = sum(c.num_tokens for c in completions)
        print(f"batch {batch_size:3d}: {len(completions)} completions, {tokens} tokens in {seconds:.1f} s -> "
              f"{len(completions) / seconds:.1f} completions/s, {tokens / seconds:.0f} tokens/s")


def compare_backends(args) -> None:
    """Probe and evaluation generation per backend, on the same prompts, as the stages run it."""
    import os

    from diffgrpo import params
    from diffgrpo.models.resumable_sampling import load_generator
    from diffgrpo.tasks import splits

    overrides = params.parse_overrides(args.set)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for backend in args.backends:
        cfg = params.load(args.params, overrides={**overrides, "generation.backend": backend})
        prompts = list(splits.load_pool(cfg)["prompt"][: args.prompts])
        start = time.perf_counter()
        gen = load_generator(cfg, batch_size=cfg.probe.sampling.batch_size)
        up = time.perf_counter() - start
        p, e = cfg.probe.sampling, cfg.evaluate
        runs = [("probe", cfg.probe.k, p.temperature, p.top_p, p.max_new_tokens),
                ("evaluate greedy", 1, 0.0, 1.0, e.sampling.max_new_tokens),
                ("evaluate sampled", e.n_samples, e.sampling.temperature, e.sampling.top_p, e.sampling.max_new_tokens)]
        print(f"{backend}: {cfg.model.name}, generator up in {up:.1f} s")
        for name, n, temperature, top_p, max_new in [r for r in runs if r[1]]:  # n_samples 0: no sampled evaluation
            start = time.perf_counter()
            out = gen.generate(prompts, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new, seed=0,
                               progress=False)
            seconds = time.perf_counter() - start
            tokens = sum(c.num_tokens for per_prompt in out for c in per_prompt)
            print(f"  {name:17s} {len(prompts)} prompts x {n} (T {temperature}, max {max_new}): {tokens} tokens in "
                  f"{seconds:.1f} s -> {tokens / seconds:,.0f} tokens/s")
        if backend == "vllm":
            from diffgrpo.models import vllm_engine

            vllm_engine.shutdown()


if __name__ == "__main__":
    main()
