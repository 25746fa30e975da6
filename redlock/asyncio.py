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
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis.asyncio
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from redlock import _config
from redlock._core import (
    Command,
    Flow,
    InFlight,
    Lease,
    LockSpec,
    Pause,
    Result,
    Round,
    Waiters,
    release_channel,
    script_preloads,
    subscription_changes,
    too_far_behind,
)
from redlock._errors import error_reply, failure_status
from redlock._lock import (
    DEFAULT_TTL,
    ClientClosed,
    ClusterConfig,
    LockOptions,
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

#: Bytes queued on a connection beyond which a write waits for the socket to drain.
WRITE_BUFFER_LIMIT = 64 * 1024


async def _complete_despite_cancellation(work: Awaitable[T]) -> T:
    """Run ``work`` to the end even if the caller is cancelled meanwhile; then re-raise that."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                cancelled = True
                continue
            raise
        except BaseException as error:
            if cancelled:  # the caller's cancellation outranks the work's own failure
                raise asyncio.CancelledError from error
            raise
        if cancelled:
            raise asyncio.CancelledError
        return result


def _connection(address: _config.MasterAddress, node_timeout: float) -> Any:
    """A redis-py asyncio connection to one master, configured by us (see the sync twin)."""
    kinds = _config.ConnectionKinds(Connection, SSLConnection, UnixDomainSocketConnection, Retry(NoBackoff(), 0))
    return _config.make_connection(address, node_timeout, kinds)


class _Link:
    """Our connection to one master, its reader task, and the commands in flight on it."""

    def __init__(self, node: int, address: _config.MasterAddress, node_timeout: float) -> None:
        self.node = node
        self.connection = _connection(address, node_timeout)
        self.in_flight = InFlight()
        self.current: Round | None = None
        #: Resolved when the current round settles; the round task sleeps on it.
        self.wake: asyncio.Future[None] | None = None
        self.reader: asyncio.Task[None] | None = None
        self.connecting: asyncio.Task[None] | None = None
        #: See the sync driver: commands waiting, in order, for the connect to finish.
        self.backlog: list[tuple[Command, Round]] = []

    @property
    def connected(self) -> bool:
        return self.reader is not None and not self.reader.done()

    def notify(self) -> None:
        # Wake the round only once it is decided: each needless wake-up is a loop iteration.
        if self.wake is not None and not self.wake.done() and self.current is not None and self.current.settled:
            self.wake.set_result(None)

    def fail_current(self, error: BaseException) -> None:
        if self.current is not None and self.node in self.current.pending:
            self.current.record(self.node, *failure_status(error))
        self.notify()

    async def send(self, command: Command, round_: Round | None) -> None:
        """Write ``command`` for ``round_`` (None: housekeeping, whose reply nobody awaits)."""
        # Registered first: the reader may see the reply before the write's await returns.
        self.in_flight.sent(command, round_, self.node)
        packed = (
            self.connection.pack_command(*command.args)
            if round_ is None
            else round_.pack(command, self.connection.pack_command)
        )
        try:
            # Straight to the stream: redis-py's send_packed_command wraps each write in
            # wait_for (a task and several loop iterations per command), which alone made a
            # round cost twice the floor. Our writes are small; drain only under backpressure.
            writer = self.connection._writer
            if writer is None:
                raise ConnectionError("not connected")
            writer.writelines(packed)
            if writer.transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
                await asyncio.wait_for(writer.drain(), self.connection.socket_timeout)
        except Exception as error:
            await self.reset()
            self.fail_current(error)

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
                if resend is not None:
                    await self.send(*resend)
                self.notify()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.fail_current(error)
            self.in_flight.clear()
            await self._disconnect()

    def owes_too_much(self, round_: Round) -> bool:
        """See the sync driver: a master this far behind looks hung and is not sent more."""
        return too_far_behind(len(self.in_flight) + len(self.backlog), round_)

    async def send_or_queue(self, round_: Round) -> asyncio.Task[None] | None:
        """Send the round's command, or queue it behind a connect; the connect's task if new."""
        if self.owes_too_much(round_):
            round_.record(self.node, NodeStatus.TIMEOUT, f"hung: {len(self.in_flight)} earlier replies unanswered")
            return None
        if self.connected:
            await self.send(round_.command, round_)
            return None
        self.backlog.append((round_.command, round_))
        if self.connecting is not None:
            return None
        self.in_flight.clear()
        self.connecting = asyncio.ensure_future(self.connection.connect())
        return asyncio.ensure_future(self._finish_connect(self.connecting))

    async def _finish_connect(self, connecting: asyncio.Task[None]) -> None:
        """Runs beside the rounds, which go on without this master until it is connected."""
        try:
            await connecting
        except asyncio.CancelledError:
            if not connecting.done():
                raise
        except Exception:
            pass  # reported below, from the task itself
        self.connecting = None
        error = connecting.exception() if not connecting.cancelled() else asyncio.CancelledError()
        if error is not None:
            await self.reset()
            self.fail_current(error)
            return
        self.reader = asyncio.ensure_future(self.read_replies())
        backlog, self.backlog = self.backlog, []
        for preload in script_preloads():
            await self.send(preload, None)
        for command, waiting_round in backlog:
            await self.send(command, waiting_round)
        self.notify()

    async def reset(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        self.in_flight.clear()
        self.backlog.clear()
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
        *,
        wake_on_release: bool,
    ) -> None:
        self._masters = masters
        self._node_timeout = node_timeout
        self._clock = clock
        self._idle_lanes: list[list[_Link]] = []
        self._listener = _ReleaseListener(masters, node_timeout) if wake_on_release else None
        #: Connects still running after their round ended; kept so they are not collected.
        self._background: set[asyncio.Task[None]] = set()
        #: Renewer tasks, cancelled by close().
        self.renewers: set[asyncio.Task[None]] = set()
        self._closed = False

    async def run(self, flow: Flow, *, rollback: Callable[[], Flow] | None = None) -> Result:
        """Run ``flow`` to its result. If it is interrupted (cancelled), ``rollback()`` runs
        to completion first, on the same connections, so it lands after what it undoes."""
        lane = self._checkout()
        try:
            try:
                return await self._run_on(lane, flow)
            except BaseException as interruption:
                if rollback is not None:
                    try:
                        await _complete_despite_cancellation(self._run_on(lane, rollback()))
                    except Exception as failure:  # the interruption is what the caller must see
                        interruption.add_note(f"redlock: rolling back the interrupted acquire failed: {failure!r}")
                raise
        finally:
            flow.close()
            await self._checkin(lane)

    async def _run_on(self, lane: list[_Link], flow: Flow) -> Result:
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

    async def close(self) -> None:
        self._closed = True
        lanes, self._idle_lanes = self._idle_lanes, []
        for renewer in list(self.renewers):
            renewer.cancel()
        # See the sync driver: connects under way deliver their backlog first, within bounds.
        if self._background:
            await asyncio.wait(self._background, timeout=self._node_timeout)
        for lane in lanes:
            for link in lane:
                await link.reset()
        if self._listener is not None:
            await self._listener.close()

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise ClientClosed("this Redlock client is closed")

    def _checkout(self) -> list[_Link]:
        self._raise_if_closed()
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
        # A renewer's pause needs no interrupt here: release cancels the renewer task.
        self._raise_if_closed()
        if pause.wake_on is not None and self._listener is not None:
            await self._listener.wait(release_channel(pause.wake_on), pause.seconds)
        else:
            await asyncio.sleep(pause.seconds)

    async def _run_round(self, lane: list[_Link], round_: Round) -> None:
        if not round_.cleanup:  # a clean-up still runs: it takes our keys back
            self._raise_if_closed()
        loop = asyncio.get_running_loop()
        deadline = self._clock() + round_.timeout
        settled: asyncio.Future[None] = loop.create_future()
        for node in round_.targets:
            link = lane[node]
            link.current = round_
            link.wake = settled
            connecting = await link.send_or_queue(round_)
            if connecting is not None:
                self._background.add(connecting)
                connecting.add_done_callback(self._background.discard)
        if round_.settled:
            return
        timer = loop.call_later(max(0.0, deadline - self._clock()), _resolve, settled)
        try:
            await settled
        finally:
            timer.cancel()
        if round_.settled:
            return  # decided early: the masters not heard from are left as not awaited
        for node in round_.pending:
            waited_for = "connection" if lane[node].connecting is not None else "reply"
            round_.record(node, NodeStatus.TIMEOUT, f"no {waited_for} within node_timeout={round_.timeout}s")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _ReleaseListener:
    """Wakes waiting acquires as soon as the lock they wait for is released on any master.

    The asyncio twin of the sync client's listener: one subscriber connection per master,
    each read by a task of its own; a waiter subscribes (if it is the first for its
    channel) and waits on an event, with its retry timer as the fallback.
    """

    RECONNECT_DELAY = 1.0

    def __init__(self, masters: Sequence[_config.MasterAddress], node_timeout: float) -> None:
        self._masters = masters
        self._node_timeout = node_timeout
        self._waiters: Waiters[asyncio.Event] = Waiters()
        self._connections: list[Any] = []
        self._subscribed: list[set[str]] = []
        self._readers: list[asyncio.Task[None]] = []
        self._closed = False

    async def wait(self, channel: str, seconds: float) -> None:
        if self._closed:
            await asyncio.sleep(seconds)
            return
        event = asyncio.Event()
        self._waiters.add(channel, event)
        try:
            self._start()
            await self._update_subscriptions()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), seconds)
        finally:
            self._waiters.discard(channel, event)

    async def close(self) -> None:
        self._closed = True
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        for connection in self._connections:
            with contextlib.suppress(Exception):
                await connection.disconnect()
        self._readers.clear()
        self._connections.clear()
        self._subscribed.clear()

    def _start(self) -> None:
        if self._readers:
            return
        for index, master in enumerate(self._masters):
            self._connections.append(_connection(master, self._node_timeout))
            self._subscribed.append(set())
            self._readers.append(asyncio.ensure_future(self._read(index)))

    async def _update_subscriptions(self) -> None:
        wanted = self._waiters.channels()
        for connection, subscribed in zip(self._connections, self._subscribed, strict=True):
            if not connection.is_connected:
                continue  # its reader reconnects and subscribes to what is wanted then
            subscribe, unsubscribe = subscription_changes(wanted, subscribed)
            try:
                if subscribe:
                    await connection.send_command("SUBSCRIBE", *subscribe, check_health=False)
                if unsubscribe:
                    await connection.send_command("UNSUBSCRIBE", *unsubscribe, check_health=False)
            except Exception:
                continue  # its reader sees the broken connection and starts over
            subscribed.clear()
            subscribed.update(wanted)

    async def _read(self, index: int) -> None:
        connection, subscribed = self._connections[index], self._subscribed[index]
        while True:
            try:
                subscribed.clear()
                await asyncio.wait_for(connection.connect(), self._node_timeout * 2)
                await self._update_subscriptions()
                while True:
                    message = await connection.read_response(timeout=math.inf)
                    if isinstance(message, list) and message[0] == b"message":
                        self._waiters.released(message[1].decode(), message[2])
            except asyncio.CancelledError:
                raise
            except Exception:
                with contextlib.suppress(Exception):
                    await connection.disconnect()
                await asyncio.sleep(self.RECONNECT_DELAY)


class Redlock(ClusterConfig):
    """The asyncio Redlock client; see :class:`redlock.Redlock` for the arguments and defaults.

    ``masters`` are URLs or ``redis.asyncio.Redis`` clients. Use one client per event loop.
    """

    client_types = (redis.asyncio.Redis,)
    client_kind = "redis.asyncio.Redis client"
    _driver: _Driver

    def _start_driver(self) -> None:
        self._driver = _Driver(self.masters, self.node_timeout, self.clock, wake_on_release=self.wake_on_release)

    def lock(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        timeout: float | None = None,
        auto_extend: bool = False,
        on_lost: Callable[[Lock], None] | None = None,
        cancel_on_lost: bool = False,
        fencing: bool = False,
    ) -> Lock:
        """A Lock on ``name``; see :meth:`redlock.Redlock.lock` for the arguments.

        Here the renewer is a task, ``on_lost(lock)`` is called in the event loop, and
        ``cancel_on_lost=True`` makes a loss cancel the task running the ``async with``
        body, so that protected work stops instead of running on unprotected; the block
        then raises LockLost rather than CancelledError.
        """
        spec = self.lock_spec(name, ttl, fencing=fencing)
        options = LockOptions.checked(
            spec, timeout=timeout, auto_extend=auto_extend, on_lost=on_lost, cancel_on_lost=cancel_on_lost
        )
        return Lock(self, spec, options)

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

    def __init__(self, cluster: Redlock, spec: LockSpec, options: LockOptions) -> None:
        super().__init__(cluster, spec, options)
        self._renewer: asyncio.Task[None] | None = None
        self._body: asyncio.Task[Any] | None = None
        self._cancelled_body = False

    async def _run(self, flow: Flow) -> Result:
        return await self._cluster._driver.run(flow)

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """See :meth:`redlock.Lock.acquire`. If cancelled, rolls back before re-raising."""
        tokens, flow = self._acquire_flow(blocking, timeout)
        # Interrupted with SETs possibly landed: ours are taken back, whatever comes next.
        result = await self._cluster._driver.run(flow, rollback=lambda: self._rollback_flow(tokens))
        lease = self._acquired(result)
        if lease is None:
            return False
        if self._options.auto_extend:
            renewer = self._renewer = asyncio.ensure_future(self._renew(lease))
            renewers = self._cluster._driver.renewers
            renewers.add(renewer)
            renewer.add_done_callback(renewers.discard)
        return True

    async def release(self) -> None:
        """See :meth:`redlock.Lock.release`. A cancelled release still completes first."""
        lease, flow = self._release_flow()
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not asyncio.current_task():
            renewer.cancel()

        async def release_and_record() -> None:
            # The state changes inside the shielded work: a cancelled caller still ends up
            # with the token forgotten exactly when the release is done, not before.
            self._released(lease, await self._run(flow))

        await _complete_despite_cancellation(release_and_record())

    async def extend(self, ttl: float | None = None) -> float:
        """See :meth:`redlock.Lock.extend`."""
        lease, flow = self._extend_flow(ttl)
        return self._extended(lease, await self._run(flow))

    async def _renew(self, lease: Lease) -> None:
        error: BaseException | None = None
        try:
            await self._run(self._renewal_flow(lease))
        except asyncio.CancelledError:
            return  # released, or the client closed
        except Exception as unexpected:
            error = unexpected
        self._renewal_finished(lease, error)
        if lease.lost and not lease.ended and self._options.cancel_on_lost and self._body is not None:
            self._cancelled_body = True
            self._body.cancel(f"redlock: lock {self.name!r} was lost")

    async def __aenter__(self) -> Lock:
        if not await self.acquire(blocking=True, timeout=self._options.timeout):
            raise self._not_acquired_in_with()
        self._body = asyncio.current_task()
        self._cancelled_body = False
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        body, self._body = self._body, None
        if self._cancelled_body and isinstance(exc, asyncio.CancelledError) and body is not None:
            # The cancellation was ours, not the caller's: report it as the loss it is.
            body.uncancel()
            self._cancelled_body = False
            try:
                await self.release()
            except LockLost as lost:
                raise lost from exc
            raise self._error(LockLost, f"lock {self.name!r} was lost while held", Result(False, (), 0)) from exc
        try:
            await self.release()
        except LockLost as lost:
            if exc is None:
                raise
            exc.add_note(f"redlock: {lost}")
