"""Run a whole study: its stage notebooks as a graph of jobs, locally or on Slurm.

    python -m diffgrpo.study embedded          # params/embedded.yaml, every stage
    python -m diffgrpo.study embedded --plan   # what it costs, then exit

- :mod:`.graph`: the study graph, the notebook jobs and their order (``jobs``, ``campaign_jobs``);
- :mod:`.runner`: the command line and ``run_study``, which hand the graph to an executor;
- :mod:`.executors`: the executor interface and the local one; :mod:`.slurm`: the Slurm one;
- :mod:`.notebooks`: one stage notebook under papermill;
- :mod:`.plan`: what a study costs (tokens, memory, hours) before it starts.

``diffgrpo.study.jobs``, ``diffgrpo.study.run_study`` and the other public names of
:mod:`.graph` and :mod:`.runner` are kept as the package's names; they load their module on
first use, so that importing :mod:`.plan` and :mod:`.graph` alone (a notebook's plan cell)
never loads the runner, Slurm's executor or papermill.
"""

import importlib
import importlib.util

#: where the package's own names live, lightest first: a graph name never loads the runner
_REEXPORTED_FROM = ("graph", "runner")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a submodule not imported yet (`from diffgrpo.study import plan`): import it alone,
        # not through the runner, which would import every other module first
        return importlib.import_module(f"{__name__}.{name}")
    for module in _REEXPORTED_FROM:
        found = getattr(importlib.import_module(f"{__name__}.{module}"), name, _MISSING)
        if found is not _MISSING:
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MISSING = object()
