"""Tasks by name: ``diffgrpo.tasks.get("gsm8k")``.

Each module under this package owns one task (its data, prompt, extraction and verifier) and
registers it with :func:`register`. Modules are imported lazily so that a task with heavy
dependencies (math-verify) costs nothing until used.
"""

from __future__ import annotations

from typing import Any

from diffgrpo.registry import Registry
from diffgrpo.tasks.base import Task, TaskError, validate_rows

#: the tasks by name; a built-in one's module is imported the first time it is asked for
TASKS: Registry[type[Task]] = Registry("task", TaskError, {name: f"{__name__}.{module}" for name, module in {
    "gsm8k": "gsm8k",
    "math": "math",
    "math500": "math",
    "aime2025": "aime2025",
    "aime2024": "math_benchmarks",
    "amc23": "math_benchmarks",
    "minerva_math": "math_benchmarks",
    "olympiadbench": "math_benchmarks",
    "bbh_shuffled_objects": "bbh_shuffled_objects",
    "shuffled_objects": "shuffled_objects",
    "arithmetic": "arithmetic",
}.items()})


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task available by its ``name`` (a plugin's too: params
    ``plugins:``, docs/extending.md)."""
    TASKS.add(cls.name, cls)
    return cls


def names() -> list[str]:
    return sorted(TASKS.names())


def get(name: str, **options: Any) -> Task:
    """The task called ``name``, built with ``options`` (its difficulty knobs, subsets...)."""
    cls = TASKS.get(name)
    _check_options(cls, name, options)
    return cls(**options)


def _check_options(cls: type[Task], name: str, options: dict[str, Any]) -> None:
    """An option the task does not take is a :class:`TaskError` naming it and the known ones
    (the constructor would raise a bare TypeError)."""
    import difflib
    import inspect

    sig = inspect.signature(cls.__init__)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return
    known = [p for p in sig.parameters if p != "self"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        hint = difflib.get_close_matches(unknown[0], known, n=1)
        raise TaskError(f"dataset.task_options: task {name!r} has no option {unknown[0]!r}"
                        + (f" (did you mean {hint[0]!r}?)" if hint else "")
                        + f"; its options are {known or 'none'}")


__all__ = ["TASKS", "Task", "TaskError", "get", "names", "register", "validate_rows"]
