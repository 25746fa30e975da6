"""The asyncio client: ``Redlock`` and ``Lock`` with the same names and meaning as the sync ones.

    >>> from redlock.asyncio import Redlock
    >>> rl = Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    >>> async with rl.lock("orders:42", ttl=10.0) as lock:  # doctest: +SKIP
    ...     await do_work(lock.validity)

It runs the same pure flows as the sync client (``redlock._core``) and shares its lock
semantics (``redlock._lock``); only the I/O differs. Each master's connection has one reader
task that reads replies as they come and records them in the round waiting for them, so a
round that settles early, or a task cancelled mid-round, never leaves a reply to be mistaken
for a newer one. Cleanup after cancellation (rollback of an acquire, a release) runs to
completion, shielded; the caller's cancellation is re-raised afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis.asyncio
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from redlock import _config
from redlock._core import MAX_UNANSWERED, Command, Flow, InFlight, Pause, Result, Round
from redlock._errors import error_reply, failure_status
from redlock._lock import (
    DEFAULT_CLOCK_DRIFT_FACTOR,
    DEFAULT_NODE_TIMEOUT,
    DEFAULT_RETRY_DELAY,
    DEFAULT_TTL,
    DEFAULT_UNAVAILABLE_TIMEOUT,
    ClusterConfig,
    LockState,
)
from redlock.exceptions import (
    AcquireTimeout,
    LockLost,
    LockNotAcquired,
    LockNotHeld,
    NodeOutcome,
    NodeStatus,
    QuorumUnavailable,
    RedlockError,
)

__all__ = [
    "AcquireTimeout",
    "Lock",
    "LockLost",
    "LockNotAcquired",
    "LockNotHeld",
    "NodeOutcome",
    "NodeStatus",
    "QuorumUnavailable",
    "Redlock",
    "RedlockError",
]

T = TypeVar("T")


async def _complete_despite_cancellation(work: Awaitable[T]) -> T:
    """Run ``work`` to the end even if the caller is cancelled meanwhile; then re-raise that."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
            continue
        if cancelled:
            raise asyncio.CancelledError
        return result


class _Link:
    """Our connection to one master, its reader task, and the commands in flight on it."""

    def __init__(self, node: int, address: _config.MasterAddress, node_timeout: float) -> None:
        kwargs: dict[str, Any] = _config.connection_kwargs(address, node_timeout)
        kwargs["retry"] = Retry(NoBackoff(), 0)
        connection_class: type[Any]
        if address.unix_socket:
            connection_class = UnixDomainSocketConnection
        elif address.tls:
            connection_class = SSLConnection
        else:
            connection_class = Connection
        self.node = node
        self.connection: Any = connection_class(**kwargs)
        self.in_flight = InFlight()
        self.current: Round | None = None
        self.wake: asyncio.Event | None = None
        self.reader: asyncio.Task[None] | None = None
        self.connecting: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self.reader is not None and not self.reader.done()

    def notify(self) -> None:
        if self.wake is not None:
            self.wake.set()

    def fail_current(self, error: BaseException) -> None:
        if self.current is not None and self.node in self.current.pending:
            self.current.record(self.node, *failure_status(error))
        self.notify()

    async def send(self, command: Command, round_: Round) -> None:
        try:
            await self.connection.send_packed_command(self.connection.pack_command(*command.args), check_health=False)
        except Exception as error:
            await self.reset()
            if self.node in round_.pending:
                round_.record(self.node, *failure_status(error))
            return
        self.in_flight.sent(command, round_, self.node)

    async def read_replies(self) -> None:
        """The only reader of this connection, for as long as it is open."""
        try:
            while True:
                reply: object
                try:
                    reply = await self.connection.read_response(timeout=math.inf)
                except ResponseError as error:
                    reply = error_reply(error)
                resend = self.in_flight.received(reply, self.current)
                if resend is not None and self.current is not None:
                    await self.send(resend, self.current)
                self.notify()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.fail_current(error)
            self.in_flight.clear()
            await self._disconnect()

    async def give_up_waiting(self) -> None:
        """See the sync driver: keep the connection, and its order, unless it owes too much."""
        if len(self.in_flight) >= MAX_UNANSWERED:
            await self.reset()

    async def reset(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        self.in_flight.clear()
        await self._disconnect()

    async def _disconnect(self) -> None:
        # The connection is being thrown away: an error closing it changes nothing.
        with contextlib.suppress(Exception):
            await self.connection.disconnect()


class _Driver:
    """Runs flows for one asyncio Redlock client; each running flow has a lane of links."""

    def __init__(
        self,
        masters: Sequence[_config.MasterAddress],
        node_timeout: float,
        clock: _config.Clock,
    ) -> None:
        self._masters = masters
        self._node_timeout = node_timeout
        self._clock = clock
        self._idle_lanes: list[list[_Link]] = []
        self._closed = False

    async def run(self, flow: Flow) -> Result:
        lane = self._checkout()
        try:
            request = next(flow)
            while True:
                if isinstance(request, Round):
                    await self._run_round(lane, request)
                else:
                    await self._pause(request)
                request = flow.send(self._clock())
        except StopIteration as stop:
            result: Result = stop.value
            return result
        finally:
            await self._checkin(lane)

    async def close(self) -> None:
        self._closed = True
        lanes, self._idle_lanes = self._idle_lanes, []
        for lane in lanes:
            for link in lane:
                await link.reset()

    def _checkout(self) -> list[_Link]:
        if self._closed:
            raise RuntimeError("this Redlock client is closed")
        if self._idle_lanes:
            return self._idle_lanes.pop()
        return [_Link(node, master, self._node_timeout) for node, master in enumerate(self._masters)]

    async def _checkin(self, lane: list[_Link]) -> None:
        for link in lane:
            link.current = None
            link.wake = None
        if self._closed:
            for link in lane:
                await link.reset()
        else:
            self._idle_lanes.append(lane)

    async def _pause(self, pause: Pause) -> None:
        await asyncio.sleep(pause.seconds)

    async def _run_round(self, lane: list[_Link], round_: Round) -> None:
        deadline = self._clock() + round_.timeout
        wake = asyncio.Event()
        for node in round_.targets:
            lane[node].current = round_
            lane[node].wake = wake
        await self._connect(lane, round_, deadline)
        for node in round_.pending:
            await lane[node].send(round_.command, round_)
        while not round_.settled:
            remaining = deadline - self._clock()
            if remaining <= 0:
                for node in round_.pending:
                    await lane[node].give_up_waiting()
                    round_.record(node, NodeStatus.TIMEOUT, f"no reply within node_timeout={round_.timeout}s")
                return
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), remaining)

    async def _connect(self, lane: list[_Link], round_: Round, deadline: float) -> None:
        """Connect the masters that need it, concurrently, by the round's deadline."""
        waiting: dict[asyncio.Task[None], _Link] = {}
        for node in round_.targets:
            link = lane[node]
            if link.connected:
                continue
            if link.connecting is None:
                link.in_flight.clear()
                link.connecting = asyncio.ensure_future(link.connection.connect())
            waiting[link.connecting] = link
        if not waiting:
            return
        await asyncio.wait(waiting, timeout=max(0.0, deadline - self._clock()))
        for task, link in waiting.items():
            if not task.done():
                round_.record(link.node, NodeStatus.TIMEOUT, f"no connection within node_timeout={round_.timeout}s")
                continue
            link.connecting = None
            error = task.exception()
            if error is not None:
                await link.reset()
                round_.record(link.node, *failure_status(error))
            else:
                link.reader = asyncio.ensure_future(link.read_replies())


class Redlock(ClusterConfig):
    """The asyncio Redlock client; see :class:`redlock.Redlock` for the arguments and defaults.

    ``masters`` are URLs or ``redis.asyncio.Redis`` clients. Use one client per event loop.
    """

    def __init__(
        self,
        masters: Sequence[str | redis.asyncio.Redis],
        *,
        node_timeout: float = DEFAULT_NODE_TIMEOUT,
        clock_drift_factor: float = DEFAULT_CLOCK_DRIFT_FACTOR,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        unavailable_timeout: float = DEFAULT_UNAVAILABLE_TIMEOUT,
        clock: _config.Clock = time.monotonic,
    ) -> None:
        super().__init__(
            masters,
            (redis.asyncio.Redis,),
            "redis.asyncio.Redis client",
            node_timeout=node_timeout,
            clock_drift_factor=clock_drift_factor,
            retry_delay=retry_delay,
            unavailable_timeout=unavailable_timeout,
            clock=clock,
        )
        self._driver = _Driver(self.masters, self.node_timeout, clock)

    def lock(self, name: str, ttl: float = DEFAULT_TTL, *, timeout: float | None = None) -> Lock:
        """A Lock on ``name`` with the given ttl (seconds); ``timeout`` bounds ``async with``'s wait."""
        if timeout is not None:
            _config.check_seconds("timeout", timeout, allow_zero=True)
        return Lock(self, self.lock_spec(name, ttl), timeout)

    async def aclose(self) -> None:
        """Close every connection; Locks of this client cannot be used afterwards."""
        await self._driver.close()

    async def __aenter__(self) -> Redlock:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<redlock.asyncio.Redlock {len(self.masters)} masters: {', '.join(self.master_names)}>"


class Lock(LockState[Redlock]):
    """The asyncio twin of :class:`redlock.Lock`: the same methods, awaited."""

    async def _run(self, flow: Flow) -> Result:
        return await self._cluster._driver.run(flow)

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """See :meth:`redlock.Lock.acquire`. If cancelled, rolls back before re-raising."""
        token, flow = self._acquire_flow(blocking, timeout)
        try:
            result = await self._run(flow)
        except asyncio.CancelledError:
            # The SETs may have landed: take ours back, whatever further cancellations come.
            await _complete_despite_cancellation(self._run(self._rollback_flow(token)))
            raise
        return self._acquired(token, result)

    async def release(self) -> None:
        """See :meth:`redlock.Lock.release`. A cancelled release still completes first."""
        token, flow = self._release_flow()
        result = await _complete_despite_cancellation(self._run(flow))
        self._released(token, result)

    async def extend(self, ttl: float | None = None) -> float:
        """See :meth:`redlock.Lock.extend`."""
        token, _, flow = self._extend_flow(ttl)
        return self._extended(token, await self._run(flow))

    async def __aenter__(self) -> Lock:
        if not await self.acquire(blocking=True, timeout=self._with_timeout):
            raise self._not_acquired_in_with()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            await self.release()
        except LockLost as lost:
            if exc is None:
                raise
            exc.add_note(f"redlock: {lost}")
