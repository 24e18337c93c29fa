"""Measured peak memory of one training pass on the CPU, beside diffgrpo.study.plan's estimate.

    nice -n 19 flock /work/BENCH_LOCK .venv/bin/python scripts/bench_plan_memory.py
    .venv/bin/python scripts/bench_plan_memory.py --model smollm2 --completions 16 --completion 128

One pass as TRL 1.16's GRPOTrainer runs it (``_get_per_token_logps_and_entropies`` then the
loss): the model with PEFT LoRA on every projection (``diffgrpo.train.lora_config``), TRL's
fused LM head (``trl.trainer.utils.add_fused_lm_head``), ``completions`` sequences of
``prompt + completion`` tokens, the per-token log-probabilities of the completion tokens,
backward, one AdamW step. Each measurement runs in a fresh process; memory is the process's
resident set (``ru_maxrss`` high-water mark minus the resident set after the model and its
adapter are built), so it counts what the pass adds: activations, the LM head's tiles, the
adapter's gradients (a warm-up pass of one sequence builds AdamW's moments and loads the
kernels' libraries before the baseline). The plan's figure for the same terms is
``activations + logits + 4 bytes a LoRA parameter`` (:class:`diffgrpo.study.plan.TrainMemory`).

``--model embedded`` is the packaged model; ``--model smollm2`` the SmolLM2-135M-Instruct
architecture from the shipped config.json with random weights (memory does not depend on the
weights' values, and the GGUF needs a download).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(model_name: str, completions: int, prompt: int, completion: int, ckpt: bool, r: int) -> dict:
    import torch
    from peft import get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from diffgrpo import params, train
    from diffgrpo.study import plan

    torch.manual_seed(0)
    torch.set_num_threads(1)
    over = {"train.lora.r": r, "train.lora.alpha": r, "train.gradient_checkpointing": ckpt}
    if model_name == "smollm2":
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = params.load("smollm2_arithmetic", overrides=over)
        folder = plan.CONFIGS_DIR / "HuggingFaceTB--SmolLM2-135M-Instruct"
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.float32)
    else:
        from diffgrpo.models.loading import load_model

        cfg = params.load("embedded", overrides=over)
        model, _ = load_model("embedded")
    model.train()
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    model = get_peft_model(model, train.lora_config(cfg))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (completions, prompt + completion))
    mask = torch.ones_like(ids)
    labels = ids.clone()
    labels[:, :prompt] = -100

    def one_pass(rows: int) -> None:
        out = model(input_ids=ids[:rows], attention_mask=mask[:rows], labels=labels[:rows], fused_lm_head=True)
        loss = -(out.log_probs[:, -completion:]).mean() - 0.0 * out.entropy[:, -completion:].mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    one_pass(1)  # warm-up: the kernels' libraries and AdamW's moments exist before the baseline
    # what autograd keeps for the backward (distinct storages), beside the plan's saved activations
    saved: dict[int, int] = {}

    def pack(t):
        saved.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    base = _rss_mib()
    t0 = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        one_pass(completions)
    seconds = time.perf_counter() - t0
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved_mib = sum(v for k, v in saved.items() if k not in weights) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    shape = plan.model_shape(cfg)
    work = plan.TrainWork("-", 1, completions, 1, completion, completions, 1, 1, None)
    m = plan.train_memory(cfg, shape, work, plan.GPUS["h100-80gb"], prompt)
    lora = shape.lora_params(r, list(cfg.train.lora.target_modules))
    planned = (m.activations_gib + m.logits_gib) * 1024 + lora * 4 / 2**20  # + the adapter's gradients
    tokens = completions * (prompt + completion)
    per_layer = shape.layer_activation_bytes(4, r)
    # what the forward saves: every layer's activations (or, checkpointed, each layer's input: the
    # recomputation saves under the checkpoint's own hooks, unseen here), the final norm's input and
    # the LM head's hidden states
    layers = shape.layers * per_layer if not ckpt else shape.layers * shape.hidden * 4
    planned_saved = tokens * (layers + 2 * shape.hidden * 4) / 2**20
    return {"model": model_name, "checkpointing": ckpt, "completions": completions, "prompt": prompt,
            "completion": completion, "tokens": completions * (prompt + completion), "lora_r": r,
            "measured_mib": round(peak - base, 1), "planned_mib": round(planned, 1),
            "saved_measured_mib": round(saved_mib, 1), "saved_planned_mib": round(planned_saved, 1),
            "planned_activations_mib": round(m.activations_gib * 1024, 1), "planned_logits_mib": round(m.logits_gib * 1024, 1),
            "ratio": round((peak - base) / planned, 2), "seconds": round(seconds, 1), "torch": torch.__version__}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["embedded", "smollm2"], nargs="+", default=["embedded", "smollm2"])
    ap.add_argument("--completions", type=int, default=None, help="sequences in the pass (default: 64 embedded, 16 smollm2)")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--completion", type=int, default=None, help="completion tokens (default: 192 embedded, 128 smollm2)")
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one measurement as JSON
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(**json.loads(args.one))))
        return 0
    rows = []
    for name in args.model:
        n = args.completions or (64 if name == "embedded" else 16)
        c = args.completion or (192 if name == "embedded" else 128)
        for ckpt in (False, True):
            spec = {"model_name": name, "completions": n, "prompt": args.prompt, "completion": c, "ckpt": ckpt, "r": args.r}
            out = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return out.returncode
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| model | checkpointing | sequences x tokens | saved for backward: measured / plan MiB | peak: measured MiB "
          "| peak: plan MiB (activations + logits + LoRA grads) | peak measured / plan |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {'on' if r['checkpointing'] else 'off'} | {r['completions']} x {r['prompt']}+{r['completion']} | "
              f"{r['saved_measured_mib']} / {r['saved_planned_mib']} | {r['measured_mib']} | {r['planned_mib']} ({r['planned_activations_mib']} + {r['planned_logits_mib']} + ...) | "
              f"{r['ratio']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
