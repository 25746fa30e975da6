"""The counting semaphore and the lock on several names, on real masters, through both APIs.

Both are the lock's own flows with other scripts and (for the semaphore) another quorum, so
these tests look at what differs: how many may hold at once, all-or-nothing over names,
expiry by the master's clock, and that nothing is left on any master afterwards.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest
import redis

import redlock
from redlock import LockLost, QuorumUnavailable, Redlock
from redlock._protocol.core import order_key
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, in_threads, unique


def permits_on(raw: list[redis.Redis], name: str) -> list[set[bytes]]:
    return [set(node.zrange(name, 0, -1)) for node in raw]  # type: ignore[arg-type]


def nothing_left(raw: list[redis.Redis], *names: str) -> bool:
    keys = [*names, *(order_key(name) for name in names)]
    return all(node.exists(*keys) == 0 for node in raw)


# --- the semaphore ----------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "quorum"), [(1, 3), (2, 4), (3, 4), (4, 5), (5, 5), (100, 5)])
def test_semaphore_quorum_on_five_masters(masters: LocalMasters, limit: int, quorum: int) -> None:
    with Redlock(masters.urls) as rl:
        sem = rl.semaphore(unique("sem"), limit=limit)
        assert (sem.quorum, sem.limit) == (quorum, limit)
        assert redlock.semaphore_quorum(5, limit) == quorum


def test_semaphore_admits_limit_holders_and_no_more(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("sem")
    sems = [rl.semaphore(name, limit=3, ttl=10.0) for _ in range(5)]
    assert [sem.acquire(blocking=False) for sem in sems] == [True, True, True, False, False]
    held = {sem.permit.encode() for sem in sems[:3]}
    assert sems[3].permit is None
    assert not sems[3].locked()
    assert all(9.0 < sem.validity <= 10.0 for sem in sems[:3])
    assert eventually(lambda: permits_on(raw, name) == [held] * 5)
    sems[1].release()
    assert sems[1].permit is None
    assert sems[3].acquire(blocking=False)
    assert not sems[4].acquire(blocking=False)
    for sem in (sems[0], sems[2], sems[3]):
        sem.release()
    assert nothing_left(raw, name)


def test_semaphore_failed_acquire_leaves_no_permit_of_ours(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("sem")
    holder = rl.semaphore(name, limit=1, ttl=10.0)
    assert holder.acquire(blocking=False)
    assert eventually(lambda: permits_on(raw, name) == [{holder.permit.encode()}] * 5)
    # Two masters have room (their permit is gone): a majority would do, the quorum of 3 not.
    for node in raw[:2]:
        node.zrem(name, holder.permit)
    other = rl.semaphore(name, limit=1, ttl=10.0)
    assert not other.acquire(blocking=False)
    assert eventually(lambda: permits_on(raw, name) == [set()] * 2 + [{holder.permit.encode()}] * 3)
    holder.release()
    assert nothing_left(raw, name)


def test_semaphore_permit_expires_by_the_masters_clock_and_extend_never_revives_it(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("sem")
    first = rl.semaphore(name, limit=1, ttl=0.3)
    assert first.acquire(blocking=False)
    assert not rl.semaphore(name, limit=1, ttl=0.3).acquire(blocking=False)
    time.sleep(0.5)
    assert not first.locked()
    with pytest.raises(LockLost):
        first.extend(5.0)
    assert all(
        node.zscore(name, first.permit) is None or node.zscore(name, first.permit) < time.time() * 1000 for node in raw
    )  # type: ignore[operator]
    second = rl.semaphore(name, limit=1, ttl=5.0)
    assert second.acquire(blocking=False)  # the expired permit was dropped by the script
    assert eventually(lambda: permits_on(raw, name) == [{second.permit.encode()}] * 5)
    with pytest.raises(LockLost):
        first.release()
    second.release()
    assert nothing_left(raw, name)


def test_semaphore_extend_moves_the_permits_expiry(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("sem")
    sem = rl.semaphore(name, limit=2, ttl=1.0)
    assert sem.acquire(blocking=False)
    assert 9.0 < sem.extend(10.0) <= 10.0
    now_ms = time.time() * 1000
    scores = [node.zscore(name, sem.permit) for node in raw]
    assert sum(1 for score in scores if score is not None and score > now_ms + 8000) >= sem.quorum
    assert all(node.pttl(name) > 8000 for node in raw if node.exists(name))  # type: ignore[operator]
    sem.release()
    assert nothing_left(raw, name)


def test_semaphore_auto_extends_and_works_as_a_with_block(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique("sem")
    with rl.semaphore(name, limit=1, ttl=0.6, auto_extend=True) as sem:
        time.sleep(1.5)  # more than two ttls
        assert sem.locked()
        assert not rl.semaphore(name, limit=1, ttl=1.0).acquire(blocking=False)
    assert rl.semaphore(name, limit=1, ttl=1.0).acquire(blocking=False)


def test_semaphore_waiter_gets_a_released_permit(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls, retry_delay=5.0)  # a long timer: the release announcement wakes it
    name = unique("sem")
    holder = rl.semaphore(name, limit=1, ttl=30.0)
    assert holder.acquire(blocking=False)
    waiter = rl.semaphore(name, limit=1, ttl=30.0)
    releaser = threading.Timer(0.3, holder.release)
    releaser.start()
    assert waiter.acquire(timeout=30.0)
    releaser.join()
    waiter.release()


def test_semaphore_holders_never_exceed_the_limit(client: ClientFactory, masters: LocalMasters) -> None:
    """8 threads on limit 3: at every moment at most 3 of them are inside."""
    rl = client(masters.urls, retry_delay=0.01)
    name = unique("sem")
    inside, most, errors = [0], [0], []
    guard = threading.Lock()

    def worker() -> None:
        try:
            for _ in range(6):
                with rl.semaphore(name, limit=3, ttl=5.0, timeout=60.0):
                    with guard:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    time.sleep(0.005)
                    with guard:
                        inside[0] -= 1
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    in_threads(lambda _: worker(), 8)
    assert not errors
    assert 1 <= most[0] <= 3


def test_semaphore_needs_its_larger_quorum_up(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(5)
    cluster.masters[0].kill()
    rl = client(cluster.urls)
    sem = rl.semaphore(unique("sem"), limit=2, ttl=5.0)  # needs 4 of 5
    assert sem.acquire(blocking=False)
    sem.release()
    cluster.masters[1].kill()
    with pytest.raises(QuorumUnavailable) as error:
        sem.acquire(blocking=False)
    assert error.value.quorum == 4
    assert rl.lock(unique(), ttl=5.0).acquire(blocking=False)  # a lock still has its majority


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"limit": 0}, ValueError, "limit"),
        ({"limit": -2}, ValueError, "limit"),
        ({"limit": "3"}, TypeError, "limit"),
        ({"limit": True}, TypeError, "limit"),
        ({"limit": 2.0}, TypeError, "limit"),
        ({"limit": 2, "ttl": 0}, ValueError, "ttl"),
        ({"limit": 2, "on_lost": print}, ValueError, "auto_extend"),
    ],
)
def test_semaphore_bad_arguments_name_themselves(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    with Redlock(["redis://127.0.0.1:1"]) as rl:  # nothing listens: no traffic may be needed
        with pytest.raises(error, match=match):
            rl.semaphore("pool", **kwargs)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="name"):
            rl.semaphore(["a", "b"], limit=2)  # type: ignore[arg-type]


# --- the lock on several names ------------------------------------------------------------------


def test_multi_lock_holds_every_name_or_none(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    base = unique("multi")
    a, b, c = f"{base}:a", f"{base}:b", f"{base}:c"
    lock = rl.lock([c, a, b, a], ttl=10.0)
    assert lock.names == (a, b, c)
    assert lock.name == f"{a}, {b}, {c}"
    assert lock.acquire(blocking=False)
    token = lock.token.encode()
    assert eventually(lambda: all(node.mget(a, b, c) == [token] * 3 for node in raw))
    assert all(0 < node.pttl(name) <= 10_000 for node in raw for name in (a, b, c))  # type: ignore[operator]
    assert not rl.lock(b, ttl=1.0).acquire(blocking=False)
    assert not rl.lock([c, f"{base}:d"], ttl=1.0).acquire(blocking=False)
    lock.release()
    assert lock.token is None
    assert nothing_left(raw, a, b, c, f"{base}:d")


def test_multi_lock_sets_nothing_when_one_name_is_held(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    base = unique("multi")
    single = rl.lock(f"{base}:b", ttl=10.0)
    assert single.acquire(blocking=False)
    lock = rl.lock([f"{base}:a", f"{base}:b", f"{base}:c"], ttl=10.0)
    assert not lock.acquire(blocking=False)
    assert all(node.exists(f"{base}:a", f"{base}:c") == 0 for node in raw)
    single.release()
    assert lock.acquire(blocking=False)
    lock.release()
    assert nothing_left(raw, f"{base}:a", f"{base}:b", f"{base}:c")


def test_multi_lock_extend_covers_every_name_and_never_revives_one(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    base = unique("multi")
    names = [f"{base}:a", f"{base}:b"]
    lock = rl.lock(names, ttl=1.0)
    assert lock.acquire(blocking=False)
    assert 9.0 < lock.extend(10.0) <= 10.0
    assert eventually(lambda: all(node.pttl(name) > 8000 for node in raw for name in names))  # type: ignore[operator]
    for node in raw[:3]:
        node.delete(names[1])  # one name gone from a majority: the holding is gone there
    with pytest.raises(LockLost):
        lock.extend(10.0)
    assert all(node.exists(names[1]) == 0 for node in raw[:3])
    with pytest.raises(LockLost):
        lock.release()
    assert nothing_left(raw, *names)


def test_multi_lock_release_leaves_the_next_holders_order_key_alone(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    base = unique("multi")
    first, second = f"{base}:a", f"{base}:b"
    lock = rl.lock([first, second], ttl=10.0)
    assert lock.acquire(blocking=False)
    assert eventually(lambda: all(node.exists(first, second) == 2 for node in raw))
    for node in raw[:2]:  # our first name lapsed there and another holder took it, and extended it
        node.set(first, b"other", px=10_000)
        node.set(order_key(first), b"other:1", px=10_000)
    assert lock.extend(10.0) > 9.0  # refused where a name is not ours; a majority has both
    lock.release()
    assert all(node.get(order_key(first)) == b"other:1" for node in raw[:2])
    assert all(node.exists(second) == 0 for node in raw)
    for node in raw[:2]:
        node.delete(first, order_key(first))
    assert nothing_left(raw, first, second)


def test_multi_lock_waiter_wakes_on_the_release_of_the_name_it_waits_for(
    client: ClientFactory, masters: LocalMasters
) -> None:
    rl = client(masters.urls, retry_delay=5.0)  # a long timer: the release announcement wakes it
    base = unique("multi")
    holder = rl.lock(f"{base}:b", ttl=30.0)
    assert holder.acquire(blocking=False)
    waiter = rl.lock([f"{base}:a", f"{base}:b"], ttl=30.0)
    releaser = threading.Timer(0.3, holder.release)
    releaser.start()
    assert waiter.acquire(timeout=30.0)
    releaser.join()
    waiter.release()


def test_overlapping_multi_locks_from_eight_threads(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    """Each thread locks a different pair of overlapping names: no name ever has two holders,
    nobody deadlocks (every thread finishes), and no key is left afterwards."""
    rl = client(masters.urls, retry_delay=0.01)
    base = unique("multi")
    names = [f"{base}:{i}" for i in range(5)]
    holders: collections.Counter[str] = collections.Counter()
    shared, errors, done = [0], [], []
    guard = threading.Lock()

    def worker(index: int) -> None:
        # Reversed orders on purpose: sorting inside the lock is what prevents a deadlock.
        mine = [names[(index + 1) % 5], names[index % 5], names[(index + 3) % 5]]
        try:
            for _ in range(5):
                with rl.lock(mine, ttl=5.0, timeout=60.0):
                    with guard:
                        holders.update(set(mine))
                        shared[0] = max(shared[0], *(holders[name] for name in mine))
                    time.sleep(0.002)
                    with guard:
                        holders.subtract(set(mine))
            done.append(index)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    in_threads(worker, 8)
    assert not errors
    assert sorted(done) == list(range(8))
    assert shared[0] == 1
    assert eventually(lambda: nothing_left(raw, *names))


@pytest.mark.parametrize(
    ("names", "error", "match"),
    [
        ([], ValueError, "empty"),
        ((), ValueError, "empty"),
        (["a", 1], TypeError, "names"),
        (["a", b"b"], TypeError, "names"),
        (["a", ""], ValueError, "name"),
        ({"a", "b"}, TypeError, "name"),
        (["a", "redlock-quorum:order:x"], ValueError, "reserved"),
    ],
)
def test_multi_lock_bad_names_are_refused_before_any_traffic(names: object, error: type[Exception], match: str) -> None:
    # Nothing listens there: no traffic may be needed to refuse them.
    with Redlock(["redis://127.0.0.1:1"]) as rl, pytest.raises(error, match=match):
        rl.lock(names)  # type: ignore[arg-type]


def test_multi_lock_has_no_fencing_token(masters: LocalMasters) -> None:
    with Redlock(masters.urls) as rl:
        with pytest.raises(ValueError, match="fencing"):
            rl.lock(["a", "b"], fencing=True)
        with pytest.raises(TypeError, match="fencing"):
            rl.semaphore("pool", limit=2, fencing=True)  # type: ignore[call-arg]


# --- the scripts on every server kind ---------------------------------------------------------


def test_semaphore_and_multi_scripts_run_on_every_server_kind(
    server_kind: str, matrix_cluster: LocalMasters, client: ClientFactory
) -> None:
    """The semaphore's scripts call TIME before they write (allowed with effects replication:
    Redis 5 and later, Valkey); the multi-name ones take a variable number of keys."""
    rl = client(matrix_cluster.urls)
    sem = rl.semaphore(unique("sem"), limit=2, ttl=5.0)
    assert sem.acquire(blocking=False)
    assert sem.extend(5.0) > 4.0
    sem.release()
    lock = rl.lock([unique("a"), unique("b")], ttl=5.0)
    assert lock.acquire(blocking=False)
    assert lock.extend(5.0) > 4.0
    lock.release()
