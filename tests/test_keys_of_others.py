"""Keys this library did not write: it never deletes, overwrites or extends one.

Three neighbours share a lock's masters. Another Redlock client whose keys lie where ours
once did (pottery's ``Redlock(key="order:x")`` is the key ``redlock:order:x``, where 0.1.0
kept lock ``x``'s extend-order key). Anything at all in our own namespace
(``redlock-quorum:``), which no lock name of ours may take but a peer's may. And another
kind of lock of this library on the same name (a plain lock beside a read-write lock's
readers, a semaphore on a plain lock's name). Each test plants the neighbour's key on real
masters, runs every call of ours on that name, and reads the masters directly: the key is
as it was, and a call that cannot proceed says which key holds what (``KeyConflict``), never
an ``IndexError``. Once per public API (the ``client`` fixture).
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import redis

from redlock import ExtendUnconfirmed, KeyConflict, LockLost
from redlock._protocol.core import (
    NAMESPACE,
    READERS_MARK,
    fence_key,
    intent_key,
    legacy_fence_key,
    order_key,
    readers_key,
)
from redlock.servers import LocalMasters

from .conftest import ClientFactory, eventually, parked, unique

#: What pottery 3 keeps for its lock "order:<name>" (and the others): a string token, no
#: "<token>:<number>" shape, with a ttl.
PEER_TOKEN = "9f1c7a52-3b0e-4c1e-9d2a-7f3c0b8e1d44"


def _everywhere(raw: list[redis.Redis], key: str, value: str, ttl_ms: int = 60_000) -> None:
    for node in raw:
        node.set(key, value, px=ttl_ms)


def _plant(raw: list[redis.Redis], key: str, kind: str) -> None:
    """A peer's key of type ``kind`` ("string" or "zset") on every master, with no ttl."""
    for node in raw:
        node.set(key, PEER_TOKEN) if kind == "string" else node.zadd(key, {PEER_TOKEN: 1})


def _untouched(raw: list[redis.Redis], key: str, value: str) -> bool:
    """The peer's key is on every master with its value and a ttl still running."""
    return all(node.get(key) == value.encode() and node.pttl(key) > 0 for node in raw)


def test_keys_where_0_1_0_kept_ours_are_pottery_locks_and_stay_so(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory
) -> None:
    """pottery's held locks "order:N", "intent:N", "readers:N" survive every call of ours on N."""
    rl = client(masters.urls)
    name = unique("peer")
    peer_keys = [f"redlock:{prefix}:{name}" for prefix in ("order", "intent", "readers", "released")]
    for key in peer_keys:
        _everywhere(raw, key, PEER_TOKEN)
    lock = rl.lock(name, ttl=5.0)
    assert lock.acquire(blocking=False)
    lock.extend(5.0)
    lock.extend(add=1.0)
    lock.release()
    rw = rl.rwlock(name, ttl=5.0)
    for side in (rw.read(), rw.write()):
        assert side.acquire(blocking=False)
        side.extend(5.0)
        side.release()
    assert all(_untouched(raw, key, PEER_TOKEN) for key in peer_keys)


def test_a_name_in_pottery_s_namespace_is_a_name_like_any_other(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory
) -> None:
    """docs/migration.md: pottery's Redlock(key="order:N") is our lock "redlock:order:N";
    0.1.0 refused such names, since its own keys lived there."""
    rl = client(masters.urls)
    name = f"redlock:order:{unique('job')}"
    _everywhere(raw, name, PEER_TOKEN, ttl_ms=500)  # pottery holds it
    assert not rl.lock(name, ttl=5.0).acquire(blocking=False)
    assert _untouched(raw, name, PEER_TOKEN)
    lock = rl.lock(name, ttl=5.0)
    assert lock.acquire(timeout=10.0)  # once pottery's lapses
    lock.release()
    with pytest.raises(ValueError, match=f"name must not start with {NAMESPACE!r}"):
        rl.lock(NAMESPACE + "x", ttl=5.0)


@pytest.mark.parametrize("planted", ["string", "zset"])
def test_a_foreign_fencing_counter_is_a_key_conflict_and_stays(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory, planted: str
) -> None:
    name = unique("fenced")
    key = fence_key(name)
    _plant(raw, key, planted)
    rl = client(masters.urls)
    with pytest.raises(KeyConflict, match=f"FOREIGNKEY {key} holds") as caught:
        rl.lock(name, ttl=5.0, fencing=True).acquire(blocking=False)
    assert "a fencing counter" in str(caught.value)
    assert all(node.type(key) == planted.encode() for node in raw)
    assert all(node.exists(name) == 0 for node in raw)  # nothing of ours left behind


def test_an_upgrade_keeps_fencing_tokens_growing_from_0_1_0_s_counters(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory
) -> None:
    """0.1.0 counted at redlock:fence:N; the new counter starts above it, and the old one is
    read, never written (it may as well be pottery's lock "fence:N", a token: then ignored)."""
    rl = client(masters.urls)
    name = unique("fenced")
    _everywhere(raw, legacy_fence_key(name), "41")
    lock = rl.lock(name, ttl=5.0, fencing=True)
    assert lock.acquire(blocking=False)
    assert lock.fencing_token == 42
    lock.release()
    assert all(node.get(legacy_fence_key(name)) == b"41" for node in raw)
    other = unique("fenced")
    _everywhere(raw, legacy_fence_key(other), PEER_TOKEN)
    lock = rl.lock(other, ttl=5.0, fencing=True)
    assert lock.acquire(blocking=False)
    assert lock.fencing_token == 1
    lock.release()
    assert _untouched(raw, legacy_fence_key(other), PEER_TOKEN)


def test_a_foreign_extend_order_key_is_left_and_the_extend_refused_there(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory
) -> None:
    rl = client(masters.urls, node_timeout=0.5)
    name = unique("order")
    key = order_key(name)
    lock = rl.lock(name, ttl=5.0)
    assert lock.acquire(blocking=False)
    _everywhere(raw[:3], key, PEER_TOKEN)  # a majority: the extend cannot be confirmed
    with pytest.raises((ExtendUnconfirmed, LockLost)) as caught:
        lock.extend(5.0)
    assert f"FOREIGNKEY {key} holds" in str(caught.value)
    lock.release() if lock.locked() else None
    assert _untouched(raw[:3], key, PEER_TOKEN)
    assert all(node.exists(name) == 0 for node in raw)


@pytest.mark.parametrize("where", ["intent", "readers"])
def test_a_foreign_key_beside_a_read_write_lock_is_a_key_conflict_and_stays(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory, where: str
) -> None:
    name = unique("rw")
    key = intent_key(name) if where == "intent" else readers_key(name)
    _plant(raw, key, "zset" if where == "intent" else "string")  # the type the other one is
    rl = client(masters.urls)
    for side in (rl.rwlock(name, ttl=5.0).read(), rl.rwlock(name, ttl=5.0).write()):
        with pytest.raises(KeyConflict, match=f"FOREIGNKEY {key} holds a"):
            side.acquire(blocking=False)
    assert all(node.type(key) == (b"zset" if where == "intent" else b"string") for node in raw)
    assert all(node.exists(name) == 0 for node in raw)


def test_a_semaphore_on_a_plain_lock_s_name_is_a_key_conflict(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory
) -> None:
    rl = client(masters.urls)
    name = unique("kinds")
    lock = rl.lock(name, ttl=10.0)
    assert lock.acquire(blocking=False)
    with pytest.raises(KeyConflict, match="another kind of lock holds this name"):
        rl.semaphore(name, limit=2, ttl=5.0).acquire(blocking=False)
    assert all(node.get(name) == lock.token.encode() for node in raw)
    lock.release()
    permit = rl.semaphore(name, limit=2, ttl=5.0)
    assert permit.acquire(blocking=False)
    assert not rl.lock(name, ttl=5.0).acquire(blocking=False)  # the other way round: refused
    permit.release()


# --- a plain lock and a read-write lock on one name --------------------------------------------


def test_a_plain_lock_and_readers_of_one_name_exclude_each_other(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory
) -> None:
    """Readers mark the name's own key, so a plain lock's SET NX is refused beside them, and a
    plain holder keeps readers out as a writer does."""
    rl = client(masters.urls)
    name = unique("kinds")
    rw = rl.rwlock(name, ttl=10.0)
    first, second = rw.read(), rw.read()
    assert first.acquire(blocking=False)
    assert second.acquire(blocking=False)
    assert all(node.get(name) == READERS_MARK.encode() for node in raw)
    plain = rl.lock(name, ttl=5.0)
    assert not plain.acquire(blocking=False)
    first.release()
    assert not plain.acquire(blocking=False)  # one reader is still in
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(plain.acquire(timeout=20.0)))
    waiter.start()
    assert eventually(lambda: parked(rl))  # waiting for the release of the name
    assert got == []
    second.release()  # the last reader out takes the mark back and announces it
    waiter.join(30.0)
    assert got == [True]
    assert all(node.get(name) == plain.token.encode() for node in raw)
    assert not rw.read().acquire(blocking=False)
    assert not rw.write().acquire(blocking=False)
    assert rl.inspect(name).holder == plain.token
    plain.release()
    reader = rw.read()
    assert reader.acquire(blocking=False)
    assert rl.inspect(name).holder is None  # the mark is no holder: readers are listed
    assert rl.inspect(name).readers == (reader.token,)
    reader.release()
    assert all(node.exists(name) == 0 for node in raw)


def test_exec_and_exec_read_on_one_name_exclude_each_other(master_urls: list[str]) -> None:
    name = unique("kinds")
    holding = [sys.executable, "-m", "redlock", "exec", "--masters", ",".join(master_urls)]
    # A reader holds the name while its command sleeps; the plain exec must not run meanwhile.
    reader = subprocess.Popen([*holding, "--read", name, "--", "sleep", "30"])
    try:
        with redis.Redis.from_url(master_urls[0]) as node:
            assert eventually(lambda: node.get(name) == READERS_MARK.encode(), within=20.0)
        done = subprocess.run(
            [*holding, name, "--timeout", "0", "--", "true"], capture_output=True, text=True, check=False
        )
        assert done.returncode != 0, done.stdout
        assert "not acquired" in done.stderr.lower() or "held" in done.stderr.lower(), done.stderr
    finally:
        reader.terminate()
        reader.wait(30)


def test_a_0_1_0_reader_is_not_seen_by_a_new_writer_as_docs_migration_md_warns(
    masters: LocalMasters, raw: list[redis.Redis], client: ClientFactory
) -> None:
    """docs/migration.md: read-write locks need every 0.1.0 client stopped before the first
    new one starts. This is why: a reader that 0.1.0 keeps at redlock:readers:N (a sorted set
    scored by expiry, as its RW_READ_ACQUIRE left it) is no reader to a new writer."""
    rl = client(masters.urls)
    name = unique("rw")
    for node in raw:
        seconds, micros = node.time()
        node.zadd(f"redlock:readers:{name}", {"old-reader": seconds * 1000 + micros // 1000 + 30_000})
    writer = rl.rwlock(name, ttl=5.0).write()
    assert writer.acquire(blocking=False)  # beside the old reader: hence "stop them first"
    writer.release()
    assert all(node.zcard(f"redlock:readers:{name}") == 1 for node in raw)  # and left alone
