"""The asyncio driver: the lock flows over the event loop's transports.

It runs the same pure flows as the sync driver (:mod:`redlock._protocol.flows`) over the
same connection policy (:mod:`redlock._protocol.connection`) and the same
:class:`redlock._io.driver.DriverBase`: one command connection and one subscriber
connection per master, shared by every task of the client. Each connection is an asyncio protocol whose
``buffer_updated`` feeds the RESP parser and records every reply in the round that asked for
it, so rounds need no reader task and a task cancelled mid-round leaves nothing out of step:
every change to the policy happens between two awaits. Clean-up after cancellation
(rollback of an acquire, a release) runs to completion, shielded; the caller's cancellation
is re-raised afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar, cast

from redlock._compiled import mypyc_attr
from redlock._io.driver import DriverBase, keep_alive, read_buffer
from redlock._protocol.connection import Connect, Kind, ProtocolViolation, ReplyTooLarge, Write
from redlock._protocol.core import Pause, Request, Round, release_channel

R = TypeVar("R")
T = TypeVar("T")


class _Protocol(asyncio.BufferedProtocol):
    """One connection to one master; every byte it receives goes straight to the driver."""

    def __init__(self, driver: Driver, kind: Kind, node: int) -> None:
        self.driver = driver
        self.kind = kind
        self.node = node
        self.parser = driver._reply_parser()
        #: What the transport reads into.
        self.buffer = read_buffer()
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        #: Done once the socket is closed: aclose() returns only then, fds released.
        self.closed: asyncio.Future[None] = self.loop.create_future()
        #: Written this turn of the event loop, sent in one piece at its end: the commands of
        #: concurrent rounds share one send per master instead of one each.
        self.queued: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports (uvicorn's default loop) write and
        # close like asyncio's but do not derive from asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family != socket.AF_UNIX:
            keep_alive(sock)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        try:
            try:
                self.parser.feed(self.buffer, 0, nbytes)  # (the parser copies what it keeps)
            except (ReplyTooLarge, ProtocolViolation) as refused:
                # Not raised into the event loop (which would log it as our bug): the whole
                # replies before it count, then the connection is lost with the reason.
                self.driver.received(self, refused)
                return
            self.driver.received(self)
        except BaseException:
            self.broken()
            raise

    def broken(self) -> None:
        """An exception left one of this connection's steps halfway: a signal handler that
        raises runs inside any of them (and asyncio closes a connection only for an
        Exception out of buffer_updated). What it has sent, and which replies it owes to
        which round, is then unknown: a write queued with no flush to come stalled every
        later command on it for good. So it goes, and its rounds learn it from
        connection_lost, as from a reset."""
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        _resolve(self.closed)
        self.driver.lost(self, exc or ConnectionResetError("the master closed the connection"))

    def write(self, data: bytes) -> None:
        try:
            self._write(data)
        except BaseException:
            self.broken()
            raise

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or not data:
            return
        if self.driver.alone:
            # No other round can join ours: waiting for the turn's end buys nothing.
            if self.queued:
                self.queued.append(data)
                self.flush()
            elif not transport.is_closing():
                transport.write(data)
            return
        if not self.queued:
            self.loop.call_soon(self.flush)
        self.queued.append(data)

    def flush(self) -> None:
        try:
            data = b"".join(self.queued)
            self.queued.clear()
            if data and self.transport is not None and not self.transport.is_closing():
                self.transport.write(data)
        except BaseException:
            self.broken()
            raise


# (Open to Python subclasses, compiled: tests/test_signals.py strikes a handshake in one.)
@mypyc_attr(allow_interpreted_subclasses=True)
class Driver(DriverBase["_Protocol"]):
    """Runs flows for one asyncio Redlock client over one connection per master."""

    def _fresh_process_state(self) -> None:
        super()._fresh_process_state()
        #: Connects under way; kept so they are not collected, and awaited by close().
        self._connects: set[asyncio.Task[None]] = set()
        #: Renewer tasks, cancelled by close().
        self.renewers: set[asyncio.Task[None]] = set()
        #: Flows under way: close() lets them finish (their clean-ups) before hanging up.
        self._active = 0
        #: The event loop the connections belong to (the first that ran a flow).
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Times out the rounds waiting for replies on that loop (made with the loop's first
        #: round; a round keeps the one it began with, whatever becomes of this client).
        self._timeouts: _Timeouts | None = None

    @property
    def alone(self) -> bool:
        """Whether one flow is all that runs: its commands are written at once."""
        return self._active == 1

    def _abandon(self, conn: _Protocol) -> None:
        """Nothing: its transport belongs to the parent's event loop, not to be touched."""

    def _check_loop(self) -> None:
        """A client used from a second event loop (a module-level client and two
        ``asyncio.run()`` calls; a test runner's loop per test) starts over on the new one,
        as after a fork: the old loop's connections are of no use here, and waiting on them
        would call healthy masters hung."""
        loop = asyncio.get_running_loop()
        old = self._loop
        if old is loop:
            return
        if old is None:
            self._loop = loop
            return
        if old.is_running():
            raise RuntimeError(
                "this redlock.asyncio.Redlock is in use by another event loop that is still running: "
                "use one client per event loop"
            )
        abandoned = list(self._conns.values())
        self._conns.clear()  # (first: closing them calls lost(), which must find them gone)
        for conn in abandoned:
            _close_abandoned(conn, old)
        self._policy.forget()
        self._fresh_process_state()
        self._loop = loop

    async def run(
        self,
        flow: Generator[Request, float, R],
        commit: Callable[[R], T],
        *,
        shielded: bool = False,
    ) -> T:
        """Run ``flow`` and hand its result to ``commit``; return what that returns.

        Whatever interrupts a round or a pause (a cancellation, an error) is thrown into the
        flow, and the rounds of its clean-up (an acquire's rollback: see
        :func:`redlock._protocol.flows.committed_acquire`) run to completion first, on the same
        connections. A ``shielded`` flow (a release: our keys must go) runs to its end even
        if the caller is cancelled meanwhile; the cancellation is raised once it is done and
        committed, and outranks the flow's own failure.
        """
        self._check_fork()
        self._check_loop()
        self._active += 1
        cancels: list[asyncio.CancelledError] | None = [] if shielded else None
        try:
            try:
                result = commit(await self._drive(flow, cancels))
            except BaseException as interruption:
                if cancels:
                    raise cancels[0] from interruption
                # (Named, not a bare raise: compiled, the exception being handled across the
                # await above was what older mypyc got wrong, mypyc/mypyc#1177.)
                raise interruption
            if cancels:
                raise cancels[0]
            return result
        finally:
            flow.close()
            self._active -= 1

    async def _drive(
        self,
        flow: Generator[Request, float, R],
        cancels: list[asyncio.CancelledError] | None,
    ) -> R:
        """Step ``flow``; with a ``cancels`` list, its rounds keep going through cancellation
        and record it there (clean-ups are rounds only: they never pause)."""
        waiting: _Waiting | None = None
        # Where the shielded rounds of a flow that is not shielded as a whole (the rollback
        # of an interrupted acquire) put the cancellations they meet: the interruption they
        # clean up after is what the caller gets.
        absorbed: list[asyncio.CancelledError] = []
        try:
            request = next(flow)
            while True:
                try:
                    if isinstance(request, Round):
                        await self._run_round(request, absorbed if cancels is None and request.shielded else cancels)
                    else:
                        waiting = await self._pause(request, waiting)
                    request = flow.send(self._clock())
                except StopIteration:
                    raise
                except BaseException as interruption:
                    # Here, in a pause or in the flow: the flow's clean-up runs, if it has one.
                    self._out_of_line(waiting)
                    waiting = None
                    request = self._thrown(flow, interruption)
        except StopIteration as stop:
            result: R = stop.value
            return result
        finally:
            self._out_of_line(waiting)

    async def _run_round(self, round_: Round, cancels: list[asyncio.CancelledError] | None) -> None:
        if not round_.cleanup:  # a clean-up still runs: it takes our keys back
            self._raise_if_closed()
        loop = asyncio.get_running_loop()
        now = self._clock()
        # No await inside the submission: nothing can interleave with it.
        written = True
        submit, conns = self._policy.submit, self._conns
        sending: int | None = None
        try:
            for node in round_.targets:
                sending = node
                action = submit(round_, node, now)
                if type(action) is Write:  # (the common case, without _carry_out's dispatch)
                    conn = conns.get((action.kind, action.node))
                    if conn is not None:
                        conn.write(action.data)
                else:
                    written = False
                    self._carry_out(action)
            sending = None
        except BaseException as interruption:
            self._lost_mid_write(sending, interruption)
            raise
        if not (self.alone and written):
            # Our commands leave with this turn's others (one send per master, see
            # _Protocol), or behind a connect; the round's time counts from the end of this
            # turn at least: a busy loop's turn is not the masters' delay. (A lone round
            # whose commands all went out at once has nothing to wait for.)
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError as cancel:
                if cancels is None:
                    raise
                cancels.append(cancel)
        first_deadline = self._clock() + round_.timeout
        deadline: float | None = first_deadline
        timeouts = self._timeouts
        if timeouts is None or timeouts.loop is not loop:
            timeouts = self._timeouts = _Timeouts(loop, self._clock)
        while not round_.settled and deadline is not None:
            settled: asyncio.Future[None] = loop.create_future()
            self._policy.wake(round_, functools.partial(_resolve, settled))
            timeouts.watch(settled, deadline)
            interrupted = False
            try:
                await settled
            except asyncio.CancelledError as cancel:
                if cancels is None:
                    raise
                cancels.append(cancel)
                interrupted = True
            finally:
                timeouts.deadlines.pop(settled, None)
                self._policy.wake(round_, None)  # (a new future is made for each wait)
            if round_.settled:
                break
            if interrupted:
                continue  # the same deadline, on a new future
            deadline = self._overtime(round_, first_deadline)
        self._policy.wake(round_, None)
        self._policy.time_out(round_)

    async def _pause(self, pause: Pause, waiting: _Waiting | None) -> _Waiting | None:
        """Wait as ``pause`` says; returns the flow's place among the waiters for a release
        (kept across its pauses, so that its place in line holds while it tries)."""
        # A renewer's pause needs no interrupt here: release cancels the renewer task.
        self._raise_if_closed()
        if pause.wake_on is None or (not self._wake_on_release and pause.line is None):
            await asyncio.sleep(pause.seconds)
            return waiting
        waiters = self._policy.waiters
        channel = release_channel(pause.wake_on)
        if waiting is None or waiting[0] != channel:  # (a multi-name lock waits on the name found held)
            if waiting is not None:
                waiters.discard(*waiting)
            waiting = (channel, _Wake())
            waiters.add(*waiting, in_line=pause.line is not None, handoff=pause.handoff)
        event = waiting[1]
        subscribed = False
        for wait in waiters.waits(channel, event, pause.seconds, pause.line, self._clock, handoff=pause.handoff):
            if not subscribed and self._wake_on_release:
                self._subscribe()
                subscribed = True
            await event.wait(wait)
        event.clear()
        return waiting

    async def close(self) -> None:
        self._check_loop()
        give_up = self._begin_close()
        for renewer in list(self.renewers):
            renewer.cancel()
        while time.monotonic() < give_up and (self._active > 0 or self._policy.delivering()):
            await asyncio.sleep(0.001)
        protocols = list(self._conns.values())
        for protocol in protocols:
            protocol.flush()
            if protocol.transport is not None:
                protocol.transport.close()  # writes what is buffered first
        self._hang_up_all()
        for task in self._connects:
            task.cancel()
        if protocols:
            await asyncio.wait([protocol.closed for protocol in protocols], timeout=self._connect_timeout)

    # --- connections ---------------------------------------------------------------------

    def _start_connect(self, connect: Connect) -> None:
        task = asyncio.ensure_future(self._connect(connect))
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
        if not self._connect_finished(connect, None if error else protocol, error) and protocol.transport is not None:
            protocol.transport.close()

    def _write(self, conn: _Protocol, data: bytes) -> None:
        conn.write(data)

    def _drop(self, conn: _Protocol) -> None:
        if conn.transport is not None and not conn.transport.is_closing():
            conn.transport.abort()  # not close(): nothing more may be written on it

    def lost(self, protocol: _Protocol, error: BaseException | str) -> None:
        if self._conns.get((protocol.kind, protocol.node)) is protocol:  # (else: an old connection)
            self._lose(protocol.kind, protocol.node, error)

    def received(self, protocol: _Protocol, failure: BaseException | None = None) -> None:
        if self._conns.get((protocol.kind, protocol.node)) is protocol:
            self._replies_arrived(protocol, failure)
        elif failure is not None and protocol.transport is not None:
            protocol.transport.abort()  # (an old connection: nobody reads it any more)

    def _subscribe(self) -> None:
        for action in self._policy.subscriptions(self._wake_on_release, self._clock()):
            self._carry_out(action)


class _Timeouts:
    """Times out the rounds of one event loop that wait for replies: one timer for all of
    them, set for the earliest deadline, not one per round (a round's replies nearly always
    come first, and a timer made and cancelled per round cost 5 % of a lock+unlock's
    instructions). Deadlines are read on the client's clock, as the sync client reads them."""

    __slots__ = ("_alarm", "_alarm_at", "_clock", "deadlines", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float]) -> None:
        self.loop = loop
        self._clock = clock
        #: The future that wakes each waiting round, and the round's deadline.
        self.deadlines: dict[asyncio.Future[None], float] = {}
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_at = 0.0

    # Each step below leaves a state from which every deadline still rings, whatever
    # exception interrupts it (a signal handler that raises runs in any of these callbacks):
    # an alarm lost or left cancelled in place would leave a round waiting for ever.

    def watch(self, settled: asyncio.Future[None], deadline: float) -> None:
        """Wake ``settled`` at ``deadline`` unless its round settles first (and drops it
        from :attr:`deadlines`)."""
        self.deadlines[settled] = deadline
        if self._alarm is None or deadline < self._alarm_at:
            self._arm(deadline)
        elif self._alarm_at < self._clock():
            # Due already, it may never ring: an exception that struck its ring on entry left
            # it here, rung. Armed anew for the earliest deadline, a late one only rings twice.
            self._arm(min(self.deadlines.values()))

    def _arm(self, at: float) -> None:
        alarm = self.loop.call_later(max(0.0, at - self._clock()), self._ring)
        previous, self._alarm, self._alarm_at = self._alarm, alarm, at
        if previous is not None:
            previous.cancel()  # (interrupted before this, it only rings once more for nothing)

    def _ring(self) -> None:
        """The earliest deadline came: time out the rounds whose deadline passed, and set
        the timer for the next (later rounds' deadlines are later, so it rarely moves)."""
        try:
            self._alarm = None
            now = self._clock()
            for settled, deadline in list(self.deadlines.items()):
                if settled.done():
                    del self.deadlines[settled]
                elif deadline <= now:
                    _after_next_reads(self.loop, settled)  # (twice, if interrupted: harmless)
                    # Kept, to ring again a little later: its waiter drops it once woken, and
                    # a wake-up that an exception cut off on its way is made again.
                    self.deadlines[settled] = now + _RING_AGAIN
        finally:
            if self.deadlines and self._alarm is None:
                self._arm(min(self.deadlines.values()))


#: A flow's place among the waiters for a release: the channel and its event.
class _Wake:
    """A waiter's event: set by a release (announced, or made by this client), waited for
    with a timeout. One future and one timer a wait, on the loop that runs this driver:
    ``asyncio.wait_for(event.wait(), ...)`` would also make a task each time, on the path of
    every handover."""

    __slots__ = ("_flag", "_future")

    def __init__(self) -> None:
        self._flag = False
        self._future: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        if self._future is not None:
            _resolve(self._future)

    def clear(self) -> None:
        self._flag = False

    async def wait(self, seconds: float) -> None:
        """Until set or ``seconds`` passed (a cancellation is raised as usual)."""
        if self._flag:
            return
        loop = asyncio.get_running_loop()
        future = self._future = loop.create_future()
        timer = loop.call_later(seconds, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()
            self._future = None


_Waiting = tuple[str, _Wake]


def _close_abandoned(conn: _Protocol, loop: asyncio.AbstractEventLoop) -> None:
    """Close a connection of an event loop that no longer runs. On a loop that is merely
    stopped, an abort does it; a closed loop can no longer run the transport's own clean-up,
    and asyncio has no public way to close it there, so its socket is closed directly (the
    alternative is a file descriptor left open until the transport is collected)."""
    transport = conn.transport
    if transport is None:
        return
    if not loop.is_closed():
        transport.abort()
        return
    inner: Any = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None) or transport
    with contextlib.suppress(Exception):
        inner._call_connection_lost(None)  # the socket transport's own final step
    with contextlib.suppress(Exception):
        transport._closed = True  # type: ignore[attr-defined]  # (a TLS transport's wrapper)


#: How long after waking a timed-out round its deadline rings again, should that wake-up not
#: have arrived (a signal handler that raises can cut any callback of the loop short).
_RING_AGAIN = 0.05


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
