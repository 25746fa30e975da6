"""Property tests of the pure core: quorum arithmetic, rounds, retry delays and the flows.

No servers here. The flows are driven by the model masters of tests/model.py, which apply
SET NX PX and the scripts with expiry, the way a real master would, so that the decisions
(hold, roll back, retry, give up) can be checked over thousands of cases.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from redlock._protocol import core as _core
from redlock._protocol.connection import Waiters
from redlock._protocol.core import (
    Command,
    Pause,
    Round,
    drift_allowance,
    quorum_size,
    retry_delays,
    ttl_milliseconds,
    validity_left,
)
from redlock._protocol.flows import (
    Lease,
    Tokens,
    acquire_flow,
    extend_flow,
    next_renewal,
    release_flow,
    renewal_flow,
    rollback_flow,
)
from redlock._protocol.kinds import FENCED
from redlock.exceptions import NodeStatus

from .conftest import FlagEvent
from .model import FaultyClusterMachine, ModelCluster

statuses = st.sampled_from(list(NodeStatus))


def same(token: str) -> Tokens:
    """Tokens that are all ``token``: the model checks whose key is whose by name."""
    return Tokens(lambda: token)


@given(st.integers(min_value=1, max_value=101))
def test_any_two_quorums_intersect(n: int) -> None:
    q = quorum_size(n)
    assert 2 * q > n  # two majorities share a master
    assert 2 * (q - 1) <= n  # and the quorum is the smallest such size
    assert q <= n


def test_quorum_size_rejects_empty_cluster() -> None:
    with pytest.raises(ValueError, match="node_count"):
        quorum_size(0)


@given(
    ttl=st.floats(min_value=0.01, max_value=3600),
    elapsed=st.floats(min_value=0, max_value=3600),
    factor=st.floats(min_value=0, max_value=0.99),
)
def test_validity_is_ttl_minus_elapsed_minus_drift(ttl: float, elapsed: float, factor: float) -> None:
    drift = drift_allowance(ttl, factor)
    assert drift >= 0.002
    assert validity_left(ttl, elapsed, factor) == pytest.approx(ttl - elapsed - ttl * factor - 0.002)
    assert validity_left(ttl, elapsed, factor) < ttl - elapsed


@given(
    ttl=st.floats(min_value=0.01, max_value=3600),
    a=st.floats(min_value=0, max_value=100),
    b=st.floats(min_value=0, max_value=100),
)
def test_validity_shrinks_as_the_round_takes_longer(ttl: float, a: float, b: float) -> None:
    assume(a < b)
    assert validity_left(ttl, a, 0.01) >= validity_left(ttl, b, 0.01)


@given(st.floats(min_value=0.001, max_value=1e6))
def test_ttl_in_milliseconds_never_overstates(ttl: float) -> None:
    ms = ttl_milliseconds(ttl)
    assert ms >= 1
    assert ms <= ttl * 1000 or ms == 1
    assert ms > ttl * 1000 - 1


@given(base=st.floats(min_value=0.001, max_value=10), seed=st.integers())
def test_retry_delays_are_jittered_within_bounds(base: float, seed: int) -> None:
    delays = list(itertools.islice(retry_delays(base, random.Random(seed)), 50))
    assert all(base / 2 <= d <= 1.5 * base for d in delays)
    assert len(set(delays)) > 1  # not in lockstep


def test_two_clients_do_not_retry_in_lockstep() -> None:
    first = list(itertools.islice(retry_delays(0.2, random.Random(1)), 20))
    second = list(itertools.islice(retry_delays(0.2, random.Random(2)), 20))
    assert all(a != b for a, b in zip(first, second, strict=True))


@given(
    seed=st.integers(),
    retry_delay=st.floats(min_value=0.2, max_value=10),
    woken_after=st.floats(min_value=0.0, max_value=0.09),
    woken=st.lists(st.booleans(), min_size=1, max_size=6),
)
def test_a_waiter_woken_then_refused_looks_again_after_node_timeout(
    seed: int, retry_delay: float, woken_after: float, woken: list[bool]
) -> None:
    """A release announced by one master may not have reached the others when the woken
    waiter's SETs arrive there: the next look comes after node_timeout, not a whole retry
    delay (the other announcements came while nobody listened). A pause that ran its course
    is followed by the usual jittered delay."""
    spec = dataclasses.replace(ModelCluster(5).spec(), retry_delay=retry_delay)
    flow = acquire_flow(spec, Tokens(lambda: "t"), 0.0, blocking=True, timeout=None, rng=random.Random(seed))
    line_up = next(flow)  # a blocking acquire first takes its place in its client's line
    assert isinstance(line_up, Pause)
    assert (line_up.seconds, line_up.wake_on) == (0.0, spec.key)
    request = flow.send(0.0)
    now = 0.0
    was_woken = False
    for cut_short in [*woken, False]:
        assert isinstance(request, Round)
        for node in request.targets:
            request.record(node, NodeStatus.DENIED)  # held by someone else everywhere
        now += 0.001
        pause = flow.send(now)
        assert isinstance(pause, Pause)
        if was_woken:
            assert pause.seconds <= spec.node_timeout
        else:
            assert retry_delay / 2 <= pause.seconds <= 1.5 * retry_delay
        now += min(woken_after, pause.seconds / 2) if cut_short else pause.seconds
        was_woken = cut_short
        request = flow.send(now)


def _round(n: int, wait_for_all: bool = False) -> Round:
    names = tuple(f"m{i}" for i in range(n))
    return Round(Command(("PING",)), tuple(range(n)), names, quorum_size(n), 0.05, wait_for_all=wait_for_all)


@given(
    st.integers(min_value=1, max_value=9).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(statuses, min_size=n, max_size=n))
    )
)
def test_an_early_round_settles_exactly_when_the_outcome_is_decided(case: tuple[int, list[NodeStatus]]) -> None:
    n, replies = case
    q = quorum_size(n)
    round_ = _round(n)
    for node, status in enumerate(replies):
        assert not round_.settled
        round_.record(node, status)
        granted = replies[: node + 1].count(NodeStatus.GRANTED)
        pending = n - node - 1
        decided = granted >= q or granted + pending < q
        assert round_.settled == decided
        assert not (round_.majority_granted and round_.majority_impossible)
        if decided:
            break
    assert round_.settled


@given(
    st.integers(min_value=1, max_value=9).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(statuses, min_size=n, max_size=n))
    )
)
def test_a_complete_round_waits_for_every_master(case: tuple[int, list[NodeStatus]]) -> None:
    n, replies = case
    round_ = _round(n, wait_for_all=True)
    for node, status in enumerate(replies):
        assert not round_.settled
        round_.record(node, status)
    assert round_.settled
    unreached = sum(not s.answered for s in replies)
    assert round_.quorum_unreachable == (unreached > n - quorum_size(n))


def test_a_round_refuses_a_second_reply_from_one_master() -> None:
    round_ = _round(3)
    round_.record(0, NodeStatus.GRANTED)
    with pytest.raises(ValueError, match="not awaited"):
        round_.record(0, NodeStatus.DENIED)


def test_replies_map_to_granted_and_denied() -> None:
    assert _core.reply_status(b"OK") is NodeStatus.GRANTED
    assert _core.reply_status(1) is NodeStatus.GRANTED
    assert _core.reply_status(None) is NodeStatus.DENIED
    assert _core.reply_status(0) is NodeStatus.DENIED
    assert _core.reply_status(b"QUEUED") is NodeStatus.ERROR


# --- flows against a model of masters -------------------------------------------------------


cluster_shapes = st.integers(min_value=1, max_value=7).flatmap(
    lambda n: st.tuples(
        st.just(n), st.lists(st.booleans(), min_size=n, max_size=n), st.lists(st.booleans(), min_size=n, max_size=n)
    )
)


@given(cluster_shapes, st.floats(min_value=0.0001, max_value=2.0))
def test_one_attempt_holds_iff_majority_and_validity(
    shape: tuple[int, list[bool], list[bool]], round_time: float
) -> None:
    n, up, taken = shape
    cluster = ModelCluster(n, round_time)
    for master, is_up, is_taken in zip(cluster.masters, up, taken, strict=True):
        master.up = is_up
        if is_taken:
            master.keys["k"] = ("other", 1e9)
    spec = cluster.spec(ttl=1.0)
    result = cluster.run(
        acquire_flow(spec, same("me"), cluster.now, blocking=False, timeout=None, rng=random.Random(0))
    )
    free = sum(1 for is_up, is_taken in zip(up, taken, strict=True) if is_up and not is_taken)
    should_hold = free >= quorum_size(n) and validity_left(1.0, round_time, 0.01) > 0
    assert result.ok == should_hold
    assert result.attempts == 1
    if result.ok:
        assert result.deadline == pytest.approx(1000.0 + 1.0 - drift_allowance(1.0, 0.01))
        assert len(cluster.rounds) == 1
    else:
        # Rolled back: no key of ours is left anywhere, and no one else's was touched.
        assert cluster.holders("me") == 0
        assert all(m.keys.get("k", ("other",))[0] == "other" for m, t in zip(cluster.masters, taken, strict=True) if t)
        assert result.quorum_unreachable == (up.count(False) > n - quorum_size(n))
        if len(cluster.rounds) == 2:
            denied = {i for i, o in cluster.rounds[0].outcomes.items() if o.status is NodeStatus.DENIED}
            assert set(cluster.rounds[1].targets) == set(range(n)) - denied


@given(st.floats(min_value=0, max_value=3), st.integers(min_value=0))
def test_blocking_acquire_never_waits_past_its_timeout(timeout: float, seed: int) -> None:
    cluster = ModelCluster(5)
    for master in cluster.masters:
        master.keys["k"] = ("other", 1e9)
    start = cluster.now
    result = cluster.run(
        acquire_flow(cluster.spec(), same("me"), start, blocking=True, timeout=timeout, rng=random.Random(seed))
    )
    assert not result.ok
    assert result.timed_out
    assert not result.quorum_unreachable
    assert cluster.paused <= timeout + 1e-9
    # The last attempt may start just before the deadline; it costs at most two rounds.
    assert cluster.now - start <= timeout + 2 * cluster.round_time * result.attempts + 1e-6


@given(st.floats(min_value=0.1, max_value=5), st.integers(min_value=0))
def test_blocking_acquire_without_timeout_gives_up_on_a_dead_quorum(unavailable_timeout: float, seed: int) -> None:
    cluster = ModelCluster(5)
    for master in cluster.masters[:3]:
        master.up = False
    spec = cluster.spec(unavailable_timeout=unavailable_timeout)
    result = cluster.run(
        acquire_flow(spec, same("me"), cluster.now, blocking=True, timeout=None, rng=random.Random(seed))
    )
    assert not result.ok
    assert result.quorum_unreachable
    assert result.attempts >= 2
    assert cluster.paused <= unavailable_timeout + 1.5 * spec.retry_delay


def test_blocking_acquire_gets_the_lock_once_it_expires() -> None:
    cluster = ModelCluster(5)
    for master in cluster.masters:
        master.keys["k"] = ("other", cluster.now + 0.5)
    result = cluster.run(
        acquire_flow(cluster.spec(), same("me"), cluster.now, blocking=True, timeout=None, rng=random.Random(3))
    )
    assert result.ok
    assert result.attempts > 1
    assert cluster.holders("me") == 5


@given(st.floats(min_value=0.0001, max_value=3.0))
def test_extend_counts_validity_from_its_own_start(round_time: float) -> None:
    cluster = ModelCluster(5, round_time)
    spec = cluster.spec(ttl=2.0)
    for master in cluster.masters:
        master.keys["k"] = ("me", cluster.now + 0.5)
    started = cluster.now
    result = cluster.run(extend_flow(spec, Lease("me", started + 0.5), 2.0, started))
    expected_ok = validity_left(2.0, round_time, 0.01) > 0
    assert result.ok == expected_ok
    if result.ok:
        assert result.deadline == pytest.approx(started + 2.0 - drift_allowance(2.0, 0.01))


def test_extend_never_revives_a_key_that_is_gone() -> None:
    cluster = ModelCluster(5)
    for master in cluster.masters[:2]:
        master.keys["k"] = ("me", cluster.now + 10)
    result = cluster.run(extend_flow(cluster.spec(), Lease("me", cluster.now + 10), 1.0, cluster.now))
    assert not result.ok
    assert result.token_gone
    assert cluster.holders("me") == 2  # the three masters without it still have nothing


def test_release_confirms_only_with_a_majority() -> None:
    cluster = ModelCluster(5)
    for master in cluster.masters[:2]:
        master.keys["k"] = ("me", cluster.now + 10)
    for master in cluster.masters[2:]:
        master.keys["k"] = ("other", cluster.now + 10)
    result = cluster.run(release_flow(cluster.spec(), "me", cluster.now))
    assert not result.ok
    assert result.token_gone
    assert cluster.holders("me") == 0
    assert cluster.holders("other") == 3


@given(
    now=st.floats(min_value=0, max_value=100),
    left=st.floats(min_value=-10, max_value=100),
    ttl=st.floats(min_value=0.01, max_value=100),
    failed=st.booleans(),
)
def test_renewal_is_due_well_before_validity_runs_out(now: float, left: float, ttl: float, failed: bool) -> None:
    lease = Lease("t", now + left)
    left = lease.deadline - now  # as the code sees it, after rounding
    delay = next_renewal(now, lease, ttl, failed=failed, retry_delay=0.2)
    if left <= 0:
        assert delay is None
        return
    assert delay is not None
    assert delay >= 0
    assert delay <= left / 2 or (not failed and delay <= left - 2 * ttl / 3 + 1e-9)
    if failed:
        assert delay <= 0.2
    elif left > 2 * ttl / 3:
        assert now + delay == pytest.approx(lease.deadline - 2 * ttl / 3)


@given(
    st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=6),
    st.randoms(use_true_random=False),
)
def test_overlapping_extends_leave_the_lowest_deadline_any_of_them_could_set(
    candidates: list[float], rng: random.Random
) -> None:
    lease = Lease("t", 50.0)
    waiting = list(range(len(candidates)))
    ids: dict[int, int] = {}
    overlapped: dict[int, set[int]] = {}
    while waiting or ids:
        # A random interleaving: begin the next extend, or end one in flight.
        if waiting and (not ids or rng.random() < 0.5):
            i = waiting.pop(0)
            for other in ids:
                overlapped[other].add(i)
            overlapped[i] = set(ids) | {i}
            ids[i] = lease.begin_extend(candidates[i])
            continue
        i = rng.choice(sorted(ids))
        ok = rng.random() < 0.7
        before = lease.deadline
        lease.end_extend(ids.pop(i), ok=ok, may_have_landed=True)
        if ok:
            # Whichever overlapping extend a master applied last, it set at least this.
            assert lease.deadline == min(candidates[j] for j in overlapped[i])
        else:
            assert lease.deadline == min(before, candidates[i])


def test_an_abandoned_extend_still_caps_the_deadline() -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=1.0)
    lease = Lease("me", cluster.now + 0.9)
    flow = extend_flow(spec, lease, 0.2, cluster.now)
    next(flow)  # its round is out; the driver gives up on it (cancelled, interrupted)
    flow.close()
    assert lease.deadline == pytest.approx(cluster.now + 0.2 - drift_allowance(0.2, 0.01))


def test_each_attempt_of_an_acquire_uses_a_fresh_token() -> None:
    cluster = ModelCluster(5)
    for master in cluster.masters:
        master.keys["k"] = ("other", cluster.now + 0.5)
    counter = iter(range(1000))
    tokens = Tokens(lambda: f"t{next(counter)}")
    result = cluster.run(acquire_flow(cluster.spec(), tokens, cluster.now, blocking=True, timeout=None,
                                      rng=random.Random(3)))  # fmt: skip
    assert result.ok
    assert result.attempts > 1
    assert result.token == f"t{result.attempts - 1}"
    assert cluster.holders(result.token) == 5
    # Every losing attempt was rolled back; the winner stays outstanding until the Lock has
    # recorded it, so that an interruption before then takes it back too.
    assert tokens.outstanding == [result.token]


class FailingCluster(ModelCluster):
    """Every master goes down at ``fail_at`` (keeping its data)."""

    def __init__(self, n: int, fail_at: float) -> None:
        super().__init__(n, round_time=0.005)
        self.fail_at = fail_at

    def before_request(self) -> None:
        if self.now >= self.fail_at:
            for master in self.masters:
                master.up = False


@given(st.floats(min_value=0.0, max_value=5.0))
def test_renewal_keeps_the_lease_then_declares_it_lost_when_validity_runs_out(fail_after: float) -> None:
    cluster = ModelCluster(5, round_time=0.005)
    spec = cluster.spec(ttl=1.0)
    acquired = cluster.run(
        acquire_flow(spec, same("me"), cluster.now, blocking=False, timeout=None, rng=random.Random(0))
    )
    assert acquired.ok
    lease = Lease("me", acquired.deadline)
    failing = FailingCluster(5, cluster.now + fail_after)
    failing.masters, failing.now = cluster.masters, cluster.now
    failing.run(renewal_flow(spec, lease, failing.now))
    assert lease.lost
    assert failing.now >= lease.deadline  # never declared lost while validity remained
    assert failing.now <= lease.deadline + spec.retry_delay + 0.1
    assert lease.deadline > cluster.now + fail_after  # it was renewed until the masters failed


def test_renewal_stops_when_the_lease_ends() -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=1.0)
    lease = Lease("me", cluster.now + 0.9)
    flow = renewal_flow(spec, lease, cluster.now)
    request = next(flow)
    assert isinstance(request, Pause)
    lease.ended = True
    with pytest.raises(StopIteration):
        flow.send(cluster.now + request.seconds)
    assert not lease.lost


class MutualExclusion(FaultyClusterMachine):
    """Clients acquire, release and extend on model masters that may go down, while time
    passes; with masters that keep their data and a common clock, two clients never both
    believe they hold the lock."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = ModelCluster(5, round_time=0.01)
        self.spec = dataclasses.replace(self.cluster.spec(ttl=1.0), kind=FENCED)
        self.deadlines: dict[str, float] = {}
        #: Each holding's lease: it numbers the holding's extends.
        self.leases: dict[str, Lease] = {}
        self.tokens = [f"client{i}" for i in range(3)]
        self.fencing_tokens: list[int] = []

    @rule(client=st.integers(0, 2), seed=st.integers(0, 100))
    def acquire(self, client: int, seed: int) -> None:
        token = self.tokens[client]
        if self.deadlines.get(token, 0) > self.cluster.now:
            return
        result = self.cluster.run(
            acquire_flow(
                self.spec, same(token), self.cluster.now, blocking=False, timeout=None, rng=random.Random(seed)
            )
        )
        if result.ok:
            self.deadlines[token] = result.deadline
            self.leases[token] = Lease(token, result.deadline)
            assert result.fencing_token is not None
            self.fencing_tokens.append(result.fencing_token)

    @rule(client=st.integers(0, 2))
    def release(self, client: int) -> None:
        token = self.tokens[client]
        if token in self.deadlines:
            self.cluster.run(release_flow(self.spec, token, self.cluster.now))
            del self.deadlines[token]

    @rule(client=st.integers(0, 2), ttl=st.sampled_from([0.05, 0.3, 1.0, 2.0]))
    def extend(self, client: int, ttl: float) -> None:
        token = self.tokens[client]
        if token in self.deadlines:
            lease = self.leases[token]
            result = self.cluster.run(extend_flow(self.spec, lease, ttl, self.cluster.now))
            if result.token_gone and not result.ok:
                del self.deadlines[token]
            else:
                self.deadlines[token] = lease.deadline

    @invariant()
    def at_most_one_holder(self) -> None:
        holders = [t for t, d in self.deadlines.items() if d > self.cluster.now]
        assert len(holders) <= 1, holders

    @invariant()
    def fencing_tokens_strictly_increase(self) -> None:
        assert self.fencing_tokens == sorted(set(self.fencing_tokens))

    @invariant()
    def a_holder_really_has_a_majority(self) -> None:
        for token, deadline in self.deadlines.items():
            if deadline > self.cluster.now:
                assert self.cluster.holders(token) >= quorum_size(5)


TestMutualExclusion = MutualExclusion.TestCase
TestMutualExclusion.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


@given(
    st.lists(st.sampled_from(["mine", "other", "none"]), min_size=1, max_size=7),
    st.lists(st.booleans(), min_size=7, max_size=7),
    st.integers(min_value=1, max_value=3),
)
def test_a_rollback_deletes_every_token_of_ours_and_nothing_else(
    holders: list[str], up: list[bool], tokens: int
) -> None:
    """What an interrupted acquire left (a key per attempt's token, on any masters) goes,
    everywhere a master answers; another holder's key is never touched."""
    cluster = ModelCluster(len(holders))
    ours = [f"mine-{i}" for i in range(tokens)]
    for node, (master, holder) in enumerate(zip(cluster.masters, holders, strict=True)):
        master.up = up[node]
        if holder == "mine":
            master.keys["k"] = (ours[node % tokens], 1e9)
        elif holder == "other":
            master.keys["k"] = ("other", 1e9)
    result = cluster.run(rollback_flow(cluster.spec(), ours))
    assert len(cluster.rounds) == tokens  # one round per token, each waiting for every master
    assert all(round_.wait_for_all and round_.cleanup for round_ in cluster.rounds)
    for master, holder in zip(cluster.masters, holders, strict=True):
        held = master.keys.get("k", ("", 0.0))[0]
        if holder == "other":
            assert held == "other"
        elif master.up:
            assert held == ""
    last = cluster.rounds[-1]
    assert result.granted == last.granted


def test_a_release_wakes_the_longest_waiter_once_however_many_masters_announce_it() -> None:
    waiters: Waiters[FlagEvent] = Waiters()
    first, second, elsewhere = FlagEvent(), FlagEvent(), FlagEvent()
    waiters.add("a", first)
    waiters.add("a", second)
    waiters.add("b", elsewhere)
    for _ in range(5):  # one announcement per master that held the lock
        waiters.released("a", b"token-1")
    assert (first.flag, second.flag, elsewhere.flag) == (True, False, False)
    waiters.released("a", b"token-2")  # the next release wakes the next waiter
    assert second.flag
    waiters.discard("a", first)
    waiters.discard("a", second)
    assert waiters.channels() == {"b"}
    waiters.released("a", b"token-3")  # nobody waits there any more: nothing kept
    assert waiters.channels() == {"b"}


@given(st.lists(st.tuples(st.sampled_from(["add", "discard", "release"]), st.integers(0, 3), st.integers(0, 4))))
def test_waiters_never_wake_more_than_one_per_release(steps: list[tuple[str, int, int]]) -> None:
    waiters: Waiters[FlagEvent] = Waiters()
    events = [FlagEvent() for _ in range(4)]
    for action, who, token in steps:
        before = sum(event.flag for event in events)
        if action == "add":
            waiters.add("a", events[who])
        elif action == "discard":
            waiters.discard("a", events[who])
        else:
            waiters.released("a", str(token).encode())
            assert sum(event.flag for event in events) - before <= 1
        assert waiters.channels() <= {"a"}


def test_a_lease_copied_with_replace_keeps_its_state_and_gets_its_own_guard() -> None:
    """Lease writes its __init__ out (for mypyc); it still takes every init field, so that
    dataclasses.replace copies the holder's state, while the extends in flight and their
    lock belong to the new lease alone."""
    lease = Lease("me", 10.0, 3, hold_until=20.0)
    lease.lost = True
    lease.loss_why = "gone"
    number = lease.begin_extend(12.0)
    copy = dataclasses.replace(lease, token="other")
    assert (copy.token, copy.deadline, copy.fencing_token, copy.hold_until) == ("other", 10.0, 3, 20.0)
    assert (copy.lost, copy.loss_why) == (True, "gone")
    assert copy._guard is not lease._guard
    assert copy._extends == {}
    assert number in lease._extends
