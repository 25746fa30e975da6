"""The harness's side of the protocol: start a worker of any client and talk to it.

``start(client, masters)`` starts the worker process of ``client`` (installing the peer
first if needed, :func:`peers.install.ensure`) and returns a :class:`Worker` that sends
requests and reads answers, one JSON object a line each way (docs/peers.md). The tests use
it, and so can the chaos harness: nothing here knows which library a worker runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

from . import install

HERE = pathlib.Path(__file__).resolve().parent
PYTHON_WORKER = HERE / "python_worker.py"
NODE_WORKER = HERE / "node" / "worker.js"


@dataclass(frozen=True)
class Settings:
    """What a worker gives its client beyond each request's ttl and timeout, in seconds;
    None leaves the client's default. A client takes each only where it has a setting of
    its own for it; the worker's greeting (``settings``) says what it runs with."""

    #: The bound on each request to a master (a per-master timeout, a socket timeout).
    request_timeout: float | None = None
    #: The mean pause between two attempts of a blocking acquire.
    retry_delay: float | None = None

    def __post_init__(self) -> None:
        for field, value in (("request_timeout", self.request_timeout), ("retry_delay", self.retry_delay)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{field} must be a number of seconds, not {type(value).__name__}")
            if not 0 < value < math.inf:
                raise ValueError(f"{field} must be > 0 seconds, not {value!r}")

    def argv(self) -> list[str]:
        """The worker's command-line options for these settings."""
        options = []
        if self.request_timeout is not None:
            options += ["--request-timeout-ms", f"{self.request_timeout * 1000:g}"]
        if self.retry_delay is not None:
            options += ["--retry-delay-ms", f"{self.retry_delay * 1000:g}"]
        return options


class WorkerError(RuntimeError):
    """A worker died, said something that is not the protocol, or did not answer in time."""


def command(
    client: str, addresses: Iterable[str], directory: pathlib.Path | None = None, settings: Settings | None = None
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a worker of ``client`` on masters ``addresses``
    (``host:port`` each), given ``settings``; a peer is installed first if it is not
    (InstallFailed if it cannot be)."""
    argv, env = _command(client, addresses, directory)
    return [*argv, *(settings or Settings()).argv()], env


def _command(client: str, addresses: Iterable[str], directory: pathlib.Path | None) -> tuple[list[str], dict[str, str]]:
    masters = ",".join(addresses)
    env = dict(os.environ)
    if client == install.OWN:
        # This library as the caller imports it (a checkout, or the compiled tree of CI's
        # compiled tier), not whatever the venv would find first.
        import redlock  # noqa: PLC0415

        origin = pathlib.Path(redlock.__file__).resolve().parent.parent
        argv = [
            sys.executable,
            "-I",
            str(PYTHON_WORKER),
            "--client",
            client,
            "--masters",
            masters,
            "--path",
            str(origin),
        ]
        return argv, env
    installed = install.ensure(client, directory)
    if client in install.PYTHON_PEERS:
        # -I -S: no site-packages, no PYTHONPATH, no script directory on the path: the
        # peer's --target directory and the standard library are all it can import.
        argv = [sys.executable, "-I", "-S", str(PYTHON_WORKER), "--client", client, "--masters", masters]
        return [*argv, "--path", str(installed.path)], env
    env["NODE_PATH"] = str(installed.path / "node_modules")
    return ["node", str(NODE_WORKER), "--client", client, "--masters", masters], env


class Worker:
    """One worker process: ``call(request)`` sends a request and returns its answer;
    ``send`` and ``receive`` do the halves, for a request whose answer comes later (a
    blocking acquire)."""

    def __init__(
        self,
        client: str,
        argv: list[str],
        env: dict[str, str],
        timeout: float = 60.0,
        *,
        errors: IO[bytes] | None = None,
        new_session: bool = False,
    ) -> None:
        """``errors``: the file the worker's stderr goes to (default a temporary one);
        ``new_session``: in a session of its own, out of reach of a terminal's Ctrl-C
        (the chaos harness stops its workers itself, in order)."""
        self.client = client
        self.timeout = timeout
        # stderr into a file, not a pipe: a chatty client (tracebacks it logs) must not
        # fill a pipe nobody reads and stall the worker mid-answer.
        self._errors = tempfile.TemporaryFile() if errors is None else errors  # noqa: SIM115  (closed by close())
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            env=env,
            text=True,
            bufsize=1,
            start_new_session=new_session,
        )
        assert self.process.stdout is not None
        self._out = self.process.stdout.fileno()
        self._pending = b""
        #: Requests sent whose answers were not received yet; first, the greeting.
        self.outstanding = 1
        try:
            self.greeting = self.receive()
            if self.greeting.get("hello") != client:
                raise WorkerError(f"{client}: the worker greeted with {self.greeting!r}{self._stderr()}")
        except BaseException:
            self.close()
            raise

    def send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        self.outstanding += 1

    def ready(self, wait: float = 0.0) -> bool:
        """Whether an answer can be read now (or within ``wait`` seconds)."""
        # Lines are split here, from raw reads: a buffered reader would take several answers
        # off the pipe at once, and select() would then say nothing is left to read.
        give_up = time.monotonic() + wait
        while b"\n" not in self._pending:
            left = give_up - time.monotonic()
            readable, _, _ = select.select([self._out], [], [], max(0.0, left))
            if not readable:
                return False
            chunk = os.read(self._out, 65536)
            if not chunk:
                return True  # the end: receive() says the worker exited
            self._pending += chunk
        return True

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        wait = self.timeout if timeout is None else timeout
        if not self.ready(wait):
            raise WorkerError(f"{self.client}: no answer within {wait} s{self._stderr()}")
        line, newline, self._pending = self._pending.partition(b"\n")
        if not newline:
            raise WorkerError(f"{self.client}: the worker exited ({self.process.wait()}){self._stderr()}")
        self.outstanding -= 1
        try:
            answer = json.loads(line)
        except ValueError as exc:
            raise WorkerError(f"{self.client}: not a JSON line: {line!r}") from exc
        if not isinstance(answer, dict):
            raise WorkerError(f"{self.client}: not a JSON object: {line!r}")
        return answer

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        self.send(request)
        return self.receive(timeout)

    def stderr(self) -> str:
        """What the worker wrote on its stderr so far (the last 4,000 characters)."""
        self._errors.seek(0)
        return self._errors.read().decode(errors="replace")[-4000:]

    def _stderr(self) -> str:
        written = self.stderr()
        return f"; its stderr: {written}" if written else ""

    def close(self) -> None:
        """Ask the worker to quit (it closes its connections), then make sure it is gone.
        A worker still busy with a request (a blocking acquire) is killed at once: it would
        read the quit only after that request; what it holds expires with its ttl."""
        if self.process.poll() is None:
            if self.outstanding:
                self.process.kill()
            else:
                with contextlib.suppress(OSError, ValueError, WorkerError):
                    self.call({"op": "quit"}, timeout=10.0)
        try:
            self.process.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self._errors):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def start(
    client: str, addresses: Iterable[str], directory: pathlib.Path | None = None, settings: Settings | None = None
) -> Worker:
    """A started worker of ``client`` (install.CLIENTS) on the masters ``addresses``."""
    argv, env = command(client, addresses, directory, settings)
    return Worker(client, argv, env)
