"""Where a model runs, and how one GRPO update's prompts are split over processes (GPUs).

``model.device`` names the device of every stage: the probe and evaluation put the model and
its inputs there (:func:`device`), training hands it to TRL (``use_cpu``; under ``accelerate
launch`` each process takes its own GPU).

Several GPUs: ``accelerate launch --num_processes N`` runs N copies of the training process,
and HF's Trainer multiplies ``per_device_train_batch_size`` by N. :func:`batching` therefore
derives the per-device batch and the gradient accumulation from ``train.prompts_per_step``,
so that one optimizer update always holds ``prompts_per_step x group_size`` completions,
whatever N is:

    prompts_per_step = per_device_prompts x num_processes x gradient_accumulation_steps

A combination that cannot hold it (32 prompts over 3 GPUs) is refused rather than rounded.
Each process's share is whole groups (the per-device batch is a multiple of G), so a group's
G completions are generated and scored in one process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


#: the GPU memory a step, a run and a stage record: this process's peaks, in GiB
MEMORY_FIELDS = ("peak_allocated_gib", "peak_reserved_gib")


def peak_memory(reset: bool = False) -> dict[str, float | None]:
    """This process's GPU memory peaks since the last reset, in GiB: what tensors held at most
    (``torch.cuda.max_memory_allocated``) and what the caching allocator took from the card
    (``max_memory_reserved``, what decides an out-of-memory), on the current device. None for
    each where CUDA is not in use (a CPU run). ``reset``: start the next window here."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return dict.fromkeys(MEMORY_FIELDS)
    out = dict(zip(MEMORY_FIELDS, (round(torch.cuda.max_memory_allocated() / 2**30, 3),
                                   round(torch.cuda.max_memory_reserved() / 2**30, 3))))
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return out


def max_memory(records: list[dict]) -> dict[str, float | None]:
    """The largest of each :data:`MEMORY_FIELDS` over ``records`` (steps, levels, passes); None
    where none holds one (a CPU run)."""
    out = {}
    for k in MEMORY_FIELDS:
        values = [r[k] for r in records if r.get(k) is not None]
        out[k] = max(values) if values else None
    return out


def device(name: str) -> torch.device:
    """``model.device`` as a torch device; a clear error when it names a GPU torch cannot see.
    ``cuda`` under ``accelerate launch`` is the process's own GPU (``cuda:<LOCAL_RANK>``), so
    N training processes never load N copies of the model onto the first GPU."""
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"model.device = {name!r} but torch sees no GPU (torch {torch.__version__}, "
            f"torch.cuda.is_available() is False): set `model.device: cpu` in the params file, "
            "or run on a GPU machine in the GPU environment (make gpu-env, docs/gpu.md)"
        )
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device(name)


#: the caching allocator's setting for HF generation on cuda: a growing dynamic KV cache let it
#: reserve the whole card (138.9 GiB reserved for 35.5 allocated, one GRPO step's rollouts on one
#: H200, 2026-11-27); expandable segments grow one mapping instead of caching a block a size
EXPANDABLE = "expandable_segments:True"


def expandable_segments(env=os.environ) -> bool:
    """Set ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` for HF generation on cuda, before
    torch initialises CUDA (the allocator reads it then); a value the user set is kept, and once
    CUDA is initialised nothing is set (too late). Not with vLLM: its sleep mode's memory pool
    refuses expandable segments. True when the setting is in force."""
    if "PYTORCH_CUDA_ALLOC_CONF" in env:
        return EXPANDABLE in env["PYTORCH_CUDA_ALLOC_CONF"]
    if torch.cuda.is_initialized():
        return False
    env["PYTORCH_CUDA_ALLOC_CONF"] = EXPANDABLE
    return True


def num_processes() -> int:
    """Processes of this training job: ``WORLD_SIZE`` as ``accelerate launch`` / torchrun set
    it, 1 for a plain ``python`` process."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """The process that writes a run's files (rank 0; the only one without a launcher)."""
    return int(os.environ.get("RANK", "0")) == 0


def free_port() -> int:
    """A TCP port free on this machine now, for a launched job's rendezvous: several launched
    runs (or test sessions) on one node must not share a fixed one."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sum_over_processes(values: list[int]) -> list[int]:
    """``values`` summed over the processes of a launched job (an all-reduce: every process
    must call it at the same point, or the others wait); the values themselves with one
    process. How training processes agree on what each alone cannot see: dynamic sampling's
    rounds and kept groups, the completion budget (diffgrpo.train.trainer)."""
    if num_processes() == 1:
        return [int(v) for v in values]
    import torch.distributed as dist
    from accelerate import PartialState

    t = torch.tensor([int(v) for v in values], dtype=torch.long, device=PartialState().device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [int(v) for v in t.tolist()]


@dataclass(frozen=True)
class Batching:
    """One optimizer update's completions, split over processes and accumulation steps."""

    prompts_per_step: int
    group_size: int
    num_processes: int
    per_device_prompts: int  # prompts of one forward/backward pass on one process
    gradient_accumulation_steps: int

    @property
    def per_device_train_batch_size(self) -> int:
        """TRL counts completions, not prompts."""
        return self.per_device_prompts * self.group_size


def batching(prompts_per_step: int, group_size: int, n_processes: int, per_device_prompts: int | None) -> Batching:
    """Per-device batch and gradient accumulation that keep ``prompts_per_step`` per update.

    ``per_device_prompts``: prompts one process takes in one forward/backward pass (null: its
    whole share of the update, no accumulation)."""
    where = (f"train.prompts_per_step = {prompts_per_step} with {n_processes} process(es)"
             + (f" and train.per_device_prompts = {per_device_prompts}" if per_device_prompts else ""))
    if n_processes < 1:
        raise ValueError(f"{n_processes} processes: need at least 1")
    if prompts_per_step % n_processes:
        raise ValueError(f"{where}: the prompts of an update do not split evenly over the processes; "
                         f"use a number of GPUs that divides {prompts_per_step}, or change prompts_per_step")
    share = prompts_per_step // n_processes
    micro = share if per_device_prompts is None else per_device_prompts
    if micro > share or share % micro:
        raise ValueError(f"{where}: each process gets {share} prompt(s) per update, which "
                         f"{micro} per pass does not divide; pick a divisor of {share}")
    return Batching(prompts_per_step, group_size, n_processes, micro, share // micro)
