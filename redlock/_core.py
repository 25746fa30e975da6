"""The pure Redlock core: quorum arithmetic, rounds, and the acquire/extend/release flows.

Nothing here touches a socket or reads a clock. Time and each master's reply are inputs,
so every decision can be tested exhaustively (see tests/test_core.py) and the same code
drives both the synchronous and the asyncio client.

Theory of operation
-------------------
An operation is a *flow*: a generator that yields requests and receives the monotonic time
at which each request completed.

* ``Round`` asks the driver to send one command to some masters, all at once, each reply
  bounded by ``timeout``. The driver records every reply (or failure) in the round with
  :meth:`Round.record` as it arrives and stops as soon as :attr:`Round.settled` is true;
  then it sends the current time into the flow, which reads the outcome from the round.
  An *early* round settles as soon as its outcome is decided (a majority granted, or a
  majority can no longer grant), so one hung master adds nothing to a successful acquire;
  a *complete* round (release, rollback) waits for every master, up to the timeout.
* ``Pause`` asks the driver to wait before the next attempt; it sends back the time it woke.

Times a flow uses for validity are always read *before* the request was sent (the time
the flow last received), so the validity it computes can only be an underestimate.

Validity (from the Redlock specification): every key was set after ``t1``, so none expires
before ``t1 + ttl`` by the master's clock. Allowing ``drift = ttl * clock_drift_factor +
2 ms`` for clock rates differing across machines and for Redis's 1 ms expiry precision,
the holder may rely on the lock until ``t1 + ttl - drift`` on its own monotonic clock.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from redlock import _scripts
from redlock.exceptions import NodeOutcome, NodeStatus


class Event(Protocol):
    """What threading.Event and asyncio.Event have in common, as far as waiting goes."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...


EventT = TypeVar("EventT", bound=Event)


class Latencies(Protocol):
    """Takes ``latencies[node] = seconds`` (a dict does)."""

    def __setitem__(self, node: int, seconds: float, /) -> None: ...


#: Covers Redis's 1 ms expiry precision, with a millisecond to spare for rounding.
EXPIRY_PRECISION = 0.002

#: The smallest ttl the client accepts: below it the drift allowance leaves no validity.
MIN_TTL = 0.010

#: The largest: ten years. Redis refuses an expiry past its 64-bit millisecond clock, and
#: waits this long must still fit the platform's timers (threading.TIMEOUT_MAX).
MAX_TTL = 10 * 365 * 24 * 3600.0


def quorum_size(node_count: int) -> int:
    """How many masters must grant a lock: a strict majority, so two majorities intersect."""
    if node_count < 1:
        raise ValueError(f"node_count must be at least 1, got {node_count}")
    return node_count // 2 + 1


def semaphore_quorum(node_count: int, limit: int) -> int:
    """How many masters must grant one permit of a semaphore of ``limit`` permits.

    Each master grants at most ``limit`` permits at a time, so ``limit + 1`` holders can
    gather at most ``limit * node_count`` grants between them. A holder needs more than
    ``limit * node_count / (limit + 1)`` grants; then ``limit + 1`` holders would need more
    than every master can give. The smallest such count is ``floor(limit * N / (limit + 1)) + 1``.
    For ``limit=1`` it is the plain majority; it grows toward N as the limit grows (N once
    ``limit >= N - 1``), so a semaphore tolerates fewer masters down than a lock does.
    """
    if node_count < 1:
        raise ValueError(f"node_count must be at least 1, got {node_count}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    quorum = (limit * node_count) // (limit + 1) + 1
    if quorum > node_count:  # cannot happen (limit * N / (limit + 1) < N); unsafe if it did
        raise ValueError(f"a semaphore of limit {limit} needs {quorum} votes of {node_count} masters")
    return quorum


def drift_allowance(ttl: float, clock_drift_factor: float) -> float:
    """The part of the ttl the holder must not count on (clock rate skew + expiry precision)."""
    return ttl * clock_drift_factor + EXPIRY_PRECISION


def validity_left(ttl: float, elapsed: float, clock_drift_factor: float) -> float:
    """Seconds the holder may still rely on a lock whose round took ``elapsed`` seconds."""
    return ttl - elapsed - drift_allowance(ttl, clock_drift_factor)


def ttl_milliseconds(ttl: float) -> int:
    """The ttl as the integer milliseconds Redis takes, rounded down so we never overstate it."""
    return max(1, math.floor(ttl * 1000))


#: A pause that ended this much before its time was cut short by a release announcement.
WOKEN_MARGIN = 0.001


def retry_delays(base: float, rng: random.Random) -> Iterator[float]:
    """Endless jittered delays between attempts, uniform in [base/2, 3*base/2].

    Random jitter stops clients that split a vote from retrying in lockstep and splitting
    it again. The delay does not grow with the attempt count: a client that lost many times
    must not be pushed behind newcomers, or contended throughput turns unfair.
    """
    while True:
        yield base * (0.5 + rng.random())


# --- commands -----------------------------------------------------------------------------


Arg = str | bytes | int


@dataclass(frozen=True, slots=True)
class Command:
    """One Redis command, as sent; scripts go as EVALSHA and have an EVAL fallback."""

    args: tuple[Arg, ...]
    script: _scripts.Script | None = None

    @classmethod
    def set_nx_px(cls, key: str, token: str, ttl_ms: int) -> Command:
        return cls(("SET", key, token, "NX", "PX", ttl_ms))

    @classmethod
    def run_script(cls, script: _scripts.Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Command:
        return cls(("EVALSHA", script.sha, len(keys), *keys, *args), script)

    def without_script_cache(self) -> Command:
        """The EVAL form of a script command, for a master that answered NOSCRIPT."""
        if self.script is None:
            raise ValueError("only script commands have an EVAL form")
        return Command(("EVAL", self.script.source, *self.args[2:]))


def reply_status(reply: object) -> NodeStatus:
    """Map a master's reply to SET NX / to our scripts onto granted or denied."""
    if reply == b"OK":  # (the most common reply, first)
        return NodeStatus.GRANTED
    if isinstance(reply, (list, tuple)) and reply:  # FENCED_ACQUIRE: {1, counter}
        reply = reply[0]
    if reply is None or reply == 0:
        return NodeStatus.DENIED
    if reply in (b"OK", "OK") or reply == 1:
        return NodeStatus.GRANTED
    return NodeStatus.ERROR


class ErrorReply(Exception):
    """A master's error reply, as a value (the parser makes one per ``-ERR ...`` line)."""

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    @property
    def noscript(self) -> bool:
        """The master does not know the script (it restarted, or its cache was flushed)."""
        return self.message.startswith("NOSCRIPT")


# --- rounds -------------------------------------------------------------------------------


@dataclass(slots=True)
class Round:
    """One command sent to some masters at once; filled in by the driver as replies arrive."""

    command: Command
    targets: tuple[int, ...]
    node_names: tuple[str, ...]
    quorum: int
    timeout: float
    wait_for_all: bool = False
    #: Grants counted before this round (a retried release: the masters that confirmed it).
    credited: int = 0
    #: Beyond ``timeout``, how long a round still undecided goes on waiting (a release: a
    #: slow reply must not turn into a reported loss). Past ``timeout`` the round is
    #: ``overtime``: it settles as soon as its outcome is decided, even if it waits for all.
    patience: float = 0.0
    overtime: bool = False
    #: A clean-up (rollback, release): sent even to a master that owes many replies, up to
    #: a second allowance, since refusing it would leave our key behind.
    cleanup: bool = False
    outcomes: dict[int, NodeOutcome] = field(default_factory=dict)
    replies: dict[int, object] = field(default_factory=dict)
    #: The command in RESP, encoded once for every master (by the connection layer).
    wire: bytes | None = field(default=None, repr=False)
    #: Called by the driver's side once the round is settled: wakes whoever waits for it.
    waker: Callable[[], None] | None = field(default=None, repr=False)
    #: Kept as outcomes are recorded: every reply of every round asks for them.
    granted: int = field(default=0, init=False)
    #: Where the connection policy puts the seconds from sending to each master's reply
    #: (late ones too) when not None: redlock._telemetry sets it for the rounds it reports.
    latencies: Latencies | None = field(default=None, repr=False)

    def awaits(self, node: int) -> bool:
        """Whether ``node``'s outcome is still to be recorded in this round."""
        return node not in self.outcomes and node in self.targets

    def record(self, node: int, status: NodeStatus, detail: str = "", reply: object = None) -> None:
        if node in self.outcomes or node not in self.targets:
            raise ValueError(f"node {node} is not awaited in this round")
        self.outcomes[node] = NodeOutcome(self.node_names[node], status, detail)
        self.replies[node] = reply
        if status is NodeStatus.GRANTED:
            self.granted += 1
        if self.waker is not None and self.settled:
            waker, self.waker = self.waker, None
            waker()

    def record_reply(self, node: int, reply: object) -> None:
        status = reply_status(reply)
        self.record(node, status, f"unexpected reply {reply!r}" if status is NodeStatus.ERROR else "", reply)

    def count(self, status: NodeStatus) -> int:
        return sum(1 for outcome in self.outcomes.values() if outcome.status is status)

    @property
    def pending(self) -> tuple[int, ...]:
        return tuple(node for node in self.targets if node not in self.outcomes)

    @property
    def pending_count(self) -> int:
        return len(self.targets) - len(self.outcomes)  # outcomes are recorded only for targets

    @property
    def unreached(self) -> int:
        """Masters that failed to answer at all (down, hung, erroring)."""
        return sum(1 for outcome in self.outcomes.values() if not outcome.status.answered)

    @property
    def majority_granted(self) -> bool:
        return self.granted + self.credited >= self.quorum

    @property
    def majority_impossible(self) -> bool:
        return self.granted + self.credited + self.pending_count < self.quorum

    @property
    def settled(self) -> bool:
        pending = len(self.targets) - len(self.outcomes)
        if not pending:
            return True
        if self.wait_for_all and not self.overtime:
            return False
        votes = self.granted + self.credited
        return votes >= self.quorum or votes + pending < self.quorum  # decided either way

    @property
    def quorum_unreachable(self) -> bool:
        """Too many masters failed to answer for anyone to hold a majority."""
        return self.unreached > len(self.node_names) - self.quorum

    @property
    def misconfigured(self) -> bool:
        """So many masters refuse us for configuration (credentials, ACL, TLS) that no
        majority is possible until someone fixes it: retrying would not help."""
        return self.count(NodeStatus.MISCONFIGURED) > len(self.node_names) - self.quorum

    def ordered_outcomes(self) -> tuple[NodeOutcome, ...]:
        """One outcome per target, in master order; those not waited for say so."""
        outcomes = self.outcomes
        return tuple(
            outcomes[node] if node in outcomes else NodeOutcome(self.node_names[node], NodeStatus.NOT_AWAITED)
            for node in self.targets
        )


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait this long; a driver that listens for releases may wake early when ``wake_on``
    (a lock key) is released, and one that runs a renewer stops it early on release."""

    seconds: float
    wake_on: str | None = None


Request = Round | Pause
Flow = Generator[Request, float, "Result"]


# --- lock parameters and results -----------------------------------------------------------


@dataclass(frozen=True)
class LockSpec:
    """What every flow needs to know about one lock and the cluster it lives on."""

    key: str
    ttl: float
    node_names: tuple[str, ...]
    node_timeout: float
    clock_drift_factor: float
    retry_delay: float
    unavailable_timeout: float
    fencing: bool = False
    #: Extra life of the keys on the masters beyond ``ttl``, never counted in the validity
    #: (Chubby's and Consul's lock-delay): see :func:`key_milliseconds`.
    lock_delay: float = 0.0
    #: A multi-name lock's names, sorted and unique (``key`` is the first); () for one name.
    names: tuple[str, ...] = ()
    #: A semaphore's number of permits; 0 for a lock.
    limit: int = 0
    #: Replaces the kind's own quorum when not 0. Only the chaos harness's self-test sets it,
    #: to show that a semaphore counting plain majorities is caught letting in too many.
    forced_quorum: int = 0

    @property
    def quorum(self) -> int:
        if self.forced_quorum:
            return self.forced_quorum
        if self.limit:
            return semaphore_quorum(len(self.node_names), self.limit)
        return quorum_size(len(self.node_names))

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key this lock holds on each master."""
        return self.names or (self.key,)

    @property
    def resource(self) -> str:
        """The name of what is locked, as messages show it (several names joined by ", ")."""
        return ", ".join(self.keys)

    @property
    def all_nodes(self) -> tuple[int, ...]:
        return tuple(range(len(self.node_names)))

    def round(self, command: Command, targets: Sequence[int] | None = None, *, cleanup: bool = False) -> Round:
        """A round of ``command``; a clean-up waits for every master (up to the timeout)."""
        return Round(
            command=command,
            targets=tuple(self.all_nodes if targets is None else targets),
            node_names=self.node_names,
            quorum=self.quorum,
            timeout=self.node_timeout,
            wait_for_all=cleanup,
            cleanup=cleanup,
        )

    def deadline_after(self, started: float, ttl: float | None = None) -> float:
        """The monotonic time until which a lock set at ``started`` may be relied on."""
        ttl = self.ttl if ttl is None else ttl
        return started + ttl - drift_allowance(ttl, self.clock_drift_factor)


@dataclass(frozen=True, slots=True)
class Result:
    """How a flow ended: held (with its deadline) or not, and what the masters said."""

    ok: bool
    outcomes: tuple[NodeOutcome, ...]
    granted: int
    deadline: float = 0.0
    quorum_unreachable: bool = False
    #: Too many masters refuse our credentials, permissions or TLS for any majority.
    misconfigured: bool = False
    #: For a failed extend or release: a majority answered that our token is gone.
    token_gone: bool = False
    timed_out: bool = False
    attempts: int = 1
    fencing_token: int | None = None
    #: The time the flow last received, when it decided.
    finished_at: float = 0.0
    #: For a held acquire: the token of the attempt that won.
    token: str | None = None
    #: For a release: its round, which a retry of the release takes into account.
    rounds: tuple[Round, ...] = ()


@dataclass
class _Extend:
    #: The deadline this extend gives if it succeeds.
    candidate: float
    #: The lowest candidate of every extend in flight at any time during this one: the
    #: masters apply overlapping extends in an order nobody knows, so the one applied last
    #: on some master may be any of them.
    floor: float


@dataclass
class Lease:
    """One holding of a lock, as the holder sees it; extends update it in place."""

    token: str
    deadline: float
    fencing_token: int | None = None
    #: Set when renewal found the lock gone, or its validity ran out before an extend worked.
    lost: bool = False
    #: Set by release: renewal stops at its next step, and the holder may rely on it no more.
    ended: bool = False
    #: Set by a release that no majority answered: our token may still hold the lock on
    #: some masters until it expires, so the Lock keeps it for ``release()`` to be retried.
    release_unconfirmed: bool = False
    #: The holder was told of the loss (by a release raising LockLost): a retry is not.
    loss_reported: bool = False
    #: The loss was logged and counted (once per lease, whoever finds it first).
    loss_noticed: bool = False
    #: The rounds of the tries of its release so far (a release may be retried).
    release_rounds: list[Round] = field(default_factory=list)
    _extends: dict[int, _Extend] = field(default_factory=dict, repr=False)
    #: Extends are numbered from 1, in the order they begin; the masters apply an extend
    #: only if it is newer than the last one they applied (see _scripts.EXTEND).
    _extend_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)
    #: The renewer's thread and the user's may extend at once.
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begin_extend(self, candidate: float) -> int:
        """Register an extend that will give ``candidate`` if it succeeds; its number."""
        with self._guard:
            floor = candidate
            for other in self._extends.values():
                floor = min(floor, other.candidate)
                other.floor = min(other.floor, candidate)
            extend_id = next(self._extend_ids)
            self._extends[extend_id] = _Extend(candidate, floor)
            return extend_id

    def end_extend(self, extend_id: int, *, ok: bool, may_have_landed: bool) -> None:
        """Account for a finished extend (or one abandoned midway).

        A success moves the deadline to the lowest candidate among overlapping extends (a
        user's ``extend(ttl=1)`` racing the renewer must not leave the holder counting on
        the renewer's longer ttl). An older extend that lands after this one is refused by
        the masters, which remember the number of the newest extend they applied. A failure
        that may have reset the ttl on some master still caps the deadline at its own
        candidate: enough masters may now carry the shorter ttl for the old deadline to be
        wrong.
        """
        with self._guard:
            extend = self._extends.pop(extend_id)
            if self.lost:
                return
            if ok:
                self.deadline = extend.floor
            elif may_have_landed:
                self.deadline = min(self.deadline, extend.candidate)


class Tokens:
    """The random tokens of one acquire: a fresh one per attempt, so that nothing late from
    an earlier attempt (a SET that lands after its rollback, a rollback re-sent after a
    NOSCRIPT answer) can ever touch the key of a later one; and those not yet taken back."""

    def __init__(self, new_token: Callable[[], str]) -> None:
        self._new_token = new_token
        #: Tokens whose SET may be on some master and whose rollback was not sent yet: what
        #: an interrupted acquire must delete.
        self.outstanding: list[str] = []

    def fresh(self) -> str:
        token = self._new_token()
        self.outstanding.append(token)
        return token

    def settled(self, token: str) -> None:
        self.outstanding.remove(token)


FENCE_PREFIX = "redlock:fence:"
ORDER_PREFIX = "redlock:order:"
#: Lock names may not start with these: such a lock's key would be another lock's
#: bookkeeping key, which that lock's scripts overwrite and delete without asking.
RESERVED_PREFIXES = (FENCE_PREFIX, ORDER_PREFIX)


def fence_key(key: str) -> str:
    """Where each master keeps the highest fencing token it has seen for ``key``."""
    return FENCE_PREFIX + key


def order_key(key: str) -> str:
    """Where each master keeps which extend of the current holding of ``key`` it applied
    last, so that an extend arriving late never undoes a newer one."""
    return ORDER_PREFIX + key


def subscription_changes(wanted: set[str], subscribed: set[str]) -> tuple[list[str], list[str]]:
    """The channels to subscribe to and to leave, to go from ``subscribed`` to ``wanted``."""
    return sorted(wanted - subscribed), sorted(subscribed - wanted)


class Waiters(Generic[EventT]):
    """Who waits for the release of which lock, in arrival order, for one client.

    A release is announced by every master that held it; it wakes one waiter of this client
    (the longest waiting), not all of them, and only once. Waking all would send every waiter
    at the masters together, where all but one fail: a thundering herd that slows the very
    handoff it is meant to speed up. Other clients' waiters are woken by their own listeners.
    """

    def __init__(self, remembered: int = 64) -> None:
        self._waiting: dict[str, list[EventT]] = {}
        self._seen: dict[str, deque[bytes]] = {}
        self._remembered = remembered

    def channels(self) -> set[str]:
        return set(self._waiting)

    def all_events(self) -> list[EventT]:
        return [event for events in self._waiting.values() for event in events]

    def add(self, channel: str, event: EventT) -> None:
        self._waiting.setdefault(channel, []).append(event)

    def discard(self, channel: str, event: EventT) -> None:
        waiting = self._waiting.get(channel)
        if waiting is not None and event in waiting:
            waiting.remove(event)
            if not waiting:
                del self._waiting[channel]
                self._seen.pop(channel, None)

    def released(self, channel: str, token: bytes) -> None:
        """Wake the longest-waiting waiter not woken yet, unless this release was counted."""
        if channel not in self._waiting:
            return  # a late message for a channel nobody waits on any more: nothing to keep
        seen = self._seen.setdefault(channel, deque(maxlen=self._remembered))
        if token in seen:
            return
        seen.append(token)
        for event in self._waiting.get(channel, ()):
            if not event.is_set():
                event.set()
                return


def release_channel(key: str) -> str:
    """The channel a release of ``key`` is announced on, for waiters to retry at once."""
    return f"redlock:released:{key}"


# The commands of each kind of lock. The flows are the same for all three kinds (a lock on
# one name, on several names, a semaphore): only these commands and the quorum differ.


def _release_command(spec: LockSpec, token: str, *, notify: bool = False) -> Command:
    """Delete our token (``notify``: and announce it to waiters; a rollback does not)."""
    if spec.limit:
        channel = [release_channel(spec.key)] if notify else []
        return Command.run_script(_scripts.SEMAPHORE_RELEASE, [spec.key, order_key(spec.key)], [token, *channel])
    if spec.names:
        channels = [release_channel(name) for name in spec.names] if notify else []
        return Command.run_script(_scripts.MULTI_RELEASE, [*spec.names, order_key(spec.key)], [token, *channels])
    if notify:
        return Command.run_script(
            _scripts.RELEASE_AND_NOTIFY, [spec.key, order_key(spec.key)], [token, release_channel(spec.key)]
        )
    return Command.run_script(_scripts.RELEASE, [spec.key, order_key(spec.key)], [token])


def key_milliseconds(spec: LockSpec, ttl: float) -> int:
    """How long the masters keep a key set or extended for ``ttl``: ``ttl + lock_delay``.

    The holder counts its validity from ``ttl`` alone, so a holder that stops (crashed, hung,
    partitioned, paused) without releasing still keeps everyone else out for ``lock_delay``
    after its validity ended: its late writes land while nobody else holds the lock. A
    release deletes the key at once, so a holder that releases costs nobody the delay.
    """
    return ttl_milliseconds(ttl + spec.lock_delay)


def _acquire_command(spec: LockSpec, token: str) -> Command:
    ttl_ms = key_milliseconds(spec, spec.ttl)
    if spec.limit:
        return Command.run_script(
            _scripts.SEMAPHORE_ACQUIRE, [spec.key, order_key(spec.key)], [token, ttl_ms, spec.limit]
        )
    if spec.names:
        return Command.run_script(_scripts.MULTI_ACQUIRE, [*spec.names, order_key(spec.key)], [token, ttl_ms])
    if spec.fencing:
        return Command.run_script(_scripts.FENCED_ACQUIRE, [spec.key, fence_key(spec.key)], [token, ttl_ms])
    return Command.set_nx_px(spec.key, token, ttl_ms)


def _extend_command(spec: LockSpec, token: str, ttl: float, extend_id: int) -> Command:
    script = _scripts.SEMAPHORE_EXTEND if spec.limit else _scripts.MULTI_EXTEND if spec.names else _scripts.EXTEND
    return Command.run_script(
        script, [*spec.keys, order_key(spec.key)], [token, key_milliseconds(spec, ttl), extend_id]
    )


def wake_key(spec: LockSpec, acquire: Round) -> str:
    """Whose release a failed acquire waits for: the lock's key, or for several names the
    one the most refusing masters found held (the multi-name script names it)."""
    held = [
        int(reply[1])
        for reply in acquire.replies.values()
        if spec.names and isinstance(reply, list | tuple) and len(reply) == 2
    ]
    if not held:
        return spec.key
    index = max(set(held), key=held.count)
    return spec.names[index - 1] if 1 <= index <= len(spec.names) else spec.key


def fencing_token_from(acquire: Round) -> int:
    """One more than the highest counter among the masters that granted the lock.

    They are a majority, and every earlier holder raised the counter on a majority before
    its acquire returned; two majorities share a master, so this exceeds every earlier token.
    """
    counters = [
        int(reply[1])  # type: ignore[index]
        for node, reply in acquire.replies.items()
        if acquire.outcomes[node].status is NodeStatus.GRANTED
    ]
    return max(counters) + 1


def acquire_flow(
    spec: LockSpec,
    tokens: Tokens,
    now: float,
    *,
    blocking: bool,
    timeout: float | None,
    rng: random.Random,
) -> Flow:
    """Try to set ``token`` on a majority; retry while ``blocking`` and time remains.

    ``timeout`` bounds the whole wait; with ``timeout=None`` a blocking acquire retries
    until it gets the lock, except that it gives up after ``spec.unavailable_timeout`` of
    consecutive attempts that could not reach a majority: waiting forever on a dead
    cluster helps nobody. With ``spec.fencing``, a held lock also gets a fencing token,
    written back to a majority before the acquire counts as done. Each attempt sets a
    fresh token from ``tokens``; the result carries the one that won.
    """
    give_up_at = None if timeout is None else now + timeout
    unreachable_since: float | None = None
    delays = retry_delays(spec.retry_delay, rng)
    attempts = 0
    woken = False
    while True:
        attempts += 1
        token = tokens.fresh()
        started = now
        deadline = spec.deadline_after(started)
        acquire = spec.round(_acquire_command(spec, token))
        now = yield acquire
        held = acquire.majority_granted and deadline > now
        fencing_token = None
        if held and spec.fencing:
            fencing_token = fencing_token_from(acquire)
            raise_fence = Command.run_script(_scripts.FENCE_RAISE, [fence_key(spec.key)], [fencing_token])
            write_back = spec.round(raise_fence)
            now = yield write_back
            held = write_back.majority_granted and deadline > now
        if held:
            # The token stays outstanding: until the Lock has recorded the lease, an
            # interruption must take it back like any other (see the drivers' run()).
            return Result(
                True,
                acquire.ordered_outcomes(),
                acquire.granted,
                deadline=deadline,
                attempts=attempts,
                fencing_token=fencing_token,
                token=token,
            )

        # A timed-out or erroring SET may still land: undo ours everywhere but where the
        # master said no (there the key is someone else's, and our token never went in).
        undo = [
            node
            for node in spec.all_nodes
            if acquire.outcomes.get(node) is None or acquire.outcomes[node].status is not NodeStatus.DENIED
        ]
        if undo:
            now = yield spec.round(_release_command(spec, token), undo, cleanup=True)
        # Sent, behind the SET on each connection: it lands after it wherever the SET does.
        tokens.settled(token)

        unreachable = acquire.quorum_unreachable
        if not unreachable:
            unreachable_since = None
        elif unreachable_since is None:
            unreachable_since = started

        failure = Result(
            False,
            acquire.ordered_outcomes(),
            acquire.granted,
            quorum_unreachable=unreachable,
            misconfigured=acquire.misconfigured,
            attempts=attempts,
        )
        if not blocking or failure.misconfigured:
            return failure
        if unreachable_since is not None and timeout is None and now - unreachable_since >= spec.unavailable_timeout:
            return failure
        delay = next(delays)
        if woken:
            # A release on one master woke us, yet a majority refused: the release was sent
            # to all masters at once, and the others may not have run it yet (the other
            # announcements of it arrived while we were not listening). Look again once each
            # master has had node_timeout to run it, not a whole retry delay later.
            delay = min(delay, spec.node_timeout)
        if give_up_at is not None:
            if now >= give_up_at:
                return Result(
                    False,
                    failure.outcomes,
                    failure.granted,
                    quorum_unreachable=unreachable,
                    timed_out=True,
                    attempts=attempts,
                )
            delay = min(delay, give_up_at - now)
        resume_at = now + delay
        now = yield Pause(delay, wake_on=wake_key(spec, acquire))
        woken = now < resume_at - WOKEN_MARGIN


def extend_flow(spec: LockSpec, lease: Lease, ttl: float, now: float) -> Flow:
    """Reset the ttl of our token on a majority; validity counts from the start of the extend.

    The lease's deadline is updated here (see :meth:`Lease.end_extend`), also when the
    flow is abandoned midway (closed by its driver): its commands may still land.
    """
    started = now
    extend_id = lease.begin_extend(spec.deadline_after(started, ttl))
    finished = False
    try:
        extend = spec.round(_extend_command(spec, lease.token, ttl, extend_id))
        now = yield extend
        deadline = spec.deadline_after(started, ttl)
        ok = extend.majority_granted and deadline > now
        # A master that said no did not touch the key; any other may have reset its ttl.
        landed = extend.count(NodeStatus.DENIED) < len(extend.targets)
        lease.end_extend(extend_id, ok=ok, may_have_landed=landed)
        finished = True
    finally:
        if not finished:
            lease.end_extend(extend_id, ok=False, may_have_landed=True)
    gone = extend.count(NodeStatus.DENIED) > len(spec.node_names) - spec.quorum
    return Result(
        ok,
        extend.ordered_outcomes(),
        extend.granted,
        deadline=deadline if ok else 0.0,
        token_gone=gone,
        finished_at=now,
    )


#: How long a release waits for its replies at most (less if the validity ends sooner, never
#: less than node_timeout). A release is not latency-critical: a reply that is merely slow
#: must not turn into a reported loss.
RELEASE_PATIENCE = 1.0


def release_timeout(spec: LockSpec, validity: float) -> float:
    return max(spec.node_timeout, min(RELEASE_PATIENCE, validity))


def release_flow(
    spec: LockSpec,
    token: str,
    now: float,
    *,
    notify: bool = True,
    earlier: Sequence[Round] = (),
    timeout: float | None = None,
) -> Flow:
    """Delete our token everywhere; ok once a majority confirmed it held our token.

    With ``notify``, each master that deleted it announces the release to waiters.
    ``earlier`` are the rounds of earlier tries of this release (it may be retried when no
    majority answered): the masters that confirmed then are not asked again and count
    towards the majority; a master whose earlier reply never came may have run that release,
    so its "not there" now proves nothing about a loss and counts as released.
    """
    command = _release_command(spec, token, notify=notify)
    confirmed = {
        node for round_ in earlier for node, outcome in round_.outcomes.items() if outcome.status is NodeStatus.GRANTED
    }
    maybe_landed = {
        node for round_ in earlier for node in round_.targets if not round_.outcomes.get(node, _UNKNOWN).status.answered
    } - confirmed
    timeout = spec.node_timeout if timeout is None else timeout
    release = Round(
        command=command,
        targets=tuple(node for node in spec.all_nodes if node not in confirmed),
        node_names=spec.node_names,
        quorum=spec.quorum,
        # Every master is waited for up to node_timeout (so that, normally, nothing of ours
        # is left anywhere once release returns); then only while no majority has answered.
        timeout=min(spec.node_timeout, timeout),
        wait_for_all=True,
        cleanup=True,
        credited=len(confirmed),
        patience=max(0.0, timeout - spec.node_timeout),
    )
    yield release
    denied = {node for node, outcome in release.outcomes.items() if outcome.status is NodeStatus.DENIED}
    ok = len(confirmed) + release.granted + len(denied & maybe_landed) >= spec.quorum
    gone = len(denied - maybe_landed) > len(spec.node_names) - spec.quorum
    outcomes = tuple(
        NodeOutcome(spec.node_names[node], NodeStatus.GRANTED, "confirmed by an earlier try")
        if node in confirmed
        else release.outcomes[node]
        if node in release.outcomes
        else NodeOutcome(spec.node_names[node], NodeStatus.NOT_AWAITED)
        for node in spec.all_nodes
    )
    return Result(ok, outcomes, len(confirmed) + release.granted, token_gone=gone and not ok, rounds=(release,))


_UNKNOWN = NodeOutcome("", NodeStatus.NOT_AWAITED)


def rollback_flow(spec: LockSpec, tokens: Sequence[str]) -> Flow:
    """Delete the tokens of an interrupted acquire everywhere (each round waits for all)."""
    last = Result(True, (), 0)
    for token in tokens:
        rollback = spec.round(_release_command(spec, token), cleanup=True)
        yield rollback
        last = Result(rollback.majority_granted, rollback.ordered_outcomes(), rollback.granted)
    return last


def next_renewal(now: float, lease: Lease, ttl: float, *, failed: bool, retry_delay: float) -> float | None:
    """Seconds until the next extension of an auto-extended lock; None once it is lost.

    After a success, the next extension is due when two thirds of the ttl are left (about
    every ttl/3), far enough ahead that a few failed tries still fit in the validity. After
    a failure it is retried soon, but never later than half of what is left.
    """
    left = lease.deadline - now
    if left <= 0:
        return None
    if failed:
        return min(retry_delay, left / 2)
    return max(0.0, left - 2 * ttl / 3)


def renewal_flow(spec: LockSpec, lease: Lease, now: float) -> Flow:
    """Keep ``lease`` alive until it ends (release) or is lost; returns how it finished.

    A failed extension is retried while validity remains. The lease is marked lost at once
    when a majority says our token is gone, or when the validity runs out first.
    """
    failed = False
    last = Result(True, (), 0, deadline=lease.deadline)
    while not lease.ended:
        delay = next_renewal(now, lease, spec.ttl, failed=failed, retry_delay=spec.retry_delay)
        if delay is None:
            break
        now = yield Pause(delay)
        if lease.ended:
            return last
        last = yield from extend_flow(spec, lease, spec.ttl, now)
        now = last.finished_at
        if lease.ended:
            return last
        if last.ok:
            failed = False
        elif last.token_gone:
            break
        else:
            failed = True
    if not lease.ended:
        lease.lost = True
    return last


# --- inspection and the operator's override -------------------------------------------------


@dataclass(frozen=True)
class MasterInfo:
    """What one master says about a lock name."""

    #: The master's name (host:port, or the socket path).
    master: str
    #: Whether it answered (an error reply, a timeout or a refused connection: False).
    reachable: bool
    #: The token its key holds; None if the key is absent, or the master did not answer.
    token: str | None = None
    #: Seconds the key has left on this master (``math.inf``: it never expires, so it is not a
    #: Redlock key); None when there is no key.
    ttl: float | None = None
    #: Why it did not answer.
    error: str = ""


@dataclass(frozen=True)
class LockInfo:
    """Who holds a lock name on each master, and whether a quorum agrees on one holder.

    Returned by ``Redlock.inspect`` (a snapshot) and ``Redlock.force_release`` (what it
    removed: each master's token and ttl just before the key was deleted).
    """

    name: str
    quorum: int
    masters: tuple[MasterInfo, ...]

    @property
    def reachable(self) -> int:
        """How many masters answered."""
        return sum(master.reachable for master in self.masters)

    @property
    def leading(self) -> str | None:
        """The token held on the most masters (the first of them in master order on a tie)."""
        votes = self._votes()
        return max(votes, key=votes.__getitem__) if votes else None

    @property
    def votes(self) -> int:
        """How many masters hold :attr:`leading`."""
        return max(self._votes().values(), default=0)

    @property
    def holder(self) -> str | None:
        """The token a quorum of masters holds, if any: the lock's holder right now."""
        return self.leading if self.votes >= self.quorum else None

    def _votes(self) -> dict[str, int]:
        votes: dict[str, int] = {}
        for master in self.masters:
            if master.token is not None:
                votes[master.token] = votes.get(master.token, 0) + 1
        return votes


def inspect_flow(spec: LockSpec) -> Flow:
    """Ask every master who holds ``spec.key`` and for how long; see :func:`lock_info`."""
    # Every master's answer is wanted, not a majority's, as for a clean-up.
    round_ = spec.round(Command.run_script(_scripts.INSPECT, [spec.key], []), cleanup=True)
    yield round_
    return Result(True, round_.ordered_outcomes(), round_.granted, rounds=(round_,))


def force_release_flow(spec: LockSpec) -> Flow:
    """Delete ``spec.key`` on every master whatever token holds it; see :func:`lock_info`.

    For operators only: a holder still at work goes on believing it holds the lock while
    the next one acquires it, exactly as if its lock had expired under it.
    """
    command = Command.run_script(_scripts.FORCE_RELEASE, [spec.key, order_key(spec.key)], [release_channel(spec.key)])
    round_ = spec.round(command, cleanup=True)
    yield round_
    return Result(True, round_.ordered_outcomes(), round_.granted, rounds=(round_,))


def lock_info(spec: LockSpec, result: Result) -> LockInfo:
    """The :class:`LockInfo` from the round of :func:`inspect_flow` or :func:`force_release_flow`."""
    (round_,) = result.rounds
    masters = []
    for node, outcome in zip(round_.targets, round_.ordered_outcomes(), strict=True):
        reply = round_.replies.get(node)
        if outcome.status is not NodeStatus.GRANTED or not isinstance(reply, list | tuple) or len(reply) != 3:
            masters.append(MasterInfo(outcome.node, False, error=outcome.detail or outcome.status.value))
            continue
        _, value, pttl = reply
        if value is None:
            masters.append(MasterInfo(outcome.node, True))
            continue
        token = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        ttl = math.inf if int(pttl) == -1 else max(0, int(pttl)) / 1000
        masters.append(MasterInfo(outcome.node, True, token, ttl))
    return LockInfo(spec.key, spec.quorum, tuple(masters))
