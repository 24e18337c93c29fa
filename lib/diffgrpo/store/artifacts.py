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
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # imported where a table is read: a study's notebook job processes import this
    import pandas as pd  # module for its paths and locks alone, 44 times a study (0.5 s each)

#: where everything a run writes goes; override with DIFFGRPO_OUTPUTS
OUTPUTS_ENV = "DIFFGRPO_OUTPUTS"


def project_root() -> Path:
    """The checkout's root (the folder holding ``lib/``), or the working directory."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "lib").is_dir():
            return parent
    return Path.cwd()


#: the checkout whose notebooks, params and outputs a command uses (default: the one it runs in)
PROJECT_ENV = "DIFFGRPO_PROJECT"


def is_checkout(folder: Path) -> bool:
    """Whether ``folder`` is a diffgrpo checkout (its package, notebooks and pyproject)."""
    return ((folder / "pyproject.toml").is_file() and (folder / "lib" / "diffgrpo").is_dir()
            and (folder / "notebooks").is_dir())


def checkout_root() -> Path:
    """The checkout whose ``notebooks/``, ``params/`` and default ``outputs/`` a command uses:
    the one ``DIFFGRPO_PROJECT`` names, else the checkout the working directory lies in, else
    the one the package was installed from (:func:`project_root`). A second clone worked in
    with the first one's environment so uses its own files, not the first's
    (:func:`checkout_mismatch` says when the code comes from elsewhere)."""
    env = os.environ.get(PROJECT_ENV)
    if env:
        folder = Path(env).expanduser().resolve()
        if not is_checkout(folder):
            raise OutputsError(f"{PROJECT_ENV}={env}: {folder} is not a diffgrpo checkout (it needs pyproject.toml, "
                               "lib/diffgrpo/ and notebooks/); point it at one, or unset it")
        return folder
    try:
        here = Path.cwd().resolve()
    except FileNotFoundError:  # the working directory was deleted
        return project_root()
    for folder in (here, *here.parents):
        if is_checkout(folder):
            return folder
    return project_root()


def checkout_mismatch() -> str | None:
    """A sentence when the checkout in use is not the one the package's code is imported
    from (its notebooks would run the other checkout's library), else None."""
    use, code = checkout_root(), project_root()
    if use == code:
        return None
    return (f"note: using the notebooks, params and outputs of {use}, but the diffgrpo code imported here is "
            f"{code}'s (this environment was installed from there); to run {use}'s code, install it there "
            f"(`make setup` in {use}) or use its own environment")


def outputs_root() -> Path:
    env = os.environ.get(OUTPUTS_ENV)
    return Path(env) if env else checkout_root() / "outputs"


@contextmanager
def outputs_at(root: str | os.PathLike) -> Iterator[Path]:
    """The outputs root moved to ``root`` for the block (``DIFFGRPO_OUTPUTS``, restored after):
    a study folder kept elsewhere (a committed report's inputs) read by the same code."""
    before = os.environ.get(OUTPUTS_ENV)
    os.environ[OUTPUTS_ENV] = str(root)
    try:
        yield Path(root)
    finally:
        if before is None:
            del os.environ[OUTPUTS_ENV]
        else:
            os.environ[OUTPUTS_ENV] = before


class OutputsError(RuntimeError):
    """The outputs root cannot be written, or a path would leave it."""


def check_outputs_root(root: Path | None = None, write: bool = True) -> Path:
    """The outputs root, checked before anything is written: an existing folder this process
    can write, or one it can create (its nearest existing parent a writable folder); with
    ``write`` False, only that it is or can become a folder (a reader may lack write access)."""
    root = Path(root) if root is not None else outputs_root()
    how = f"{OUTPUTS_ENV}={os.environ[OUTPUTS_ENV]}" if os.environ.get(OUTPUTS_ENV) else "the outputs folder"
    todo = f"point {OUTPUTS_ENV} at a folder you can write (or unset it for <project>/outputs)"
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise OutputsError(f"{how}: {probe} is not a directory, so {root} cannot be a folder; {todo}")
    if write and not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == root else f"cannot be created ({probe} is not writable)"
        raise OutputsError(f"{how}: {root} {what}; {todo}")
    return root


def inside_outputs(path: str | os.PathLike, what: str = "") -> Path:
    """``path`` after checking that it stays under the outputs root (``..`` and absolute parts
    resolved lexically; a symlink the user placed inside the root is theirs to follow)."""
    path = Path(path)
    root = os.path.abspath(outputs_root())
    full = os.path.abspath(path)
    if full != root and not full.startswith(root.rstrip(os.sep) + os.sep):
        raise OutputsError(f"{path}{f' ({what})' if what else ''}: would be written outside the outputs root "
                           f"{root}; every name that becomes a path part must be a plain name "
                           "(diffgrpo.params.SAFE_NAME)")
    return path


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() would respect the umask
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


class FolderBusy(RuntimeError):
    """Another live process is writing the folder."""


#: what a write that ran out of disk raises where it is not an OSError: torch.save's C++ stream
#: (``basic_ios::clear: iostream error``), its zip writer
DISK_FULL_TEXT = ("iostream error", "PytorchStreamWriter failed", "No space left on device")


def storage_problem(err: BaseException, where: str | os.PathLike | None = None) -> str | None:
    """One line naming a full disk, a read-only or unwritable folder, with what to do, for
    ``err`` (an OSError, or torch.save's error on a full disk); None for any other error.
    ``where``: the folder written (the outputs root when not given)."""
    import errno
    import re
    import shutil

    code, filename = getattr(err, "errno", None), getattr(err, "filename", None)
    said = re.search(r"\[Errno (\d+)\][^']*(?:'([^']*)')?", str(err))  # an OSError as text (a notebook's)
    if code is None and said:
        code, filename = int(said.group(1)), filename or said.group(2)
    path = Path(filename or where or outputs_root())
    if code == errno.ENOSPC or (code is None and any(t in str(err) for t in DISK_FULL_TEXT)):
        probe = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
        free = shutil.disk_usage(probe).free / 2 ** 20
        return (f"disk full at {path}: {free:,.0f} MB free; free some space (or set {OUTPUTS_ENV} to a larger disk), "
                "then rerun the same command: it resumes from what was saved, a half-written file is not trusted")
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        why = "a read-only file system" if code == errno.EROFS else "no permission to write"
        return (f"{path}: cannot be written ({why}); make it writable, or set {OUTPUTS_ENV} to a folder you can "
                "write, then rerun")
    return None


@contextmanager
def exclusive(folder: str | os.PathLike, wait: bool = False) -> Iterator[None]:
    """Hold the one writer's lock of ``folder`` (a training run, an evaluation, a probe).

    The lock is ``flock`` on ``.<name>.lock`` beside the folder (so deleting the folder keeps
    it), holding the writer's pid. The kernel drops it when the holder dies, however it dies,
    so a killed study never leaves a stale lock. A second writer is refused at once, with the
    holder's pid, rather than writing into the same files; with ``wait`` it waits its turn
    (for work that parallel jobs share, such as the base model's evaluation)."""
    import fcntl

    folder = Path(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except FileNotFoundError as err:  # under /proc or /sys: a folder that passes the checks and takes no folder
        raise OutputsError(f"{folder.parent}: cannot be created ({err.strerror}: {err.filename}), so the outputs "
                           f"folder {outputs_root()} cannot hold it; point {OUTPUTS_ENV} at a folder you can write "
                           "(or unset it for <project>/outputs)") from None
    lock = folder.parent / f".{folder.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise FolderBusy(f"{folder}: another process (pid {holder}) is writing it; wait for it to "
                             f"finish or stop it, then rerun") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _umask() -> int:
    try:  # Linux shows it without changing it (os.umask would, for every thread, for a moment)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def follow_umask(folder: str | os.PathLike) -> None:
    """Give the files under ``folder`` the mode a plain ``open()`` would (0666 less the umask),
    where a library wrote them with a narrower one (safetensors: 0600)."""
    mode = 0o666 & ~_umask()
    for f in Path(folder).rglob("*"):
        if f.is_file() and not f.is_symlink():
            current = f.stat().st_mode & 0o777
            if current != mode and not current & ~mode:  # only ever widened to what the umask allows
                os.chmod(f, mode)


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


#: the record in every folder of a study (its key, status, and the digests of its files)
MANIFEST = "manifest.json"


class ArtifactError(RuntimeError):
    """A file under outputs/ that is damaged (unreadable, or not what its manifest recorded)."""


class SchemaMismatch(ArtifactError):
    """A table that reads but lacks a column the code asks for: the code and the file disagree
    (a bug to report), not damage that rerunning the stage would repair."""


#: the stage that writes the files under each folder of a study (``probe/``, ``runs/``...)
_WRITERS = {"probe": "01_probe", "select": "02_select", "runs": "03_train", "eval": "04_evaluate",
            "report": "05_analyze"}


def stage_of(path: str | os.PathLike) -> str | None:
    """The stage whose rerun rebuilds ``path`` (by the study folder it lies in), or None."""
    for part in reversed(Path(path).parts):
        name = part.split("-")[0]
        if name in _WRITERS:
            return _WRITERS[name]
    return None


def read_json(path: str | os.PathLike, stage: str | None = None) -> Any:
    """A JSON file; a damaged one (truncated, not JSON) is an :class:`ArtifactError` naming it
    and the stage to rerun (``stage``, or the one that writes that folder)."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        stage = stage or stage_of(path)
        todo = (f"rerun the {stage} stage, which sets the damaged folder aside and rebuilds it" if stage
                else "restore or delete it")
        raise ArtifactError(f"{path}: damaged, not valid JSON ({type(err).__name__}: {err}); {todo}") from None


def read_manifest(path: str | os.PathLike, stage: str | None = None) -> dict | None:
    """A manifest (None when missing); damaged: :class:`ArtifactError` (see :func:`read_json`)."""
    path = Path(path)
    if not path.exists():
        return None
    m = read_json(path, stage)
    if not isinstance(m, dict):
        raise ArtifactError(f"{path}: damaged, not a manifest (a JSON {type(m).__name__}); rerun the "
                            f"{stage or stage_of(path) or 'stage that writes it'} stage")
    return m


def read_parquet(path: str | os.PathLike, stage: str, verify: bool = True, **kwargs: Any) -> pd.DataFrame:
    """``pd.read_parquet``, where a damaged file is an :class:`ArtifactError` naming it and
    the ``stage`` whose rerun rebuilds it (a missing file stays FileNotFoundError). With
    ``verify``, a file that the ``manifest.json`` beside it records (``sha256``) must still have
    that digest: an edited or replaced file is refused the same way."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not written yet; run the {stage} stage")
    if verify:
        check_digest(path, stage)
    import pandas as pd

    try:
        return pd.read_parquet(path, **kwargs)
    except Exception as err:
        missing_columns(path, kwargs.get("columns"), stage)
        raise ArtifactError(f"{path}: damaged, cannot be read ({type(err).__name__}: {err}); rerun the "
                            f"{stage} stage, which finds the damage and rebuilds it") from None


def missing_columns(path: Path, columns: list[str] | None, stage: str) -> None:
    """Raise :class:`SchemaMismatch` when the parquet file ``path`` reads but has none of
    ``columns`` that the code asked for (nothing when its schema cannot be read: damage)."""
    if not columns:
        return
    import pyarrow.parquet as pq

    try:
        found = list(pq.read_schema(path).names)
    except Exception:
        return
    missing = [c for c in columns if c not in found]
    if missing:
        raise SchemaMismatch(
            f"{path}: schema mismatch, not damage: the code asks for column(s) {missing}, the file has "
            f"{found}. The {stage} stage wrote it as it should; rerunning it will not help. This is a bug "
            "in diffgrpo (a reader and a writer disagree): please report it with this message")


def check_digest(path: str | os.PathLike, stage: str) -> None:
    """``path`` as the ``manifest.json`` of its folder recorded it (nothing to check when that
    manifest records no digest of it)."""
    path = Path(path)
    manifest = read_manifest(path.parent / MANIFEST, stage)
    want = (manifest or {}).get("sha256", {}).get(path.name)
    if want is not None and file_digest(path) != want:
        raise ArtifactError(f"{path}: damaged, changed since the {stage} stage wrote it (its digest is not the one "
                            f"{path.parent / MANIFEST} records); rerun the {stage} stage, which sets the "
                            "damaged folder aside and rebuilds it")


def file_digest(path: str | os.PathLike) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digests(folder: str | os.PathLike, names: list[str]) -> dict[str, str]:
    """sha256 of each named file of ``folder``, for a manifest (:func:`damaged` checks them)."""
    return {n: file_digest(Path(folder) / n) for n in names}


def damaged(folder: str | os.PathLike, manifest: dict) -> list[str]:
    """Files a manifest recorded (``sha256``, names relative to ``folder``) that are missing or
    changed since."""
    folder = Path(folder)
    return [n for n, d in manifest.get("sha256", {}).items()
            if not (folder / n).is_file() or file_digest(folder / n) != d]


def set_aside(folder: str | os.PathLike, why: str) -> Path:
    """Move a damaged folder out of the way (``<name>.damaged-<n>``), never deleting it."""
    folder = Path(folder)
    n = 1
    while (target := folder.with_name(f"{folder.name}.{why}-{n}")).exists():
        n += 1
    folder.rename(target)
    return target


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
