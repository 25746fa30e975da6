"""The harness's handle on one client process (:mod:`chaos.worker`).

:class:`ClientProcess` starts ``python -m chaos.worker``, sends it commands and waits for
their replies, and stops or continues it with real signals. A command can also be started
without waiting (:meth:`ClientProcess.submit`), for a client that blocks in an acquire
while the scenario does something else; one command at a time per client.

Stopping is by pid, through the process's own ``Popen``: :meth:`ClientProcess.close` ends
the input (the worker closes its connections and exits) and kills it if it does not exit
in time or is stopped. A module-level registry kills any client still alive when the
interpreter exits, and the worker itself dies with its parent.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from redlock._process import proc as _proc

from .worker import PARENT_ENV

__all__ = ["ClientError", "ClientProcess", "Pending"]

# The directory that holds the chaos package: the worker must import the same code.
_ROOT = str(pathlib.Path(__file__).resolve().parent.parent)
_EXIT_GRACE = 3.0
#: How long a SIGSTOP or SIGCONT may take to show in /proc, generously (a busy machine).
_SIGNAL_TAKES = 10.0


class ClientError(RuntimeError):
    """A client process failed: it raised, exited, or did not answer in time."""


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen[bytes]] = set()

    def kill_all(self) -> None:
        with self.lock:
            procs, self.procs = list(self.procs), set()
        for proc in procs:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                proc.wait(timeout=5)


_registry = _Registry()
atexit.register(_registry.kill_all)


class Pending:
    """A command sent to a client whose reply has not been read yet."""

    def __init__(self, client: ClientProcess, ident: int, command: str, timeout: float) -> None:
        self.client = client
        self.ident = ident
        self.command = command
        self.timeout = timeout
        self._result: Any = None
        self._done = False

    def result(self, timeout: float | None = None) -> Any:
        """The command's result; raises ClientError if it failed or did not answer."""
        if not self._done:
            self._result = self.client._await_reply(self, self.timeout if timeout is None else timeout)
            self._done = True
        return self._result


class ClientProcess:
    """One client process; ``name`` is how histories and reports call it ("c1")."""

    def __init__(
        self,
        name: str,
        workdir: pathlib.Path,
        *,
        env: dict[str, str] | None = None,
        launcher: Sequence[str] = (),
    ) -> None:
        self.name = name
        #: An argv prefix the worker starts under (``ip netns exec NS``: it execs in place,
        #: so the pid the harness signals is still the worker's).
        self.launcher = list(launcher)
        #: Variables added to the process's environment (libfaketime for a faulty clock).
        self.env = dict(env or {})
        self.history_path = workdir / f"{name}.jsonl"
        self.log_path = workdir / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._next_id = 0
        self._pending: Pending | None = None
        self.paused = False

    def __repr__(self) -> str:
        return f"<ClientProcess {self.name} pid={self.pid}>"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise ClientError(f"client {self.name} is not started")
        return self._proc.pid

    # -- life cycle --

    def spawn(self) -> None:
        """Start the process (without waiting for it to be ready: see :meth:`init`)."""
        env = {**os.environ, **self.env}
        env[PARENT_ENV] = str(os.getpid())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed by close())
        proc = subprocess.Popen(
            [*self.launcher, sys.executable, "-m", f"{__package__}.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            # Its own session: a terminal's Ctrl-C reaches the harness only, which then
            # stops the clients in order.
            start_new_session=True,
        )
        with _registry.lock:
            _registry.procs.add(proc)
        self._proc = proc
        self._reader = threading.Thread(target=self._read_replies, name=f"chaos-{self.name}", daemon=True)
        self._reader.start()

    def init(self, config: dict[str, Any], *, timeout: float = 60.0) -> Pending:
        """Send the configuration (the worker connects and warms up); wait on the result."""
        config = {**config, "client": self.name, "history": str(self.history_path)}
        return self._send({"cmd": "init", **config}, "init", timeout)

    def end_input(self) -> None:
        """Ask the process to exit (end of its input); one that is stopped is killed, as
        it could not act on it. :meth:`close` then waits for it."""
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        found = _proc.stat(proc.pid)
        if found is not None and found.stopped:
            proc.kill()

    def close(self, deadline: float | None = None) -> None:
        """End the process: let it exit on end of input until ``deadline`` (monotonic;
        default a few seconds from now), else kill it; then reap it. Idempotent."""
        self.end_input()
        proc, self._proc = self._proc, None
        if proc is not None:
            deadline = time.monotonic() + _EXIT_GRACE if deadline is None else deadline
            try:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            finally:
                with _registry.lock:
                    _registry.procs.discard(proc)
            if self._reader is not None:
                self._reader.join(timeout=_EXIT_GRACE)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL now (a client crash); the history keeps what it recorded."""
        if self._proc is not None:
            self._proc.kill()

    # -- signals --

    def pause(self) -> None:
        """SIGSTOP the process and wait until it is stopped."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True
        _proc.wait_for_stop(self.pid, stopped=True, timeout=_SIGNAL_TAKES)

    def resume(self) -> None:
        """SIGCONT, whoever stopped it (the harness, or the client itself)."""
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False
        _proc.wait_for_stop(self.pid, stopped=False, timeout=_SIGNAL_TAKES)

    def wait_stopped(self, timeout: float = 10.0) -> None:
        """Wait until the process has stopped itself (a ``pause`` on a command)."""
        if not _proc.wait_for_stop(self.pid, stopped=True, timeout=timeout):
            raise ClientError(f"client {self.name} did not stop within {timeout}s; {self._log_tail()}")
        self.paused = True

    # -- commands --

    def submit(self, command: str, *, pause: str | None = None, reply_timeout: float = 60.0, **args: Any) -> Pending:
        """Send a command without waiting; ``.result()`` on what it returns waits for the
        reply, at most ``reply_timeout`` seconds. ``args`` go to the worker's command."""
        return self._send({"cmd": command, "args": args, "pause": pause}, command, reply_timeout)

    def call(self, command: str, *, pause: str | None = None, reply_timeout: float = 60.0, **args: Any) -> Any:
        """Send a command and return its result."""
        return self.submit(command, pause=pause, reply_timeout=reply_timeout, **args).result()

    def _send(self, message: dict[str, Any], command: str, timeout: float) -> Pending:
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise ClientError(f"client {self.name} is not running")
        if self._pending is not None:
            self._pending.result()
        self._next_id += 1
        pending = Pending(self, self._next_id, command, timeout)
        try:
            proc.stdin.write((json.dumps({"id": self._next_id, **message}) + "\n").encode())
            proc.stdin.flush()
        except OSError as exc:
            raise ClientError(f"client {self.name} is gone ({exc}); {self._log_tail()}") from None
        self._pending = pending
        return pending

    def _await_reply(self, pending: Pending, timeout: float) -> Any:
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise ClientError(
                f"client {self.name} did not answer {pending.command!r} within {timeout}s; {self._log_tail()}"
            ) from None
        finally:
            if self._pending is pending:
                self._pending = None
        if reply is None:
            raise ClientError(f"client {self.name} exited during {pending.command!r}; {self._log_tail()}")
        if reply.get("id") != pending.ident:
            raise ClientError(f"client {self.name}: reply {reply.get('id')} to command {pending.ident}")
        if not reply.get("ok"):
            raise ClientError(f"client {self.name} failed in {pending.command!r}:\n{reply.get('error')}")
        return reply.get("result")

    def _read_replies(self) -> None:
        proc = self._proc
        assert proc is not None
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                self._replies.put(json.loads(line))
            except ValueError:
                continue
        self._replies.put(None)

    def _log_tail(self, lines: int = 12) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip()
        except OSError:
            text = ""
        if not text:
            return "its log is empty"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"the tail of its log {self.log_path}:\n{tail}"
