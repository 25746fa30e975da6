"""``redlock exec``'s command must not outlive ``redlock exec``: two independent ties.

If ``redlock exec`` dies without cleaning up (``kill -9``, the OOM killer, a crash), nothing
extends the lock any more: it expires after its ttl and another holder may start, while the
command would go on working unprotected. Two mechanisms stop the command's whole process
group when that happens:

* **PR_SET_PDEATHSIG** (Linux): the command's first process gets SIGKILL from the kernel
  the moment the thread that started it (``redlock exec``'s main thread) dies. It reaches
  that one process only, and it is cleared when the process executes a set-user-ID binary.
* **The guard**: a small process of its own session (so that no job-control or terminal
  signal reaches it) started before the command, holding the read end of a pipe whose write
  end only ``redlock exec`` has. However ``redlock exec`` dies, the kernel closes that end;
  the guard reads end-of-file without the word ``done`` first, and SIGKILLs the command's
  whole process group, its children included. This is also the fallback where prctl does not
  exist or the prctl came too late. The command's process tells the guard its group itself,
  between fork and exec: were it ``redlock exec`` that told it once the command had started,
  a ``redlock exec`` killed in between (by the command itself, say) would leave a guard that
  knows of no group, and the command's children would live on.

Limits: a process that leaves the group (``setsid``, a daemon) escapes both; the guard can
itself be killed; and SIGKILL gives the command no chance to clean up (it was running
without the lock already). When ``redlock exec`` ends normally it tells the guard ``done``,
and the guard leaves the group alone.

This file is also the guard's program: it runs as a script (``python -I -S lifeline.py``)
without importing the ``redlock`` package, to start fast and depend on nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable

__all__ = ["Guard"]

PR_SET_PDEATHSIG = 1
DONE = b"done\n"


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


# Looked up in the parent: between fork and exec the child should do as little as it can.
# (Also redlock.servers', for the masters it starts.)
prctl_function = _load_prctl()


class Guard:
    """The guard process of one command's process group (see the module docstring)."""

    def __init__(self) -> None:
        # Started before the command, so that a failure to start it stops exec before
        # the command runs.
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self._proc.pid

    def preexec_fn(self) -> Callable[[], None]:
        """The command's ``preexec_fn``, for a command that leads a process group of its own.

        Between fork and exec it tells the guard its group (the write end of the guard's
        pipe is still open in the child then; it closes on exec), and on Linux it makes the
        kernel SIGKILL it when the thread that starts it dies. It raises if the guard is
        gone: the command must not start unprotected.
        """
        assert self._proc.stdin is not None
        guard_fd = self._proc.stdin.fileno()
        prctl = prctl_function
        parent = os.getpid()

        def preexec() -> None:
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0)
            # The parent may have died before the prctl: then no signal would ever come.
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
            # One write of a few bytes to a pipe: atomic, and never interleaved with the
            # parent's own ``done``, which comes only once the command has started. Popen has
            # set SIGPIPE back to its default already: a gone guard must raise EPIPE here
            # (which Popen reports), not kill the child silently as if the command had run.
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)
            os.write(guard_fd, b"%d\n" % os.getpid())
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)

        return preexec

    def done(self, *, kill_group: bool = False) -> None:
        """Stop the guard; with ``kill_group`` it kills the group on its way out, as if we had died."""
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            if not kill_group:
                self._proc.stdin.write(DONE)
            self._proc.stdin.close()
        self._proc.wait()


def _guard() -> None:
    # Keyboard and job-control signals cannot reach it (a session of its own), but a
    # SIGHUP or SIGINT sent to it by accident must not take the protection away.
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(signum, signal.SIG_IGN)
    received = b""
    while True:
        chunk = os.read(0, 64)
        if not chunk:
            break
        received += chunk
    lines = received.split(b"\n")
    if received.endswith(DONE) or not lines[0].isdigit():
        return  # a normal end, or exec died before the command started
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(lines[0]), signal.SIGKILL)


if __name__ == "__main__":
    _guard()
