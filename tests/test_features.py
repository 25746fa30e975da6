"""Auto-extension, fencing tokens, wake-up on release and cancellation, on real masters.

The shared tests run against both APIs through the ``client`` fixture; what only asyncio
has (cancelling the body on loss, cancellation of acquire and release) is tested on an
event loop of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

import redlock.asyncio
from redlock import LockLost, NodeStatus, QuorumUnavailable, Redlock
from redlock.fencing import FencedStore
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, unique

# --- auto-extension ---------------------------------------------------------------------------


def test_auto_extension_keeps_the_lock_past_its_ttl(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=0.6, auto_extend=True)
    assert lock.acquire(blocking=False)
    time.sleep(1.5)  # more than two ttls
    assert lock.locked()
    assert sum(node.get(lock.name) == lock.token.encode() for node in raw) >= 3  # type: ignore[union-attr]
    other = rl.lock(lock.name, ttl=1.0)
    assert not other.acquire(blocking=False)
    lock.release()
    assert other.acquire(blocking=False)
    other.release()


def test_renewer_stops_with_release(masters: LocalMasters) -> None:
    with Redlock(masters.urls) as rl:
        lock = rl.lock(unique(), ttl=0.6, auto_extend=True)
        assert lock.acquire(blocking=False)
        renewers = [t for t in threading.enumerate() if t.name == f"redlock-renew:{lock.name}"]
        assert len(renewers) == 1
        assert renewers[0].daemon  # never keeps a process alive
        lock.release()
        assert not renewers[0].is_alive()


def test_a_lost_lock_is_reported_at_once(client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]) -> None:
    lost: list[object] = []
    rl = client(masters.urls)
    name = unique()
    with pytest.raises(LockLost), rl.lock(name, ttl=0.6, auto_extend=True, on_lost=lost.append) as lock:
        assert eventually(lambda: None not in [node.get(name) for node in raw])
        for node in raw:  # the token is gone everywhere: the next extension must notice
            node.delete(name)
        assert eventually(lambda: bool(lost))
        assert not lock.locked()
        assert lock.validity == 0.0
    assert len(lost) == 1


def test_loss_of_the_majority_is_reported_when_validity_runs_out(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    cluster = fresh_masters(3)
    lost = threading.Event()
    rl = client(cluster.urls)
    lock = rl.lock(unique(), ttl=0.6, auto_extend=True, on_lost=lambda _: lost.set())
    assert lock.acquire(blocking=False)
    cluster[0].kill()
    cluster[1].kill()
    assert lost.wait(10)
    assert not lock.locked()
    with pytest.raises(LockLost):
        lock.release()


def test_auto_extension_survives_a_minority_down(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(5)
    rl = client(cluster.urls)
    lock = rl.lock(unique(), ttl=0.6, auto_extend=True)
    assert lock.acquire(blocking=False)
    cluster[0].kill()
    cluster[1].pause()
    time.sleep(1.5)
    assert lock.locked()
    cluster[1].resume()
    lock.release()


def test_auto_extension_arguments_are_checked(masters: LocalMasters) -> None:
    with Redlock(masters.urls, node_timeout=0.05) as rl:
        with pytest.raises(ValueError, match="too short to auto-extend"):
            rl.lock("x", ttl=0.2, auto_extend=True)
        with pytest.raises(TypeError, match="on_lost"):
            rl.lock("x", auto_extend=True, on_lost="not callable")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="auto_extend=True"):
            rl.lock("x", on_lost=print)
        with pytest.raises(TypeError, match="auto_extend"):
            rl.lock("x", auto_extend=1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="fencing"):
            rl.lock("x", fencing="yes")  # type: ignore[arg-type]


# --- fencing ----------------------------------------------------------------------------------


def test_fencing_tokens_strictly_increase_across_clients(client: ClientFactory, masters: LocalMasters) -> None:
    clients = [client(masters.urls), client(masters.urls)]
    name = unique()
    tokens = []
    for turn in range(12):
        lock = clients[turn % 2].lock(name, ttl=5.0, fencing=True)
        assert lock.acquire(blocking=False)
        assert isinstance(lock.fencing_token, int)
        tokens.append(lock.fencing_token)
        lock.release()
    assert tokens == sorted(set(tokens))
    assert tokens[0] >= 1


def test_fencing_tokens_survive_a_minority_losing_its_data(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    cluster = fresh_masters(5)
    rl = client(cluster.urls)
    name = unique()
    last = 0
    for victim in range(5):
        lock = rl.lock(name, ttl=5.0, fencing=True)
        assert lock.acquire(blocking=False)
        assert lock.fencing_token > last
        last = lock.fencing_token
        lock.release()
        cluster[victim].restart(wipe=True)  # one master at a time forgets everything


def test_a_stale_holder_cannot_write_through_the_fenced_store(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique()
    with redis.Redis.from_url(masters.urls[0]) as resource:
        store = FencedStore(resource, unique("resource"))
        stale = rl.lock(name, ttl=0.3, fencing=True)
        assert stale.acquire(blocking=False)
        time.sleep(0.4)  # the holder "pauses" past its validity
        fresh = rl.lock(name, ttl=5.0, fencing=True)
        assert fresh.acquire(blocking=False)
        assert store.write(b"fresh", fresh.fencing_token)
        assert not store.write(b"stale", stale.fencing_token)
        assert store.read() == b"fresh"
        assert store.highest_token == fresh.fencing_token
        fresh.release()
        with pytest.raises(TypeError):
            store.write(b"x", None)


def test_unfenced_locks_have_no_fencing_token(client: ClientFactory, masters: LocalMasters) -> None:
    lock = client(masters.urls).lock(unique())
    assert lock.acquire(blocking=False)
    assert lock.fencing_token is None
    lock.release()


def test_a_held_lock_says_which_masters_granted_it(client: ClientFactory, masters: LocalMasters) -> None:
    lock = client(masters.urls).lock(unique())
    assert lock.outcomes == ()
    assert lock.acquire(blocking=False)
    granted = [o.node for o in lock.outcomes if o.status is NodeStatus.GRANTED]
    assert len(lock.outcomes) == len(masters.urls)
    assert len(granted) >= lock.quorum
    lock.extend()
    assert sum(o.status is NodeStatus.GRANTED for o in lock.outcomes) >= lock.quorum
    lock.release()


# --- wake-up on release -----------------------------------------------------------------------


def test_a_waiter_wakes_on_release_not_on_its_timer(client: ClientFactory, masters: LocalMasters) -> None:
    """With a 4 s retry delay a polling waiter needs at least 2 s after the release."""
    holder_client, waiter_client = client(masters.urls), client(masters.urls, retry_delay=4.0)
    name = unique()
    holder = holder_client.lock(name, ttl=30.0)
    assert holder.acquire(blocking=False)
    waiter = waiter_client.lock(name, ttl=30.0)
    acquired_at: list[float] = []

    def wait() -> None:
        if waiter.acquire(timeout=60):
            acquired_at.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.5)  # the waiter has failed once and is waiting
    released_at = time.monotonic()
    holder.release()
    thread.join(timeout=60)
    assert acquired_at
    assert acquired_at[0] - released_at < 1.9
    waiter.release()


def test_waiters_still_poll_when_wake_up_is_off(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls, retry_delay=0.05, wake_on_release=False)
    name = unique()
    holder = rl.lock(name, ttl=0.3)
    assert holder.acquire(blocking=False)
    waiter = rl.lock(name, ttl=1.0)
    assert waiter.acquire(timeout=10)  # gets it when the holder's key expires
    waiter.release()


# --- asyncio only -----------------------------------------------------------------------------


def test_asyncio_loss_cancels_the_body_when_asked(masters: LocalMasters) -> None:
    async def scenario() -> None:
        async with redlock.asyncio.Redlock(masters.urls) as rl:
            name = unique()
            direct = [redis.asyncio.Redis.from_url(url) for url in masters.urls]
            body_finished = False
            with pytest.raises(LockLost):
                async with rl.lock(name, ttl=0.6, auto_extend=True, cancel_on_lost=True):
                    await asyncio.sleep(0.1)
                    for node in direct:
                        await node.delete(name)
                    await asyncio.sleep(10)  # cancelled by the loss long before this ends
                    body_finished = True
            assert not body_finished
            assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
            for node in direct:
                await node.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_asyncio_cancelled_acquire_rolls_back(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(5)
    name = unique()

    async def scenario() -> None:
        async with redlock.asyncio.Redlock(cluster.urls, node_timeout=0.5) as rl:
            warm = rl.lock(unique())
            assert await warm.acquire(blocking=False)
            await warm.release()
            for master in cluster.masters[:3]:
                master.pause()
            task = asyncio.ensure_future(rl.lock(name, ttl=30.0).acquire(blocking=False))
            await asyncio.sleep(0.1)  # the SETs are out; the hung majority has not answered
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for master in cluster.masters[:3]:
                master.resume()
            await asyncio.sleep(0.5)

    asyncio.run(asyncio.wait_for(scenario(), 30))
    for url in cluster.urls:
        with redis.Redis.from_url(url) as direct:
            assert direct.get(name) is None


def test_asyncio_acquire_cancelled_as_the_client_closes_stays_cancelled(fresh_masters: MastersFactory) -> None:
    """aclose() and a cancel of the acquiring task in the same window: the task ends
    cancelled (asyncio.timeout and TaskGroup rely on it), and nothing is left behind."""
    cluster = fresh_masters(3)
    raw = [redis.Redis.from_url(url) for url in cluster.urls]
    name = unique()
    raw[0].set(name, "someone-else", px=30_000)

    async def scenario() -> None:
        rl = redlock.asyncio.Redlock(cluster.urls, node_timeout=0.5, wake_on_release=False)
        task = asyncio.ensure_future(rl.lock(name, ttl=30.0).acquire(blocking=False))
        await asyncio.sleep(0.2)  # the SET round waits for the hung master
        closing = asyncio.ensure_future(rl.aclose())  # lets the acquire finish its clean-up
        task.cancel()
        await closing
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    cluster[1].pause()
    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        cluster[1].resume()
    assert eventually(lambda: [master.get(name) for master in raw] == [b"someone-else", None, None])


def test_asyncio_cancelled_release_still_releases(masters: LocalMasters) -> None:
    name = unique()

    async def scenario() -> None:
        async with redlock.asyncio.Redlock(masters.urls) as rl:
            lock = rl.lock(name, ttl=30.0)
            assert await lock.acquire(blocking=False)
            task = asyncio.ensure_future(lock.release())
            await asyncio.sleep(0)  # the release has started
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert lock.token is None  # forgotten only after the release completed

    asyncio.run(asyncio.wait_for(scenario(), 30))
    for url in masters.urls:
        with redis.Redis.from_url(url) as direct:
            assert direct.get(name) is None


def test_asyncio_quorum_unavailable(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    cluster[0].kill()
    cluster[1].kill()

    async def scenario() -> None:
        async with redlock.asyncio.Redlock(cluster.urls) as rl:
            with pytest.raises(QuorumUnavailable):
                await rl.lock(unique()).acquire(blocking=False)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_wake_up_and_fencing_keep_working_with_a_master_down(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    cluster = fresh_masters(5)
    cluster[0].kill()
    holder_client, waiter_client = client(cluster.urls), client(cluster.urls, retry_delay=4.0)
    name = unique()
    holder = holder_client.lock(name, ttl=30.0, fencing=True)
    assert holder.acquire(blocking=False)
    waiter = waiter_client.lock(name, ttl=30.0, fencing=True)
    acquired_at: list[float] = []
    thread = threading.Thread(target=lambda: waiter.acquire(timeout=60) and acquired_at.append(time.monotonic()))
    thread.start()
    time.sleep(0.5)
    holder_token = holder.fencing_token
    released_at = time.monotonic()
    holder.release()
    thread.join(timeout=60)
    assert acquired_at
    assert acquired_at[0] - released_at < 1.9  # woken, not polled (a poll takes >= 2 s here)
    assert waiter.fencing_token > holder_token
    waiter.release()


def test_fencing_fails_loudly_without_a_majority(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    cluster[0].kill()
    cluster[1].kill()
    with pytest.raises(QuorumUnavailable):
        client(cluster.urls).lock(unique(), fencing=True).acquire(blocking=False)
