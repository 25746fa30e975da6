"""The client's behaviour on real redis-server masters.

Every test here runs against each public API through the ``client`` fixture (see
conftest.py), which gives the same blocking surface over the sync and the asyncio client.
Times are bounded generously: these tests check that nothing hangs, and the benchmark
measures speed.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

import redlock
from redlock import LockLost, LockNotAcquired, LockNotHeld, NodeStatus, QuorumUnavailable, RedlockError
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, in_threads, unique


def holders_of(raw: list[redis.Redis], name: str) -> list[bytes | None]:
    return [client.get(name) for client in raw]  # type: ignore[misc]


def test_acquire_release_roundtrip(client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.token is None
    assert not lock.locked()
    assert lock.validity == 0.0
    assert lock.acquire(blocking=False)
    assert lock.locked()
    assert 9.0 < lock.validity <= 10.0
    token = lock.token
    assert token is not None
    assert len(token) * 4 >= 128  # hex digits
    assert holders_of(raw, lock.name).count(token.encode()) >= 3
    assert eventually(lambda: holders_of(raw, lock.name) == [token.encode()] * 5)
    assert all(0 < client.pttl(lock.name) <= 10_000 for client in raw)  # type: ignore[operator]
    lock.release()
    assert not lock.locked()
    assert lock.token is None
    assert holders_of(raw, lock.name) == [None] * 5


def test_a_held_lock_is_not_granted_twice(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique()
    first, second = rl.lock(name, ttl=5.0), rl.lock(name, ttl=5.0)
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)
    started = time.monotonic()
    assert not second.acquire(timeout=0.3)
    assert time.monotonic() - started < 5.0
    first.release()
    assert second.acquire(blocking=False)
    second.release()


def test_mutual_exclusion_under_contention(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    """8 threads do a deliberately non-atomic read-modify-write under the lock: no update is lost."""
    rl = client(masters.urls, retry_delay=0.01)
    name, counter = unique(), unique("counter")
    raw[0].set(counter, 0)
    increments, errors = 10, []

    def worker() -> None:
        try:
            for _ in range(increments):
                with rl.lock(name, ttl=5.0, timeout=30.0):
                    value = int(raw[0].get(counter))  # type: ignore[arg-type]
                    time.sleep(0.001)  # widen the race window
                    raw[0].set(counter, value + 1)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    in_threads(lambda _: worker(), 8)
    assert not errors
    assert int(raw[0].get(counter)) == 8 * increments  # type: ignore[arg-type]


def test_the_unprotected_counter_does_lose_updates(masters: LocalMasters, raw: list[redis.Redis]) -> None:
    """The control for the test above: without the lock the same workload loses updates."""
    counter = unique("counter")
    raw[0].set(counter, 0)

    def worker() -> None:
        with redis.Redis.from_url(masters.urls[0]) as own:
            for _ in range(10):
                value = int(own.get(counter))  # type: ignore[arg-type]
                time.sleep(0.001)
                own.set(counter, value + 1)

    in_threads(lambda _: worker(), 8, within=60)
    assert int(raw[0].get(counter)) < 80  # type: ignore[arg-type]


def test_lock_expires_and_can_then_be_taken(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique()
    first = rl.lock(name, ttl=0.2)
    assert first.acquire(blocking=False)
    time.sleep(0.3)
    assert not first.locked()
    assert first.validity == 0.0
    second = rl.lock(name, ttl=5.0)
    assert second.acquire(blocking=False)
    with pytest.raises(LockLost) as lost:
        first.release()
    assert lost.value.resource == name
    assert lost.value.granted == 0
    assert second.locked()  # the expired holder's release did not touch the new holder
    second.release()


def test_a_foreign_token_can_neither_release_nor_extend(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=5.0)
    assert lock.acquire(blocking=False)
    assert eventually(lambda: None not in holders_of(raw, lock.name))
    for node in raw:  # as if our lock expired and someone else took it everywhere
        node.set(lock.name, b"someone-else", px=5000)
    with pytest.raises(LockLost) as lost:
        lock.extend()
    assert lost.value.granted == 0
    statuses = [outcome.status for outcome in lost.value.outcomes]
    assert statuses.count(NodeStatus.DENIED) >= 3  # decided once a majority said no
    assert NodeStatus.GRANTED not in statuses
    assert not lock.locked()
    with pytest.raises(LockLost):
        lock.release()
    assert holders_of(raw, lock.name) == [b"someone-else"] * 5
    assert all(node.pttl(lock.name) <= 5000 for node in raw)  # type: ignore[operator]


def test_release_of_a_lock_never_acquired_is_a_clear_error(client: ClientFactory, masters: LocalMasters) -> None:
    lock = client(masters.urls).lock(unique())
    with pytest.raises(LockNotHeld, match="does not hold it") as error:
        lock.release()
    assert isinstance(error.value, RuntimeError)
    with pytest.raises(LockNotHeld):
        lock.extend()


def test_extend_resets_the_ttl_and_validity(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=1.0)
    assert lock.acquire(blocking=False)
    assert eventually(lambda: None not in holders_of(raw, lock.name))
    validity = lock.extend(5.0)
    assert 4.0 < validity <= 5.0
    assert 4.0 < lock.validity <= 5.0
    assert eventually(lambda: all(1000 < node.pttl(lock.name) <= 5000 for node in raw))  # type: ignore[operator]
    lock.release()


def test_an_extend_after_the_validity_ran_out_is_a_loss_even_where_the_keys_outlive_it(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    # lock_delay keeps the keys (our token) on the masters for a second past the validity:
    # an extend sent then would still find them, and must not revive a lapsed holding.
    lock = client(masters.urls).lock(unique(), ttl=0.3, lock_delay=1.0)
    assert lock.acquire(blocking=False)
    time.sleep(0.4)
    assert all(node.get(lock.name) is not None for node in raw)
    with pytest.raises(LockLost, match="validity ran out before this extend began"):
        lock.extend()
    assert lock.lost
    with pytest.raises(LockLost):
        lock.release()  # (the release tells of the loss too; our keys go)
    assert eventually(lambda: all(node.get(lock.name) is None for node in raw))


def test_acquired_in_one_thread_released_in_another(client: ClientFactory, masters: LocalMasters) -> None:
    lock = client(masters.urls).lock(unique())
    acquired = threading.Thread(target=lock.acquire)
    acquired.start()
    acquired.join(timeout=30)
    assert lock.locked()
    errors: list[BaseException] = []

    def release() -> None:
        try:
            lock.release()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    released = threading.Thread(target=release)
    released.start()
    released.join(timeout=30)
    assert not errors
    assert not lock.locked()


def test_with_block_holds_the_lock_and_releases_it(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique()
    with rl.lock(name, ttl=5.0) as lock:
        assert lock.locked()
        assert holders_of(raw, name).count(lock.token.encode()) >= 3  # type: ignore[union-attr]
    assert holders_of(raw, name) == [None] * 5


def test_with_block_raises_when_it_cannot_acquire(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique()
    holder = rl.lock(name, ttl=5.0)
    assert holder.acquire(blocking=False)
    ran = False
    with pytest.raises(redlock.AcquireTimeout) as error, rl.lock(name, ttl=5.0, timeout=0.2):
        ran = True  # pragma: no cover - must not run
    assert not ran
    assert isinstance(error.value, TimeoutError)
    assert isinstance(error.value, LockNotAcquired)
    holder.release()


def test_with_block_surfaces_a_lock_lost_while_the_body_ran(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique()
    with pytest.raises(LockLost), rl.lock(name, ttl=5.0):
        assert eventually(lambda: None not in holders_of(raw, name))
        for node in raw:
            node.delete(name)


def test_with_block_keeps_the_body_error_and_notes_the_loss(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique()
    with pytest.raises(KeyError) as error, rl.lock(name, ttl=5.0):
        assert eventually(lambda: None not in holders_of(raw, name))
        for node in raw:
            node.delete(name)
        raise KeyError("body")
    assert any("release" in note for note in error.value.__notes__)


def test_failed_acquire_leaves_no_key_of_ours(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique()
    for node in raw[:3]:
        node.set(name, b"other", px=10_000)
    lock = rl.lock(name, ttl=5.0)
    assert not lock.acquire(blocking=False)
    assert holders_of(raw, name) == [b"other"] * 3 + [None] * 2


def test_redis_clients_can_be_given_instead_of_urls(client: ClientFactory, masters: LocalMasters) -> None:
    given = [redis.Redis.from_url(url) for url in masters.urls]
    try:
        rl = client(given)
        lock = rl.lock(unique())
        assert lock.acquire(blocking=False)
        lock.release()
    finally:
        for one in given:
            one.close()


# --- faults -----------------------------------------------------------------------------------


def test_one_master_killed_still_acquires(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(5)
    cluster[0].kill()
    rl = client(cluster.urls)
    lock = rl.lock(unique(), ttl=5.0)
    assert lock.acquire(blocking=False)
    lock.release()


def test_one_master_hung_still_acquires_within_about_node_timeout(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    cluster = fresh_masters(5)
    rl = client(cluster.urls, node_timeout=0.1)
    warm = rl.lock(unique(), ttl=5.0)
    assert warm.acquire(blocking=False)
    warm.release()
    cluster[2].pause()
    started = time.monotonic()
    lock = rl.lock(unique(), ttl=5.0)
    assert lock.acquire(blocking=False)
    assert time.monotonic() - started < 2.0  # never a hang; the benchmark measures the real cost
    started = time.monotonic()
    lock.release()
    assert time.monotonic() - started < 2.0
    cluster[2].resume()


def test_rollback_after_a_hung_master_lands_after_our_set(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    """A SET that timed out may land later; the rollback sent after it must land after it."""
    cluster = fresh_masters(5)
    rl = client(cluster.urls, node_timeout=0.05)
    name = unique()
    direct = [redis.Redis.from_url(url, socket_timeout=2) for url in cluster.urls]
    try:
        warm = rl.lock(unique(), ttl=5.0)  # connect everything before the pause
        assert warm.acquire(blocking=False)
        warm.release()
        for node in direct[1:4]:
            node.set(name, b"other", px=30_000)
        cluster[0].pause()
        assert not rl.lock(name, ttl=20.0).acquire(blocking=False)
        cluster[0].resume()
        time.sleep(0.2)
        assert direct[0].get(name) is None
        assert direct[4].get(name) is None
    finally:
        for node in direct:
            node.close()


def test_three_of_five_down_is_quorum_unavailable_quickly(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(5)
    for master in cluster.masters[:3]:
        master.kill()
    rl = client(cluster.urls)
    lock = rl.lock(unique(), ttl=5.0)
    started = time.monotonic()
    with pytest.raises(QuorumUnavailable) as error:
        lock.acquire(blocking=False)
    assert time.monotonic() - started < 2.0
    assert error.value.quorum == 3
    assert [outcome.status for outcome in error.value.outcomes].count(NodeStatus.UNREACHABLE) == 3
    assert isinstance(error.value, LockNotAcquired)
    started = time.monotonic()
    with pytest.raises(QuorumUnavailable):
        lock.acquire(timeout=0.5)
    assert time.monotonic() - started < 5.0


def test_blocking_acquire_without_timeout_gives_up_on_a_dead_quorum(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    cluster = fresh_masters(3)
    for master in cluster.masters[:2]:
        master.kill()
    rl = client(cluster.urls, unavailable_timeout=0.5, retry_delay=0.05)
    started = time.monotonic()
    with pytest.raises(QuorumUnavailable):
        rl.lock(unique()).acquire()
    assert time.monotonic() - started < 10.0


@pytest.mark.servers
def test_refused_connections_cost_milliseconds_not_retries(client: ClientFactory) -> None:
    """No master runs on these ports: redis-py's own retries would take seconds."""
    with LocalMasters(1) as placeholder:
        port = placeholder[0].port
    urls = [f"redis://127.0.0.1:{port + i}" for i in range(0, 15, 3)]
    rl = client(urls)
    started = time.monotonic()
    with pytest.raises(QuorumUnavailable):
        rl.lock(unique()).acquire(blocking=False)
    assert time.monotonic() - started < 1.0


def test_a_master_that_forgot_its_scripts_still_releases_and_extends(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    cluster = fresh_masters(3, persistence="aof-always")
    # Every write waits for an fsync here, and the masters share one disk: a stall of a few
    # hundred ms (another process writing much to the same disk makes one) would time out all three
    # at once. This test is about NOSCRIPT, not latency.
    rl = client(cluster.urls, node_timeout=2.0)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    lock.extend()  # the scripts are now cached on every master
    token = lock.token.encode()  # type: ignore[union-attr]
    with redis.Redis.from_url(cluster.urls[1]) as direct:
        # The acquire returned on a majority: the SET may still be on its way to this one.
        assert eventually(lambda: direct.get(lock.name) == token)
    cluster[1].restart()  # comes back with the key (AOF) but an empty script cache
    with redis.Redis.from_url(cluster.urls[1]) as direct:
        assert direct.get(lock.name) == token
        assert lock.extend() > 9.0
        lock.release()
        assert direct.get(lock.name) is None


def test_errors_name_the_lock_quorum_and_each_master(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    cluster[0].kill()
    cluster[1].kill()
    name = unique()
    with pytest.raises(QuorumUnavailable) as error:
        client(cluster.urls).lock(name).acquire(blocking=False)
    message = str(error.value)
    assert name in message
    assert f"{cluster[0].host}:{cluster[0].port}" in message
    assert isinstance(error.value, RedlockError)
    assert error.value.resource == name
    assert [o.node for o in error.value.outcomes] == [f"{m.host}:{m.port}" for m in cluster]
    # The third master may answer before or after the two refusals decide the round.
    assert error.value.granted in (0, 1)
