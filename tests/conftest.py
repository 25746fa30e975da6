"""Shared pytest fixtures."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import pytest
import redis
import redis.asyncio

import redlock
import redlock.asyncio
from redlock.servers import LocalMasters

T = TypeVar("T")


# --- small helpers shared by the test modules ------------------------------------------------


def unique(prefix: str = "lock") -> str:
    """A lock name no other test uses, so tests can share the session's masters."""
    return f"{prefix}:{uuid.uuid4().hex}"


def eventually(check: Callable[[], bool], within: float = 10.0) -> bool:
    """Whether ``check`` comes true within ``within`` seconds.

    An acquire returns once a majority granted: the other masters' SETs may land a moment
    later, so checks of every master wait for them (generously; nothing here measures speed).
    """
    give_up = time.monotonic() + within
    while not check():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True


# --- local Redis masters (redlock.servers) --------------------------------------------------


class MastersFactory(Protocol):
    def __call__(self, n: int = 5, **kwargs: Any) -> LocalMasters: ...


@pytest.fixture(scope="session")
def masters() -> Iterator[LocalMasters]:
    """Five masters started once per session, for tests that inject no faults.

    Shared: a test must not kill, pause or restart them, and should use keys of its own.
    """
    with LocalMasters(5) as started:
        yield started


@pytest.fixture
def fresh_masters() -> Iterator[MastersFactory]:
    """A factory, ``fresh_masters(n=5, **LocalMasters_kwargs)``, of started masters that
    are this test's own to kill, pause and restart; all are stopped at teardown."""
    made: list[LocalMasters] = []

    def factory(n: int = 5, **kwargs: Any) -> LocalMasters:
        cluster = LocalMasters(n, **kwargs)
        made.append(cluster)
        return cluster.start()

    yield factory
    for cluster in reversed(made):
        cluster.stop()


# --- clients of the public APIs ---------------------------------------------------------------


class ClientFactory(Protocol):
    """``client(masters, **Redlock_kwargs)``: a Redlock client, closed at teardown."""

    def __call__(self, masters: Sequence[Any], **kwargs: Any) -> Any: ...


@pytest.fixture(scope="session")
def event_loop_thread() -> Iterator[_LoopThread]:
    loop = _LoopThread()
    yield loop
    loop.close()


@pytest.fixture(params=["sync", "asyncio"])
def client(request: pytest.FixtureRequest, event_loop_thread: _LoopThread) -> Iterator[ClientFactory]:
    """A Redlock client factory, once per public API, with the same blocking surface."""
    made: list[Any] = []

    def factory(masters: Sequence[Any], **kwargs: Any) -> Any:
        # Tests judge behaviour, not speed: a default a little above the library's keeps a
        # busy 2-core machine's scheduling hiccups from looking like hung masters.
        kwargs.setdefault("node_timeout", 0.1)
        if request.param == "sync":
            made.append(redlock.Redlock(masters, **kwargs))
        else:
            made.append(BlockingRedlock(event_loop_thread, masters, **kwargs))
        return made[-1]

    yield factory
    for rl in made:
        rl.close()


class _LoopThread:
    """An event loop in a thread of its own, so blocking tests can drive asyncio clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class BlockingLock:
    """An asyncio Lock seen through the sync Lock's surface, for the shared behaviour tests."""

    def __init__(self, loop: _LoopThread, lock: redlock.asyncio.Lock) -> None:
        self._loop = loop
        self.inner = lock

    name = property(lambda self: self.inner.name)
    token = property(lambda self: self.inner.token)
    validity = property(lambda self: self.inner.validity)
    fencing_token = property(lambda self: self.inner.fencing_token)

    def locked(self) -> bool:
        return self.inner.locked()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return self._loop.run(self.inner.acquire(blocking, timeout))

    def release(self) -> None:
        self._loop.run(self.inner.release())

    def extend(self, ttl: float | None = None) -> float:
        return self._loop.run(self.inner.extend(ttl))

    def __enter__(self) -> BlockingLock:
        self._loop.run(self.inner.__aenter__())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._loop.run(self.inner.__aexit__(*exc_info))


class BlockingRedlock:
    def __init__(self, loop: _LoopThread, masters: Sequence[Any], **kwargs: Any) -> None:
        self._loop = loop

        async def make() -> redlock.asyncio.Redlock:
            # Given sync clients, hand the asyncio client the same addresses as asyncio clients.
            converted = [
                redis.asyncio.Redis(
                    host=m.connection_pool.connection_kwargs["host"], port=m.connection_pool.connection_kwargs["port"]
                )
                if isinstance(m, redis.Redis)
                else m
                for m in masters
            ]
            return redlock.asyncio.Redlock(converted, **kwargs)

        self.inner = loop.run(make())

    def lock(self, *args: Any, **kwargs: Any) -> BlockingLock:
        return BlockingLock(self._loop, self.inner.lock(*args, **kwargs))

    def close(self) -> None:
        self._loop.run(self.inner.aclose())


# --- masters by URL: local processes, or Docker containers with REDLOCK_TEST_DOCKER=1 --------
# (Used by the command-line and docs tests, which only need URLs; see tests/containers.py.)

from .containers import docker_requested, docker_unavailable, redis_containers  # noqa: E402  (appended section)


@pytest.fixture(scope="session")
def docker_masters() -> Iterator[list[str]]:
    """URLs of five masters in containers of the redis image; skips when Docker cannot be used."""
    reason = docker_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with redis_containers(5) as urls:
        yield urls


@pytest.fixture(scope="session")
def master_urls(request: pytest.FixtureRequest) -> list[str]:
    """URLs of five shared masters that inject no faults (use keys of your own).

    From containers when REDLOCK_TEST_DOCKER=1, else from the local ``masters``. A run that
    asked for containers and cannot have them fails rather than quietly testing locally.
    """
    if docker_requested():
        reason = docker_unavailable()
        if reason is not None:
            pytest.fail(f"REDLOCK_TEST_DOCKER=1 asks for masters in containers, but {reason}")
        urls: list[str] = request.getfixturevalue("docker_masters")
        return urls
    local: LocalMasters = request.getfixturevalue("masters")
    return local.urls
