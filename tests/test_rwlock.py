"""The read-write lock on real masters, through both APIs.

Its two sides are the lock's own flows with other scripts, so these tests look at what
differs: readers share and a writer is alone, each reader's lease expires on its own (by
the master's clock), a waiting writer keeps new readers out and gets in under a steady
stream of them, a release wakes the other side, and nothing is left on any master.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

import redlock
from redlock import LockLost, Redlock
from redlock._protocol.core import intent_key, order_key, readers_key, release_channel
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, unique


def readers_on(raw: list[redis.Redis], name: str) -> list[set[bytes]]:
    return [set(node.zrange(readers_key(name), 0, -1)) for node in raw]  # type: ignore[arg-type]


def nothing_left(raw: list[redis.Redis], name: str) -> bool:
    keys = [name, order_key(name), intent_key(name), readers_key(name), order_key(readers_key(name))]
    return all(node.exists(*keys) == 0 for node in raw)


def test_readers_share_and_exclude_the_writer(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("rw")
    rw = rl.rwlock(name, ttl=10.0)
    assert rw.quorum == 3
    readers = [rw.read() for _ in range(3)]
    assert [reader.acquire(blocking=False) for reader in readers] == [True, True, True]
    assert all(reader.mode == "read" and 9.0 < reader.validity <= 10.0 for reader in readers)
    tokens = {reader.token.encode() for reader in readers}
    assert eventually(lambda: readers_on(raw, name) == [tokens] * 5)
    writer = rw.write()
    assert writer.mode == "write"
    assert not writer.acquire(blocking=False)
    # A writer that gives up takes its intent back: readers are not kept out by it.
    assert eventually(lambda: all(node.exists(intent_key(name)) == 0 for node in raw))
    late = rw.read()
    assert late.acquire(blocking=False)
    for reader in [*readers, late]:
        reader.release()
    assert writer.acquire(blocking=False)
    assert not rw.read().acquire(blocking=False)
    assert not rw.write().acquire(blocking=False)
    writer.release()
    assert nothing_left(raw, name)


def test_a_writer_held_back_keeps_new_readers_out(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("rw")
    rw = rl.rwlock(name, ttl=10.0)
    reader = rw.read()
    assert reader.acquire(blocking=False)
    got: list[bool] = []
    waiting = threading.Thread(target=lambda: got.append(rw.write().acquire(timeout=20.0)))
    waiting.start()
    assert eventually(lambda: all(node.exists(intent_key(name)) == 1 for node in raw))
    assert not rw.read().acquire(blocking=False)  # the writer waits: no new reader
    assert reader.extend() > 9.0  # a reader already in may stay (and extend) meanwhile
    reader.release()
    waiting.join(30)
    assert got == [True]


def test_readers_leases_expire_one_by_one(client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]) -> None:
    rl = client(masters.urls)
    name = unique("rw")
    short, long = rl.rwlock(name, ttl=0.3).read(), rl.rwlock(name, ttl=30.0).read()
    assert short.acquire(blocking=False)
    assert long.acquire(blocking=False)
    time.sleep(0.5)  # the short reader crashed, say: its entry expires on each master
    assert not short.locked()
    assert long.locked()
    assert not rl.rwlock(name).write().acquire(blocking=False)  # the long one still reads
    with pytest.raises(LockLost):
        short.extend()  # an extend never revives an expired reader
    long.release()
    writer = rl.rwlock(name).write()
    assert writer.acquire(blocking=False)
    writer.release()
    with pytest.raises(LockLost):
        short.release()
    assert nothing_left(raw, name)


def test_release_wakes_the_other_side(client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]) -> None:
    # A retry delay of a minute: whoever gets in within the timeout was woken by the release.
    rl = client(masters.urls, retry_delay=60.0)
    name = unique("rw")
    rw = rl.rwlock(name, ttl=10.0, timeout=20.0)
    # Readers wait on their own channel, writers on the name's.
    for holder_side, waiter_side, channel in (
        ("write", "read", release_channel(readers_key(name))),
        ("read", "write", release_channel(name)),
    ):
        holder = getattr(rw, holder_side)()
        assert holder.acquire(blocking=False)
        waiter = getattr(rw, waiter_side)()
        got: list[bool] = []
        thread = threading.Thread(target=lambda w=waiter, into=got: into.append(w.acquire(timeout=20.0)))
        thread.start()
        # It tried once, was refused, and listens: only now is a release sure to reach it.
        assert eventually(lambda c=channel: all(node.pubsub_numsub(c)[0][1] > 0 for node in raw))
        holder.release()
        thread.join(30)
        assert got == [True]
        waiter.release()


def test_a_writer_gets_in_under_a_steady_stream_of_readers(client: ClientFactory, masters: LocalMasters) -> None:
    """Readers come every 50 ms and each reads 200 ms, so at any moment some reader holds
    the name: without the writer's intent, a writer would wait for as long as they come."""
    rl = client(masters.urls)
    rw = rl.rwlock(unique("rw"), ttl=5.0)
    stop = threading.Event()
    reads = [0]

    def one_reader() -> None:
        reader = rw.read()
        if reader.acquire(timeout=5.0):
            reads[0] += 1
            time.sleep(0.2)
            reader.release()

    def stream() -> None:
        threads = []
        while not stop.is_set():
            thread = threading.Thread(target=one_reader)
            thread.start()
            threads.append(thread)
            time.sleep(0.05)
        for thread in threads:
            thread.join(30)

    streamer = threading.Thread(target=stream)
    streamer.start()
    try:
        assert eventually(lambda: reads[0] >= 3)
        writer = rw.write()
        assert writer.acquire(timeout=20.0)
        writer.release()
        readers_before = reads[0]
        assert eventually(lambda: reads[0] > readers_before)  # and readers go on afterwards
    finally:
        stop.set()
        streamer.join(60)


@pytest.mark.parametrize("side", ["read", "write"])
def test_an_auto_extended_side_is_lost_when_its_entries_go(
    side: str, client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("rw")
    lost = threading.Event()
    holder = getattr(rl.rwlock(name, ttl=0.6, auto_extend=True, on_lost=lambda _: lost.set()), side)()
    assert holder.acquire(blocking=False)
    time.sleep(1.0)
    assert holder.locked()  # renewed past its ttl
    for node in raw[:3]:  # gone from a majority: expired there, or an operator's doing
        if side == "read":
            node.zrem(readers_key(name), holder.token)
        else:
            node.delete(name)
    assert lost.wait(5.0)
    assert holder.lost
    with pytest.raises(LockLost):
        holder.release()


def test_bad_arguments_are_refused_before_any_traffic(masters: LocalMasters) -> None:
    with Redlock(masters.urls) as rl:
        with pytest.raises(TypeError, match="name"):
            rl.rwlock(["a", "b"])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="name"):
            rl.rwlock(readers_key("x"))
        with pytest.raises(ValueError, match="ttl"):
            rl.rwlock("x", ttl=0)
        with pytest.raises(ValueError, match="auto_extend"):
            rl.rwlock("x", on_lost=print)
        with pytest.raises(ValueError, match="name"):
            rl.lock(intent_key("x"))
        rw = rl.rwlock("x", ttl=3.0)
        assert (rw.name, rw.ttl, repr(rw.read())) == ("x", 3.0, "<Lock 'x' (read) ttl=3.0 not held>")


def test_a_majority_is_enough_for_both_sides(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(5)
    cluster.masters[3].kill()
    cluster.masters[4].kill()
    with Redlock(cluster.urls, node_timeout=0.1) as rl:
        rw = rl.rwlock(unique("rw"), ttl=5.0)
        with rw.read(), rw.read():
            assert not rw.write().acquire(blocking=False)
        with rw.write() as writer:
            assert writer.locked()
            assert not rw.read().acquire(blocking=False)


def test_asyncio_async_with_and_cancel_on_lost(masters: LocalMasters) -> None:
    async def main() -> None:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            rw = rl.rwlock(unique("rw"), ttl=5.0, auto_extend=True, cancel_on_lost=True)
            async with rw.read() as first, rw.read() as second:
                assert first.locked()
                assert second.locked()
                assert first.token != second.token
                assert not await rw.write().acquire(blocking=False)
            async with rw.write() as writer:
                assert writer.mode == "write"
                assert not await rw.read().acquire(blocking=False)

    asyncio.run(main())


def test_only_the_last_readers_release_is_announced(masters: LocalMasters, raw: list[redis.Redis]) -> None:
    """A writer can get in only once no reader is left, so only then is it woken."""
    name = unique("rw")
    pubsub = raw[0].pubsub()
    pubsub.subscribe(release_channel(name), release_channel(readers_key(name)))
    assert eventually(lambda: pubsub.get_message(timeout=0.1) is None and len(pubsub.channels) == 2)
    with Redlock(masters.urls) as rl:
        rw = rl.rwlock(name, ttl=10.0)
        first, second = rw.read(), rw.read()
        assert first.acquire(blocking=False)
        assert second.acquire(blocking=False)
        last = second.token
        first.release()
        second.release()
        writer = rw.write()
        assert writer.acquire(blocking=False)
        written = writer.token
        writer.release()
    heard = []
    while (message := pubsub.get_message(timeout=1.0)) is not None:
        heard.append((message["channel"].decode(), message["data"].decode()))
    pubsub.close()
    assert heard == [
        (release_channel(name), last),  # the last reader: writers wake
        (release_channel(name), written),  # the writer: writers wake...
        (release_channel(readers_key(name)), written),  # ...and every reader
    ]


def test_the_lock_options_hold_for_both_sides(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique("rw")
    reader = rl.rwlock(name, ttl=10.0).read()
    assert reader.acquire(blocking=False)
    # Two attempts 10 ms apart, then it gives up (no timeout): and takes its intent back.
    writer = rl.rwlock(name, ttl=10.0, retry_delay=0.01, max_attempts=2).write()
    assert not writer.acquire()
    assert all(node.exists(intent_key(name)) == 0 for node in raw)
    reader.release()
    # A bounded hold: auto-extension stops at max_hold, and the writer is lost.
    lost = threading.Event()
    bounded = rl.rwlock(name, ttl=0.6, auto_extend=True, max_hold=1.2, on_lost=lambda _: lost.set()).write()
    assert bounded.acquire(blocking=False)
    assert lost.wait(5.0)
    assert rl.rwlock(name).read().acquire(timeout=5.0)  # its key expires with the hold


def test_bad_lock_options_are_refused_before_any_traffic(masters: LocalMasters) -> None:
    with Redlock(masters.urls) as rl:
        with pytest.raises(ValueError, match="max_hold"):
            rl.rwlock("x", max_hold=5.0)  # without auto_extend
        with pytest.raises(ValueError, match="max_attempts"):
            rl.rwlock("x", max_attempts=0)
        with pytest.raises(ValueError, match="retry_delay"):
            rl.rwlock("x", retry_delay=-1)
