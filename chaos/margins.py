"""Safety margins and coverage: how close a run came to a violation, and whether it got near.

A run with no violation says little by itself: it may never have reached an edge where
Redlock could fail. This module reads, from a history with the masters' ground truth
(:class:`~chaos.history.KeySample` and :class:`~chaos.history.MasterClock` events, recorded
by :mod:`chaos.observer`), two things the clients cannot see. Like :mod:`chaos.checkers`,
it is pure: no clock, no file, no socket.

Margins
    For each acquisition, the moment until which the lock really kept others out, against
    the holder's deadline. Another client can take the lock once ``quorum`` masters are free
    of the holder's key, so with the key on ``h`` masters the lock is protected until the
    ``h - (N - quorum)``-th of those keys ends (expires by that master's clock, or is lost in
    a restart without data). ``margin = protected_until - end``, where ``end`` is when the
    holder stopped relying on the lock (its deadline, or its release if sooner): positive,
    it stopped before anyone could take the lock; negative, a near miss (or a violation,
    when someone did take it). A master's expiry, in its own wall clock, is placed on the
    history's time line through that master's ``TIME`` readings, so a jump or a fast clock
    moves it where it happened.

Handovers
    For each holder that ended by expiry (killed, paused, or simply late) rather than by
    release, the time from the end of its validity to the next holder's grant of the same
    name, when their masters intersect: the gap the drift allowance and the masters' expiry
    leave between two holders. A negative one is an overlap.

Coverage
    Counters of the edges a run reached, where a wrong client or a broken assumption would
    show: acquisitions held on a bare majority, masters losing or jumping over a live key,
    holders paused across their deadline, near misses. :func:`judge` turns a run with no
    violation and no edge reached into the verdict ``unknown``, not ``safe``.

Goals
    A target per counter (:func:`parse_goals`: ``bare_majority=20,near_misses=5``), which
    ``explore --until-coverage`` plays rounds until it reaches (:func:`goals_reached`), or
    until its budget is spent; :func:`judge_goals` then calls a run with no violation
    ``safe`` only if every goal was met.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redlock import quorum_size

from .history import Event, FaultWindow, History, KeySample, MasterClock, Tenure

__all__ = [
    "GOAL_COUNTERS",
    "LOSS_KINDS",
    "Coverage",
    "Margin",
    "Margins",
    "expiry_time",
    "goals_reached",
    "judge",
    "judge_goals",
    "measure_coverage",
    "measure_margins",
    "parse_goals",
]

#: Master faults after which the master may no longer have the keys it had (restarted empty,
#: with what its disk kept after a power cut, or evicted under maxmemory). A kill's detail
#: says whether it restarts empty.
LOSS_KINDS = ("crash-restart", "kill", "power-loss", "eviction")
_CLOCK_KINDS = ("clock-jump", "clock-rate", "clock-strobe", "clock-slew")

Outcome = Literal["safe", "unsafe", "unknown"]


def _history(history: History | Iterable[Event]) -> History:
    return history if isinstance(history, History) else History(history)


def loses_keys(window: FaultWindow) -> bool:
    """Whether the master fault ``window`` takes its keys away."""
    if window.kind in ("power-loss", "eviction"):
        return True
    return window.kind in LOSS_KINDS and "empty" in window.detail


# --- placing a master's expiry on the time line ------------------------------------------------


def expiry_time(
    readings: Sequence[tuple[float, float]], expires: float, since: float, jumps: Sequence[float] = ()
) -> float:
    """When a master whose clock read as ``readings`` ((monotonic time, wall) pairs, in time
    order) reached wall time ``expires``, looking from ``since`` on.

    Between two readings the clock is taken to run at the rate they show, except across a
    clock fault begun in between (``jumps``: their start times): if the expiry falls in such
    an interval, the clock crossed it at the fault at the latest. After the last reading,
    the clock runs at rate 1.
    """
    start = bisect.bisect_left(readings, (since, -math.inf))
    # From ``since`` itself: its wall time is the reading before it, run on at rate 1.
    points = [(since, _wall_at(readings, since)), *readings[start:]]
    if points[0][1] >= expires:
        return since
    for (t0, w0), (t1, w1) in itertools.pairwise(points):
        if w1 < expires:
            continue
        natural = t0 + (expires - w0)
        faults = [j for j in jumps if t0 < j <= t1]
        if natural <= t1:
            return min([natural, *[j for j in faults if j <= natural]])
        if faults:
            return faults[0]
        # Faster than real time, with no fault recorded: the rate the readings show.
        return t0 + (expires - w0) * (t1 - t0) / (w1 - w0)
    last_t, last_w = points[-1]
    return last_t + (expires - last_w)


def _wall_at(readings: Sequence[tuple[float, float]], when: float) -> float:
    """A master's wall clock at ``when``, from the reading just before (rate 1 since)."""
    index = bisect.bisect_right(readings, (when, math.inf)) - 1
    if index < 0:
        return readings[0][1] - (readings[0][0] - when) if readings else when
    t, w = readings[index]
    return w + (when - t)


# --- margins ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Margin:
    """One acquisition's margin (see the module docstring); times are ``time.monotonic()``."""

    client: str
    op: int
    name: str
    start: float
    #: When the holder stopped relying on the lock: its deadline, or its release if sooner.
    deadline: float
    #: Until when the key kept others out (on enough masters), or ``start`` if it never did.
    protected_until: float
    #: The masters that held the key right after the grant.
    holders: tuple[str, ...]

    @property
    def margin(self) -> float:
        return self.protected_until - self.deadline

    @property
    def holder(self) -> str:
        return f"{self.client}#{self.op}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "name": self.name,
            "start": self.start,
            "deadline": self.deadline,
            "protected_until": self.protected_until,
            "margin": self.margin,
            "holders": list(self.holders),
        }


@dataclass(frozen=True)
class Handover:
    """A holder that ended by expiry (``previous``) and the next grant of its name."""

    previous: str
    next: str
    name: str
    #: The next grant minus the end of the previous holder's validity (negative: overlap).
    gap: float
    shared: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "previous": self.previous,
            "next": self.next,
            "name": self.name,
            "gap": self.gap,
            "shared": list(self.shared),
        }


def _summary(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "min": None, "p1": None, "p10": None, "p50": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(math.ceil(q / 100 * len(ordered)), 1) - 1]

    return {"count": len(ordered), "min": ordered[0], "p1": rank(1), "p10": rank(10), "p50": rank(50)}


@dataclass(frozen=True)
class Margins:
    """Every acquisition's margin, and every handover after an expiry."""

    margins: tuple[Margin, ...] = ()
    handovers: tuple[Handover, ...] = ()
    #: Acquisitions without a margin: some master that granted them was not looked at while
    #: they lasted (down, paused, or the observer late).
    unsampled: int = 0
    #: The masters' keys placed by each master's ``TIME``; False: no readings at all.
    sampled: bool = False

    @property
    def near_misses(self) -> tuple[Margin, ...]:
        """Acquisitions whose key let others in before their deadline (violations included)."""
        return tuple(m for m in self.margins if m.margin < 0)

    @property
    def smallest(self) -> Margin | None:
        return min(self.margins, key=lambda m: m.margin, default=None)

    def to_dict(self) -> dict[str, Any]:
        """Seconds throughout: the distribution, the near misses and the closest handover."""
        smallest = self.smallest
        closest = min(self.handovers, key=lambda h: h.gap, default=None)
        return {
            **_summary([m.margin for m in self.margins]),
            "near_misses": len(self.near_misses),
            "unsampled": self.unsampled,
            "smallest": None if smallest is None else smallest.to_dict(),
            "handovers": _summary([h.gap for h in self.handovers]),
            "closest_handover": None if closest is None else closest.to_dict(),
        }

    def describe(self) -> str:
        """One line for a report."""
        if not self.margins:
            return "no acquisition sampled on the masters"
        values = _summary([m.margin for m in self.margins])
        gaps = _summary([h.gap for h in self.handovers])
        handover = "" if not gaps["count"] else f"; closest handover after an expiry {gaps['min'] * 1000:+.1f} ms"
        return (
            f"margin min {values['min'] * 1000:+.1f} ms, p50 {values['p50'] * 1000:+.1f} ms over "
            f"{values['count']} acquisitions, {len(self.near_misses)} near misses{handover}"
        )


class _Truth:
    """The history's ground truth, indexed: clock readings, key samples, key losses."""

    def __init__(self, history: History) -> None:
        self.readings: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.samples: dict[tuple[str, str], list[KeySample]] = defaultdict(list)
        for event in history:
            if isinstance(event, MasterClock):
                self.readings[event.master].append((event.time, event.wall))
            elif isinstance(event, KeySample):
                self.readings[event.master].append((event.time, event.wall))
                if event.token is not None:
                    self.samples[(event.name, event.token)].append(event)
        for points in self.readings.values():
            points.sort()
        self.losses: dict[str, list[float]] = defaultdict(list)
        self.jumps: dict[str, list[float]] = defaultdict(list)
        for window in history.fault_windows():
            for master in window.target.split(","):
                if loses_keys(window):
                    self.losses[master].append(window.start)
                elif window.kind in _CLOCK_KINDS:
                    self.jumps[master].append(window.start)

    def key_end(self, sample: KeySample) -> float:
        """When the key ``sample`` saw ends on its master: expiry, or a loss before it."""
        if sample.expires is None:
            return math.inf  # no ttl: it never expires
        end = expiry_time(self.readings[sample.master], sample.expires, sample.time, self.jumps[sample.master])
        lost = [t for t in self.losses[sample.master] if sample.time <= t < end]
        return min([end, *lost])

    def holders(self, tenure: Tenure, until: float) -> tuple[dict[str, KeySample], dict[str, KeySample]]:
        """Per master: the first sample of ``tenure``'s token after its start, and the last one
        taken before ``until``."""
        first: dict[str, KeySample] = {}
        last: dict[str, KeySample] = {}
        if tenure.token is None:
            return first, last
        for sample in self.samples.get((tenure.name, tenure.token), ()):
            if sample.time < tenure.invoked or sample.time > until:
                continue
            first.setdefault(sample.master, sample)
            last[sample.master] = sample
        return first, last


def measure_margins(history: History | Iterable[Event], nodes: int) -> Margins:
    """Every acquisition's margin and every handover after an expiry (module docstring);
    ``nodes`` is the number of masters."""
    history = _history(history)
    truth = _Truth(history)
    if not truth.readings:
        return Margins()
    spare = nodes - quorum_size(nodes)
    margins: list[Margin] = []
    ends: dict[tuple[str, int], tuple[float, tuple[str, ...]]] = {}
    unsampled = 0
    # Locks only: a semaphore's permits and a read-write lock's readers share their name by design.
    tenures = [
        t
        for t in history.tenures()
        if t.limit == 1 and t.mode != "read" and t.deadline is not None and t.token is not None
    ]
    for tenure in tenures:
        first, last = truth.holders(tenure, tenure.end)
        # A voter not looked at while the holding lasted (down, paused, or the observer late)
        # is unknown, not free: no margin rather than a false near miss.
        if not first or any(v not in first for v in tenure.voters or ()):
            unsampled += 1
            continue
        holding = sorted(truth.key_end(s) for s in last.values() if s.expires is not None)
        keep = len(holding) - spare
        protected = holding[keep - 1] if keep >= 1 else min(s.time for s in first.values())
        holders = tuple(sorted(first))
        margins.append(Margin(tenure.client, tenure.op, tenure.name, tenure.start, tenure.end, protected, holders))
        ends[(tenure.client, tenure.op)] = (protected, holders)
    return Margins(tuple(margins), tuple(_handovers(tenures, ends)), unsampled, True)


def _handovers(
    tenures: Sequence[Tenure], truth: Mapping[tuple[str, int], tuple[float, tuple[str, ...]]]
) -> list[Handover]:
    by_name: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in tenures:
        by_name[tenure.name].append(tenure)
    found: list[Handover] = []
    for name, group in by_name.items():
        group.sort(key=lambda t: (t.start, t.client, t.op))
        for index, later in enumerate(group[1:], start=1):
            earlier = max(group[:index], key=lambda t: t.end)
            expired = earlier.released is None or earlier.released >= (earlier.deadline or math.inf)
            if not expired or earlier.client == later.client:
                continue
            before = set(truth.get((earlier.client, earlier.op), (0.0, earlier.voters or ()))[1])
            after = set(truth.get((later.client, later.op), (0.0, later.voters or ()))[1])
            shared = tuple(sorted(before & after))
            if shared:
                found.append(Handover(earlier.holder, later.holder, name, later.start - earlier.end, shared))
    return found


# --- coverage and the three verdicts --------------------------------------------------------


@dataclass(frozen=True)
class Coverage:
    """How often a run reached each edge (module docstring)."""

    #: Acquisitions whose key was, right after the grant, on a bare majority only.
    bare_majority: int = 0
    #: Masters restarted without a live key they held (empty, or after a power cut).
    lost_live_keys: int = 0
    #: Clock faults begun on a master that held a live key.
    clock_faults_on_live_keys: int = 0
    #: Client pauses during which one of the client's deadlines passed.
    pauses_across_deadline: int = 0
    #: Acquisitions with a negative margin.
    near_misses: int = 0
    #: Handovers after an expiry between holders that share a master.
    expiry_handovers: int = 0
    #: Faults a reactive nemesis fired, by trigger.
    triggered: dict[str, int] = field(default_factory=dict)

    @property
    def edges(self) -> int:
        """Edges reached: the counters that put a lock's safety to a test."""
        return self.lost_live_keys + self.clock_faults_on_live_keys + self.pauses_across_deadline + self.near_misses

    def __add__(self, other: Coverage) -> Coverage:
        """The counts of two runs together (rounds of one exploration)."""
        triggered = dict(self.triggered)
        for trigger, count in other.triggered.items():
            triggered[trigger] = triggered.get(trigger, 0) + count
        return Coverage(
            bare_majority=self.bare_majority + other.bare_majority,
            lost_live_keys=self.lost_live_keys + other.lost_live_keys,
            clock_faults_on_live_keys=self.clock_faults_on_live_keys + other.clock_faults_on_live_keys,
            pauses_across_deadline=self.pauses_across_deadline + other.pauses_across_deadline,
            near_misses=self.near_misses + other.near_misses,
            expiry_handovers=self.expiry_handovers + other.expiry_handovers,
            triggered=triggered,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "bare_majority": self.bare_majority,
            "lost_live_keys": self.lost_live_keys,
            "clock_faults_on_live_keys": self.clock_faults_on_live_keys,
            "pauses_across_deadline": self.pauses_across_deadline,
            "near_misses": self.near_misses,
            "expiry_handovers": self.expiry_handovers,
            "triggered": dict(self.triggered),
            "edges": self.edges,
        }


def measure_coverage(history: History | Iterable[Event], nodes: int, margins: Margins | None = None) -> Coverage:
    """The edges ``history`` reached (``margins``: :func:`measure_margins`'s, if at hand)."""
    history = _history(history)
    margins = measure_margins(history, nodes) if margins is None else margins
    quorum = quorum_size(nodes)
    truth = _Truth(history)
    # Live keys per master: (from the sample that saw it, to its end there).
    live: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for samples in truth.samples.values():
        for sample in samples:
            if sample.expires is not None:
                live[sample.master].append((sample.time, truth.key_end(sample)))
    windows = history.fault_windows()
    lost = clocked = 0
    for window in windows:
        for master in window.target.split(","):
            spans = live.get(master, ())
            hit = any(start <= window.start <= end + 1e-3 for start, end in spans)
            if hit and loses_keys(window):
                lost += 1
            elif hit and window.kind in _CLOCK_KINDS:
                clocked += 1
    tenures = history.tenures()
    paused = 0
    for window in windows:
        if window.kind != "client-pause":
            continue
        for tenure in tenures:
            deadline = tenure.deadline
            mine = tenure.client.split("/", 1)[0] == window.target
            unreleased = tenure.released is None or tenure.released > window.start
            if mine and unreleased and deadline is not None and window.start < deadline < window.end:
                paused += 1
    triggered: dict[str, int] = defaultdict(int)
    for window in windows:
        if window.detail.startswith("reactive:"):
            triggered[window.detail.split(":", 2)[1].strip()] += 1
    return Coverage(
        bare_majority=sum(1 for m in margins.margins if len(m.holders) == quorum),
        lost_live_keys=lost,
        clock_faults_on_live_keys=clocked,
        pauses_across_deadline=paused,
        near_misses=len(margins.near_misses),
        expiry_handovers=len(margins.handovers),
        triggered=dict(triggered),
    )


def judge(violations: int, coverage: Coverage | None, *, goal: int = 1) -> tuple[Outcome, str]:
    """``unsafe`` with any violation; ``safe`` when the run reached at least ``goal`` edges
    without one; else ``unknown``, with the reason."""
    if violations:
        return "unsafe", f"{violations} violations"
    if coverage is None:
        return "unknown", "no ground truth from the masters (coverage not measured)"
    if coverage.edges >= goal:
        return "safe", f"no violation, {coverage.edges} edges reached (goal {goal})"
    return "unknown", (
        f"no violation, but only {coverage.edges} of {goal} edges reached: {coverage.bare_majority} bare-majority "
        f"acquisitions, {coverage.lost_live_keys} live keys lost, {coverage.clock_faults_on_live_keys} clock faults "
        f"on live keys, {coverage.pauses_across_deadline} pauses across a deadline, {coverage.near_misses} near misses"
    )


#: What a goal may name: a counter of :class:`Coverage`, their sum ``edges``, or the
#: acquisitions made (a sample size).
GOAL_COUNTERS = (
    "bare_majority",
    "lost_live_keys",
    "clock_faults_on_live_keys",
    "pauses_across_deadline",
    "near_misses",
    "expiry_handovers",
    "edges",
    "acquisitions",
)


def parse_goals(text: str) -> dict[str, int]:
    """``"bare_majority=20, near_misses=5"`` as ``{"bare_majority": 20, "near_misses": 5}``;
    ValueError naming ``goals`` for an unknown counter, a bad or non-positive target, or a
    counter given twice."""
    if not isinstance(text, str):
        raise TypeError(f"goals must be a string, not {type(text).__name__}")
    goals: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, equals, target = (x.strip() for x in part.partition("="))
        if name not in GOAL_COUNTERS:
            raise ValueError(f"goals: unknown counter {name!r}; the counters are {', '.join(GOAL_COUNTERS)}")
        if not equals or not target.isdigit() or int(target) < 1:
            raise ValueError(f"goals: {part!r} needs a whole target of at least 1, as {name}=10")
        if name in goals:
            raise ValueError(f"goals: {name} given twice")
        goals[name] = int(target)
    if not goals:
        raise ValueError("goals: none given (e.g. bare_majority=20,near_misses=5)")
    return goals


def goals_reached(goals: Mapping[str, int], coverage: Coverage, acquisitions: int) -> dict[str, dict[str, Any]]:
    """Per goal: its target, the count reached and whether it is met."""
    counts = {**coverage.to_dict(), "acquisitions": acquisitions}
    return {
        name: {"target": target, "reached": int(counts[name]), "met": int(counts[name]) >= target}
        for name, target in goals.items()
    }


def judge_goals(violations: int, reached: Mapping[str, Mapping[str, Any]]) -> tuple[Outcome, str]:
    """``unsafe`` with any violation; ``safe`` when every goal of ``reached``
    (:func:`goals_reached`) was met without one; else ``unknown``, naming what fell short."""
    if violations:
        return "unsafe", f"{violations} violations"
    short = [f"{name} {goal['reached']} of {goal['target']}" for name, goal in reached.items() if not goal["met"]]
    if short:
        return "unknown", f"no violation, but goals not met: {', '.join(short)}"
    met = ", ".join(f"{name} {goal['reached']}" for name, goal in reached.items())
    return "safe", f"no violation, every goal met ({met})"
