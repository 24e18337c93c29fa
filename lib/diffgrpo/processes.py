"""The processes a study starts: each dies with the one that started it, and the one that owns
them all ends whatever is left (Linux; elsewhere both are no-ops).

A study is a tree of processes: the runner, its notebook jobs, each job's Jupyter kernel, and the
probe's helper processes with their resource tracker (:class:`diffgrpo.models.resumable_sampling.Helpers`).
Two rules keep ``kill -9`` of any one of them from leaving the others running:

- :func:`die_with_parent`: every process of the tree that diffgrpo starts (a job, a helper) asks
  Linux to SIGKILL it when its parent ends (``PR_SET_PDEATHSIG``), and a kernel exits when its
  parent has (ipykernel polls it, ``JPY_PARENT_PID``), so a dead runner takes every process below
  it along, level by level; the helpers' resource tracker ends when the last process holding its
  pipe does;
- :func:`marked` and :func:`end`: the runner marks every process it starts with
  :data:`OWNER_ENV` in its environment (inherited by everything they start, whatever its
  parent, session or process group later), and when a job ends, and when the study ends, it
  kills every process that still carries the job's or the study's mark.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

#: the environment entry that marks a study's processes: ``<study mark>/<job>`` (see :func:`marked`)
OWNER_ENV = "DIFFGRPO_OWNER"
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent ends (``PR_SET_PDEATHSIG``).

    ``parent``: the pid expected as parent; if it has ended already (before the request), this
    process exits now, with status 1. The signal follows the *thread* that started this process:
    a process started from a thread that ends before it does is killed then."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    if parent is not None and os.getppid() != parent:  # the parent died before the request
        os._exit(1)


def marked(name: str, value: str) -> list[int]:
    """The pids of this user's live processes (this one excepted) started with ``name=value``,
    or ``name=value/<more>``, in their environment: a mark and the marks below it. The
    environment a process was started with (``/proc/<pid>/environ``), not what it set since."""
    if not sys.platform.startswith("linux"):
        return []
    entry = f"{name}={value}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or another user's
            continue
        if any(e == entry or e.startswith(entry + b"/") for e in env.split(b"\0")):
            found.append(int(pid))
    return found


def end(pids: list[int], wait_s: float = 10.0) -> None:
    """SIGKILL ``pids`` and wait (up to ``wait_s``) until each has ended. A pid is held by a pidfd
    from before the signal, so a pid reused meanwhile by another process is never signalled."""
    fds = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # ended already
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            os.close(fd)
            continue
        fds.append(fd)
    deadline = time.monotonic() + wait_s
    try:
        while fds and time.monotonic() < deadline:  # a pidfd reads as ready once its process has ended
            ended, _, _ = select.select(fds, [], [], max(0.0, deadline - time.monotonic()))
            for fd in ended:
                fds.remove(fd)
                os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)
