"""Blocking acquires of one client on one name take turns at the masters (redlock._protocol.core.Line):
a web service that makes a new Lock per request, with a hundred requests waiting on one
name, costs the masters what one waiter does, not a hundred times that."""

from __future__ import annotations

import threading
import time

import pytest

from redlock import QuorumUnavailable
from redlock.servers import LocalMasters

from .conftest import ClientFactory, FlagEvent, MastersFactory, in_threads, raw_clients, unique

WAITERS = 20
RETRY_DELAY = 0.1
HOLD = 1.0


def set_calls(masters: LocalMasters) -> list[int]:
    """How many SETs each master ran since its statistics were reset."""
    with raw_clients(masters.urls) as clients:
        return [int(client.info("commandstats").get("cmdstat_set", {}).get("calls", 0)) for client in clients]


def reset_stats(masters: LocalMasters) -> None:
    """CONFIG RESETSTAT: on masters started with owner_only=False (it is renamed away otherwise)."""
    with raw_clients(masters.urls) as clients:
        for client in clients:
            client.config_resetstat()


def test_local_waiters_on_one_name_cost_the_masters_what_one_does(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    masters = fresh_masters(3, owner_only=False)
    # No release messages: every look at the masters is a waiter's own timer, the cost at stake.
    rl = client(masters.urls, retry_delay=RETRY_DELAY, wake_on_release=False)
    name = unique()
    holder = rl.lock(name, ttl=30)
    assert holder.acquire(blocking=False)
    got: list[int] = []
    done = threading.Lock()

    def wait(index: int) -> None:
        lock = rl.lock(name, ttl=30)  # a Lock of its own, as a request handler makes one
        assert lock.acquire(timeout=60)
        with done:
            got.append(index)
        lock.release()

    threads = threading.Thread(target=in_threads, args=(wait, WAITERS), daemon=True)
    threads.start()
    time.sleep(0.5)  # all of them in line
    reset_stats(masters)
    time.sleep(HOLD)
    calls = max(set_calls(masters))
    holder.release()
    threads.join(120)
    assert not threads.is_alive()
    assert sorted(got) == list(range(WAITERS))  # each got the lock in turn, none starved
    # One waiter alone looks about HOLD / RETRY_DELAY times (jittered between half and one
    # and a half delays); the line must not multiply that by the number of waiters.
    alone = HOLD / (RETRY_DELAY / 2)
    assert calls <= 1.5 * alone, f"{calls} SETs on one master in {HOLD}s with {WAITERS} waiters in line"


def test_with_no_majority_each_waiter_gives_up_on_its_own_time(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    masters = fresh_masters(3)
    rl = client(masters.urls, retry_delay=RETRY_DELAY, wake_on_release=False)
    masters[1].kill()
    masters[2].kill()
    name = unique()
    outcomes: list[float] = []
    started = time.monotonic()

    def wait(index: int) -> None:
        with pytest.raises(QuorumUnavailable):
            rl.lock(name, ttl=10).acquire(timeout=1.0)
        outcomes.append(time.monotonic() - started)

    in_threads(wait, 8)
    # Not one after the other behind the first in line (8 s): each on its own timeout.
    assert len(outcomes) == 8
    assert max(outcomes) < 6.0, outcomes


def test_a_holder_that_never_releases_is_outwaited_by_the_line(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    masters = fresh_masters(3)
    rl = client(masters.urls, retry_delay=RETRY_DELAY)
    other = client(masters.urls)
    name = unique()
    assert other.lock(name, ttl=1.0).acquire(blocking=False)  # and never released: it expires
    got: list[bool] = []

    def wait(index: int) -> None:
        lock = rl.lock(name, ttl=10)
        got.append(lock.acquire(timeout=30))
        lock.release()

    in_threads(wait, 5)
    assert got == [True] * 5


def test_the_line_is_the_acquires_in_arrival_order_and_watchers_do_not_hold_it() -> None:
    from redlock._protocol.connection import Waiters  # noqa: PLC0415

    waiters: Waiters[FlagEvent] = Waiters()
    watcher, first, second = FlagEvent(), FlagEvent(), FlagEvent()
    waiters.add("c", watcher)  # an election's observer: it waits for releases, it tries nothing
    waiters.add("c", first, in_line=True)
    waiters.add("c", second, in_line=True)
    assert waiters.may_try("c", first)
    assert not waiters.may_try("c", second)  # no news yet: the lock is taken to be held
    waiters.found("c", held=False)  # the first's try found no majority answering
    assert waiters.may_try("c", second)  # then each tries on its own
    waiters.found("c", held=True)
    assert not waiters.may_try("c", second)
    waiters.discard("c", first)  # the first got it (or gave up): the next is first
    assert waiters.may_try("c", second)
    waiters.discard("c", second)
    waiters.discard("c", watcher)
    assert waiters.channels() == set()


def test_a_local_release_moves_the_line_on_without_release_messages(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    masters = fresh_masters(3)
    # No release messages, and a retry delay far beyond the test: each handoff must come
    # from the local release itself (one turn of 4 waiters x 5 acquisitions = 20 handoffs;
    # on the retry timer they would take 20 x 2 s).
    rl = client(masters.urls, retry_delay=2.0, wake_on_release=False)
    name = unique()
    turns: list[int] = []
    started = time.monotonic()

    def work(index: int) -> None:
        for _ in range(5):
            lock = rl.lock(name, ttl=10)
            assert lock.acquire(timeout=60)
            turns.append(index)
            lock.release()

    in_threads(work, 4)
    assert len(turns) == 20
    assert time.monotonic() - started < 20.0
