"""The recorded history of a chaos run: what every client and fault did, and when.

A run is judged only by what it recorded, so this module is the contract between the
workloads and nemeses that write events and the checkers (:mod:`chaos.checkers`), reports
and plots that read them.

Time
    Every timestamp is ``time.monotonic()`` in seconds. On Linux that is CLOCK_MONOTONIC,
    one clock for every process of the machine, so client processes that record separately
    still share one time line, and it is the clock the Redlock client computes its validity
    with, so a holder's deadline can be compared with other clients' events directly. A
    master's faked wall clock (:mod:`chaos.clock`) never enters a history, nor does the
    faked CLOCK_MONOTONIC of a client whose clock runs off: that client stamps with the
    real one, read past libfaketime (:func:`chaos.clock.history_clock`), and its lock's
    deadlines are mapped onto it.

Operations
    Each acquire, release and extend is two events, *invoked* and *returned*, tied by
    ``(client, op)``: ``op`` is numbered per :class:`Recorder`, so a client name must belong to
    one recorder (one process). An operation still in flight when the run stopped (a paused
    or killed client) has no returned event; the checkers treat it as having no effect.

Storage
    One JSON object per line, written and flushed as each event happens, so the history of
    a client process that is SIGKILLed survives up to its last event. Each process writes
    its own file; :func:`merge_files` joins them into one :class:`History`. A torn last line
    (a writer killed mid-line) is skipped, since nothing after it can exist.

Derived views
    :meth:`History.tenures` turns acquire/extend/release events into holder intervals, and
    :meth:`History.fault_windows` turns fault begin/end events into intervals; both are what
    the checkers and the timeline plots work from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, ClassVar, Literal, TypeVar

from redlock.exceptions import NodeOutcome, NodeStatus

__all__ = [
    "AcquireInvoked",
    "AcquireReturned",
    "Error",
    "Event",
    "ExtendInvoked",
    "ExtendReturned",
    "FaultBegin",
    "FaultEnd",
    "FaultWindow",
    "ForceReleased",
    "History",
    "KeySample",
    "MasterClock",
    "Recorder",
    "ReleaseInvoked",
    "ReleaseReturned",
    "ResourceRead",
    "ResourceWrite",
    "Tenure",
    "event_from_dict",
    "master_index",
    "master_label",
    "merge_files",
    "read_jsonl",
    "run_queue_wait",
    "voters_of",
]


# --- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of every event: ``time`` is ``time.monotonic()`` when it happened."""

    type: ClassVar[str] = "event"

    time: float

    #: Fields left out of :meth:`to_dict` while None: ones added after histories were
    #: pinned (the simulator's golden digests), which stay byte for byte where unmeasured.
    quiet_when_none: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the fields plus ``"type"``, which :func:`event_from_dict` reads."""
        fields = dataclasses.asdict(self)
        for name in self.quiet_when_none:
            if fields[name] is None:
                del fields[name]
        return {"type": self.type, **fields}


@dataclass(frozen=True, kw_only=True)
class AcquireInvoked(Event):
    """A client starts trying to acquire ``name``; ``ttl`` in seconds, if the client knows it.
    ``blocking`` is whether it may retry (False: one attempt only; None: not recorded)."""

    type: ClassVar[str] = "acquire_invoked"

    client: str
    name: str
    op: int
    ttl: float | None = None
    blocking: bool | None = None


@dataclass(frozen=True, kw_only=True)
class AcquireReturned(Event):
    """An acquire attempt ended.

    ``ok`` means the client now believes it holds the lock until ``deadline``, an absolute
    ``time.monotonic()`` value (the moment validity runs out). ``fencing`` is the fencing
    token, when the client takes one. A failed attempt has ``ok=False`` and, if it raised,
    the exception in ``error`` (``"QuorumUnavailable: ..."``).
    """

    type: ClassVar[str] = "acquire_returned"
    quiet_when_none: ClassVar[frozenset[str]] = frozenset({"queued"})

    client: str
    name: str
    op: int
    ok: bool
    token: str | None = None
    deadline: float | None = None
    fencing: int | None = None
    error: str | None = None
    #: For a semaphore's permit: how many may hold ``name`` at once (None: a lock, one).
    limit: int | None = None
    #: The masters (labels A, B, ...) whose grant the client counted, in master order; None
    #: when the client does not say. A master whose reply came after the majority did is
    #: not among them, although its key may be set: :class:`KeySample` says what is.
    voters: tuple[str, ...] | None = None
    #: For a side of a read-write lock: "read" or "write" (None: any other lock).
    mode: str | None = None
    #: Seconds the thread that ran the operation spent ready to run but waiting for a CPU between the
    #: invocation and this return (the kernel's run_delay: :func:`run_queue_wait`); None
    #: where not measured. :func:`chaos.checkers.check_validity` allows it on top of its
    #: slack, as a descheduled client reads its clock late through no fault of its own.
    queued: float | None = None


@dataclass(frozen=True, kw_only=True)
class ReleaseInvoked(Event):
    """A holder starts releasing: from here on it no longer relies on the lock."""

    type: ClassVar[str] = "release_invoked"

    client: str
    name: str
    op: int
    token: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReleaseReturned(Event):
    """A release ended; ``ok`` is whether a majority confirmed the delete."""

    type: ClassVar[str] = "release_returned"

    client: str
    name: str
    op: int
    ok: bool
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class ExtendInvoked(Event):
    """A holder starts extending its lock; ``ttl`` in seconds, if known."""

    type: ClassVar[str] = "extend_invoked"

    client: str
    name: str
    op: int
    token: str | None = None
    ttl: float | None = None


@dataclass(frozen=True, kw_only=True)
class ExtendReturned(Event):
    """An extend ended; if ``ok``, the holder relies on the lock until the new ``deadline``."""

    type: ClassVar[str] = "extend_returned"
    quiet_when_none: ClassVar[frozenset[str]] = frozenset({"queued"})

    client: str
    name: str
    op: int
    ok: bool
    deadline: float | None = None
    error: str | None = None
    #: The masters whose confirmation the client counted (as :attr:`AcquireReturned.voters`).
    voters: tuple[str, ...] | None = None
    #: As :attr:`AcquireReturned.queued`.
    queued: float | None = None


@dataclass(frozen=True, kw_only=True)
class ResourceRead(Event):
    """A client read the protected resource of lock ``name`` (the counter, in the workload)."""

    type: ClassVar[str] = "resource_read"

    client: str
    name: str
    resource: str
    value: int | None
    fencing: int | None = None


@dataclass(frozen=True, kw_only=True)
class ResourceWrite(Event):
    """A client wrote the protected resource of lock ``name``.

    The workload's write is the second half of a non-atomic increment: ``read_value`` is
    what the client read before, ``value`` what it wrote (``read_value + 1``). ``accepted``
    is False when a fenced store rejected the write for a stale ``fencing`` token. ``seq``,
    when the store reports it, is the order in which the store applied writes; without it,
    event times stand in for that order.
    """

    type: ClassVar[str] = "resource_write"

    client: str
    name: str
    resource: str
    value: int
    read_value: int | None = None
    fencing: int | None = None
    accepted: bool = True
    seq: int | None = None


@dataclass(frozen=True, kw_only=True)
class FaultBegin(Event):
    """A nemesis started a fault: ``kind`` ("kill", "pause", "clock-jump", "blackhole", ...),
    ``target`` (a master, a link, a client) and free-form ``detail``. ``fault`` is an id that
    the matching :class:`FaultEnd` repeats."""

    type: ClassVar[str] = "fault_begin"

    fault: str
    kind: str
    target: str
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class FaultEnd(Event):
    """The fault ``fault`` is over (the master restarted, the link healed, ...)."""

    type: ClassVar[str] = "fault_end"

    fault: str


@dataclass(frozen=True, kw_only=True)
class ForceReleased(Event):
    """An operator (``client``) deleted lock ``name`` on the masters whatever token held it
    (``Redlock.force_release``), taking ``token`` away from its holder: from ``time`` on,
    when the operator began, that holder may no longer rely on the lock, although nobody
    tells it (it learns at its next extend or release)."""

    type: ClassVar[str] = "force_released"

    client: str
    name: str
    token: str | None


@dataclass(frozen=True, kw_only=True)
class Error(Event):
    """Something failed outside an operation's own result (a worker crashed, a read failed)."""

    type: ClassVar[str] = "error"

    client: str
    message: str
    op: int | None = None


@dataclass(frozen=True, kw_only=True)
class MasterClock(Event):
    """The harness read master ``master``'s wall clock (``TIME``): ``wall`` seconds since
    the epoch as that master saw it at ``time``, on a side connection outside every fault.
    The pairs map a master's expiry times onto the history's time line."""

    type: ClassVar[str] = "master_clock"

    master: str
    wall: float


@dataclass(frozen=True, kw_only=True)
class KeySample(Event):
    """What master ``master`` held for lock ``name`` at ``time``, looked at by the harness
    right after a grant or extend (``GET``, ``PTTL`` and ``TIME`` in one transaction): the
    token the key holds (``token``; None: no key), whether that is the token just granted
    (``holds``), and when the key expires there, in that master's wall clock (``expires``;
    None for no key or no ttl). ``wall`` is the master's clock at the sample, so the sample
    is also a :class:`MasterClock` reading."""

    type: ClassVar[str] = "key_sample"

    master: str
    name: str
    token: str | None
    holds: bool
    wall: float
    expires: float | None = None


_E = TypeVar("_E", bound=Event)

_EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        AcquireInvoked,
        AcquireReturned,
        ReleaseInvoked,
        ReleaseReturned,
        ExtendInvoked,
        ExtendReturned,
        ResourceRead,
        ResourceWrite,
        FaultBegin,
        FaultEnd,
        ForceReleased,
        Error,
        MasterClock,
        KeySample,
    )
}


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """The event that :meth:`Event.to_dict` made ``data`` from.

    Raises ValueError for an unknown ``type`` or for missing or unexpected fields, naming
    them, so that a history written by another version fails loudly rather than half-loads.
    """
    fields = dict(data)
    kind = fields.pop("type", None)
    cls = _EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event type {kind!r}; known: {sorted(_EVENT_TYPES)}")
    known = {f.name for f in dataclasses.fields(cls)}
    unexpected = sorted(set(fields) - known)
    if unexpected:
        raise ValueError(f"{kind} event has unexpected fields {unexpected}")
    if isinstance(fields.get("voters"), list):
        # JSON has no tuples; an event must stay hashable and equal to the one written.
        fields["voters"] = tuple(fields["voters"])
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"{kind} event {fields!r}: {exc}") from None


def master_label(index: int) -> str:
    """A, B, C, ... (then M26, M27, ... beyond the alphabet): how histories name masters."""
    return string.ascii_uppercase[index] if index < 26 else f"M{index}"


def master_index(label: str) -> int:
    """The index of the master called ``label`` (the inverse of :func:`master_label`)."""
    if len(label) == 1 and label.isupper():
        return ord(label) - ord("A")
    if label.startswith("M") and label[1:].isdigit():
        return int(label[1:])
    raise ValueError(f"not a master label: {label!r}")


def voters_of(outcomes: Iterable[NodeOutcome], labels: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The masters that granted, from a round's outcomes (``Lock.outcomes``), named by
    ``labels`` (a master's name in the library -> its label; the name itself if absent)."""
    labels = labels or {}
    return tuple(labels.get(o.node, o.node) for o in outcomes if o.status is NodeStatus.GRANTED)


# --- derived views --------------------------------------------------------------------------


@dataclass(frozen=True)
class Tenure:
    """One holder interval: ``client`` relied on lock ``name`` from ``start`` to ``end``.

    ``start`` is when the acquire returned OK; ``end`` is the earliest of the release being
    invoked, the validity deadline (as moved by extends) and the moment an operator
    force-released the token (``revoked``), or ``inf`` when none is known. ``via`` is
    "extend" for an interval opened by an extend that succeeded after the previous deadline
    had already passed: the holder relied on the lock again, although it had lapsed in
    between.
    """

    client: str
    name: str
    token: str | None
    fencing: int | None
    op: int
    invoked: float
    start: float
    end: float
    deadline: float | None
    released: float | None
    via: Literal["acquire", "extend"] = "acquire"
    #: How many may hold ``name`` at once: 1 for a lock, the limit for a semaphore.
    limit: int = 1
    #: A read-write lock's side ("read": it may share ``name`` with other readers); None
    #: for any other lock.
    mode: str | None = None
    #: When an operator force-released this holder's token (:class:`ForceReleased`).
    revoked: float | None = None
    #: The masters that granted it (the acquire's, or the reviving extend's), if recorded.
    voters: tuple[str, ...] | None = None

    @property
    def holder(self) -> str:
        """A short human name: ``client#op``."""
        return f"{self.client}#{self.op}"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["end"] = _json_time(self.end)
        return data


@dataclass(frozen=True)
class FaultWindow:
    """A fault from its begin event to its end event (``inf`` if it never ended)."""

    fault: str
    kind: str
    target: str
    detail: str
    start: float
    end: float

    def overlaps(self, start: float, end: float) -> bool:
        """Whether the fault was active at some moment of [start, end]."""
        return self.start <= end and start <= self.end

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["end"] = _json_time(self.end)
        return data


def _json_time(value: float) -> float | None:
    # JSON has no infinity: "never ended" is written as null.
    return None if math.isinf(value) else value


class _OpenTenure:
    """A tenure being built while the events are replayed."""

    def __init__(self, event: AcquireReturned, invoked: float, via: str = "acquire") -> None:
        self.client = event.client
        self.name = event.name
        self.token = event.token
        self.fencing = event.fencing
        self.op = event.op
        self.invoked = invoked
        self.start = event.time
        self.deadline = event.deadline
        self.released: float | None = None
        self.revoked: float | None = None
        self.via = via
        self.limit = event.limit or 1
        self.voters = event.voters
        self.mode = event.mode

    def close(self) -> Tenure:
        ends = [t for t in (self.released, self.deadline, self.revoked) if t is not None]
        return Tenure(
            client=self.client,
            name=self.name,
            token=self.token,
            fencing=self.fencing,
            op=self.op,
            invoked=self.invoked,
            start=self.start,
            end=min(ends) if ends else math.inf,
            deadline=self.deadline,
            released=self.released,
            via="extend" if self.via == "extend" else "acquire",
            limit=self.limit,
            mode=self.mode,
            revoked=self.revoked,
            voters=self.voters,
        )


# --- history --------------------------------------------------------------------------------


class History:
    """Events in time order (ties keep their recording order); immutable once built."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        # sorted() is stable, so simultaneous events keep the order they were given in.
        self.events: tuple[Event, ...] = tuple(sorted(events, key=lambda e: e.time))
        #: tenures(), replayed once: five checkers ask for them (the history is immutable).
        self._tenures: tuple[Tenure, ...] | None = None

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, History) and self.events == other.events

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<History {len(self.events)} events>"

    @property
    def start(self) -> float | None:
        return self.events[0].time if self.events else None

    @property
    def end(self) -> float | None:
        return self.events[-1].time if self.events else None

    def of_type(self, cls: type[_E]) -> list[_E]:
        """The events of one class, in time order."""
        return [e for e in self.events if isinstance(e, cls)]

    # -- serialisation --

    def to_dicts(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.events]

    @classmethod
    def from_dicts(cls, data: Iterable[Mapping[str, Any]]) -> History:
        return cls(event_from_dict(d) for d in data)

    def to_json(self) -> str:
        """One JSON array (for reports); files written while running use JSON lines."""
        return json.dumps(self.to_dicts(), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> History:
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError("a history in JSON is an array of events")
        return cls.from_dicts(data)

    def save_jsonl(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as out:
            for event in self.events:
                out.write(json.dumps(event.to_dict(), allow_nan=False) + "\n")

    @classmethod
    def load_jsonl(cls, path: str | os.PathLike[str]) -> History:
        return cls(read_jsonl(path))

    # -- derived views --

    def tenures(self) -> list[Tenure]:
        """Every holder interval, ordered by start.

        Replays acquires, extends and releases per ``(client, name, token)``. An extend
        *invoked* before the current deadline that returns OK moves it, even if it returns
        after it: its new validity counts from its start, and its keys' ttl was reset before
        they expired (a key gone by then makes the extend fail), so the holding never lapsed
        on the masters. One invoked after the deadline that returns OK closes the lapsed
        tenure and opens a new one (``via="extend"``), since the holder goes on as if it
        held the lock. A release ends the tenure when it is *invoked*:
        from then on the client no longer relies on the lock, whatever the masters answer.
        A force-release ends the tenure of the token it removed, whoever held it: the
        holder is not told, so what it does after is judged as if its lock had expired.
        """
        if self._tenures is None:
            self._tenures = tuple(self._replay_tenures())
        return list(self._tenures)

    def _replay_tenures(self) -> list[Tenure]:
        acquire_invoked: dict[tuple[str, int], float] = {}
        extend_token: dict[tuple[str, int], str | None] = {}
        extend_invoked: dict[tuple[str, int], float] = {}
        open_: dict[tuple[str, str, str | None], _OpenTenure] = {}
        done: list[Tenure] = []

        def find(client: str, name: str, token: str | None) -> _OpenTenure | None:
            found = open_.get((client, name, token))
            if found is not None or token is not None:
                return found
            # A client that records no tokens: its latest tenure on the name.
            mine = [t for (c, n, _), t in open_.items() if c == client and n == name]
            return max(mine, key=lambda t: t.start) if mine else None

        for event in self.events:
            if isinstance(event, AcquireInvoked):
                acquire_invoked[(event.client, event.op)] = event.time
            elif isinstance(event, AcquireReturned) and event.ok:
                key = (event.client, event.name, event.token)
                previous = open_.pop(key, None)
                if previous is not None:
                    done.append(previous.close())
                invoked = acquire_invoked.get((event.client, event.op), event.time)
                open_[key] = _OpenTenure(event, invoked)
            elif isinstance(event, ReleaseInvoked):
                tenure = find(event.client, event.name, event.token)
                if tenure is not None and tenure.released is None:
                    tenure.released = event.time
            elif isinstance(event, ForceReleased):
                for (_, name, token), tenure in open_.items():
                    if name == event.name and token == event.token and tenure.revoked is None:
                        tenure.revoked = event.time
            elif isinstance(event, ExtendInvoked):
                extend_token[(event.client, event.op)] = event.token
                extend_invoked[(event.client, event.op)] = event.time
            elif isinstance(event, ExtendReturned) and event.ok:
                token = extend_token.get((event.client, event.op))
                tenure = find(event.client, event.name, token)
                if tenure is None or tenure.released is not None:
                    continue
                invoked = extend_invoked.get((event.client, event.op), event.time)
                if tenure.deadline is None or invoked <= tenure.deadline:
                    tenure.deadline = event.deadline
                    continue
                done.append(tenure.close())
                revived = AcquireReturned(
                    time=event.time,
                    client=tenure.client,
                    name=tenure.name,
                    op=tenure.op,
                    ok=True,
                    token=tenure.token,
                    deadline=event.deadline,
                    fencing=tenure.fencing,
                    limit=tenure.limit,
                    voters=event.voters,
                    mode=tenure.mode,
                )
                key = (tenure.client, tenure.name, tenure.token)
                open_[key] = _OpenTenure(revived, tenure.invoked, via="extend")
        done.extend(t.close() for t in open_.values())
        done.sort(key=lambda t: (t.start, t.client, t.op))
        return done

    def fault_windows(self) -> list[FaultWindow]:
        """Every fault as an interval, ordered by start; one never ended lasts to ``inf``."""
        begun: dict[str, FaultBegin] = {}
        windows: list[FaultWindow] = []
        for event in self.events:
            if isinstance(event, FaultBegin):
                begun[event.fault] = event
            elif isinstance(event, FaultEnd):
                begin = begun.pop(event.fault, None)
                if begin is not None:
                    windows.append(_window(begin, event.time))
        windows.extend(_window(begin, math.inf) for begin in begun.values())
        windows.sort(key=lambda w: (w.start, w.fault))
        return windows


def _window(begin: FaultBegin, end: float) -> FaultWindow:
    return FaultWindow(
        fault=begin.fault,
        kind=begin.kind,
        target=begin.target,
        detail=begin.detail,
        start=begin.time,
        end=end,
    )


# --- files ----------------------------------------------------------------------------------


def read_jsonl(path: str | os.PathLike[str]) -> list[Event]:
    """The events of one JSON-lines file, in file order.

    A last line without its newline is a write cut short by a kill and is skipped; a bad
    line anywhere else is corruption and raises ValueError with its line number.
    """
    with open(path, encoding="utf-8") as src:
        lines = src.read().split("\n")
    # After split, a complete file ends with "" (its final newline); anything else there
    # is a torn last write.
    complete, _torn = lines[:-1], lines[-1]
    events: list[Event] = []
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            events.append(event_from_dict(json.loads(line)))
        except (json.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{os.fspath(path)}:{number}: {exc}") from None
    return events


def merge_files(paths: Iterable[str | os.PathLike[str]]) -> History:
    """One history from the JSON-lines files of several processes."""
    return History(itertools.chain.from_iterable(read_jsonl(p) for p in paths))


# --- recording ------------------------------------------------------------------------------


_TASKS = "/proc/self/task"


def run_queue_wait() -> float | None:
    """Seconds the calling thread has spent ready to run but waiting for a CPU (the second
    field of its ``schedstat``: the kernel's run_delay); None where the kernel does not
    keep it (no ``/proc``, no schedstats).

    A recorder that reads it (``Recorder(queue=)``) can tell, per operation, how long the
    client was held off the CPU by a busy machine: time a correct client loses between the
    harness's stamp and its own first clock read, which it cannot help. Only the thread
    that runs the operation counts: another thread's wait holds nobody else off the CPU,
    and summing them would allow a broken client what its other threads waited.
    """
    try:
        with open(f"{_TASKS}/{threading.get_native_id()}/schedstat", "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class Recorder:
    """Records events with timestamps from ``clock``; thread-safe.

    With ``path``, each event is also appended to that file as one JSON line and flushed at
    once, so a process killed mid-run leaves every event it recorded. Give each process its
    own file (appends from several processes to one file could interleave) and merge them
    afterwards with :func:`merge_files`.

    ``source`` prefixes the fault ids this recorder hands out, so that faults recorded by
    different processes keep distinct ids; it defaults to the process id.

    ``queue`` reads the time this process's threads have waited for a CPU so far
    (:func:`run_queue_wait`); with it, each acquire and extend return records how much of
    that came since its invocation (``queued``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        source: str | None = None,
        queue: Callable[[], float | None] | None = None,
    ) -> None:
        self._clock = clock
        self._queue = queue
        # op -> the queue reading at its invocation
        self._queued_at: dict[int, tuple[int, float]] = {}
        self._source = source if source is not None else f"p{os.getpid()}"
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._ops = itertools.count(1)
        self._faults = itertools.count(1)
        self._file: IO[str] | None = None
        if path is not None:
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file, if any; the in-memory events stay readable. Idempotent."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def now(self) -> float:
        return self._clock()

    def record(self, event: Event) -> Event:
        """Keep ``event`` (and write it out); returns it."""
        line = json.dumps(event.to_dict(), allow_nan=False) + "\n"
        with self._lock:
            self._events.append(event)
            if self._file is not None:
                self._file.write(line)
                self._file.flush()
        return event

    @property
    def events(self) -> list[Event]:
        """A copy of what was recorded so far, in recording order."""
        with self._lock:
            return list(self._events)

    def history(self) -> History:
        return History(self.events)

    def next_op(self) -> int:
        with self._lock:
            return next(self._ops)

    # -- one helper per event, stamping the time now --

    def _invoke(self) -> int:
        """A new op id, with the queue reading at its invocation (read before its stamp)."""
        op = self.next_op()
        start = None if self._queue is None else self._queue()
        if start is not None:
            self._queued_at[op] = (threading.get_native_id(), start)
        return op

    def _queued_since(self, op: int) -> float | None:
        """The calling thread's wait for a CPU since ``op``'s invocation; None where not
        measured, or where another thread invoked it (their counts do not compare)."""
        started = self._queued_at.pop(op, None)
        if started is None or started[0] != threading.get_native_id() or self._queue is None:
            return None
        now = self._queue()
        return None if now is None else max(0.0, now - started[1])

    def acquire_invoked(self, client: str, name: str, *, ttl: float | None = None, blocking: bool | None = None) -> int:
        """Record the start of an acquire; returns the op id its returned event must repeat."""
        op = self._invoke()
        self.record(AcquireInvoked(time=self.now(), client=client, name=name, op=op, ttl=ttl, blocking=blocking))
        return op

    def acquire_returned(
        self,
        client: str,
        name: str,
        op: int,
        *,
        ok: bool,
        token: str | None = None,
        deadline: float | None = None,
        fencing: int | None = None,
        error: str | None = None,
        limit: int | None = None,
        voters: tuple[str, ...] | None = None,
        mode: str | None = None,
    ) -> None:
        self.record(
            AcquireReturned(
                time=self.now(),
                client=client,
                name=name,
                op=op,
                ok=ok,
                token=token,
                deadline=deadline,
                fencing=fencing,
                error=error,
                limit=limit,
                voters=voters,
                mode=mode,
                queued=self._queued_since(op),
            )
        )

    def release_invoked(self, client: str, name: str, *, token: str | None = None) -> int:
        op = self.next_op()
        self.record(ReleaseInvoked(time=self.now(), client=client, name=name, op=op, token=token))
        return op

    def release_returned(self, client: str, name: str, op: int, *, ok: bool, error: str | None = None) -> None:
        self.record(ReleaseReturned(time=self.now(), client=client, name=name, op=op, ok=ok, error=error))

    def extend_invoked(self, client: str, name: str, *, token: str | None = None, ttl: float | None = None) -> int:
        op = self._invoke()
        self.record(ExtendInvoked(time=self.now(), client=client, name=name, op=op, token=token, ttl=ttl))
        return op

    def extend_returned(
        self,
        client: str,
        name: str,
        op: int,
        *,
        ok: bool,
        deadline: float | None = None,
        error: str | None = None,
        voters: tuple[str, ...] | None = None,
    ) -> None:
        self.record(
            ExtendReturned(
                time=self.now(),
                client=client,
                name=name,
                op=op,
                ok=ok,
                deadline=deadline,
                error=error,
                voters=voters,
                queued=self._queued_since(op),
            )
        )

    def resource_read(
        self,
        client: str,
        name: str,
        resource: str,
        value: int | None,
        *,
        fencing: int | None = None,
    ) -> None:
        self.record(
            ResourceRead(
                time=self.now(),
                client=client,
                name=name,
                resource=resource,
                value=value,
                fencing=fencing,
            )
        )

    def resource_write(
        self,
        client: str,
        name: str,
        resource: str,
        value: int,
        *,
        read_value: int | None = None,
        fencing: int | None = None,
        accepted: bool = True,
        seq: int | None = None,
    ) -> None:
        self.record(
            ResourceWrite(
                time=self.now(),
                client=client,
                name=name,
                resource=resource,
                value=value,
                read_value=read_value,
                fencing=fencing,
                accepted=accepted,
                seq=seq,
            )
        )

    def fault_begin(self, kind: str, target: str, detail: str = "") -> str:
        """Record the start of a fault; returns the id to pass to :meth:`fault_end`."""
        with self._lock:
            fault = f"{self._source}-f{next(self._faults)}"
        self.record(FaultBegin(time=self.now(), fault=fault, kind=kind, target=target, detail=detail))
        return fault

    def fault_end(self, fault: str) -> None:
        self.record(FaultEnd(time=self.now(), fault=fault))

    @contextlib.contextmanager
    def fault(self, kind: str, target: str, detail: str = "") -> Iterator[str]:
        """``with recorder.fault("pause", "master 2"): ...`` brackets the fault's window."""
        fault = self.fault_begin(kind, target, detail)
        try:
            yield fault
        finally:
            self.fault_end(fault)

    def error(self, client: str, message: str, *, op: int | None = None) -> None:
        self.record(Error(time=self.now(), client=client, message=message, op=op))
