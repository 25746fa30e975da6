"""One Lock object shared by the threads (sync) or the tasks (asyncio) of a process.

Each test runs once per public API. Its local users are written once, as coroutines that
call the lock through :func:`call` (which awaits what the asyncio Lock returns and passes
the sync Lock's results through); :func:`together` runs them as threads, each with a loop
of its own, on one sync Lock, or as tasks of one loop on one asyncio Lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import pytest
import redis

import redlock
import redlock.asyncio
from redlock import LockAlreadyHeld, LockNotHeld
from redlock.servers import LocalMasters

from .conftest import eventually, unique

T = TypeVar("T")
User = Callable[[Any], Awaitable[Any]]


@pytest.fixture(params=["sync", "asyncio"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def call(value: Any) -> Any:
    """What a Lock method returned: awaited if it is the asyncio Lock's coroutine."""
    return await value if inspect.isawaitable(value) else value


async def until(event: threading.Event) -> None:
    """Wait for another user's step, without blocking the other tasks of this loop."""
    while not event.is_set():
        await asyncio.sleep(0.01)


def together(api: str, masters: LocalMasters, users: Sequence[User], **lock_kwargs: Any) -> list[Any]:
    """Run ``users`` at once on ONE Lock object: as threads (sync) or as tasks (asyncio)."""
    name = unique()
    if api == "sync":
        with redlock.Redlock(masters.urls, node_timeout=0.1, retry_delay=0.02) as rl:
            lock = rl.lock(name, **lock_kwargs)
            with concurrent.futures.ThreadPoolExecutor(len(users)) as pool:
                futures = [pool.submit(asyncio.run, user(lock)) for user in users]
                return [future.result(timeout=120) for future in futures]

    async def main() -> list[Any]:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1, retry_delay=0.02) as rl:
            lock = rl.lock(name, **lock_kwargs)
            return list(await asyncio.wait_for(asyncio.gather(*(user(lock) for user in users)), 120))

    return asyncio.run(main())


def test_local_users_take_turns_on_one_lock_object(api: str, masters: LocalMasters) -> None:
    """16 threads (tasks) on one Lock: no RuntimeError, every acquire succeeds, and a
    deliberately non-atomic read-modify-write loses nothing."""
    rounds, users = 5, 16
    state = {"counter": 0, "inside": 0, "most_inside": 0}

    async def user(lock: Any) -> int:
        acquired = 0
        for _ in range(rounds):
            assert await call(lock.acquire(timeout=60))
            acquired += 1
            assert lock.hold_count == 1
            state["inside"] += 1
            state["most_inside"] = max(state["most_inside"], state["inside"])
            value = state["counter"]
            await asyncio.sleep(0.001)  # another user writing meanwhile would be lost
            state["counter"] = value + 1
            state["inside"] -= 1
            await call(lock.release())
        return acquired

    assert together(api, masters, [user] * users) == [rounds] * users
    assert state["counter"] == rounds * users
    assert state["most_inside"] == 1


def test_other_users_wait_for_the_holder_within_their_timeout(api: str, masters: LocalMasters) -> None:
    held, leave = threading.Event(), threading.Event()

    async def holder(lock: Any) -> str:
        assert await call(lock.acquire())
        held.set()
        await until(leave)
        token = lock.token
        await call(lock.release())
        return str(token)

    async def waiter(lock: Any) -> str:
        await until(held)
        started = time.monotonic()
        assert not await call(lock.acquire(blocking=False))
        assert not await call(lock.acquire(timeout=0.2))
        assert time.monotonic() - started < 10
        assert lock.hold_count == 1  # the holder's
        leave.set()
        assert await call(lock.acquire(timeout=30))
        token = lock.token
        await call(lock.release())
        return str(token)

    first, second = together(api, masters, [holder, waiter])
    assert first != second


def test_the_owner_acquiring_again_is_told_unless_reentrant(api: str, masters: LocalMasters) -> None:
    async def owner(lock: Any) -> None:
        assert await call(lock.acquire(blocking=False))
        with pytest.raises(LockAlreadyHeld, match="not reentrant"):
            await call(lock.acquire(blocking=False))
        with pytest.raises(RuntimeError):  # as threading.Lock users would catch it
            await call(lock.acquire(timeout=1))
        assert lock.hold_count == 1
        await call(lock.release())
        assert lock.hold_count == 0

    together(api, masters, [owner])


def test_a_reentrant_lock_counts_locally_and_releases_at_zero(
    api: str, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    async def owner(lock: Any) -> None:
        assert await call(lock.acquire())
        token = lock.token
        for depth in (2, 3):
            assert await call(lock.acquire(blocking=False))
            assert (lock.hold_count, lock.token) == (depth, token)
        for depth in (2, 1):
            await call(lock.release())
            assert (lock.hold_count, lock.token) == (depth, token)
            assert lock.locked()
            assert eventually(lambda: [node.get(lock.name) for node in raw] == [token.encode()] * len(raw))
        await call(lock.release())
        assert (lock.hold_count, lock.token) == (0, None)
        assert [node.get(lock.name) for node in raw] == [None] * len(raw)
        with pytest.raises(LockNotHeld):
            await call(lock.release())

    together(api, masters, [owner], reentrant=True)


def test_only_the_owner_releases_a_reentrant_lock(api: str, masters: LocalMasters) -> None:
    held, tried = threading.Event(), threading.Event()

    async def owner(lock: Any) -> None:
        assert await call(lock.acquire())
        held.set()
        await until(tried)
        assert lock.locked()
        await call(lock.release())

    async def other(lock: Any) -> None:
        await until(held)
        try:
            with pytest.raises(LockNotHeld, match="owner"):
                await call(lock.release())
            assert not await call(lock.acquire(blocking=False))  # waits, like everyone else
        finally:
            tried.set()

    together(api, masters, [owner, other], reentrant=True)


def test_anyone_releases_a_lock_that_is_not_reentrant(api: str, masters: LocalMasters) -> None:
    """As with threading.Lock; and the next user gets it."""
    held, released = threading.Event(), threading.Event()

    async def owner(lock: Any) -> None:
        assert await call(lock.acquire())
        held.set()
        await until(released)
        with pytest.raises(LockNotHeld):
            await call(lock.release())

    async def other(lock: Any) -> None:
        await until(held)
        await call(lock.release())
        assert await call(lock.acquire(blocking=False))
        await call(lock.release())
        released.set()

    together(api, masters, [owner, other])


# --- interrupted waits ---------------------------------------------------------------------------


def test_asyncio_a_cancelled_wait_leaves_nothing_held(masters: LocalMasters) -> None:
    async def scenario() -> None:
        async with redlock.asyncio.Redlock(masters.urls) as rl:
            lock = rl.lock(unique(), reentrant=True)
            assert await lock.acquire()
            waiting = asyncio.ensure_future(lock.acquire())
            await asyncio.sleep(0.1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert lock.hold_count == 1
            await lock.release()
            assert lock.hold_count == 0
            assert await asyncio.ensure_future(lock.acquire(blocking=False))  # another task gets it
            assert lock.hold_count == 1

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_asyncio_nested_async_with_blocks(masters: LocalMasters) -> None:
    async def scenario() -> None:
        async with redlock.asyncio.Redlock(masters.urls) as rl:
            lock = rl.lock(unique(), reentrant=True)
            async with lock:
                async with lock:
                    assert lock.hold_count == 2
                assert lock.hold_count == 1
                assert lock.locked()
            assert lock.hold_count == 0
            assert lock.token is None

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_ctrl_c_while_waiting_leaves_nothing_held(masters: LocalMasters) -> None:
    """Ctrl-C (KeyboardInterrupt) in a thread waiting for the object held by another."""
    with redlock.Redlock(masters.urls) as rl:
        lock = rl.lock(unique())
        held, leave = threading.Event(), threading.Event()

        def holder() -> None:
            with lock:
                held.set()
                leave.wait(30)

        thread = threading.Thread(target=holder)
        thread.start()
        assert held.wait(30)

        def interrupt(signum: int, frame: object) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(KeyboardInterrupt):
                lock.acquire(timeout=30)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert lock.hold_count == 1  # still the holder's
        leave.set()
        thread.join(30)
        assert lock.hold_count == 0
        assert lock.acquire(blocking=False)
        lock.release()
