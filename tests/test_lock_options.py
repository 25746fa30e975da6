"""Bounded holds, adoption by token, check() and wait_lost(), extend(add=...), per-lock retry
settings and the @rl.locked decorator, on real masters, in both APIs.

The shared tests run against both APIs through the ``client`` fixture; the decorator and what
only asyncio has (cancel_on_lost, awaitable wait_lost) are tested on event loops of their own.
Times are bounded generously and only ever as safety (never lost before the bound), not speed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

import redlock.asyncio
from redlock import (
    AcquireTimeout,
    ExtendUnconfirmed,
    LockAlreadyHeld,
    LockLost,
    LockNotAcquired,
    LockNotHeld,
    QuorumUnavailable,
    Redlock,
)
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, unique
from .test_telemetry import Telemetry

# --- a bounded hold (max_hold) ------------------------------------------------------------------


def test_a_bounded_hold_is_extended_then_lost_at_the_bound(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    lost: list[object] = []
    lock = rl.lock(unique(), ttl=0.6, auto_extend=True, max_hold=1.5, on_lost=lost.append)
    started = time.monotonic()
    assert lock.acquire(blocking=False)
    assert eventually(lambda: bool(lost), within=20)
    assert time.monotonic() - started >= 1.5 * 0.98 - 0.01  # never lost before the bound (less its drift)
    assert lock.lost
    assert not lock.locked()
    with pytest.raises(LockLost, match="max_hold"):
        lock.check()
    # The last extend set a shorter ttl: the keys end with the hold, and another gets the lock.
    other = rl.lock(lock.name, ttl=1.0)
    assert eventually(lambda: other.acquire(blocking=False), within=10)
    other.release()
    with pytest.raises(LockLost, match="max_hold"):
        lock.release()
    assert len(lost) == 1


def test_the_end_of_a_bounded_hold_is_counted_as_its_own_cause(client: ClientFactory, masters: LocalMasters) -> None:
    otel = Telemetry()
    try:
        rl = client(masters.urls, **otel.providers)
        lock = rl.lock(unique(), ttl=0.5, auto_extend=True, max_hold=0.8)
        assert lock.acquire(blocking=False)
        assert lock.wait_lost(timeout=30)
        assert eventually(lambda: otel.count("redlock.lock.lost", redlock__lost__cause="max_hold") == 1)
        assert otel.count("redlock.lock.lost", redlock__lost__cause="extend_failed") == 0
    finally:
        otel.shutdown()


def test_a_bounded_hold_in_a_with_block_raises_lock_lost(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    with pytest.raises(LockLost), rl.lock(unique(), ttl=0.5, auto_extend=True, max_hold=0.8) as lock:
        assert lock.wait_lost(timeout=30)


def test_an_explicit_extend_stays_within_the_bound(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=1.0, auto_extend=True, max_hold=2.0)
    assert lock.acquire(blocking=False)
    try:
        assert lock.extend(ttl=30) <= 2.0  # capped: the hold began less than a moment ago
    finally:
        lock.release()


def test_a_semaphore_permit_is_bounded_too(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    sem = rl.semaphore(unique(), limit=2, ttl=0.5, auto_extend=True, max_hold=0.9)
    assert sem.acquire(blocking=False)
    assert sem.wait_lost(timeout=30)
    assert sem.lost


def test_asyncio_cancels_the_body_at_the_bound(masters: LocalMasters) -> None:
    async def main() -> None:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            started = time.monotonic()
            with pytest.raises(LockLost, match="max_hold"):
                async with rl.lock(unique(), ttl=0.5, auto_extend=True, max_hold=1.0, cancel_on_lost=True):
                    await asyncio.sleep(60)
            assert time.monotonic() - started < 30

    asyncio.run(main())


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_hold": 5.0}, ValueError, "auto_extend=True"),
        ({"max_hold": 0.5, "auto_extend": True}, ValueError, "at least the ttl"),
        ({"max_hold": -1, "auto_extend": True}, ValueError, "max_hold"),
        ({"max_hold": "5", "auto_extend": True}, TypeError, "max_hold"),
        ({"retry_delay": 0}, ValueError, "retry_delay"),
        ({"max_attempts": 0}, ValueError, "max_attempts"),
        ({"max_attempts": 2.0}, TypeError, "max_attempts"),
        ({"max_attempts": True}, TypeError, "max_attempts"),
    ],
)
def test_bad_options_are_refused_before_any_traffic(
    client: ClientFactory, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    rl = client(["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"])
    with pytest.raises(error, match=match):
        rl.lock("x", ttl=1.0, **options)


# --- adoption by token -------------------------------------------------------------------------


def test_a_lock_handed_over_by_token_is_held_like_one_acquired(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique()
    giver = rl.lock(name, ttl=0.8)
    assert giver.acquire(blocking=False)
    for _ in range(3):  # the masters remember these extends' numbers, and their longer ttl
        giver.extend(ttl=30.0)
    token = giver.token
    assert token is not None

    taker = rl.lock(name, ttl=0.8, auto_extend=True)
    validity = taker.adopt(token)
    assert 0 < validity <= 0.8
    # The adoption reset the ttl for real: not taken for a late extend of the giver's.
    assert sum(0 < node.pttl(name) <= 800 for node in raw) > len(raw) // 2
    assert taker.token == token
    assert taker.locked()
    time.sleep(1.6)  # two ttls: only the taker's auto-extension keeps it
    assert taker.locked()
    assert not rl.lock(name, ttl=1.0).acquire(blocking=False)
    # Its own extends reset the ttl for real (not taken for the giver's late ones).
    assert taker.extend(ttl=0.5) <= 0.5
    assert sum(0 < node.pttl(name) <= 1000 for node in raw) > len(raw) // 2
    taker.release()
    assert rl.lock(name, ttl=1.0).acquire(blocking=False)


def test_an_auto_extended_lock_is_handed_over_without_a_release(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    giver = rl.lock(unique(), ttl=0.6, auto_extend=True)
    assert giver.acquire(blocking=False)
    token = giver.hand_over()
    assert not [thread for thread in threading.enumerate() if thread.name == f"redlock-renew:{giver.name}"]
    assert not giver.locked()
    assert not giver.lost
    assert giver.token is None
    with pytest.raises(LockNotHeld):
        giver.release()
    assert sum(node.get(giver.name) == token.encode() for node in raw) > len(raw) // 2  # still held
    taker = rl.lock(giver.name, ttl=0.6, auto_extend=True)
    assert taker.adopt(token) > 0
    time.sleep(1.2)  # the giver's renewer no longer extends: only the taker's does
    assert taker.locked()
    taker.release()
    assert giver.acquire(blocking=False)  # the giver object may take the lock anew
    giver.release()
    with pytest.raises(LockNotHeld):
        giver.hand_over()


def test_a_lost_lock_cannot_be_handed_over(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=0.3)
    assert lock.acquire(blocking=False)
    assert lock.wait_lost(timeout=30)
    with pytest.raises(LockLost):
        lock.hand_over()


def test_adopting_a_token_that_does_not_hold_raises_lock_lost(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique()
    holder = rl.lock(name, ttl=5.0)
    assert holder.acquire(blocking=False)
    taker = rl.lock(name, ttl=5.0)
    with pytest.raises(LockLost):
        taker.adopt("f" * 40)
    assert not taker.locked()
    assert taker.token is None
    with pytest.raises(LockNotHeld):
        taker.release()
    assert holder.locked()
    holder.release()
    with pytest.raises(LockLost):  # released: nothing left to adopt, and nothing re-created
        rl.lock(name, ttl=5.0).adopt(str(holder.token or "gone"))


def test_adopt_needs_an_object_that_holds_nothing(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=5.0)
    assert lock.acquire(blocking=False)
    with pytest.raises(LockAlreadyHeld):
        lock.adopt(str(lock.token))
    lock.release()
    with pytest.raises(ValueError, match="token"):
        lock.adopt("")
    with pytest.raises(TypeError, match="token"):
        lock.adopt(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fencing"):
        lock.adopt("a" * 40, fencing_token=3)


def test_adopt_without_a_majority_is_retryable(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    rl = client(cluster.urls)
    name = unique()
    lock = rl.lock(name, ttl=30.0)
    assert lock.acquire(blocking=False)
    cluster[0].kill()
    cluster[1].kill()
    with pytest.raises(ExtendUnconfirmed):
        rl.lock(name, ttl=30.0).adopt(str(lock.token))


def test_fenced_multi_name_and_semaphore_holdings_can_be_adopted(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    fenced = rl.lock(unique(), ttl=5.0, fencing=True)
    assert fenced.acquire(blocking=False)
    taker = rl.lock(fenced.name, ttl=5.0, fencing=True)
    assert taker.adopt(str(fenced.token), fencing_token=fenced.fencing_token) > 0
    assert taker.fencing_token == fenced.fencing_token
    taker.release()

    names = [unique(), unique()]
    both = rl.lock(names, ttl=5.0)
    assert both.acquire(blocking=False)
    taker = rl.lock(names, ttl=5.0)
    assert taker.adopt(str(both.token)) > 0
    taker.release()
    assert rl.lock(names[1], ttl=1.0).acquire(blocking=False)

    sem = rl.semaphore(unique(), limit=2, ttl=5.0)
    assert sem.acquire(blocking=False)
    taker = rl.semaphore(sem.name, limit=2, ttl=5.0)
    assert taker.adopt(str(sem.permit)) > 0
    assert taker.permit == sem.permit
    taker.release()


# --- check() and wait_lost() --------------------------------------------------------------------


def test_check_and_wait_lost_see_a_loss_at_once(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique()
    lock = rl.lock(name, ttl=1.0, auto_extend=True)
    with pytest.raises(LockNotHeld):
        lock.check()
    with pytest.raises(LockNotHeld):
        lock.wait_lost(timeout=0)
    assert lock.acquire(blocking=False)
    assert 0 < lock.check() <= 1.0
    assert not lock.wait_lost(timeout=0.2)  # healthy: the timeout runs out
    assert eventually(lambda: None not in [node.get(name) for node in raw])
    for node in raw:  # gone everywhere: the next extension finds out
        node.delete(name)
    assert lock.wait_lost(timeout=30)
    assert lock.wait_lost(timeout=0)  # lost already: at once
    with pytest.raises(LockLost):
        lock.check()
    with pytest.raises(LockLost):
        lock.release()


def test_wait_lost_without_auto_extension_returns_at_the_deadline(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=0.4)
    assert lock.acquire(blocking=False)
    assert lock.wait_lost()  # nobody extends it: lost when its validity runs out
    assert lock.lost


def test_a_release_ends_the_wait_with_false(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=2.0, auto_extend=True)
    assert lock.acquire(blocking=False)
    answers: list[bool] = []
    watchdog = threading.Thread(target=lambda: answers.append(lock.wait_lost()))
    watchdog.start()
    time.sleep(0.2)
    lock.release()
    watchdog.join(30)
    assert answers == [False]


# --- extend(add=...) ---------------------------------------------------------------------------


def test_extend_add_moves_the_deadline_later(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=2.0)
    assert lock.acquire(blocking=False)
    validity = lock.extend(add=5.0)
    assert 5.0 < validity <= 7.0
    assert sum(node.pttl(lock.name) > 5000 for node in raw) > len(raw) // 2  # a majority at least
    assert lock.extend() <= 2.0  # no argument: reset to the lock's ttl, as before
    with pytest.raises(ValueError, match="not both"):
        lock.extend(ttl=1.0, add=1.0)
    with pytest.raises(ValueError, match="add"):
        lock.extend(add=0)
    lock.release()


# --- per-lock retry settings -------------------------------------------------------------------


def test_max_attempts_bounds_a_blocking_acquire(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    rl = client(cluster.urls, wake_on_release=False)
    name = unique()
    holder = rl.lock(name, ttl=60.0)
    assert holder.acquire(blocking=False)
    with redis.Redis.from_url(cluster[0].url) as master:
        before = master.info("commandstats").get("cmdstat_set", {}).get("calls", 0)
        lock = rl.lock(name, ttl=5.0, max_attempts=3, retry_delay=0.01)
        assert not lock.acquire()  # no timeout, yet it returns
        after = master.info("commandstats")["cmdstat_set"]["calls"]
    assert after - before == 3
    with pytest.raises(LockNotAcquired, match="3 attempt"), lock:
        pass
    with pytest.raises(AcquireTimeout), rl.lock(name, ttl=5.0, max_attempts=1000, retry_delay=0.01, timeout=0.1):
        pass
    impatient = rl.lock(name, ttl=5.0, max_attempts=2, retry_delay=0.01, timeout=60)
    with pytest.raises(LockNotAcquired, match="2 attempt") as refused, impatient:  # the attempts ran out first
        pass
    assert not isinstance(refused.value, AcquireTimeout)
    assert len(refused.value.outcomes) == 3  # each master's answer to the last attempt


def test_max_attempts_with_the_quorum_down_raises_quorum_unavailable(client: ClientFactory) -> None:
    rl = client(["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"])
    with pytest.raises(QuorumUnavailable, match="2 attempt"):
        rl.lock(unique(), ttl=1.0, max_attempts=2, retry_delay=0.01).acquire()


# --- the decorator -------------------------------------------------------------------------------


def test_a_decorated_function_runs_holding_its_lock(masters: LocalMasters) -> None:
    with Redlock(masters.urls, node_timeout=0.1) as rl:
        prefix = unique()
        seen: list[tuple[str, bool]] = []

        @rl.locked(prefix + ":{user_id}:{kind}", ttl=5.0)
        def report(user_id: int, kind: str = "daily") -> str:
            name = f"{prefix}:{user_id}:{kind}"
            seen.append((name, not rl.lock(name, ttl=1.0).acquire(blocking=False)))
            return "done"

        assert report(7) == "done"
        assert report(user_id=8, kind="weekly") == "done"
        assert seen == [(f"{prefix}:7:daily", True), (f"{prefix}:8:weekly", True)]
        assert report.__name__ == "report"
        assert rl.lock(f"{prefix}:7:daily", ttl=1.0).acquire(blocking=False)  # released after


@pytest.mark.parametrize("on_busy", ["wait", "raise", "skip"])
def test_what_a_refused_call_does(masters: LocalMasters, on_busy: str) -> None:
    with Redlock(masters.urls, node_timeout=0.1) as rl:
        name = unique()
        calls: list[int] = []
        options: dict[str, Any] = {"on_busy": on_busy, "ttl": 5.0}
        if on_busy == "wait":
            options["timeout"] = 0.3
        if on_busy == "skip":
            options["default"] = "skipped"

        @rl.locked(name, **options)
        def job(n: int) -> str:
            calls.append(n)
            return "ran"

        with rl.lock(name, ttl=30.0):
            if on_busy == "skip":
                assert job(1) == "skipped"
            else:
                with pytest.raises(AcquireTimeout if on_busy == "wait" else LockNotAcquired, match=name):
                    job(1)
        assert calls == []
        assert job(2) == "ran"
        assert calls == [2]


def test_a_nested_call_on_the_same_name_raises_or_nests(masters: LocalMasters) -> None:
    with Redlock(masters.urls, node_timeout=0.1) as rl:
        name = unique()

        @rl.locked(name, ttl=5.0)
        def plain(n: int) -> int:
            return n if n == 0 else plain(n - 1) + 1

        with pytest.raises(LockAlreadyHeld, match="wait for itself"):
            plain(1)
        assert plain(0) == 0  # (released after the refused nested call)

        @rl.locked(name, ttl=5.0, reentrant=True)
        def nested(n: int) -> int:
            return n if n == 0 else nested(n - 1) + 1

        assert nested(3) == 3

        # Another thread is not nested: it waits for the holder as any other caller.
        results: list[str] = []

        @rl.locked(name + ":t", ttl=5.0, on_busy="skip", default="skipped")
        def outer() -> str:
            worker = threading.Thread(target=lambda: results.append(str(outer())))
            worker.start()
            worker.join(30)
            return "ran"

        assert outer() == "ran"
        assert results == ["skipped"]


def test_the_decorator_checks_its_arguments_when_decorating(masters: LocalMasters) -> None:
    with Redlock(masters.urls) as rl:

        def job(user_id: int) -> None: ...

        async def job_async(user_id: int) -> None: ...

        with pytest.raises(ValueError, match="not a parameter"):
            rl.locked("x:{user}")(job)
        with pytest.raises(ValueError, match="ttl"):
            rl.locked("x", ttl=0)
        with pytest.raises(TypeError, match="frobnicate"):
            rl.locked("x", frobnicate=True)
        with pytest.raises(ValueError, match="on_busy"):
            rl.locked("x", on_busy="later")
        with pytest.raises(ValueError, match="default"):
            rl.locked("x", default=1)
        with pytest.raises(ValueError, match="timeout"):
            rl.locked("x", on_busy="skip", timeout=1.0)
        with pytest.raises(TypeError, match="async"):
            rl.locked("x")(job_async)
        with pytest.raises(TypeError, match="name"):
            rl.locked(7)  # type: ignore[arg-type]


def test_asyncio_decorator(masters: LocalMasters) -> None:
    async def main() -> None:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            name = unique()

            @rl.locked(name + ":{n}", ttl=5.0, on_busy="skip", default=-1)
            async def job(n: int) -> int:
                await asyncio.sleep(0.2)
                return n

            # Two calls on one name at once: one runs, the other is skipped.
            assert sorted(await asyncio.gather(job(1), job(1))) == [-1, 1]
            assert await job(2) == 2

            @rl.locked(name, ttl=0.5, auto_extend=True, max_hold=0.8, cancel_on_lost=True)
            async def too_long() -> None:
                await asyncio.sleep(60)

            with pytest.raises(LockLost):
                await too_long()

            def plain() -> None: ...

            with pytest.raises(TypeError, match="async"):
                rl.locked(name)(plain)

    asyncio.run(main())


def test_asyncio_wait_lost_is_awaitable_from_a_watchdog_task(masters: LocalMasters, raw: list[redis.Redis]) -> None:
    async def main() -> None:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            lock = rl.lock(unique(), ttl=0.6, auto_extend=True)
            assert await lock.acquire(blocking=False)
            watchdog = asyncio.ensure_future(lock.wait_lost())
            await asyncio.sleep(0.3)
            assert not watchdog.done()
            for node in raw:
                node.delete(lock.name)
            assert await asyncio.wait_for(watchdog, 30)
            with pytest.raises(LockLost):
                lock.check()

    asyncio.run(main())
