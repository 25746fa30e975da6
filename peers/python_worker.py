"""A peer worker: one Redlock client of Python behind the JSON-lines protocol of docs/peers.md.

    python -I [-S] peers/python_worker.py --client CLIENT --masters HOST:PORT,... --path DIR
        [--request-timeout-ms MS] [--retry-delay-ms MS]

``--client`` is one of ``redlock-quorum`` (this library), ``pottery``, ``redlock-py``,
``aioredlock``, ``redlock-ng`` and ``broken:redlock-ng`` (redlock-ng with its quorum lowered
to one master: the trials' self-test). ``--path`` goes first on ``sys.path``: a peer's ``pip
install --target`` directory (``peers/install.py``), run with ``-I -S`` so that nothing but
the standard library and that directory is importable (redlock-py's and redlock-ng's modules
are named ``redlock``, as this package is), or, for this library, the directory its package
is imported from.

The worker reads one request a line on stdin and writes one answer a line on stdout, in
order; its first line is a greeting with the client's name, version and claims. This file
imports only the standard library at the top: the client is imported by its adapter, with
``importlib`` (a peer's modules are untyped, and absent from the project's environment).

``--request-timeout-ms`` and ``--retry-delay-ms`` give every client the same bound on each
request to a master and the same mean pause between attempts, where the client takes them
(its own setting, never a patch of its code); the greeting's ``settings`` says, per client,
what it runs with: the value given, or its own default where it takes none.

What each client claims, read from its source, is in each adapter's docstring; the protocol's
``name`` is the Redis key the lock lives at, and each adapter maps it to its client's naming.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import importlib
import importlib.metadata
import json
import os
import random
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Requests whose answer this worker gives; a client may support fewer (see ``supports``).
OPS = ("acquire", "release", "extend", "incr", "read", "write", "quit")
#: Where a request may ask the worker to SIGSTOP itself (``stop``): the harness pauses a
#: holder at a chosen step, and the stop pauses this very process, whatever the client.
STOPS = ("before", "after")

#: The resource write: SET the counter and INCR its sequence key in one step, so that the
#: harness knows the order in which the server applied writes (KEYS[1] the counter,
#: KEYS[2] its sequence, ARGV[1] the value; returns the sequence number).
WRITE_SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])"


class Refused(Exception):
    """The client did not grant (or extend, or release): an answer, not a failure of the worker."""


class Unsupported(Exception):
    """The client has no such operation (redlock-py has no extend)."""


def now() -> int:
    # CLOCK_MONOTONIC on Linux, the clock node's process.hrtime reads too: the harness can
    # order the events of workers of every language on one time line.
    return time.monotonic_ns()


class Given:
    """The settings given on the command line, in seconds; None: the client's default."""

    def __init__(self, request_timeout_ms: float | None = None, retry_delay_ms: float | None = None) -> None:
        self.request_timeout = None if request_timeout_ms is None else request_timeout_ms / 1000
        self.retry_delay = None if retry_delay_ms is None else retry_delay_ms / 1000

    def jittered(self) -> tuple[float, float] | None:
        """The given mean pause as a uniform range of +- half of it, as this library jitters
        its own (for the clients whose pause is a range)."""
        return None if self.retry_delay is None else (self.retry_delay / 2, self.retry_delay * 3 / 2)


def _seconds(value: float) -> str:
    return f"{value:g} s"


class Adapter:
    """One client: acquire/release/extend of locks by key, one held lock per key."""

    client = ""
    distribution = ""
    claims: dict[str, str] = {}  # noqa: RUF012  (each adapter's own, read only)
    supports: tuple[str, ...] = ("acquire", "release", "extend", "incr")
    #: What every key of this client starts with (pottery's ``redlock:``): the protocol's
    #: names must carry it; the greeting says it, so that a harness can choose names.
    key_prefix = ""
    #: A deliberately broken adapter names the client it wraps (greeting ``wraps``): the
    #: harness's self-test expects it to fare worse than that client.
    wraps = ""

    def __init__(self, masters: list[tuple[str, int]], given: Given) -> None:
        self.masters = masters
        self.given = given
        self.held: dict[str, Any] = {}
        #: What the client runs with, for each setting of the protocol (greeting ``settings``).
        self.settings: dict[str, str] = {}

    def version(self) -> str:
        return importlib.metadata.version(self.distribution)

    def acquire(self, name: str, ttl_ms: int, blocking: bool, timeout_s: float) -> dict[str, Any]:
        """Take ``name``; what the client tells of the lock (token, validity); Refused if not granted."""
        raise NotImplementedError

    def release(self, name: str) -> dict[str, Any]:
        raise NotImplementedError

    def extend(self, name: str, ttl_ms: int) -> dict[str, Any]:
        raise Unsupported(f"{self.client} has no extend")

    def close(self) -> None:
        """Close the client's connections."""

    def _take(self, name: str) -> Any:
        if name not in self.held:
            raise KeyError(f"{name!r} is not held by this worker")
        return self.held[name]


def until(deadline: float, attempt: Callable[[], T | None], pause: Callable[[], float]) -> T | None:
    """``attempt()`` until it gives something or ``deadline`` (monotonic seconds) passes,
    sleeping ``pause()`` between attempts: the blocking acquire of a client that has no
    timeout of its own, with the client's own retry delay."""
    while True:
        got = attempt()
        if got is not None or time.monotonic() >= deadline:
            return got
        time.sleep(min(pause(), max(0.0, deadline - time.monotonic())))


class RedlockQuorum(Adapter):
    """This library (redlock-quorum), as the other adapters see it.

    Claims: drift = ttl * 0.01 + 2 ms, validity = ttl - elapsed - drift counted on
    time.monotonic from before the first SET; acquire counts a grant only with a majority and
    validity left, and rolls back on every master otherwise. Release and extend compare the
    token first (Lua, or DELIFEQ/SET IFEQ natively where the server has them); extend never
    re-creates a key. The lock name is the key itself.
    """

    client = "redlock-quorum"
    distribution = "redlock-quorum"
    claims = {  # noqa: RUF012
        "drift": "ttl * 0.01 + 2 ms",
        "clock": "time.monotonic, from before the first SET",
        "validity": "granted only with a majority and validity > 0",
        "rollback": "every master, after a refused attempt",
        "extend": "compare-and-pexpire, majority and validity left; never re-creates a key",
        "keys": "the lock name is the key",
    }

    def __init__(self, masters: list[tuple[str, int]], given: Given) -> None:
        super().__init__(masters, given)
        import redlock  # noqa: PLC0415  (this library, from --path)

        self.redlock = redlock
        options: dict[str, Any] = {}
        if given.request_timeout is not None:
            options["node_timeout"] = given.request_timeout
        if given.retry_delay is not None:
            options["retry_delay"] = given.retry_delay
        self.rl = redlock.Redlock([f"redis://{host}:{port}" for host, port in masters], **options)
        delay = self.rl.retry_delay
        self.settings = {
            "request_timeout": f"node_timeout {_seconds(self.rl.node_timeout)}, masters at once"
            + ("" if "node_timeout" in options else " (its default)"),
            "retry_delay": f"retry_delay {_seconds(delay)}: uniform in {delay / 2:g}-{delay * 3 / 2:g} s"
            + ("" if "retry_delay" in options else " (its default)"),
        }

    def version(self) -> str:
        return str(self.redlock.__version__)

    def acquire(self, name: str, ttl_ms: int, blocking: bool, timeout_s: float) -> dict[str, Any]:
        lock = self.rl.lock(name, ttl=ttl_ms / 1000)
        if not lock.acquire(blocking=blocking, timeout=timeout_s if blocking else None):
            raise Refused("not acquired")
        self.held[name] = lock
        return {"token": lock.token, "validity_ms": lock.validity * 1000}

    def release(self, name: str) -> dict[str, Any]:
        self.held.pop(name).release()
        return {}

    def extend(self, name: str, ttl_ms: int) -> dict[str, Any]:
        validity = self._take(name).extend(ttl_ms / 1000)
        return {"validity_ms": validity * 1000}

    def close(self) -> None:
        self.rl.close()


class Pottery(Adapter):
    """pottery 3 (``pottery.Redlock``), read from pottery/redlock.py.

    Key naming: ``Redlock(key=K)`` lives at ``redlock:K`` (its ``_KEY_PREFIX``), so the
    protocol's name ``redlock:K`` is pottery's key ``K``, and a name outside ``redlock:``
    cannot be expressed. Acquire: ``SET key uuid4 NX PX`` to all masters in threads at
    once; granted with a majority and validity = ttl - drift - elapsed > 0, with drift =
    ttl * 0.01 + 2 ms and elapsed on ``timeit.default_timer`` (perf_counter, monotonic).
    Otherwise it releases on all masters (compare-and-delete). Blocking: retries after a
    random 0-200 ms until ``timeout``. Extend: compare-and-pexpire to the lock's
    ``auto_release_time`` (not a new ttl: the adapter sets it first), counted with a
    majority, no check of the validity left, at most ``num_extensions`` times (3 by
    default; the adapter allows any number). Release: compare-and-delete, majority.
    """

    client = "pottery"
    distribution = "pottery"
    PREFIX = "redlock:"
    key_prefix = PREFIX
    claims = {  # noqa: RUF012
        "drift": "ttl * 0.01 + 2 ms",
        "clock": "timeit.default_timer (perf_counter), from before the first SET",
        "validity": "granted only with a majority and validity > 0",
        "rollback": "compare-and-delete on every master after a refused attempt",
        "extend": "compare-and-pexpire to auto_release_time, majority; no validity check; at most num_extensions",
        "keys": "Redlock(key=K) is the key redlock:K",
    }

    def __init__(self, masters: list[tuple[str, int]], given: Given) -> None:
        super().__init__(masters, given)
        self.redis = importlib.import_module("redis")
        self.pottery = importlib.import_module("pottery")
        timeout = given.request_timeout
        self.clients = [self.redis.Redis(host=host, port=port, socket_timeout=timeout) for host, port in masters]
        pause = self.pottery.Redlock._RETRY_DELAY
        self.settings = {
            "request_timeout": "none (redis-py's default), masters at once in threads"
            if timeout is None
            else f"socket_timeout {_seconds(timeout)} on each master's redis-py client, masters at once in threads",
            "retry_delay": f"not settable (a private class constant, _RETRY_DELAY): uniform in 0-{pause:g} s",
        }

    def acquire(self, name: str, ttl_ms: int, blocking: bool, timeout_s: float) -> dict[str, Any]:
        if not name.startswith(self.PREFIX):
            raise ValueError(f"pottery's keys all start with {self.PREFIX!r}; {name!r} does not")
        lock = self.pottery.Redlock(
            key=name.removeprefix(self.PREFIX),
            masters=self.clients,
            auto_release_time=ttl_ms / 1000,
            num_extensions=sys.maxsize,
        )
        granted = lock.acquire(blocking=True, timeout=timeout_s) if blocking else lock.acquire(blocking=False)
        if not granted:
            raise Refused("not acquired")
        self.held[name] = lock
        return {"token": lock._uuid}

    def release(self, name: str) -> dict[str, Any]:
        lock = self.held.pop(name)
        try:
            lock.release()
        except self.pottery.ReleaseUnlockedLock as exc:
            # (Its repr lists every master's connection settings: the type and key say it.)
            raise Refused(f"ReleaseUnlockedLock({lock.key!r})") from exc
        return {}

    def extend(self, name: str, ttl_ms: int) -> dict[str, Any]:
        lock = self._take(name)
        lock.auto_release_time = ttl_ms / 1000
        try:
            lock.extend()
        except self.pottery.ExtendUnlockedLock as exc:
            raise Refused(f"ExtendUnlockedLock({lock.key!r})") from exc
        return {}

    def close(self) -> None:
        for client in self.clients:
            client.close()


class RedlockPy(Adapter):
    """redlock-py 1.0.8 (module ``redlock``), read from redlock/__init__.py.

    Acquire: ``SET resource token NX PX ttl`` to each master IN TURN (sequential), token of
    22 random letters (``random.choice``, not a CSPRNG); granted with a majority and
    validity = ttl - elapsed - drift > 0, drift = int(ttl * 0.01) + 2 ms, elapsed on the WALL
    clock (``time.time``). Otherwise compare-and-delete on every master, sleep retry_delay
    (200 ms) and retry, retry_count (3) times in all; the adapter makes one attempt a call
    and repeats calls until the timeout. No extend. Release: compare-and-delete on every
    master, no count of what it deleted (it cannot tell a lapsed lock). The resource is the key.
    """

    client = "redlock-py"
    distribution = "redlock-py"
    supports = ("acquire", "release", "incr")
    claims = {  # noqa: RUF012
        "drift": "int(ttl * 0.01) + 2 ms",
        "clock": "time.time (wall clock)",
        "validity": "granted only with a majority and validity > 0",
        "rollback": "compare-and-delete on every master after a refused attempt",
        "extend": "none",
        "keys": "the resource is the key",
    }

    def __init__(self, masters: list[tuple[str, int]], given: Given) -> None:
        super().__init__(masters, given)
        self.module = importlib.import_module("redlock")
        timeout = given.request_timeout
        self.manager = self.module.Redlock(
            [{"host": host, "port": port, "socket_timeout": timeout} for host, port in masters],
            retry_count=1,
            retry_delay=given.retry_delay,
        )
        self.settings = {
            "request_timeout": "none (redis-py's default), masters one after another"
            if timeout is None
            else f"socket_timeout {_seconds(timeout)} on each master's redis-py client, masters one after another",
            "retry_delay": f"retry_delay {_seconds(self.manager.retry_delay)}, fixed"
            + ("" if given.retry_delay is not None else " (its default)"),
        }

    def acquire(self, name: str, ttl_ms: int, blocking: bool, timeout_s: float) -> dict[str, Any]:
        # One attempt a call: lock() sleeps its retry_delay after a refusal itself.
        deadline = time.monotonic() + (timeout_s if blocking else 0.0)
        got = until(deadline, lambda: self.manager.lock(name, int(ttl_ms)) or None, lambda: 0.0)
        if got is None:
            raise Refused("not acquired")
        self.held[name] = got
        return {"token": got.key.decode(), "validity_ms": got.validity}

    def release(self, name: str) -> dict[str, Any]:
        self.manager.unlock(self.held.pop(name))
        return {}

    def close(self) -> None:
        for server in self.manager.servers:
            server.close()


class Aioredlock(Adapter):
    """aioredlock 0.7.3 on aioredis 1.3.1, read from aioredlock/algorithm.py and redis.py.

    Acquire: a Lua script on all masters at once (asyncio.gather): SET key id PX ttl if the
    key is absent OR already holds id (so the same script extends); granted with a majority
    and ttl - elapsed - drift > 0, drift = ttl * 0.01 + 2 ms, elapsed on time.monotonic, but
    only after EVERY master answered (gather; no per-master timeout). A refused attempt is
    retried retry_count (3) times with 100-300 ms pauses and rolled back (compare-and-delete,
    in a background task) only after the last; the adapter makes one attempt a call and
    repeats until the timeout, running the loop until the rollback task is done. Extend: the
    same script, so it RE-CREATES a key that expired and nobody took (no validity check),
    and it unlocks after a failed extend. Release: compare-and-delete; counted as done with a
    majority where the key was ours or absent. The resource is the key.
    """

    client = "aioredlock"
    distribution = "aioredlock"
    claims = {  # noqa: RUF012
        "drift": "ttl * 0.01 + 2 ms",
        "clock": "time.monotonic, around a gather of every master",
        "validity": "granted only with a majority and validity > 0",
        "rollback": "after the last retry only, in a background task",
        "extend": "set-if-absent-or-ours: re-creates an expired key; no validity check",
        "keys": "the resource is the key",
    }

    def __init__(self, masters: list[tuple[str, int]], given: Given) -> None:
        super().__init__(masters, given)
        self.module = importlib.import_module("aioredlock")
        self.loop = asyncio.new_event_loop()
        pauses = given.jittered()
        delays = {} if pauses is None else {"retry_delay_min": pauses[0], "retry_delay_max": pauses[1]}
        self.manager = self.module.Aioredlock(
            [{"host": host, "port": port} for host, port in masters], retry_count=1, **delays
        )
        low, high = self.manager.retry_delay_min, self.manager.retry_delay_max
        self.settings = {
            "request_timeout": "not settable (aioredis 1.3 has no command timeout): waits for every master",
            "retry_delay": f"retry_delay_min/max: uniform in {low:g}-{high:g} s"
            + (" (its default)" if not delays else ""),
        }

    def run(self, step: Coroutine[Any, Any, T]) -> T:
        try:
            return self.loop.run_until_complete(step)
        finally:
            # aioredlock rolls a refused acquire back in a task it does not wait for: in a
            # service the loop would run it soon after; here it runs before the answer.
            # (Only those tasks: aioredis keeps a reader task a connection, for good.)
            pending = {
                task
                for task in asyncio.all_tasks(self.loop)
                if getattr(task.get_coro(), "__qualname__", "").endswith("<locals>.cleanup")
            }
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending, timeout=5.0))

    def acquire(self, name: str, ttl_ms: int, blocking: bool, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout_s if blocking else 0.0)

        def attempt() -> Any:
            try:
                return self.run(self.manager.lock(name, lock_timeout=ttl_ms / 1000))
            except self.module.LockError:
                return None

        got = until(
            deadline, attempt, lambda: random.uniform(self.manager.retry_delay_min, self.manager.retry_delay_max)
        )
        if got is None:
            raise Refused("not acquired")
        self.held[name] = got
        return {"token": got.id}

    def release(self, name: str) -> dict[str, Any]:
        try:
            self.run(self.manager.unlock(self.held.pop(name)))
        except self.module.LockError as exc:
            raise Refused(repr(exc)) from exc
        return {}

    def extend(self, name: str, ttl_ms: int) -> dict[str, Any]:
        try:
            self.run(self.manager.extend(self._take(name), lock_timeout=ttl_ms / 1000))
        except self.module.LockError as exc:
            raise Refused(repr(exc)) from exc
        return {}

    def close(self) -> None:
        self.run(self.manager.destroy())
        self.loop.close()


class RedlockNg(Adapter):
    """redlock-ng 2.0.4 (module ``redlock``, class ``Redlock``), read from its module lock.py,
    algorithm.py, client.py and scripts.py of the installed wheel.

    Acquire (lock.py:45-80): ``SET resource uuid4 NX PX ttl`` to each master IN TURN
    (lock.py:55-58, sequential; only the async class gathers), each bounded by redis-py's
    socket_timeout of 0.1 s (client.py:14), any exception counted as a refusal (lock.py:60);
    granted with a majority and validity = ttl - elapsed - drift > 0 (lock.py:67), drift =
    int(ttl * 0.01) + 2 ms (algorithm.py:23), elapsed on the WALL clock (``time.time``,
    algorithm.py:35). Otherwise compare-and-delete on every master (lock.py:71), then, unless
    this was the last of 1 + retry_count (3) attempts, a random 0.1-0.3 s pause (lock.py:79):
    so even ``blocking=False`` retries; the adapter sets retry_count=0 (one attempt a call)
    and repeats calls until the timeout with that pause. ``blocking=True`` has no timeout.
    Extend (lock.py:96-112): compare-and-PEXPIRE on each master in turn, counted with a
    majority; refused without traffic only after a release (``lock.valid``); no check of the
    time left, and the new ttl replaces the old (PEXPIRE), although the argument is called
    ``additional_ttl``; a key that is gone compares unequal, so it is never re-created.
    Release: compare-and-delete on every master, nothing counted or reported. The resource
    is the key. Its context manager runs the body with an invalid Lock when not granted
    (lock.py:131-139): the caller must test ``lock.valid``.
    """

    client = "redlock-ng"
    distribution = "redlock-ng"
    claims = {  # noqa: RUF012
        "drift": "int(ttl * 0.01) + 2 ms",
        "clock": "time.time (wall clock), masters asked one after another (0.1 s socket timeout each)",
        "validity": "granted only with a majority and validity > 0",
        "rollback": "compare-and-delete on every master after each refused attempt",
        "extend": "compare-and-pexpire to the new ttl, majority; no validity check; never re-creates a key",
        "keys": "the resource is the key",
    }

    def __init__(self, masters: list[tuple[str, int]], given: Given) -> None:
        super().__init__(masters, given)
        self.module = importlib.import_module("redlock")
        urls = [f"redis://{host}:{port}/0" for host, port in masters]
        config = (
            urls
            if given.request_timeout is None
            else self.module.RedlockConfig(masters=urls, socket_timeout=given.request_timeout)
        )
        pauses = given.jittered()
        delays = {} if pauses is None else {"retry_delay_min": pauses[0], "retry_delay_max": pauses[1]}
        self.manager = self.module.Redlock(config, retry_count=0, **delays)
        low, high = self.manager.retry_delay_min, self.manager.retry_delay_max
        self.settings = {
            "request_timeout": f"socket_timeout {_seconds(self.manager.client.config.socket_timeout)}, "
            "masters one after another" + (" (its default)" if given.request_timeout is None else ""),
            "retry_delay": f"retry_delay_min/max: uniform in {low:g}-{high:g} s"
            + (" (its default)" if not delays else ""),
        }

    def acquire(self, name: str, ttl_ms: int, blocking: bool, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout_s if blocking else 0.0)
        got = until(
            deadline,
            lambda: self.manager.acquire(name, int(ttl_ms)),
            lambda: random.uniform(self.manager.retry_delay_min, self.manager.retry_delay_max),
        )
        if got is None:
            raise Refused("not acquired")
        self.held[name] = got
        return {"token": got.value, "validity_ms": got.validity}

    def release(self, name: str) -> dict[str, Any]:
        self.manager.release(self.held.pop(name))
        return {}

    def extend(self, name: str, ttl_ms: int) -> dict[str, Any]:
        if not self.manager.extend(self._take(name), int(ttl_ms)):
            raise Refused("not extended")
        return {}

    def close(self) -> None:
        for instance in self.manager.client.instances:
            instance.close()


class BrokenRedlockNg(RedlockNg):
    """redlock-ng with its quorum lowered to one master: the self-test of the trials.

    Everything else is redlock-ng's own code; only ``client.quorum`` (client.py:21, read by
    acquire at lock.py:67 and by extend at lock.py:112) is set to 1, so an acquire is granted
    by ANY one master that said OK (validity is still checked). Two contenders that split the
    masters both hold the lock, and so does a contender that finds a minority of masters that
    forgot the holder's key. A comparison of clients must rate it worse than redlock-ng.
    """

    client = "broken:redlock-ng"
    wraps = "redlock-ng"
    claims = {  # noqa: RUF012
        **RedlockNg.claims,
        "validity": "BROKEN ON PURPOSE: granted by any ONE master (quorum 1) with validity > 0",
        "extend": "compare-and-pexpire to the new ttl, counted with ONE master; never re-creates a key",
    }

    def __init__(self, masters: list[tuple[str, int]], given: Given) -> None:
        super().__init__(masters, given)
        self.manager.client.quorum = 1


ADAPTERS: dict[str, type[Adapter]] = {
    adapter.client: adapter for adapter in (RedlockQuorum, Pottery, RedlockPy, Aioredlock, RedlockNg, BrokenRedlockNg)
}


class Resource:
    """The counter of ``incr``: GET and SET on one server over a plain socket (RESP), the
    same for every Python client, so that the counter is not another thing being compared."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10.0)
        self.reader = self.sock.makefile("rb")

    def command(self, *args: str) -> bytes | None:
        encoded = [arg.encode() for arg in args]
        self.sock.sendall(
            b"".join([f"*{len(encoded)}\r\n".encode(), *(b"$%d\r\n%s\r\n" % (len(a), a) for a in encoded)])
        )
        line = self.reader.readline()
        if line[:1] == b"$":
            size = int(line[1:])
            return None if size < 0 else self.reader.read(size + 2)[:-2]
        if line[:1] == b"-":
            raise RuntimeError(line[1:].strip().decode())
        return line[1:].strip()

    def get(self, key: str) -> int:
        return int(self.command("GET", key) or b"0")

    def write(self, key: str, value: int) -> int:
        """SET ``key`` to ``value``; the sequence number of this write on the server."""
        return int(self.command("EVAL", WRITE_SCRIPT, "2", key, f"{key}:seq", str(value)) or b"0")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def with_deadline(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with ``deadline_ns``, the moment on this worker's clock until which the
    client says the lock holds, where the client tells its validity."""
    validity = answer.get("validity_ms")
    if validity is None:
        return answer
    return {**answer, "deadline_ns": now() + int(float(validity) * 1e6)}


def stop_self() -> dict[str, int]:
    """SIGSTOP this process (a holder paused at a chosen step); once someone continued it,
    when it stopped and when it went on."""
    stopped = now()
    os.kill(os.getpid(), signal.SIGSTOP)
    return {"stopped_ns": stopped, "continued_ns": now()}


class Worker:
    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.resources: dict[str, Resource] = {}

    def greeting(self) -> dict[str, Any]:
        return {
            "hello": self.adapter.client,
            "version": self.adapter.version(),
            "language": "python",
            "supports": [*self.adapter.supports, "read", "write"],
            "claims": self.adapter.claims,
            "clock": "CLOCK_MONOTONIC ns",
            "key_prefix": self.adapter.key_prefix,
            "wraps": self.adapter.wraps,
            "settings": self.adapter.settings,
        }

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        stop = request.get("stop")
        if stop is not None and stop not in STOPS:
            raise ValueError(f"stop must be one of {list(STOPS)}, not {stop!r}")
        op = request.get("op")
        stopped: dict[str, int] = {}
        if stop == "before" and op != "write":
            stopped = stop_self()
        answer = self.step(op, request)
        if stop == "after":
            stopped = stop_self()
        return {**answer, **stopped}

    def step(self, op: Any, request: dict[str, Any]) -> dict[str, Any]:
        if op == "acquire":
            return with_deadline(
                self.adapter.acquire(
                    request["name"],
                    int(request["ttl_ms"]),
                    bool(request.get("blocking", False)),
                    float(request.get("timeout_s", 10.0)),
                )
            )
        if op == "release":
            return self.adapter.release(request["name"])
        if op == "extend":
            return with_deadline(self.adapter.extend(request["name"], int(request["ttl_ms"])))
        if op == "incr":
            return self.incr(request)
        if op == "read":
            return {"value": self.resource(request["resource"]).get(request["counter"])}
        if op == "write":
            return self.write(request)
        raise ValueError(f"unknown op {op!r}; the ops are {list(OPS)}")

    def resource(self, address: str) -> Resource:
        if address not in self.resources:
            self.resources[address] = Resource(address)
        return self.resources[address]

    def write(self, request: dict[str, Any]) -> dict[str, Any]:
        """SET the counter to ``value`` if ``until_ns`` (the caller's deadline) has not
        passed: a careful holder checks its lock before it writes, and a ``stop`` of
        "before" falls between that check and the write (the stale write of a paused holder)."""
        until_ns = request.get("until_ns")
        if until_ns is not None and now() >= int(until_ns):
            return {"written": False}
        stopped = stop_self() if request.get("stop") == "before" else {}
        seq = self.resource(request["resource"]).write(request["counter"], int(request["value"]))
        return {"written": True, "seq": seq, **stopped}

    def incr(self, request: dict[str, Any]) -> dict[str, Any]:
        """Acquire (blocking), GET the counter, pause, SET it one higher, release: a lost
        update shows in the final count."""
        name = request["name"]
        counter = self.resource(request["resource"])
        granted = self.adapter.acquire(name, int(request["ttl_ms"]), True, float(request.get("timeout_s", 30.0)))
        acquired = now()
        read = counter.command("GET", request["counter"])
        time.sleep(float(request.get("hold_ms", 1.0)) / 1000)
        value = int(read or b"0") + 1
        counter.command("SET", request["counter"], str(value))
        releasing = now()
        self.adapter.release(name)
        return {"token": granted.get("token"), "value": value, "acquired_ns": acquired, "releasing_ns": releasing}

    def serve(self, lines: Any, out: Any) -> None:
        out.write(json.dumps(self.greeting()) + "\n")
        out.flush()
        for line in lines:
            if not line.strip():
                continue
            started = now()
            request: dict[str, Any] = {}
            answer: dict[str, Any]
            try:
                parsed = json.loads(line)
                if not isinstance(parsed, dict):
                    raise ValueError("a request is a JSON object")
                request = parsed
                answer = {"ok": True} if request.get("op") == "quit" else {"ok": True, **self.handle(request)}
            except Refused as refused:
                answer = {"ok": False, "refused": True, "error": str(refused)}
            except Exception as exc:
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=4)}
            answer.update(t0=started, t1=now())
            if "id" in request:
                answer["id"] = request["id"]
            out.write(json.dumps(answer) + "\n")
            out.flush()
            if request.get("op") == "quit":
                break


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--client", required=True, choices=sorted(ADAPTERS))
    parser.add_argument("--masters", required=True, help="HOST:PORT,HOST:PORT,...")
    parser.add_argument("--path", action="append", default=[], help="put DIR first on sys.path (repeatable)")
    parser.add_argument("--request-timeout-ms", type=_positive, default=None, help="bound on each request to a master")
    parser.add_argument("--retry-delay-ms", type=_positive, default=None, help="mean pause between attempts")
    args = parser.parse_args(argv)
    # A hung worker says where, on stderr, when sent SIGUSR1 (the harness reads it then).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    for directory in reversed(args.path):
        sys.path.insert(0, directory)
    masters = []
    for address in args.masters.split(","):
        host, _, port = address.rpartition(":")
        masters.append((host, int(port)))
    adapter = ADAPTERS[args.client](masters, Given(args.request_timeout_ms, args.retry_delay_ms))
    try:
        Worker(adapter).serve(sys.stdin, sys.stdout)
    finally:
        adapter.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
