"""Generate and score completions in resumable chunks (shared by the probe and evaluation).

Prompts are processed ``chunk_size`` at a time; each finished chunk is written atomically as
``part-<i>.parquet`` under a work folder, so an interrupted run resumes at the first missing
chunk and loses nothing already written. Each chunk has its own seed (derived from the base
seed and the chunk index), so a resumed run produces exactly what an uninterrupted one would,
and a chunk is the same whichever process generates it: with ``helpers`` (the probe on a CPU,
:func:`cpu_helpers`) that many more processes, each with its own copy of the model, take
chunks beside the caller's (a ``part-<i>.claim`` file marks a chunk one of them has taken).
A helper that fails (an error in it, its model included) leaves its chunks to the caller; one
that dies (killed, out of memory) stops the pass at once with :class:`HelpersFailed`, and so
does a pool that cannot start (a read-only ``/dev/shm``): one line that says what to do, the
chunks written kept for the rerun.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from diffgrpo import processes
from diffgrpo import progress as progress_bars
from diffgrpo.store import artifacts
from diffgrpo.models import devices, resolve, vllm_engine
from diffgrpo.models.generation import HFGenerator
from diffgrpo.params import Config
from diffgrpo.tasks import Task

SAMPLE_COLUMNS = ["prompt_id", "sample", "completion", "correct", "num_tokens", "finished"]

log = logging.getLogger("diffgrpo.sampling")

#: chunks left to generate before :class:`Helpers` start: a helper's start (a fresh interpreter,
#: the stack's imports, its model: about 5 CPU-seconds with the embedded model) costs about half a
#: chunk of the default probe (128 prompts x 8 samples)
HELPER_MIN_CHUNKS = 3
#: what to do about helpers that cannot run, in the words of the params
NO_HELPERS = "or probe without helper processes: `--set workers=1` (helpers are workers - 1 on a CPU)"


class HelpersFailed(RuntimeError):
    """The probe's helper processes cannot start (their shared-memory lock), or one died."""


def sample_and_score(generator: Any, task: Task, rows: pd.DataFrame, *, n: int, temperature: float,
                     top_p: float, max_new_tokens: int, seed: int, work_dir: Path, key: dict,
                     chunk_size: int = 128, progress: bool = True, desc: str = "sample",
                     helpers: Helpers | None = None) -> pd.DataFrame:
    """``n`` completions per row of ``rows`` (columns id, prompt, answer), each scored by ``task``.

    ``key`` describes everything that decides the result; chunks left by a run with another
    key are discarded rather than mixed in. ``helpers``: processes that take missing chunks
    beside this one (:class:`Helpers`); what they fail to write is generated here; a helper that
    dies stops the pass (:class:`HelpersFailed`), the chunks written kept.
    """
    work_dir = Path(work_dir)
    key_file = work_dir / "key.json"
    if key_file.exists() and _stored_key(key_file) != artifacts.jsonable(key):
        shutil.rmtree(work_dir)  # another key's chunks (or a damaged key file): never mixed in
    work_dir.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(key_file, key)
    for stale in work_dir.glob("*.claim"):  # an interrupted run's (the caller holds the folder)
        stale.unlink()

    chunks = [rows.iloc[i:i + chunk_size] for i in range(0, len(rows), chunk_size)]
    parts = [work_dir / f"part-{i:05d}.parquet" for i in range(len(chunks))]
    missing = [i for i, part in enumerate(parts) if not part.exists()]
    if missing and hasattr(generator, "check_prompts"):  # every row fits, before anything generates
        generator.check_prompts(list(rows["id"]), list(rows["prompt"]), max_new_tokens,
                                where=rows.attrs.get("source"))
    sampling = dict(n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
    pool = helpers.executor() if helpers is not None and len(missing) >= HELPER_MIN_CHUNKS else None
    # each helper takes the next chunk nobody has claimed, as this process does
    try:
        futures = [pool.submit(_helper_chunk, task, chunks[i], i, sampling, parts[i]) for i in missing] if pool else []
    except BrokenProcessPool as err:  # a helper died since the last pass
        raise _died(work_dir, err) from None
    bar = progress_bars.bar(len(rows), desc, unit="prompt", disable=not progress)
    for i, (chunk, part) in enumerate(zip(chunks, parts)):
        if not part.exists() and (pool is None or _claim(part)):  # a damaged one is redone below
            _generate_chunk(generator, task, chunk, i, sampling, part)
        _check_alive(futures, work_dir)  # a helper that died: stopped now, not after its chunks are redone
        bar.update(sum(len(c) for c, p in zip(chunks, parts) if p.exists()) - bar.n)  # the helpers' chunks too
    by_helpers = 0
    for future in futures:
        try:
            by_helpers += bool(future.result())
        except BrokenProcessPool as err:
            raise _died(work_dir, err) from None
        except Exception as err:  # a helper that failed: its chunk is generated below
            log.warning("%s: a sampling helper failed (%s: %s); its chunk is generated here", work_dir,
                        type(err).__name__, err)
    if pool is not None:
        log.info("%s: %d of %d chunks generated by %d helper process(es)", work_dir, by_helpers, len(missing),
                 helpers.count)
    done = []
    for i, (chunk, part) in enumerate(zip(chunks, parts)):
        frame = _readable(part)
        if frame is None:
            _generate_chunk(generator, task, chunk, i, sampling, part)
            frame = pd.read_parquet(part)  # as a resumed run reads it
        done.append(frame)
        part.with_suffix(".claim").unlink(missing_ok=True)
    bar.update(len(rows) - bar.n)
    bar.close()
    return pd.concat(done, ignore_index=True) if done else pd.DataFrame(columns=SAMPLE_COLUMNS)


def _generate_chunk(generator: Any, task: Task, chunk: pd.DataFrame, i: int, sampling: dict, part: Path) -> None:
    """Chunk ``i``'s completions, scored, written atomically to ``part``. Its seed is the base
    seed's and its index's, whichever process runs it."""
    outs = generator.generate(list(chunk["prompt"]), n=sampling["n"], temperature=sampling["temperature"],
                              top_p=sampling["top_p"], max_new_tokens=sampling["max_new_tokens"],
                              seed=sampling["seed"] * 100_003 + i, progress=False)
    records = [
        {"prompt_id": pid, "sample": j, "completion": c.text,
         "correct": task.score(c.text, answer), "num_tokens": c.num_tokens, "finished": c.finished}
        for pid, answer, completions in zip(chunk["id"], chunk["answer"], outs)
        for j, c in enumerate(completions)
    ]
    artifacts.write_parquet(part, pd.DataFrame.from_records(records, columns=SAMPLE_COLUMNS))


def _check_alive(futures: list[Future], work_dir: Path) -> None:
    """:class:`HelpersFailed` when a helper process died (its pool is broken): killed, or out of memory."""
    for future in futures:
        if future.done() and not future.cancelled() and isinstance(future.exception(), BrokenProcessPool):
            raise _died(work_dir, future.exception())


def _died(work_dir: Path, err: BaseException) -> HelpersFailed:
    return HelpersFailed(f"{work_dir}: a helper process of the probe died (BrokenProcessPool: {err}): killed, or "
                         "out of memory (`dmesg` says which); the chunks written are kept, so a rerun resumes from "
                         f"them: rerun the same command, {NO_HELPERS}")


def _claim(part: Path) -> bool:
    """Take the chunk that writes ``part`` for this process: False when another has it."""
    try:
        os.close(os.open(part.with_suffix(".claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except FileExistsError:
        return False


class Helpers:
    """``count`` processes that generate chunks of :func:`sample_and_score` beside the calling
    one, each with its own generator from ``make_generator`` (picklable) and the caller's torch
    thread count, so that a chunk's arithmetic, and so its samples, are the same in every
    process. Spawned (a fresh interpreter, not a fork of a kernel that has threads) on first
    use, kept for every later call (the probe's test set, pool and one-sample pass) and stopped
    on leaving the ``with``. Each dies with the thread that started the pool (the one whose
    first pass submitted chunks): the caller killed, they end too (:mod:`diffgrpo.processes`)."""

    def __init__(self, count: int, make_generator: Callable[[], Any]):
        self.count, self.make_generator = count, make_generator
        self._pool: ProcessPoolExecutor | None = None

    def executor(self) -> ProcessPoolExecutor | None:
        """The pool, started on first use; a pool that cannot start is :class:`HelpersFailed`:
        its queues need a shared-memory lock (multiprocessing's SemLock, in ``/dev/shm``), which a
        read-only or missing ``/dev/shm`` refuses (it was blamed on the outputs folder)."""
        if self.count > 0 and self._pool is None:
            try:
                self._pool = ProcessPoolExecutor(self.count, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start_helper,
                                                 initargs=(self.make_generator, torch.get_num_threads(), os.getpid()))
            except OSError as err:
                raise HelpersFailed(
                    f"the probe's {self.count} helper process(es) cannot start: their shared-memory lock "
                    f"(multiprocessing's SemLock, in /dev/shm) failed ({type(err).__name__}: {err}); mount /dev/shm "
                    f"read-write (a container: --shm-size, or --ipc=host) and rerun, {NO_HELPERS}") from None
        return self._pool

    def __enter__(self) -> Helpers:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:  # after an error or interrupt: queued chunks dropped, nothing waited for
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=True)
            self._pool = None


_helper_generator: Any = None  # a helper process's own
_helper_failed: Exception | None = None  # why it has none


def _start_helper(make_generator: Callable[[], Any], threads: int, parent: int) -> None:
    global _helper_generator, _helper_failed
    # the process that started it (a kernel) killed: this one too, and the pool's resource
    # tracker after them (it ends with the last process holding its pipe); nothing else would
    # end a helper that waits for its next chunk
    processes.die_with_parent(parent)
    torch.set_num_threads(threads)
    try:
        _helper_generator = make_generator()
    except Exception as err:  # kept: each chunk it is handed fails with it, and the caller generates them
        _helper_failed = err  # (an initializer that raises ends its process: a pool broken, as if killed)


def _helper_chunk(task: Task, chunk: pd.DataFrame, i: int, sampling: dict, part: Path) -> bool:
    """Chunk ``i`` in a helper, unless another process has it; whether this one generated it."""
    if _helper_failed is not None:
        raise RuntimeError(f"the helper has no model ({type(_helper_failed).__name__}: {_helper_failed})")
    if part.exists() or not _claim(part):
        return False
    _generate_chunk(_helper_generator, task, chunk, i, sampling, part)
    return True


def cpu_helpers(cfg: Config) -> int:
    """Helper processes for the probe's chunks (:class:`Helpers`): ``workers - 1`` when it
    generates on the CPU with transformers (one process per core, as training's runs), none on
    a GPU (one card, one engine) or with vLLM."""
    return max(cfg.workers - 1, 0) if cfg.model.device == "cpu" and cfg.generation.backend == "hf" else 0


def _stored_key(key_file: Path) -> Any:
    try:
        return artifacts.read_json(key_file)
    except artifacts.ArtifactError:
        return None


def _readable(part: Path) -> pd.DataFrame | None:
    """A finished chunk, or None when it is missing or damaged (then it is generated again)."""
    if not part.exists():
        return None
    try:
        return pd.read_parquet(part)
    except Exception:
        part.unlink()
        return None


def load_generator(cfg: Config, batch_size: int, adapter: Path | None = None, serve_adapters: bool = False):
    """The generator of the probe and evaluation that ``generation.backend`` names, for the
    base model or the base plus a LoRA ``adapter`` (merged for HF; served unmerged by vLLM).
    ``serve_adapters``: the process serves checkpoints too, so vLLM's one engine is built with
    LoRA for the base model already (the evaluation; the probe's engine has no LoRA)."""
    if cfg.generation.backend == "vllm":
        return vllm_engine.generator(cfg, adapter=adapter, serve_adapters=serve_adapters)
    if cfg.model.device == "cuda":
        devices.expandable_segments()  # before the model reaches the card
    model, tokenizer = resolve.load_model(cfg, adapter=adapter)
    return HFGenerator(model, tokenizer, batch_size=batch_size, chat_template_kwargs=cfg.model.chat_template_kwargs)
