"""The lock flows: acquire, extend, release, rollback, renewal, inspection; and the lease.

Where it sits: above the protocol's vocabulary (:mod:`redlock._protocol.core`: rounds, pauses,
results, the arithmetic) and the lock kinds (:mod:`redlock._protocol.kinds`), below everything that
does I/O. Like the core, nothing here touches a socket or reads a clock: see the theory of
operation in :mod:`redlock._protocol.core`. The flows are the same for every kind of lock; only the
commands (and the quorum) the kind gives them differ.
"""

from __future__ import annotations

import collections
import math
import random
import threading
from collections.abc import Callable, Generator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TypeVar

from redlock._protocol import scripts as _scripts
from redlock._protocol.core import (
    EXPIRY_PRECISION,
    READERS_MARK,
    WOKEN_MARGIN,
    Command,
    Flow,
    Handoff,
    Line,
    Pause,
    Request,
    Result,
    Round,
    drift_allowance,
    intent_key,
    order_key,
    readers_key,
    release_channel,
    retry_delays,
    ttl_milliseconds,
    validity_left,
)
from redlock._protocol.kinds import PLAIN, FencedLock, LockKind
from redlock.exceptions import MasterMisconfigured, NodeOutcome, NodeStatus

T = TypeVar("T")


@dataclass(slots=True)
class LockSpec:
    """What every flow needs to know about one lock and the cluster it lives on.

    Never changed once made (``dataclasses.replace`` makes another), yet not frozen: a
    frozen dataclass sets each field through ``object.__setattr__``, which cost 17,000
    instructions per new Lock (over five times a plain one), and every Lock makes a spec.
    """

    key: str
    ttl: float
    node_names: tuple[str, ...]
    node_timeout: float
    clock_drift_factor: float
    retry_delay: float
    unavailable_timeout: float
    #: What kind of lock this is: its commands and its quorum rule.
    kind: LockKind = PLAIN
    #: Extra life of the keys on the masters beyond ``ttl``, never counted in the validity
    #: (Chubby's and Consul's lock-delay): see :meth:`key_milliseconds`.
    lock_delay: float = 0.0
    #: Replaces the kind's own quorum when not 0. Only the chaos harness's self-test sets it,
    #: to show that a semaphore counting plain majorities is caught letting in too many.
    forced_quorum: int = 0
    #: How many masters must grant it: a majority, or more for a semaphore. Worked out once
    #: (every round, and each release twice more, asks), as is every master's index.
    quorum: int = field(init=False, repr=False, compare=False)
    all_nodes: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.quorum = self.forced_quorum or self.kind.quorum(len(self.node_names))
        self.all_nodes = tuple(range(len(self.node_names)))

    def named(self, key: str) -> LockSpec:
        """This spec for a lock on ``key`` instead (one name, checked): the Locks a client
        makes with the same settings differ only in it, so one checked spec serves them all."""
        return LockSpec(
            key,
            self.ttl,
            self.node_names,
            self.node_timeout,
            self.clock_drift_factor,
            self.retry_delay,
            self.unavailable_timeout,
            self.kind,
            self.lock_delay,
            self.forced_quorum,
        )

    @property
    def fencing(self) -> bool:
        return self.kind.fencing

    @property
    def names(self) -> tuple[str, ...]:
        """A multi-name lock's names, sorted and unique (``key`` is the first); () for one name."""
        return self.kind.names

    @property
    def limit(self) -> int:
        """A semaphore's number of permits; 0 for a lock."""
        return self.kind.limit

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key this lock holds on each master."""
        return self.kind.keys(self.key)

    @property
    def resource(self) -> str:
        """The name of what is locked, as messages show it (several names joined by ", ")."""
        return ", ".join(self.keys)

    def round(
        self, command: Command, targets: Sequence[int] | None = None, *, cleanup: bool = False, shielded: bool = False
    ) -> Round:
        """A round of ``command``; a clean-up waits for every master (up to the timeout)."""
        return Round(
            command=command,
            targets=self.all_nodes if targets is None else tuple(targets),
            node_names=self.node_names,
            quorum=self.quorum,
            timeout=self.node_timeout,
            wait_for_all=cleanup,
            cleanup=cleanup,
            shielded=shielded,
        )

    def deadline_after(self, started: float, ttl: float | None = None) -> float:
        """The monotonic time until which a lock set at ``started`` may be relied on."""
        ttl = self.ttl if ttl is None else ttl
        return started + ttl - drift_allowance(ttl, self.clock_drift_factor)

    def key_milliseconds(self, ttl: float) -> int:
        """How long the masters keep a key set or extended for ``ttl``: ``ttl + lock_delay``.

        The holder counts its validity from ``ttl`` alone, so a holder that stops (crashed,
        hung, partitioned, paused) without releasing still keeps everyone else out for
        ``lock_delay`` after its validity ended: its late writes land while nobody else holds
        the lock. A release deletes the key at once, so a holder that releases costs nobody
        the delay.
        """
        return ttl_milliseconds(ttl + self.lock_delay)

    def acquire_command(self, token: str) -> Command:
        return self.kind.acquire(self.key, token, self.key_milliseconds(self.ttl))

    def extend_command(self, token: str, ttl: float, extend_id: int, *, adopt: bool = False) -> Command:
        return self.kind.extend(self.key, token, self.key_milliseconds(ttl), extend_id, adopt=adopt)

    def release_command(self, token: str, *, notify: bool = False) -> Command:
        """Delete our token (``notify``: and announce it to waiters; a rollback does not)."""
        return self.kind.release(self.key, token, notify=notify)

    def restore_command(self, token: str, ttl: float, fencing_token: int | None) -> Command:
        """Write our holding back, for ``ttl`` more seconds, where a master lost it."""
        return self.kind.restore(self.key, token, self.key_milliseconds(ttl), fencing_token)


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
    #: The loss was logged, counted and told to ``on_lost`` (once per lease, whoever finds
    #: it first: :meth:`notice_loss`).
    loss_noticed: bool = False
    #: What found the loss, in words (for the LockLost a later release raises).
    loss_why: str = ""
    #: The rounds of the tries of its release so far (a release may be retried).
    release_rounds: tuple[Round, ...] = ()
    #: The monotonic time the holding may last until at most (``max_hold`` after it began):
    #: no extend moves the deadline past it (see :func:`held_ttl`).
    hold_until: float = math.inf
    #: Set once no extend may move the deadline any more because of ``hold_until``: the
    #: loss that comes at the deadline is the bounded hold's, reported as such.
    held_out: bool = False
    #: The waiter of this client its release hands the holding over to (see
    #: :class:`~redlock._protocol.core.Handoff`), claimed when the release begins; and whether the
    #: release is instead one every client's waiters hear of alike (a chain's end).
    handoff: Handoff | None = None
    release_to_all: bool = False
    _extends: dict[int, _Extend] = field(default_factory=dict, init=False, repr=False)
    #: Extends are numbered from 1, in the order they begin; the masters apply an extend
    #: only if it is newer than the last one they applied (see _scripts.EXTEND). The last
    #: number given (a plain int: every lease is made, few are extended).
    _last_extend_id: int = field(default=0, init=False, repr=False)
    #: The renewer's thread and the user's may extend at once.
    _guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    # (Written out, not generated: one is made per acquire, and mypyc runs a dataclass's
    # generated __init__ as Python; see redlock._protocol.core.Command. It takes every init field, so
    # that dataclasses.replace works; the extends in flight and their guard are a new
    # lease's own.)
    def __init__(
        self,
        token: str,
        deadline: float,
        fencing_token: int | None = None,
        *,
        lost: bool = False,
        ended: bool = False,
        release_unconfirmed: bool = False,
        loss_reported: bool = False,
        loss_noticed: bool = False,
        loss_why: str = "",
        release_rounds: tuple[Round, ...] = (),
        hold_until: float = math.inf,
        held_out: bool = False,
        handoff: Handoff | None = None,
        release_to_all: bool = False,
    ) -> None:
        self.token = token
        self.deadline = deadline
        self.fencing_token = fencing_token
        self.lost = lost
        self.ended = ended
        self.release_unconfirmed = release_unconfirmed
        self.loss_reported = loss_reported
        self.loss_noticed = loss_noticed
        self.loss_why = loss_why
        self.release_rounds = release_rounds
        self.hold_until = hold_until
        self.held_out = held_out
        self.handoff = handoff
        self.release_to_all = release_to_all
        self._extends = {}
        self._last_extend_id = 0
        self._guard = threading.Lock()

    def notice_loss(self) -> bool:
        """Mark the lease lost; True for the first caller only (the renewer's thread and the
        user's may find the loss at once), who then reports it."""
        with self._guard:
            self.lost = True
            first, self.loss_noticed = not self.loss_noticed, True
            return first

    def begin_extend(self, candidate: float) -> int:
        """Register an extend that will give ``candidate`` if it succeeds; its number."""
        with self._guard:
            floor = candidate
            for other in self._extends.values():
                floor = min(floor, other.candidate)
                other.floor = min(other.floor, candidate)
            extend_id = self._last_extend_id = self._last_extend_id + 1
            self._extends[extend_id] = _Extend(candidate, floor)
            return extend_id

    def end_extend(self, extend_id: int, *, ok: bool, may_have_landed: bool) -> None:
        """Account for a finished extend (or one abandoned midway).

        A success moves the deadline to the lowest candidate among overlapping extends (a
        user's ``extend(ttl=1)`` racing the renewer must not leave the holder counting on
        the renewer's longer ttl). An older extend that lands after this one is refused by
        the masters, which remember the number of the newest extend they applied (the
        script's form; the native form cannot land after a newer one: docs/algorithm.md,
        "Native commands", says why, so the number is not needed there). A failure
        that may have reset the ttl on some master still caps the deadline at its own
        candidate: enough masters may now carry the shorter ttl for the old deadline to be
        wrong.
        """
        with self._guard:
            # Forgotten last, and once: a flow interrupted in here (Ctrl-C) accounts for the
            # extend again from its clean-up, as one that may have landed, which can only
            # lower the deadline to the extend's own.
            extend = self._extends.get(extend_id)
            if extend is None:
                return
            if not self.lost:
                if ok:
                    self.deadline = extend.floor
                elif may_have_landed:
                    self.deadline = min(self.deadline, extend.candidate)
            del self._extends[extend_id]


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
    max_attempts: int | None = None,
) -> Flow:
    """Try to set ``token`` on a majority; retry while ``blocking`` and time remains.

    ``timeout`` bounds the whole wait, and ``max_attempts`` the number of attempts (each one
    round of SETs; node-redlock's ``retryCount`` + 1), whichever runs out first; with
    ``timeout=None`` a blocking acquire retries
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
    in_line = blocking and spec.kind.waits_in_line
    # While it waits in line, a Lock of this client that releases the name may hand the
    # holding over to it in one round (see core.Handoff).
    handoff = Handoff(tokens.fresh, spec.key_milliseconds(spec.ttl)) if in_line and spec.kind.hands_over else None
    if in_line:
        # Behind this client's other acquires of the name, if any (see core.Line): the
        # first tries at once.
        first = Line(_patience(give_up_at, now), spec.retry_delay, None)
        now = yield Pause(0.0, wake_on=spec.key, line=first, handoff=handoff)
        handed, now = yield from _handed_over(spec, tokens, handoff, now, attempts + 1)
        if handed is not None:
            return handed
    while True:
        attempts += 1
        token = tokens.fresh()
        started = now
        deadline = spec.deadline_after(started)
        acquire = spec.round(spec.acquire_command(token))
        now = yield acquire
        held = acquire.majority_granted and deadline > now
        fencing_token = None
        if held and isinstance(spec.kind, FencedLock):
            fencing_token = fencing_token_from(acquire)
            write_back = spec.round(spec.kind.raise_fence(spec.key, fencing_token))
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
            now = yield spec.round(spec.release_command(token), undo, cleanup=True)
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
            return (yield from _given_up(spec, token, failure))
        if max_attempts is not None and attempts >= max_attempts:
            return (yield from _given_up(spec, token, failure))
        if unreachable_since is not None and timeout is None and now - unreachable_since >= spec.unavailable_timeout:
            return (yield from _given_up(spec, token, failure))
        delay = next(delays)
        if woken:
            # A release on one master woke us, yet a majority refused: the release was sent
            # to all masters at once, and the others may not have run it yet (the other
            # announcements of it arrived while we were not listening). Look again once each
            # master has had node_timeout to run it, not a whole retry delay later.
            delay = min(delay, spec.node_timeout)
        if give_up_at is not None:
            if now >= give_up_at:
                timed_out = Result(
                    False,
                    failure.outcomes,
                    failure.granted,
                    quorum_unreachable=unreachable,
                    timed_out=True,
                    attempts=attempts,
                )
                return (yield from _given_up(spec, token, timed_out))
            delay = min(delay, give_up_at - now)
        resume_at = now + delay
        line = Line(_patience(give_up_at, now), spec.retry_delay, not unreachable) if in_line else None
        now = yield Pause(delay, wake_on=spec.kind.wake_key(spec.key, acquire), line=line, handoff=handoff)
        woken = now < resume_at - WOKEN_MARGIN
        handed, now = yield from _handed_over(spec, tokens, handoff, now, attempts + 1)
        if handed is not None:
            return handed


def _handed_over(
    spec: LockSpec, tokens: Tokens, handoff: Handoff | None, now: float, attempts: int
) -> Generator[Request, float, tuple[Result | None, float]]:
    """After a pause in line: the holding a Lock of this client handed over meanwhile, if
    its swap made it ours (held, as an acquire sent at the swap's start would be: the
    validity counts from there); else None, once whatever of our token the swap may have
    written is taken back (a failed handover is a failed attempt, rolled back alike)."""
    if handoff is None:
        return None, now
    abandoned = handoff.state == Handoff.ABANDONED
    swap = handoff.take()
    token = handoff.token
    if swap is not None:
        deadline = spec.deadline_after(handoff.started)
        if swap.majority_granted and deadline > now:
            # (Counted from the outcomes taken, not swap.granted: a swap delivered on its
            # majority may still be recording its last replies.)
            outcomes = swap.ordered_outcomes()
            granted = sum(1 for outcome in outcomes if outcome.status is NodeStatus.GRANTED)
            return Result(True, outcomes, granted, deadline=deadline, attempts=attempts, token=token), now
        undo = [node for node in spec.all_nodes if swap.outcomes.get(node, _UNKNOWN).status is not NodeStatus.DENIED]
        if undo:
            now = yield spec.round(spec.release_command(token), undo, cleanup=True)
        tokens.settled(token)
    elif abandoned:
        # Claimed, but the swap never came in time (its releaser was interrupted, or is
        # stuck): it may still land.
        now = yield spec.round(spec.release_command(token), cleanup=True)
        tokens.settled(token)
    return None, now


def _given_up(spec: LockSpec, token: str, failure: Result) -> Flow:
    """End an acquire that gives up with ``failure``; a kind whose refusals leave a mark of
    ours (a writer's intent) takes back the last attempt's everywhere first, announcing it
    to waiters. (An earlier attempt's mark is replaced by a later one on the same master, or
    deleted by a grant there; one a master kept otherwise lapses with its ttl.)"""
    if spec.kind.marks_refusals:
        yield spec.round(spec.release_command(token, notify=True), cleanup=True)
    return failure


def _patience(give_up_at: float | None, now: float) -> float | None:
    return None if give_up_at is None else max(0.0, give_up_at - now)


def extend_flow(spec: LockSpec, lease: Lease, ttl: float, now: float, *, adopt: bool = False) -> Flow:
    """Reset the ttl of our token on a majority; validity counts from the start of the extend.

    The lease's deadline is updated here (see :meth:`Lease.end_extend`), also when the
    flow is abandoned midway (closed by its driver): its commands may still land. With
    ``adopt``, this is the first extend of a Lock taking over a holding known by its token
    (``lease`` is new, its deadline the start: nothing to rely on until a majority confirms).
    """
    started = now
    extend_id = lease.begin_extend(spec.deadline_after(started, ttl))
    finished = False
    try:
        extend = spec.round(spec.extend_command(lease.token, ttl, extend_id, adopt=adopt))
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
    outcomes = extend.ordered_outcomes()
    lost_it = lost_keys(extend)
    # The lease's deadline, not this extend's: an overlapping shorter extend may have set it
    # lower, and a restored key need not outlive what the holder relies on.
    left = lease.deadline - now
    if ok and lost_it and left > 0 and not (lease.ended or lease.lost):
        # Confirmed by a majority, which alone decided ``ok`` and the deadline: the masters
        # that had no key at all (restarted empty, most likely) get ours back, only where the
        # key is still free, for the validity left. Never counted: it only restores a copy of
        # a lease the majority already proves (docs/algorithm.md, "Restoring a key a master
        # lost"), so that a rolling restart of every master does not wear the lock down to a
        # minority.
        restore = Round(
            command=spec.restore_command(lease.token, left, lease.fencing_token),
            targets=lost_it,
            node_names=spec.node_names,
            quorum=spec.quorum,
            timeout=spec.node_timeout,
            # Every master asked is waited for (up to node_timeout): no count decides it.
            wait_for_all=True,
        )
        now = yield restore
    return Result(
        ok,
        outcomes,
        extend.granted,
        deadline=deadline if ok else 0.0,
        token_gone=gone,
        finished_at=now,
    )


def lost_keys(extend: Round) -> tuple[int, ...]:
    """The masters that answered an extend with no key of the lock at all (the scripts'
    nil). The native ``SET IFEQ`` answers nil for another holder's token too: there a
    restore is tried as well, and its ``SET NX`` finds the key taken and changes nothing."""
    return tuple(
        sorted(
            node
            for node, outcome in extend.outcomes.items()
            if outcome.status is NodeStatus.DENIED and extend.replies.get(node) is None
        )
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
    handoff: Handoff | None = None,
) -> Flow:
    """Delete our token everywhere; ok once a majority confirmed it held our token.

    With a claimed ``handoff`` (see :class:`~redlock._protocol.core.Handoff`), the token is not
    deleted but replaced by the waiter's, where ours holds; a master that swapped confirms
    our release as one that deleted would. The swap is delivered to the waiter; if it left
    meanwhile, its token is deleted here, announced as our release would have been.

    With ``notify``, each master that deleted it announces the release to waiters.
    ``earlier`` are the rounds of earlier tries of this release (it may be retried when no
    majority answered): the masters that confirmed then are not asked again and count
    towards the majority; a master whose earlier reply never came may have run that release,
    so its "not there" now proves nothing about a loss and counts as released.
    """
    started = now
    if handoff is None:
        command = spec.release_command(token, notify=notify)
    else:
        command = spec.kind.handoff(spec.key, token, handoff.token, handoff.ttl_ms)
    confirmed: AbstractSet[int] = _NO_NODES
    maybe_landed: AbstractSet[int] = _NO_NODES
    if earlier:  # (a first try, the usual case, has no earlier one to account for)
        confirmed = {
            node
            for round_ in earlier
            for node, outcome in round_.outcomes.items()
            if outcome.status is NodeStatus.GRANTED
        }
        maybe_landed = {
            node
            for round_ in earlier
            for node in round_.targets
            if not round_.outcomes.get(node, _UNKNOWN).status.answered
        } - confirmed
    timeout = spec.node_timeout if timeout is None else timeout
    release = Round(
        command=command,
        targets=tuple(node for node in spec.all_nodes if node not in confirmed) if confirmed else spec.all_nodes,
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
    delivered: list[bool] = []
    if handoff is not None:
        # The token of OUR claim, read now: the offer's token is the latest claim's, and this
        # round may outlive ours (an interrupted release leaves it in flight; a claim that ran
        # out is given up, and the waiter may be claimed again, with a new token, by another
        # release). Delivered or deleted, it must be the token this swap wrote.
        offer, claimed = handoff, handoff.token

        # The waiter holds once a majority swapped (its validity counts from the swap's start,
        # as an acquire's from its send, and an acquire does not wait for the slowest masters
        # either): it wakes then, while this release waits on for the others. Under a chain
        # of handovers that overlaps one holder's round with the next one's.
        def deliver_early() -> None:
            delivered.append(offer.deliver(release, started, claimed))
            if delivered[0]:  # (else the wake, if any, is a later claim's)
                offer.wake_waiter()

        release.on_majority = deliver_early
    yield release
    if handoff is not None and not (delivered[0] if delivered else handoff.deliver(release, started, claimed)):
        yield spec.round(spec.release_command(claimed, notify=notify), cleanup=True)
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
_NO_NODES: frozenset[int] = frozenset()


def rollback_flow(spec: LockSpec, tokens: Sequence[str]) -> Flow:
    """Delete the tokens of an interrupted acquire everywhere (each round waits for all, and
    runs to its end through a cancellation of the caller: see :attr:`Round.shielded`).

    The result's outcomes are the last round's, but for a master that did not answer an
    earlier round: that one is kept, since a key may have stayed there."""
    last = Result(True, (), 0)
    silent: dict[str, NodeOutcome] = {}
    for token in tokens:
        rollback = spec.round(spec.release_command(token), cleanup=True, shielded=True)
        yield rollback
        outcomes = rollback.ordered_outcomes()
        for outcome in outcomes:
            if not outcome.status.answered:
                silent.setdefault(outcome.node, outcome)
        outcomes = tuple(silent.get(outcome.node, outcome) for outcome in outcomes)
        last = Result(rollback.majority_granted, outcomes, rollback.granted)
    return last


def committed_acquire(
    spec: LockSpec,
    tokens: Tokens,
    acquire: Flow,
    commit: Callable[[Result], T],
    forget: Callable[[Tokens], None],
) -> Generator[Request, float, T]:
    """``acquire`` (a flow of :func:`acquire_flow` setting ``tokens``), then ``commit`` of
    its result (the Lock records the lease), as one flow that keeps the invariant of an
    interrupted acquire: after any exception, nothing of the acquire is left, neither in the
    Lock nor on the masters.

    The exception may come from the flow's own code, from the commit, or from the driver,
    which throws whatever interrupts it (Ctrl-C, a signal handler's exception, a
    cancellation) into the flow: then ``forget`` drops a lease of ``tokens`` that the commit
    recorded, and every token that may have landed is taken back (:func:`rolled_back`, on
    the same connections, so on each master after what it undoes) before the exception goes
    on. What follows the flow's end (the driver's own clean-up, handing the Lock back) is
    covered by the Lock (``LockState._undo_flow``), with :func:`rolled_back` too.
    """
    try:
        return commit((yield from acquire))
    except GeneratorExit:
        # Closed with no interruption thrown in (a driver that could not, in the event
        # loop's own lines): nothing may be sent now; the keys expire with the ttl.
        forget(tokens)
        raise
    except BaseException as interruption:
        forget(tokens)
        yield from rolled_back(spec, tokens, interruption)
        # (Named, not a bare raise: compiled, the exception being handled across the yield
        # above was what older mypyc got wrong, mypyc/mypyc#1177.)
        raise interruption


def rolled_back(spec: LockSpec, tokens: Tokens, interruption: BaseException) -> Flow:
    """Delete every token of an interrupted acquire that may have landed (the outstanding
    ones of ``tokens``), everywhere; a note on ``interruption`` says what is not confirmed
    gone, or that the rollback itself failed (the interruption is what the caller must see:
    a failure of the rollback, thrown in by the driver, is not raised)."""
    result = Result(False, (), 0)
    try:
        result = yield from rollback_flow(spec, list(tokens.outstanding))
        note = rollback_note(result)
    except Exception as failure:
        note = rollback_failed(failure)
    if note is not None:
        interruption.add_note(note)
    return result


def rollback_failed(failure: Exception) -> str:
    """The note an interruption carries when its rollback itself failed."""
    return f"redlock: rolling back the interrupted acquire failed: {failure!r}"


def rollback_note(result: Result) -> str | None:
    """The note an interruption carries when its rollback left keys it could not confirm
    gone: which masters did not answer (their keys expire with the ttl); None if all did."""
    silent = [str(outcome) for outcome in result.outcomes if not outcome.status.answered]
    if not silent:
        return None
    return (
        "redlock: the interrupted acquire was rolled back, but these masters did not answer in time "
        f"and may keep its key until it expires: {', '.join(silent)}"
    )


def hold_start(spec: LockSpec, deadline: float) -> float:
    """When the attempt that gave ``deadline`` (with the lock's own ttl) began: where a
    bounded hold is counted from, the first SET sent rather than the acquire returning."""
    return deadline - spec.ttl + drift_allowance(spec.ttl, spec.clock_drift_factor)


def held_ttl(spec: LockSpec, lease: Lease, ttl: float, now: float) -> float | None:
    """The ttl an extend starting at ``now`` may set without moving the holder's deadline
    past ``lease.hold_until`` (``ttl`` itself when the bound is far); None when the bound
    leaves too little for an extend to be worth a round: one that could not give validity
    after ``node_timeout``, or would not move the deadline at all.

    Capping the ttl, not just stopping the extends, also makes the keys on the masters
    expire with the hold: the next holder gets the lock when the bounded one lost it.
    """
    room = lease.hold_until - now
    if room >= ttl:
        return ttl
    if validity_left(room, spec.node_timeout, spec.clock_drift_factor) <= 0:
        return None
    if spec.deadline_after(now, room) <= lease.deadline:
        return None
    return room


def added_ttl(spec: LockSpec, lease: Lease, add: float, now: float) -> float:
    """The ttl an extend starting at ``now`` sets so that the deadline moves ``add`` seconds
    later than it is (``extend(add=...)``): ``t - drift(t) = left + add``, ``drift(t) = t *
    factor + EXPIRY_PRECISION``, solved for ``t``. The keys get that ttl, drift included,
    so the holder relies on no more than a fresh ttl of that length would give it."""
    left = max(0.0, lease.deadline - now)
    return (left + add + EXPIRY_PRECISION) / (1 - spec.clock_drift_factor)


def bounded_extend_flow(spec: LockSpec, lease: Lease, ttl: float, now: float) -> Flow:
    """An extend within the bounded hold (``lease.hold_until``): its ttl is capped by
    :func:`held_ttl`, and where the bound leaves nothing to add, nothing is sent and the
    deadline stays. Once a capped extend worked, or nothing could be added, the lease is
    ``held_out``: its deadline is as late as it may ever be."""
    capped = None if lease.held_out else held_ttl(spec, lease, ttl, now)
    if capped is None:
        lease.held_out = True
        return Result(True, (), 0, deadline=lease.deadline, finished_at=now)
    result = yield from extend_flow(spec, lease, capped, now)
    if result.ok and capped < ttl:
        lease.held_out = True
    return result


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
    when a majority says our token is gone, or when the validity runs out first. A bounded
    hold (``lease.hold_until``) caps each extension's ttl; once no extension may move the
    deadline any more (``lease.held_out``), the renewer only waits for the deadline, where
    the lease is lost as any other that could not be renewed.
    """
    failed = False
    last = Result(True, (), 0, deadline=lease.deadline)
    while not lease.ended:
        delay = next_renewal(now, lease, spec.ttl, failed=failed, retry_delay=spec.retry_delay)
        if delay is None:
            break
        if lease.held_out:
            now = yield Pause(lease.deadline - now)  # nothing more to add: wait for the end
            continue
        now = yield Pause(delay)
        if lease.ended:
            return last
        last = yield from bounded_extend_flow(spec, lease, spec.ttl, now)
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


#: Replies that refuse a command: the master answered, but not what was asked.
_REFUSALS = (NodeStatus.ERROR, NodeStatus.MISCONFIGURED)


@dataclass(frozen=True)
class MasterInfo:
    """What one master says about a lock name."""

    #: The master's name (host:port, or the socket path).
    master: str
    #: Whether it could be read (an error reply, a refusal, a timeout or a refused
    #: connection: False; see :attr:`status` for which).
    reachable: bool
    #: The token its key holds; None if the key is absent, or the master did not answer.
    token: str | None = None
    #: Seconds the key has left on this master (``math.inf``: it never expires, so it is not a
    #: Redlock key); None when there is no key.
    ttl: float | None = None
    #: Why it could not be read, in words ("no reply within 0.50s", the error reply).
    error: str = ""
    #: What kept it from being read: ``TIMEOUT`` (no reply in time: hung or slow),
    #: ``UNREACHABLE`` (no connection), ``ERROR`` (an error reply) or ``MISCONFIGURED`` (it
    #: refused our credentials, permissions, TLS or scripts); None when it was read.
    #: (``GRANTED`` or ``DENIED``: it replied, but its reply was not read.)
    status: NodeStatus | None = None
    #: A read-write lock's unexpired readers here: (token, seconds left) each, by expiry.
    readers: tuple[tuple[str, float], ...] = ()
    #: The token of a writer of a read-write lock that waits for its readers to leave (its
    #: intent keeps new readers out), and the seconds its mark has left; None when none waits.
    intent: str | None = None
    intent_ttl: float | None = None

    @property
    def answered(self) -> bool:
        """Whether it replied at all: read, or answering with an error or a refusal."""
        status = self.status
        return self.reachable or (status is not None and (status.answered or status in _REFUSALS))


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
        """How many masters could be read."""
        return sum(master.reachable for master in self.masters)

    @property
    def answered(self) -> int:
        """How many masters replied at all (read, or refusing us: see :attr:`MasterInfo.answered`)."""
        return sum(master.answered for master in self.masters)

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

    @property
    def readers(self) -> tuple[str, ...]:
        """A read-write lock's readers held by a quorum of masters (those who may read now)."""
        counts = collections.Counter(token for master in self.masters for token, _ in master.readers)
        return tuple(sorted(token for token, votes in counts.items() if votes >= self.quorum))

    @property
    def intent(self) -> str | None:
        """The token of a writer of a read-write lock waiting for its readers, as marked on
        the most masters (any mark keeps new readers out there); None when none is marked."""
        counts = collections.Counter(master.intent for master in self.masters if master.intent is not None)
        return counts.most_common(1)[0][0] if counts else None

    def _votes(self) -> dict[str, int]:
        votes: dict[str, int] = {}
        for master in self.masters:
            if master.token is not None:
                votes[master.token] = votes.get(master.token, 0) + 1
        return votes


def inspect_flow(spec: LockSpec) -> Flow:
    """Ask every master who holds ``spec.key`` and for how long; see :func:`lock_info`."""
    # Every master's answer is wanted, not a majority's, as for a clean-up.
    keys = [spec.key, readers_key(spec.key), intent_key(spec.key)]
    round_ = spec.round(Command.run_script(_scripts.INSPECT, keys, []), cleanup=True)
    yield round_
    return Result(True, round_.ordered_outcomes(), round_.granted, rounds=(round_,))


def force_release_flow(spec: LockSpec) -> Flow:
    """Delete ``spec.key`` on every master whatever token holds it; see :func:`lock_info`.

    For operators only: a holder still at work goes on believing it holds the lock while
    the next one acquires it, exactly as if its lock had expired under it.
    """
    readers = readers_key(spec.key)
    keys = [spec.key, order_key(spec.key), order_key(readers), readers, intent_key(spec.key)]
    channels = [release_channel(spec.key), release_channel(readers)]
    command = Command.run_script(_scripts.FORCE_RELEASE, keys, channels)
    round_ = spec.round(command, cleanup=True)
    yield round_
    return Result(True, round_.ordered_outcomes(), round_.granted, rounds=(round_,))


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _held(value: object, pttl: object) -> tuple[str | None, float | None]:
    """A key's token and seconds left (``math.inf``: no expiry) from GET and PTTL."""
    if value is None:
        return None, None
    return _text(value), math.inf if int(pttl) == -1 else max(0, int(pttl)) / 1000  # type: ignore[call-overload]


def lock_info(spec: LockSpec, result: Result) -> LockInfo:
    """The :class:`LockInfo` from the round of :func:`inspect_flow` or :func:`force_release_flow`.

    MasterMisconfigured when so many masters refuse it (credentials, permissions, or Lua
    scripting, which both need) that no majority answered: a picture made of the few left
    could not show a holder, and would hide why.
    """
    (round_,) = result.rounds
    if round_.misconfigured:
        raise MasterMisconfigured(
            f"too many masters refuse our credentials, permissions, TLS or Lua scripting to inspect {spec.key!r}",
            resource=spec.key,
            quorum=spec.quorum,
            granted=round_.granted,
            outcomes=round_.ordered_outcomes(),
        )
    masters = []
    for node, outcome in zip(round_.targets, round_.ordered_outcomes(), strict=True):
        reply = round_.replies.get(node)
        if outcome.status is NodeStatus.NOT_AWAITED:
            # The round waited for every master until its timeout; one settled without is one
            # that had not replied by then, not one that was never waited for.
            silent = f"no reply within {round_.timeout:.2f}s"
            masters.append(MasterInfo(outcome.node, False, error=silent, status=NodeStatus.TIMEOUT))
            continue
        if outcome.status is not NodeStatus.GRANTED:
            error = outcome.detail or outcome.status.value
            masters.append(MasterInfo(outcome.node, False, error=error, status=outcome.status))
            continue
        if not isinstance(reply, list | tuple) or len(reply) != 6:  # an answer, but not the script's
            unexpected = f"unexpected reply {reply!r}"
            masters.append(MasterInfo(outcome.node, False, error=unexpected, status=NodeStatus.ERROR))
            continue
        _, value, pttl, scored, intent, intent_pttl = reply
        readers = tuple(
            (_text(token), max(0, int(left)) / 1000) for token, left in zip(scored[::2], scored[1::2], strict=True)
        )
        token, ttl = _held(value, pttl)
        if token == READERS_MARK:  # readers hold the name: they are listed, no writer is
            token, ttl = None, None
        intent_token, intent_ttl = _held(intent, intent_pttl)
        masters.append(
            MasterInfo(outcome.node, True, token, ttl, readers=readers, intent=intent_token, intent_ttl=intent_ttl)
        )
    return LockInfo(spec.key, spec.quorum, tuple(masters))
