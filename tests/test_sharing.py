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
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
import redis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import redlock
import redlock.asyncio
from redlock import LockAlreadyHeld, LockNotHeld
from redlock._api.state import LockOptions, LockState
from redlock._api.turns import Turn
from redlock._protocol.core import Result
from redlock._protocol.flows import LockSpec
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


# --- the local sharing rules, as a state machine (no servers) ------------------------------------


class _Local(LockState[Any]):
    """A LockState whose network rounds the model decides; its gate has nobody to wake."""

    def _wake_local(self) -> None:
        pass


USERS = ("u0", "u1", "u2")


class LocalSharing(RuleBasedStateMachine):
    """Users acquire and release one object; the object's owner and count follow the rules
    of threading.Lock (not reentrant) or threading.RLock (reentrant)."""

    @initialize(reentrant=st.booleans())
    def build(self, reentrant: bool) -> None:
        # (The client's line of waiters, which a release moves on, is tests/test_waiting_line.py's.)
        driver = SimpleNamespace(
            released_here=lambda key, token, to_all=False: None,
            claim_handoff=lambda key, expires_at: (None, False),  # (nobody waits: tests/test_handoff.py)
            handed_over=lambda handoff: None,
        )
        cluster = SimpleNamespace(_clock=lambda: 0.0, _rng=None, _telemetry=None, _driver=driver)
        spec = LockSpec("k", 10.0, ("a", "b", "c"), 0.05, 0.01, 0.2, 10.0)
        self.lock = _Local(cluster, spec, LockOptions(reentrant=reentrant))
        self.reentrant = reentrant
        self.owner: str | None = None
        self.holds = 0

    @rule(user=st.sampled_from(USERS), blocking=st.booleans(), granted=st.booleans())
    def acquire(self, user: str, blocking: bool, granted: bool) -> None:
        turns = self.lock._turns.turn(user, blocking, None, self.lock.locked)
        try:
            next(turns)
        except StopIteration as stop:
            turn = stop.value
        except LockAlreadyHeld:
            assert (self.owner, self.reentrant) == (user, False)
            return
        else:
            # It would wait for another user's release: give up, as a timeout would.
            assert blocking
            assert self.owner not in (None, user)
            self.lock._turns.end(user)
            return
        if turn is Turn.NESTED:
            assert (self.owner, self.reentrant) == (user, True)
            self.holds += 1
        elif turn is Turn.REFUSED:
            assert not blocking
            assert self.owner not in (None, user)
        else:
            assert self.owner is None
            if granted:
                assert self.lock._commit_acquire(Result(True, (), 3, deadline=100.0, token=f"{user}-token"))
                self.owner, self.holds = user, 1
            self.lock._turns.end(user)

    @rule(user=st.sampled_from(USERS))
    def release(self, user: str) -> None:
        refused = self.owner is None or (self.reentrant and self.owner != user)
        try:
            if not self.lock._turns.counted_down(user):
                lease, flow = self.lock._release_flow()
                flow.close()
                self.lock._released(lease, Result(True, (), 3))
                self.lock._turns.leave()
        except LockNotHeld:
            assert refused
            return
        assert not refused
        self.holds -= 1
        if not self.holds:
            self.owner = None

    @invariant()
    def the_object_agrees_with_the_model(self) -> None:
        if hasattr(self, "lock"):
            assert (self.lock._turns.owner, self.lock.hold_count, self.lock._turns.busy) == (
                self.owner,
                self.holds,
                self.owner is not None,
            )
            assert (self.lock.token is not None) == (self.owner is not None)


TestLocalSharing = LocalSharing.TestCase
TestLocalSharing.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
