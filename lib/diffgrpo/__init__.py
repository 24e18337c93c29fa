"""diffgrpo: which prompts should GRPO train on? A study kit: probe, select, train, evaluate, analyze."""

__version__ = "0.1.0"


def lazy_names(package: str, public: dict[str, str]):
    """A package's module ``__getattr__`` and ``__dir__`` (PEP 562) for ``public``, each name ->
    the submodule that defines it, imported on first use (``diffgrpo.params``,
    ``diffgrpo.train``); ``dir()`` lists those names beside what the package holds already
    (a notebook's completion offers them), importing nothing::

        __getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
    """
    import importlib
    import sys

    def __getattr__(name: str):
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{public[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
