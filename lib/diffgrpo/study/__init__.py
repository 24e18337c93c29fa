"""Run a whole study: its stage notebooks as a graph of jobs, locally or on Slurm.

    python -m diffgrpo.study embedded          # params/embedded.yaml, every stage
    python -m diffgrpo.study embedded --plan   # what it costs, then exit

- :mod:`.runner`: the command line and the study graph (``jobs``, ``run_study``);
- :mod:`.executors`: the executor interface and the local one; :mod:`.slurm`: the Slurm one;
- :mod:`.notebooks`: one stage notebook under papermill;
- :mod:`.plan`: what a study costs (tokens, memory, hours) before it starts.

``diffgrpo.study.run_study`` and the other names of :mod:`.runner` are kept as the public
names; they load the runner on first use, so importing :mod:`.plan` alone stays light.
"""

import importlib


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    runner = importlib.import_module(f"{__name__}.runner")
    try:
        return getattr(runner, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
