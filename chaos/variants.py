"""Deliberately broken Redlock clients, for ``python -m chaos selftest``.

Would the harness notice a broken client? Each variant here is one mistake a client of the
algorithm (docs/algorithm.md) could make, made by patching the pure core
(:mod:`redlock._protocol.kinds`, :mod:`redlock._protocol.flows`, :mod:`redlock._protocol.scripts`,
the flows :mod:`redlock._api.state` calls) inside a client process at start-up:
:mod:`chaos.worker` applies the variant named in its configuration before it builds its
Redlock, so the library's source stays as it is and every other process runs the real
client. A variant that the catalogue does not catch is a hole in the harness, not in the lock.

The flow-level mistakes are made by a relay between the driver and the real flow
(:func:`_relay`): it passes every request and reply through, except what the mistake
changes (the time the flow is told, a clean-up round that is never sent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from redlock._api import election as _election
from redlock._api import state as _lock
from redlock._api import turns as _turns
from redlock._protocol import core as _core
from redlock._protocol import flows as _flows
from redlock._protocol import kinds as _kinds
from redlock._protocol import scripts as _scripts
from redlock._protocol.core import Command, Flow, Result, Round
from redlock.exceptions import NodeStatus

__all__ = ["VARIANTS", "Variant", "apply", "find"]


@dataclass(frozen=True)
class Variant:
    """One broken client: ``name`` on the command line, ``mistake`` in the report."""

    name: str
    mistake: str
    patch: Callable[[], None]


def _relay(flow: Flow, now: float, *, hide_rounds: bool = False, skip_cleanups: bool = False) -> Flow:
    """Run ``flow`` for the driver, with one of two mistakes.

    ``hide_rounds``: the flow is never told that time passed while its requests were out,
    and its deadline is moved by the time so hidden, so that validity counts from the
    replies, not from before the requests (K5). ``skip_cleanups``: the clean-up rounds of a
    failed attempt (its rollback) are never sent; the flow is told they went and came back.
    """
    hidden = 0.0
    try:
        request = next(flow)
        while True:
            if skip_cleanups and isinstance(request, Round) and request.cleanup:
                answer = now
            else:
                answer = yield request
                if hide_rounds and isinstance(request, Round):
                    hidden += answer - now
                now = answer
            request = flow.send(now - hidden)
    except StopIteration as stop:
        result: Result = stop.value
    finally:
        flow.close()
    if result.ok and hidden:
        result = dataclasses.replace(result, deadline=result.deadline + hidden)
    return result


#: Where the Lock looks up the acquire flow it runs (a module global, so it can be swapped).
_ACQUIRE_FLOW = "acquire_flow"


def _relay_acquire(**mistake: bool) -> Callable[[], None]:
    def patch() -> None:
        original = getattr(_lock, _ACQUIRE_FLOW)

        def acquire_flow(spec: _flows.LockSpec, tokens: _flows.Tokens, now: float, **options: Any) -> Flow:
            return _relay(original(spec, tokens, now, **options), now, **mistake)

        setattr(_lock, _ACQUIRE_FLOW, acquire_flow)

    return patch


def _half_quorum() -> None:
    _kinds.LockKind.quorum = lambda self, node_count: max(1, node_count // 2)  # type: ignore[method-assign]


def _no_drift() -> None:
    def deadline_after(self: _flows.LockSpec, started: float, ttl: float | None = None) -> float:
        return started + (self.ttl if ttl is None else ttl)

    _flows.LockSpec.deadline_after = deadline_after  # type: ignore[method-assign]


# aioredlock's extend: anything but another holder's token is (re)set, a missing key too.
_EXTEND_RECREATES = _scripts.Script(
    """
local current = redis.call('get', KEYS[1])
if current and current ~= ARGV[1] then
    return 0
end
return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0
"""
)


def _scripts_everywhere() -> None:
    """A broken script is broken only where it runs: send it to masters that have native
    commands too (Valkey 9, Redis 8.4), which would otherwise run those instead."""
    for name in ("extend", "release"):
        original: Callable[..., Command] = getattr(_kinds.LockKind, name)

        def scripted(
            self: _kinds.LockKind, *args: Any, _original: Callable[..., Command] = original, **kw: Any
        ) -> Command:
            return dataclasses.replace(_original(self, *args, **kw), native=())

        setattr(_kinds.LockKind, name, scripted)


def _extend_recreates() -> None:
    _scripts.EXTEND = _EXTEND_RECREATES
    _scripts_everywhere()
    # aioredlock's extend, modelled here, also goes to the masters whatever the holder's own
    # validity says: without that, the real client's refusal of a lapsed extend would keep
    # the broken script from ever running where scenario 16 looks for it.
    _lock.LockState._notice_lapse = lambda self, lease, now: None  # type: ignore[method-assign]


# A release (and a rollback) that deletes whatever holds the key, without comparing tokens.
_DELETE_BLINDLY = _scripts.Script(
    """
redis.call('del', KEYS[1])
if KEYS[2] then redis.call('del', KEYS[2]) end
return 1
"""
)


def _release_without_compare() -> None:
    _scripts.RELEASE = _DELETE_BLINDLY
    _scripts.RELEASE_AND_NOTIFY = _DELETE_BLINDLY
    _scripts_everywhere()


# A handover that does not compare: the waiter's token is written whoever holds the key.
_SWAP_BLINDLY = _scripts.Script(
    """
redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('del', KEYS[2])
return 1
"""
)


def _handoff_blind() -> None:
    _scripts.HANDOFF = _SWAP_BLINDLY
    original = _kinds.LockKind.handoff

    def scripted(self: _kinds.LockKind, key: str, token: str, new_token: str, ttl_ms: int) -> Command:
        return dataclasses.replace(original(self, key, token, new_token, ttl_ms), native=())

    _kinds.LockKind.handoff = scripted  # type: ignore[method-assign]


def _shared_joins_holding() -> None:
    # A Lock object shared by threads that lets a thread join another's holding, as if it
    # were the owner acquiring again: one token, two threads relying on it.
    original = _turns.LocalTurns.turn

    def turn(
        self: _turns.LocalTurns, me: object, blocking: bool, give_up_at: float | None, held: Callable[[], bool]
    ) -> Generator[float | None, None, _turns.Turn]:
        if self.busy and self.holds:
            self.holds += 1
            return _turns.Turn.NESTED
        return (yield from original(self, me, blocking, give_up_at, held))

    _turns.LocalTurns.turn = turn  # type: ignore[method-assign]


def _nested_release_lets_go() -> None:
    # Every release goes to the masters, a reentrant Lock's nested ones too.
    def counted_down(self: _turns.LocalTurns, me: object) -> bool:
        return False

    _turns.LocalTurns.counted_down = counted_down  # type: ignore[method-assign]


def _error_is_granted() -> None:
    # A driver that checks only "was there a reply?": -OOM, -READONLY... count as votes. (The
    # real client calls -READONLY, and a replica found at the handshake, MISCONFIGURED.)
    original = _core.Round.record

    def record(self: _core.Round, node: int, status: NodeStatus, detail: str = "", reply: object = None) -> None:
        if status is NodeStatus.ERROR or status is NodeStatus.MISCONFIGURED:
            status = NodeStatus.GRANTED
        original(self, node, status, detail, reply)

    _core.Round.record = record  # type: ignore[method-assign]


# A reader that checks neither the writer's key nor its intent: the semaphore's acquire with
# no limit (the mistake of reusing a shared-lock recipe for the read side as it is).
_READ_IGNORES_WRITER = _scripts.Script(
    """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zadd', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
redis.call('pexpire', KEYS[3], math.max(redis.call('pttl', KEYS[3]), tonumber(ARGV[2])))
return 1
"""
)


def _reader_ignores_writer() -> None:
    _scripts.RW_READ_ACQUIRE = _READ_IGNORES_WRITER


def _runner_outlives_validity() -> None:
    # A runner that, once elected, believes it leads until it is told to stop: it neither
    # wakes for the Lock's loss report nor bounds its wait by the deadline, so on_lost comes
    # at stop(), long after another runner was elected. The relay keeps handing the client
    # waits while the real runner sits in its holding wait, never asking the Lock again.
    original = _election.Runner.advance

    def advance(
        self: _election.Runner, outcome: object = None, error: BaseException | None = None
    ) -> _election.Step | None:
        holding = getattr(self, "_variant_holding", False)
        if holding and error is None and self._leading and not self.done:
            return _election.Wait(self._election.ttl)
        step = original(self, outcome, error)
        self._variant_holding = isinstance(step, _election.Wait) and self._leading  # type: ignore[attr-defined]
        return step

    _election.Runner.advance = advance  # type: ignore[method-assign]


VARIANTS: tuple[Variant, ...] = (
    Variant("quorum-half", "quorum N//2 instead of N//2+1: two disjoint 'majorities'", _half_quorum),
    Variant(
        "validity-from-replies",
        "validity counted from when the replies came in, not from before the requests (K5)",
        _relay_acquire(hide_rounds=True),
    ),
    Variant("no-drift", "no drift allowance: the holder counts on the whole ttl", _no_drift),
    Variant("no-rollback", "a failed attempt leaves the keys it set on a minority", _relay_acquire(skip_cleanups=True)),
    Variant("extend-recreates", "an extend that re-creates a key that is gone", _extend_recreates),
    Variant("release-no-compare", "a release that deletes the key, whoever's it is", _release_without_compare),
    Variant(
        "handoff-blind",
        "a handover to the next waiter that writes its token whoever holds the key, without comparing",
        _handoff_blind,
    ),
    Variant(
        "shared-joins-holding",
        "a Lock shared by threads lets a second thread into a busy holding, without the masters",
        _shared_joins_holding,
    ),
    Variant("error-granted", "an error reply (-OOM, -READONLY...) counted as a grant", _error_is_granted),
    Variant(
        "nested-release-lets-go", "a reentrant Lock's nested release releases the masters", _nested_release_lets_go
    ),
    Variant(
        "reader-ignores-writer",
        "a read-write lock's reader is granted whatever the writer holds or waits for",
        _reader_ignores_writer,
    ),
    Variant(
        "runner-outlives-validity",
        "an election runner that believes it leads until stopped: on_lost comes long after the validity ended",
        _runner_outlives_validity,
    ),
)


def find(name: str) -> Variant:
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise KeyError(f"no variant {name!r}; known: {', '.join(v.name for v in VARIANTS)}")


def apply(name: str) -> Variant:
    """Break this process's Redlock client the way variant ``name`` says; call it before
    the client is built."""
    variant = find(name)
    variant.patch()
    return variant
