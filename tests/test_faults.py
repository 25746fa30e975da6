"""The client against faults of the connection kind, on real masters, for both APIs.

Masters that stop answering while they owe replies, a client closed while it renews a lock
(masters that close idle connections: tests/test_resets.py): each test sets the fault up for
real and checks what is left on the masters afterwards.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest
import redis

from redlock import LockLost, QuorumUnavailable, Redlock, ReleaseUnconfirmed
from redlock._protocol import scripts as _scripts
from redlock._protocol.core import order_key

from .conftest import ClientFactory, MastersFactory, eventually, unique


def test_a_master_owing_many_replies_still_gets_the_rollbacks(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    """Attempts that fail while a hung master owes replies must not leave our key on it
    once it resumes: each SET sent to it is followed by its rollback, even past the limit
    of unanswered commands after which it is sent no new SETs."""
    masters = matrix_masters(3)
    a, b, c = (redis.Redis.from_url(url) for url in masters.urls)
    rl = client(masters.urls, wake_on_release=False)
    name = unique()
    a.set(name, "other", px=60_000)
    b.set(name, "other", px=60_000)
    lock = rl.lock(name, ttl=30.0)
    masters[2].pause()
    try:
        outcomes = collections.Counter(lock.acquire(blocking=False) for _ in range(12))
    finally:
        masters[2].resume()
    assert outcomes == {False: 12}  # held by "other" on a majority: a denial, not QuorumUnavailable
    # Once C answers, it has run what it was sent, in order: each SET, then its rollback.
    assert eventually(lambda: c.get(name) is None and c.ping())
    time.sleep(0.5)
    assert c.get(name) is None


def test_close_stops_auto_extension(client: ClientFactory, matrix_masters: MastersFactory) -> None:
    masters = matrix_masters(3)
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, wake_on_release=False)
    lost: list[object] = []
    lock = rl.lock(unique(), ttl=0.6, auto_extend=True, on_lost=lost.append)
    assert lock.acquire(blocking=False)
    rl.close()
    # Nobody renews it now: it expires on every master, and the holder sees its validity end.
    assert eventually(lambda: all(master.exists(lock.name) == 0 for master in raw), within=5)
    assert not lock.locked()
    assert lost == []  # not lost while held: the client was closed under it
    assert eventually(lambda: not any(t.name.startswith("redlock-renew") for t in threading.enumerate()))
    assert [len(master.client_list()) for master in raw] == [1, 1, 1]  # only our raw client


def test_extend_of_a_lost_lock_sends_nothing(client: ClientFactory, matrix_masters: MastersFactory) -> None:
    masters = matrix_masters(3)
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, wake_on_release=False)
    lock = rl.lock(unique(), ttl=0.5, auto_extend=True)
    assert lock.acquire(blocking=False)
    for master in raw:
        master.delete(lock.name)
    assert eventually(lambda: not lock.locked())
    before = [int(master.info("stats")["total_commands_processed"]) for master in raw]
    with pytest.raises(LockLost, match="lost while held"):
        lock.extend()
    after = [int(master.info("stats")["total_commands_processed"]) for master in raw]
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1]  # our INFO only
    with pytest.raises(LockLost):
        lock.release()


def test_a_decided_round_does_not_count_a_hung_master_as_unreachable(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    """Two of three deny; the third, hung, is not awaited: the answer is "held by others",
    never QuorumUnavailable (which would say the cluster is down)."""
    masters = matrix_masters(3)
    a, b = (redis.Redis.from_url(url) for url in masters.urls[:2])
    rl = client(masters.urls, wake_on_release=False)
    name = unique()
    a.set(name, "other", px=60_000)
    b.set(name, "other", px=60_000)
    masters[2].pause()
    try:
        results = []
        for _ in range(20):
            try:
                results.append(rl.lock(name, ttl=5.0).acquire(blocking=False))
            except QuorumUnavailable as error:  # pragma: no cover - the failure being tested for
                results.append(error)
    finally:
        masters[2].resume()
    assert results == [False] * 20


def test_close_during_an_acquire_still_rolls_it_back(client: ClientFactory, matrix_masters: MastersFactory) -> None:
    """close() from another thread while an acquire waits on a hung master: the attempt
    fails, and its rollback still runs, so our key is left on no master."""
    masters = matrix_masters(3)
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    name = unique()
    raw[0].set(name, "someone-else", px=30_000)  # denies, so the attempt fails
    rl = client(masters.urls, node_timeout=0.5, wake_on_release=False)
    lock = rl.lock(name, ttl=30.0)
    outcome: list[object] = []
    masters[1].pause()  # the SET round waits node_timeout for it
    try:
        acquiring = threading.Thread(target=lambda: outcome.append(lock.acquire(blocking=False)))
        acquiring.start()
        time.sleep(0.2)
        rl.close()
        acquiring.join(timeout=30)
    finally:
        masters[1].resume()
    assert outcome == [False]
    assert eventually(lambda: [master.get(name) for master in raw] == [b"someone-else", None, None])
    time.sleep(0.3)  # what master 1 was sent while hung has run by now
    assert [master.get(name) for master in raw] == [b"someone-else", None, None]


def test_a_late_extend_never_undoes_a_newer_one(matrix_masters: MastersFactory) -> None:
    """The EXTEND script itself: a master applies an extend only if it is newer than the
    last one of the same holding it applied, and release takes the order key away too."""
    (master,) = (redis.Redis.from_url(url) for url in matrix_masters(1).urls)
    name = unique()
    master.set(name, "me", px=5_000)

    def extend(ttl_ms: int, number: int) -> object:
        return master.eval(_scripts.EXTEND.source, 2, name, order_key(name), "me", ttl_ms, number)

    assert extend(20_000, 2) == 1
    assert extend(1_000, 1) == 1  # late: the key is ours, but its ttl stays
    assert master.pttl(name) > 15_000
    assert extend(1_000, 3) == 1  # newer: applied
    assert master.pttl(name) <= 1_000
    assert master.pttl(order_key(name)) <= 1_000  # lives exactly as long as the lock key
    assert master.eval(_scripts.EXTEND.source, 2, name, order_key(name), "other", 9_000, 9) == 0
    assert master.eval(_scripts.RELEASE.source, 2, name, order_key(name), "me") == 1
    assert master.exists(name, order_key(name)) == 0


def test_a_semaphore_release_too_few_confirmed_names_its_quorum(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    """A semaphore of limit 3 on 5 masters needs 4 of them, not a majority: with 2 masters
    killed, 3 confirm the release, which is too few, and the error says how many were needed."""
    masters = fresh_masters(5)
    rl = client(masters.urls, wake_on_release=False)
    semaphore = rl.semaphore(unique(), 3, ttl=30.0)
    assert semaphore.acquire(blocking=False)
    masters[0].kill()
    masters[1].kill()
    with pytest.raises(ReleaseUnconfirmed, match=r"not confirmed by 4 of 5 masters \(the semaphore's quorum\)"):
        semaphore.release()


def test_a_release_no_majority_answered_keeps_the_token_for_a_retry(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    """With a majority down, release can neither confirm nor refuse: our keys may still
    block everyone, so the token stays and a later release() takes them back."""
    masters = matrix_masters(3, persistence="aof-always")  # the restarted masters keep our key
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    # fsync stalls on a shared disk, not latency, are what a generous node_timeout covers.
    rl = client(masters.urls, node_timeout=2.0, wake_on_release=False)
    lock = rl.lock(unique(), ttl=60.0)
    assert lock.acquire(blocking=False)
    token = lock.token
    assert token is not None
    assert eventually(lambda: all(master.get(lock.name) == token.encode() for master in raw))
    masters[0].kill()
    masters[1].kill()
    with pytest.raises(ReleaseUnconfirmed, match="not confirmed by a majority") as lost:
        lock.release()
    # Decided as soon as two refusals made a majority impossible: the third may not be in.
    assert lost.value.granted in (0, 1)
    assert lock.token == token  # kept for the retry
    assert not lock.locked()  # a release was asked for: the holder may not rely on it now
    assert eventually(lambda: raw[2].get(lock.name) is None)  # deleted where it could be
    masters[0].restart()
    masters[1].restart()
    assert [master.get(lock.name) for master in raw[:2]] == [token.encode()] * 2
    lock.release()  # a majority (the two restarted masters) confirms
    assert lock.token is None
    assert [master.exists(lock.name) for master in raw] == [0, 0, 0]


def test_overlapping_rounds_each_wait_their_own_node_timeout_on_asyncio(matrix_masters: MastersFactory) -> None:
    """The asyncio driver times rounds out with one timer for all of them: a round that
    starts while an earlier one waits still gets its whole node_timeout (not the earlier
    round's deadline), and each ends once its own deadline has passed."""
    import asyncio  # noqa: PLC0415

    import redlock.asyncio  # noqa: PLC0415

    masters = matrix_masters(3)
    node_timeout = 0.3

    async def run() -> list[float]:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=node_timeout, wake_on_release=False) as rl:
            await rl.lock(unique(), ttl=5).acquire(blocking=False)  # connected before the masters hang

            async def attempt(delay: float) -> float:
                await asyncio.sleep(delay)
                started = time.monotonic()
                with pytest.raises(QuorumUnavailable):
                    await rl.lock(unique(), ttl=5).acquire(blocking=False)
                return time.monotonic() - started

            masters[1].pause()
            masters[2].pause()
            try:
                # (Bounded: a round that no timer wakes would hang here.)
                return await asyncio.wait_for(asyncio.gather(attempt(0.0), attempt(0.1), attempt(0.2)), 10)
            finally:
                masters[1].resume()
                masters[2].resume()

    for elapsed in asyncio.run(run()):
        # Two rounds, the SET and its rollback, each waiting for the hung masters its whole
        # node_timeout, never cut short by another round's deadline (the bound above is
        # generous: a loaded machine may run late, never early).
        assert 2 * node_timeout * 0.95 <= elapsed < 2 * node_timeout + 2.0


def test_a_thread_taking_over_from_a_leader_that_overran_polls_on_its_own(matrix_masters: MastersFactory) -> None:
    """The sync client's reading leader is taken over when it overruns its time (held off
    the CPU on a starved machine) while it may still be inside poll(): a poll object
    refuses a second caller (RuntimeError: concurrent poll() invocation, seen once in the
    self-test at nice 19), so each leader polls with its own thread's poller, the one it
    took over with and the ones after (the overrun leader's poll may last its whole wait)."""
    masters = matrix_masters(3)
    with Redlock(masters.urls, node_timeout=0.6, wake_on_release=False) as rl:
        assert rl.lock(unique(), ttl=5).acquire(blocking=False)  # connected first
        masters[1].pause()
        masters[2].pause()
        errors: list[BaseException] = []

        def attempt() -> None:
            try:
                rl.lock(unique(), ttl=5).acquire(blocking=False)
            except QuorumUnavailable:
                pass
            except BaseException as error:
                errors.append(error)

        try:
            first = threading.Thread(target=attempt)
            first.start()
            assert eventually(lambda: rl._driver._leader is not None)
            time.sleep(0.1)  # the first leader is in poll(), waiting for the hung masters
            rl._driver._leader_until = 0.0  # as if it had overrun its time
            second = threading.Thread(target=attempt)
            second.start()
            first.join(10)
            second.join(10)
        finally:
            masters[1].resume()
            masters[2].resume()
    assert not first.is_alive()
    assert not second.is_alive()
    assert errors == []
