"""Where a GRPO training step's time goes, on the default study's settings.

    .venv/bin/python scripts/bench_train_step.py                    # hard, 12 steps
    .venv/bin/python scripts/bench_train_step.py --arm easy --steps 20
    .venv/bin/python scripts/bench_train_step.py --profile          # + cProfile's top functions
    .venv/bin/python scripts/bench_train_step.py --set train.merge_lora_for_generation=false   # before

Probes and selects once into ``--outputs`` (reused on later calls: the probe is cached by its
key), then trains one run of ``--steps`` steps from scratch through ``diffgrpo.train.train_run``
(TRL's GRPOTrainer + PEFT, exactly as the study does) with timers around its parts:

- generate: TRL's ``_generate`` (prompt tokenization, ``model.generate`` under the unwrapped
  PEFT model, EOS masking);
- reward: TRL's ``_calculate_rewards`` (our verifier and the groups' records);
- forward: ``compute_loss`` (the policy's log-probabilities and the GRPO loss);
- backward: ``accelerator.backward``;
- optimizer: AdamW's ``step`` (gradient clipping is in "other");
- other: the rest of TRL's step (advantages, logging, callbacks);
- floor: the same PEFT model's forward and backward alone, outside TRL, on a batch of the
  step's shape: what the loss costs with no trainer overhead at all.

Prints the median seconds of each part over the steps after the first (the first pays for
warm-up), and the step total from TRL's ``step_time``. Run it on an idle machine, one thread.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch


def timed(owner, name: str, bucket: str, times: dict[str, list[float]]) -> None:
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            times[bucket].append(time.perf_counter() - t0)

    setattr(owner, name, wrapper)


def loss_floor(cfg, arm: str, steps: pd.DataFrame, repeats: int = 3) -> tuple[int, int, float, float]:
    """Forward and backward of the same PEFT model alone, outside TRL, on random token ids of
    the step's shape (prompts x G sequences of the median prompt plus the median longest
    completion): what the loss costs before any trainer overhead (best of ``repeats``)."""
    from peft import get_peft_model

    from diffgrpo import train
    from diffgrpo.models import resolve as data
    from diffgrpo.models.generation import encode_prompt
    from diffgrpo.train.config import lora_config

    model, tokenizer = data.load_model(cfg)
    prompts = train.selected_rows(cfg, arm, 0)["prompt"]
    length = int(np.median([len(encode_prompt(tokenizer, p)) for p in prompts])
                 + steps["completions/max_length"].median())
    batch = cfg.train.prompts_per_step * cfg.train.group_size
    model = get_peft_model(model, lora_config(cfg))
    ids = torch.randint(2, model.config.vocab_size, (batch, length))
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        t0 = time.perf_counter()
        loss = model(input_ids=ids).logits.log_softmax(-1).mean()
        t1 = time.perf_counter()
        loss.backward()
        best = min(best, (t1 - t0, time.perf_counter() - t1))
    return batch, length, *best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", nargs="?", default="embedded")
    ap.add_argument("--arm", default="hard")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--outputs", default="/tmp/diffgrpo-bench-train-step")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a parameter (repeatable), e.g. train.merge_lora_for_generation=false")
    ap.add_argument("--profile", action="store_true", help="print cProfile's 25 most expensive functions")
    args = ap.parse_args()
    os.environ["DIFFGRPO_OUTPUTS"] = str(Path(args.outputs).resolve())

    import accelerate

    from diffgrpo import params, probe, select, train
    from diffgrpo.store.run_folder import RunFolder

    cfg = params.load(args.params_file, overrides={
        "train.max_steps": args.steps, "train.save_steps": 10_000, "train.seeds": [0], "workers": 1,
        **params.parse_overrides(args.overrides)})
    torch.set_num_threads(cfg.model.torch_threads or torch.get_num_threads())
    probe.run_probe(cfg, progress=False)
    select.run_select(cfg)

    times: dict[str, list[float]] = defaultdict(list)
    timed(train.Trainer, "_generate", "generate", times)
    timed(train.Trainer, "_calculate_rewards", "reward", times)
    timed(train.Trainer, "compute_loss", "forward", times)
    timed(accelerate.Accelerator, "backward", "backward", times)
    timed(torch.optim.AdamW, "step", "optimizer", times)

    profiler = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if profiler:
        profiler.enable()
    run_dir = train.train_run(cfg, args.arm, 0, progress=False, force=True)
    if profiler:
        profiler.disable()
    wall = time.perf_counter() - t0

    folder = RunFolder(run_dir)
    steps, groups = pd.read_parquet(folder.steps), pd.read_parquet(folder.groups)
    step_time = steps["step_time"].to_numpy()[1:]
    parts = {k: np.asarray(v[1:]) for k, v in times.items()}  # one call per step for each part
    print(f"\n{args.params_file} / {args.arm} {' '.join(args.overrides)}: {args.steps} steps of {cfg.train.prompts_per_step} prompts x "
          f"{cfg.train.group_size} completions (max {cfg.train.max_completion_length} tokens), "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load {os.getloadavg()[0]:.1f}")
    print(f"mean completion length {steps['completions/mean_length'].mean():.1f} tokens, "
          f"learnable {100 * groups['learnable'].mean():.0f}%, wall {wall:.1f} s incl. model load")
    print(f"{'part':<11}{'median s':>9}{'share':>8}")
    total = float(np.median(step_time))
    for name in ("generate", "reward", "forward", "backward", "optimizer"):
        if name in parts:
            m = float(np.median(parts[name]))
            print(f"{name:<11}{m:>9.3f}{100 * m / total:>7.0f}%")
    other = total - sum(float(np.median(parts[n])) for n in parts)
    print(f"{'other':<11}{other:>9.3f}{100 * other / total:>7.0f}%")
    print(f"{'step':<11}{total:>9.3f}   (TRL step_time, median of steps 2-{args.steps})")
    batch, length, fwd, bwd = loss_floor(cfg, args.arm, steps)
    print(f"floor: the PEFT model alone on {batch} x {length} tokens: forward {fwd:.3f} s, backward {bwd:.3f} s")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
