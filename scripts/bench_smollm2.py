"""Where SmolLM2-135M-Instruct's generation time goes on this CPU, and what batching buys.

    OMP_NUM_THREADS=1 python scripts/bench_smollm2.py --part all

Parts (``--part``, comma-separated):

- ``load``: seconds to read the tokenizer and to dequantize the 4-bit GGUF into fp32 weights.
- ``prefill``: one forward pass over a batch of prompts (no cache reuse), by prompt length and
  batch size: the cost of reading the prompt.
- ``decode``: seconds per generated token position (KV cache on) by batch size, from
  ``generate`` forced to run exactly N steps (``min_new_tokens = max_new_tokens``), minus
  the 1-step run (prefill): the per-step cost that dominates long completions.
- ``real``: :class:`diffgrpo.models.generation.HFGenerator` on real prompts of the candidate tasks
  at temperature 1.0, one sequence at a time and batched; prints completions/s, generated
  tokens/s, mean completion length, the share that stopped at EOS and the padding waste
  (token positions a batch computed after a row had already stopped).
- ``profile``: torch.profiler over one batched ``generate``: the top operators by self CPU time.

Every figure is taken with one torch thread unless ``--threads`` says otherwise; the load
average is printed with each part (the machine's other core may be busy). Figures go to
docs/smollm2.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from diffgrpo import tasks
from diffgrpo.models.generation import HFGenerator, encode_prompt, left_pad
from diffgrpo.models.loading import load_model, smollm2_gguf


def load_avg() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def candidate_prompts(task: str, count: int) -> list[list[dict]]:
    if task == "bbh3":
        df = tasks.get("bbh_shuffled_objects", objects=3).load("train", source="offline")
    elif task == "bbh5":
        df = tasks.get("bbh_shuffled_objects", objects=5).load("train", source="offline")
    elif task.startswith("arith"):  # arith1, arith12, ...: tiers [first digit, last digit]
        low, high = int(task[5]), int(task[-1])
        df = tasks.get("arithmetic", tiers=[low, high], train_size=max(count, 50), test_size=10).load("train")
    else:
        raise SystemExit(f"unknown task {task!r}")
    return list(df.sample(n=count, random_state=0)["prompt"])


def part_load(args) -> tuple:
    folder, name = smollm2_gguf()
    t0 = time.perf_counter()
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(folder, gguf_file=name)
    t1 = time.perf_counter()
    model, tokenizer = load_model(folder, gguf_file=name, dtype=args.dtype)
    t2 = time.perf_counter()
    params = sum(p.numel() for p in model.parameters())
    print(f"[load] {load_avg()} | tokenizer {t1 - t0:.1f} s; tokenizer + model (GGUF dequantize to {args.dtype}) "
          f"{t2 - t1:.1f} s; {params / 1e6:.1f}M parameters; {os.path.getsize(folder / name) / 1e6:.0f} MB file")
    return model, tokenizer


@torch.inference_mode()
def part_prefill(model, tokenizer, args) -> None:
    print(f"[prefill] {load_avg()} | one forward pass, no cache kept; ms per call and per prompt token")
    for length in [int(x) for x in args.prefill_lengths.split(",")]:
        for batch in [int(x) for x in args.prefill_batches.split(",")]:
            ids = torch.randint(100, 40000, (batch, length))
            model(input_ids=ids, use_cache=False)  # warm-up
            t0 = time.perf_counter()
            reps = 2
            for _ in range(reps):
                model(input_ids=ids, use_cache=False)
            dt = (time.perf_counter() - t0) / reps
            print(f"  length {length:4d} batch {batch:3d}: {dt * 1e3:8.1f} ms, {dt * 1e6 / (batch * length):6.0f} us/token, "
                  f"{batch * length / dt:7.0f} prompt tokens/s")


@torch.inference_mode()
def timed_generate(model, ids, mask, steps: int, pad_id: int) -> float:
    t0 = time.perf_counter()
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                   pad_token_id=pad_id, top_k=None, top_p=None, temperature=None)
    return time.perf_counter() - t0


def part_decode(model, tokenizer, prompts, args) -> None:
    steps = args.decode_steps
    width = args.decode_width
    print(f"[decode] {load_avg()} | generate forced to {steps} steps minus the 1-step run; "
          f"real prompts cut to their last {width} tokens (prefill is measured above)")
    pad = tokenizer.pad_token_id
    encoded = [encode_prompt(tokenizer, p)[-width:] for p in prompts]
    for batch in [int(b) for b in args.decode_batches.split(",")]:
        seqs = (encoded * (batch // len(encoded) + 1))[:batch]
        ids, mask = left_pad(seqs, pad)
        timed_generate(model, ids[:, :8], mask[:, :8], 2, pad)  # warm-up
        one = timed_generate(model, ids, mask, 1, pad)
        full = timed_generate(model, ids, mask, steps + 1, pad)
        per_step = (full - one) / steps
        print(f"  batch {batch:3d} (prompt width {ids.shape[1]}): prefill+1 {one:6.2f} s; {per_step * 1e3:7.1f} ms/step, "
              f"{batch / per_step:6.0f} tokens/s; a 256-token completion costs {256 * per_step:6.1f} s of decode")


def part_real(model, tokenizer, args) -> None:
    for task in args.tasks.split(","):
        prompts = candidate_prompts(task, args.prompts)
        encoded = [len(encode_prompt(tokenizer, p)) for p in prompts]
        print(f"[real {task}] {load_avg()} | {len(prompts)} prompts x {args.n}, T 1.0, max {args.max_new_tokens} new tokens, "
              f"prompt tokens mean {statistics.mean(encoded):.0f} (min {min(encoded)}, max {max(encoded)})")
        for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
            subset = prompts if batch_size > 1 else prompts[: args.single_prompts]
            gen = HFGenerator(model, tokenizer, batch_size=batch_size)
            t0 = time.perf_counter()
            out = gen.generate(subset, n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens, progress=False)
            dt = time.perf_counter() - t0
            comps = [c for per in out for c in per]
            tokens = sum(c.num_tokens for c in comps)
            # positions computed: each batch runs as long as its longest row (jobs sorted as HFGenerator sorts them)
            lengths = [c.num_tokens for per in out for c in per]  # prompt order; batches are length-sorted
            order = sorted(range(len(subset) * args.n), key=lambda k: (-encoded[k // args.n], k))
            computed = 0
            for s in range(0, len(order), batch_size):
                chunk = [lengths[k] for k in order[s : s + batch_size]]
                computed += len(chunk) * max(chunk)
            finished = sum(c.finished for c in comps) / len(comps)
            print(f"  batch {batch_size:3d}: {len(comps):4d} completions, {tokens:6d} tokens in {dt:7.1f} s -> "
                  f"{len(comps) / dt:6.2f} completions/s, {tokens / dt:6.1f} tokens/s; mean length {tokens / len(comps):5.1f}, "
                  f"EOS {finished:.0%}, positions computed {computed} ({1 - tokens / computed:.0%} after EOS)")


def part_profile(model, tokenizer, args) -> None:
    from torch.profiler import ProfilerActivity, profile

    prompts = candidate_prompts(args.tasks.split(",")[0], 16)
    gen = HFGenerator(model, tokenizer, batch_size=16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        gen.generate(prompts, n=1, temperature=1.0, max_new_tokens=64, progress=False)
    print(f"[profile] {load_avg()} | batch 16, max 64 new tokens, top ops by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="load,prefill,decode,real,profile")
    parser.add_argument("--tasks", default="bbh3,arith12", help="bbh3, bbh5, arith<lo><hi> (e.g. arith12)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument("--single-prompts", type=int, default=2, help="prompts for batch 1 (it is slow)")
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--prefill-lengths", default="32,128,256")
    parser.add_argument("--prefill-batches", default="1,8,32")
    parser.add_argument("--decode-width", type=int, default=32, help="prompt tokens kept for the decode part")
    parser.add_argument("--decode-batches", default="1,4,16,64")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    parts = set(args.part.replace("all", "load,prefill,decode,real,profile").split(","))

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), dtype {args.dtype}; {load_avg()}")
    model, tokenizer = part_load(args)
    if "prefill" in parts:
        part_prefill(model, tokenizer, args)
    if "decode" in parts:
        part_decode(model, tokenizer, candidate_prompts(args.tasks.split(",")[0], 8), args)
    if "real" in parts:
        part_real(model, tokenizer, args)
    if "profile" in parts:
        part_profile(model, tokenizer, args)


if __name__ == "__main__":
    main()
