"""What both drivers do alike: the driver base, and how a socket to a master is opened.

Where it sits: above the pure connection policy (:mod:`redlock._protocol.connection`),
which it asks what to do at each event, and below the two drivers (:mod:`redlock._io.sync`
over sockets and threads, :mod:`redlock._io.aio` over an event loop), which move the bytes
and wait. This is the lowest layer that does I/O.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from redlock._compiled import mypyc_attr
from redlock._protocol.config import DriverSettings, MasterAddress
from redlock._protocol.connection import (
    CLOSED,
    Connect,
    Connections,
    Interrupted,
    Kind,
    ReplyReader,
    Write,
    reply_parser,
)
from redlock._protocol.core import Handoff, Request, Round, release_channel
from redlock._protocol.facts import MasterFacts
from redlock._protocol.topology import Finding
from redlock.exceptions import ClientClosed

#: TCP keepalive on every connection to a master: the first probe after this many seconds
#: of silence, then every ``KEEPALIVE_INTERVAL``, and the connection is declared dead after
#: ``KEEPALIVE_COUNT`` unanswered probes (about 90 s in all). Well under the idle timeouts
#: of load balancers and NAT gateways (350 s on a common cloud's), so an idle connection is
#: kept alive through them, and one that died silently is found without any traffic of ours.
KEEPALIVE_IDLE = 60
KEEPALIVE_INTERVAL = 10
KEEPALIVE_COUNT = 3


#: The most one read takes off a connection, into that connection's own buffer
#: (:func:`read_buffer`): a TLS record's most, and far more than the replies to a turn's
#: rounds; a longer reply takes more reads.
READ_SIZE = 16384


def read_buffer() -> memoryview:
    """A connection's buffer for reads, kept for its life, so that a read makes no object
    of its own. (asyncio's plain protocols read into a new 256 KiB bytes object each time:
    above glibc's threshold for mapping memory, so each read of a few bytes could cost an
    mmap, an mremap and an munmap, with a page fault; on asyncio's loop at C = 1 that was
    up to a third of a lock+unlock's CPU.) A view, since asyncio's TLS transport reads the
    rest of a record into ``buffer[offset:]``, and a bytearray's slice would be a copy."""
    return memoryview(bytearray(READ_SIZE))


def keep_alive(sock: socket.socket) -> None:
    """Turn on TCP keepalive with the intervals above (where the platform has them)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def open_socket(master: MasterAddress, timeout: float) -> socket.socket:
    """A socket connected to ``master`` (TLS handshake done) within ``timeout`` seconds;
    blocking, with ``timeout`` as its timeout."""
    deadline = time.monotonic() + timeout
    sock: socket.socket
    if master.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(master.path)
        except BaseException:
            sock.close()
            raise
    else:
        sock = socket.create_connection((master.host, master.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        keep_alive(sock)
    if master.ssl_context is not None:
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock = master.ssl_context.wrap_socket(sock, server_hostname=master.server_hostname)
        except BaseException:
            sock.close()
            raise
    sock.settimeout(timeout)
    return sock


class Connection(Protocol):
    """What a driver's connection object has for the shared code: whose it is, its parser."""

    kind: Kind
    node: int
    parser: ReplyReader


ConnectionT = TypeVar("ConnectionT", bound=Connection)


# (Tests derive from the drivers to take a step out: see tests/test_resets.py.)
@mypyc_attr(allow_interpreted_subclasses=True)
class DriverBase(Generic[ConnectionT]):
    """What both drivers do alike, written once: the masters and settings, the policy, the
    connections by (kind, master), and what follows each event (an action to carry out, a
    connect that finished, replies that arrived, a connection lost, a fork, a close).
    Subclasses move the bytes, open the connections and wait; the sync driver calls all of
    this under its lock."""

    def __init__(self, settings: DriverSettings) -> None:
        self._masters = settings.masters
        self._node_timeout = settings.node_timeout
        self._connect_timeout = settings.connect_timeout
        self._clock = settings.clock
        self._wake_on_release = settings.wake_on_release
        self._reply_limits = (settings.max_reply_bytes, settings.max_reply_elements)
        self._policy = Connections(
            [m.name for m in self._masters],
            [m.credentials for m in self._masters],
            node_timeout=self._node_timeout,
            connect_timeout=self._connect_timeout,
            health_check_interval=settings.health_check_interval,
            strict=settings.strict,
        )
        #: close() was called: no new operations; clean-ups under way still run.
        self._closed = False
        #: The connections are torn down: a connect that finishes now hangs up at once.
        self._shut = False
        self._fresh_process_state()

    def _fresh_process_state(self) -> None:
        """What belongs to one process (connections, threads): a fork's child starts anew."""
        self._pid = os.getpid()
        self._conns: dict[tuple[Kind, int], ConnectionT] = {}

    def _reply_parser(self) -> ReplyReader:
        """A new connection's parser, within the client's limits on a reply's size."""
        return reply_parser(*self._reply_limits)

    # --- what a subclass provides -------------------------------------------------------------

    def _write(self, conn: ConnectionT, data: bytes) -> None:
        """Write ``data`` on ``conn`` behind everything written on it before."""
        raise NotImplementedError

    def _drop(self, conn: ConnectionT) -> None:
        """Close ``conn``, already out of ``_conns``; nothing more may be written on it."""
        raise NotImplementedError

    def _abandon(self, conn: ConnectionT) -> None:
        """In a fork's child: let go of the parent's ``conn`` without touching the connection."""
        raise NotImplementedError

    def _start_connect(self, connect: Connect) -> None:
        """Open the connection; hand the outcome to :meth:`_connect_finished`."""
        raise NotImplementedError

    # --- events ----------------------------------------------------------------------------

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise ClientClosed("this Redlock client is closed")

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            self.after_fork()  # (besides the at-fork hook, which is process-wide: belt and braces)

    def after_fork(self) -> None:
        """In a fork's child: drop what belongs to the parent, without touching it (a reply
        read here would be stolen from the parent), and start over lazily."""
        for conn in self._conns.values():
            self._abandon(conn)
        self._policy.forget()
        self._fresh_process_state()

    def _carry_out(self, action: Write | Connect | None) -> None:
        if isinstance(action, Write):
            conn = self._conns.get((action.kind, action.node))
            if conn is not None and action.data:
                self._write(conn, action.data)
        elif isinstance(action, Connect) and self._shut:
            # Closed: the clean-up that asked has nothing to reach; tell it now, not after
            # a connect_timeout of waiting for a connect nobody will make.
            self._carry_out(self._policy.connected(action, ClientClosed(CLOSED), self._clock()))
        elif isinstance(action, Connect):
            old = self._conns.pop((action.kind, action.node), None)
            if old is not None:  # the policy gave it up (an unanswered health check)
                self._drop(old)
                self._connections_changed()
            self._start_connect(action)

    def _connect_finished(self, connect: Connect, conn: ConnectionT | None, error: BaseException | None) -> bool:
        """A connect ended with ``conn`` up, or ``error``. False: it is stale (the client was
        closed or forked, or the link moved on); the caller closes ``conn``."""
        if self._shut or not self._policy.is_current(connect) or os.getpid() != self._pid:
            return False
        if conn is not None:
            self._conns[(connect.kind, connect.node)] = conn
            self._connections_changed()
        try:
            self._carry_out(self._policy.connected(connect, error, self._clock()))
        except BaseException as interruption:
            if conn is not None:
                # Between the policy counting the handshake sent and its bytes queued (a
                # signal handler that raises): the next command would go out before AUTH,
                # and its NOAUTH be read as the answer to AUTH. The connection starts over.
                self._lose(connect.kind, connect.node, Interrupted(f"interrupted mid-handshake: {interruption!r}"))
            raise
        return True

    def _connections_changed(self) -> None:
        """A hook: a connection came or went."""

    def _replies_arrived(self, conn: ConnectionT, failure: BaseException | None = None) -> None:
        """``conn``'s parser was fed (then the socket failed with ``failure``, if given):
        match every whole reply, write what the policy says, hang up if it says so."""
        outcome = self._policy.received(conn.kind, conn.node, conn.parser, self._clock())
        if outcome.write:
            self._write(conn, outcome.write)
        if outcome.hang_up:
            del self._conns[(conn.kind, conn.node)]
            self._drop(conn)
            self._connections_changed()
        elif outcome.failure is not None or failure is not None:
            self._lose(conn.kind, conn.node, outcome.failure or failure or "lost")

    def _lost_mid_write(self, node: int | None, interruption: BaseException) -> None:
        """An exception came between recording a command to ``node`` as in flight and
        queueing all of its bytes (Ctrl-C, a signal handler that raises): that link can no
        longer match replies to commands, so it starts over."""
        if node is not None:
            self._lose("command", node, Interrupted(f"interrupted mid-write: {interruption!r}"))

    def _lose(self, kind: Kind, node: int, error: BaseException | str) -> None:
        """The connection failed (or must start over): close it, tell the policy."""
        conn = self._conns.pop((kind, node), None)
        if conn is not None:
            self._drop(conn)
            self._connections_changed()
        self._carry_out(self._policy.lost(kind, node, error, self._clock()))

    @property
    def closed(self) -> bool:
        return self._closed

    def connection_states(self) -> list[tuple[bool, bool]]:
        """Whether each master's command and subscriber connections are up (none once closed)."""
        if self._closed:
            return []
        return self._policy.connection_states()

    # --- what the masters are (see redlock._protocol.topology) ---------------------------------------

    @staticmethod
    def _thrown(flow: Generator[Request, float, object], interruption: BaseException) -> Request:
        """Throw what interrupted a flow into it: the first request of its clean-up (an
        acquire's rollback: see :func:`redlock._protocol.flows.committed_acquire`); raises the
        interruption once the flow has none. An interruption never turns into a return:
        not when a flow ends after a throw, nor for a flow that raised it and ended already
        (compiled by mypyc, such a flow raises StopIteration where Python re-raises)."""
        try:
            return flow.throw(interruption)
        except StopIteration:
            pass
        raise interruption

    @staticmethod
    def _first(flow: Generator[Request, float, object], thrown: BaseException | None) -> Request:
        """The flow's first request: its start; or, for an interruption ``thrown`` that
        escaped the driver before it reached the flow (it landed in the driver's own lines,
        between two steps), the first request of the flow's clean-up (raising it back at
        once from a flow that had it already, has no clean-up, or has ended)."""
        return next(flow) if thrown is None else DriverBase._thrown(flow, thrown)

    def _out_of_line(self, waiting: tuple[str, Any] | None) -> None:
        """Leave the waiters for a release: a flow's place among them (see each driver's
        ``_pause``), once it pauses no more."""
        if waiting is not None:
            with self._guarded():
                self._policy.waiters.discard(*waiting)

    def _guarded(self) -> AbstractContextManager[object]:
        """Held around a look at the policy from outside the driver's own events (the sync
        driver's lock: its threads change the policy as replies arrive)."""
        return contextlib.nullcontext()

    def released_here(self, key: str, token: str, *, to_all: bool = False) -> None:
        """A Lock of this client released ``key``: the first of its waiters here tries now,
        not once the masters' announcement comes back (which then finds the token counted
        and wakes nobody else), and also where wake-up on release is off: the line of this
        client's waiters (see :class:`~redlock._protocol.core.Line`) moves on at each local release.

        Not a release ``to_all`` (the end of a chain of handovers, see
        :meth:`~redlock._protocol.connection.Waiters.claim`) where the announcement wakes waiters:
        this client's then hear of it as other clients' do, with no head start."""
        if to_all and self._wake_on_release:
            return
        channel = release_channel(key)
        if not self._policy.waiters.may_be_waiting(channel):
            return
        with self._guarded():
            self._policy.waiters.released(channel, token.encode())

    def claim_handoff(self, key: str, expires_at: float) -> tuple[Handoff | None, bool]:
        """A Lock of this client is about to release ``key``: a waiter here to hand it over
        to, claimed (see :meth:`~redlock._protocol.connection.Waiters.claim`), if any."""
        channel = release_channel(key)
        if not self._policy.waiters.may_be_waiting(channel):
            return None, False
        with self._guarded():
            return self._policy.waiters.claim(channel, self._clock(), expires_at)

    def handed_over(self, handoff: Handoff) -> None:
        """The swap for ``handoff`` is done: its waiter wakes and takes it (unless it was woken
        already, when the swap reached a majority)."""
        with self._guarded():
            self._policy.waiters.handoffs.handed_over(handoff)

    def report_findings(self, callback: Callable[[int, Finding], None]) -> None:
        """Tell ``callback(master, finding)`` of every warning and refusal found at a handshake."""
        with self._guarded():
            self._policy.on_finding = callback

    def note_fencing(self) -> None:
        """A fenced lock was made: masters without an append-only file are warned about."""
        with self._guarded():
            self._policy.use_fencing(self._clock())

    def rejudge(self) -> None:
        """Ask every connected master what it is again, ahead of what is sent next.

        ClientClosed once closed: ``check()`` starts here, and its first round, which looks
        now like a clean-up, would otherwise run on a closed client.
        """
        self._raise_if_closed()
        with self._guarded():
            for write in self._policy.rejudge(self._clock()):
                self._carry_out(write)

    def topology(self) -> tuple[list[MasterFacts], list[str | None], bool]:
        """What each master said at its current connection's handshake, which earlier master
        each one is the same server as, and whether fencing is in use."""
        with self._guarded():
            return self._policy.facts(), self._policy.same_servers(), self._policy.fencing

    def _overtime(self, round_: Round, deadline: float) -> float | None:
        """A round's timeout passed at ``deadline``: until when it still waits, if at all."""
        for connect in self._policy.expire_probes(self._clock()):
            self._carry_out(connect)
        until = self._policy.overtime(round_, deadline)
        return None if until is None or until <= self._clock() else until  # (past: the client was closed)

    def _begin_close(self) -> float:
        """No new operations; waiting acquires look again, find the client closed and stop.
        Returns until when close() lets the operations under way finish their clean-ups and
        the connects under way deliver their backlog (the SET of an acquire the others
        decided, then its release) before hanging up."""
        self._closed = True
        for event in self._policy.waiters.all_events():
            event.set()
        return time.monotonic() + self._connect_timeout + 2 * self._node_timeout

    def _hang_up_all(self) -> None:
        self._shut = True
        for kind, node in list(self._conns):
            self._lose(kind, node, ClientClosed(CLOSED))
        self._policy.close(self._clock())
