"""The protocol's vocabulary: quorum and validity arithmetic, commands, rounds, pauses, results.

Where it sits: at the bottom of :mod:`redlock._protocol`, below the lock kinds
(:mod:`redlock._protocol.kinds`) and the flows built of these requests
(:mod:`redlock._protocol.flows`: acquire, extend, release, ...). Nothing here touches a
socket or reads a clock. Time and each master's reply are inputs, so every decision can be
tested exhaustively (see tests/test_core.py) and the same code drives both the synchronous
and the asyncio client.

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

import math
import random
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from redlock._protocol import scripts as _scripts
from redlock.exceptions import NodeOutcome, NodeStatus


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


# Command, NativeForm, Result, Line and Pause are values, never changed once made
# (dataclasses.replace makes another), yet not frozen: a frozen dataclass sets each field
# through object.__setattr__, four times the work of a plain one, and a lock+unlock made
# seven of them (a release's command has two native forms and three more commands; a
# blocking acquire adds a Line and a Pause): 60,000 instructions, 7 % of the whole
# operation, in the sources' build.
@dataclass(slots=True)
class Command:
    """One Redis command, as sent; scripts go as EVALSHA and have an EVAL fallback.

    A script command may also have ``native`` forms: the same compare-and-act as a command
    built into newer servers, sent instead of the script to each master that has it (the
    connection policy chooses per master). A native form's ``script`` is the script it
    stands in for, whose flags (``idempotent``, ``removes_token``) it shares.
    """

    args: tuple[Arg, ...]
    #: The script it runs (by EVALSHA, or by EVAL once a master answered NOSCRIPT).
    script: _scripts.Script | None = None
    #: Its native forms, the one to prefer first (empty: every master runs ``args``).
    native: tuple[NativeForm, ...] = ()

    # (Written out, not generated, for every class made per operation: mypyc compiles a
    # class's own __init__ but runs the one dataclasses generates as Python, a few thousand
    # instructions per object in the compiled build.)
    def __init__(
        self, args: tuple[Arg, ...], script: _scripts.Script | None = None, native: tuple[NativeForm, ...] = ()
    ) -> None:
        self.args = args
        self.script = script
        self.native = native

    @property
    def idempotent(self) -> bool:
        """Safe to send again when its fate is unknown (see :attr:`_scripts.Script.idempotent`)."""
        return self.script is not None and self.script.idempotent

    @property
    def removes_token(self) -> bool:
        """A release: sent again, "our token is not there" may be its own first send's work."""
        return self.script is not None and self.script.removes_token

    @classmethod
    def set_nx_px(cls, key: str, token: str, ttl_ms: int) -> Command:
        return cls(("SET", key, token, "NX", "PX", ttl_ms))

    @classmethod
    def run_script(
        cls, script: _scripts.Script, keys: Sequence[Arg], args: Sequence[Arg], native: tuple[NativeForm, ...] = ()
    ) -> Command:
        return cls(("EVALSHA", script.sha, len(keys), *keys, *args), script, native)

    @property
    def waits_for_form(self) -> bool:
        """Sent only once the master said which form it runs: an extend, whose forms must not
        mix on one connection (docs/algorithm.md, "Native commands", says why). A release
        goes at once in either form: it compares our token, so its order matters only behind
        the SET it undoes, which the connection keeps, and a clean-up held back could be
        lost with a connection closed before the master answered."""
        return bool(self.native) and not self.removes_token

    @property
    def is_native(self) -> bool:
        """A native form: a built-in command doing a script's work (see :class:`NativeForm`)."""
        return self.script is not None and self.args[0] not in ("EVALSHA", "EVAL")

    def without_script_cache(self) -> Command:
        """The EVAL form of a script command, for a master that answered NOSCRIPT."""
        if self.script is None or self.args[0] != "EVALSHA":
            raise ValueError("only script commands sent by EVALSHA have an EVAL form")
        return Command(("EVAL", self.script.source, *self.args[2:]), self.script)


# Native commands a master may have, as the names its capabilities go by (see
# redlock._protocol.facts.native_commands): each does exactly what one of our scripts does for a lock
# on one name, without Lua.
#: ``DELIFEQ key value`` (Valkey 9.0+): delete if the value is ours; 1 or 0.
DELIFEQ = "DELIFEQ"
#: ``DELEX key IFEQ value`` (Redis 8.4+): the same.
DELEX = "DELEX"
#: ``SET key value IFEQ value PX ms`` (Valkey 8.1+, Redis 8.4+): reset the ttl if the value
#: is ours; OK, or nil when it is not (a missing key is never created).
SET_IFEQ = "SET IFEQ"


@dataclass(slots=True)  # (not frozen: see Command)
class NativeForm:
    """A script command's work as a command built into newer servers, for masters that have
    ``needs``. ``then`` goes right behind it on the same connection, its reply unread (the
    announcement of a release to waiters, which the script makes in the same step)."""

    needs: str
    command: Command
    then: Command | None = None

    def __init__(self, needs: str, command: Command, then: Command | None = None) -> None:  # (see Command)
        self.needs = needs
        self.command = command
        self.then = then


def native_form(command: Command, available: frozenset[str]) -> NativeForm | None:
    """The native form of ``command`` that a master with ``available`` runs; None: the script."""
    for form in command.native:
        if form.needs in available:
            return form
    return None


#: The statuses every reply is mapped to, as module constants for the paths run per command
#: and per reply: on Python 3.11 ``NodeStatus.GRANTED`` is looked up through the slot hook of
#: EnumType.__getattr__, about 110 ns, ten times a plain attribute (mypyc's code too).
GRANTED: Final = NodeStatus.GRANTED
DENIED: Final = NodeStatus.DENIED
ERROR: Final = NodeStatus.ERROR
TIMEOUT: Final = NodeStatus.TIMEOUT

#: The outcomes without a detail, one of each: they are immutable, and every reply of every
#: round records one (a new frozen dataclass per reply cost 4 % of a lock+unlock).
_OUTCOMES: dict[tuple[str, NodeStatus], NodeOutcome] = {}
#: Bounds the cache for a process that talks to ever new masters.
_OUTCOMES_KEPT = 4096


def _outcome(node: str, status: NodeStatus) -> NodeOutcome:
    outcome = _OUTCOMES.get((node, status))
    if outcome is None:
        outcome = NodeOutcome(node, status)
        if len(_OUTCOMES) < _OUTCOMES_KEPT:
            _OUTCOMES[(node, status)] = outcome
    return outcome


def reply_status(reply: object) -> NodeStatus:
    """Map a master's reply to SET NX / to our scripts onto granted or denied."""
    if reply == b"OK":  # (the most common reply, first)
        return GRANTED
    if isinstance(reply, (list, tuple)) and reply:  # FENCED_ACQUIRE: {1, counter}
        reply = reply[0]
    if reply is None or reply == 0:
        return DENIED
    if reply in (b"OK", "OK") or reply == 1:
        return GRANTED
    return ERROR


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
    #: Runs to its end through the caller's cancellation (the rollback of an interrupted
    #: acquire: our keys must go), which a driver delivers once the flow is done.
    shielded: bool = False
    outcomes: dict[int, NodeOutcome] = field(default_factory=dict)
    replies: dict[int, object] = field(default_factory=dict)
    #: Kept as outcomes are recorded: every reply of every round asks for them.
    granted: int = field(default=0, init=False)
    #: Where the connection policy puts the seconds from sending to each master's reply
    #: (late ones too) when not None: redlock._api.telemetry sets it for the rounds it reports.
    latencies: Latencies | None = field(default=None, repr=False)
    #: Called once, under the driver's lock, when the grants first make a majority, before
    #: the round settles (a handover wakes its waiter there: see redlock._protocol.flows.release_flow).
    on_majority: Callable[[], None] | None = field(default=None, repr=False)

    # (Written out rather than generated: mypyc runs a dataclass's generated __init__ as
    # Python, and a round is made for every command; see redlock._protocol.connection.InFlight.)
    def __init__(
        self,
        command: Command,
        targets: tuple[int, ...],
        node_names: tuple[str, ...],
        quorum: int,
        timeout: float,
        *,
        wait_for_all: bool = False,
        credited: int = 0,
        patience: float = 0.0,
        overtime: bool = False,
        cleanup: bool = False,
        shielded: bool = False,
        outcomes: dict[int, NodeOutcome] | None = None,
        replies: dict[int, object] | None = None,
        latencies: Latencies | None = None,
        on_majority: Callable[[], None] | None = None,
    ) -> None:
        self.command = command
        self.targets = targets
        self.node_names = node_names
        self.quorum = quorum
        self.timeout = timeout
        self.wait_for_all = wait_for_all
        self.credited = credited
        self.patience = patience
        self.overtime = overtime
        self.cleanup = cleanup
        self.shielded = shielded
        self.outcomes = {} if outcomes is None else outcomes
        self.replies = {} if replies is None else replies
        self.granted = 0
        self.latencies = latencies
        self.on_majority = on_majority

    def awaits(self, node: int) -> bool:
        """Whether ``node``'s outcome is still to be recorded in this round."""
        return node not in self.outcomes and node in self.targets

    def record(self, node: int, status: NodeStatus, detail: str = "", reply: object = None) -> None:
        outcomes = self.outcomes
        if node in outcomes or node not in self.targets:
            raise ValueError(f"node {node} is not awaited in this round")
        outcomes[node] = (
            _outcome(self.node_names[node], status)
            if not detail
            else NodeOutcome(self.node_names[node], status, detail)
        )
        self.replies[node] = reply
        if status is GRANTED:
            self.granted += 1
            if self.on_majority is not None and self.granted + self.credited >= self.quorum:
                reached, self.on_majority = self.on_majority, None
                reached()

    def record_reply(self, node: int, reply: object) -> None:
        # (OK, the commonest reply, without the mapping's call.)
        status = GRANTED if reply == b"OK" else reply_status(reply)
        self.record(node, status, f"unexpected reply {reply!r}" if status is ERROR else "", reply)

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
        """So many masters refuse us for configuration (credentials, ACL, TLS; a replica, a
        cluster node) that no majority is possible until someone fixes it: retrying would
        not help."""
        return self.count(NodeStatus.MISCONFIGURED) > len(self.node_names) - self.quorum

    def ordered_outcomes(self) -> tuple[NodeOutcome, ...]:
        """One outcome per target, in master order; those not waited for say so."""
        outcomes = self.outcomes
        return tuple(
            outcomes[node] if node in outcomes else NodeOutcome(self.node_names[node], NodeStatus.NOT_AWAITED)
            for node in self.targets
        )


@dataclass(slots=True)  # (not frozen: see Command)
class Line:
    """A blocking acquire's place in its client's line for one lock name.

    The blocking acquires of one client on one name take turns at the masters: while the
    lock was last found held, only the first in line tries on its timer; the others wait
    (no traffic) until they are first, a release wakes them, or ``patience`` runs out,
    looking again every ``step``. A hundred local waiters then cost the masters what one
    does. Where a try found no majority to answer (not a holder), each tries on its own.
    """

    #: Seconds until this acquire gives up (None: it does not).
    patience: float | None
    #: How often a waiter that is not first looks again.
    step: float
    #: What the try before this pause found: the lock held by others (True), no majority
    #: answering (False), or nothing yet (None: the pause before its first try).
    held: bool | None


#: A holding passes from one Lock of a client to that client's next waiter in line by a
#: swap at most this many times in a row, and for at most this long from the first swap,
#: before a release lets every waiter, of every client, try again (see :class:`Handoff`).
HANDOFF_CHAIN = 16
HANDOFF_CHAIN_SECONDS = 1.0


class Handoff:
    r"""A waiter in line's offer to take a holding over from a Lock of the same client.

    When a Lock releases a name that another acquire of the same client waits for, one
    round hands the holding over instead of three hops (the release, the masters'
    announcement, a new acquire): each master swaps the releaser's token for the waiter's,
    only where the releaser's token still holds (``_scripts.HANDOFF``). The waiter holds if
    a majority swapped and the validity counted from the swap's start is left, exactly as
    if its own ``SET NX`` had been sent then (docs/algorithm.md, "Handing a lock over").

    The acquire flow makes one per blocking acquire; the waiter's driver marks it ``PARKED``
    while the flow waits in a pause (only then may a releaser ``claim`` it); the releaser's
    flow runs the swap and ``deliver``\ s the round as soon as a majority swapped (the round
    goes on recording the last replies), waking the waiter through ``wake``; the waiter's
    flow ``take``\ s it when it wakes. A delivery names the token of the claim it answers: a
    round that outlived its claim delivers nothing to a later one. A waiter that leaves
    while claimed ``ABANDONED``\ s it: its token may land, so whoever finds the abandonment
    deletes it. A claim not delivered by ``expires_at`` (the releaser was interrupted) is
    given up by the waiter, which deletes the token the swap may have written.
    """

    # (Final ints, not an enum or a tuple unpacked: what mypyc compiles as class constants.)
    IDLE: Final = 0
    PARKED: Final = 1
    CLAIMED: Final = 2
    DELIVERED: Final = 3
    ABANDONED: Final = 4

    __slots__ = ("_guard", "expires_at", "new_token", "round", "started", "state", "token", "ttl_ms", "wake")

    def __init__(self, new_token: Callable[[], str], ttl_ms: int) -> None:
        #: Draws the waiter's token (and marks it outstanding: the acquire's Tokens).
        self.new_token = new_token
        #: How long the masters keep the waiter's key (its own ttl and lock delay).
        self.ttl_ms = ttl_ms
        self.state = Handoff.IDLE
        #: The waiter's token for the swap under way.
        self.token = ""
        #: The swap, once delivered, and the time it started (the waiter's validity counts
        #: from there).
        self.round: Round | None = None
        self.started = 0.0
        #: Until when a claimed waiter waits for the swap's round.
        self.expires_at = 0.0
        #: Wakes the waiter (set by the line that claimed it); called under the driver's
        #: lock, by the swap's round once a majority swapped.
        self.wake: Callable[[], None] | None = None
        # The releaser's thread delivers while the waiter's may give up on the claim: one
        # of the two wins, never both (a swap delivered after the waiter deleted its token
        # would make it hold nothing).
        self._guard = threading.Lock()

    def park(self) -> None:
        """The waiter waits in a pause: a releaser may claim it."""
        with self._guard:
            if self.state == Handoff.IDLE:
                self.state = Handoff.PARKED

    def unpark(self) -> None:
        """The waiter tries on its own now (unless claimed meanwhile)."""
        with self._guard:
            if self.state == Handoff.PARKED:
                self.state = Handoff.IDLE

    def claim(self, expires_at: float) -> bool:
        """The releaser takes this waiter, if parked: it waits for the swap until ``expires_at``."""
        with self._guard:
            if self.state != Handoff.PARKED:
                return False
            self.token = self.new_token()
            self.state, self.expires_at = Handoff.CLAIMED, expires_at
            return True

    def deliver(self, round_: Round, started: float, token: str) -> bool:
        """The swap of ``token`` is done: False if the waiter gave up on it meanwhile (the
        token is the releaser's to delete), else the waiter takes it when it wakes."""
        with self._guard:
            if self.state != Handoff.CLAIMED or self.token != token:
                return False
            self.round, self.started, self.state = round_, started, Handoff.DELIVERED
            return True

    def wake_waiter(self) -> None:
        """Under the driver's lock: wake the waiter of the current claim, once (a later
        claim sets ``wake`` anew)."""
        wake, self.wake = self.wake, None
        if wake is not None:
            wake()

    def abandon(self) -> bool:
        """The waiter gives up on a claim (or leaves the line): True if a swap was under way."""
        with self._guard:
            claimed = self.state == Handoff.CLAIMED
            if self.state in (Handoff.PARKED, Handoff.CLAIMED):
                self.state = Handoff.ABANDONED
            return claimed

    def take(self) -> Round | None:
        """The waiter's side, when it wakes: the delivered swap, once; None if none came.
        A claim it gave up on goes back to idle (the waiter deletes its token)."""
        with self._guard:
            round_, self.round = self.round, None
            delivered = self.state == Handoff.DELIVERED
            if self.state in (Handoff.DELIVERED, Handoff.ABANDONED):
                self.state = Handoff.IDLE
            return round_ if delivered else None


@dataclass(slots=True)  # (not frozen: see Command)
class Pause:
    """Wait this long; a driver that listens for releases may wake early when ``wake_on``
    (a lock key) is released, and one that runs a renewer stops it early on release. A
    blocking acquire's pauses carry its place in ``line`` (see :class:`Line`), and its
    offer to take the lock over from a releasing Lock of the same client (``handoff``)."""

    seconds: float
    wake_on: str | None = None
    line: Line | None = None
    handoff: Handoff | None = None

    def __init__(  # (see Command)
        self, seconds: float, wake_on: str | None = None, line: Line | None = None, handoff: Handoff | None = None
    ) -> None:
        self.seconds = seconds
        self.wake_on = wake_on
        self.line = line
        self.handoff = handoff


Request = Round | Pause
Flow = Generator[Request, float, "Result"]


@dataclass(slots=True)  # (not frozen: see Command)
class Result:
    """How a flow ended: held (with its deadline) or not, and what the masters said."""

    ok: bool
    outcomes: tuple[NodeOutcome, ...]
    granted: int
    deadline: float = 0.0
    quorum_unreachable: bool = False
    #: Too many masters refuse us (credentials, permissions, TLS) or are unfit for any majority.
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

    def __init__(  # (see Command)
        self,
        ok: bool,
        outcomes: tuple[NodeOutcome, ...],
        granted: int,
        *,
        deadline: float = 0.0,
        quorum_unreachable: bool = False,
        misconfigured: bool = False,
        token_gone: bool = False,
        timed_out: bool = False,
        attempts: int = 1,
        fencing_token: int | None = None,
        finished_at: float = 0.0,
        token: str | None = None,
        rounds: tuple[Round, ...] = (),
    ) -> None:
        self.ok = ok
        self.outcomes = outcomes
        self.granted = granted
        self.deadline = deadline
        self.quorum_unreachable = quorum_unreachable
        self.misconfigured = misconfigured
        self.token_gone = token_gone
        self.timed_out = timed_out
        self.attempts = attempts
        self.fencing_token = fencing_token
        self.finished_at = finished_at
        self.token = token
        self.rounds = rounds


#: Where every key this library keeps beside a lock's own lives (see
#: :data:`redlock._protocol.scripts.NAMESPACE`, and "keys of others" there).
NAMESPACE = _scripts.NAMESPACE
FENCE_PREFIX = NAMESPACE + "fence:"
ORDER_PREFIX = NAMESPACE + "order:"
READERS_PREFIX = NAMESPACE + "readers:"
INTENT_PREFIX = NAMESPACE + "intent:"
#: Where 0.1.0 and earlier kept the fencing counters (pottery's namespace, see
#: :data:`NAMESPACE`). A fenced acquire still reads the counter there, never writes it, so
#: that fencing tokens keep growing across an upgrade (docs/migration.md).
LEGACY_FENCE_PREFIX = "redlock:fence:"
#: Lock names may not start with these: such a lock's key would be another lock's
#: bookkeeping key.
RESERVED_PREFIXES = (NAMESPACE,)
READERS_MARK = _scripts.READERS_MARK


def fence_key(key: str) -> str:
    """Where each master keeps the highest fencing token it has seen for ``key``."""
    return FENCE_PREFIX + key


def legacy_fence_key(key: str) -> str:
    """Where 0.1.0 and earlier kept ``key``'s fencing counter: read, never written."""
    return LEGACY_FENCE_PREFIX + key


def order_key(key: str) -> str:
    """Where each master keeps which extend of the current holding of ``key`` it applied
    last, so that an extend arriving late never undoes a newer one."""
    return ORDER_PREFIX + key


def readers_key(key: str) -> str:
    """Where each master keeps the readers of the read-write lock ``key`` (a sorted set of
    their tokens, each scored by the time it expires on that master's clock)."""
    return READERS_PREFIX + key


def intent_key(key: str) -> str:
    """Where each master marks that a writer of the read-write lock ``key`` waits for its
    readers to leave: while it is there, no new reader is let in."""
    return INTENT_PREFIX + key


def release_channel(key: str) -> str:
    """The channel a release of ``key`` is announced on, for waiters to retry at once."""
    return f"redlock:released:{key}"


def wakes_all(channel: str) -> bool:
    """Whether an announcement on ``channel`` wakes every waiter of a client, not just one:
    the channel readers of a read-write lock wait on (``release_channel(readers_key(key))``),
    since readers share, and all of them may get in when the writer leaves."""
    return channel.startswith(release_channel(READERS_PREFIX))
