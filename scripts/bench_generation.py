"""Generation throughput of the embedded model on this machine: batched vs one prompt at a time.

    python scripts/bench_generation.py --prompts 64 --n 8 --max-new-tokens 48

Prints completions/s and generated tokens/s (EOS included), batched and with batch size 1
(on fewer prompts: it is slow); the figures
go to docs/benchmarks.md ("Generation").
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
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
