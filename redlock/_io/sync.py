"""The synchronous driver: the lock flows over non-blocking sockets and threads.

It runs the pure flows of :mod:`redlock._protocol.flows` over the connection policy of
:mod:`redlock._protocol.connection`, doing what both drivers do alike through
:class:`redlock._io.driver.DriverBase`: one command connection and one subscriber
connection per master, shared by every thread that uses the client.

Threads (leader and followers)
    A round is written by the calling thread and read by a calling thread too: of the
    threads waiting for rounds, one at a time, the *leader*, polls every command socket,
    feeds the RESP parsers and records each reply in the round that asked for it (first in,
    first out), for all of them; the others sleep on an event until their round is settled,
    their deadline passes, or the leader hands over. A lone operation therefore never leaves
    its thread: no wake-up of another thread stands between a reply and its caller, which
    is most of what a lock costs on loopback. Beside other flows, a thread sends its round
    without holding the lock, and the commands other threads queue meanwhile go out in the
    same ``send`` (one write per master for many rounds).

    The client's I/O thread keeps what nobody waits for: the subscriber connections
    (wake-up on release), bytes that a socket could not take at once, and, while no flow is
    under way, the command connections (a late reply, a master that closed its end).
    Connects (TCP, TLS, handshake) run in short-lived threads of their own, so a host that
    does not answer never holds up the others.

One lock (``Driver._lock``) covers the policy state, the sockets' write buffers and the
rounds' outcomes; it is only ever held for non-blocking work.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable
from typing import TypeVar

from redlock._compiled import mypyc_attr
from redlock._io.driver import READ_SIZE, DriverBase, open_socket, read_buffer
from redlock._io.held_weakly import ForkHook, Ticket
from redlock._protocol.config import DriverSettings
from redlock._protocol.connection import Connect, Interrupted, Kind, ReplyReader, Write
from redlock._protocol.core import Pause, Request, Round, release_channel

R = TypeVar("R")
T = TypeVar("T")

#: How often the I/O thread looks at subscribers waiting to reconnect, with nothing to read.
_HOUSEKEEPING = 0.5
#: While a master is connecting, how often a leader looks for its new socket.
_NEW_SOCKET_CHECK = 0.002


#: A flow's place among the waiters for a release: the channel and its event.
_Waiting = tuple[str, threading.Event]


def _poller_of(fds: Iterable[int]) -> select.poll:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return poller


class _Socket:
    """A connected socket, its reply parser and what is still to be written on it."""

    def __init__(self, kind: Kind, node: int, sock: socket.socket, parser: ReplyReader) -> None:
        self.kind = kind
        self.node = node
        self.sock = sock
        sock.setblocking(False)
        self.fileno = sock.fileno()
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.parser = parser
        #: What a read takes the socket's bytes into.
        self.buffer = read_buffer()
        #: Bytes not yet taken by the socket, in order.
        self.outbuf = bytearray()
        #: A calling thread is sending ``outbuf`` without the lock: nobody else sends on
        #: this socket meanwhile, and what they add is sent by that thread after its part.
        self.sending = False

    def abandon(self) -> None:
        """Close our file descriptor only: no shutdown, no TLS close_notify, so a process
        that shares the socket (a parent, after fork) keeps its connection intact."""
        with contextlib.suppress(OSError):
            self.sock.close()


def _send(conn: _Socket, data: bytes | bytearray) -> int | OSError:
    """Bytes the socket took (0 if it is full), or why it failed."""
    try:
        return conn.sock.send(data)
    except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
        return 0
    except OSError as error:
        return error


_FORK_HOOKS: weakref.WeakSet[ForkHook] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for hook in list(_FORK_HOOKS):
        hook.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


# (Open to Python subclasses, compiled: tests/test_resets.py takes a step out in one.)
@mypyc_attr(allow_interpreted_subclasses=True)
class Driver(DriverBase["_Socket"]):
    """Runs flows for one Redlock client over one connection per master; see the module."""

    def __init__(self, settings: DriverSettings) -> None:
        super().__init__(settings)
        self._fork_hook = ForkHook(self.after_fork)
        _FORK_HOOKS.add(self._fork_hook)

    def _fresh_process_state(self) -> None:
        super()._fresh_process_state()
        self._lock = threading.Lock()
        #: The stop events of flows that pause long (renewers): close() sets them.
        self._interrupts: set[threading.Event] = set()
        self._io_thread: threading.Thread | None = None
        self._poke_read = self._poke_write = -1
        #: Flows under way: close() lets them finish (their clean-ups) before hanging up.
        #: Weak: a flow whose run() a Ctrl-C left before it could say so is gone with it.
        #: (Its ticket, not the flow: a compiled flow's generator takes no weak reference.)
        self._running: weakref.WeakSet[Ticket] = weakref.WeakSet()
        #: The waiting thread that reads the command sockets for everyone (by its event),
        #: and until when its claim holds: past that, a claim left by an interrupted thread
        #: is void.
        self._leader: threading.Event | None = None
        self._leader_until = 0.0
        #: The other waiting threads, by their events: one of them leads next.
        self._followers: dict[threading.Event, None] = {}
        self._thread_events = threading.local()
        #: Polls of every command socket: the leader's (polled without the lock), and one
        #: polled only under the lock, before writing (a poll object may not be polled by two
        #: threads at once).
        self._command_poller: tuple[select.poll, dict[int, _Socket]] | None = None

    def after_fork(self) -> None:
        # The threads do not exist here, and the lock may have been held by one of them;
        # our copies of the parent's file descriptors are closed, which it does not notice.
        for fd in (self._poke_read, self._poke_write):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        super().after_fork()

    def _abandon(self, conn: _Socket) -> None:
        conn.abandon()

    def _guarded(self) -> threading.Lock:
        return self._lock

    # --- running flows ----------------------------------------------------------------------

    def run(
        self,
        flow: Generator[Request, float, R],
        commit: Callable[[R], T],
        *,
        interrupt: threading.Event | None = None,
        cleans_up: bool = False,
    ) -> T:
        """Run ``flow`` and hand its result to ``commit``; return what that returns.

        ``interrupt`` cuts the flow's pauses short (a renewer's stop). ``cleans_up``: the flow
        has a clean-up (:func:`redlock._protocol.flows.committed_acquire`), which also runs
        for an interruption that landed in the driver's own lines, between two of its steps. Whatever interrupts a
        round or a pause (Ctrl-C, an error) is thrown into the flow, and the rounds of its
        clean-up (an acquire's rollback: see :func:`redlock._protocol.flows.committed_acquire`) run
        before the exception goes on: on the same connections, so on each master after what
        they undo.
        """
        self._check_fork()
        running = Ticket()
        try:
            with self._lock:
                self._running.add(running)
                if interrupt is not None:
                    self._interrupts.add(interrupt)
            return commit(self._drive(flow, interrupt))
        except BaseException as escaped:
            if not cleans_up:
                raise
            # Landed in the driver's own lines, it never reached the flow: its clean-up (an
            # acquire's rollback, the one flow that has one) runs now, before it goes on.
            seen = escaped.__traceback__
            with contextlib.suppress(BaseException):
                self._drive(flow, interrupt, thrown=escaped)
            escaped.__traceback__ = seen
            raise escaped
        finally:
            flow.close()
            with self._lock:
                self._running.discard(running)
                if interrupt is not None:
                    self._interrupts.discard(interrupt)

    def _drive(
        self, flow: Generator[Request, float, R], interrupt: threading.Event | None, thrown: BaseException | None = None
    ) -> R:
        waiting: _Waiting | None = None
        try:
            request = self._first(flow, thrown)
            while True:
                try:
                    if isinstance(request, Round):
                        self._run_round(request)
                    else:
                        waiting = self._pause(request, interrupt, waiting)
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

    def _run_round(self, round_: Round) -> None:
        if not round_.cleanup:  # a clean-up still runs: it takes our keys back
            self._raise_if_closed()
        wake = self._wake_event()
        now = self._clock()
        deadline = now + round_.timeout
        claimed: list[_Socket] = []
        try:
            with self._lock:
                self._submit(round_, now, claimed)
            if claimed:
                self._send_claimed(claimed)
        except BaseException as interruption:
            # Ctrl-C around a send: how much of it left is unknown, so those links start over.
            with self._lock:
                for conn in claimed:
                    if conn.sending:
                        conn.sending = False
                        if self._conns.get((conn.kind, conn.node)) is conn:
                            self._lose(conn.kind, conn.node, Interrupted(f"interrupted mid-send: {interruption!r}"))
                        else:
                            conn.abandon()
            raise
        until: float | None = deadline
        while until is not None:
            self._await(round_, wake, until)
            with self._lock:
                if round_.settled:
                    until = None
                else:
                    self._last_look(round_)
                    until = self._overtime(round_, deadline)
        with self._lock:
            self._policy.wake(round_, None)
            self._policy.time_out(round_)

    def _wake_event(self) -> threading.Event:
        """The calling thread's event for waiting as a follower: one per thread, reused by
        its rounds (a thread waits for one round at a time; a stale wake-up is harmless,
        since a follower looks again before it sleeps)."""
        wake: threading.Event | None = getattr(self._thread_events, "wake", None)
        if wake is None:
            wake = self._thread_events.wake = threading.Event()
        return wake

    def _await(self, round_: Round, wake: threading.Event, until: float) -> None:
        """Until ``round_`` is settled or ``until``: lead (read for every waiting round) if
        nobody does, else follow (sleep until woken by the leader)."""
        try:
            while True:
                with self._lock:
                    now = self._clock()
                    if round_.settled or now >= until:
                        return
                    if self._leader is None or self._leader is wake or now > self._leader_until:
                        self._leader, self._leader_until = wake, until + self._node_timeout
                        self._followers.pop(wake, None)
                        self._policy.wake(round_, None)  # a leader sees its round settle as it reads
                        poller, watched = self._command_sockets()
                        timeout = until - now
                        if len(watched) < len(self._masters) and self._policy.connecting():
                            timeout = min(timeout, _NEW_SOCKET_CHECK)  # its socket is not polled yet
                    else:
                        self._followers[wake] = None
                        wake.clear()
                        self._policy.wake(round_, wake.set)
                        poller = None
                if poller is None:
                    wake.wait(until - now)
                    continue
                ready = poller.poll(timeout * 1000)
                with self._lock:
                    for fd, _ in ready:
                        conn = watched[fd]
                        if self._conns.get(("command", conn.node)) is conn:
                            self._read(conn)
        finally:
            with self._lock:
                self._followers.pop(wake, None)
                self._policy.wake(round_, None)  # (interrupted: nobody is left to wake)
                if self._leader is wake:
                    self._leader = None
                if self._leader is None and self._followers:
                    # Somebody still waits: the first one leads now.
                    next(iter(self._followers)).set()

    def _command_sockets(self, *, leader: bool = True) -> tuple[select.poll, dict[int, _Socket]]:
        """Under the lock: a poll of every command socket, made anew only when they change.

        A leader polls outside the lock, with a poller of its own thread's: a leader held
        off the CPU past its time is taken over while it may still be in poll(), and a
        poll object refuses a second caller (RuntimeError: concurrent poll() invocation,
        seen in the self-test at nice 19). Lookers poll under the lock and share one."""
        if self._command_poller is None:
            watched = {conn.fileno: conn for conn in self._conns.values() if conn.kind == "command"}
            self._command_poller = (_poller_of(watched), watched)
        lookers, watched = self._command_poller
        if not leader:
            return lookers, watched
        mine: tuple[dict[int, _Socket], select.poll] | None = getattr(self._thread_events, "poller", None)
        if mine is None or mine[0] is not watched:
            mine = self._thread_events.poller = (watched, _poller_of(watched))
        return mine[1], watched

    def _last_look(self, round_: Round) -> None:
        """Read what the round's masters have sent by now, before calling them late.

        A reply already in our socket buffer was in time: only our own process (the leader
        waiting for the GIL behind busy threads) kept it from being read, and that must not
        count against the master as a timeout.
        """
        for node in round_.pending:
            conn = self._conns.get(("command", node))
            if conn is not None:
                self._read(conn)

    def _submit(self, round_: Round, now: float, claimed: list[_Socket]) -> None:
        """Under the lock: queue, or skip, the round's command on every target; adds to
        ``claimed`` the sockets whose bytes this thread is to send (:meth:`_send_claimed`)."""
        self._ensure_io_thread()
        self._look_before_writing()
        # Alone: no other thread could add to our send, so it goes out now, as it is.
        alone = len(self._running) == 1
        sending: int | None = None
        try:
            for node in round_.targets:
                conn = self._conns.get(("command", node))
                sending = node
                action = self._policy.submit(round_, node, now)
                if isinstance(action, Write) and conn is not None:
                    conn.outbuf += action.data
                    if conn.tls or alone:  # (TLS: one TLS object may not send and receive at once)
                        self._flush(conn)
                    elif not conn.sending:
                        claimed.append(conn)  # first: a claim is always in the list
                        conn.sending = True
                else:
                    self._carry_out(action)
                sending = None
        except BaseException as interruption:
            self._lost_mid_write(sending, interruption)
            raise

    def _look_before_writing(self) -> None:
        """Under the lock: read what the command sockets hold, without waiting (one poll for
        all of them, nothing to read in the common case). While flows run, replies are
        read only by a thread that waits for one (see the module), so a master that closed
        its end meanwhile (its idle ``timeout``, CLIENT KILL, a restart) has said so only
        here: the command then goes on a new connection, not into a dead one. What a master
        that looks hung owes may be here too."""
        poller, watched = self._command_sockets(leader=False)
        for fd, _ in poller.poll(0):
            conn = watched[fd]
            if self._conns.get(("command", conn.node)) is conn:
                self._read(conn)

    def _send_claimed(self, claimed: list[_Socket]) -> None:
        """Send the claimed sockets' bytes without the lock, so that the commands other
        threads queue meanwhile leave in the same ``send`` as ours (one write per master
        for many rounds), and no thread waits for the lock behind a system call."""
        with self._lock:
            chunks = []
            for conn in claimed:
                if self._conns.get((conn.kind, conn.node)) is conn:
                    chunks.append((conn, bytes(conn.outbuf)))
                else:  # lost since: nothing more may be written on it (its rounds know)
                    conn.sending = False
                    conn.abandon()
        while chunks:
            results = [(conn, len(chunk), _send(conn, chunk)) for conn, chunk in chunks]
            with self._lock:
                chunks = []
                for conn, size, outcome in results:
                    if self._conns.get((conn.kind, conn.node)) is not conn:
                        conn.sending = False  # lost meanwhile: its rounds know; ours to close
                        conn.abandon()
                    elif isinstance(outcome, OSError):
                        conn.sending = False
                        self._lose(conn.kind, conn.node, outcome)
                    else:
                        del conn.outbuf[:outcome]
                        if outcome == size and conn.outbuf:
                            chunks.append((conn, bytes(conn.outbuf)))  # queued by others meanwhile
                        else:
                            conn.sending = False
                            if conn.outbuf:
                                self._poke()  # the socket is full: the I/O thread writes the rest

    def _pause(self, pause: Pause, interrupt: threading.Event | None, waiting: _Waiting | None) -> _Waiting | None:
        """Wait as ``pause`` says; returns the flow's place among the waiters for a release
        (kept across its pauses, so that its place in line holds while it tries)."""
        self._raise_if_closed()
        if interrupt is not None:
            interrupt.wait(pause.seconds)
        elif pause.wake_on is not None and (self._wake_on_release or pause.line is not None):
            return self._wait_for_release(release_channel(pause.wake_on), pause, waiting)
        else:
            time.sleep(pause.seconds)
        return waiting

    def _wait_for_release(self, channel: str, pause: Pause, waiting: _Waiting | None) -> _Waiting:
        """Sleep until ``channel`` announces a release (one waiter per release) or time runs
        out; in line (see :class:`~redlock._protocol.core.Line`), until it is this waiter's turn."""
        waiters = self._policy.waiters
        with self._lock:
            if waiting is None or waiting[0] != channel:  # (a multi-name lock waits on the name found held)
                if waiting is not None:
                    waiters.discard(*waiting)
                waiting = (channel, threading.Event())
                waiters.add(*waiting, in_line=pause.line is not None, handoff=pause.handoff)
            event = waiting[1]
            steps = waiters.waits(channel, event, pause.seconds, pause.line, self._clock, handoff=pause.handoff)
            wait = next(steps, None)
            if wait is not None and self._wake_on_release:
                self._ensure_io_thread()
        if wait is not None and self._wake_on_release:
            self._poke()  # the I/O thread subscribes
        while wait is not None:
            event.wait(wait)
            with self._lock:
                wait = next(steps, None)
        with self._lock:  # (the I/O thread sets it under the lock: one wake-up is not lost between)
            event.clear()
        return waiting

    def close(self) -> None:
        with self._lock:
            give_up = self._begin_close()
            interrupts = list(self._interrupts)
        for interrupt in interrupts:
            interrupt.set()  # renewers stop at their next step
        # Write buffers drain too, within the same bound.
        while time.monotonic() < give_up:
            with self._lock:
                busy = self._running or self._policy.delivering() or any(conn.outbuf for conn in self._conns.values())
            if not busy:
                break
            time.sleep(0.001)
        with self._lock:
            thread = self._io_thread
            self._io_thread = None
            self._hang_up_all()
        if thread is not None:
            self._poke()
            thread.join(timeout=5)
            os.close(self._poke_read)
            os.close(self._poke_write)
            self._poke_read = self._poke_write = -1

    # --- sockets (all under self._lock) -----------------------------------------------------

    def _start_connect(self, connect: Connect) -> None:
        threading.Thread(
            target=self._connect, args=(connect,), name=f"redlock-connect-{connect.node}", daemon=True
        ).start()

    def _connect(self, connect: Connect) -> None:
        """In a connect thread: open the socket, then hand it over (or report why not)."""
        sock: socket.socket | None = None
        error: BaseException | None = None
        try:
            sock = open_socket(self._masters[connect.node], self._connect_timeout)
        except Exception as failure:
            error = failure
        with self._lock:
            conn = None if sock is None else _Socket(connect.kind, connect.node, sock, self._reply_parser())
            if not self._connect_finished(connect, conn, error) and sock is not None:
                sock.close()
        self._poke()  # the I/O thread has a new socket to read

    def _connections_changed(self) -> None:
        self._command_poller = None

    def _write(self, conn: _Socket, data: bytes) -> None:
        conn.outbuf += data  # behind what waits already: order is the whole point
        self._flush(conn)

    def _flush(self, conn: _Socket) -> None:
        if conn.sending or not conn.outbuf:
            return  # a thread sending without the lock takes these too
        sent = _send(conn, conn.outbuf)
        if isinstance(sent, OSError):
            self._lose(conn.kind, conn.node, sent)
            return
        del conn.outbuf[:sent]
        if conn.outbuf:
            self._poke()  # the I/O thread writes the rest when the socket can take it

    def _drop(self, conn: _Socket) -> None:
        """Close a lost socket, unless a thread is sending on it without the lock. That
        thread closes it once its ``send`` returns: closed now, its number could go to a new
        connection before that ``send`` reads it, and our bytes would land there."""
        if not conn.sending:
            conn.abandon()

    def _read(self, conn: _Socket) -> None:
        try:
            self._take_replies(conn)
        except BaseException as interruption:
            # Ctrl-C between taking bytes off the socket and recording every reply in them:
            # what follows can no longer be matched to its command, so the link starts over.
            if self._conns.get((conn.kind, conn.node)) is conn:
                self._lose(conn.kind, conn.node, Interrupted(f"interrupted mid-read: {interruption!r}"))
            raise

    def _take_replies(self, conn: _Socket) -> None:
        failure: BaseException | None = None
        try:
            while True:
                taken = conn.sock.recv_into(conn.buffer)
                if not taken:
                    raise ConnectionResetError("the master closed the connection")
                conn.parser.feed(conn.buffer, 0, taken)  # (the parser copies what it keeps)
                if taken < READ_SIZE and not conn.tls:
                    break
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except Exception as error:
            failure = error  # what arrived before the failure still counts
        self._replies_arrived(conn, failure)

    # --- the I/O thread -------------------------------------------------------------------

    def _ensure_io_thread(self) -> None:
        if self._io_thread is None and not self._shut:
            self._poke_read, self._poke_write = os.pipe()
            os.set_blocking(self._poke_read, False)
            os.set_blocking(self._poke_write, False)
            self._io_thread = threading.Thread(target=self._serve, name="redlock-io", daemon=True)
            self._io_thread.start()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._poke_write, b"!")

    def _serve(self) -> None:
        me = threading.current_thread()
        poke = self._poke_read
        while True:
            with self._lock:
                if self._io_thread is not me:
                    return
                for action in self._policy.subscriptions(self._wake_on_release, self._clock()):
                    self._carry_out(action)
                poller = select.poll()
                poller.register(poke, select.POLLIN)
                watched = {}
                # Command replies are the waiting threads' to read (see the module); with no
                # flow under way, what comes (a late reply, a master hanging up) is ours.
                idle = not self._running
                for conn in self._conns.values():
                    events = select.POLLIN if conn.kind == "subscriber" or idle else 0
                    if conn.outbuf and not conn.sending:  # (a sending thread writes its own)
                        events |= select.POLLOUT
                    if events:
                        watched[conn.fileno] = conn
                        poller.register(conn.fileno, events)
            ready = poller.poll(_HOUSEKEEPING * 1000)
            with self._lock:
                if self._io_thread is not me:
                    return
                for fd, events in ready:
                    if fd == poke:
                        with contextlib.suppress(BlockingIOError):
                            os.read(poke, 4096)
                        continue
                    conn = watched[fd]
                    if self._conns.get((conn.kind, conn.node)) is not conn:
                        continue  # lost meanwhile
                    if events & select.POLLOUT:
                        self._flush(conn)
                    if (
                        events & (select.POLLIN | select.POLLHUP | select.POLLERR)
                        and self._conns.get((conn.kind, conn.node)) is conn
                        and (conn.kind == "subscriber" or not self._running)
                    ):
                        self._read(conn)
