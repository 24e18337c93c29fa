"""Warm kernels: a fork server that imports the notebooks' stack once per study and forks a
fresh Jupyter kernel for each notebook.

Every stage notebook used to pay the same imports in its own kernel (torch, transformers,
pandas, scipy, the diffgrpo modules: 5-7 s of CPU on a 2-core machine, docs/benchmarks.md),
44 times a default study. :class:`LocalExecutor <diffgrpo.study.executors.LocalExecutor>` now
starts :func:`serve` once (``python -m diffgrpo.study.warm SOCKET``), which imports them
(:data:`PRELOAD`) and waits. Each notebook job's papermill then starts its kernel through
:class:`WarmKernelManager`: the kernel command is a thin launcher (``warm_launch.py``, standard
library only) that hands the server its stdio, environment, working folder and arguments; the
server forks a child that takes them and runs ``ipykernel`` as ``python -m ipykernel_launcher``
would. Each notebook still runs in a process of its own, started from a state no notebook has
touched (the server never runs a notebook cell nor a torch operation).

What stays as it was:

- signals: the launcher is the process jupyter_client knows; it forwards what it receives
  (SIGTERM on shutdown) to its kernel's process group and exits with the kernel's status;
  interrupts go as control messages (the kernel spec's ``interrupt_mode: message``), which
  ipykernel turns into a SIGINT to itself, in order with the messages around them;
- dying with the study: the launcher dies with the job process, the kernel with its launcher
  (a pidfd the server opened on it, watched by a thread: its process group with it), and the
  server and every kernel with the study (:func:`diffgrpo.processes.die_with_parent` on the
  server, then on each child; the probe's helpers die with their kernel the same way):
  ``kill -9`` of any of them leaves no process behind (docs/reliability.md, "Owned processes");
- CPU seconds: a forked kernel is the server's child, not the job's, so the launcher writes
  the kernel's user + system seconds to ``$DIFFGRPO_KERNEL_CPU`` and the executor adds them to
  the job's (``timings.json`` counts what it counted before).

matplotlib's pyplot is not preloaded: importing it outside a kernel would skip the inline
backend's hooks, and the executed notebooks would lose their figures; the notebooks import it
(and seaborn, which imports it) in their first cell as before.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import traceback
from pathlib import Path

from diffgrpo.processes import die_with_parent

#: the socket path the job processes' kernels connect to (set by the executor for its jobs)
SOCKET_ENV = "DIFFGRPO_WARM_KERNEL"
#: where the launcher writes the forked kernel's CPU seconds (set by the executor per job)
CPU_ENV = "DIFFGRPO_KERNEL_CPU"
#: what the server imports before forking: what every stage notebook's kernel imported first
#: (``diffgrpo.train`` is lazy: ``diffgrpo.train.launch`` is what brings TRL, 1 s a training kernel)
PRELOAD = (
    "ipykernel.kernelapp", "ipykernel.ipkernel", "IPython", "numpy", "pandas", "pyarrow.parquet",
    "scipy.stats", "matplotlib", "matplotlib.figure", "torch", "transformers",
    "diffgrpo.study.notebooks", "diffgrpo.params", "diffgrpo.store.layout", "diffgrpo.probe",
    "diffgrpo.select", "diffgrpo.train", "diffgrpo.train.launch", "diffgrpo.evaluate", "diffgrpo.models.embedded",
    "diffgrpo.analysis.report", "diffgrpo.analysis.papers", "diffgrpo.analysis.sections",
    "diffgrpo.study.graph", "diffgrpo.study.plan",
)
LAUNCHER = Path(__file__).with_name("warm_launch.py")
_HEADER = struct.Struct("!I")


def preload(modules=PRELOAD) -> list[str]:
    """Import ``modules``; return those that failed (an optional one missing costs only time)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the kernel imports it again and reports the error itself
            failed.append(name)
    if "matplotlib.pyplot" in sys.modules:  # see the module's docstring
        raise RuntimeError("a preloaded module imported matplotlib.pyplot: the notebooks' figures would be lost")
    return failed


def serve(path: str, parent: int | None = None) -> None:
    """Listen on the unix socket ``path``; fork a kernel per launcher that connects; report
    each kernel's exit status and CPU seconds to its launcher. Ends when its parent does."""
    if parent is not None:
        die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the study's and the jobs' to handle
    # matplotlib reads its backend from the environment when imported: the one ipykernel sets
    # before any cell runs (ipykernel.kernelapp), unless the study's environment names one
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    Path(path + ".ready").write_text(str(os.getpid()))
    kernels: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener], [], [], 0.1)
        if readable:
            conn, _ = listener.accept()
            try:
                _start(conn, listener, kernels)
            except Exception:  # noqa: BLE001 - a launcher that went away: the server stays
                traceback.print_exc()
                conn.close()
        while kernels:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = kernels.pop(pid, None)
            if conn is not None:
                code = os.waitstatus_to_exitcode(status)
                try:
                    conn.sendall(f"exit {code} {usage.ru_utime + usage.ru_stime:.3f}\n".encode())
                except OSError:
                    pass
                conn.close()


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    (size,) = _HEADER.unpack_from(data)
    body = data[_HEADER.size:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ConnectionError("the launcher went away")
        body += more
    return json.loads(body), list(fds)


def _start(conn: socket.socket, listener: socket.socket, kernels: dict[int, socket.socket]) -> None:
    request, fds = _recv_request(conn)
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    launcher, _, _ = struct.unpack("3i", creds)
    watch = os.pidfd_open(launcher)
    server = os.getpid()
    pid = os.fork()
    if pid == 0:  # the kernel
        code = 1
        try:
            listener.close()
            for c in kernels.values():
                c.close()
            conn.close()
            code = _kernel(request, fds, watch, server)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            try:
                atexit._run_exitfuncs()  # as a kernel's interpreter does when it exits
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(watch)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"pid {pid}\n".encode())
    kernels[pid] = conn


def _kernel(request: dict, fds: list[int], watch: int, server: int) -> int:
    """In the forked child: become the kernel ``python -m ipykernel_launcher <args>`` would be."""
    import threading

    os.setsid()  # its own session and process group, as jupyter_client starts a kernel
    die_with_parent(server)  # the server (the study) gone: this kernel too
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["ipykernel_launcher", *request["args"]]
    sys.path[0] = request["cwd"]  # as ``-m`` puts the working folder first

    def follow() -> None:  # the launcher (the process jupyter_client knows) gone: this kernel too
        select.select([watch], [], [])
        os.killpg(0, signal.SIGKILL)  # with what it started, as jupyter_client kills a kernel's group

    threading.Thread(target=follow, daemon=True, name="warm-kernel-launcher").start()
    sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115 - the launcher's stdio now
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
    sys.stdin = open(0, "r", closefd=False)  # noqa: SIM115
    from ipykernel import kernelapp

    # defaults ipykernel read from the environment when the server imported it: this kernel's
    app = kernelapp.IPKernelApp.instance()  # the instance launch_new_instance() starts
    app.parent_handle = int(os.environ.get("JPY_PARENT_PID") or 0)
    app.interrupt = int(os.environ.get("JPY_INTERRUPT_EVENT") or 0)
    kernelapp.launch_new_instance()
    return 0


#: the longest path a unix socket can bind on Linux (``sun_path``: 108 bytes, its NUL included)
SOCKET_PATH_MAX = 107


class Server:
    """The fork server of one study run: started by :meth:`start`, ended by :meth:`stop`."""

    def __init__(self, folder: Path):
        self.path = str(Path(folder) / "kernels.sock")
        self.proc = None

    def cannot_listen(self) -> str | None:
        """Why the server cannot listen where it would (None when it can): a socket path beyond
        :data:`SOCKET_PATH_MAX` (a long ``TMPDIR``) fails to bind, with a traceback in the study's
        output, and the study runs cold anyway; this says so in one line instead."""
        n = len(os.fsencode(self.path))
        if n <= SOCKET_PATH_MAX:
            return None
        return (f"note: the notebooks' kernels start cold (each imports the stack, a few seconds more per "
                f"notebook): the warm kernel server's socket path {self.path} is {n} characters, beyond the "
                f"{SOCKET_PATH_MAX} a unix socket takes (TMPDIR is long); set TMPDIR to a shorter folder (/tmp) "
                "to keep it warm")

    def start(self, env: dict) -> None:
        import subprocess

        for stale in (self.path, self.path + ".ready"):
            Path(stale).unlink(missing_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, self.path, "--parent", str(os.getpid())],
                                     env=env, start_new_session=True, stdin=subprocess.DEVNULL)

    def ready(self) -> bool:
        """Whether it listens (it imports for a few seconds first); False for good if it died."""
        return self.proc is not None and self.proc.poll() is None and Path(self.path + ".ready").exists()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stale in (self.path, self.path + ".ready"):
            Path(stale).unlink(missing_ok=True)


def kernel_manager_class():
    """The KernelManager papermill starts kernels with when ``$DIFFGRPO_WARM_KERNEL`` names a
    fork server that is listening; None (papermill's default) otherwise."""
    path = os.environ.get(SOCKET_ENV)
    if not path or not Path(path + ".ready").exists():
        return None
    from jupyter_client.manager import AsyncKernelManager

    class WarmKernelManager(AsyncKernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            # the kernel spec's own interpreter and ``-m ipykernel_launcher``: what the server would
            # run anyway; another kernel (another language, another environment) starts as before
            if "ipykernel_launcher" not in cmd or Path(cmd[0]).resolve() != Path(sys.executable).resolve():
                return cmd
            args = cmd[cmd.index("ipykernel_launcher") + 1:]
            # interrupts as a message on the control channel (ipykernel then signals itself): a
            # SIGINT forwarded by the launcher could land after the shutdown request that follows
            # it and interrupt that instead
            self.kernel_spec.interrupt_mode = "message"
            return [sys.executable, "-S", "-s", str(LAUNCHER), path, *args]

    return WarmKernelManager


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m diffgrpo.study.warm")
    ap.add_argument("socket")
    ap.add_argument("--parent", type=int)
    args = ap.parse_args(argv)
    serve(args.socket, args.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
