"""The asyncio client: ``Redlock`` and ``Lock`` with the same names and meaning as the sync ones.

    >>> from redlock.asyncio import Redlock
    >>> rl = Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    >>> async with rl.lock("orders:42", ttl=10.0) as lock:  # doctest: +SKIP
    ...     await do_work(lock.validity)

It runs the same pure flows as the sync client (``redlock._core``) over the same connection
policy (``redlock._connection``): one command connection and one subscriber connection per
master, shared by every task of the client. Each connection is an asyncio protocol whose
``data_received`` feeds the RESP parser and records every reply in the round that asked for
it, so rounds need no reader task and a task cancelled mid-round leaves nothing out of step:
every change to the policy happens between two awaits. Clean-up after cancellation
(rollback of an acquire, a release) runs to completion, shielded; the caller's cancellation
is re-raised afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis.asyncio

from redlock import _config
from redlock._connection import Connect, Connections, Kind, Write, reply_parser
from redlock._core import Flow, Lease, LockSpec, Pause, Result, Round, release_channel
from redlock._lock import (
    DEFAULT_TTL,
    ClusterConfig,
    LockOptions,
    LockState,
)
from redlock.exceptions import (
    AcquireTimeout,
    ClientClosed,
    LockAlreadyHeld,
    LockLost,
    LockNotAcquired,
    LockNotHeld,
    MasterMisconfigured,
    NodeOutcome,
    NodeStatus,
    QuorumUnavailable,
    RedlockError,
    ReleaseUnconfirmed,
)

__all__ = [
    "AcquireTimeout",
    "ClientClosed",
    "Lock",
    "LockAlreadyHeld",
    "LockLost",
    "LockNotAcquired",
    "LockNotHeld",
    "MasterMisconfigured",
    "NodeOutcome",
    "NodeStatus",
    "QuorumUnavailable",
    "Redlock",
    "RedlockError",
    "ReleaseUnconfirmed",
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


class _Protocol(asyncio.Protocol):
    """One connection to one master; every byte it receives goes straight to the driver."""

    def __init__(self, driver: _Driver, kind: Kind, node: int) -> None:
        self.driver = driver
        self.kind = kind
        self.node = node
        self.parser = reply_parser()
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        #: Done once the socket is closed: aclose() returns only then, fds released.
        self.closed: asyncio.Future[None] = self.loop.create_future()
        #: Written this turn of the event loop, sent in one piece at its end: the commands of
        #: concurrent rounds share one send per master instead of one each.
        self.queued: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        self.driver.received(self)

    def connection_lost(self, exc: Exception | None) -> None:
        _resolve(self.closed)
        self.driver.lose(self, exc or ConnectionResetError("the master closed the connection"))

    def write(self, data: bytes) -> None:
        if self.transport is None or not data:
            return
        if not self.queued:
            self.loop.call_soon(self.flush)
        self.queued.append(data)

    def flush(self) -> None:
        data = b"".join(self.queued)
        self.queued.clear()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class _Driver:
    """Runs flows for one asyncio Redlock client over one connection per master."""

    def __init__(
        self,
        masters: Sequence[_config.MasterAddress],
        *,
        node_timeout: float,
        connect_timeout: float,
        clock: _config.Clock,
        wake_on_release: bool,
    ) -> None:
        self._masters = masters
        self._node_timeout = node_timeout
        self._connect_timeout = connect_timeout
        self._clock = clock
        self._wake_on_release = wake_on_release
        self._policy = Connections(
            [m.name for m in masters],
            [m.credentials for m in masters],
            node_timeout=node_timeout,
            connect_timeout=connect_timeout,
        )
        #: close() was called: no new operations; clean-ups under way still run.
        self._closed = False
        #: The connections are torn down: a connect that finishes now hangs up at once.
        self._shut = False
        self._fresh_process_state()

    def _fresh_process_state(self) -> None:
        self._pid = os.getpid()
        self._protocols: dict[tuple[Kind, int], _Protocol] = {}
        #: Connects under way; kept so they are not collected, and awaited by close().
        self._connects: set[asyncio.Task[None]] = set()
        #: Renewer tasks, cancelled by close().
        self.renewers: set[asyncio.Task[None]] = set()
        #: Flows under way: close() lets them finish (their clean-ups) before hanging up.
        self._active = 0

    def _check_fork(self) -> None:
        """In a fork's child: forget the parent's connections without touching them (their
        transports belong to the parent's event loop) and start over lazily."""
        if os.getpid() != self._pid:
            self._policy.forget()
            self._fresh_process_state()

    async def run(self, flow: Flow, commit: Callable[[Result], T], *, rollback: Callable[[], Flow] | None = None) -> T:
        """Run ``flow`` and hand its result to ``commit``; if either is interrupted
        (cancelled), ``rollback()`` runs to completion first, on the same connections."""
        self._check_fork()
        self._active += 1
        try:
            try:
                return commit(await self._drive(flow))
            except BaseException as interruption:
                if rollback is not None:
                    try:
                        await _complete_despite_cancellation(self._drive(rollback()))
                    except Exception as failure:  # the interruption is what the caller must see
                        interruption.add_note(f"redlock: rolling back the interrupted acquire failed: {failure!r}")
                raise
        finally:
            flow.close()
            self._active -= 1

    async def _drive(self, flow: Flow) -> Result:
        try:
            request = next(flow)
            while True:
                if isinstance(request, Round):
                    await self._run_round(request)
                else:
                    await self._pause(request)
                request = flow.send(self._clock())
        except StopIteration as stop:
            result: Result = stop.value
            return result

    async def _run_round(self, round_: Round) -> None:
        if not round_.cleanup:  # a clean-up still runs: it takes our keys back
            self._raise_if_closed()
        loop = asyncio.get_running_loop()
        now = self._clock()
        # No await inside the submission: nothing can interleave with it.
        for node in round_.targets:
            self._carry_out(self._policy.submit(round_, node, now))
        # Our commands leave with this turn's others (one send per master, see _Protocol);
        # the round's time counts from then: a busy loop's turn is not the masters' delay.
        await asyncio.sleep(0)
        first_deadline = self._clock() + round_.timeout
        deadline: float | None = first_deadline
        while not round_.settled and deadline is not None:
            settled: asyncio.Future[None] = loop.create_future()
            round_.waker = functools.partial(_resolve, settled)
            timer = loop.call_later(max(0.0, deadline - self._clock()), _after_next_reads, loop, settled)
            try:
                await settled
            finally:
                timer.cancel()
            if round_.settled:
                break
            deadline = self._policy.overtime(round_, first_deadline)
            if deadline is not None and deadline <= self._clock():
                deadline = None
        round_.waker = None
        self._policy.time_out(round_)

    async def _pause(self, pause: Pause) -> None:
        # A renewer's pause needs no interrupt here: release cancels the renewer task.
        self._raise_if_closed()
        if pause.wake_on is None or not self._wake_on_release:
            await asyncio.sleep(pause.seconds)
            return
        event = asyncio.Event()
        channel = release_channel(pause.wake_on)
        self._policy.waiters.add(channel, event)
        try:
            self._subscribe()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), pause.seconds)
        finally:
            self._policy.waiters.discard(channel, event)

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise ClientClosed("this Redlock client is closed")

    async def close(self) -> None:
        self._closed = True
        for renewer in list(self.renewers):
            renewer.cancel()
        for event in self._policy.waiters.all_events():
            event.set()  # waiting acquires look again, find the client closed, and stop
        # See the sync driver: operations under way finish their clean-ups, connects under
        # way deliver their backlog, within bounds; then we hang up.
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._connect_timeout + 2 * self._node_timeout
        while loop.time() < give_up and (self._active > 0 or self._policy.delivering()):
            await asyncio.sleep(0.001)
        self._shut = True
        protocols = list(self._protocols.values())
        for protocol in protocols:
            protocol.flush()
            if protocol.transport is not None:
                protocol.transport.close()  # writes what is buffered first
            self.lose(protocol, ClientClosed("the client was closed"))
        self._policy.close(self._clock())
        for task in self._connects:
            task.cancel()
        if protocols:
            await asyncio.wait([protocol.closed for protocol in protocols], timeout=self._connect_timeout)

    # --- connections ---------------------------------------------------------------------

    def _carry_out(self, action: Write | Connect | None) -> None:
        if isinstance(action, Write):
            protocol = self._protocols.get((action.kind, action.node))
            if protocol is not None:
                protocol.write(action.data)
        elif isinstance(action, Connect):
            task = asyncio.ensure_future(self._connect(action))
            self._connects.add(task)
            task.add_done_callback(self._connects.discard)

    async def _connect(self, connect: Connect) -> None:
        address = self._masters[connect.node]
        loop = asyncio.get_running_loop()
        protocol = _Protocol(self, connect.kind, connect.node)
        error: BaseException | None = None
        try:
            async with asyncio.timeout(self._connect_timeout):
                if address.path is not None:
                    await loop.create_unix_connection(lambda: protocol, address.path)
                else:
                    assert address.host is not None
                    assert address.port is not None
                    await loop.create_connection(
                        lambda: protocol,
                        address.host,
                        address.port,
                        ssl=address.ssl_context,
                        server_hostname=(address.server_hostname or address.host) if address.tls else None,
                    )
        except Exception as failure:
            error = failure
        if self._shut or not self._policy.is_current(connect) or os.getpid() != self._pid:
            if protocol.transport is not None:
                protocol.transport.close()
            return
        if error is None:
            self._protocols[(connect.kind, connect.node)] = protocol
        self._carry_out(self._policy.connected(connect, error, self._clock()))

    def lose(self, protocol: _Protocol, error: BaseException | str) -> None:
        if self._protocols.get((protocol.kind, protocol.node)) is not protocol:
            return  # an old connection: its state went with it
        self._hang_up(protocol)
        self._policy.lost(protocol.kind, protocol.node, error, self._clock())

    def _hang_up(self, protocol: _Protocol) -> None:
        del self._protocols[(protocol.kind, protocol.node)]
        if protocol.transport is not None and not protocol.transport.is_closing():
            protocol.transport.abort()  # not close(): nothing more may be written on it

    def received(self, protocol: _Protocol) -> None:
        if self._protocols.get((protocol.kind, protocol.node)) is not protocol:
            return
        outcome = self._policy.received(protocol.kind, protocol.node, protocol.parser, self._clock())
        protocol.write(outcome.write)
        if outcome.hang_up:
            self._hang_up(protocol)
        elif outcome.failure is not None:
            self.lose(protocol, outcome.failure)

    def _subscribe(self) -> None:
        for action in self._policy.subscriptions(self._wake_on_release, self._clock()):
            self._carry_out(action)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _after_next_reads(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """A round's time is up: look once more before calling its masters late.

    After a long turn of a busy loop, an expired timer and a reply already in the socket
    buffer are due together, and the loop runs the timer first if the bytes came after its
    last select. A zero-delay timer runs after the next select's reads (asyncio queues due
    timers behind that turn's I/O callbacks), so a reply that had arrived counts as in time,
    as the sync client's last look does.
    """
    loop.call_later(0, _resolve, future)


class Redlock(ClusterConfig):
    """The asyncio Redlock client; see :class:`redlock.Redlock` for the arguments and defaults.

    ``masters`` are URLs or ``redis.asyncio.Redis`` clients. Use one client per event loop.
    """

    client_types = (redis.asyncio.Redis,)
    client_kind = "redis.asyncio.Redis client"
    _driver: _Driver

    def _start_driver(self) -> None:
        self._driver = _Driver(
            self.masters,
            node_timeout=self.node_timeout,
            connect_timeout=self.connect_timeout,
            clock=self.clock,
            wake_on_release=self.wake_on_release,
        )

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

    async def release_token(self, name: str, token: str) -> None:
        """Release ``name`` held under ``token`` (acquired by another process, say).

        Only the holder of ``token`` can release: the compare-and-delete runs on every
        master. LockLost if a majority answered that the token was gone; ReleaseUnconfirmed
        if no majority answered in time (the lock may stay held until its ttl runs out).
        """
        lock = self.lock(name, DEFAULT_TTL)  # a release sets no ttl: any valid one will do
        lock._adopt(token)
        await lock.release()

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

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """See :meth:`redlock.Lock.acquire`. If cancelled, rolls back before re-raising."""
        tokens, flow = self._acquire_flow(blocking, timeout)
        # Interrupted (cancelled) before the lease is recorded, with SETs possibly landed:
        # ours are taken back, whatever comes next.
        return await self._cluster._driver.run(flow, self._commit_acquire, rollback=lambda: self._rollback_flow(tokens))

    def _start_renewer(self, lease: Lease) -> None:
        renewer = self._renewer = asyncio.ensure_future(self._renew(lease))
        renewers = self._cluster._driver.renewers
        renewers.add(renewer)
        renewer.add_done_callback(renewers.discard)

    async def release(self) -> None:
        """See :meth:`redlock.Lock.release`. A cancelled release still completes first."""
        lease, flow = self._release_flow()
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not asyncio.current_task():
            renewer.cancel()

        async def release_and_record() -> None:
            # The state changes inside the shielded work: a cancelled caller still ends up
            # with the token forgotten exactly when the release is done, not before.
            await self._cluster._driver.run(flow, lambda result: self._released(lease, result))

        await _complete_despite_cancellation(release_and_record())

    async def extend(self, ttl: float | None = None) -> float:
        """See :meth:`redlock.Lock.extend`."""
        lease, flow = self._extend_flow(ttl)
        return await self._cluster._driver.run(flow, lambda result: self._extended(lease, result))

    async def _renew(self, lease: Lease) -> None:
        error: BaseException | None = None
        try:
            await self._cluster._driver.run(self._renewal_flow(lease), _unchanged)
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


def _unchanged(result: Result) -> Result:
    return result
