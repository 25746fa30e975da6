"""Checkers: pure functions from a recorded :class:`~chaos.history.History` to what went wrong.

Nothing here reads a clock, a file or a socket, so every checker is tested on synthetic
histories (``tests/test_chaos_checkers.py``) against brute-force oracles. A scenario's
verdict is whatever these functions find in its history:

* :func:`check_mutual_exclusion`: holder intervals of one name that overlap (but for two
  readers of a read-write lock: a writer overlapping anyone is one);
* :func:`check_lost_updates`: increments of the protected counter that a stale
  read-modify-write overwrote;
* :func:`check_fencing_order` and :func:`check_stale_writes`: fencing tokens that fail to
  increase, and writes a fenced store accepted although a newer token had been seen;
* :func:`check_extends`: an extend that succeeded after its lock had lapsed;
* :func:`check_validity`: a deadline later than the client could know the lock to last,
  computed from when the harness saw the acquire (or extend) invoked, not from what the
  client says;
* :func:`check_semaphore_limits`: moments when more holders than a semaphore's limit held
  a permit of it at once (a semaphore's tenures are left out of mutual exclusion);
* :func:`measure_liveness`: what safety cost: success share, acquire latency, idle time.

:func:`check_all` runs them all and returns a :class:`Verdict`.

Intervals are half-open in spirit: two holders overlap when one starts strictly before
the other ends. A holder whose release is invoked at the very moment the next one's acquire
returns has handed over, not overlapped, and an empty interval (a deadline already past
when the acquire returned) overlaps nothing.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .history import (
    AcquireInvoked,
    AcquireReturned,
    Event,
    ExtendInvoked,
    ExtendReturned,
    FaultWindow,
    History,
    ResourceRead,
    ResourceWrite,
    Tenure,
)

__all__ = [
    "VALIDITY_SLACK",
    "Crowding",
    "DuplicateToken",
    "LateExtend",
    "Liveness",
    "LostUpdates",
    "Overlap",
    "OverstatedValidity",
    "StaleWrite",
    "TokenRegression",
    "Verdict",
    "check_all",
    "check_extends",
    "check_fencing_order",
    "check_lost_updates",
    "check_mutual_exclusion",
    "check_semaphore_limits",
    "check_stale_writes",
    "check_validity",
    "measure_liveness",
    "most_holders",
    "overlapping_pairs",
    "percentile",
    "validity_bound",
]


def _history(history: History | Iterable[Event]) -> History:
    return history if isinstance(history, History) else History(history)


def _time(value: float) -> float | None:
    return None if math.isinf(value) else value


def _write_dict(write: ResourceWrite) -> dict[str, Any]:
    return write.to_dict()


# --- mutual exclusion -----------------------------------------------------------------------


@dataclass(frozen=True)
class Overlap:
    """Two holders of ``name`` at once, from ``start`` to ``end``.

    ``first`` is the holder that started first. ``faults`` were active during the overlap;
    ``context`` were active at some point from ``first``'s acquire to the overlap's end,
    which also names the cause when it is over by the time of the overlap (a master that
    crashed and came back empty while ``first`` held the lock).
    """

    name: str
    first: Tenure
    second: Tenure
    start: float
    end: float
    faults: tuple[FaultWindow, ...] = ()
    context: tuple[FaultWindow, ...] = ()

    @property
    def duration(self) -> float:
        return self.end - self.start

    def describe(self, origin: float = 0.0) -> str:
        """One line; times in seconds from ``origin`` (the history's first event)."""
        faults = ", ".join(f"{w.kind} {w.target}" for w in self.context) or "no fault"
        return (
            f"{self.name!r} held by {self.first.holder} and {self.second.holder} at once "
            f"for {self.duration:.3f}s from t={self.start - origin:.3f} (faults: {faults})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "first": self.first.to_dict(),
            "second": self.second.to_dict(),
            "start": self.start,
            "end": _time(self.end),
            "faults": [w.to_dict() for w in self.faults],
            "context": [w.to_dict() for w in self.context],
        }


def overlapping_pairs(tenures: Iterable[Tenure]) -> list[tuple[Tenure, Tenure]]:
    """Every pair of tenures of the same name whose intervals overlap.

    A sweep over starts: a tenure can only overlap those still active when it starts, so
    the cost is O(n log n) plus the pairs found. In each pair the first started first
    (ties broken by client, then op).
    """
    by_name: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in tenures:
        # An empty interval overlaps nothing; it must not even enter the active set.
        if tenure.end > tenure.start:
            by_name[tenure.name].append(tenure)
    pairs: list[tuple[Tenure, Tenure]] = []
    for name in sorted(by_name):
        active: list[Tenure] = []
        for tenure in sorted(by_name[name], key=lambda t: (t.start, t.client, t.op, t.end)):
            active = [a for a in active if a.end > tenure.start]
            pairs.extend((a, tenure) for a in active)
            active.append(tenure)
    return pairs


def check_mutual_exclusion(history: History | Iterable[Event]) -> list[Overlap]:
    """Every pair of holders of one name whose intervals overlap, with the faults around it;
    two readers of a read-write lock may overlap (a writer and anyone may not)."""
    history = _history(history)
    windows = history.fault_windows()
    overlaps: list[Overlap] = []
    locks = [tenure for tenure in history.tenures() if tenure.limit == 1]
    for first, second in overlapping_pairs(locks):
        if first.mode == second.mode == "read":
            continue  # a read-write lock's readers share its name by design
        start, end = second.start, min(first.end, second.end)
        overlaps.append(
            Overlap(
                name=first.name,
                first=first,
                second=second,
                start=start,
                end=end,
                faults=tuple(w for w in windows if w.overlaps(start, end)),
                context=tuple(w for w in windows if w.overlaps(first.invoked, end)),
            )
        )
    return overlaps


# --- semaphores -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Crowding:
    """More holders of semaphore ``name`` than its ``limit`` at once, from ``start`` to ``end``.

    ``holders`` are the tenures active over the whole of that time; ``faults`` were active
    at some moment of it, or of the holders' acquires before it.
    """

    name: str
    limit: int
    holders: tuple[Tenure, ...]
    start: float
    end: float
    faults: tuple[FaultWindow, ...] = ()

    @property
    def duration(self) -> float:
        return self.end - self.start

    def describe(self, origin: float = 0.0) -> str:
        """One line; times in seconds from ``origin`` (the history's first event)."""
        faults = ", ".join(f"{w.kind} {w.target}" for w in self.faults) or "no fault"
        who = ", ".join(t.holder for t in self.holders)
        return (
            f"semaphore {self.name!r} (limit {self.limit}) held by {len(self.holders)} at once "
            f"({who}) for {self.duration:.3f}s from t={self.start - origin:.3f} (faults: {faults})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "limit": self.limit,
            "holders": [t.to_dict() for t in self.holders],
            "start": self.start,
            "end": _time(self.end),
            "faults": [w.to_dict() for w in self.faults],
        }


def most_holders(tenures: Iterable[Tenure]) -> dict[str, int]:
    """For each semaphore name (limit above 1), the most holders it had at any moment."""
    return {
        name: max((len(present) for _, _, present in _crowds(mine)), default=0)
        for name, mine in _semaphores(tenures).items()
    }


def _semaphores(tenures: Iterable[Tenure]) -> dict[str, list[Tenure]]:
    by_name: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in tenures:
        if tenure.limit > 1 and tenure.end > tenure.start:
            by_name[tenure.name].append(tenure)
    return by_name


def _crowds(tenures: Sequence[Tenure]) -> list[tuple[float, float, tuple[Tenure, ...]]]:
    """The holders present in each stretch of time between two starts or ends.

    A sweep over boundaries: at an equal time, ends come before starts (a handover is not
    an overlap, as for locks), so a stretch is (boundary, next boundary) with its holders.
    """
    starting: dict[float, list[int]] = defaultdict(list)
    ending: dict[float, list[int]] = defaultdict(list)
    for index, tenure in enumerate(tenures):
        starting[tenure.start].append(index)
        ending[tenure.end].append(index)
    active: dict[int, Tenure] = {}
    stretches = []
    for low, high in itertools.pairwise(sorted(starting.keys() | ending.keys())):
        for index in ending.get(low, ()):
            active.pop(index, None)
        for index in starting.get(low, ()):
            active[index] = tenures[index]
        stretches.append((low, high, tuple(active.values())))
    return stretches


def check_semaphore_limits(history: History | Iterable[Event]) -> list[Crowding]:
    """Each maximal stretch of time in which a semaphore had more holders than its limit."""
    history = _history(history)
    windows = history.fault_windows()
    found: list[Crowding] = []
    for name, tenures in sorted(_semaphores(history.tenures()).items()):
        limit = max(t.limit for t in tenures)
        for low, high, present in _crowds(tenures):
            if len(present) <= limit:
                continue
            last = found[-1] if found else None
            if last is not None and last.name == name and last.end == low and last.holders == present:
                found[-1] = dataclasses.replace(last, end=high)
                continue
            since = min(t.invoked for t in present)
            found.append(
                Crowding(
                    name=name,
                    limit=limit,
                    holders=present,
                    start=low,
                    end=high,
                    faults=tuple(w for w in windows if w.overlaps(since, high)),
                )
            )
    return found


# --- lost updates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LostUpdates:
    """The increments of one counter resource, and which of them were lost.

    Every accepted write is one increment, so the counter should end at
    ``initial + increments``; ``lost`` is how far short ``final`` is. ``lost_writes`` are
    the writes whose increments vanished: those not on the chain of reads and writes that
    leads to the final value. ``overwritten_by`` maps each of them (by index in
    ``lost_writes``) to the write that wiped it out: the first write applied after it that
    is on the final value's chain, and so did not build on it.
    """

    resource: str
    initial: int
    increments: int
    final: int
    lost_writes: tuple[ResourceWrite, ...]
    overwritten_by: tuple[ResourceWrite | None, ...]

    @property
    def expected(self) -> int:
        return self.initial + self.increments

    @property
    def lost(self) -> int:
        return self.expected - self.final

    @property
    def ok(self) -> bool:
        return self.lost == 0 and not self.lost_writes

    def describe(self) -> str:
        return (
            f"{self.resource!r}: {self.increments} increments from {self.initial}, final {self.final}: {self.lost} lost"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "initial": self.initial,
            "increments": self.increments,
            "final": self.final,
            "expected": self.expected,
            "lost": self.lost,
            "lost_writes": [_write_dict(w) for w in self.lost_writes],
            "overwritten_by": [None if w is None else _write_dict(w) for w in self.overwritten_by],
        }


def _apply_order(writes: Sequence[ResourceWrite]) -> list[ResourceWrite]:
    # The store's own sequence numbers are exact; event times are the fallback, and only
    # approximate the order of writes that were in flight together.
    if writes and all(w.seq is not None for w in writes):
        return sorted(writes, key=lambda w: (w.seq, w.time))
    return sorted(writes, key=lambda w: w.time)


def check_lost_updates(
    history: History | Iterable[Event],
    *,
    initial: int = 0,
    final: Mapping[str, int] | None = None,
) -> list[LostUpdates]:
    """One :class:`LostUpdates` per counter resource written in the history.

    The final value of a resource is taken from ``final`` if given, else from the last read
    recorded after its last write, else from its last write. Which increments were lost is
    found by walking back from the last write: each write's parent is the latest write
    applied before it that wrote the value it read. Writes off that chain are the lost
    ones: the final value does not build on them. (When several writes wrote the same
    value, which of them counts as lost is arbitrary; how many is not.)
    """
    history = _history(history)
    writes: dict[str, list[ResourceWrite]] = defaultdict(list)
    for write in history.of_type(ResourceWrite):
        if write.accepted:
            writes[write.resource].append(write)
    reads: dict[str, list[ResourceRead]] = defaultdict(list)
    for read in history.of_type(ResourceRead):
        reads[read.resource].append(read)

    reports: list[LostUpdates] = []
    for resource in sorted(writes):
        ordered = _apply_order(writes[resource])
        last = ordered[-1]
        if final is not None and resource in final:
            final_value = final[resource]
        else:
            later = [r for r in reads[resource] if r.time >= last.time and r.value is not None]
            final_value = later[-1].value if later and later[-1].value is not None else last.value

        on_chain = _lineage(ordered)
        lost = [i for i in range(len(ordered)) if i not in on_chain]
        chain = sorted(on_chain)
        culprits = [_next_on_chain(chain, i) for i in range(len(ordered))]
        reports.append(
            LostUpdates(
                resource=resource,
                initial=initial,
                increments=len(ordered),
                final=final_value,
                lost_writes=tuple(ordered[i] for i in lost),
                overwritten_by=tuple(_at(ordered, culprits[i]) for i in lost),
            )
        )
    return reports


def _lineage(ordered: Sequence[ResourceWrite]) -> set[int]:
    """Indexes of the writes on the read-from chain that ends at the last write."""
    # Where each value was written, in apply order, to find a write's parent by bisection.
    written_at: dict[int, list[int]] = defaultdict(list)
    for i, write in enumerate(ordered):
        written_at[write.value].append(i)
    chain: set[int] = set()
    index: int | None = len(ordered) - 1
    while index is not None and index not in chain:
        chain.add(index)
        wanted = ordered[index].read_value
        # The initial value (or an unknown read) has no writer: the chain ends there.
        candidates = written_at.get(wanted, []) if wanted is not None else []
        position = bisect.bisect_left(candidates, index)
        index = candidates[position - 1] if position > 0 else None
    return chain


def _next_on_chain(chain: Sequence[int], index: int) -> int | None:
    position = bisect.bisect_right(chain, index)
    return chain[position] if position < len(chain) else None


def _at(writes: Sequence[ResourceWrite], index: int | None) -> ResourceWrite | None:
    return None if index is None else writes[index]


# --- fencing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenRegression:
    """``later`` acquired ``name`` after ``earlier``'s acquire had returned, yet got a fencing
    token no larger: a fenced store would take ``later`` for the stale holder."""

    name: str
    earlier: Tenure
    later: Tenure

    def describe(self) -> str:
        return (
            f"{self.name!r}: {self.later.holder} got fencing token {self.later.fencing} after "
            f"{self.earlier.holder} had got {self.earlier.fencing}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "earlier": self.earlier.to_dict(), "later": self.later.to_dict()}


@dataclass(frozen=True)
class DuplicateToken:
    """Two holders of ``name`` whose acquires ran concurrently got the same fencing token."""

    name: str
    first: Tenure
    second: Tenure

    def describe(self) -> str:
        return (
            f"{self.name!r}: {self.first.holder} and {self.second.holder} both got fencing token {self.first.fencing}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "first": self.first.to_dict(), "second": self.second.to_dict()}


def check_fencing_order(
    history: History | Iterable[Event],
) -> list[TokenRegression | DuplicateToken]:
    """Fencing tokens must strictly increase per name in acquire order.

    For two successful acquires of one name where the first *returned* before the second
    was *invoked*, the second's token must be larger (:class:`TokenRegression` otherwise,
    reported against the earlier acquire with the largest token). Acquires that were in
    flight together have no order, but must still not share a token
    (:class:`DuplicateToken`). Acquires without a fencing token are ignored.
    """
    history = _history(history)
    fenced = [t for t in history.tenures() if t.via == "acquire" and t.fencing is not None]
    by_name: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in fenced:
        by_name[tenure.name].append(tenure)

    found: list[TokenRegression | DuplicateToken] = []
    for name in sorted(by_name):
        tenures = by_name[name]
        by_return = sorted(tenures, key=lambda t: (t.start, t.client, t.op))
        best: Tenure | None = None
        returned = 0
        for later in sorted(tenures, key=lambda t: (t.invoked, t.client, t.op)):
            # Everything that returned before `later` was invoked is ordered before it.
            while returned < len(by_return) and by_return[returned].start < later.invoked:
                candidate = by_return[returned]
                if best is None or _fencing(candidate) > _fencing(best):
                    best = candidate
                returned += 1
            if best is not None and _fencing(later) <= _fencing(best):
                found.append(TokenRegression(name=name, earlier=best, later=later))
        same: dict[int, list[Tenure]] = defaultdict(list)
        for tenure in by_return:
            same[_fencing(tenure)].append(tenure)
        for group in same.values():
            for i, first in enumerate(group):
                for second in group[i + 1 :]:
                    # An ordered pair with equal tokens is already a regression.
                    if not _ordered(first, second) and not _ordered(second, first):
                        found.append(DuplicateToken(name=name, first=first, second=second))
    return found


def _ordered(earlier: Tenure, later: Tenure) -> bool:
    """Whether ``earlier``'s acquire returned before ``later``'s was invoked."""
    return earlier.start < later.invoked


def _fencing(tenure: Tenure) -> int:
    assert tenure.fencing is not None
    return tenure.fencing


@dataclass(frozen=True)
class StaleWrite:
    """A fenced store accepted ``write`` although it had accepted ``newer`` (a larger
    fencing token) before: the fence failed."""

    resource: str
    write: ResourceWrite
    newer: ResourceWrite

    def describe(self) -> str:
        return (
            f"{self.resource!r}: write by {self.write.client} with token {self.write.fencing} "
            f"accepted after token {self.newer.fencing} from {self.newer.client}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "write": _write_dict(self.write),
            "newer": _write_dict(self.newer),
        }


def check_stale_writes(history: History | Iterable[Event]) -> list[StaleWrite]:
    """Accepted writes whose fencing token is smaller than one accepted before them.

    The same token may write many times (one holder, several writes); a smaller one after
    a larger is the stale holder getting through. Writes without a token are ignored.
    """
    history = _history(history)
    writes: dict[str, list[ResourceWrite]] = defaultdict(list)
    for write in history.of_type(ResourceWrite):
        if write.accepted and write.fencing is not None:
            writes[write.resource].append(write)
    found: list[StaleWrite] = []
    for resource in sorted(writes):
        newest: ResourceWrite | None = None
        for write in _apply_order(writes[resource]):
            assert write.fencing is not None
            if newest is not None and newest.fencing is not None and write.fencing < newest.fencing:
                found.append(StaleWrite(resource=resource, write=write, newer=newest))
            elif newest is None or newest.fencing is None or write.fencing > newest.fencing:
                newest = write
    return found


# --- extends --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LateExtend:
    """An extend invoked after ``lapsed`` had run out returned OK at ``revived.start``: the
    client held a lock that had expired and may have been taken and released by someone
    else. (An extend invoked in time and answered late is no such thing: the keys' ttl was
    reset before they expired, and the new validity counts from its start.)"""

    lapsed: Tenure
    revived: Tenure

    def describe(self) -> str:
        late = self.revived.start - self.lapsed.end
        return f"{self.lapsed.name!r}: {self.lapsed.holder} extended {late:.3f}s after its lock had lapsed"

    def to_dict(self) -> dict[str, Any]:
        return {"lapsed": self.lapsed.to_dict(), "revived": self.revived.to_dict()}


def check_extends(history: History | Iterable[Event]) -> list[LateExtend]:
    """Every extend invoked after its holder's deadline had passed that succeeded."""
    tenures = _history(history).tenures()
    found: list[LateExtend] = []
    last: dict[tuple[str, str, str | None, int], Tenure] = {}
    for tenure in tenures:
        key = (tenure.client, tenure.name, tenure.token, tenure.op)
        if tenure.via == "extend" and key in last:
            found.append(LateExtend(lapsed=last[key], revived=tenure))
        last[key] = tenure
    return found


# --- validity -------------------------------------------------------------------------------

#: The drift allowance of the algorithm (docs/algorithm.md: ``drift = ttl * clock_drift_factor
#: + 2 ms``), written out here rather than imported from the client, whose arithmetic is what
#: this checks.
DRIFT_FACTOR = 0.01
EXPIRY_PRECISION = 0.002

#: What :func:`check_validity` allows beyond its bound: the time a correct client spends
#: between the harness stamping "acquire invoked" and the client reading its clock for the
#: first time (the event written to its file, the argument checks, waiting for the GIL).
#: Measured: 0.1 ms median, 0.3 ms at most over 800 operations of a busy 2-core machine; a
#: client that overstates by less than the slack goes unnoticed by this check.
#:
#: What a loaded machine adds, a client descheduled between the stamp and its clock read
#: (milliseconds, well past the slack above), is not in this constant: it is measured per operation
#: (``queued`` on the return: the run-queue wait of the thread that ran the operation, from
#: the kernel) and allowed on top, for one-attempt operations only and never beyond the
#: operation's own length. A slack derived from the whole run instead (its jitter, its worst
#: stamp) would blunt every operation for the sake of the few that were held off the CPU,
#: and the broken clients the self-test plants overstate by little: ``no-drift`` by
#: ttl/100 + 2 ms, 12 ms at a 1 s ttl, caught 7 ms past this slack. An operation's own
#: wait widens only its own bound, and only by time the client demonstrably could not run,
#: which a client that overstates does not control (K5's reply wait is spent asleep, not
#: queued).
VALIDITY_SLACK = 0.005


def validity_bound(since: float, ttl: float, *, drift_factor: float = DRIFT_FACTOR, slack: float = 0.0) -> float:
    """The latest deadline a correct client may claim for a lock (or an extend) whose only
    attempt began after ``since``: ``since + ttl - drift(ttl)``, plus ``slack``.

    Why the invocation and not the return: every key is set after the client's first clock
    read, which comes after the invocation, so no key expires before ``invoked + ttl`` (by
    a master clock running at most ``drift_factor`` fast), and a correct client counts only
    from a time before its first request went out. Counting from the return would accept
    the K5 mistake (validity measured from the replies), whose deadline is always before
    ``return + ttl - drift``: the time spent waiting for the replies is exactly what such a
    client forgets. A blocking acquire may retry, and its winning attempt may begin anywhere
    up to its return, which the history does not see: for it the sound bound counts from
    the return, and catches only a client that overstates by more than its own latency.

    The bound is in the history's clock (the machine's CLOCK_MONOTONIC), so it presumes a
    client clock that runs at the machine's rate; a client whose clock runs slow
    (libfaketime) has its deadlines mapped to that clock and is caught here when it relies
    on the lock past what the masters promise.
    """
    return since + ttl - (ttl * drift_factor + EXPIRY_PRECISION) + slack


@dataclass(frozen=True)
class OverstatedValidity:
    """``client`` claimed lock ``name`` until ``deadline`` after an acquire (or an extend,
    ``via``) invoked at ``invoked`` with ``ttl``: past ``bound`` (:func:`validity_bound`
    from the invocation, or from the return for a blocking acquire), so longer than any key
    it set is known to live. Caught even when no second holder happened to enter."""

    client: str
    name: str
    op: int
    via: Literal["acquire", "extend"]
    invoked: float
    returned: float
    ttl: float
    deadline: float
    bound: float

    @property
    def excess(self) -> float:
        return self.deadline - self.bound

    @property
    def holder(self) -> str:
        return f"{self.client}#{self.op}"

    def describe(self) -> str:
        return (
            f"{self.name!r}: {self.holder} claimed validity {self.excess * 1000:.1f} ms past "
            f"invoked + ttl - drift (its {self.via} of ttl {self.ttl:g}s)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "excess": self.excess}


def check_validity(
    history: History | Iterable[Event],
    *,
    drift_factor: float = DRIFT_FACTOR,
    slack: float = VALIDITY_SLACK,
) -> list[OverstatedValidity]:
    """Every successful acquire or extend whose deadline exceeds :func:`validity_bound`
    (plus ``slack``, plus the time the client waited for a CPU during the operation, where
    its return records it: :data:`VALIDITY_SLACK`), computed from the harness's own stamps
    and the ttl the client was asked for: from the invocation of an extend or a non-blocking
    acquire (one attempt), from the return of a blocking one. Operations whose ttl or
    deadline was not recorded are skipped."""
    history = _history(history)
    invoked: dict[tuple[str, int], AcquireInvoked | ExtendInvoked] = {}
    found: list[OverstatedValidity] = []
    for event in history:
        if isinstance(event, AcquireInvoked | ExtendInvoked):
            invoked[(event.client, event.op)] = event
            continue
        if not isinstance(event, AcquireReturned | ExtendReturned) or not event.ok or event.deadline is None:
            continue
        start = invoked.get((event.client, event.op))
        if start is None or start.ttl is None:
            continue
        one_attempt = isinstance(start, ExtendInvoked) or start.blocking is False
        since = start.time if one_attempt else event.time
        # The wait for a CPU excuses a late clock read after the invocation's stamp, so it
        # counts for one attempt only (a blocking acquire is judged from its return), and
        # never beyond the operation's own length.
        held_off = min(event.queued or 0.0, event.time - start.time) if one_attempt else 0.0
        bound = validity_bound(since, start.ttl, drift_factor=drift_factor, slack=slack + held_off)
        if event.deadline > bound:
            found.append(
                OverstatedValidity(
                    client=event.client,
                    name=event.name,
                    op=event.op,
                    via="acquire" if isinstance(event, AcquireReturned) else "extend",
                    invoked=start.time,
                    returned=event.time,
                    ttl=start.ttl,
                    deadline=event.deadline,
                    bound=bound,
                )
            )
    return found


# --- liveness and cost ----------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100], not {q!r}")
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


@dataclass(frozen=True)
class Liveness:
    """What the run got done, and how long it waited.

    ``attempts`` counts acquires invoked; ``pending`` those that never returned (a paused or
    killed client). ``latency_*`` are in seconds over every acquire that returned, OK or
    not. ``idle`` is, per lock name, the time within ``window`` when nobody held it.
    """

    attempts: int
    succeeded: int
    failed: int
    errors: int
    pending: int
    latency_p50: float | None
    latency_p99: float | None
    latency_max: float | None
    idle: dict[str, float]
    window: tuple[float, float] | None

    @property
    def success_share(self) -> float | None:
        return self.succeeded / self.attempts if self.attempts else None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["success_share"] = self.success_share
        return data


def measure_liveness(
    history: History | Iterable[Event],
    *,
    window: tuple[float, float] | None = None,
) -> Liveness:
    """Success share, acquire latency and idle time per name.

    ``window`` defaults to the span of the history (first to last event).
    """
    history = _history(history)
    invoked: dict[tuple[str, int], AcquireInvoked] = {}
    for event in history.of_type(AcquireInvoked):
        invoked[(event.client, event.op)] = event
    latencies: list[float] = []
    succeeded = failed = errors = 0
    answered: set[tuple[str, int]] = set()
    for ret in history.of_type(AcquireReturned):
        key = (ret.client, ret.op)
        answered.add(key)
        if ret.ok:
            succeeded += 1
        else:
            failed += 1
            if ret.error is not None:
                errors += 1
        start = invoked.get(key)
        if start is not None:
            latencies.append(ret.time - start.time)

    if window is None and history.start is not None and history.end is not None:
        window = (history.start, history.end)
    names = {e.name for e in history.of_type(AcquireInvoked)}
    tenures = history.tenures()
    names.update(t.name for t in tenures)
    idle: dict[str, float] = {}
    if window is not None:
        for name in sorted(names):
            held = _union_length([(t.start, t.end) for t in tenures if t.name == name], window[0], window[1])
            idle[name] = max(0.0, window[1] - window[0] - held)

    return Liveness(
        attempts=len(invoked),
        succeeded=succeeded,
        failed=failed,
        errors=errors,
        pending=len(set(invoked) - answered),
        latency_p50=percentile(latencies, 50) if latencies else None,
        latency_p99=percentile(latencies, 99) if latencies else None,
        latency_max=max(latencies) if latencies else None,
        idle=idle,
        window=window,
    )


def _union_length(intervals: Iterable[tuple[float, float]], low: float, high: float) -> float:
    """Total length of the union of intervals, clipped to [low, high]."""
    clipped = sorted((max(s, low), min(e, high)) for s, e in intervals if min(e, high) > max(s, low))
    total = 0.0
    current_start: float | None = None
    current_end = -math.inf
    for start, end in clipped:
        if current_start is None or start > current_end:
            if current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_start is not None:
        total += current_end - current_start
    return total


# --- everything at once ---------------------------------------------------------------------


Kind = Literal["mutual-exclusion", "lost-update", "fencing", "late-extend", "validity-overstated", "semaphore-limit"]


@dataclass(frozen=True)
class Verdict:
    """Every checker's findings for one history; ``safe`` if none found a violation."""

    overlaps: tuple[Overlap, ...]
    lost_updates: tuple[LostUpdates, ...]
    fencing: tuple[TokenRegression | DuplicateToken, ...]
    stale_writes: tuple[StaleWrite, ...]
    late_extends: tuple[LateExtend, ...]
    liveness: Liveness
    overstated: tuple[OverstatedValidity, ...] = ()
    #: The time of the history's first event: what the violations' times are counted from.
    origin: float = 0.0
    crowding: tuple[Crowding, ...] = ()

    @property
    def violations(self) -> list[str]:
        """One line per violation, for a report."""
        return [
            *(o.describe(self.origin) for o in self.overlaps),
            *(u.describe() for u in self.lost_updates if not u.ok),
            *(f.describe() for f in self.fencing),
            *(s.describe() for s in self.stale_writes),
            *(e.describe() for e in self.late_extends),
            *(v.describe() for v in self.overstated),
            *(c.describe(self.origin) for c in self.crowding),
        ]

    @property
    def safe(self) -> bool:
        return not self.violations

    @property
    def kinds(self) -> list[Kind]:
        """Which kinds of violation were found."""
        kinds: list[Kind] = []
        if self.overlaps:
            kinds.append("mutual-exclusion")
        if any(not u.ok for u in self.lost_updates):
            kinds.append("lost-update")
        if self.fencing or self.stale_writes:
            kinds.append("fencing")
        if self.late_extends:
            kinds.append("late-extend")
        if self.overstated:
            kinds.append("validity-overstated")
        if self.crowding:
            kinds.append("semaphore-limit")
        return kinds

    def to_dict(self) -> dict[str, Any]:
        return {
            "safe": self.safe,
            "kinds": self.kinds,
            "violations": self.violations,
            "overlaps": [o.to_dict() for o in self.overlaps],
            "lost_updates": [u.to_dict() for u in self.lost_updates],
            "fencing": [f.to_dict() for f in self.fencing],
            "stale_writes": [s.to_dict() for s in self.stale_writes],
            "late_extends": [e.to_dict() for e in self.late_extends],
            "overstated": [v.to_dict() for v in self.overstated],
            "crowding": [c.to_dict() for c in self.crowding],
            "liveness": self.liveness.to_dict(),
        }


def check_all(
    history: History | Iterable[Event],
    *,
    initial: int = 0,
    final: Mapping[str, int] | None = None,
    window: tuple[float, float] | None = None,
    slack: float = VALIDITY_SLACK,
) -> Verdict:
    """Run every checker over ``history``; ``slack`` is :func:`check_validity`'s."""
    history = _history(history)
    return Verdict(
        overlaps=tuple(check_mutual_exclusion(history)),
        lost_updates=tuple(check_lost_updates(history, initial=initial, final=final)),
        fencing=tuple(check_fencing_order(history)),
        stale_writes=tuple(check_stale_writes(history)),
        late_extends=tuple(check_extends(history)),
        liveness=measure_liveness(history, window=window),
        overstated=tuple(check_validity(history, slack=slack)),
        origin=history.start or 0.0,
        crowding=tuple(check_semaphore_limits(history)),
    )
