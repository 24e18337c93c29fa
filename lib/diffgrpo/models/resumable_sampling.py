"""Generate and score completions in resumable chunks (shared by the probe and evaluation).

Prompts are processed ``chunk_size`` at a time; each finished chunk is written atomically as
``part-<i>.parquet`` under a work folder, so an interrupted run resumes at the first missing
chunk and loses nothing already written. Each chunk has its own seed (derived from the base
seed and the chunk index), so a resumed run produces exactly what an uninterrupted one would.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from diffgrpo import progress as progress_bars
from diffgrpo.store import artifacts
from diffgrpo.models import devices, resolve, vllm_engine
from diffgrpo.models.generation import HFGenerator
from diffgrpo.params import Config
from diffgrpo.tasks import Task

SAMPLE_COLUMNS = ["prompt_id", "sample", "completion", "correct", "num_tokens", "finished"]


def sample_and_score(generator: Any, task: Task, rows: pd.DataFrame, *, n: int, temperature: float,
                     top_p: float, max_new_tokens: int, seed: int, work_dir: Path, key: dict,
                     chunk_size: int = 128, progress: bool = True, desc: str = "sample") -> pd.DataFrame:
    """``n`` completions per row of ``rows`` (columns id, prompt, answer), each scored by ``task``.

    ``key`` describes everything that decides the result; chunks left by a run with another
    key are discarded rather than mixed in.
    """
    work_dir = Path(work_dir)
    key_file = work_dir / "key.json"
    if key_file.exists() and _stored_key(key_file) != artifacts.jsonable(key):
        shutil.rmtree(work_dir)  # another key's chunks (or a damaged key file): never mixed in
    work_dir.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(key_file, key)

    chunks = [rows.iloc[i:i + chunk_size] for i in range(0, len(rows), chunk_size)]
    missing = any(not (work_dir / f"part-{i:05d}.parquet").exists() for i in range(len(chunks)))
    if missing and hasattr(generator, "check_prompts"):  # every row fits, before anything generates
        generator.check_prompts(list(rows["id"]), list(rows["prompt"]), max_new_tokens,
                                where=rows.attrs.get("source"))
    parts = []
    bar = progress_bars.bar(len(rows), desc, unit="prompt", disable=not progress)
    for i, chunk in enumerate(chunks):
        part = work_dir / f"part-{i:05d}.parquet"
        done = _readable(part)
        if done is None:
            outs = generator.generate(
                list(chunk["prompt"]), n=n, temperature=temperature, top_p=top_p,
                max_new_tokens=max_new_tokens, seed=seed * 100_003 + i, progress=False,
            )
            records = [
                {"prompt_id": pid, "sample": j, "completion": c.text,
                 "correct": task.score(c.text, answer), "num_tokens": c.num_tokens, "finished": c.finished}
                for pid, answer, completions in zip(chunk["id"], chunk["answer"], outs)
                for j, c in enumerate(completions)
            ]
            artifacts.write_parquet(part, pd.DataFrame.from_records(records, columns=SAMPLE_COLUMNS))
            done = pd.read_parquet(part)  # as a resumed run reads it
        parts.append(done)
        bar.update(len(chunk))
    bar.close()
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SAMPLE_COLUMNS)


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
