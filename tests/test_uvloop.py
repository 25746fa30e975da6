"""The asyncio client on uvloop, the event loop uvicorn (and so most FastAPI services) runs
on when it is installed: its transports are not subclasses of asyncio's, and its sockets
are pseudo-sockets, so nothing may assume asyncio's own classes."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

import redlock.asyncio
from redlock.servers import LocalMasters

from .conftest import raw_clients, unique

T = TypeVar("T")


def on_uvloop(work: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(work)


async def _cycle_and_handoff(urls: list[str]) -> tuple[bool, bool, float]:
    async with redlock.asyncio.Redlock(urls, retry_delay=5.0) as rl:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        name = unique()
        holder = rl.lock(name, ttl=10)
        assert await holder.acquire(blocking=False)
        waiter = rl.lock(name, ttl=10)
        # Blocking, with a retry delay far beyond the wait: only the release's message,
        # which arrives on the subscriber connection, can wake it in time.
        waiting = asyncio.ensure_future(waiter.acquire(timeout=3.0))
        await asyncio.sleep(0.3)
        await holder.release()
        got = await waiting
        extended = await waiter.extend() > 0
        started = asyncio.get_running_loop().time()
        await waiter.release()
        return got, extended, asyncio.get_running_loop().time() - started


def test_a_lock_cycle_and_a_handoff_woken_by_the_release(masters: LocalMasters) -> None:
    got, extended, _ = on_uvloop(_cycle_and_handoff(masters.urls))
    assert got
    assert extended


def test_unix_socket_masters(unix_masters: LocalMasters) -> None:
    got, extended, _ = on_uvloop(_cycle_and_handoff(unix_masters.urls))
    assert got
    assert extended


def test_tls_masters(tls_masters: LocalMasters) -> None:
    """uvloop's TLS transport, like asyncio's, reads into the connection's own buffer (the
    protocol is a BufferedProtocol), the handshake's replies of several kilobytes too."""
    got, extended, _ = on_uvloop(_cycle_and_handoff(tls_masters.urls))
    assert got
    assert extended


async def _through_a_reset(masters: LocalMasters) -> None:
    async with redlock.asyncio.Redlock(masters.urls) as rl:
        lock = rl.lock(unique(), ttl=10)
        assert await lock.acquire(blocking=False)
        # Every connection of ours closed between two operations, as a master's idle
        # timeout or an admin's CLIENT KILL would: the release goes on new connections.
        with raw_clients(masters.urls) as clients:
            for client in clients:
                client.client_kill_filter(_type="normal", skipme=True)
        await asyncio.sleep(0.2)
        await lock.release()
        assert not lock.lost


def test_connections_killed_between_operations(masters: LocalMasters) -> None:
    on_uvloop(_through_a_reset(masters))


def test_a_burst_of_concurrent_operations(masters: LocalMasters) -> None:
    async def burst() -> int:
        async with redlock.asyncio.Redlock(masters.urls) as rl:

            async def one(index: int) -> bool:
                lock = rl.lock(unique(f"burst{index}"), ttl=10)
                if not await lock.acquire(blocking=False):
                    return False
                await lock.release()
                return True

            return sum(await asyncio.gather(*(one(index) for index in range(200))))

    assert on_uvloop(burst()) == 200
