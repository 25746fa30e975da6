"""A release hands the lock to a waiter of the same client in one round (redlock._protocol.core.Handoff):
the masters swap the releaser's token for the waiter's, only where the releaser's still holds.

The pure parts (the offer's states, the flows around it) are tested by hand and by
hypothesis; the rest on real masters, through both APIs."""

from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from redlock import LockLost
from redlock._protocol.core import HANDOFF_CHAIN, Flow, Handoff, Pause, Result, Round
from redlock._protocol.flows import LockSpec, Tokens, _handed_over, acquire_flow, release_flow
from redlock.exceptions import NodeStatus
from redlock.servers import LocalMasters

from .conftest import (
    ClientFactory,
    FlagEvent,
    MastersFactory,
    eventually,
    in_threads,
    parked,
    raw_clients,
    unique,
)

SPEC = LockSpec("k", 10.0, ("a", "b", "c"), 0.05, 0.01, 0.2, 10.0)


def stats(masters: LocalMasters, command: str) -> list[int]:
    """How many times each master ran ``command`` (inside scripts too) since the reset."""
    with raw_clients(masters.urls) as clients:
        return [int(c.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)) for c in clients]


def reset_stats(masters: LocalMasters) -> None:
    """CONFIG RESETSTAT: on masters started with owner_only=False (it is renamed away otherwise)."""
    with raw_clients(masters.urls) as clients:
        for client in clients:
            client.config_resetstat()


# --- pure -----------------------------------------------------------------------------------


def _answered(round_: Round, statuses: list[NodeStatus]) -> Round:
    for node, status in zip(round_.targets, statuses, strict=False):
        round_.record(node, status, reply=1 if status is NodeStatus.GRANTED else 0)
    return round_


def _waiting_acquire() -> tuple[Tokens, Handoff, object]:
    tokens = Tokens(iter(f"t{i}" for i in range(100)).__next__)
    flow = acquire_flow(SPEC, tokens, 0.0, blocking=True, timeout=30.0, rng=random.Random(1))
    pause = next(flow)
    assert isinstance(pause, Pause)
    assert pause.handoff is not None
    assert pause.seconds == 0.0
    return tokens, pause.handoff, flow


def test_a_delivered_swap_that_a_majority_granted_is_held_from_the_swap_start() -> None:
    tokens, handoff, flow = _waiting_acquire()
    handoff.park()
    assert handoff.claim(expires_at=5.0)
    swap = _answered(
        SPEC.round(SPEC.kind.handoff("k", "old", handoff.token, 10_000)),
        [NodeStatus.GRANTED, NodeStatus.GRANTED, NodeStatus.DENIED],
    )
    assert handoff.deliver(swap, 1.0, handoff.token)
    try:
        flow.send(1.1)  # type: ignore[attr-defined]
    except StopIteration as stop:
        result: Result = stop.value
    else:
        raise AssertionError("the handed-over lock was not taken")
    assert result.ok
    assert result.token == handoff.token
    assert result.deadline == SPEC.deadline_after(1.0)  # from the swap's start, not its end
    assert handoff.token in tokens.outstanding  # the Lock records it before it is settled


def test_a_swap_without_a_majority_is_rolled_back_where_it_may_have_landed() -> None:
    tokens, handoff, flow = _waiting_acquire()
    handoff.park()
    assert handoff.claim(expires_at=5.0)
    token = handoff.token
    swap = _answered(
        SPEC.round(SPEC.kind.handoff("k", "old", token, 10_000)), [NodeStatus.GRANTED, NodeStatus.DENIED]
    )  # the third master never answered
    assert handoff.deliver(swap, 1.0, token)
    rollback = flow.send(1.1)  # type: ignore[attr-defined]
    assert isinstance(rollback, Round)
    assert rollback.cleanup
    assert rollback.targets == (0, 2)  # not where the swap was refused: it wrote nothing there
    assert token in rollback.command.args
    _answered(rollback, [NodeStatus.GRANTED, NodeStatus.DENIED])
    attempt = flow.send(1.2)  # type: ignore[attr-defined]
    assert isinstance(attempt, Round)
    assert attempt.command.args[0] == "SET"
    assert token not in tokens.outstanding


def test_a_claim_whose_swap_never_came_is_given_up_and_its_token_deleted_everywhere() -> None:
    _tokens, handoff, flow = _waiting_acquire()
    handoff.park()
    assert handoff.claim(expires_at=5.0)
    token = handoff.token
    # The waiter's patience with the claim ran out (redlock._protocol.connection.Waiters.waits).
    assert handoff.abandon()
    rollback = flow.send(6.0)  # type: ignore[attr-defined]
    assert isinstance(rollback, Round)
    assert rollback.cleanup
    assert rollback.targets == (0, 1, 2)
    assert token in rollback.command.args
    # The releaser's swap, finished late, is not delivered: the releaser deletes the token too.
    assert not handoff.deliver(SPEC.round(SPEC.kind.handoff("k", "old", token, 10_000)), 1.0, token)


def test_a_release_to_a_waiter_that_left_deletes_the_waiter_token_and_announces_it() -> None:
    handoff = Handoff(lambda: "new", 10_000)
    handoff.park()
    assert handoff.claim(expires_at=5.0)
    flow = release_flow(SPEC, "old", 0.0, handoff=handoff)
    swap = next(flow)
    assert isinstance(swap, Round)
    assert "new" in swap.command.args
    assert "old" in swap.command.args
    handoff.abandon()  # the waiter was cancelled meanwhile
    _answered(swap, [NodeStatus.GRANTED] * 3)
    cleanup = flow.send(0.1)
    assert isinstance(cleanup, Round)
    assert cleanup.cleanup
    assert "new" in cleanup.command.args
    assert any("released" in str(arg) for arg in cleanup.command.args)  # announced, as our release
    _answered(cleanup, [NodeStatus.GRANTED] * 3)
    with pytest.raises(StopIteration) as stop:
        flow.send(0.2)
    assert stop.value.value.ok  # our own release was confirmed by the swap


def _swap_round(handoff: Handoff, releaser_token: str, started: float) -> tuple[Flow, Round]:
    """A release that hands over to ``handoff``'s claim, run to its swap round."""
    flow = release_flow(SPEC, releaser_token, started, handoff=handoff)
    swap = next(flow)
    assert isinstance(swap, Round)
    return flow, swap


def test_the_waiter_wakes_once_a_majority_swapped_while_the_release_waits_on() -> None:
    handoff = Handoff(lambda: "new", 10_000)
    woken: list[str | None] = []
    handoff.wake = lambda: woken.append(handoff.round and handoff.token)
    handoff.park()
    assert handoff.claim(expires_at=5.0)
    flow, swap = _swap_round(handoff, "old", 1.0)
    swap.record(0, NodeStatus.GRANTED, reply=1)
    assert woken == []  # one of three is no majority
    swap.record(2, NodeStatus.GRANTED, reply=1)
    assert woken == ["new"]  # delivered, and the waiter woken, before the slowest master answered
    assert not swap.settled  # the release itself waits for every master
    taken = handoff.take()
    assert taken is swap
    assert taken.majority_granted
    assert handoff.started == 1.0  # the waiter's validity counts from the swap's start
    swap.record(1, NodeStatus.DENIED, reply=0)
    with pytest.raises(StopIteration) as stop:
        flow.send(1.1)  # no second delivery, and nothing of the waiter's to delete
    assert stop.value.value.ok
    assert woken == ["new"]


def test_a_waiter_gone_before_the_majority_swapped_is_not_woken_and_its_token_is_deleted() -> None:
    handoff = Handoff(lambda: "new", 10_000)
    woken: list[bool] = []
    handoff.wake = lambda: woken.append(True)
    handoff.park()
    assert handoff.claim(expires_at=5.0)
    flow, swap = _swap_round(handoff, "old", 1.0)
    assert handoff.abandon()
    _answered(swap, [NodeStatus.GRANTED] * 3)
    assert woken == []
    cleanup = flow.send(1.1)
    assert isinstance(cleanup, Round)
    assert "new" in cleanup.command.args


def test_a_swap_round_that_outlived_its_claim_delivers_nothing_to_a_later_claim() -> None:
    """A releaser interrupted mid-swap leaves its round in flight; its waiter gives the claim
    up and parks again, and another Lock's release claims it with a new token. A late reply
    that gives the old round its majority must not hand the waiter that round (it swapped
    in the old token, counted from the old start), nor make the new release delete the
    token the waiter would then believe it holds."""
    tokens = Tokens(iter(f"t{i}" for i in range(100)).__next__)
    handoff = Handoff(tokens.fresh, 10_000)
    woken: list[int] = []
    handoff.wake = lambda: woken.append(1)
    handoff.park()
    assert handoff.claim(expires_at=2.2)
    first, old_swap = _swap_round(handoff, "A", 1.0)
    old_swap.record(0, NodeStatus.GRANTED, reply=1)
    old_swap.record(2, NodeStatus.DENIED, reply=0)
    first.close()  # the releaser was interrupted; its round is still in flight
    assert handoff.abandon()  # the claim ran out
    assert handoff.take() is None
    handoff.park()  # back in line
    handoff.wake = lambda: woken.append(2)
    assert handoff.claim(expires_at=20.0)
    second, new_swap = _swap_round(handoff, "C", 10.0)
    old_swap.record(1, NodeStatus.GRANTED, reply=1)  # the old round's late majority
    assert woken == []
    for node in (0, 1, 2):
        new_swap.record(node, NodeStatus.GRANTED, reply=1)
    assert woken == [2]
    with pytest.raises(StopIteration):
        second.send(10.02)  # delivered: nothing of the waiter's to delete
    taking = _handed_over(SPEC, tokens, handoff, 10.01, 1)
    with pytest.raises(StopIteration) as stop:
        next(taking)
    result, _ = stop.value.value
    assert result.ok
    assert result.deadline == SPEC.deadline_after(10.0)  # the new swap's start, not the old one's


class HandoffStates(RuleBasedStateMachine):
    """A waiter and a releaser on two threads' worth of interleavings: a swap is either
    delivered and taken once, or given up by the waiter and never delivered, never both."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn = 0
        self.handoff = Handoff(self._draw, 1000)
        self.claimed: str | None = None  # the releaser's claim, if it holds one
        self.delivered: set[str] = set()
        self.given_up: set[str] = set()
        self.taken: list[str] = []

    def _draw(self) -> str:
        self.drawn += 1
        return f"t{self.drawn}"

    @rule()
    def park(self) -> None:
        self.handoff.park()

    @rule()
    def unpark(self) -> None:
        self.handoff.unpark()

    @rule()
    def claim(self) -> None:
        if self.handoff.claim(expires_at=1.0):
            self.claimed = self.handoff.token

    @precondition(lambda self: self.claimed is not None)
    @rule()
    def deliver(self) -> None:
        token, self.claimed = self.claimed, None
        assert token is not None
        swap = SPEC.round(SPEC.kind.handoff("k", "old", token, 1000))
        if self.handoff.deliver(swap, 0.5, token):
            self.delivered.add(token)

    @rule()
    def abandon(self) -> None:
        token = self.handoff.token
        if self.handoff.abandon():
            self.given_up.add(token)

    @rule()
    def take(self) -> None:
        token = self.handoff.token
        if self.handoff.take() is not None:
            self.taken.append(token)

    @invariant()
    def a_swap_is_delivered_or_given_up_never_both(self) -> None:
        assert not self.delivered & self.given_up
        assert len(self.taken) == len(set(self.taken))
        assert set(self.taken) <= self.delivered


TestHandoffStates = HandoffStates.TestCase
TestHandoffStates.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)


def test_a_chain_of_handovers_is_bounded() -> None:
    from redlock._protocol.connection import Waiters  # noqa: PLC0415

    waiters: Waiters[FlagEvent] = Waiters()
    handed = to_all = 0
    for release in range(3 * HANDOFF_CHAIN):
        event, handoff = FlagEvent(), Handoff(lambda: "t", 1000)
        waiters.add("c", event, in_line=True, handoff=handoff)
        handoff.park()
        claimed, everyone = waiters.claim("c", now=release * 0.001, expires_at=1.0)
        handed += claimed is not None
        to_all += everyone
        waiters.discard("c", event)
    # Every (HANDOFF_CHAIN + 1)th release goes to every client's waiters alike.
    assert to_all == 3 * HANDOFF_CHAIN // (HANDOFF_CHAIN + 1)
    assert handed == 3 * HANDOFF_CHAIN - to_all


# --- real masters ----------------------------------------------------------------------------


def test_a_release_hands_the_lock_to_a_waiter_of_the_same_client_in_one_round(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    masters = fresh_masters(3, owner_only=False)
    rl = client(masters.urls, retry_delay=5.0)  # its own retry would come far too late
    name = unique()
    holder = rl.lock(name, ttl=30)
    assert holder.acquire(blocking=False)
    waiter = rl.lock(name, ttl=20)  # a ttl of its own: the swap writes the waiter's
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)), daemon=True)
    thread.start()
    assert eventually(lambda: parked(rl))  # in line, waiting in a pause
    reset_stats(masters)
    holder.release()
    thread.join(10)
    assert got == [True]
    assert stats(masters, "publish") == [0, 0, 0]  # no release announced: the lock never came free
    assert stats(masters, "evalsha") == [1, 1, 1]  # one round, the swap
    with raw_clients(masters.urls) as clients:
        ttls = [c.pttl(name) for c in clients]
    assert all(15_000 < ttl <= 20_000 for ttl in ttls), ttls
    assert waiter.validity > 15
    waiter.release()


def test_the_waiter_holds_once_a_majority_swapped_not_after_the_slowest_master(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    """On every server of the matrix: the swap goes as a script on Redis, as `SET IFEQ`
    (replying OK, not 1) on Valkey 9."""
    masters = matrix_masters(3)
    # The release waits for every master up to node_timeout: long here, so that only the
    # early handover can let the waiter in while the third master hangs.
    rl = client(masters.urls, retry_delay=5.0, node_timeout=5.0)
    name = unique()
    holder = rl.lock(name, ttl=30)
    assert holder.acquire(blocking=False)
    waiter = rl.lock(name, ttl=30)
    got: list[bool] = []
    waiting = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)), daemon=True)
    waiting.start()
    assert eventually(lambda: parked(rl))
    masters[2].pause()
    try:
        releasing = threading.Thread(target=holder.release, daemon=True)
        releasing.start()
        waiting.join(10)
        assert got == [True]
        assert releasing.is_alive()  # the release still waits for the hung master
        assert waiter.validity > 20
    finally:
        masters[2].resume()
    releasing.join(10)
    assert not releasing.is_alive()
    with raw_clients(masters.urls) as clients:
        assert [c.get(name) for c in clients] == [waiter.token.encode()] * 3  # the late swap landed too
    waiter.release()


def test_the_swap_writes_nothing_where_the_releaser_token_is_gone(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    masters = fresh_masters(3)
    rl = client(masters.urls, retry_delay=5.0)
    name = unique()
    holder = rl.lock(name, ttl=30)
    assert holder.acquire(blocking=False)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(rl.lock(name, ttl=30).acquire(timeout=2)), daemon=True)
    thread.start()
    assert eventually(lambda: parked(rl))
    # Another client holds it on every master now (the masters restarted empty and it got
    # in, say): a swap that did not compare would hand that holding to our waiter.
    with raw_clients(masters.urls) as clients:
        for c in clients:
            c.set(name, "someone-else", px=30_000)
    with pytest.raises(LockLost):
        holder.release()
    thread.join(10)
    assert got == [False]
    with raw_clients(masters.urls) as clients:
        assert [c.get(name) for c in clients] == [b"someone-else"] * 3


def test_a_waiter_that_gave_up_is_not_handed_anything(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls, retry_delay=5.0)
    name = unique()
    holder = rl.lock(name, ttl=30)
    assert holder.acquire(blocking=False)
    assert not rl.lock(name, ttl=30).acquire(timeout=0.3)
    holder.release()
    with raw_clients(masters.urls) as clients:
        assert [c.exists(name) for c in clients] == [0] * len(masters.urls)


@pytest.mark.slow
def test_local_handovers_leave_room_for_other_clients(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    masters = fresh_masters(3, owner_only=False)
    name = unique()
    busy = client(masters.urls, retry_delay=0.05)
    other = client(masters.urls, retry_delay=0.05)
    stop = time.monotonic() + 4.0
    counts = [0, 0, 0]

    def loop(index: int) -> None:
        while time.monotonic() < stop:
            lock = busy.lock(name, ttl=10)
            if lock.acquire(timeout=1):
                counts[index] += 1
                time.sleep(0.002)
                lock.release()

    threads = threading.Thread(target=in_threads, args=(loop, 3), daemon=True)
    threads.start()
    assert eventually(lambda: sum(counts) > 2 * HANDOFF_CHAIN, within=10)
    reset_stats(masters)
    # The busy client's three loops would swap the lock among themselves forever; every
    # chain of handovers ends in a release that the other client's waiter hears too.
    started = time.monotonic()
    theirs = other.lock(name, ttl=10)
    assert theirs.acquire(timeout=3.5), f"starved, with {sum(counts)} local acquisitions meanwhile"
    waited = time.monotonic() - started
    theirs.release()
    threads.join(30)
    assert not threads.is_alive()
    publishes = max(stats(masters, "publish"))
    assert publishes >= 1
    assert waited < 3.5
