"""Re-execute the five stage notebooks on params/tiny.yaml into this folder.

These executed notebooks are the references nbval compares against (`make test` re-runs
them and checks the cells tagged `nbval-check-output`, after tests/notebooks/sanitize.cfg
masks paths, times and float digits past the second decimal). Refresh them after changing a
notebook or anything that changes the numbers of the tiny study:

    make references        # or: .venv/bin/python tests/notebooks/refresh.py

then read `git diff tests/notebooks/` before committing: the diff is the behaviour change.
"""

import os
import tempfile
from pathlib import Path

from diffgrpo.study.notebooks import KERNEL, STAGES, run_notebook

HERE = Path(__file__).resolve().parent
PARAMETERS = {"params_file": "tiny", "overrides": {}, "progress": False}


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        os.environ["DIFFGRPO_OUTPUTS"] = out  # the kernel inherits it
        for stage in STAGES:
            print(f"refreshing {stage}", flush=True)
            run_notebook(stage, HERE / f"{stage}.ipynb", PARAMETERS, kernel=KERNEL, progress=False)


if __name__ == "__main__":
    main()
