"""The kernel command of a warm kernel (:mod:`diffgrpo.study.warm`): ``python -S warm_launch.py
SOCKET -f CONNECTION_FILE``. Standard library only (it starts in milliseconds): hands the fork
server its stdio, environment, working folder and arguments, forwards the signals it gets to
the kernel the server forked, writes that kernel's CPU seconds to ``$DIFFGRPO_KERNEL_CPU`` and
exits with its status. It dies with the process that started it (the notebook job's papermill),
and the kernel with it (:mod:`diffgrpo.processes`, imported from this file's own folder)."""

import json
import os
import signal
import socket
import struct
import sys

# run as a file, with no site-packages (-S): this file's own package, by its folder (lib/)
sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from diffgrpo.processes import die_with_parent  # noqa: E402 - standard library only


def main() -> int:
    path, args = sys.argv[1], sys.argv[2:]
    expected = os.environ.get("JPY_PARENT_PID")
    die_with_parent(int(expected) if expected else None)  # whoever started it gone already: exits 1
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    body = json.dumps({"args": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
    reader = conn.makefile("r")
    first = reader.readline().split()
    if not first or first[0] != "pid":
        return 1
    kernel = int(first[1])

    def forward(signum, _frame):
        try:
            os.killpg(kernel, signum)  # the kernel leads its own process group
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    while True:
        try:
            line = reader.readline()
            break
        except InterruptedError:
            continue
    done = line.split()
    if len(done) != 3 or done[0] != "exit":
        return 1  # the server went away: the kernel went with it
    if os.environ.get("DIFFGRPO_KERNEL_CPU"):
        with open(os.environ["DIFFGRPO_KERNEL_CPU"], "w") as f:
            f.write(done[2])
    code = int(done[1])
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
