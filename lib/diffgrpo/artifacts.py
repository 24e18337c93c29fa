"""Plain-file artifacts under one root, written atomically.

Every stage writes through these helpers: a file is written to a temporary name in the same
folder and renamed into place, so an interrupted run never leaves a half-written file that a
later stage would trust.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

#: where everything a run writes goes; override with DIFFGRPO_OUTPUTS
OUTPUTS_ENV = "DIFFGRPO_OUTPUTS"


def project_root() -> Path:
    """The checkout's root (the folder holding ``lib/``), or the working directory."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "lib").is_dir():
            return parent
    return Path.cwd()


def outputs_root() -> Path:
    env = os.environ.get(OUTPUTS_ENV)
    return Path(env) if env else project_root() / "outputs"


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def write_parquet(path: str | os.PathLike, df: pd.DataFrame) -> Path:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return Path(path)


def write_csv(path: str | os.PathLike, df: pd.DataFrame) -> Path:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return Path(path)


def save_figure(fig: Any, path: str | os.PathLike, **kwargs: Any) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", bbox_inches="tight", **kwargs)
    return path


def jsonable(obj: Any) -> Any:
    """``obj`` as it reads back from JSON (tuples become lists...), for comparing with a stored key."""
    return json.loads(json.dumps(obj, sort_keys=True, default=_json_default))


def relative(path: str | os.PathLike, start: str | os.PathLike) -> str:
    """``path`` relative to ``start``, as manifests store it."""
    return os.path.relpath(Path(path), Path(start))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
