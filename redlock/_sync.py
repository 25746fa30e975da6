"""The synchronous client: ``Redlock`` and ``Lock`` over blocking sockets.

The driver runs the pure flows of ``redlock._core``. A round writes its command on every
master's connection first and only then reads replies, in whatever order they arrive
(``poll`` on the sockets), so a round costs about one round trip whatever the number of
masters, without a thread per master. Threads are used only to (re)connect, where a
blocking connect to an unresponsive host must not hold up the others.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ResponseError
from redis.retry import Retry

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
from redlock.exceptions import LockLost, NodeStatus


def _connection(address: _config.MasterAddress, node_timeout: float) -> Any:
    """A redis-py connection to one master, configured by us (Any: redis-py's methods are unannotated)."""
    kinds = _config.ConnectionKinds(Connection, SSLConnection, UnixDomainSocketConnection, Retry(NoBackoff(), 0))
    return _config.make_connection(address, node_timeout, kinds)


def _fileno(connection: Any) -> int:
    # redis-py has no public accessor for the socket; poll needs its descriptor.
    return int(connection._sock.fileno())


class _Link:
    """Our connection to one master, and the commands in flight on it."""

    def __init__(self, node: int, address: _config.MasterAddress, node_timeout: float) -> None:
        self.node = node
        self.connection = _connection(address, node_timeout)
        self.in_flight = InFlight()
        self.connecting: concurrent.futures.Future[None] | None = None
        #: Commands for this master while it connects, sent in order as soon as it has (by
        #: the connecting thread): a SET and the rollback after it must reach the master, in
        #: that order, even when the other masters decided their rounds meanwhile.
        self.backlog: list[tuple[Command, Round]] = []
        #: Connected, scripts loaded and backlog sent: from here on only the lane's owner
        #: thread writes and reads. ``guard`` covers the hand-over from the connecting thread.
        self.ready = False
        self.guard = threading.RLock()
        #: Between touching the connection and recording it in ``in_flight`` (a write, or a
        #: read and the matching of its reply): an interruption here leaves the two out of step.
        self.mid_exchange = False
        #: Set by the client's close(): a connect that finishes later hangs up at once.
        self.abandoned = False

    @property
    def connected(self) -> bool:
        return self.ready and self.connection.is_connected

    def fileno(self) -> int:
        return _fileno(self.connection)

    def owes_too_much(self, round_: Round) -> bool:
        """Whether this master has left so many replies unanswered that it looks hung.

        Late replies are matched and dropped by ``in_flight``, and whatever we send next runs
        after what we gave up on (a rollback after a timed-out SET lands after it, on that
        master, rather than racing it on a new connection). So a silent master's connection
        is kept, but it is not sent more until it answers, before its socket buffer fills.
        """
        return too_far_behind(len(self.in_flight) + len(self.backlog), round_)

    def write(self, command: Command, owner: Round | None, packer: Round | None = None) -> None:
        """Send ``command``, whose reply belongs to ``owner`` (None: nobody waits for it)."""
        encode = self.connection.pack_command
        packed = encode(*command.args) if packer is None else packer.pack(command, encode)
        self.mid_exchange = True
        self.in_flight.sent(command, owner, self.node)
        self.connection.send_packed_command(packed, check_health=False)
        self.mid_exchange = False

    def connect_and_flush(self) -> None:
        """In a connecting thread: connect, load the scripts, send the backlog in order."""
        self.connection.connect()
        with self.guard:
            if self.abandoned:
                self.connection.disconnect()
                return
            try:
                for preload in script_preloads():
                    self.write(preload, None)
                for command, owner in self.backlog:
                    self.write(command, owner)
            except BaseException:
                self.reset()
                raise
            self.backlog.clear()
            self.ready = True

    def send_or_queue(self, command: Command, round_: Round) -> bool:
        """Queue the round's command while connecting; False if the link is ready to send."""
        with self.guard:
            if self.ready:
                return False
            self.backlog.append((command, round_))
            return True

    def reset(self) -> None:
        """Drop the connection: what was in flight on it can no longer be matched to replies."""
        with self.guard:
            self.ready = False
            self.mid_exchange = False
            self.connection.disconnect()
            self.in_flight.clear()
            self.backlog.clear()

    def abandon(self) -> None:
        with self.guard:
            self.abandoned = True
            self.reset()

    def hung_up(self) -> bool:
        """Whether a connection that owes nothing shows input: only the master closing it
        (a restart, its ``timeout`` setting) makes that happen."""
        if self.in_flight or not self.connection.is_connected:
            return False
        poller = select.poll()
        poller.register(self.fileno(), select.POLLIN)
        return bool(poller.poll(0))


class _Driver:
    """Runs flows for one Redlock client; each running flow has a lane (a link per master)."""

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
        self._lanes_lock = threading.Lock()
        self._connector = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(masters), thread_name_prefix="redlock-connect"
        )
        self._listener = _ReleaseListener(masters, node_timeout) if wake_on_release else None
        #: The stop events of flows under way that pause long (renewers): close() sets them.
        self._interrupts: set[threading.Event] = set()
        self._closed = False

    def run(
        self,
        flow: Flow,
        *,
        interrupt: threading.Event | None = None,
        rollback: Callable[[], Flow] | None = None,
    ) -> Result:
        """Run ``flow`` to its result; ``interrupt`` cuts its pauses short (a renewer's stop).

        If the flow is interrupted (Ctrl-C), ``rollback()`` runs before the exception goes
        on, on the same connections, so on each master it lands after what it undoes.
        """
        lane = self._checkout()
        if interrupt is not None:
            with self._lanes_lock:
                self._interrupts.add(interrupt)
        try:
            try:
                return self._run_on(lane, flow, interrupt)
            except BaseException as interruption:
                if rollback is not None:
                    try:
                        self._run_on(lane, rollback(), None)
                    except Exception as failure:  # the interruption is what the caller must see
                        interruption.add_note(f"redlock: rolling back the interrupted acquire failed: {failure!r}")
                raise
        finally:
            flow.close()
            if interrupt is not None:
                with self._lanes_lock:
                    self._interrupts.discard(interrupt)
            self._checkin(lane)

    def _run_on(self, lane: list[_Link], flow: Flow, interrupt: threading.Event | None) -> Result:
        try:
            request = next(flow)
            while True:
                if isinstance(request, Round):
                    self._run_round(lane, request)
                else:
                    self._pause(request, interrupt)
                request = flow.send(self._clock())
        except StopIteration as stop:
            result: Result = stop.value
            return result
        except BaseException:
            # redis-py hangs up a connection interrupted mid-read or mid-write; the others'
            # late replies stay matched by in_flight, except where the interruption fell
            # between the connection and in_flight.
            for link in lane:
                if link.mid_exchange:
                    link.reset()
            raise

    def close(self) -> None:
        with self._lanes_lock:
            self._closed = True
            lanes, self._idle_lanes = self._idle_lanes, []
            interrupts = list(self._interrupts)
        for interrupt in interrupts:
            interrupt.set()  # renewers stop at their next step
        # A connect still under way owes its master a backlog (the SET of an acquire that a
        # majority decided without it, say): let it deliver, within node_timeout, first.
        pending = [link.connecting for lane in lanes for link in lane if link.connecting is not None]
        concurrent.futures.wait(pending, timeout=self._node_timeout)
        for lane in lanes:
            for link in lane:
                link.abandon()
        self._connector.shutdown(wait=False, cancel_futures=True)
        if self._listener is not None:
            self._listener.close()

    def _checkout(self) -> list[_Link]:
        with self._lanes_lock:
            self._raise_if_closed()
            if self._idle_lanes:
                return self._idle_lanes.pop()
        return [_Link(node, master, self._node_timeout) for node, master in enumerate(self._masters)]

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise ClientClosed("this Redlock client is closed")

    def _checkin(self, lane: list[_Link]) -> None:
        with self._lanes_lock:
            if not self._closed:
                self._idle_lanes.append(lane)
                return
        for link in lane:
            link.abandon()

    def _pause(self, pause: Pause, interrupt: threading.Event | None) -> None:
        self._raise_if_closed()
        if interrupt is not None:
            interrupt.wait(pause.seconds)
        elif pause.wake_on is not None and self._listener is not None:
            self._listener.wait(release_channel(pause.wake_on), pause.seconds)
        else:
            time.sleep(pause.seconds)

    # --- one round ------------------------------------------------------------------------

    def _run_round(self, lane: list[_Link], round_: Round) -> None:
        if not round_.cleanup:  # a clean-up still runs: it takes our keys back
            self._raise_if_closed()
        deadline = self._clock() + round_.timeout
        self._drop_hung_up(lane, round_)
        connecting = self._start_connects(lane, round_)
        for node in round_.pending:
            link = lane[node]
            if link.owes_too_much(round_):
                self._drain(link, round_)
                if node in round_.outcomes:
                    # The drain found the connection broken and recorded it: a write now
                    # would make redis-py reconnect in this thread, past the round's deadline.
                    continue
            if link.owes_too_much(round_):
                round_.record(node, NodeStatus.TIMEOUT, f"hung: {len(link.in_flight)} earlier replies unanswered")
            elif node not in connecting:
                self._send(link, round_, round_.command)
            elif not link.send_or_queue(round_.command, round_):
                # Connected in the meantime: a write now follows the backlog it flushed.
                del connecting[node]
                link.connecting = None
                self._send(link, round_, round_.command)
        while not round_.settled:
            for node, future in list(connecting.items()):
                if future.done():
                    del connecting[node]
                    self._connected(lane[node], round_)
            listening = [node for node in round_.pending if node not in connecting]
            ready = [node for node in listening if self._readable(lane[node], round_)]
            for node in ready:
                self._read_one(lane[node], round_)
            if round_.settled or ready:
                continue
            remaining = deadline - self._clock()
            if remaining <= 0:
                for node in round_.pending:
                    waited_for = "connection" if node in connecting else "reply"
                    round_.record(node, NodeStatus.TIMEOUT, f"no {waited_for} within node_timeout={round_.timeout}s")
                return
            poller = select.poll()
            for node in listening:
                if lane[node].connection.is_connected:
                    poller.register(lane[node].fileno(), select.POLLIN)
            # While connects run in other threads, look at them every millisecond.
            poller.poll(min(remaining, 0.001 if connecting else remaining) * 1000)

    def _drop_hung_up(self, lane: list[_Link], round_: Round) -> None:
        """Reset the connections the masters have closed (a restart, their ``timeout``
        setting), so that this round reconnects them instead of writing into a dead socket
        and counting those masters as failed. Late replies that arrived first are read."""
        poller = select.poll()
        links = {}
        for node in round_.targets:
            link = lane[node]
            if link.connected:
                links[link.fileno()] = link
                poller.register(link.fileno(), select.POLLIN)
        if not links:
            return
        for fd, _ in poller.poll(0):
            link = links[fd]
            self._drain(link, None)
            if link.connected and link.hung_up():
                link.reset()

    def _drain(self, link: _Link, round_: Round | None) -> None:
        """Read whatever replies a master that owes many has sent by now."""
        while link.connected and len(link.in_flight) and self._readable(link, round_):
            self._read_one(link, round_)

    def _send(self, link: _Link, round_: Round | None, command: Command, *, owner: Round | None = None) -> None:
        """Write ``command`` during ``round_``; its reply belongs to ``owner`` (default ``round_``).

        Failures are recorded in ``round_`` (None: between rounds, nobody to tell)."""
        try:
            link.write(command, round_ if owner is None else owner, round_)
        except Exception as error:
            link.reset()
            if round_ is not None and link.node in round_.pending:
                round_.record(link.node, *failure_status(error))

    def _readable(self, link: _Link, round_: Round | None) -> bool:
        try:
            return bool(link.connection.can_read(timeout=0))
        except Exception as error:
            link.reset()
            if round_ is not None and link.node in round_.pending:
                round_.record(link.node, *failure_status(error))
            return False

    def _read_one(self, link: _Link, round_: Round | None) -> None:
        reply: object
        link.mid_exchange = True
        try:
            reply = link.connection.read_response()
        except ResponseError as error:
            reply = error_reply(error)
        except Exception as error:
            link.reset()
            if round_ is not None and link.node in round_.pending:
                round_.record(link.node, *failure_status(error))
            return
        resend = link.in_flight.received(reply, round_)
        link.mid_exchange = False
        if resend is not None:
            command, owner = resend
            self._send(link, round_, command, owner=owner)

    def _start_connects(self, lane: list[_Link], round_: Round) -> dict[int, concurrent.futures.Future[None]]:
        """Start connecting, in other threads, the masters that need it; the round goes on
        with the others meanwhile, so an unresponsive host never holds up a decided round."""
        connecting = {}
        for node in round_.targets:
            link = lane[node]
            if link.connecting is not None and link.connecting.done() and link.connected:
                link.connecting = None  # finished after its round ended, and well
            if link.connected:
                continue
            if link.connecting is not None and link.connecting.done():
                link.connecting = None  # finished after its round ended, then lost or failed
            if link.connecting is None:
                link.reset()
                try:
                    link.connecting = self._connector.submit(link.connect_and_flush)
                except RuntimeError as closed:  # the client closed: no new connections
                    round_.record(node, NodeStatus.UNREACHABLE, str(closed))
                    continue
            connecting[node] = link.connecting
        return connecting

    def _connected(self, link: _Link, round_: Round) -> None:
        """A connect finished; its thread sent the backlog. Record why, if it failed."""
        future, link.connecting = link.connecting, None
        error: BaseException | None = None
        if future is not None:
            error = ClientClosed("the client closed before connecting") if future.cancelled() else future.exception()
        if error is not None:
            link.reset()
            if round_ is not None and link.node in round_.pending:
                round_.record(link.node, *failure_status(error))


class _ReleaseListener:
    """Wakes waiting acquires as soon as the lock they wait for is released on any master.

    One subscriber connection per master, all read and written by one daemon thread; waiters
    only register an event and poke the thread through a pipe. A notification only saves
    time: waiters still retry on their own timer, so a master that is down or a message that
    is lost costs at most one retry delay, never correctness.
    """

    #: How often the thread looks again at masters that were down, and at idle channels.
    HOUSEKEEPING_INTERVAL = 1.0

    def __init__(self, masters: Sequence[_config.MasterAddress], node_timeout: float) -> None:
        self._masters = masters
        self._node_timeout = node_timeout
        self._waiters: Waiters[threading.Event] = Waiters()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._poke_read, self._poke_write = -1, -1
        self._closed = False

    def wait(self, channel: str, seconds: float) -> None:
        event = threading.Event()
        with self._lock:
            closed = self._closed
            if not closed:
                self._waiters.add(channel, event)
                self._start()
        if closed:
            time.sleep(seconds)
            return
        self._poke()
        try:
            event.wait(seconds)
        finally:
            with self._lock:
                self._waiters.discard(channel, event)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._poke()
            thread.join(timeout=5)
            os.close(self._poke_read)
            os.close(self._poke_write)

    def _start(self) -> None:
        if self._thread is None:
            self._poke_read, self._poke_write = os.pipe()
            os.set_blocking(self._poke_read, False)
            self._thread = threading.Thread(target=self._serve, name="redlock-release-listener", daemon=True)
            self._thread.start()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._poke_write, b"!")

    def _serve(self) -> None:
        connections = [_connection(master, self._node_timeout) for master in self._masters]
        subscribed: list[set[str]] = [set() for _ in connections]
        retry_at = [0.0] * len(connections)
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    wanted = self._waiters.channels()
                poller = select.poll()
                poller.register(self._poke_read, select.POLLIN)
                for index, connection in enumerate(connections):
                    if self._refresh(connection, subscribed[index], wanted, retry_at, index):
                        poller.register(_fileno(connection), select.POLLIN)
                        self._dispatch(connection, subscribed[index], retry_at, index)
                poller.poll(self.HOUSEKEEPING_INTERVAL * 1000)
                with contextlib.suppress(BlockingIOError):
                    os.read(self._poke_read, 4096)
                for index, connection in enumerate(connections):
                    if connection.is_connected:
                        self._dispatch(connection, subscribed[index], retry_at, index)
        finally:
            for connection in connections:
                connection.disconnect()

    def _refresh(
        self, connection: Any, subscribed: set[str], wanted: set[str], retry_at: list[float], index: int
    ) -> bool:
        """Connect if due and bring the subscriptions in line; whether the connection is up."""
        try:
            if not connection.is_connected:
                if time.monotonic() < retry_at[index]:
                    return False
                subscribed.clear()
                connection.connect()
            subscribe, unsubscribe = subscription_changes(wanted, subscribed)
            if subscribe:
                connection.send_command("SUBSCRIBE", *subscribe, check_health=False)
            if unsubscribe:
                connection.send_command("UNSUBSCRIBE", *unsubscribe, check_health=False)
            subscribed.clear()
            subscribed.update(wanted)
            return True
        except Exception:
            self._lost(connection, subscribed, retry_at, index)
            return False

    def _dispatch(self, connection: Any, subscribed: set[str], retry_at: list[float], index: int) -> None:
        try:
            while connection.can_read(timeout=0):
                message = connection.read_response()
                if isinstance(message, list) and message[0] == b"message":
                    with self._lock:
                        self._waiters.released(message[1].decode(), message[2])
        except Exception:
            self._lost(connection, subscribed, retry_at, index)

    def _lost(self, connection: Any, subscribed: set[str], retry_at: list[float], index: int) -> None:
        connection.disconnect()
        subscribed.clear()
        retry_at[index] = time.monotonic() + self.HOUSEKEEPING_INTERVAL


class Redlock(ClusterConfig):
    """A Redlock client on N independent Redis masters; hands out :class:`Lock` objects.

    ``masters`` are ``redis://`` / ``rediss://`` / ``unix://`` URLs or configured
    ``redis.Redis`` clients (only their address and credentials are used: this client makes
    its own connections, with no retries and socket timeouts of ``node_timeout``).

    Defaults, and what each protects against:

    * ``node_timeout=0.05``: the most one master may take to answer one request. A hung or
      unreachable master costs at most this per round, never a hang. Keep it far below ttl.
    * ``clock_drift_factor=0.01``: the share of the ttl not counted on, for masters' and
      clients' clocks running at rates up to 1 % apart (plus 2 ms for expiry precision).
    * ``retry_delay=0.2``: mean delay between attempts of a blocking acquire, jittered
      uniformly over [0.1, 0.3] s so that clients that split a vote do not retry in lockstep.
    * ``unavailable_timeout=10.0``: a blocking acquire with no timeout gives up with
      :class:`~redlock.QuorumUnavailable` after this long without reaching a majority.
    * ``wake_on_release=True``: a waiting acquire listens (pub/sub, one connection per
      master per client) for the release of the lock it waits for and retries at once,
      so a handoff takes about a round trip instead of a retry delay.
    """

    client_types = (redis.Redis,)
    client_kind = "redis.Redis client"
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
        fencing: bool = False,
    ) -> Lock:
        """A Lock on ``name`` that expires after ``ttl`` seconds unless extended.

        ``timeout`` bounds the wait of a ``with`` block. ``auto_extend=True`` keeps the lock
        alive from a daemon thread while it is held (an extend about every ttl/3); if it
        cannot, the lock is marked lost: ``locked()`` turns False, ``on_lost(lock)`` is
        called from that thread, and leaving the ``with`` block raises LockLost.
        ``fencing=True`` gives each holder a ``fencing_token`` larger than every earlier
        holder's (see :mod:`redlock.fencing`).
        """
        spec = self.lock_spec(name, ttl, fencing=fencing)
        return Lock(self, spec, LockOptions.checked(spec, timeout=timeout, auto_extend=auto_extend, on_lost=on_lost))

    def close(self) -> None:
        """Close every connection; Locks of this client cannot be used afterwards."""
        self._driver.close()

    def __enter__(self) -> Redlock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Redlock {len(self.masters)} masters: {', '.join(self.master_names)}>"


class Lock(LockState[Redlock]):
    """A lock on one name, held when a majority of masters carry our token.

    Use it like ``threading.Lock`` (``acquire``/``release`` or ``with``), with the
    difference that the lock expires: rely on it only while :meth:`locked` is true, and
    call :meth:`extend` (or pass ``auto_extend=True``) to keep it longer.
    """

    def __init__(self, cluster: Redlock, spec: LockSpec, options: LockOptions) -> None:
        super().__init__(cluster, spec, options)
        self._renewer: tuple[threading.Thread, threading.Event] | None = None

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Acquire the lock; True if held, False if others hold it (or timeout ran out).

        ``blocking=False`` makes exactly one attempt. ``timeout`` bounds the total wait of
        a blocking acquire; ``None`` waits until acquired. Raises
        :class:`~redlock.QuorumUnavailable` when a majority of masters cannot be reached
        (at once when not blocking; when the timeout, or ``unavailable_timeout``, runs out
        while blocking).
        """
        tokens, flow = self._acquire_flow(blocking, timeout)
        # Interrupted (Ctrl-C) with SETs possibly landed: ours are taken back before leaving.
        result = self._cluster._driver.run(flow, rollback=lambda: self._rollback_flow(tokens))
        lease = self._acquired(result)
        if lease is None:
            return False
        if self._options.auto_extend:
            self._start_renewer(lease)
        return True

    def release(self) -> None:
        """Delete our token on every master; LockLost if a majority no longer held it.

        LockLost too when no majority answered at all (masters down or hung): the token is
        then kept, our keys may block others until they expire, and release() may be retried.
        """
        lease, flow = self._release_flow()
        self._stop_renewer()
        self._released(lease, self._cluster._driver.run(flow))

    def extend(self, ttl: float | None = None) -> float:
        """Reset the lock's ttl (default: its own) on a majority; returns the new validity."""
        lease, flow = self._extend_flow(ttl)
        return self._extended(lease, self._cluster._driver.run(flow))

    def _start_renewer(self, lease: Lease) -> None:
        stop = threading.Event()

        def renew() -> None:
            error: BaseException | None = None
            try:
                self._cluster._driver.run(self._renewal_flow(lease), interrupt=stop)
            except BaseException as unexpected:
                error = unexpected
            self._renewal_finished(lease, error)

        thread = threading.Thread(target=renew, name=f"redlock-renew:{self.name}", daemon=True)
        self._renewer = (thread, stop)
        thread.start()

    def _stop_renewer(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is None:
            return
        thread, stop = renewer
        stop.set()
        if thread is not threading.current_thread():  # on_lost may release from the renewer
            thread.join()

    def __enter__(self) -> Lock:
        if not self.acquire(blocking=True, timeout=self._options.timeout):
            raise self._not_acquired_in_with()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            self.release()
        except LockLost as lost:
            if exc is None:
                raise
            exc.add_note(f"redlock: {lost}")
