"""`make gpu-smoke`: a tiny real-model study through every stage on the GPU path, then what was
measured beside what the plan estimated (docs/gpu.md, "The GPU smoke run").

    .venv-gpu/bin/python scripts/gpu_smoke.py [--set KEY=VALUE ...] [--report-only]

params/gpu_smoke.yaml: SmolLM2-135M-Instruct (the hub's, bf16) on arithmetic tier 1; the probe
and evaluation on vLLM (one engine a process, every checkpoint a LoRA request), training
through TRL with colocated vLLM in sleep mode, bf16, activation checkpointing and 2 passes an
update. The study runs in a fresh outputs folder (``outputs/gpu_smoke-<UTC time>``, through
DIFFGRPO_OUTPUTS), so nothing cached stands in for a measurement. Printed per stage: seconds,
completions and tokens generated, tokens/s, and the plan's time range for the same jobs; for
training also s/step and the peak GPU memory the plan sized. Refuses (exit 2) where torch sees
no GPU or vLLM is not installed: it has not been run on a GPU yet (none was lent to the project).

``--report-only DIR``: print the comparison for a study already run into DIR (an outputs
folder holding ``gpu_smoke/``), e.g. after an interruption.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = "gpu_smoke"


def refuse_without_gpu() -> str | None:
    """Why the smoke run cannot run here, or None."""
    import torch

    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False): the GPU smoke run needs "
                "a CUDA GPU with a driver of the 580 series or newer (docs/gpu.md, Driver requirement)")
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "vLLM is not installed in this environment: make gpu-env, then run it with .venv-gpu/bin/python"
    return None


def report(outputs: Path, overrides: dict) -> str:
    """Measured seconds, completions and tokens per stage of the study run into ``outputs``,
    beside the plan's range for the same jobs."""
    os.environ["DIFFGRPO_OUTPUTS"] = str(outputs)
    import pandas as pd

    from diffgrpo.store import artifacts, layout
    from diffgrpo import params
    from diffgrpo.study import graph, plan

    cfg = params.load(STUDY, overrides=overrides)
    table = plan.plan(cfg, graph.jobs(cfg, {"params_file": STUDY, "overrides": overrides}))
    timings = artifacts.read_json(layout.study_dir(cfg) / layout.TIMINGS, STUDY)["notebooks"]
    rows = []
    for _, job in table.iterrows():
        seconds = timings.get(job["job"])
        completions = tokens = None
        extra = ""
        if job["stage"] == "01_probe":
            s = pd.read_parquet(layout.probe_dir(cfg) / layout.SAMPLES)
            completions, tokens = len(s), int(s["num_tokens"].sum())
        elif job["stage"] == "04_evaluate":
            rid = job["job"].split(" ", 1)[1]
            s = pd.read_parquet(layout.eval_dir(cfg, rid) / layout.SAMPLES)
            completions, tokens = len(s), int(s["num_tokens"].sum())
        elif job["stage"] == "03_train":
            arm, seed = job["arm"], int(job["job"].rsplit("seed", 1)[1])
            run = layout.run_dir(cfg.for_arm(arm), arm, seed)
            m = artifacts.read_json(run / layout.MANIFEST, STUDY)
            steps = pd.read_parquet(run / layout.STEPS)
            completions = m["completions_generated"]
            tokens = int(round(float((steps["completions/mean_length"] * steps.get("completions_generated", 0)).sum())))
            extra = (f"{m['mean_step_seconds']} s/step; plan: pass {job.get('train_pass_gib')} GiB"
                     f" + vLLM share {job.get('vllm_share_gib')} GiB")
        rate = f"{tokens / seconds:,.0f}" if tokens and seconds else "-"
        rows.append({"job": job["job"], "measured_s": seconds, "completions": "-" if completions is None else completions,
                     "tokens": "-" if tokens is None else tokens,
                     "tokens_per_s": rate, "plan_s": f"{job['hours_low'] * 3600:.0f}-{job['hours_high'] * 3600:.0f}",
                     "note": extra})
    return pd.DataFrame(rows).to_string(index=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--report-only", type=Path, metavar="DIR", help="print the comparison for a study run into DIR")
    args = ap.parse_args(argv)
    from diffgrpo import params

    overrides = params.parse_overrides(args.overrides)
    if args.report_only is not None:
        print(report(args.report_only.resolve(), overrides))
        return 0
    why = refuse_without_gpu()
    if why:
        print(f"gpu-smoke: not run: {why}", file=sys.stderr)
        return 2
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    outputs = ROOT / "outputs" / f"{STUDY}-{stamp}"
    cmd = [sys.executable, "-m", "diffgrpo.study", STUDY] + [x for o in args.overrides for x in ("--set", o)]
    print("gpu-smoke:", " ".join(cmd), f"(DIFFGRPO_OUTPUTS={outputs})", flush=True)
    done = subprocess.run(cmd, env={**os.environ, "DIFFGRPO_OUTPUTS": str(outputs)}, cwd=ROOT)
    if done.returncode != 0:
        print(f"gpu-smoke: the study failed (exit {done.returncode}); its notebooks and logs are under {outputs}",
              file=sys.stderr)
        return done.returncode
    print(report(outputs, overrides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
