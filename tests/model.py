"""Model masters, and the trampoline that drives a flow of the core: the pure tier's cluster.

The core's flows (:mod:`redlock._core`) never touch a socket or a clock: each yields a
request (a :class:`~redlock._core.Round` of commands for some masters, or a
:class:`~redlock._core.Pause`) and is sent back the time once it is answered. :func:`drive`
is the one loop that does that; what answers is the test's. :class:`ModelCluster` answers
from :class:`ModelMaster` s, which apply SET NX PX and every Lua script of
:mod:`redlock._scripts` the way a real master does, expiry included, so that the flows'
decisions (hold, roll back, retry, give up) can be checked over thousands of cases without a
server. A script the model does not know fails the test rather than answering something.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redlock import _core, _scripts
from redlock._core import Command, LockSpec, Pause, Request, Round, Tokens, acquire_flow
from redlock.exceptions import NodeStatus


def drive(flow: _core.Flow, answer: Callable[[Request], float]) -> _core.Result:
    """Run ``flow`` to its end and return its result.

    ``answer`` gets each request the flow yields: it records a round's replies (or lets a
    pause pass) and returns the time to send back, the time at which the flow goes on.
    """
    try:
        request = next(flow)
        while True:
            request = flow.send(answer(request))
    except StopIteration as stop:
        result: _core.Result = stop.value
        return result


Expiring = tuple[str, float]  # a value and the time it expires


@dataclass
class ModelMaster:
    """A master as far as the flows can tell: keys with expiry, the fencing counters, the
    extend-order marks of single-name locks, and the semaphores' sorted sets of permits."""

    #: False: down, its connections refused (the round records it UNREACHABLE); it keeps its
    #: data for when it is back, as a master with ``appendfsync always`` does.
    up: bool = True
    keys: dict[str, Expiring] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    #: The extend-order key: the token and number of the last extend applied, per lock.
    applied_extends: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: Each semaphore's permits: token -> the time it expires.
    permits: dict[str, dict[str, float]] = field(default_factory=dict)

    def apply(self, command: Command, now: float) -> object:
        self.keys = {k: v for k, v in self.keys.items() if v[1] > now}
        # The order key expires with its lock key (the script gives both the same ttl).
        self.applied_extends = {k: v for k, v in self.applied_extends.items() if k in self.keys}
        args = command.args
        if args[0] == "SET":
            return self.set_nx_px(str(args[1]), str(args[2]), int(args[5]), now)
        count = int(args[2])
        keys, argv = [str(k) for k in args[3 : 3 + count]], [str(a) for a in args[3 + count :]]
        script = _SCRIPTS.get(command.script)
        assert script is not None, f"the model masters do not know the script {command.script!r}"
        return script(self, keys, argv, now)

    def set_nx_px(self, key: str, token: str, ttl_ms: int, now: float) -> bytes | None:
        if key in self.keys:
            return None
        self.keys[key] = (token, now + ttl_ms / 1000)
        return b"OK"

    # -- the scripts, in the order of redlock/_scripts.py: KEYS and ARGV as their headers say --

    def release(self, keys: list[str], argv: list[str], now: float) -> object:
        if self.keys.get(keys[0], ("", 0.0))[0] != argv[0]:
            return 0
        del self.keys[keys[0]]
        self.applied_extends.pop(keys[0], None)
        return 1

    def extend(self, keys: list[str], argv: list[str], now: float) -> object:
        key, token, number = keys[0], argv[0], int(argv[2])
        if self.keys.get(key, ("", 0.0))[0] != token:
            return 0
        last = self.applied_extends.get(key)
        if last is not None and last[0] == token and last[1] >= number:
            return 1  # a newer extend of this holding was applied already
        self.applied_extends[key] = (token, number)
        self.keys[key] = (token, now + int(argv[1]) / 1000)
        return 1

    def fenced_acquire(self, keys: list[str], argv: list[str], now: float) -> object:
        if self.set_nx_px(keys[0], argv[0], int(argv[1]), now) is None:
            return 0
        return [1, self.counters.get(keys[1], 0)]

    def fence_raise(self, keys: list[str], argv: list[str], now: float) -> object:
        self.counters[keys[0]] = max(self.counters.get(keys[0], 0), int(argv[0]))
        return 1

    # Multi-name scripts: KEYS[1..n] the names, KEYS[n+1] the extend-order key (not modelled).

    def multi_acquire(self, keys: list[str], argv: list[str], now: float) -> object:
        names = keys[:-1]
        held = [i for i, name in enumerate(names, start=1) if name in self.keys]
        if held:
            return [0, held[0]]
        for name in names:
            self.keys[name] = (argv[0], now + int(argv[1]) / 1000)
        return 1

    def multi_release(self, keys: list[str], argv: list[str], now: float) -> object:
        names = keys[:-1]
        mine = [name for name in names if self.keys.get(name, ("",))[0] == argv[0]]
        for name in mine:
            del self.keys[name]
        return int(len(mine) == len(names))

    def multi_extend(self, keys: list[str], argv: list[str], now: float) -> object:
        names = keys[:-1]
        if any(self.keys.get(name, ("",))[0] != argv[0] for name in names):
            return 0
        for name in names:
            self.keys[name] = (argv[0], now + int(argv[1]) / 1000)
        return 1

    # Semaphore scripts: KEYS[1] the permits (by the master's own clock, here the model's).

    def _pool(self, key: str, now: float) -> dict[str, float]:
        pool = self.permits.setdefault(key, {})
        for expired in [t for t, expiry in pool.items() if expiry < now]:
            del pool[expired]
        return pool

    def semaphore_acquire(self, keys: list[str], argv: list[str], now: float) -> object:
        pool = self._pool(keys[0], now)
        if len(pool) >= int(argv[2]):
            return 0
        pool[argv[0]] = now + int(argv[1]) / 1000
        return 1

    def semaphore_release(self, keys: list[str], argv: list[str], now: float) -> object:
        return int(self._pool(keys[0], now).pop(argv[0], None) is not None)

    def semaphore_extend(self, keys: list[str], argv: list[str], now: float) -> object:
        pool = self._pool(keys[0], now)
        if argv[0] not in pool:
            return 0
        pool[argv[0]] = now + int(argv[1]) / 1000
        return 1


_SCRIPTS: dict[_scripts.Script | None, Callable[[ModelMaster, list[str], list[str], float], object]] = {
    _scripts.RELEASE: ModelMaster.release,
    _scripts.EXTEND: ModelMaster.extend,
    _scripts.RELEASE_AND_NOTIFY: ModelMaster.release,  # (the publish reaches nobody here)
    _scripts.FENCED_ACQUIRE: ModelMaster.fenced_acquire,
    _scripts.FENCE_RAISE: ModelMaster.fence_raise,
    _scripts.MULTI_ACQUIRE: ModelMaster.multi_acquire,
    _scripts.MULTI_RELEASE: ModelMaster.multi_release,
    _scripts.MULTI_EXTEND: ModelMaster.multi_extend,
    _scripts.SEMAPHORE_ACQUIRE: ModelMaster.semaphore_acquire,
    _scripts.SEMAPHORE_RELEASE: ModelMaster.semaphore_release,
    _scripts.SEMAPHORE_EXTEND: ModelMaster.semaphore_extend,
}


class ModelCluster:
    """Runs flows against model masters, on a clock of its own that starts at 1000.

    Each round takes ``round_time`` seconds and each pause its length. A master that is not
    ``up`` refuses its connections (UNREACHABLE); one outside ``reach`` is up but its reply
    never comes (TIMEOUT: a SET that timed out may still have landed, so rollbacks go to it).
    """

    def __init__(self, n: int, round_time: float = 0.001) -> None:
        self.masters = [ModelMaster() for _ in range(n)]
        self.now = 1000.0
        self.round_time = round_time
        self.reach: set[int] = set(range(n))
        self.rounds: list[Round] = []
        #: The pauses' lengths summed: how long the flows waited between their rounds.
        self.paused = 0.0

    def run(self, flow: _core.Flow) -> _core.Result:
        return drive(flow, self.answer)

    def answer(self, request: Request) -> float:
        """Answer one request of a flow (see :func:`drive`); the time after it."""
        self.before_request()
        if isinstance(request, Round):
            self.rounds.append(request)
            for node in request.targets:
                master = self.masters[node]
                if not master.up:
                    request.record(node, NodeStatus.UNREACHABLE)
                elif node not in self.reach:
                    request.record(node, NodeStatus.TIMEOUT)
                else:
                    request.record_reply(node, master.apply(request.command, self.now))
            self.now += self.round_time
        else:
            assert isinstance(request, Pause)
            assert request.seconds >= 0
            self.paused += request.seconds
            self.now += request.seconds
        return self.now

    def before_request(self) -> None:
        """A hook for faults that depend on time."""

    def spec(self, **changes: Any) -> LockSpec:
        """A lock ``k`` on these masters (ttl 1 s, node_timeout 50 ms, ...), with ``changes``."""
        spec = LockSpec(
            key="k",
            ttl=1.0,
            node_names=tuple(f"m{i}" for i in range(len(self.masters))),
            node_timeout=0.05,
            clock_drift_factor=0.01,
            retry_delay=0.1,
            unavailable_timeout=1.0,
        )
        return dataclasses.replace(spec, **changes)

    def acquire(self, spec: LockSpec, token: str) -> _core.Result:
        """One non-blocking attempt with ``token``."""
        tokens = Tokens(lambda: token)
        return self.run(acquire_flow(spec, tokens, self.now, blocking=False, timeout=None, rng=random.Random(0)))

    def holders(self, token: str, key: str = "k") -> int:
        """How many masters hold ``key`` for ``token`` now."""
        return sum(1 for m in self.masters if m.keys.get(key, ("", 0.0))[0] == token and m.keys[key][1] > self.now)
