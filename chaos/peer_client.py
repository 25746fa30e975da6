"""Any Redlock client as a client of a chaos run: a worker of the peers protocol (docs/peers.md).

:class:`PeerClient` stands where a :class:`~chaos.clients.ClientProcess` stands in a run
(``Params.peers``: :mod:`chaos.trial`), so that a scenario script drives it with the same
commands (``acquire``, ``read``, ``write``, ``extend``, ``release``, ``cycle``, ``loop``)
and a nemesis stops, continues and kills it by pid. The process it stands for is the peer
worker itself (``peers/python_worker.py``, ``peers/node/worker.js``): a SIGSTOP of the
client pauses the client library's own process, with its connections and timers.

The commands are translated here, in the harness, into the protocol's requests, one at a
time on a thread of the client's own, and recorded into the client's history file in
:mod:`chaos.history`'s events, stamped with the worker's own ``t0``/``t1`` (its
CLOCK_MONOTONIC, the history's clock). So the checkers judge every client from the same
events, with nothing special-cased for any of them:

* an acquire or extend is invoked at the worker's ``t0`` and returns at its ``t1``; its
  deadline is the worker's ``deadline_ns`` where the client tells its validity, else
  ``ttl - (ttl * 0.01 + 2 ms)`` from the start of its one attempt (an extend, a
  non-blocking acquire: ``t0``) or from the return of a blocking acquire (``t1``: the
  start of its winning attempt is the client's secret): the most that
  :func:`chaos.checkers.check_validity` allows any client, so a client that tells nothing
  is credited with what a correct one could claim, and no more;
* the read and the write of the protected counter are the worker's own ``read`` and
  ``write`` on the resource server (a write carries the holder's deadline, which the
  worker checks just before it writes, as a careful holder would); a ``pause`` of
  "before" on a write stops the worker between that check and the write.

What the library's own clients take beyond that (fencing, a lock delay, semaphores,
several names, threads, elections) is refused with a ValueError naming it.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import pathlib
import random
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from .clients import ClientError, ClientProcess, Pending, _registry
from .history import (
    AcquireInvoked,
    AcquireReturned,
    ExtendInvoked,
    ExtendReturned,
    FaultBegin,
    FaultEnd,
    Recorder,
    ReleaseInvoked,
    ReleaseReturned,
    ResourceRead,
    ResourceWrite,
)
from .workload import LoopSpec, resource_key

if TYPE_CHECKING:
    from peers import workers

__all__ = ["PeerClient", "PeerSession", "Peers", "caller_deadline", "peers_tier"]

#: How much longer than its own timeout an answer may take before the worker counts as hung
#: (aioredlock waits for every master, with no per-master timeout: a paused master holds
#: its acquire until the pause ends).
ANSWER_GRACE = 10.0
#: The drift allowance of the Redlock specification, for the bound of a caller whose client
#: tells no validity (as chaos.checkers writes it out, not the client's).
_DRIFT_FACTOR = 0.01
_EXPIRY_PRECISION = 0.002

#: What a scenario may ask of a client that only the library's own clients have.
_OWN_FEATURES = ("lock_delay", "also", "limit", "quorum", "auto_extend", "mode")
_LOOP_FEATURES = ("limit", "quorum", "together", "threads", "reentrant", "rwlock")


def peers_tier() -> Any:
    """The checkout's ``peers`` package (the workers and their installs), imported only
    when a run has peer clients: the installed harness (``redlock_chaos``) ships without it."""
    try:
        import peers.install  # noqa: PLC0415
        import peers.workers  # noqa: PLC0415
    except ImportError as exc:
        raise ValueError(f"peer clients need the checkout's peers/ package (docs/peers.md): {exc}") from None
    return peers


@dataclass(frozen=True)
class Peers:
    """Which peer clients a run's clients are: the first client of a scenario (``c1``) runs
    ``clients[0]``, the second the next, round the tuple (one client for a trial, two for a
    mixed one). ``key_prefix`` goes before every lock name, so that a client whose keys all
    carry one (pottery's ``redlock:``) can take the scenario's names, and the others take
    the same keys; ``directory`` is the peers' install directory (None: the default).
    ``request_timeout`` and ``retry_delay`` (seconds) are given to every worker, which
    passes each to its client where the client has a setting for it (None: the clients'
    defaults; ``peers.workers.Settings``)."""

    clients: tuple[str, ...]
    key_prefix: str = ""
    directory: str | None = None
    request_timeout: float | None = None
    retry_delay: float | None = None

    def __post_init__(self) -> None:
        if not self.clients:
            raise ValueError("clients: give at least one")
        known = peers_tier().install.CLIENTS
        unknown = [c for c in self.clients if c not in known]
        if unknown:
            raise ValueError(f"clients: unknown {unknown}; choose from {list(known)}")

    def client_for(self, name: str, index: int) -> str:
        """The peer client that the run's client ``name`` (its ``index``-th) runs: by the
        number in its name (``c2``, and ``c2.3`` that took c2's place), else by order."""
        number = re.match(r"c(\d+)", name)
        position = int(number.group(1)) - 1 if number else index
        return self.clients[position % len(self.clients)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "clients": list(self.clients),
            "key_prefix": self.key_prefix,
            "request_timeout": self.request_timeout,
            "retry_delay": self.retry_delay,
        }

    def settings(self) -> Any:
        """The workers' ``peers.workers.Settings``."""
        return peers_tier().workers.Settings(self.request_timeout, self.retry_delay)


def caller_deadline(since: float, ttl: float) -> float:
    """How long a caller relies on a lock whose client tells no validity: ``ttl`` less the
    drift allowance from ``since``, the start of the attempt that won it where the caller
    knows it (every key was set after it), else the acquire's return (module docstring)."""
    return since + ttl - (ttl * _DRIFT_FACTOR + _EXPIRY_PRECISION)


def _address(url: str) -> str:
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"a peer worker reaches servers by HOST:PORT: {url!r} has none")
    return f"{parts.hostname}:{parts.port}"


def _seconds(ns: Any) -> float:
    return int(ns) / 1e9


class _Hung(ClientError):
    """The worker gave no answer in time, or died: the session is over."""


@dataclass
class _Held:
    token: str | None
    deadline: float
    #: The ttl it was taken with: an extend without one asks for the same again.
    ttl: float


class PeerSession:
    """One peer worker driven by chaos commands, every step recorded (module docstring)."""

    def __init__(
        self,
        client: str,
        worker: workers.Worker,
        recorder: Recorder,
        *,
        resource: str,
        key_prefix: str = "",
        seed: int = 0,
    ) -> None:
        self.client = client
        self.worker = worker
        self.recorder = recorder
        self.resource = resource
        self.key_prefix = key_prefix
        self.rng = random.Random(seed)
        self.supports = frozenset(worker.greeting.get("supports", ()))
        self.held: dict[str, _Held] = {}
        self.reads: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._stops = itertools.count(1)
        #: Where the next request's worker stops itself ("before", "after"; the chaos
        #: command's ``pause``), for the one request of the command that carries it.
        self.stop_next: str | None = None

    # -- the protocol --

    def request(self, op: str, wait: float, **fields: Any) -> dict[str, Any]:
        """One request and its answer (the answer's own ``stop`` recorded as a client pause)."""
        ident = next(self._ids)
        stop, self.stop_next = self.stop_next, None
        if stop is not None:
            fields["stop"] = stop
        try:
            self.worker.send({"op": op, "id": ident, **fields})
            answer = self.worker.receive(timeout=wait + ANSWER_GRACE)
        except (peers_tier().workers.WorkerError, OSError, ValueError) as exc:
            self.recorder.error(self.client, f"{op}: {exc}")
            raise _Hung(f"{self.client}: {exc}") from None
        if answer.get("id") != ident:
            raise _Hung(f"{self.client}: answer {answer.get('id')} to request {ident}")
        if stop == "after" and "stopped_ns" in answer:
            # The step was over when the worker stopped: it answers only once continued.
            answer["t1"] = answer["stopped_ns"]
        if "stopped_ns" in answer:
            # Recorded afterwards, at the worker's own stamps of the stop (the history
            # orders events by time).
            fault = f"{self.client}-stop{next(self._stops)}"
            self.recorder.record(
                FaultBegin(
                    time=_seconds(answer["stopped_ns"]),
                    fault=fault,
                    kind="client-pause",
                    target=self.client,
                    detail=f"SIGSTOP {stop} its {op}",
                )
            )
            self.recorder.record(FaultEnd(time=_seconds(answer["continued_ns"]), fault=fault))
        return answer

    def key(self, name: str) -> str:
        return f"{self.key_prefix}{name}"

    # -- the commands --

    def acquire(
        self,
        name: str,
        ttl: float,
        *,
        blocking: bool = True,
        timeout: float | None = None,
        at: float | None = None,
        **own: Any,
    ) -> dict[str, Any]:
        asked = [feature for feature in _OWN_FEATURES if own.get(feature)]
        if asked:
            raise ValueError(f"{', '.join(asked)}: this library's features, not part of the peers protocol")
        if at is not None:
            time.sleep(max(0.0, at - time.monotonic()))
        wait = float(timeout if timeout is not None else 10.0) if blocking else 0.0
        answer = self.request(
            "acquire", wait, name=self.key(name), ttl_ms=round(ttl * 1000), blocking=blocking, timeout_s=wait
        )
        t0, t1 = _seconds(answer["t0"]), _seconds(answer["t1"])
        op = self.recorder.next_op()
        self.recorder.record(AcquireInvoked(time=t0, client=self.client, name=name, op=op, ttl=ttl, blocking=blocking))
        error = None if answer["ok"] or answer.get("refused") else str(answer.get("error"))
        if not answer["ok"]:
            self.recorder.record(AcquireReturned(time=t1, client=self.client, name=name, op=op, ok=False, error=error))
            return {"ok": False, "error": error, "deadline": None, "fencing": None, "token": None}
        told = answer.get("deadline_ns")
        deadline = _seconds(told) if told is not None else caller_deadline(t1 if blocking else t0, ttl)
        token = None if answer.get("token") is None else str(answer["token"])
        self.held[name] = _Held(token, deadline, ttl)
        self.recorder.record(
            AcquireReturned(time=t1, client=self.client, name=name, op=op, ok=True, token=token, deadline=deadline)
        )
        return {"ok": True, "deadline": deadline, "fencing": None, "token": token}

    def read(self, name: str) -> dict[str, Any]:
        answer = self._done(self.request("read", 0.0, resource=self.resource, counter=resource_key(name)), "read")
        value = int(answer["value"])
        self.recorder.record(
            ResourceRead(
                time=_seconds(answer["t1"]), client=self.client, name=name, resource=resource_key(name), value=value
            )
        )
        self.reads[name] = value
        return {"value": value}

    def valid(self, name: str) -> bool:
        held = self.held.get(name)
        return held is not None and time.monotonic() < held.deadline

    def write(self, name: str, *, check: bool = True) -> dict[str, Any]:
        """Write the value read last, plus one; with ``check``, only while the holder's
        deadline has not passed, as the worker sees it just before the write."""
        if name not in self.reads:
            raise RuntimeError(f"{self.client}: write of {name!r} without a read first")
        read_value = self.reads.pop(name)
        held = self.held.get(name)
        if check and held is None:
            return {"written": False, "reason": "the lock is not held"}
        until = None if not check or held is None else round(held.deadline * 1e9)
        answer = self._done(
            self.request(
                "write",
                0.0,
                resource=self.resource,
                counter=resource_key(name),
                value=read_value + 1,
                until_ns=until,
            ),
            "write",
        )
        if not answer["written"]:
            return {"written": False, "reason": "the lock is no longer valid"}
        self.recorder.record(
            ResourceWrite(
                time=_seconds(answer["t1"]),
                client=self.client,
                name=name,
                resource=resource_key(name),
                value=read_value + 1,
                read_value=read_value,
                seq=int(answer["seq"]),
            )
        )
        return {"written": True, "accepted": True, "value": read_value + 1}

    def extend(self, name: str, ttl: float | None = None) -> dict[str, Any]:
        held = self.held.get(name)
        if held is None:
            raise RuntimeError(f"{self.client}: no lock held on {name!r}; acquire it first")
        ttl = held.ttl if ttl is None else ttl
        answer = self.request("extend", 0.0, name=self.key(name), ttl_ms=round(ttl * 1000))
        t0, t1 = _seconds(answer["t0"]), _seconds(answer["t1"])
        op = self.recorder.next_op()
        self.recorder.record(ExtendInvoked(time=t0, client=self.client, name=name, op=op, token=held.token, ttl=ttl))
        if not answer["ok"]:
            error = "refused" if answer.get("refused") else str(answer.get("error"))
            self.recorder.record(ExtendReturned(time=t1, client=self.client, name=name, op=op, ok=False, error=error))
            return {"ok": False, "error": error, "lost": bool(answer.get("refused"))}
        told = answer.get("deadline_ns")
        held.deadline = _seconds(told) if told is not None else caller_deadline(t0, ttl)
        self.recorder.record(
            ExtendReturned(time=t1, client=self.client, name=name, op=op, ok=True, deadline=held.deadline)
        )
        return {"ok": True, "deadline": held.deadline}

    def release(self, name: str) -> dict[str, Any]:
        held = self.held.pop(name, None)
        answer = self.request("release", 0.0, name=self.key(name))
        op = self.recorder.next_op()
        token = None if held is None else held.token
        self.recorder.record(
            ReleaseInvoked(time=_seconds(answer["t0"]), client=self.client, name=name, op=op, token=token)
        )
        error = None if answer["ok"] else "refused" if answer.get("refused") else str(answer.get("error"))
        self.recorder.record(
            ReleaseReturned(
                time=_seconds(answer["t1"]), client=self.client, name=name, op=op, ok=bool(answer["ok"]), error=error
            )
        )
        return {"ok": bool(answer["ok"]), "error": error}

    def cycle(self, name: str, ttl: float, *, at: float | None = None, timeout: float = 5.0) -> dict[str, Any]:
        """One blocking acquire (starting at ``at``), read-modify-write, release."""
        got = self.acquire(name, ttl, blocking=True, timeout=timeout, at=at)
        if got["ok"]:
            self.read(name)
            self.write(name)
            self.release(name)
        return got

    def loop(self, spec: LoopSpec) -> dict[str, Any]:
        """Contend for ``spec.names`` until ``spec.until``, as the library's clients do
        (:meth:`chaos.workload.ClientSession.loop`, one name, one thread); returns counts."""
        asked = [feature for feature in _LOOP_FEATURES if getattr(spec, feature)]
        if asked:
            raise ValueError(f"{', '.join(asked)}: this library's features, not part of the peers protocol")
        acquired = failed = writes = 0
        while (left := spec.until - time.monotonic()) > 0:
            name = self.rng.choice(spec.names)
            timeout = min(spec.acquire_timeout, left) if spec.blocking else None
            got = self.acquire(name, spec.ttl, blocking=spec.blocking, timeout=timeout)
            if not got["ok"]:
                failed += 1
                if got["error"] is not None:
                    time.sleep(self.rng.uniform(0.02, 0.06))  # (no quorum: no hot loop)
            else:
                acquired += 1
                self.read(name)
                valid = not spec.check_first or self.valid(name)
                time.sleep(self._hold(spec, got["deadline"]))
                if "extend" in self.supports and self.rng.random() < spec.extend_share:
                    self.extend(name, spec.ttl)
                if valid and self.write(name, check=not spec.check_first)["written"]:
                    writes += 1
                self.reads.pop(name, None)
                self.release(name)
            time.sleep(self.rng.uniform(*spec.think))
        return {"acquired": acquired, "failed": failed, "writes": writes, "nested": 0, "miscounted": 0}

    def _hold(self, spec: LoopSpec, deadline: float) -> float:
        if spec.hold_share is None:
            return self.rng.uniform(*spec.hold)
        return max(0.0, deadline - time.monotonic()) * self.rng.uniform(*spec.hold_share)

    def _done(self, answer: dict[str, Any], what: str) -> dict[str, Any]:
        if not answer["ok"]:
            raise RuntimeError(f"{self.client}: its {what} of the resource failed: {answer.get('error')}")
        return answer

    def handle(self, command: str, args: dict[str, Any], pause: str | None) -> Any:
        """One chaos command (:mod:`chaos.worker`'s names and arguments)."""
        self.stop_next = pause
        steps: dict[str, Callable[[], Any]] = {
            "ping": lambda: {"pid": self.worker.process.pid},
            "acquire": lambda: self.acquire(**args),
            "read": lambda: self.read(args["name"]),
            "write": lambda: self.write(args["name"], check=bool(args.get("check", True))),
            "extend": lambda: self.extend(args["name"], args.get("ttl")),
            "release": lambda: self.release(args["name"]),
            "cycle": lambda: self.cycle(**args),
            "loop": lambda: self.loop(LoopSpec.from_dict(args)),
        }
        if command not in steps:
            raise ValueError(f"{command!r}: not a command a peer takes (it takes {', '.join(steps)})")
        try:
            return steps[command]()
        finally:
            self.stop_next = None


class PeerClient(ClientProcess):
    """A run's client that is a peer worker (module docstring); the process a nemesis
    signals is the worker. The worker starts in :meth:`init`, which brings its masters."""

    def __init__(
        self,
        name: str,
        workdir: pathlib.Path,
        *,
        peer: str,
        peers: Peers,
        env: dict[str, str] | None = None,
        launcher: list[str] | None = None,
    ) -> None:
        super().__init__(name, workdir, env=env, launcher=launcher or ())
        self.peer = peer
        self.peers = peers
        self.session: PeerSession | None = None
        self.worker: workers.Worker | None = None
        self.greeting: dict[str, Any] = {}
        self._commands = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"peer-{name}")
        self._futures: dict[int, concurrent.futures.Future[Any]] = {}
        self._recorder: Recorder | None = None

    def __repr__(self) -> str:
        return f"<PeerClient {self.name} ({self.peer})>"

    def spawn(self) -> None:
        """Nothing yet: the worker's command line names its masters, which :meth:`init` brings."""

    def _start(self, config: dict[str, Any]) -> dict[str, Any]:
        own = (("fencing", "fencing"), ("variant", "a broken variant"), ("clock_rate", "a clock rate"))
        for option, feature in own:
            if config.get(option):
                raise ValueError(f"{option}: {feature} is the library's own clients' (chaos.worker), not a peer's")
        addresses = [_address(url) for url in config["urls"]]
        directory = None if self.peers.directory is None else pathlib.Path(self.peers.directory)
        tier = peers_tier()
        argv, env = tier.workers.command(self.peer, addresses, directory, self.peers.settings())
        env.update(self.env)
        log = cast(IO[bytes], open(self.log_path, "a+b"))  # noqa: SIM115  (the worker closes it)
        argv = [*self.launcher, *argv]
        worker: workers.Worker = tier.workers.Worker(self.peer, argv, env, errors=log, new_session=True)
        self.worker = worker
        self.greeting = worker.greeting
        # The worker's process is the client's: pid, pause, resume, kill and close act on it.
        self._proc = cast("subprocess.Popen[bytes]", worker.process)
        with _registry.lock:
            _registry.procs.add(self._proc)
        self._recorder = Recorder(self.history_path, source=self.name)
        self.session = PeerSession(
            self.name,
            worker,
            self._recorder,
            resource=_address(config["resource_url"]),
            key_prefix=self.peers.key_prefix,
            seed=int(config.get("seed", 0)),
        )
        return {"pid": worker.process.pid, "client": self.peer, "greeting": self.greeting}

    def _run(self, message: dict[str, Any]) -> Any:
        if message["cmd"] == "init":
            return self._start(message)
        if self.session is None:
            raise ClientError(f"client {self.name} is not started")
        return self.session.handle(message["cmd"], dict(message.get("args") or {}), message.get("pause"))

    def _send(self, message: dict[str, Any], command: str, timeout: float) -> Pending:
        self._next_id += 1
        pending = Pending(self, self._next_id, command, timeout)
        self._futures[self._next_id] = self._commands.submit(self._run, message)
        return pending

    def _await_reply(self, pending: Pending, timeout: float) -> Any:
        future = self._futures.pop(pending.ident)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise ClientError(
                f"client {self.name} ({self.peer}) did not answer {pending.command!r} in {timeout}s"
            ) from None
        except ClientError:
            raise
        except Exception as exc:
            raise ClientError(
                f"client {self.name} ({self.peer}) failed in {pending.command!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def close(self, deadline: float | None = None) -> None:
        """End the worker (end of its input: it closes its connections), else kill it."""
        super().close(deadline)
        if self.worker is not None:
            self.worker.close()  # (its process is gone: this closes its streams)
        self._commands.shutdown(wait=False, cancel_futures=True)
        if self._recorder is not None:
            self._recorder.close()
