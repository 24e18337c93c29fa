"""Registries of named things a study refers to: selection policies, rewards, tasks, paper
reports, report sections and executors, each a :class:`Registry`.

One entry per name: the same code registered again (a reloaded or copied plugin) is accepted,
another refused; an unknown name lists the known ones and says where plugins go. A registry can
also know *built-in* entries by name and the module that defines them, imported only when one
is asked for (a task with heavy dependencies costs nothing until used), so a params file's
names can be checked without importing the layer that implements them.

:data:`PAPERS` lives here for that reason: the params check ``analyze.reports`` against its
names, and the report layer (:mod:`diffgrpo.analysis.papers`) gets each paper's module from it.
Named arms and treatments (``params.NAMED_ARMS``, ``params.TREATMENTS``) are settings, not code,
and stay plain dicts.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: what an unknown name's error says about adding one's own
PLUGIN_HINT = "Your own goes in a plugin file named by the params key `plugins:` (docs/extending.md)"


def source(fn: Any) -> str:
    """A function's (class's, module's) code, or its qualified name where the text cannot be read."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return f"{fn.__module__}.{getattr(fn, '__qualname__', fn.__name__)}"


def source_file(fn: Any) -> str:
    """The file that defines a registered function or class, for an error that names a plugin's
    (a reward's, an online method's) return."""
    try:
        return inspect.getsourcefile(fn) or "its file unknown"
    except TypeError:
        return "its file unknown"


def shown(value: Any) -> str:
    """``repr(value)``, cut to 60 characters: what a plugin returned, quoted in its error."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def code_digest(fn: Any) -> str:
    """sha256 of the code that decides ``fn``: for a plugin, its whole file and every file beside
    it that the file imports (recursively), so an edited helper is other code; for diffgrpo's own
    code, the function's source (an unrelated edit of its module moves no key)."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    h = hashlib.sha256()
    if file is None or module.__name__.split(".")[0] == "diffgrpo":
        h.update(source(fn).encode())
        return h.hexdigest()[:16]
    for path in sorted(_files_it_imports(Path(file).resolve(), set())):
        h.update(f"{path.name}\n".encode() + path.read_bytes())
    return h.hexdigest()[:16]


def _files_it_imports(path: Path, seen: set[Path]) -> set[Path]:
    """``path`` and the ``.py`` files of its folder that it imports (``import helper``, ``from
    helper import x``, ``from pkg.mod import x`` with ``pkg/`` beside it), and theirs."""
    if path in seen or not path.is_file():
        return seen
    seen.add(path)
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (SyntaxError, UnicodeDecodeError):
        return seen
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level]
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            base = path.parent.joinpath(*parts[:i])
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                _files_it_imports(candidate.resolve(), seen)
    return seen


class Registry(Generic[T]):
    """Entries of one ``kind`` by name. ``builtin``: name -> the module that defines it, imported
    at the first :meth:`get` of the name; importing it registers the name (a decorator, as a task
    module does), or, where it registers nothing, the module itself is the entry (a paper's
    report). ``error``: the exception an unknown name raises; ``hint``: what it adds."""

    def __init__(self, kind: str, error: type[Exception], builtin: dict[str, str] | None = None,
                 hint: str = PLUGIN_HINT):
        self.kind, self.error, self.hint = kind, error, hint
        self.builtin = dict(builtin or {})
        self._entries: dict[str, T] = {}
        self._code: dict[str, Any] = {}

    def add(self, name: str, entry: T, code: Any = None) -> None:
        """Register ``entry`` as ``name``; ``code`` (a function, class or module; the entry by
        default) tells a second registration of the same code from another one."""
        code = entry if code is None else code
        old = self._code.get(name)
        if old is not None and source(old) != source(code):
            raise ValueError(f"{self.kind} {name!r} is registered twice: by {_module(old)} and by {_module(code)}")
        self._entries[name], self._code[name] = entry, code

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated function or class as ``name``."""

        def deco(entry: T) -> T:
            self.add(name, entry)
            return entry

        return deco

    def get(self, name: str) -> T:
        if name not in self._entries and name in self.builtin:
            module = importlib.import_module(self.builtin[name])
            if name not in self._entries:
                self.add(name, module)  # type: ignore[arg-type]
        if name not in self._entries:
            raise self.error(f"unknown {self.kind} {name!r}; registered: {self.names()}"
                             + (f". {self.hint}" if self.hint else ""))
        return self._entries[name]

    def remove(self, name: str) -> None:
        """Forget a registered entry (a notebook or a test that added one for a while); a
        built-in name stays known."""
        self._entries.pop(name, None)
        self._code.pop(name, None)

    def names(self) -> list[str]:
        """The built-in names in their order, then the others in the order they were registered."""
        return list(dict.fromkeys([*self.builtin, *self._entries]))

    def __contains__(self, name: object) -> bool:
        return name in self.builtin or name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _module(code: Any) -> str:
    return getattr(code, "__module__", None) or getattr(code, "__name__", "?")


#: the paper reports a study can ask for (``analyze.reports: ["003", "001"]``), each a module of
#: :mod:`diffgrpo.analysis.papers` whose ``write(study)`` writes its tables
PAPERS: Registry[Any] = Registry(
    "paper report", ValueError, {p: f"diffgrpo.analysis.papers.paper{p}" for p in ("003", "001", "000", "002")},
    hint="a paper's report is a module diffgrpo/analysis/papers/paper<id>.py, listed in diffgrpo.registry.PAPERS")
