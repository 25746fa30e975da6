"""What a chaos client does: lock operations and a non-atomic read-modify-write, recorded.

A :class:`ClientSession` is one client: a :class:`redlock.Redlock` on the masters (through
its own proxies when the scenario has any), a :class:`Resource` on a redis-server that no
fault touches, and a :class:`~chaos.history.Recorder` that writes every operation with
stamps of the machine's CLOCK_MONOTONIC (read past libfaketime in a client whose clocks it
fakes: :func:`chaos.clock.history_clock`). The times a scenario hands a session (``at``,
``until``, ``release_at``) are on that clock too, so the session reads ``recorder.now()``,
never its own ``time.monotonic()``. Scenario scripts drive it one step at a time through the
worker protocol (:mod:`chaos.worker`); :meth:`ClientSession.loop` is the free-running
workload, several of which contend for a few names.

The protected resource is a counter per lock name, incremented by a deliberately
non-atomic read, then write of ``read + 1``. If two clients ever do that at once, one
increment is lost, which :func:`chaos.checkers.check_lost_updates` finds. With fencing on,
the write goes through :class:`redlock.fencing.FencedStore`, which rejects a holder whose
token is older than one it has already accepted.

With ``threads`` in its :class:`LoopSpec`, one client process runs that many threads that
share one Lock object per name (as the threads of a service would), each recorded as its
own client, ``c1/t2``: the checkers then judge the threads of a process like any other
holders, and sharing must keep them apart as it keeps processes apart.

A careful client checks that its lock is still valid before it writes, and so does this
one. The check and the write are two steps, and a process can be paused between them
(``pause="before"`` on a write): the classic stale-holder write that only fencing stops.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import redlock
from redlock.fencing import FencedStore

from .history import ExtendInvoked, ExtendReturned, Recorder, master_label, voters_of

__all__ = [
    "RESOURCE_PREFIX",
    "ClientSession",
    "ElectSpec",
    "LoopSpec",
    "Pause",
    "Resource",
    "direct_client",
    "resource_key",
]

RESOURCE_PREFIX = "chaos:resource:"

#: Where a client stops itself (SIGSTOP) around one of its steps.
Pause = Literal["before", "after"] | None


def resource_key(name: str) -> str:
    """The key of the counter that lock ``name`` protects."""
    return f"{RESOURCE_PREFIX}{name}"


def direct_client(url: str, timeout: float = 2.0, *, db: int = 0) -> redis.Redis:
    """A redis-py client with explicit timeouts and no retries (redis-py 8 retries 10 times
    by default, which would hide what a fault did)."""
    return redis.Redis.from_url(
        url, db=db, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )


class Resource:
    """The protected counters, one per lock name, on a server outside the faults.

    An unfenced write is ``SET`` plus ``INCR`` of a sequence key in one transaction, so the
    history knows the order in which the server applied writes. A fenced write goes through
    :class:`FencedStore` (which reports no order; event times stand in for it).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def read(self, name: str) -> int:
        raw = cast(bytes | None, self.client.get(resource_key(name)))
        return 0 if raw is None else int(raw)

    def write(self, name: str, value: int, fencing: int | None) -> tuple[bool, int | None]:
        """Write ``value``; returns (accepted, sequence number or None)."""
        key = resource_key(name)
        if fencing is not None:
            return FencedStore(self.client, key).write(value, fencing), None
        with self.client.pipeline(transaction=True) as pipe:
            pipe.set(key, value)
            pipe.incr(f"{key}:seq")
            _, seq = pipe.execute()
        return True, int(seq)


@dataclass(frozen=True)
class LoopSpec:
    """A free-running workload: until ``until`` (monotonic), pick a name, acquire, do the
    read-modify-write (holding the lock ``hold`` seconds between read and write, sometimes
    extending it), release, think, repeat.

    ``hold_share``, when given, replaces ``hold``: the holder works for that share of the
    validity it has left, so that holders often still hold near their deadline (where a
    master that expires early, or a pause, hurts). ``check_first`` checks the validity
    before the work instead of just before the write: a pause during the work then makes
    a stale write (K1).
    """

    names: tuple[str, ...]
    until: float
    ttl: float
    blocking: bool = True
    acquire_timeout: float = 0.5
    hold: tuple[float, float] = (0.005, 0.03)
    think: tuple[float, float] = (0.0, 0.02)
    extend_share: float = 0.2
    #: A semaphore of this many permits on each name instead of a lock (0: a lock). Its
    #: holders do no read-modify-write: sharing is what a semaphore is for.
    limit: int = 0
    #: Overrides the semaphore's quorum (0: its own); the self-test's plain majority.
    quorum: int = 0
    #: Lock this many of ``names`` at once in one multi-name lock (0: one name).
    together: int = 0
    hold_share: tuple[float, float] | None = None
    check_first: bool = False
    #: Run this many threads sharing one Lock object per name (0: one thread, own Locks).
    threads: int = 0
    #: Shared Locks are reentrant, and each holder acquires twice more inside its
    #: critical section (released again before its write).
    reentrant: bool = False
    #: A read-write lock on each name instead of a lock: each holding is a reader with
    #: probability ``read_share`` (it holds, and reads the counter), else the writer (it
    #: does the read-modify-write).
    rwlock: bool = False
    read_share: float = 0.7

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopSpec:
        return cls(
            names=tuple(data["names"]),
            until=float(data["until"]),
            ttl=float(data["ttl"]),
            blocking=bool(data.get("blocking", True)),
            acquire_timeout=float(data.get("acquire_timeout", 0.5)),
            hold=_pair(data.get("hold", (0.005, 0.03))),
            think=_pair(data.get("think", (0.0, 0.02))),
            extend_share=float(data.get("extend_share", 0.2)),
            limit=int(data.get("limit", 0)),
            quorum=int(data.get("quorum", 0)),
            together=int(data.get("together", 0)),
            hold_share=None if data.get("hold_share") is None else _pair(data["hold_share"]),
            check_first=bool(data.get("check_first", False)),
            threads=int(data.get("threads", 0)),
            reentrant=bool(data.get("reentrant", False)),
            rwlock=bool(data.get("rwlock", False)),
            read_share=float(data.get("read_share", 0.7)),
        )


@dataclass(frozen=True)
class ElectSpec:
    """A campaigner: until ``until`` (monotonic), campaign for ``name``; once leader, work
    as leader for a while (a step every ``step`` seconds: the read-modify-write of the
    name's counter, fenced by the term), resign, think, campaign again.

    Each leadership is recorded as a lock holding, so that the lock's checkers judge the
    election: the campaign as the acquire (its term as the fencing token), each deadline
    that auto-extension moved as an extend, the resign as the release. Mutual exclusion is
    then "at most one leader at any moment", fencing order "terms strictly increase".
    """

    name: str
    until: float
    ttl: float
    lead: tuple[float, float] = (0.3, 0.8)
    think: tuple[float, float] = (0.0, 0.1)
    step: float = 0.05

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ElectSpec:
        return cls(
            name=str(data["name"]),
            until=float(data["until"]),
            ttl=float(data["ttl"]),
            lead=_pair(data.get("lead", (0.3, 0.8))),
            think=_pair(data.get("think", (0.0, 0.1))),
            step=float(data.get("step", 0.05)),
        )


def _pair(value: Sequence[float]) -> tuple[float, float]:
    low, high = value
    return float(low), float(high)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class ClientSession:
    """One client of a run: its Redlock, its view of the resource, and its recorder.

    Every method records what it did and returns a JSON-ready dict. ``pause`` stops this
    very process with SIGSTOP before or after the step (recorded as a ``client-pause``
    fault that this process ends itself once continued); whoever runs the scenario sends
    the SIGCONT. ``timeline`` maps a deadline of the lock's clock to the recorder's (they
    differ only for a client whose clock the harness fakes). ``shared`` are Lock objects,
    by name, that this session uses instead of making its own: the threads of one process
    share them (:meth:`loop` with ``threads``).
    """

    def __init__(
        self,
        client: str,
        rl: redlock.Redlock,
        resource: Resource,
        recorder: Recorder,
        *,
        fencing: bool = False,
        seed: int = 0,
        timeline: Callable[[float], float] | None = None,
        shared: dict[str, redlock.Lock] | None = None,
    ) -> None:
        self.client = client
        self.timeline = timeline or (lambda reading: reading)
        self.rl = rl
        self.resource = resource
        self.recorder = recorder
        self.fencing = fencing
        self.rng = random.Random(seed)
        self.shared = shared or {}
        #: The library's name of each master -> its label in histories (A, B, ...).
        self.labels = {name: master_label(i) for i, name in enumerate(rl.master_names)}
        self.locks: dict[str, redlock.Lock] = {}
        # name -> (value read, fencing token it was read under)
        self.reads: dict[str, tuple[int, int | None]] = {}

    # -- pauses --

    def stop_self(self, where: str) -> None:
        """SIGSTOP this process; returns once someone sent SIGCONT."""
        fault = self.recorder.fault_begin("client-pause", self.client, f"SIGSTOP {where}")
        os.kill(os.getpid(), signal.SIGSTOP)
        self.recorder.fault_end(fault)

    # -- steps --

    def acquire(
        self,
        name: str,
        ttl: float,
        *,
        blocking: bool = True,
        timeout: float | None = None,
        at: float | None = None,
        lock_delay: float = 0.0,
        also: Sequence[str] = (),
        limit: int = 0,
        quorum: int = 0,
        auto_extend: bool = False,
        mode: str = "",
        in_line: bool = False,
    ) -> dict[str, Any]:
        """Acquire ``name`` (with ``also``: one lock on all those names; with ``limit``: a
        permit of a semaphore; with ``auto_extend``: renewed by the library until released,
        see :meth:`renewal`; with ``mode``, "read" or "write": that side of the read-write
        lock on ``name``). A lock on several names is recorded as one holding per name, so
        that the per-name checkers judge it like any other lock on that name. ``in_line``:
        with a Lock object of its own, behind one this session holds (see :meth:`hand_over`),
        which stays the session's Lock of the name unless this one gets it."""
        if at is not None:
            time.sleep(max(0.0, at - self.recorder.now()))
        lock = (None if in_line else self.shared.get(name)) or self._new_lock(
            name,
            ttl,
            also,
            limit=limit,
            quorum=quorum,
            lock_delay=lock_delay,
            auto_extend=auto_extend,
            mode=mode,
        )
        if not in_line:
            self.locks.update(dict.fromkeys(lock.names, lock))
        ops = [self.recorder.acquire_invoked(self.client, each, ttl=ttl, blocking=blocking) for each in lock.names]
        recorded: dict[str, Any] = {"limit": limit or None, "mode": mode or None}
        try:
            ok = lock.acquire(blocking=blocking, timeout=timeout if blocking else None)
        except redlock.RedlockError as exc:
            self._acquire_returned(lock, ops, ok=False, error=_describe(exc), **recorded)
            return {"ok": False, "error": _describe(exc)}
        if not ok:
            self._acquire_returned(lock, ops, ok=False, **recorded)
            return {"ok": False, "error": None}
        # This thread owns the Lock now (a shared one too), so its token is this holding's:
        # each local holder acquires on the masters afresh, under a new token.
        self.locks.update(dict.fromkeys(lock.names, lock))
        deadline = self._deadline(lock)
        voters = voters_of(lock.outcomes, self.labels)
        self._acquire_returned(
            lock,
            ops,
            ok=True,
            token=lock.token,
            deadline=deadline,
            fencing=lock.fencing_token,
            voters=voters,
            **recorded,
        )
        return {"ok": True, "deadline": deadline, "fencing": lock.fencing_token, "token": lock.token}

    def _new_lock(
        self,
        name: str,
        ttl: float,
        also: Sequence[str],
        *,
        limit: int,
        quorum: int,
        lock_delay: float,
        auto_extend: bool = False,
        mode: str = "",
    ) -> redlock.Lock:
        lock: redlock.Lock
        if mode:
            rw = self.rl.rwlock(name, ttl, lock_delay=lock_delay, auto_extend=auto_extend)
            lock = rw.read() if mode == "read" else rw.write()
        elif limit:
            lock = self.rl.semaphore(name, limit, ttl)
        elif also:
            lock = self.rl.lock([name, *also], ttl, lock_delay=lock_delay)
        else:
            lock = self.rl.lock(name, ttl, fencing=self.fencing, lock_delay=lock_delay, auto_extend=auto_extend)
        if quorum:
            # The self-test's broken client: too few votes for what it asks (the harness
            # reaches into the spec on purpose; no public option may make a lock unsafe).
            lock._spec = dataclasses.replace(lock._spec, forced_quorum=quorum)
        return lock

    def _acquire_returned(self, lock: redlock.Lock, ops: Sequence[int], **fields: Any) -> None:
        for each, op in zip(lock.names, ops, strict=True):
            self.recorder.acquire_returned(self.client, each, op, **fields)

    def read(self, name: str) -> dict[str, Any]:
        lock = self.locks.get(name)
        fencing = lock.fencing_token if lock is not None else None
        value = self.resource.read(name)
        self.recorder.resource_read(self.client, name, resource_key(name), value, fencing=fencing)
        self.reads[name] = (value, fencing)
        return {"value": value}

    def write(
        self, name: str, *, pause: Pause = None, check: bool = True, fenced: bool | None = None
    ) -> dict[str, Any]:
        """Write the value read last, plus one, if the lock is still valid (``check``);
        fenced by the token it was read under if the session fences (or ``fenced``)."""
        if name not in self.reads:
            raise RuntimeError(f"{self.client}: write of {name!r} without a read first")
        lock = self.locks.get(name)
        if check and (lock is None or not lock.locked()):
            # A careful client stops here: its lock ran out while it worked.
            self.reads.pop(name)
            return {"written": False, "reason": "the lock is no longer valid"}
        if pause == "before":
            self.stop_self("between the validity check and the write")
        read_value, fencing = self.reads.pop(name)
        value = read_value + 1
        use = self.fencing if fenced is None else fenced
        accepted, seq = self.resource.write(name, value, fencing if use else None)
        self.recorder.resource_write(
            self.client,
            name,
            resource_key(name),
            value,
            read_value=read_value,
            fencing=fencing if use else None,
            accepted=accepted,
            seq=seq,
        )
        return {"written": True, "accepted": accepted, "value": value}

    def extend(self, name: str, ttl: float | None = None) -> dict[str, Any]:
        lock = self._lock(name)
        seconds = ttl if ttl is not None else lock.ttl
        ops = [self.recorder.extend_invoked(self.client, each, token=lock.token, ttl=seconds) for each in lock.names]
        try:
            lock.extend(ttl)
        except redlock.RedlockError as exc:
            for each, op in zip(lock.names, ops, strict=True):
                self.recorder.extend_returned(self.client, each, op, ok=False, error=_describe(exc))
            return {"ok": False, "error": _describe(exc), "lost": lock.lost}
        deadline = self._deadline(lock)
        voters = voters_of(lock.outcomes, self.labels)
        for each, op in zip(lock.names, ops, strict=True):
            self.recorder.extend_returned(self.client, each, op, ok=True, deadline=deadline, voters=voters)
        return {"ok": True, "deadline": deadline}

    def renewal(self, name: str) -> dict[str, Any]:
        """What the renewer of an auto-extended lock has given it so far, recorded as an
        extend: the holder relies on the lock until its current deadline, so the checkers
        must judge it until then. (The renewer's own extends are not recorded one by one:
        the deadline read here was set by one that began before this step, so it never
        exceeds what the validity checker allows an extend invoked now.)"""
        lock = self._lock(name)
        # Read before the invocation is stamped: the renewer may finish an extend at any
        # moment, and one that began after the stamp would give a deadline later than the
        # stamp allows (seen on a loaded machine: 1.8 ms past the validity bound).
        held = lock.locked()
        deadline = self._deadline(lock) if held else None
        ops = [self.recorder.extend_invoked(self.client, each, token=lock.token, ttl=lock.ttl) for each in lock.names]
        for each, op in zip(lock.names, ops, strict=True):
            error = None if held else ("lost" if lock.lost else "not held")
            self.recorder.extend_returned(self.client, each, op, ok=held, deadline=deadline, error=error)
        return {"held": held, "lost": lock.lost, "deadline": deadline, "token": lock.token}

    def release(self, name: str) -> dict[str, Any]:
        lock = self._lock(name)
        ops = [self.recorder.release_invoked(self.client, each, token=lock.token) for each in lock.names]
        try:
            lock.release()
        except redlock.RedlockError as exc:
            for each, op in zip(lock.names, ops, strict=True):
                self.recorder.release_returned(self.client, each, op, ok=False, error=_describe(exc))
            return {"ok": False, "error": _describe(exc)}
        for each, op in zip(lock.names, ops, strict=True):
            self.recorder.release_returned(self.client, each, op, ok=True)
        return {"ok": True}

    def hand_over(self, name: str, ttl: float, *, release_at: float, timeout: float) -> dict[str, Any]:
        """The lock ``name`` this session holds goes to a second Lock of this process that
        waits in line for it: the waiter starts at once (a blocking acquire of ``timeout``),
        the holder releases at ``release_at`` (monotonic), which hands the lock over in one
        round where the library does (docs/algorithm.md, "Handing a lock over"). Returns
        both outcomes; the waiter is the session's Lock of the name if it got it."""
        handed: dict[str, Any] = {}
        waiter = threading.Thread(
            target=lambda: handed.update(self.acquire(name, ttl, blocking=True, timeout=timeout, in_line=True)),
            name=f"{self.client}-in-line",
        )
        holder = self._lock(name)  # (the waiter replaces it in self.locks only once it holds)
        waiter.start()
        time.sleep(max(0.0, release_at - self.recorder.now()))
        self.locks[name] = holder
        released = self.release(name)
        waiter.join(timeout + 30.0)
        return {"released": released, "handed": handed}

    def cycle(self, name: str, ttl: float, *, at: float | None = None, timeout: float = 5.0) -> dict[str, Any]:
        """One blocking acquire (starting at ``at``), read-modify-write, release."""
        got = self.acquire(name, ttl, blocking=True, timeout=timeout, at=at)
        if got["ok"]:
            self.read(name)
            self.write(name)
            self.release(name)
        return got

    def _deadline(self, lock: redlock.Lock) -> float | None:
        return None if lock.deadline is None else self.timeline(lock.deadline)

    def _lock(self, name: str) -> redlock.Lock:
        lock = self.locks.get(name)
        if lock is None:
            raise RuntimeError(f"{self.client}: no lock object for {name!r}; acquire it first")
        return lock

    # -- the free-running workload --

    def _hold(self, spec: LoopSpec, deadline: float | None) -> float:
        if spec.hold_share is None:
            return self.rng.uniform(*spec.hold)
        if deadline is None:  # (a broken client of the self-test may hold without one)
            return 0.0
        return max(0.0, deadline - self.recorder.now()) * self.rng.uniform(*spec.hold_share)

    def nest(self, name: str, depth: int = 2) -> bool:
        """Acquire the reentrant lock ``name``, which this thread holds, ``depth`` times more,
        then release as many. Each is only counted in the Lock, with no traffic and no new
        holding, so none is recorded; True if the hold count and the token said so at every
        step (a nested release that let the masters go would drop the token)."""
        lock = self._lock(name)
        token, taken = lock.token, 0
        held = [lock.hold_count]
        try:
            for _ in range(depth):
                if not lock.acquire(blocking=False):
                    break
                taken += 1
                held.append(lock.hold_count)
            for _ in range(taken):
                lock.release()
                held.append(lock.hold_count)
        except redlock.RedlockError:
            # A Lock that let the masters go too early finds nothing to release later.
            return False
        counted = held == [1, *range(2, depth + 2), *range(depth, 0, -1)]
        return counted and lock.token == token

    def loop(self, spec: LoopSpec) -> dict[str, Any]:
        """Contend for ``spec.names`` until ``spec.until``; returns counts."""
        if spec.threads:
            return self._threads(spec)
        acquired = failed = writes = nested = miscounted = 0
        while self.recorder.now() < spec.until:
            # Several names in a random order: the lock sorts them, or overlapping sets
            # taken in different orders could deadlock.
            names = self.rng.sample(spec.names, spec.together) if spec.together else [self.rng.choice(spec.names)]
            name = names[0]
            left = spec.until - self.recorder.now()
            if left <= 0:
                break
            mode = "" if not spec.rwlock else "read" if self.rng.random() < spec.read_share else "write"
            got = self.acquire(
                name,
                spec.ttl,
                blocking=spec.blocking,
                timeout=min(spec.acquire_timeout, left) if spec.blocking else None,
                also=names[1:],
                limit=spec.limit,
                quorum=spec.quorum,
                mode=mode,
            )
            if got["ok"]:
                acquired += 1
                # A semaphore's holders and a read-write lock's readers share the resource by
                # design: no counter to protect (a reader only reads it).
                counters = [] if spec.limit or mode == "read" else names
                if mode == "read":
                    self.read(name)
                for each in counters:
                    self.read(each)
                valid = not spec.check_first or self._lock(name).locked()
                if spec.reentrant:
                    nested += 1
                    miscounted += not self.nest(name)
                time.sleep(self._hold(spec, got["deadline"]))
                if self.rng.random() < spec.extend_share:
                    self.extend(name)
                for each in counters if valid else []:
                    if self.write(each, check=not spec.check_first)["written"]:
                        writes += 1
                self.release(name)
            else:
                failed += 1
                if got["error"] is not None:
                    # Unreachable quorum: no point retrying in a hot loop.
                    time.sleep(self.rng.uniform(0.02, 0.06))
            time.sleep(self.rng.uniform(*spec.think))
        return {"acquired": acquired, "failed": failed, "writes": writes, "nested": nested, "miscounted": miscounted}

    def _threads(self, spec: LoopSpec) -> dict[str, Any]:
        """:meth:`loop` on ``spec.threads`` threads, each its own client (``c1/t1``, ...),
        sharing one Lock object per name; returns the counts summed over them, and each
        thread's under ``threads``."""
        if spec.together or spec.limit:
            raise ValueError("threads share Locks on one name: no multi-name lock, no semaphore")
        shared = {
            name: self.rl.lock(name, spec.ttl, fencing=self.fencing, reentrant=spec.reentrant) for name in spec.names
        }
        lanes = [
            ClientSession(
                f"{self.client}/t{number}",
                self.rl,
                self.resource,
                self.recorder,
                fencing=self.fencing,
                seed=self.rng.getrandbits(32),
                timeline=self.timeline,
                shared=shared,
            )
            for number in range(1, spec.threads + 1)
        ]
        alone = dataclasses.replace(spec, threads=0)
        results: dict[str, dict[str, Any]] = {}
        failures: list[BaseException] = []

        def run(lane: ClientSession) -> None:
            try:
                results[lane.client] = lane.loop(alone)
            except BaseException as exc:  # re-raised below, in the thread that answers
                failures.append(exc)

        threads = [threading.Thread(target=run, args=(lane,), name=lane.client) for lane in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        totals: dict[str, Any] = {key: sum(r[key] for r in results.values()) for key in next(iter(results.values()))}
        totals["threads"] = results
        return totals

    # -- leader election --

    def elect(self, spec: ElectSpec) -> dict[str, Any]:
        """Campaign, lead, resign, until ``spec.until``; returns counts (see :class:`ElectSpec`)."""
        election = self.rl.election(spec.name, spec.ttl, identity=self.client)
        self.locks[spec.name] = election.lock
        won = lost = steps = 0
        while self.recorder.now() < spec.until:
            op = self.recorder.acquire_invoked(self.client, spec.name, ttl=spec.ttl)
            try:
                leads = election.campaign(timeout=max(0.0, spec.until - self.recorder.now()))
            except redlock.RedlockError as exc:
                self.recorder.acquire_returned(self.client, spec.name, op, ok=False, error=_describe(exc))
                time.sleep(self.rng.uniform(0.02, 0.06))
                continue
            if not leads:
                self.recorder.acquire_returned(self.client, spec.name, op, ok=False)
                continue
            lock = election.lock
            self.recorder.acquire_returned(
                self.client,
                spec.name,
                op,
                ok=True,
                token=lock.token,
                deadline=self._deadline(lock),
                fencing=election.term,
                voters=voters_of(lock.outcomes, self.labels),
            )
            won += 1
            steps += self._lead(spec, election.lock, self._deadline(lock))
            op = self.recorder.release_invoked(self.client, spec.name, token=lock.token)
            try:
                election.resign()
            except redlock.RedlockError as exc:
                lost += 1
                self.recorder.release_returned(self.client, spec.name, op, ok=False, error=_describe(exc))
            else:
                self.recorder.release_returned(self.client, spec.name, op, ok=True)
            time.sleep(self.rng.uniform(*spec.think))
        return {"won": won, "lost": lost, "steps": steps}

    def run_election(self, spec: ElectSpec) -> dict[str, Any]:
        """``election.run()`` until ``spec.until`` (then ``stop()``); returns counts.

        Recorded as :meth:`elect` records, with the runner deciding: ``on_elected(term)``
        is the acquire (and starts the leader's steps in a thread, which record each move
        of the deadline as an extend), ``on_lost()`` is the release (after the steps
        stopped). So the checkers judge what the runner believed: a leadership runs from
        ``on_elected`` to the earlier of ``on_lost`` and the deadline; its term is the
        fencing token.
        """
        election = self.rl.election(spec.name, spec.ttl, identity=self.client)
        self.locks[spec.name] = election.lock
        counts = {"won": 0, "ended": 0, "steps": 0, "seen": 0}
        working: list[tuple[threading.Thread, threading.Event]] = []

        def on_elected(term: int) -> None:
            lock = election.lock
            op = self.recorder.acquire_invoked(self.client, spec.name, ttl=spec.ttl)
            self.recorder.acquire_returned(
                self.client, spec.name, op, ok=True, token=lock.token, deadline=self._deadline(lock), fencing=term
            )
            counts["won"] += 1
            stop = threading.Event()

            def lead() -> None:
                counts["steps"] += self._lead(spec, lock, self._deadline(lock), stop)

            working.append((threading.Thread(target=lead, name=f"{self.client}-leads", daemon=True), stop))
            working[-1][0].start()

        def on_lost() -> None:
            thread, stop = working.pop()
            stop.set()
            thread.join()
            op = self.recorder.release_invoked(self.client, spec.name, token=election.lock.token)
            self.recorder.release_returned(self.client, spec.name, op, ok=True)
            counts["ended"] += 1

        def on_new_leader(leader: str | None) -> None:
            counts["seen"] += 1

        timer = threading.Timer(max(0.0, spec.until - self.recorder.now()), election.stop)
        timer.start()
        try:
            election.run(on_elected=on_elected, on_lost=on_lost, on_new_leader=on_new_leader)
        finally:
            timer.cancel()
        return counts

    def _lead(
        self, spec: ElectSpec, lock: redlock.Lock, recorded: float | None, stop: threading.Event | None = None
    ) -> int:
        """Work as leader while leading, for a random while (until ``stop`` is set, if
        given); returns the steps done."""
        steps = 0
        stop_at = min(spec.until, self.recorder.now() + self.rng.uniform(*spec.lead)) if stop is None else math.inf
        while self.recorder.now() < stop_at and not (stop is not None and stop.is_set()):
            # The time is read before the deadline: "at `now` the leader relied on it until
            # `deadline`" is then never a claim made after the deadline passed (a pause
            # between the two reads only makes the claim early, and true).
            now = self.recorder.now()
            deadline = self._deadline(lock)
            if deadline is None or deadline <= now:
                break  # not leader any more: lost, or the validity ran out
            if deadline != recorded:
                # Auto-extension moved the deadline: the leader relies on the new one.
                op = self.recorder.next_op()
                self.recorder.record(
                    ExtendInvoked(time=now, client=self.client, name=spec.name, op=op, token=lock.token, ttl=spec.ttl)
                )
                self.recorder.record(
                    ExtendReturned(time=now, client=self.client, name=spec.name, op=op, ok=True, deadline=deadline)
                )
                recorded = deadline
            if stop is None:
                self.read(spec.name)
                self.write(spec.name, fenced=True)
                time.sleep(spec.step)
            else:
                # A runner's steps write nothing: scenario 27 kills a leader at any moment,
                # and one killed between a write and its record would leave an increment
                # the history cannot explain. Its leaderships are what is judged there.
                stop.wait(spec.step)
            steps += 1
        return steps
