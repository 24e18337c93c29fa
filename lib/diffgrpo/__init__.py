"""diffgrpo: which prompts should GRPO train on? A study kit: probe, select, train, evaluate, analyze."""

__version__ = "0.1.0"


def lazy_names(package: str, public: dict[str, str]):
    """A package's module ``__getattr__`` (PEP 562) for ``public``, each name -> the submodule
    that defines it, imported on first use (``diffgrpo.params``, ``diffgrpo.train``)."""
    import importlib

    def __getattr__(name: str):
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{public[name]}"), name)

    return __getattr__
