"""Time each stage of a whole study from scratch, as `make study` runs it.

    .venv/bin/python scripts/bench_study.py                 # params/embedded.yaml
    .venv/bin/python scripts/bench_study.py tiny --keep     # keep the outputs folder

Runs into a fresh temporary outputs folder (nothing cached), then prints per stage the
notebooks' seconds (summed; they run ``workers`` at a time and overlap) and CPU seconds (user +
system, kernels included), the wall time, the share of the machine's CPU time the study kept
busy (CPU seconds / (wall x cores)), and the machine it ran on. Take it on an idle machine.
"""

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch

from diffgrpo import params, study
from diffgrpo.store import layout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params_file", nargs="?", default="embedded")
    ap.add_argument("--keep", action="store_true", help="keep the outputs folder and print where it is")
    args = ap.parse_args()

    out = Path(tempfile.mkdtemp(prefix="diffgrpo-bench-"))
    os.environ["DIFFGRPO_OUTPUTS"] = str(out)
    cfg = params.load(args.params_file)
    t0 = time.perf_counter()
    study.main([args.params_file])
    total = time.perf_counter() - t0
    timings = json.loads((out / cfg.study / layout.TIMINGS).read_text())
    print(f"\nstudy {cfg.study!r} on {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}, workers {cfg.workers}")
    cpu = timings.get("cpu_s", {"stages": {}, "total": float("nan")})
    print(f"{'stage':<14}{'notebooks':>10}{'seconds':>9}{'CPU s':>9}   (summed over the stage's notebooks; they overlap)")
    for stage, seconds in timings["stages"].items():
        n = sum(1 for k in timings["notebooks"] if k.split(" ")[0] == stage)
        print(f"{stage:<14}{n:>10}{seconds:>9.1f}{cpu['stages'].get(stage, float('nan')):>9.1f}")
    cores = os.cpu_count() or 1
    print(f"{'wall':<24}{timings['wall_s']:>9.1f}")
    print(f"{'CPU seconds':<33}{cpu['total']:>9.1f}")
    print(f"{'CPU busy':<24}{cpu['total'] / (timings['wall_s'] * cores):>9.0%}   (CPU seconds / (wall x {cores} cores))")
    print(f"{'total (with set-up)':<24}{total:>9.1f}")
    if args.keep:
        print(f"outputs: {out}")
    else:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
