"""Progress that fits where it runs: one :func:`bar` for every long loop of the kit.

- ``widget``: in a Jupyter kernel with ipywidgets (JupyterLab), tqdm's notebook widget;
- ``text``: in a terminal, tqdm's text bar on stderr;
- ``record``: where nobody watches a bar redraw, a notebook executed by papermill (the study
  runner sets :data:`ENV` for the kernels it starts) or a kernel without ipywidgets: a few
  plain lines on stdout per loop (when it passes a quarter of its total, and when it ends), so
  the executed notebook reads as a page and not as a hundred redraws;
- ``off``: nothing.

``DIFFGRPO_PROGRESS=record papermill notebooks/03_train.ipynb ...`` asks for the record when
running papermill by hand. A value other than the four modes is an error naming the variable.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time

#: the environment variable that picks the mode (unset: chosen by where the code runs)
ENV = "DIFFGRPO_PROGRESS"
MODES = ("widget", "text", "record", "off")


def mode() -> str:
    """The progress mode here: :data:`ENV` when set, else ``widget`` in a Jupyter kernel that has
    ipywidgets, ``record`` in one that has not, ``text`` elsewhere."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen:
        if chosen not in MODES:
            raise ValueError(f"{ENV}={chosen!r}: not a progress mode; use one of {list(MODES)} or unset it")
        return chosen
    if not _in_kernel():
        return "text"
    return "widget" if importlib.util.find_spec("ipywidgets") else "record"


def _in_kernel() -> bool:
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return bool(shell) and type(shell).__name__ == "ZMQInteractiveShell"


def bar(total: int | None, desc: str, unit: str = "it", initial: int = 0, disable: bool = False):
    """A tqdm-like bar (``update``, ``set_postfix``, ``set_postfix_str``, ``close``, ``n``) in
    this place's :func:`mode`; ``disable``: a bar that shows nothing."""
    how = "off" if disable else mode()
    if how == "record":
        return Record(total, desc, unit, initial)
    if how == "widget":
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(total=total, desc=desc, unit=unit, initial=initial, disable=how == "off", dynamic_ncols=True)


class Record:
    """A bar as a few printed lines: ``desc: 15/30 steps (50%) in 12s, reward=0.83`` when the
    count passes each quarter of ``total``, and a last line when closed."""

    QUARTERS = (0.25, 0.5, 0.75)

    def __init__(self, total: int | None, desc: str, unit: str = "it", initial: int = 0, file=None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.postfix, self.closed = "", False
        self.file = file
        self._t0 = time.perf_counter()
        self._passed = sum(1 for q in self.QUARTERS if total and initial >= q * total)

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.total:
            return
        passed = sum(1 for q in self.QUARTERS if self.n >= q * self.total)
        if passed > self._passed and self.n < self.total:
            self._print()
        self._passed = max(passed, self._passed)

    def set_postfix(self, **values) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, s: str = "") -> None:
        self.postfix = s

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._print(done=True)

    def _print(self, done: bool = False) -> None:
        count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        took = f" {'in' if done else 'after'} {time.perf_counter() - self._t0:.0f}s"
        tail = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {count} {self.unit}{pct}{took}{tail}", file=self.file or sys.stdout, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
