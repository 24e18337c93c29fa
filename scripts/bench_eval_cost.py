"""What one checkpoint's evaluation costs at a held-out set's size and metric (issue 46, items 1-2).

    .venv/bin/python scripts/bench_eval_cost.py                          # online_vs_offline_resolved
    .venv/bin/python scripts/bench_eval_cost.py paper003_confirmatory --sizes 300 1000 2000 --samples 0 4

Times ``evaluate.evaluate_base`` (the base model's evaluation, as the study's ``04_evaluate base``
runs it, without the notebook's kernel) from a fresh outputs folder for each held-out size x
``evaluate.n_samples`` (0: greedy only; k: greedy plus k samples a prompt, avg@k), one torch
thread, one after the other. The task's held-out split is raised to the size
(``dataset.task_options.test_size``) where the task generates it. Prints seconds (wall and CPU)
and completions a second. Run it on an idle machine: it is a timing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", nargs="?", default="online_vs_offline_resolved")
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 1000, 2000])
    ap.add_argument("--samples", type=int, nargs="+", default=[0, 4])
    args = ap.parse_args()
    os.environ["DIFFGRPO_OUTPUTS"] = tempfile.mkdtemp(prefix="diffgrpo-bench-eval-")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from diffgrpo import evaluate, params

    print(f"{'prompts':>8} {'n_samples':>9} {'wall_s':>7} {'cpu_s':>7} {'completions/s':>14}")
    for n in args.sizes:
        for k in args.samples:
            base = params.load(args.params_file)
            overrides = {"study": f"bench-eval-{n}-{k}", "dataset.test_size": n, "evaluate.n_samples": k,
                         "evaluate.pass_k": [1] if k else []}
            if "test_size" in base.dataset.task_options:  # a generated task: its held-out split as large as the set
                overrides["dataset.task_options.test_size"] = max(n, base.dataset.task_options["test_size"])
            cfg = params.load(args.params_file, overrides=overrides)
            t0, c0 = time.perf_counter(), time.process_time()
            evaluate.evaluate_base(cfg, progress=False)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"{n:>8} {k:>9} {wall:>7.1f} {cpu:>7.1f} {n * (1 + k) / wall:>14.0f}", flush=True)


if __name__ == "__main__":
    main()
