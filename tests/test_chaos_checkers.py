"""The history model and the checkers, on synthetic histories (pure tier: no servers).

The checkers decide every scenario's verdict, so each is compared with a brute-force
oracle on random histories: the mutual-exclusion checker must report exactly the
overlapping pairs (every one, and never a disjoint one), the lost-update checker exactly
the increments a simulated racy counter lost, and so on. Times are small integers so that
ties (a release at the very moment of the next acquire) come up often.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from chaos.checkers import (
    VALIDITY_SLACK,
    DuplicateToken,
    TokenRegression,
    check_all,
    check_extends,
    check_fencing_order,
    check_lost_updates,
    check_mutual_exclusion,
    check_stale_writes,
    check_validity,
    measure_liveness,
    percentile,
    validity_bound,
)
from chaos.history import (
    AcquireInvoked,
    AcquireReturned,
    Error,
    Event,
    ExtendInvoked,
    ExtendReturned,
    FaultBegin,
    FaultEnd,
    ForceReleased,
    History,
    Recorder,
    ReleaseInvoked,
    ReleaseReturned,
    ResourceRead,
    ResourceWrite,
    event_from_dict,
    merge_files,
    read_jsonl,
    run_queue_wait,
)

# No per-example deadline: a loaded 2-core CI box must not fail a property on timing.
RELAXED = settings(deadline=None)

# --- synthetic holders ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One synthetic holder: what the history will say, and the interval it must yield."""

    client: str
    name: str
    op: int
    invoked: int
    start: int
    deadline: int
    release: int | None

    @property
    def end(self) -> int:
        return self.deadline if self.release is None else min(self.release, self.deadline)

    def events(self) -> list[Event]:
        token = f"t{self.op}"
        events: list[Event] = [
            AcquireInvoked(time=self.invoked, client=self.client, name=self.name, op=self.op),
            AcquireReturned(
                time=self.start,
                client=self.client,
                name=self.name,
                op=self.op,
                ok=True,
                token=token,
                deadline=self.deadline,
            ),
        ]
        if self.release is not None:
            events.append(
                ReleaseInvoked(
                    time=self.release,
                    client=self.client,
                    name=self.name,
                    op=10_000 + self.op,
                    token=token,
                )
            )
        return events


@st.composite
def specs(draw: st.DrawFn, max_size: int = 12) -> list[Spec]:
    count = draw(st.integers(0, max_size))
    out = []
    for op in range(count):
        invoked = draw(st.integers(0, 30))
        start = invoked + draw(st.integers(0, 3))
        # Validity may be zero (an empty interval), and a release may come before or after
        # the deadline, or never.
        deadline = start + draw(st.integers(0, 10))
        release = draw(st.none() | st.integers(start, start + 12))
        out.append(
            Spec(
                client=draw(st.sampled_from(["c1", "c2", "c3"])),
                name=draw(st.sampled_from(["a", "b"])),
                op=op,
                invoked=invoked,
                start=start,
                deadline=deadline,
                release=release,
            )
        )
    return out


@st.composite
def faults(draw: st.DrawFn) -> list[tuple[int, int | None]]:
    windows = []
    for _ in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, 40))
        windows.append((start, draw(st.none() | st.integers(start, 45))))
    return windows


def history_of(holders: Sequence[Spec], windows: Sequence[tuple[int, int | None]] = ()) -> History:
    events: list[Event] = []
    for spec in holders:
        events.extend(spec.events())
    for i, (start, end) in enumerate(windows):
        events.append(FaultBegin(time=start, fault=f"f{i}", kind="pause", target=f"m{i}"))
        if end is not None:
            events.append(FaultEnd(time=end, fault=f"f{i}"))
    return History(events)


def oracle_pairs(holders: Sequence[Spec]) -> set[frozenset[int]]:
    """Brute force: every pair of holders of one name with a common instant."""
    pairs = set()
    for a, b in itertools.combinations(holders, 2):
        if a.name == b.name and max(a.start, b.start) < min(a.end, b.end):
            pairs.add(frozenset((a.op, b.op)))
    return pairs


# --- mutual exclusion -----------------------------------------------------------------------


@RELAXED
@given(specs())
def test_tenures_are_the_specified_intervals(holders: list[Spec]) -> None:
    tenures = history_of(holders).tenures()
    got = sorted((t.op, t.client, t.name, t.invoked, t.start, t.end) for t in tenures)
    want = sorted((s.op, s.client, s.name, s.invoked, s.start, s.end) for s in holders)
    assert got == want


@settings(max_examples=300, deadline=None)
@given(specs(), faults())
def test_mutual_exclusion_flags_exactly_the_overlapping_pairs(
    holders: list[Spec], windows: list[tuple[int, int | None]]
) -> None:
    overlaps = check_mutual_exclusion(history_of(holders, windows))
    found = [frozenset((o.first.op, o.second.op)) for o in overlaps]
    assert len(found) == len(set(found)), "a pair was reported twice"
    assert set(found) == oracle_pairs(holders)

    by_op = {s.op: s for s in holders}
    for overlap in overlaps:
        a, b = by_op[overlap.first.op], by_op[overlap.second.op]
        assert overlap.name == a.name == b.name
        assert overlap.first.start <= overlap.second.start
        assert overlap.start == max(a.start, b.start)
        assert overlap.end == min(a.end, b.end)
        assert overlap.start < overlap.end
        active = {
            f"f{i}"
            for i, (start, end) in enumerate(windows)
            if start <= overlap.end and overlap.start <= (math.inf if end is None else end)
        }
        assert {w.fault for w in overlap.faults} == active
        assert {w.fault for w in overlap.faults} <= {w.fault for w in overlap.context}
        assert overlap.describe()
        json.dumps(overlap.to_dict(), allow_nan=False)


@RELAXED
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=10))
def test_a_sequence_of_handovers_is_never_flagged(steps: list[tuple[int, int]]) -> None:
    # Each holder starts at or after the previous one's end: disjoint, also when touching.
    holders, t = [], 0
    for op, (gap, length) in enumerate(steps):
        start = t + gap
        holders.append(Spec("c1" if op % 2 else "c2", "a", op, start, start, start + length, None))
        t = start + length
    assert check_mutual_exclusion(history_of(holders)) == []


def test_an_overlap_names_both_holders_and_the_fault_that_caused_it() -> None:
    history = History(
        [
            AcquireInvoked(time=0.0, client="c1", name="lock", op=1),
            AcquireReturned(time=0.1, client="c1", name="lock", op=1, ok=True, token="x", deadline=10.0),
            FaultBegin(time=1.0, fault="k", kind="restart-empty", target="master C"),
            FaultEnd(time=1.5, fault="k"),
            AcquireInvoked(time=2.0, client="c2", name="lock", op=1),
            AcquireReturned(time=2.1, client="c2", name="lock", op=1, ok=True, token="y", deadline=12.0),
            ReleaseInvoked(time=3.0, client="c2", name="lock", op=2, token="y"),
        ]
    )
    [overlap] = check_mutual_exclusion(history)
    assert (overlap.first.client, overlap.second.client) == ("c1", "c2")
    assert (overlap.start, overlap.end) == (2.1, 3.0)
    assert overlap.faults == ()  # the crash was over before the overlap began...
    assert [w.kind for w in overlap.context] == ["restart-empty"]  # ...but caused it
    assert "c1#1" in overlap.describe()
    assert "restart-empty master C" in overlap.describe()


def test_failed_and_unanswered_acquires_hold_nothing() -> None:
    history = History(
        [
            AcquireInvoked(time=0, client="c1", name="n", op=1),
            AcquireReturned(time=1, client="c1", name="n", op=1, ok=False, error="QuorumUnavailable: 2/5"),
            AcquireInvoked(time=0, client="c2", name="n", op=1),  # never returned: paused
            AcquireInvoked(time=0, client="c3", name="n", op=1),
            AcquireReturned(time=1, client="c3", name="n", op=1, ok=True, token="t", deadline=5),
        ]
    )
    assert [t.client for t in history.tenures()] == ["c3"]
    assert check_mutual_exclusion(history) == []


def test_extends_move_the_deadline_and_a_late_one_revives_the_lock() -> None:
    history = History(
        [
            AcquireInvoked(time=0, client="c1", name="n", op=1),
            AcquireReturned(time=1, client="c1", name="n", op=1, ok=True, token="t", deadline=5),
            ExtendInvoked(time=4, client="c1", name="n", op=2, token="t"),
            ExtendReturned(time=4, client="c1", name="n", op=2, ok=True, deadline=9),
            # c1 stalls past 9; c2 takes the lock and releases it...
            AcquireInvoked(time=10, client="c2", name="n", op=1),
            AcquireReturned(time=10, client="c2", name="n", op=1, ok=True, token="u", deadline=20),
            ReleaseInvoked(time=12, client="c2", name="n", op=2, token="u"),
            ReleaseReturned(time=12, client="c2", name="n", op=2, ok=True),
            # ...and c1's extend then succeeds, which it must not (scenario 16).
            ExtendInvoked(time=13, client="c1", name="n", op=3, token="t"),
            ExtendReturned(time=13, client="c1", name="n", op=3, ok=True, deadline=18),
            ExtendInvoked(time=14, client="c1", name="n", op=4, token="t"),
            ExtendReturned(time=14, client="c1", name="n", op=4, ok=False, error="LockLost"),
        ]
    )
    spans = [(t.client, t.start, t.end, t.via) for t in history.tenures()]
    assert spans == [("c1", 1, 9, "acquire"), ("c2", 10, 12, "acquire"), ("c1", 13, 18, "extend")]
    [late] = check_extends(history)
    assert (late.lapsed.end, late.revived.start) == (9, 13)
    assert "c1#1" in late.describe()
    assert check_mutual_exclusion(history) == []
    assert check_all(history).kinds == ["late-extend"]


def test_an_extend_invoked_in_time_and_answered_late_keeps_the_holding() -> None:
    """Invoked at 4, before the deadline 5, answered at 6 (the holder paused, or its replies
    were held): the keys' ttl was reset before they expired, and the new validity counts
    from the extend's start, so the holding never lapsed: one tenure, no late extend. The
    same extend invoked at 5.5 revives a lapsed lock."""

    def history(invoked: float) -> History:
        return History(
            [
                AcquireInvoked(time=0, client="c1", name="n", op=1),
                AcquireReturned(time=1, client="c1", name="n", op=1, ok=True, token="t", deadline=5),
                ExtendInvoked(time=invoked, client="c1", name="n", op=2, token="t"),
                ExtendReturned(time=6, client="c1", name="n", op=2, ok=True, deadline=invoked + 4),
            ]
        )

    in_time = history(invoked=4)
    assert [(t.start, t.end, t.via) for t in in_time.tenures()] == [(1, 8, "acquire")]
    assert check_extends(in_time) == []
    lapsed = history(invoked=5.5)
    assert [(t.start, t.end, t.via) for t in lapsed.tenures()] == [(1, 5, "acquire"), (6, 9.5, "extend")]
    assert check_all(lapsed).kinds == ["late-extend"]


def test_a_force_release_ends_the_tenure_of_the_token_it_removed() -> None:
    """The operator takes c1's lock at 2 (scenario 25): c1 is not told and writes at 6, so its
    write is late like a paused holder's, not a second holder's: a lost update, no overlap."""
    history = History(
        [
            AcquireInvoked(time=0, client="c1", name="n", op=1),
            AcquireReturned(time=1, client="c1", name="n", op=1, ok=True, token="t", deadline=30),
            AcquireInvoked(time=0, client="c3", name="m", op=1),
            AcquireReturned(time=1, client="c3", name="m", op=1, ok=True, token="v", deadline=30),
            ResourceRead(time=1.5, client="c1", name="n", resource="r", value=0),
            # Another name, and another token of the name, are not touched.
            ForceReleased(time=2, client="operator", name="n", token="t"),
            ForceReleased(time=2, client="operator", name="n", token="gone"),
            AcquireInvoked(time=3, client="c2", name="n", op=1),
            AcquireReturned(time=3, client="c2", name="n", op=1, ok=True, token="u", deadline=30),
            ResourceRead(time=4, client="c2", name="n", resource="r", value=0),
            ResourceWrite(time=5, client="c2", name="n", resource="r", value=1, read_value=0),
            ReleaseInvoked(time=5.5, client="c2", name="n", op=2, token="u"),
            ResourceWrite(time=6, client="c1", name="n", resource="r", value=1, read_value=0),
            ReleaseInvoked(time=7, client="c1", name="n", op=2, token="t"),
        ]
    )
    spans = [(t.client, t.start, t.end, t.revoked) for t in history.tenures()]
    assert spans == [("c1", 1, 2, 2), ("c3", 1, 30, None), ("c2", 3, 5.5, None)]
    assert check_all(history).kinds == ["lost-update"]


# --- validity -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One successful operation of a modelled client: when the harness saw it invoked and
    returned, when the client read its clock for the attempt that won (``t1``), how far its
    deadline strays from the correct ``t1 + ttl - drift``, and how long the client waited
    for a CPU meanwhile, as its return records it (``queued``; None: not measured)."""

    via: str  # "acquire-once", "acquire-blocking" or "extend"
    ttl: float
    invoked: float
    t1: float
    returned: float
    error: float
    queued: float | None = None

    @property
    def deadline(self) -> float:
        return validity_bound(self.t1, self.ttl) + self.error

    def events(self, op: int) -> list[Event]:
        ended: dict[str, Any] = {
            "time": self.returned,
            "client": "c1",
            "name": "n",
            "op": op,
            "ok": True,
            "deadline": self.deadline,
            "queued": self.queued,
        }
        if self.via == "extend":
            return [
                ExtendInvoked(time=self.invoked, client="c1", name="n", op=op, token="t", ttl=self.ttl),
                ExtendReturned(**ended),
            ]
        blocking = self.via == "acquire-blocking"
        return [
            AcquireInvoked(time=self.invoked, client="c1", name="n", op=op, ttl=self.ttl, blocking=blocking),
            AcquireReturned(token="t", **ended),
        ]


@st.composite
def claims(draw: st.DrawFn) -> list[Claim]:
    found: list[Claim] = []
    now = 0.0
    for _ in range(draw(st.integers(1, 6))):
        via = draw(st.sampled_from(["acquire-once", "acquire-blocking", "extend"]))
        ttl = draw(st.sampled_from([0.05, 1.0, 2.0, 30.0]))
        invoked = now + draw(st.floats(0, 1))
        latency = draw(st.floats(0, 0.5))
        # A one-attempt operation reads its clock within the slack of its invocation (half
        # of it here: at exactly the slack a correct deadline equals the bound, and which
        # side float rounding puts it on is no property of the checker); a blocking
        # acquire's winning attempt may begin anywhere before its return.
        # A client held off the CPU (``queued``) may read its clock that much later still.
        queued = draw(st.one_of(st.none(), st.sampled_from([0.0, 0.003, 0.05])))
        late = min(latency, VALIDITY_SLACK / 2 + (queued or 0.0) / 2)
        reach = latency if via == "acquire-blocking" else late
        t1 = invoked + draw(st.floats(0, 1)) * reach
        error = draw(st.sampled_from([0.0, 0.0, -0.01, 0.001, 0.012, 0.02, 0.3]))
        found.append(Claim(via, ttl, invoked, t1, invoked + latency, error, queued))
        now = invoked + latency
    return found


@RELAXED
@given(claims())
def test_validity_flags_exactly_the_claims_past_what_the_harness_can_prove(found: list[Claim]) -> None:
    """Oracle: a claim is flagged iff it exceeds the bound from the invocation (one attempt)
    or from the return (a blocking acquire) by more than the slack plus the time it waited
    for a CPU. So a correct client (error <= 0) is never flagged, even when descheduled
    past the slack, and one that counts from its replies (K5) is whenever its one attempt
    took longer than that; one that omits the drift (12 ms at 1 s) is, where it waited
    less than 7 ms."""
    history = History(e for op, claim in enumerate(found, start=1) for e in claim.events(op))
    flagged = {v.op for v in check_validity(history)}
    for op, claim in enumerate(found, start=1):
        blocking = claim.via == "acquire-blocking"
        since = claim.returned if blocking else claim.invoked
        held_off = 0.0 if blocking else min(claim.queued or 0.0, claim.returned - claim.invoked)
        expected = claim.deadline > validity_bound(since, claim.ttl) + VALIDITY_SLACK + held_off
        assert (op in flagged) == expected, claim
        if claim.error <= 0:
            assert op not in flagged, claim
    for overstated in check_validity(history):
        assert overstated.excess > 0
        assert overstated.holder in overstated.describe()


def test_validity_from_the_replies_is_flagged_by_its_wait() -> None:
    history = History(
        [
            AcquireInvoked(time=10.0, client="c1", name="n", op=1, ttl=2.0, blocking=False),
            # The replies took 0.3 s; the client counted its 2 s from them.
            AcquireReturned(time=10.3, client="c1", name="n", op=1, ok=True, token="t", deadline=10.3 + 1.978),
        ]
    )
    [claim] = check_validity(history)
    assert claim.excess == pytest.approx(0.3 - VALIDITY_SLACK)
    verdict = check_all(history)
    assert verdict.kinds == ["validity-overstated"]
    assert "295.0 ms" in verdict.violations[0]
    assert check_validity(history, slack=0.4) == []


def test_a_client_held_off_the_cpu_is_allowed_what_it_waited_and_no_more() -> None:
    """A correct client descheduled 6.8 ms between the harness's stamp and its first clock
    read (as a loaded machine does to scenario 21a's) claims 1.8 ms past the constant slack; its return says it waited
    7 ms for a CPU. A client that omits the drift (12 ms at 1 s) with no wait is caught."""

    def claim(deadline_past: float, queued: float | None) -> History:
        return History(
            [
                AcquireInvoked(time=10.0, client="c1", name="n", op=1, ttl=1.0, blocking=False),
                AcquireReturned(
                    time=10.01,
                    client="c1",
                    name="n",
                    op=1,
                    ok=True,
                    token="t",
                    deadline=validity_bound(10.0, 1.0) + deadline_past,
                    queued=queued,
                ),
            ]
        )

    assert len(check_validity(claim(0.0068, None))) == 1
    assert check_validity(claim(0.0068, 0.007)) == []
    [no_drift] = check_validity(claim(0.012, 0.0))
    assert no_drift.excess == pytest.approx(0.012 - VALIDITY_SLACK)
    # The wait widens the bound by itself only.
    [waited] = check_validity(claim(0.012, 0.004))
    assert waited.excess == pytest.approx(0.012 - VALIDITY_SLACK - 0.004)


_SPIN = """
import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
print("spinning", flush=True)
while True:
    pass
"""


@pytest.mark.skipif(run_queue_wait() is None, reason="the kernel keeps no run-queue times here (/proc schedstat)")
def test_the_recorder_measures_the_time_its_client_waited_for_a_cpu() -> None:
    """Two runnable processes pinned to one CPU take turns: each waits for it about half
    the time. The recorder's ``queued`` for an operation spanning that says so, and one
    that did not wait (or a recorder without a queue) records no more than it saw."""
    cpu = min(os.sched_getaffinity(0))
    home = os.sched_getaffinity(0)
    recorder = Recorder(queue=run_queue_wait)
    quiet = recorder.acquire_invoked("c1", "n", ttl=1.0, blocking=False)
    recorder.acquire_returned("c1", "n", quiet, ok=False)
    with subprocess.Popen([sys.executable, "-c", _SPIN, str(cpu)], stdout=subprocess.PIPE, text=True) as rival:
        try:
            assert rival.stdout is not None
            assert rival.stdout.readline() == "spinning\n"
            os.sched_setaffinity(0, {cpu})
            busy = recorder.acquire_invoked("c1", "n", ttl=1.0, blocking=False)
            spin_until = time.thread_time() + 0.1
            while time.thread_time() < spin_until:
                pass
            recorder.acquire_returned("c1", "n", busy, ok=False)
        finally:
            os.sched_setaffinity(0, home)
            rival.kill()
    queued = {event.op: event.queued for event in recorder.events if isinstance(event, AcquireReturned)}
    # 0.1 s of CPU on a CPU shared with a spinner: about 0.1 s waited (more on a busy box).
    busy_wait, quiet_wait = queued[busy], queued[quiet]
    assert busy_wait is not None
    assert busy_wait > 0.03
    assert quiet_wait is not None
    assert quiet_wait < busy_wait
    plain = Recorder()
    plain.acquire_returned("c1", "n", plain.acquire_invoked("c1", "n"), ok=False)
    assert [e.queued for e in plain.events if isinstance(e, AcquireReturned)] == [None]


# --- lost updates ---------------------------------------------------------------------------


@st.composite
def racy_counter(draw: st.DrawFn) -> tuple[list[Event], int, int]:
    """Clients doing read-then-write increments in a random interleaving.

    Returns the events, the counter's true final value, and its initial value.
    """
    initial = draw(st.integers(0, 3))
    clients = [f"c{i}" for i in range(draw(st.integers(1, 4)))]
    pending: dict[str, int] = {}  # client -> value it read and has not written yet
    value, seq = initial, 0
    events: list[Event] = []
    for t in range(1, draw(st.integers(0, 25)) + 1):
        client = draw(st.sampled_from(clients))
        if client in pending:
            read = pending.pop(client)
            seq += 1
            value = read + 1
            events.append(
                ResourceWrite(time=t, client=client, name="n", resource="r", value=value, read_value=read, seq=seq)
            )
        else:
            pending[client] = value
            events.append(ResourceRead(time=t, client=client, name="n", resource="r", value=value))
    return events, value, initial


@RELAXED
@given(racy_counter(), st.booleans())
def test_lost_updates_are_counted_and_named(case: tuple[list[Event], int, int], drop_seq: bool) -> None:
    events, final, initial = case
    writes = [e for e in events if isinstance(e, ResourceWrite)]
    if drop_seq:
        # Without the store's sequence numbers the event times give the same order here.
        events = [dataclasses.replace(e, seq=None) if isinstance(e, ResourceWrite) else e for e in events]
    reports = check_lost_updates(events, initial=initial)
    if not writes:
        assert reports == []
        return
    [report] = reports
    assert report.increments == len(writes)
    assert report.final == final
    assert report.lost == initial + len(writes) - final
    assert len(report.lost_writes) == report.lost
    assert report.ok == (report.lost == 0)
    # Every lost write was wiped out by a later write that the final value builds on.
    for lost, by in zip(report.lost_writes, report.overwritten_by, strict=True):
        assert by is not None
        assert by not in report.lost_writes
        assert by.time > lost.time  # times follow the apply order in this simulation
    json.dumps(report.to_dict(), allow_nan=False)


def test_the_classic_lost_update() -> None:
    # c1 and c2 both read 0 and write 1: two increments, final 1, c1's increment lost.
    events: list[Event] = [
        ResourceRead(time=1, client="c1", name="n", resource="r", value=0),
        ResourceRead(time=2, client="c2", name="n", resource="r", value=0),
        ResourceWrite(time=3, client="c1", name="n", resource="r", value=1, read_value=0),
        ResourceWrite(time=4, client="c2", name="n", resource="r", value=1, read_value=0),
        # A rejected write (a fenced store refusing a stale token) is no increment.
        ResourceWrite(time=5, client="c3", name="n", resource="r", value=1, read_value=0, accepted=False),
        ResourceRead(time=6, client="checker", name="n", resource="r", value=1),
    ]
    [report] = check_lost_updates(events)
    assert (report.increments, report.final, report.lost) == (2, 1, 1)
    assert [w.client for w in report.lost_writes] == ["c1"]
    assert [w.client for w in report.overwritten_by if w] == ["c2"]
    # An explicit final value (read from the store at the end) wins over the history's.
    [report] = check_lost_updates(events, final={"r": 2})
    assert report.lost == 0


# --- fencing --------------------------------------------------------------------------------


@st.composite
def fenced_acquires(draw: st.DrawFn) -> list[tuple[int, int, int, str]]:
    out = []
    for _ in range(draw(st.integers(0, 10))):
        invoked = draw(st.integers(0, 20))
        out.append((invoked, invoked + draw(st.integers(0, 4)), draw(st.integers(1, 8)), draw(st.sampled_from("ab"))))
    return out


@RELAXED
@given(fenced_acquires())
def test_fencing_order_matches_a_brute_force_oracle(acquires: list[tuple[int, int, int, str]]) -> None:
    events: list[Event] = []
    for op, (invoked, returned, token, name) in enumerate(acquires):
        events.append(AcquireInvoked(time=invoked, client=f"c{op}", name=name, op=op))
        events.append(
            AcquireReturned(
                time=returned, client=f"c{op}", name=name, op=op, ok=True, token=str(op), fencing=token, deadline=99
            )
        )
    found = check_fencing_order(events)
    regressions = {f.later.op for f in found if isinstance(f, TokenRegression)}
    duplicates = {frozenset((f.first.op, f.second.op)) for f in found if isinstance(f, DuplicateToken)}

    def before(a: int, b: int) -> bool:
        return acquires[a][1] < acquires[b][0]

    want_regressions = {
        b
        for a, b in itertools.permutations(range(len(acquires)), 2)
        if acquires[a][3] == acquires[b][3] and before(a, b) and acquires[b][2] <= acquires[a][2]
    }
    want_duplicates = {
        frozenset((a, b))
        for a, b in itertools.combinations(range(len(acquires)), 2)
        if acquires[a][3] == acquires[b][3]
        and acquires[a][2] == acquires[b][2]
        and not before(a, b)
        and not before(b, a)
    }
    assert regressions == want_regressions
    assert duplicates == want_duplicates
    for f in found:
        if isinstance(f, TokenRegression):
            assert f.earlier.start < f.later.invoked
            assert f.later.fencing is not None
            assert f.earlier.fencing is not None
            assert f.later.fencing <= f.earlier.fencing
        assert f.describe()


@RELAXED
@given(st.lists(st.tuples(st.integers(1, 6), st.booleans()), max_size=15))
def test_stale_writes_match_a_brute_force_oracle(writes: list[tuple[int, bool]]) -> None:
    events: list[Event] = [
        ResourceWrite(
            time=i, client=f"c{token}", name="n", resource="r", value=i, fencing=token, accepted=accepted, seq=i
        )
        for i, (token, accepted) in enumerate(writes)
    ]
    accepted = [(i, token) for i, (token, ok) in enumerate(writes) if ok]
    want = {i for j, (i, token) in enumerate(accepted) if any(t > token for _, t in accepted[:j])}
    found = check_stale_writes(events)
    assert {s.write.value for s in found} == want
    for stale in found:
        assert stale.newer.fencing is not None
        assert stale.write.fencing is not None
        assert stale.newer.fencing > stale.write.fencing
        assert stale.newer.seq is not None
        assert stale.write.seq is not None
        assert stale.newer.seq < stale.write.seq


# --- liveness -------------------------------------------------------------------------------


@RELAXED
@given(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=50), st.floats(0.5, 100))
def test_percentile_is_nearest_rank(values: list[float], q: float) -> None:
    p = percentile(values, q)
    assert p in values
    below = sum(v <= p for v in values)
    assert below >= q / 100 * len(values)
    assert sum(v < p for v in values) < q / 100 * len(values)


def test_percentile_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q must be"):
        percentile([1.0], 0)


@RELAXED
@given(specs())
def test_idle_time_is_the_uncovered_part_of_the_window(holders: list[Spec]) -> None:
    history = history_of(holders)
    window = (0, 50)
    live = measure_liveness(history, window=window)
    for name in {s.name for s in holders}:
        covered: set[int] = set()
        for s in holders:
            if s.name == name:
                covered.update(range(max(s.start, 0), min(s.end, 50)))
        assert live.idle[name] == pytest.approx(50 - len(covered))


def test_liveness_counts_and_latency() -> None:
    events: list[Event] = []
    for op in range(10):
        events.append(AcquireInvoked(time=10 * op, client="c", name="n", op=op))
        if op == 9:
            continue  # still in flight at the end of the run
        ok = op % 3 != 0
        events.append(
            AcquireReturned(
                time=10 * op + op + 1,  # latency op+1
                client="c",
                name="n",
                op=op,
                ok=ok,
                token=str(op) if ok else None,
                deadline=10 * op + 5 if ok else None,
                error=None if ok or op == 0 else "QuorumUnavailable",
            )
        )
    live = measure_liveness(events)
    assert (live.attempts, live.succeeded, live.failed, live.errors, live.pending) == (10, 6, 3, 2, 1)
    assert live.success_share == pytest.approx(0.6)
    assert (live.latency_p50, live.latency_p99, live.latency_max) == (5, 9, 9)
    json.dumps(live.to_dict(), allow_nan=False)


# --- serialisation and recording ------------------------------------------------------------

_names = st.text("abcxyz-#:", min_size=1, max_size=6)
_times = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
_maybe_int = st.none() | st.integers(-(2**40), 2**40)
_maybe_time = st.none() | _times
_maybe_text = st.none() | st.text(max_size=10)

events_strategy = st.one_of(
    st.builds(AcquireInvoked, time=_times, client=_names, name=_names, op=st.integers(0), ttl=_maybe_time),
    st.builds(
        AcquireReturned,
        time=_times,
        client=_names,
        name=_names,
        op=st.integers(0),
        ok=st.booleans(),
        token=_maybe_text,
        deadline=_maybe_time,
        fencing=_maybe_int,
        error=_maybe_text,
        queued=_maybe_time,
    ),
    st.builds(ReleaseInvoked, time=_times, client=_names, name=_names, op=st.integers(0), token=_maybe_text),
    st.builds(
        ReleaseReturned,
        time=_times,
        client=_names,
        name=_names,
        op=st.integers(0),
        ok=st.booleans(),
        error=_maybe_text,
    ),
    st.builds(
        ExtendInvoked,
        time=_times,
        client=_names,
        name=_names,
        op=st.integers(0),
        token=_maybe_text,
        ttl=_maybe_time,
    ),
    st.builds(
        ExtendReturned,
        time=_times,
        client=_names,
        name=_names,
        op=st.integers(0),
        ok=st.booleans(),
        deadline=_maybe_time,
        error=_maybe_text,
        queued=_maybe_time,
    ),
    st.builds(
        ResourceRead,
        time=_times,
        client=_names,
        name=_names,
        resource=_names,
        value=_maybe_int,
        fencing=_maybe_int,
    ),
    st.builds(
        ResourceWrite,
        time=_times,
        client=_names,
        name=_names,
        resource=_names,
        value=st.integers(),
        read_value=_maybe_int,
        fencing=_maybe_int,
        accepted=st.booleans(),
        seq=_maybe_int,
    ),
    st.builds(FaultBegin, time=_times, fault=_names, kind=_names, target=_names, detail=st.text(max_size=10)),
    st.builds(FaultEnd, time=_times, fault=_names),
    st.builds(ForceReleased, time=_times, client=_names, name=_names, token=_maybe_text),
    st.builds(Error, time=_times, client=_names, message=st.text(max_size=20), op=_maybe_int),
)


@RELAXED
@given(st.lists(events_strategy, max_size=20))
def test_histories_survive_json(events: list[Event]) -> None:
    history = History(events)
    assert History.from_json(history.to_json()) == history
    for event in events:
        assert event_from_dict(json.loads(json.dumps(event.to_dict()))) == event


def test_bad_events_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown event type 'nope'"):
        event_from_dict({"type": "nope", "time": 1})
    with pytest.raises(ValueError, match="unexpected fields \\['colour'\\]"):
        event_from_dict({"type": "fault_end", "time": 1, "fault": "f", "colour": "red"})
    with pytest.raises(ValueError, match="fault_end"):
        event_from_dict({"type": "fault_end", "time": 1})
    with pytest.raises(ValueError, match="array"):
        History.from_json("{}")


def test_processes_write_their_own_files_and_merge(tmp_path: Path) -> None:
    ticks = iter(range(100))
    with (
        Recorder(tmp_path / "c1.jsonl", clock=lambda: next(ticks), source="c1") as one,
        Recorder(tmp_path / "c2.jsonl", clock=lambda: next(ticks), source="c2") as two,
    ):
        op = one.acquire_invoked("c1", "n", ttl=1.0)
        other = two.acquire_invoked("c2", "n")
        one.acquire_returned("c1", "n", op, ok=True, token="t", deadline=50, fencing=1)
        two.acquire_returned("c2", "n", other, ok=False, error="denied")
        with two.fault("pause", "master 1", "SIGSTOP") as fault:
            one.resource_read("c1", "n", "r", 0, fencing=1)
            one.resource_write("c1", "n", "r", 1, read_value=0, fencing=1, seq=1)
        release = one.release_invoked("c1", "n", token="t")
        one.release_returned("c1", "n", release, ok=True)
        extend = two.extend_invoked("c2", "n", token=None, ttl=2.0)
        two.extend_returned("c2", "n", extend, ok=False, error="LockNotHeld")
        two.error("c2", "worker died")
        assert fault.startswith("c2-")
        in_memory = History([*one.events, *two.events])
    merged = merge_files([tmp_path / "c1.jsonl", tmp_path / "c2.jsonl"])
    assert merged == in_memory
    assert [e.time for e in merged] == sorted(e.time for e in merged)
    assert len(merged) == 13

    # A writer killed mid-line leaves a torn last line: skipped, the rest kept.
    path = tmp_path / "c1.jsonl"
    whole = path.read_text()
    path.write_text(whole + '{"type": "acquire_inv')
    assert len(read_jsonl(path)) == whole.count("\n")
    # A bad line in the middle is corruption, and says where.
    path.write_text("garbage\n" + whole)
    with pytest.raises(ValueError, match=r"c1\.jsonl:1"):
        read_jsonl(path)

    saved = tmp_path / "all.jsonl"
    merged.save_jsonl(saved)
    assert History.load_jsonl(saved) == merged


# --- stateful: a lock service with injectable bugs, recorded and checked --------------------


@dataclass
class Held:
    op: int
    token: str
    end: int  # the deadline as extends moved it


@dataclass
class Segment:
    client: str
    name: str
    start: int
    end: int


class LockServiceHistory(RuleBasedStateMachine):
    """A model lock service driven through a :class:`Recorder` with a fake clock.

    The model grants a lock only when nobody holds it, unless a bug rule forces a grant or
    revives a lapsed lock with an extend. Invariants: the checkers find exactly the
    overlaps and late extends the model produced, and the recorded file reads back the
    same history.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "h.jsonl"
        self.recorder = Recorder(self.path, clock=lambda: self.now, source="m")
        self.held: dict[tuple[str, str], Held] = {}  # the latest tenure per (client, name)
        self.segments: list[Segment] = []  # every holder interval, as the model sees it
        self.current: dict[tuple[str, str], Segment] = {}
        self.late_extends = 0
        self.tokens = itertools.count()

    def teardown(self) -> None:
        self.recorder.close()
        self.dir.cleanup()

    def holds(self, client: str, name: str) -> bool:
        held = self.held.get((client, name))
        return held is not None and held.end > self.now

    @initialize()
    def start(self) -> None:
        self.now = 1

    @rule(dt=st.integers(1, 4))
    def advance(self, dt: int) -> None:
        self.now += dt

    def _grant(self, client: str, name: str, ttl: int) -> None:
        op = self.recorder.acquire_invoked(client, name, ttl=ttl)
        token = f"tok{next(self.tokens)}"
        self.recorder.acquire_returned(client, name, op, ok=True, token=token, deadline=self.now + ttl)
        self.held[(client, name)] = Held(op, token, self.now + ttl)
        segment = Segment(client, name, self.now, self.now + ttl)
        self.segments.append(segment)
        self.current[(client, name)] = segment

    @rule(client=st.sampled_from(["c1", "c2", "c3"]), name=st.sampled_from(["a", "b"]), ttl=st.integers(0, 6))
    def acquire(self, client: str, name: str, ttl: int) -> None:
        if self.holds(client, name):
            return  # not re-entrant: a client does not ask for what it holds
        if any(self.holds(c, name) for c in ("c1", "c2", "c3")):
            op = self.recorder.acquire_invoked(client, name, ttl=ttl)
            self.recorder.acquire_returned(client, name, op, ok=False, error="LockNotAcquired")
            return
        self._grant(client, name, ttl)

    @rule(client=st.sampled_from(["c1", "c2", "c3"]), name=st.sampled_from(["a", "b"]), ttl=st.integers(1, 6))
    def buggy_acquire(self, client: str, name: str, ttl: int) -> None:
        # A lock that grants regardless: an overlap whenever someone else holds the name.
        if not self.holds(client, name):
            self._grant(client, name, ttl)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if not self.held:
            return
        client, name = data.draw(st.sampled_from(sorted(self.held)))
        held = self.held.pop((client, name))
        op = self.recorder.release_invoked(client, name, token=held.token)
        self.recorder.release_returned(client, name, op, ok=True)
        segment = self.current.pop((client, name))
        segment.end = min(segment.end, self.now)

    @rule(data=st.data(), ttl=st.integers(1, 6))
    def extend(self, data: st.DataObject, ttl: int) -> None:
        if not self.held:
            return
        client, name = data.draw(st.sampled_from(sorted(self.held)))
        held = self.held[(client, name)]
        op = self.recorder.extend_invoked(client, name, token=held.token, ttl=ttl)
        lapsed = held.end < self.now
        if lapsed and not data.draw(st.booleans(), label="buggy"):
            self.recorder.extend_returned(client, name, op, ok=False, error="LockLost")
            return
        self.recorder.extend_returned(client, name, op, ok=True, deadline=self.now + ttl)
        held.end = self.now + ttl
        if lapsed:
            # The holder goes on as if it held the lock: a new interval starts now.
            self.late_extends += 1
            segment = Segment(client, name, self.now, self.now + ttl)
            self.segments.append(segment)
            self.current[(client, name)] = segment
        else:
            self.current[(client, name)].end = self.now + ttl

    @invariant()
    def checkers_agree_with_the_model(self) -> None:
        history = self.recorder.history()
        spans = sorted((s.client, s.name, s.start, s.end) for s in self.segments)
        assert sorted((t.client, t.name, t.start, t.end) for t in history.tenures()) == spans
        want = sum(
            1
            for a, b in itertools.combinations(self.segments, 2)
            if a.name == b.name and max(a.start, b.start) < min(a.end, b.end)
        )
        assert len(check_mutual_exclusion(history)) == want
        assert len(check_extends(history)) == self.late_extends

    @invariant()
    def the_file_says_the_same(self) -> None:
        assert merge_files([self.path]) == self.recorder.history()


TestLockServiceHistory = LockServiceHistory.TestCase
TestLockServiceHistory.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
