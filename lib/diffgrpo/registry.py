"""A registry of named things a params file refers to (selection policies, rewards): one entry
per name, the same code registered again (a reloaded or copied plugin) accepted, another
refused; an unknown name lists the registered ones and says where plugins go."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def source(fn: Callable) -> str:
    """A function's code (its text), or its qualified name where the text cannot be read."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return f"{fn.__module__}.{fn.__qualname__}"


class Registry(Generic[T]):
    def __init__(self, kind: str, error: type[Exception]):
        self.kind, self.error, self._entries, self._fns = kind, error, {}, {}

    def add(self, name: str, entry: T, fn: Callable) -> None:
        old = self._fns.get(name)
        if old is not None and source(old) != source(fn):
            raise ValueError(f"{self.kind} {name!r} is registered twice: by {old.__module__} and by {fn.__module__}")
        self._entries[name], self._fns[name] = entry, fn

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise self.error(f"unknown {self.kind} {name!r}; registered: {self.names()}. Your own goes in a plugin "
                             "file named by the params key `plugins:` (docs/extending.md)")
        return self._entries[name]

    def names(self) -> list[str]:
        return list(self._entries)
