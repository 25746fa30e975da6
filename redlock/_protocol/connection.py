"""The connection policy: one multiplexed, ordered connection per master, without I/O.

Where it sits: at the top of :mod:`redlock._protocol`, below the drivers of
:mod:`redlock._io`. Both drivers (:mod:`redlock._io.sync` over sockets and threads,
:mod:`redlock._io.aio` over an event loop's transports) keep one command connection per
master per client, shared by every concurrent operation of that client, and one subscriber
connection per master for wake-up on release. Everything they decide about those
connections is written once, here: what a round may send to a master now, what waits for a
connect, what is skipped as hung, how replies are matched to the rounds that asked, what a
connection says first, what a failure means, and when to reconnect. What the drivers do
alike with each answer is :class:`redlock._io.driver.DriverBase`; they only move bytes and
wake waiters.

Theory of operation
-------------------
A :class:`Link` is one master's command connection. A round *submits* to it; the link
answers with what the driver must do:

* ``SEND``: the link is ready; the command was recorded as in flight and the driver writes
  its bytes now.
* ``CONNECT``: nothing is connected; the command was queued and the driver starts a connect
  (its own ``connect_timeout``, beside the rounds: connecting is not a round). When the
  socket is up, :meth:`Link.connected` returns the handshake followed by the queued
  commands, in order, and the driver writes them all at once.
* ``QUEUED``: a connect is under way; the command waits behind the ones queued before it.
* ``SKIPPED``: the round already has this master's outcome (hung, or waiting to reconnect
  after a failure, or misconfigured): nothing is sent.

**Per-master order is the guarantee that kills orphan keys.** Every command that any
operation of a client sends to one master travels on that master's single link, after the
commands submitted before it: queued commands are written in queue order, before anything
submitted later. So a release or rollback can never overtake the SET it undoes, even when
the SET's round was decided by the other masters long ago and the SET still waits for a
slow connect. Nothing ever re-orders a link's queue; a connection that fails takes every
command not yet written with it (none of them can land), and a new connection starts empty.

Redis answers on one connection strictly in order, so replies are matched to commands
first-in-first-out (:attr:`Link.in_flight`). A reply whose round has settled (it no
longer waits for this master) is dropped; a round that waits records it.

A master that owes a reply for longer than four ``node_timeout`` (or too many replies)
looks hung: rounds skip it rather than pile more commands into a socket nobody reads;
clean-ups (rollbacks, releases) are still sent, up to twice the bound, since refusing them
would leave our keys behind, but nobody waits for their answer. A failed connect is
retried with exponential backoff; meanwhile rounds get the last failure at once instead of
waiting for their deadline (clean-ups try at once anyway).

Configuration errors are not outages: a wrong password (``WRONGPASS``/``NOAUTH``), a
missing ACL permission (``NOPERM``), an untrusted TLS certificate, a reply that is not
RESP, a replica's ``READONLY`` or a cluster node's ``MOVED``/``ASK``/``CROSSSLOT`` make the
master :attr:`~redlock.NodeStatus.MISCONFIGURED`, which the lock flows turn into
:class:`~redlock.MasterMisconfigured` when no majority is left.

So does what a master says about itself at the handshake (``INFO``), judged by the rules of
:mod:`redlock._protocol.topology`. A cluster node, a replica, or the same server as another master
(its ``run_id``) is *refused*: every round waiting for it learns why, and later rounds are
told at once, without sending, while clean-ups still go (they take our keys back, and the
handshake carried the queued commands). The connection stays up: once a second at most, a
round that finds it refused asks ``INFO`` again on it, and a master that has changed (a
replica promoted) is back at once, with no reconnect churn. A risk (replicas attached, an
evicting ``maxmemory-policy``, fencing without an append-only file) is logged once per
connection and handed to :attr:`Connections.on_finding`; with ``strict`` each is a refusal.

**Native commands.** A command with native forms (a lock's release and extend: see
:class:`~redlock._protocol.core.NativeForm`) goes to each master in the form it runs: the built-in
command where the handshake found it (``COMMAND INFO``, or the version), else the script.
So that one connection carries one form of extend from its start, an extend waits for the
handshake's answer when it comes while the connection is new (``LEARNING``); a release
goes at once, as its script until the answer came, and again natively if the master then
turns out to refuse the script and have the native form. A master that answers a native
command as unknown (renamed, denied, a proxy that does not pass it) runs the scripts from
then on, and the command goes again as its script, as after NOSCRIPT. A master that
refuses to load our scripts (an ACL without
``@scripting``, a provider that disables Lua) is kept when it releases natively; only what
needs Lua is refused there, saying so; without native commands too it is refused as a
whole, at the handshake, as before.
"""

from __future__ import annotations

import enum
import logging
import math
import ssl
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, Protocol, TypeVar

import hiredis

from redlock._protocol import scripts as _scripts
from redlock._protocol.config import DEFAULT_MAX_REPLY_BYTES, DEFAULT_MAX_REPLY_ELEMENTS, Credentials
from redlock._protocol.core import (
    DENIED,
    GRANTED,
    HANDOFF_CHAIN,
    HANDOFF_CHAIN_SECONDS,
    TIMEOUT,
    Command,
    ErrorReply,
    Handoff,
    Line,
    NativeForm,
    Round,
    native_form,
    reply_status,
    wakes_all,
)
from redlock._protocol.facts import (
    ASKED,
    UNKNOWN,
    MasterFacts,
    facts_from_info,
    native_commands,
    releases_natively,
    with_commands,
)
from redlock._protocol.topology import (
    Finding,
    Severity,
    judged_at_handshake,
    master_findings,
    refusal_detail,
)
from redlock.exceptions import ClientClosed, NodeStatus

logger = logging.getLogger("redlock")

#: Replies a master may owe before it is sent no more (clean-ups get as many again): bounds
#: what a silent master's socket buffer and our queue hold, whatever the concurrency.
MAX_IN_FLIGHT = 8192

#: Why the connections of a closed client were lost.
CLOSED = "the client was closed"

#: Backoff after a failed connect: first retry at once, then doubling up to the cap.
RECONNECT_BACKOFF_FIRST = 0.025
RECONNECT_BACKOFF_MAX = 1.0

#: Error replies that say the client is not allowed, or that the server is no standalone
#: master (a replica, a cluster node), rather than that the master is down: waiting and
#: retrying will not change them.
_MISCONFIGURED_PREFIXES = (
    "WRONGPASS",
    "NOAUTH",
    "NOPERM",
    "ERR AUTH",
    "ERR invalid password",
    "ERR Client sent AUTH",
    "READONLY",
    "MOVED ",
    "ASK ",
    "CROSSSLOT",
    "CLUSTERDOWN",
    "TRYAGAIN",
)


def encode(args: Sequence[str | bytes | int]) -> bytes:
    """One command in RESP, as every Redis server reads it (hiredis's C encoder).

    Numbers are made text here, in Python, and hiredis gets only ``bytes`` and ``str``:
    ``hiredis.pack_command`` (3.5) turns an ``int`` into text with ``PyObject_Repr``, which
    runs pending signal handlers, and uses the NULL that a raising handler (Ctrl-C's
    ``KeyboardInterrupt``) leaves without checking it: the process died with SIGSEGV. Here
    the handler's exception is an exception like any other."""
    packed: bytes = hiredis.pack_command(tuple(_as_text(arg) for arg in args))  # type: ignore[arg-type]
    return packed


def _as_text(arg: str | bytes | int) -> str | bytes:
    if isinstance(arg, (str, bytes)):
        return arg
    if isinstance(arg, int):
        # str(), not b"%d" %: compiled by mypyc, the latter crashes the same way on an int
        # beyond 2**62 (tests/test_signals.py storms both builds).
        return str(arg)
    raise TypeError(f"a command argument must be str, bytes or int, got {type(arg).__name__}")


_PING = encode(("PING",))


class RoundWires:
    """A round's command in RESP, encoded once for all the masters it goes to: the
    connection policy's own state of the round being submitted (the protocol's
    :class:`~redlock._protocol.core.Round` knows nothing of the wire)."""

    def __init__(self, round_: Round) -> None:
        self.round = round_
        #: The command itself (None until a master needs it).
        self.wire: bytes | None = None
        #: Its native forms, each with what follows it, by ``NativeForm.needs``.
        self.native: dict[str, bytes] = {}

    def plain(self) -> bytes:
        wire = self.wire
        if wire is None:
            wire = self.wire = encode(self.round.command.args)
        return wire

    def native_form(self, form: NativeForm) -> bytes:
        wire = self.native.get(form.needs)
        if wire is None:
            then = b"" if form.then is None else encode(form.then.args)
            wire = self.native[form.needs] = encode(form.command.args) + then
        return wire


def is_misconfiguration(message: str) -> bool:
    return message.startswith(_MISCONFIGURED_PREFIXES)


#: How a master answers a command it does not have (or has under another name), or an
#: option it does not know (``SET ... IFEQ`` before IFEQ).
_NOT_AVAILABLE_PREFIXES = ("ERR unknown command", "ERR syntax error")


def not_available(message: str) -> bool:
    """The master does not run this command for us: it lacks it, or our ACL user may not run
    it (not: may not touch its key, which no other form of it would change)."""
    return message.startswith(_NOT_AVAILABLE_PREFIXES) or (message.startswith("NOPERM") and "to run" in message)


#: Why a master that runs no Lua for us cannot run what asked for it.
NEEDS_SCRIPTING = (
    "this needs Lua scripting, which this master does not allow us; without it only a lock on one name"
    " without fencing works, by the native commands of Valkey 9+ or Redis 8.4+"
)
#: Why such a master cannot serve at all.
NO_SCRIPTING_NOR_NATIVE = (
    "this master allows us no Lua scripting, and has no native commands to release and extend a lock"
    " without it (DELIFEQ or DELEX, and SET IFEQ: Valkey 9+, Redis 8.4+)"
)


#: Why a master that answers NOAUTH refuses us: it has a password, and we gave none.
NEEDS_PASSWORD = (
    "this master requires a password and none was given: put it in the master's URL,"
    " redis://:PASSWORD@host:port (or redis://USER:PASSWORD@host:port for an ACL user)"
)


def failure_status(error: BaseException) -> tuple[NodeStatus, str]:
    """How a master failed, judging by what its socket raised, and a one-line detail."""
    detail = str(error) or type(error).__name__
    if isinstance(error, ssl.SSLError | ssl.CertificateError):
        # An untrusted certificate, a wrong hostname, a TLS port spoken to in clear (or the
        # reverse): waiting will not fix it.
        return NodeStatus.MISCONFIGURED, f"TLS: {detail}"
    if isinstance(error, ProtocolViolation):
        return NodeStatus.MISCONFIGURED, detail
    if isinstance(error, ReplyTooLarge):
        # For this call only: a value or list that outgrew the limits may shrink again.
        return NodeStatus.ERROR, f"{detail}; its connection was closed"
    if isinstance(error, TimeoutError):
        return NodeStatus.TIMEOUT, detail
    if isinstance(error, ConnectionError | OSError | EOFError | Interrupted):
        return NodeStatus.UNREACHABLE, detail
    return NodeStatus.ERROR, f"{type(error).__name__}: {detail}"


class Interrupted(Exception):
    """Our own process was interrupted (Ctrl-C, a signal's handler) mid-read or mid-write:
    the connection starts over, and it is no news about the master (nothing is logged).
    (An Exception, not a ConnectionError: mypyc compiles no subclass of the latter.)"""


class ProtocolViolation(Exception):
    """The peer's bytes are not RESP: not a Redis server, or a TLS port spoken to in clear."""


class ReplyTooLarge(Exception):
    """A master's reply went past the client's limits (``max_reply_bytes``,
    ``max_reply_elements``): its connection is closed before the reply is read, and the
    calls waiting for that master count it as an error (:attr:`~redlock.NodeStatus.ERROR`),
    with this reason. The next call connects again."""


def reply_parser(
    max_bytes: int = DEFAULT_MAX_REPLY_BYTES, max_elements: int = DEFAULT_MAX_REPLY_ELEMENTS
) -> ReplyReader:
    """An incremental RESP parser: feed bytes, take replies; error replies come as ErrorReply."""
    return ReplyReader(max_bytes, max_elements)


_CRLF = b"\r\n"
_BULK = ord("$")
_ARRAY = ord("*")
#: RESP2's one-line replies: a status, an error, an integer.
_LINES = frozenset(b"+-:")


class ReplyReader:
    """hiredis's RESP reader behind a check of each reply's size, made as the bytes arrive.

    hiredis hands a reply over only once it is whole, however long its header says it is,
    and makes an array's list as soon as it reads the array's header: a master (or anything
    answering at its address) that streams an endless string would grow our memory without
    end, and a header ``*2147483647`` has hiredis ask for 16 GiB at once. So what hiredis is
    fed is checked first, and a reply whose headers, or bytes so far, go past a limit raises
    :class:`ReplyTooLarge` before any of it reaches hiredis; the whole replies before it in
    the same read are still fed, and count. The limits hold for one reply as a whole, nested
    arrays included: ``max_bytes`` of it on the wire (so each string in it), and
    ``max_elements`` array elements at every level (what hiredis allocates ahead).

    Most reads are a lock's short replies (``+OK``, ``:1``, a token), and they go straight to
    hiredis: a read that holds no aggregate header's first byte cannot make hiredis allocate
    ahead, and only its length counts while it may still be part of a reply under way (the
    reads since hiredis last took every byte whole, with no aggregate under way: a reply's
    boundary). A read with such a byte, or enough bytes to outgrow ``max_bytes``, is
    scanned header by header (lengths read, bodies skipped) with those earlier ones, from
    that boundary; the scan stays on until it finds the next boundary. Only RESP2's five
    types pass the scan: this client never asks for RESP3.
    """

    __slots__ = (
        "_behind",
        "_behind_size",
        "_elements",
        "_line",
        "_max_bytes",
        "_max_elements",
        "_open",
        "_reader",
        "_scanning",
        "_size",
        "_skip",
        "gets",
    )

    def __init__(self, max_bytes: int, max_elements: int) -> None:
        self._reader = hiredis.Reader(replyError=ErrorReply, protocolError=ProtocolViolation)
        #: hiredis's own: False until a whole reply is in (called once per reply).
        self.gets: Callable[[], Any] = self._reader.gets
        self._max_bytes = max_bytes
        self._max_elements = max_elements
        #: The reads fed unscanned since the scan last stood at a reply's boundary.
        self._behind: list[bytes] = []
        self._behind_size = 0
        # Where the scan stands, after the last byte it scanned:
        #: a line begun whose CRLF has not come yet (hiredis has it too);
        self._line = b""
        #: how many bytes of a string's body, and its CRLF, are still to come;
        self._skip = 0
        #: for each array under way, outermost first, how many of its elements are to come;
        self._open: list[int] = []
        #: and the reply under way: its bytes (a string's whole length counted at its
        #: header) and its array elements.
        self._size = 0
        self._elements = 0
        #: The scan is under way: it stands inside a reply (or past the read it refused).
        self._scanning = False

    def feed(self, data: bytes | bytearray | memoryview, offset: int = 0, length: int = -1) -> None:
        """Take ``length`` bytes of ``data`` from ``offset`` (all of it, by default)."""
        chunk = bytes(data[offset:] if length < 0 else data[offset : offset + length])
        behind = self._behind
        if behind and behind[-1][-1:] == b"\n" and not self._reader.has_data():
            # hiredis took every byte, the last one ending a line or a string (it takes an
            # item's type byte before the rest has come), and no aggregate could be under
            # way: every reply in the reads behind is whole, and they are done with.
            behind.clear()
            self._behind_size = 0
        size = self._behind_size + len(chunk)
        if (
            size <= self._max_bytes
            and not self._scanning
            # The first byte of each aggregate hiredis reads (RESP2's array; RESP3's map,
            # set, push and attribute, which it reads asked for or not): the only headers
            # that make it allocate ahead, and the only way to nest. (Five memchr()s: a
            # regular expression's class took ten times as long.)
            and b"*" not in chunk
            and b"%" not in chunk
            and b"~" not in chunk
            and b">" not in chunk
            and b"|" not in chunk
        ):
            behind.append(chunk)
            self._behind_size = size
            self._reader.feed(chunk)
            return
        refused = self._scan(b"".join(behind), chunk)
        behind.clear()
        self._behind_size = 0
        if refused is not None:
            # The replies before the one refused are read, and count; that one never is.
            self._reader.feed(chunk, 0, refused.fed)
            raise refused.error
        self._reader.feed(chunk)

    def _scan(self, fed: bytes, chunk: bytes) -> _Refused | None:
        """Walk the headers of ``fed`` (fed to hiredis already) and ``chunk``, on from where
        the scan stands."""
        carried = self._line + fed
        data = carried + chunk if carried else chunk
        self._line = b""
        end = len(data)
        pos = 0
        #: Where the reply under way began in ``data`` (at 0: in an earlier read, or not yet).
        start = 0
        skip, size, elements, opened = self._skip, self._size, self._elements, self._open
        max_bytes = self._max_bytes
        try:
            while True:
                if skip:
                    taken = min(skip, end - pos)
                    pos += taken
                    skip -= taken
                    if skip:
                        break  # the read ends inside a string
                    _element_done(opened)
                if pos >= end:
                    break
                if not opened:
                    start, size, elements = pos, 0, 0  # a new reply
                newline = data.find(_CRLF, pos)
                if newline < 0:
                    if size + end - pos > max_bytes:
                        raise ReplyTooLarge(f"a line of over {max_bytes} bytes (max_reply_bytes) without its end")
                    self._line = data[pos:]
                    break
                size += newline + 2 - pos
                kind = data[pos]
                if kind in _LINES:
                    if size > max_bytes:
                        raise ReplyTooLarge(f"a reply of over {max_bytes} bytes (max_reply_bytes)")
                    _element_done(opened)
                elif kind == _BULK:
                    length = _header_length(data, pos, newline)
                    if length < 0:
                        _element_done(opened)
                    else:
                        size += length + 2
                        if size > max_bytes:
                            raise ReplyTooLarge(
                                f"a reply of over {max_bytes} bytes (max_reply_bytes): a string of {length} bytes"
                            )
                        skip = length + 2
                elif kind == _ARRAY:
                    count = _header_length(data, pos, newline)
                    if count > 0:
                        elements += count
                        if elements > self._max_elements:
                            raise ReplyTooLarge(
                                f"a reply of over {self._max_elements} array elements (max_reply_elements):"
                                f" an array of {count}"
                            )
                        opened.append(count)
                    else:
                        _element_done(opened)
                else:
                    raise ProtocolViolation(f"not a RESP2 reply: it begins {data[pos : pos + 16]!r}")
                pos = newline + 2
        except (ReplyTooLarge, ProtocolViolation) as error:
            self._scanning = True  # (nothing more gets through)
            return _Refused(error, max(0, start - len(carried)))
        self._skip, self._size, self._elements = skip, size, elements
        self._scanning = bool(skip or opened or self._line)
        return None


def _element_done(opened: list[int]) -> None:
    """One element ended: so do the arrays it was the last element of."""
    while opened:
        opened[-1] -= 1
        if opened[-1]:
            return
        opened.pop()


def _header_length(data: bytes, pos: int, newline: int) -> int:
    """The length a ``$`` or ``*`` header line says (-1: none, a nil)."""
    try:
        length = int(data[pos + 1 : newline])
    except ValueError:
        length = -2
    if length < -1:
        raise ProtocolViolation(f"a reply header with no length: {bytes(data[pos : min(newline, pos + 32)])!r}")
    return length


@dataclass(frozen=True, slots=True)
class _Refused:
    """A reply refused while scanning: why, and how much of the read came before it."""

    error: ReplyTooLarge | ProtocolViolation
    fed: int


# --- who waits for which release ------------------------------------------------------


class Event(Protocol):
    """What threading.Event and asyncio.Event have in common, as far as waiting goes."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...
    def clear(self) -> None: ...


EventT = TypeVar("EventT", bound=Event)


def subscription_changes(wanted: set[str], subscribed: set[str]) -> tuple[list[str], list[str]]:
    """The channels to subscribe to and to leave, to go from ``subscribed`` to ``wanted``."""
    return sorted(wanted - subscribed), sorted(subscribed - wanted)


class Handoffs(Generic[EventT]):
    """The handovers of one client: which waiters in line offer to take a holding over
    (see :class:`~redlock._protocol.core.Handoff`), which a releasing Lock of the client
    claims, and how many handovers in a row each lock has made. :class:`Waiters` holds one
    beside its wake-ups, in the same order of arrival."""

    def __init__(self) -> None:
        #: The offers of the waiters in line, by their event.
        self._offers: dict[EventT, Handoff] = {}
        #: By channel: how many handovers in a row since when (see :meth:`claim`).
        self._chains: dict[str, tuple[int, float]] = {}

    def offer(self, event: EventT, handoff: Handoff) -> None:
        self._offers[event] = handoff

    def withdraw(self, event: EventT) -> None:
        handoff = self._offers.pop(event, None)
        if handoff is not None:
            handoff.abandon()  # (gone: a swap under way for it is its releaser's to undo)

    def offers(self) -> list[Handoff]:
        return list(self._offers.values())

    def chained(self, channel: str) -> bool:
        return channel in self._chains

    def claim(
        self, channel: str, waiting: Iterable[EventT], now: float, expires_at: float
    ) -> tuple[Handoff | None, bool]:
        """A Lock of this client releases ``channel``'s lock: the first of ``waiting`` (its
        waiters, in arrival order) that offers to take it over (claimed: it waits for the
        swap until ``expires_at``), or None. Also whether the release must reach every
        client alike: after ``HANDOFF_CHAIN`` handovers in a row, or
        ``HANDOFF_CHAIN_SECONDS`` of them, the lock is released once instead, so that
        waiters of other clients, which a handover never wakes, are not starved; this
        client's waiters then learn of it as theirs do."""
        chain = self._chains.pop(channel, None)
        if chain is not None and (chain[0] >= HANDOFF_CHAIN or now - chain[1] >= HANDOFF_CHAIN_SECONDS):
            return None, True
        for event in waiting:
            handoff = self._offers.get(event)
            if handoff is not None and handoff.claim(expires_at):
                handoff.wake = event.set
                count, began = (0, now) if chain is None else chain
                self._chains[channel] = (count + 1, began)
                return handoff, False
        return None, False

    @staticmethod
    def handed_over(handoff: Handoff) -> None:
        """Wake the waiter ``handoff`` was claimed from: its swap's round ended (delivered or
        not). Not one woken already when the swap reached a majority (see
        redlock._protocol.flows.release_flow): it may be in line again, and would try once for nothing."""
        handoff.wake_waiter()

    @staticmethod
    def swap_waits(handoff: Handoff, event: EventT, clock: Callable[[], float]) -> Iterator[float]:
        """After a waiter's own wait: how long it waits on ``event`` for the swap of a
        release that claimed its ``handoff``, step by step, up to the claim's end."""
        handoff.unpark()
        while handoff.state == Handoff.CLAIMED:
            left = handoff.expires_at - clock()
            if left <= 0:
                handoff.abandon()  # (the flow deletes what the swap may still write)
                return
            event.clear()  # (a release announced meanwhile: the swap is what it waits for)
            yield left


class Waiters(Generic[EventT]):
    """Who waits for the release of which lock, in arrival order, for one client.

    A release is announced by every master that held it; it wakes one waiter of this client
    (the longest waiting), not all of them, and only once (but every reader of a read-write
    lock waiting for its writer to leave: readers share, so they are no herd). Waking all would send every waiter
    at the masters together, where all but one fail: a thundering herd that slows the very
    handoff it is meant to speed up. Other clients' waiters are woken by their own listeners.
    """

    def __init__(self, remembered: int = 64) -> None:
        self._waiting: dict[str, list[EventT]] = {}
        self._seen: dict[str, deque[bytes]] = {}
        self._remembered = remembered
        #: By channel: whether the last try of a waiter in line found the lock held.
        self._held: dict[str, bool] = {}
        #: The waiters that are acquires in line (others only watch: an election's observer).
        self._in_line: set[EventT] = set()
        #: Their offers to take a holding over, and the chains of handovers made.
        self.handoffs: Handoffs[EventT] = Handoffs()

    def channels(self) -> set[str]:
        return set(self._waiting)

    def all_events(self) -> list[EventT]:
        return [event for events in self._waiting.values() for event in events]

    def add(self, channel: str, event: EventT, *, in_line: bool = False, handoff: Handoff | None = None) -> None:
        self._waiting.setdefault(channel, []).append(event)
        if in_line:
            self._in_line.add(event)
        if handoff is not None:
            self.handoffs.offer(event, handoff)

    def discard(self, channel: str, event: EventT) -> None:
        self._in_line.discard(event)
        self.handoffs.withdraw(event)
        waiting = self._waiting.get(channel)
        if waiting is not None and event in waiting:
            waiting.remove(event)
            if not waiting:
                del self._waiting[channel]
                self._seen.pop(channel, None)
                self._held.pop(channel, None)

    def found(self, channel: str, held: bool | None) -> None:
        """A waiter in line tried: the lock was ``held`` by others, or no majority answered
        (None: no news, it has not tried yet)."""
        if held is not None:
            self._held[channel] = held

    def waits(
        self,
        channel: str,
        event: EventT,
        seconds: float,
        line: Line | None,
        clock: Callable[[], float],
        *,
        handoff: Handoff | None = None,
    ) -> Iterator[float]:
        """How long a waiter for ``channel`` sleeps on ``event``, step by step (a driver
        waits each and comes back; the sync driver under its lock), until it is to try.

        Without a line, one sleep of ``seconds`` or until woken. In line (see
        :class:`~redlock._protocol.core.Line`): the first try of the first in line goes at once; after
        its own timer a waiter tries only when :meth:`may_try` says so, else it looks again
        every ``line.step`` until woken, first, or out of patience. An event already set (a
        release came while it tried) sends it at the masters again at once. Meanwhile a
        releasing Lock of this client may claim its ``handoff``: then it waits for the swap
        (woken once a majority swapped, or by :meth:`handed_over` when the swap's round ends
        without one), however long its patience, up to the claim's end."""
        if line is not None:
            self.found(channel, line.held)
            if line.held is None and self.may_try(channel, event):
                return
        if handoff is not None:
            handoff.park()
        give_up = None if line is None or line.patience is None else clock() + line.patience
        wait = seconds
        while not event.is_set():
            yield wait
            if event.is_set() or line is None or self.may_try(channel, event):
                break
            left = None if give_up is None else give_up - clock()
            if left is not None and left <= 0:
                break
            wait = line.step if left is None else min(line.step, left)
        if handoff is not None:
            yield from self.handoffs.swap_waits(handoff, event, clock)

    def may_be_waiting(self, channel: str) -> bool:
        """A look without the driver's lock, before taking it on every release: whether any
        waiter (or a chain of handovers) is on ``channel`` now. A waiter that registers just
        after is not parked yet, so it tries at the masters itself, as it would anyway; a
        release with nobody waiting (the common case) costs no lock. (A dict lookup is
        atomic under the GIL.)"""
        return channel in self._waiting or self.handoffs.chained(channel)

    def claim(self, channel: str, now: float, expires_at: float) -> tuple[Handoff | None, bool]:
        """A Lock of this client releases ``channel``'s lock: the first waiter in line
        waiting here to take it over, or None (see :meth:`Handoffs.claim`)."""
        return self.handoffs.claim(channel, self._waiting.get(channel, ()), now, expires_at)

    def may_try(self, channel: str, event: EventT) -> bool:
        """Whether a waiter in line whose own timer ran out tries at the masters now (see
        :class:`~redlock._protocol.core.Line`): the first in line does; the others wait their turn
        while the lock was last found held. Not where the last try found no majority
        answering: then waiting behind the first would make each give up in turn, not at
        once, so each tries on its own timer."""
        first = next((waiter for waiter in self._waiting.get(channel, ()) if waiter in self._in_line), event)
        return first is event or not self._held.get(channel, True)

    def released(self, channel: str, token: bytes) -> None:
        """Wake the longest-waiting waiter not woken yet, unless this release was counted."""
        if channel not in self._waiting:
            return  # a late message for a channel nobody waits on any more: nothing to keep
        seen = self._seen.setdefault(channel, deque(maxlen=self._remembered))
        if token in seen:
            return
        seen.append(token)
        every = wakes_all(channel)  # a read-write lock's readers: they do not compete
        for event in self._waiting.get(channel, ()):
            if not event.is_set():
                event.set()
                if not every:
                    return


@dataclass(frozen=True, slots=True)
class HandshakeStep:
    """One command a new connection sends before any other, and how its reply is taken.

    ``learn`` turns the reply into facts about the master (kept on its link). An error reply
    that says we are not allowed (wrong password, no permission) refuses the connection,
    unless the step is ``optional``: then the master merely did not say (an ACL user denied
    ``INFO`` still locks), and what the step would have taught stays unknown. A refused
    ``loads_script`` step says that the master runs no Lua for us (see :meth:`Link.received`).
    """

    command: Command
    learn: Callable[[object], MasterFacts] | None = None
    optional: bool = False
    loads_script: bool = False


def identity_steps(credentials: Credentials) -> list[HandshakeStep]:
    """Who we are and which database: the steps every connection takes, subscribers too."""
    steps = []
    if credentials.password is not None:
        auth: tuple[str, ...] = (
            ("AUTH", credentials.password)
            if credentials.username is None
            else ("AUTH", credentials.username, credentials.password)
        )
        steps.append(HandshakeStep(Command(auth)))
    if credentials.db:
        steps.append(HandshakeStep(Command(("SELECT", credentials.db))))
    if credentials.client_name:
        steps.append(HandshakeStep(Command(("CLIENT", "SETNAME", credentials.client_name))))
    return steps


#: What a command connection asks each master about itself (the default sections: server,
#: replication, memory, persistence and the rest, in one reply on every server version;
#: naming several sections needs Redis 7).
INFO_STEP = HandshakeStep(Command(("INFO",)), learn=facts_from_info, optional=True)

#: Which native commands a master has, asked of its command table: a command renamed or
#: disabled in its configuration is not there, whatever its version says. Commands that
#: have native forms wait for this answer on a new connection (see :meth:`Link.received`).
COMMANDS_STEP = HandshakeStep(Command(("COMMAND", "INFO", *ASKED)), optional=True)


def command_handshake(credentials: Credentials) -> list[HandshakeStep]:
    """Every step of a new command connection, in order: identity, INFO, COMMAND INFO, the
    scripts (optional: a master that refuses them may still serve natively)."""
    return [
        *identity_steps(credentials),
        INFO_STEP,
        COMMANDS_STEP,
        *(HandshakeStep(c, optional=True, loads_script=True) for c in script_preloads()),
    ]


def script_preloads() -> tuple[Command, ...]:
    """SCRIPT LOAD for every script, sent first on each new command connection.

    A master that restarted forgot its scripts, and any new connection may be to such a
    master; loading them up front means EVALSHA works from the first command, and a NOSCRIPT
    answer (re-sent as EVAL) only follows a SCRIPT FLUSH.
    """
    return tuple(Command(("SCRIPT", "LOAD", script.source)) for script in _scripts.ALL)


def overtime_deadline(links: Sequence[Link], round_: Round, connect_timeout: float, deadline: float) -> float | None:
    """A round's timeout has passed: until when it still waits, or None if no longer.

    Overtime, a round that waits for every master settles once its outcome is decided. One
    still undecided waits on for its ``patience`` (a release), and for connects under way:
    a round counts a master still connecting as not answering, like a slow one, and is
    decided without it whenever the others suffice; but when it cannot be (a fresh client:
    every master is connecting), failing it would turn a burst of first operations, or a busy
    event loop that starts the connects late, into a false outage. So it waits for those
    connects, each bounded by ``connect_timeout``, plus its own timeout for the replies: the
    stated bound of a first contact.
    """
    round_.overtime = True
    if round_.settled:
        return None
    due = [links[node].connect_started + connect_timeout for node in round_.pending if links[node].connecting()]
    candidates = [max(due) + round_.timeout] if due else []
    if round_.patience:
        candidates.append(deadline + round_.patience)
    return max(candidates) if candidates else None


class Submit(enum.Enum):
    SEND = "send"
    CONNECT = "connect"
    #: The connection sat idle past the health-check interval: write a PING first; the
    #: command waits (like ``QUEUED``) until the master answers it.
    PROBE = "probe"
    #: Also for a command that waits for a new connection's handshake to say which form of it
    #: the master runs (``State.LEARNING``).
    QUEUED = "queued"
    SKIPPED = "skipped"


class State(enum.Enum):
    IDLE = "idle"  # never connected, or lost: the next submit connects at once
    CONNECTING = "connecting"
    READY = "ready"
    #: A PING is out on a connection that sat idle: commands queue until it is answered,
    #: so that none is ever written on a connection a middlebox forgot.
    PROBING = "probing"
    #: Connected, the handshake's question about native commands not answered yet: extends
    #: queue until it is (:attr:`~redlock._protocol.core.Command.waits_for_form`), the rest go at once.
    LEARNING = "learning"
    BACKING_OFF = "backing off"  # a connect failed: rounds get that failure until retry_at


#: The members the paths run per command and per reply compare with, as module constants:
#: an Enum member looked up on its class costs ten times a plain attribute on Python 3.11
#: (see redlock._protocol.core.GRANTED).
READY: Final = State.READY
SEND: Final = Submit.SEND


@dataclass(slots=True)
class InFlight:
    """A command written on a link whose reply has not been read (or, in the backlog, one
    queued to be written when the connection is up)."""

    command: Command
    round: Round | None
    sent_at: float
    #: The handshake step this command is (None: a round's command).
    step: HandshakeStep | None = None
    #: How many connections this command was already written on, and lost with.
    resent: int = 0

    # (Written out, not generated, as for the other objects made per command: mypyc compiles
    # a class's own __init__, but runs the one dataclasses generates as Python, which made
    # one InFlight cost 2,000 instructions in the compiled build.)
    def __init__(
        self, command: Command, round: Round | None, sent_at: float, step: HandshakeStep | None = None, resent: int = 0
    ) -> None:
        self.command = command
        self.round = round
        self.sent_at = sent_at
        self.step = step
        self.resent = resent


#: The health check of a connection that sat idle (see :attr:`Submit.PROBE`).
PROBE = HandshakeStep(Command(("PING",)), optional=True)

#: How many times a command lost with its connection is sent again on a new one (see
#: :meth:`Link.lost`): once covers a connection closed under it; a master that closes
#: every connection it is given is down, not reset.
MAX_RESENDS = 1


@dataclass(slots=True)
class Capabilities:
    """What one command connection may send its master: which native commands (see the
    module docstring), and whether scripts; learnt anew by each connection's handshake."""

    #: The native commands the connection sends.
    native: frozenset[str] = frozenset()
    #: False once the master refused to load our scripts on the connection.
    scripting: bool = True


@dataclass(slots=True)
class Judgement:
    """What one connection's master said about itself (its INFO), and what the client made
    of it: refused or not, the same server as another master, the findings already told.
    Made anew with each connection."""

    facts: MasterFacts = UNKNOWN
    #: The earlier master whose run_id this one answered with (the same server), if any.
    same_as: str | None = None
    #: Why the master is refused for what it said, or None.
    refusal: str | None = None
    #: When a round that finds it refused asks INFO again.
    recheck_at: float = 0.0
    #: The codes of the findings logged and reported on this connection.
    told: set[str] = field(default_factory=set)


@dataclass
class Link:
    """The policy of one master's command connection; see the module docstring."""

    node: int
    name: str
    credentials: Credentials
    #: A master owing replies for this long looks hung.
    hung_after: float
    state: State = State.IDLE
    #: Bumped on every new connect, so a driver can tell a stale connect's result from the
    #: current one's (a connect that finishes after close(), a reset, or a fork).
    generation: int = 0
    in_flight: deque[InFlight] = field(default_factory=deque)
    #: Who waits for which round, by its id(): shared by every link (see :meth:`Connections.wake`).
    wakers: dict[int, Callable[[], None]] = field(default_factory=dict, repr=False)
    #: Commands waiting for a connect (or a health check) to finish, in submission order.
    backlog: list[InFlight] = field(default_factory=list)
    #: A connection idle this long is checked with a PING before it is trusted with a
    #: command (``math.inf``: never).
    check_after_idle: float = math.inf
    #: When the current connection last wrote or read anything.
    last_active: float = 0.0
    #: When the health check under way was written.
    probe_sent_at: float = 0.0
    retry_at: float = 0.0
    failures: int = 0
    last_failure: tuple[NodeStatus, str] = (NodeStatus.UNREACHABLE, "")
    #: When the connect under way began (its outcome is due by then + connect_timeout).
    connect_started: float = 0.0
    #: The trouble last logged for this master (None: none since it last answered): a
    #: master is logged once per change of state, not once per round that finds it down.
    reported: NodeStatus | None = None
    #: What the current connection may send: native commands, scripts.
    capabilities: Capabilities = field(default_factory=Capabilities)
    #: What the current connection's master said about itself, and what was made of it.
    judgement: Judgement = field(default_factory=Judgement)
    #: Judges what the master just said about itself (its INFO); may refuse it.
    judge: Callable[[Link, float], None] | None = field(default=None, repr=False)

    # --- rounds -----------------------------------------------------------------------------

    def submit(self, round_: Round, now: float) -> Submit:
        """Take ``round_``'s command for this master; say what the driver must do."""
        in_flight = self.in_flight
        if (
            self.state is READY
            and len(in_flight) < MAX_IN_FLIGHT
            and (
                now - in_flight[0].sent_at <= self.hung_after
                if in_flight
                else now - self.last_active < self.check_after_idle
            )
        ):
            # (The common case, first: a working connection that keeps up.)
            if round_.command.native and self.capabilities.native:
                self._send(round_, now)
            else:
                in_flight.append(InFlight(round_.command, round_, now))
            self.last_active = now
            return SEND
        if self.state is State.BACKING_OFF:
            # A clean-up (release, rollback) tries at once anyway: it is what takes our keys
            # back, it is rare, and a caller retrying a release has a reason to.
            if now < self.retry_at and not round_.cleanup:
                status, detail = self.last_failure
                self._record(round_, status, f"{detail} (reconnecting in {self.retry_at - now:.3f}s)")
                return Submit.SKIPPED
            self.state = State.IDLE
        owed = len(self.in_flight) + len(self.backlog)
        limit = 2 * MAX_IN_FLIGHT if round_.cleanup else MAX_IN_FLIGHT
        hung = self.looks_hung(now)
        if owed >= limit or (hung and not round_.cleanup):
            hung_for = f"hung: no reply for {now - self.in_flight[0].sent_at:.1f}s" if hung else "hung: too far behind"
            self._record(round_, NodeStatus.TIMEOUT, hung_for)
            self._report(NodeStatus.TIMEOUT, hung_for)
            return Submit.SKIPPED
        if self.state is State.READY and not self.in_flight and now - self.last_active >= self.check_after_idle:
            # Idle this long, the connection may be one a load balancer or NAT forgot (no
            # FIN, no RST): a command written there would vanish. Ask first; the command
            # waits for the answer, or goes on a new connection if none comes.
            self.state = State.PROBING
            self.probe_sent_at = self.last_active = now
            self.in_flight.append(InFlight(PROBE.command, None, now, PROBE))
            self.backlog.append(InFlight(round_.command, round_, now))
            return Submit.PROBE
        if self.state is State.READY or (self.state is State.LEARNING and not round_.command.waits_for_form):
            self._send(round_, now)
            self.last_active = now
            if hung and not round_.patience:
                # A clean-up still goes (it takes our keys back once the master answers), but
                # nobody waits for a master known to be hung: its outcome is known now. Not
                # a release (it has patience): what such a master owes may be sitting in our
                # own socket buffer behind a busy event loop (a burst of a thousand operations
                # runs longer than the hung bound in one turn), and a slow reply must not turn
                # into an unconfirmed release; the release waits for it as for any master.
                round_.record(
                    self.node,
                    NodeStatus.TIMEOUT,
                    f"hung: no reply for {now - self.in_flight[0].sent_at:.1f}s (sent anyway)",
                )
            return Submit.SEND
        self.backlog.append(InFlight(round_.command, round_, now))
        if self.state is State.CONNECTING or self.state is State.PROBING or self.state is State.LEARNING:
            return Submit.QUEUED
        self._start_connect(now)
        return Submit.CONNECT

    def _send(self, round_: Round, now: float) -> None:
        """Put the round's command in flight in the form this master runs."""
        form = native_form(round_.command, self.capabilities.native) if self.capabilities.native else None
        if form is None:
            self.in_flight.append(InFlight(round_.command, round_, now))
            return
        self.in_flight.append(InFlight(form.command, round_, now))
        if form.then is not None:
            self.in_flight.append(InFlight(form.then, None, now))

    def _start_connect(self, now: float) -> None:
        self.state = State.CONNECTING
        self.generation += 1
        self.connect_started = now

    def probe_expired(self, now: float, timeout: float) -> bool:
        """The health check has gone unanswered for ``timeout``: give the connection up and
        connect anew, taking the queued commands along (none of them was written on it).
        True when it did; the driver then hangs up the old connection and connects."""
        if self.state is not State.PROBING or now - self.probe_sent_at < timeout:
            return False
        self.in_flight.clear()  # only the PING: nothing of ours can land late
        self._report(NodeStatus.TIMEOUT, f"no answer to a health check within {timeout}s; reconnecting")
        self._start_connect(now)
        return True

    def looks_hung(self, now: float) -> bool:
        return bool(self.in_flight) and now - self.in_flight[0].sent_at > self.hung_after

    def connecting(self) -> bool:
        """A connect, its handshake's question or a health check is under way: rounds that
        wait for this master wait for it (see :func:`overtime_deadline`)."""
        return self.state is State.CONNECTING or self.state is State.PROBING or self.state is State.LEARNING

    # --- connection events -------------------------------------------------------------------

    def connected(self, now: float) -> list[Command]:
        """The socket is up: what to write first, in order (handshake, scripts, the queue but
        the extends, which wait to learn their form)."""
        self.state = State.LEARNING
        # (A new connection may be to another server, restarted or reconfigured: learnt anew.)
        self.capabilities = Capabilities()
        self.judgement = Judgement()
        self.last_active = now
        commands: list[Command] = []
        for step in command_handshake(self.credentials):
            self.in_flight.append(InFlight(step.command, None, now, step))
            commands.append(step.command)
        return commands + self._write_backlog(now)

    def _write_backlog(self, now: float) -> list[Command]:
        """Write the queue, each command in the form this master runs; while the connection
        is still learning which that is, the extends stay queued, in their order."""
        commands: list[Command] = []
        waiting = []
        for entry in self.backlog:
            round_ = entry.round
            form = None
            if round_ is not None and round_.command.native:
                if self.state is State.LEARNING and round_.command.waits_for_form:
                    waiting.append(entry)
                    continue
                form = native_form(round_.command, self.capabilities.native)  # (None while learning)
                # (A command lost with a connection goes again in the form of the new one.)
                entry.command = round_.command if form is None else form.command
            entry.sent_at = now
            self._write(entry, form, commands)
        self.backlog = waiting
        return commands

    def _write(self, entry: InFlight, form: NativeForm | None, commands: list[Command]) -> None:
        """Put ``entry`` in flight (and what its native form sends behind it); add what to
        write to ``commands``."""
        self.in_flight.append(entry)
        commands.append(entry.command)
        if form is not None and form.then is not None:
            self.in_flight.append(InFlight(form.then, None, entry.sent_at))
            commands.append(form.then)

    def connect_failed(self, error: BaseException, now: float) -> None:
        """The connect did not succeed: every queued round learns why, and we back off."""
        status, detail = failure_status(error)
        self._fail_all(status, detail)
        self._back_off(status, detail, now)

    def lost(self, error: BaseException | str, now: float) -> bool:
        """The connection broke: what was in flight on it can no longer be matched.

        A connection that was working is replaced (a master closing idle connections, an
        admin's ``CLIENT KILL``, a restart, a load balancer's reset). What it carried is sent
        again on the new one, at once, within the rounds' time, where that is safe: a
        command still queued never reached the master, and a compare-and-act on our own
        token (release, rollback, extend, inspect: :attr:`Command.idempotent`) may run twice.
        An acquire that was written may have landed: it fails as before (its rollback, a
        release, follows on the new connection). True when a connect is to start now.

        One that never finished its handshake backs off, and so does a misconfigured one.
        """
        status, detail = (NodeStatus.UNREACHABLE, error) if isinstance(error, str) else failure_status(error)
        if isinstance(error, ReplyTooLarge):
            self._report(status, detail)  # (the operator's one sign of it: nothing else breaks)
        handshaking = any(entry.step is not None and entry.step is not PROBE for entry in self.in_flight)
        closed = isinstance(error, ClientClosed) or error == CLOSED
        if handshaking or closed or status is NodeStatus.MISCONFIGURED:
            self._fail_all(status, detail)
            # Our own close() or interruption is no news about the master.
            self._back_off(status, detail, now, report=not closed and not isinstance(error, Interrupted))
            return False
        again = [entry for entry in self.in_flight if self._send_again(entry)]
        if again:
            self.in_flight = deque(entry for entry in self.in_flight if entry not in again)
        again.extend(self.backlog)  # never written: they cannot have reached the master
        self.backlog.clear()
        for entry in again:
            entry.resent += 1
        self._fail_all(status, detail)
        if not again:
            self.state = State.IDLE
            return False
        self.backlog = again
        self._start_connect(now)
        return True

    def _send_again(self, entry: InFlight) -> bool:
        round_ = entry.round
        if entry.step is not None or round_ is None or entry.resent >= MAX_RESENDS or not entry.command.idempotent:
            return False
        # A clean-up nobody waits for any more still goes: it takes our key back.
        return round_.cleanup or round_.awaits(self.node)

    def forget(self) -> None:
        """Drop everything without telling anyone: the state of a parent process, after fork."""
        self.in_flight.clear()
        self.backlog.clear()
        self.state = State.IDLE
        self.generation += 1
        self.failures = 0

    def _fail_all(self, status: NodeStatus, detail: str) -> None:
        rounds = [entry.round for entry in self.in_flight] + [entry.round for entry in self.backlog]
        self.in_flight.clear()
        self.backlog.clear()
        for round_ in rounds:
            if round_ is not None and round_.awaits(self.node):
                self._record(round_, status, detail)

    def _back_off(self, status: NodeStatus, detail: str, now: float, *, report: bool = True) -> None:
        if report:
            self._report(status, detail)
        self.failures += 1
        # (The exponent is capped: clean-ups retry at once whatever the back-off, so a master
        # refusing our password may count a thousand failures, and 2.0**1024 overflows.)
        delay = min(RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_FIRST * 2 ** min(self.failures - 1, 30))
        self.state = State.BACKING_OFF
        self.retry_at = now + delay
        self.last_failure = (status, detail)
        self.generation += 1

    def _judgement_due(self) -> bool:
        """Whether the handshake's INFO has yet to answer on this connection."""
        return any(entry.step is not None and entry.step.learn is not None for entry in self.in_flight)

    def _record(self, round_: Round, status: NodeStatus, detail: str = "", reply: object = None) -> None:
        """Record this master's outcome in ``round_``; once that settles the round, wake its waiter."""
        round_.record(self.node, status, detail, reply)
        if self.wakers and round_.settled:
            self._wake(round_)

    def _record_reply(self, round_: Round, reply: object) -> None:
        round_.record_reply(self.node, reply)
        if self.wakers and round_.settled:
            self._wake(round_)

    def _wake(self, round_: Round) -> None:
        waker = self.wakers.pop(id(round_), None)
        if waker is not None:
            waker()

    def refuse(self, detail: str, now: float) -> None:
        """What the master said makes it unfit for Redlock (see the module docstring)."""
        if self.judgement.refusal is None:
            # The rounds already sent (the queue written behind the handshake) count it
            # refused too, their replies dropped; but a clean-up's reply is what happened
            # (one server under two addresses: which of them deleted our key), and counts.
            for entry in self.in_flight:
                round_ = entry.round
                if round_ is not None and not round_.cleanup and round_.awaits(self.node):
                    self._record(round_, NodeStatus.MISCONFIGURED, detail)
        self.judgement.refusal = detail
        self.judgement.recheck_at = now + RECONNECT_BACKOFF_MAX
        self._report(NodeStatus.MISCONFIGURED, detail)

    def recheck(self, now: float) -> Command | None:
        """INFO again, on this connection, to be judged as at the handshake; None when the
        master owes replies for so long that another question would only pile up."""
        if self.looks_hung(now):
            return None
        self.judgement.recheck_at = now + RECONNECT_BACKOFF_MAX
        self.in_flight.append(InFlight(INFO_STEP.command, None, now, INFO_STEP))
        return INFO_STEP.command

    def _report(self, status: NodeStatus, detail: str) -> None:
        if status is not self.reported:
            self.reported = status
            logger.warning("master %s %s: %s", self.name, _TROUBLE[status], detail)

    def _recovered(self) -> None:
        was = _TROUBLE_BEFORE.get(self.reported, "had trouble") if self.reported else "had trouble"
        logger.info("master %s answers again (it %s)", self.name, was)
        self.reported = None

    # --- replies ------------------------------------------------------------------------------

    def received(self, reply: object, now: float) -> Reaction:
        """Match the oldest reply; say whether to re-send something or hang up."""
        entry = self.in_flight.popleft()
        round_ = entry.round
        step = entry.step
        self.last_active = now
        if step is None and round_ is not None and type(reply) is not ErrorReply:
            # (The common case, first: a round's reply, yes or no.)
            if round_.latencies is not None:
                round_.latencies[self.node] = now - entry.sent_at
            if round_.awaits(self.node):
                if entry.resent and entry.command.removes_token and reply_status(reply) is DENIED:
                    # Sent again after a reset: its first send may have run and removed our
                    # token before the connection broke. Not a loss to report.
                    self._record(round_, GRANTED, "not there when sent again after a reset", reply)
                else:
                    self._record_reply(round_, reply)
            if self.reported is TIMEOUT and not self.looks_hung(now):
                self._recovered()  # caught up with what it owed
            return _NO_REACTION
        if round_ is not None and round_.latencies is not None:
            round_.latencies[self.node] = now - entry.sent_at
        if step is PROBE:
            # Any answer, an error too, shows the connection is alive: the commands that
            # waited for it go now, behind it.
            self.state = State.READY
            return Reaction(resend=tuple(self._write_backlog(now)))
        if step is COMMANDS_STEP:
            return self._learned_commands(reply, now)
        if isinstance(reply, ErrorReply):
            if step is not None and reply.message.startswith("NOAUTH"):
                # Not the master's answer to this step (no INFO, no scripts): to anything we
                # send until we authenticate. Said as what it is, at the first step it
                # refuses, and the connection refused, optional step or not.
                detail = f"{reply.message}: {NEEDS_PASSWORD}"
                self._fail_all(NodeStatus.MISCONFIGURED, detail)
                self._back_off(NodeStatus.MISCONFIGURED, detail, now)
                return Reaction(hang_up=True)
            if step is not None and step.loads_script:
                return self._scripts_refused(reply.message, now)
            if step is not None and step.optional:
                return _NO_REACTION  # the master did not say: its facts stay unknown
            if round_ is not None and round_.command.native and not_available(reply.message):
                if entry.command.is_native:
                    return self._native_refused(entry, round_, reply.message, now)
                form = native_form(round_.command, self.capabilities.native)
                if form is not None:
                    # A release written as its script before the master said what it has,
                    # to one that runs no Lua for us: it goes again natively.
                    return self._resend(entry, round_, form, now)
            if is_misconfiguration(reply.message) or self._needs_scripting(entry.command, reply.message):
                if step is not None:
                    # Everything behind a refused AUTH is refused too: hang up, back off,
                    # and tell every waiting round why.
                    self._fail_all(NodeStatus.MISCONFIGURED, reply.message)
                    self._back_off(NodeStatus.MISCONFIGURED, reply.message, now)
                    return Reaction(hang_up=True)
                detail = reply.message
                if not self.capabilities.scripting and entry.command.script is not None:
                    detail = f"{detail}: {NEEDS_SCRIPTING}"
                if round_ is not None and round_.awaits(self.node):
                    self._record(round_, NodeStatus.MISCONFIGURED, detail)
                self._report(NodeStatus.MISCONFIGURED, detail)
                return _NO_REACTION
            if entry.command.args[0] == "EVALSHA" and reply.noscript:
                # Re-sent whole, for stale commands too: a release nobody waits for must
                # still delete the key. It goes behind what was sent meanwhile, which is safe:
                # tokens are fresh per attempt and extends carry their order (see _core).
                resend = entry.command.without_script_cache()
                self.in_flight.append(InFlight(resend, round_, now, resent=entry.resent))
                return Reaction(resend=(resend,))
            if round_ is not None and round_.awaits(self.node):
                self._record(round_, NodeStatus.ERROR, reply.message)
            return _NO_REACTION
        if step is not None:
            if step.learn is not None:
                self.judgement.facts = step.learn(reply)
                if self.judge is not None:
                    self.judge(self, now)
            if self.judgement.refusal is not None or (
                self.reported is NodeStatus.MISCONFIGURED and self._judgement_due()
            ):
                # Refused for what it says (or, after a refusal, not judged again yet): it
                # is not back, though it answers.
                return _NO_REACTION
            self.failures = 0  # a master that answers is no longer a reason to back off
            if self.reported is not None:
                self._recovered()
        if self.reported is NodeStatus.TIMEOUT and not self.looks_hung(now):
            self._recovered()  # caught up with what it owed
        return _NO_REACTION

    # --- native commands and scripting --------------------------------------------------------

    def _learned_commands(self, reply: object, now: float) -> Reaction:
        """The master said which native commands it has (or would not say: then its version
        decides): the commands that waited to learn their form go now, in that form."""
        if not isinstance(reply, ErrorReply):
            self.judgement.facts = with_commands(self.judgement.facts, reply)
        self.capabilities.native = native_commands(self.judgement.facts)
        if self.state is not State.LEARNING:
            return _NO_REACTION
        self.state = State.READY
        return Reaction(resend=tuple(self._write_backlog(now))) if self.backlog else _NO_REACTION

    def _scripts_refused(self, message: str, now: float) -> Reaction:
        """The master will not load a script of ours: fine where it releases natively (what
        needs Lua fails alone, saying why); otherwise nothing would release a lock there, and
        the connection is refused as a misconfiguration (as a refused password is)."""
        if not self.capabilities.scripting or not (
            is_misconfiguration(message) or message.startswith("ERR unknown command")
        ):
            return _NO_REACTION  # said already; or not a refusal (LOADING, BUSY): EVALSHA will tell
        self.capabilities.scripting = False
        if releases_natively(self.capabilities.native):
            return _NO_REACTION
        detail = f"{message}: {NO_SCRIPTING_NOR_NATIVE}"
        self._fail_all(NodeStatus.MISCONFIGURED, detail)
        self._back_off(NodeStatus.MISCONFIGURED, detail, now)
        return Reaction(hang_up=True)

    def _needs_scripting(self, command: Command, message: str) -> bool:
        """A script refused by a master that runs no Lua for us: misconfigured, not failing."""
        return (
            not self.capabilities.scripting and command.script is not None and message.startswith("ERR unknown command")
        )

    def _native_refused(self, entry: InFlight, round_: Round, message: str, now: float) -> Reaction:
        """The master refused a native command it seemed to have, which therefore did
        nothing: it runs our scripts from now on, and this command goes again as its script
        (behind what was sent meanwhile, as after NOSCRIPT; see docs/algorithm.md for why
        that keeps extends in order)."""
        if self.capabilities.native:
            logger.info("master %s refused a native command (%s): using scripts there", self.name, message)
            self.capabilities.native = frozenset()
        if not self.capabilities.scripting:
            detail = f"{message}: {NO_SCRIPTING_NOR_NATIVE}"
            if round_.awaits(self.node):
                self._record(round_, NodeStatus.MISCONFIGURED, detail)
            self._report(NodeStatus.MISCONFIGURED, detail)
            return _NO_REACTION
        return self._resend(entry, round_, None, now)

    def _resend(self, entry: InFlight, round_: Round, form: NativeForm | None, now: float) -> Reaction:
        """Send ``round_``'s command again in another form (``form``, or None: its script)."""
        again = InFlight(round_.command if form is None else form.command, round_, now, resent=entry.resent)
        commands: list[Command] = []
        self._write(again, form, commands)
        return Reaction(resend=tuple(commands))


#: A master's trouble, as a log line says it ("master 10.0.0.3:6379 does not answer in time").
_TROUBLE = {
    NodeStatus.UNREACHABLE: "is unreachable",
    NodeStatus.TIMEOUT: "does not answer in time",
    NodeStatus.ERROR: "answers with errors",
    NodeStatus.MISCONFIGURED: "is misconfigured",
}
_TROUBLE_BEFORE = {
    NodeStatus.UNREACHABLE: "was unreachable",
    NodeStatus.TIMEOUT: "did not answer in time",
    NodeStatus.ERROR: "answered with errors",
    NodeStatus.MISCONFIGURED: "was misconfigured",
}


@dataclass(frozen=True, slots=True)
class Reaction:
    """What the driver does after a reply: write commands (a script in full, or what
    waited for a health check), or hang up."""

    resend: tuple[Command, ...] = ()
    hang_up: bool = False


_NO_REACTION = Reaction()


@dataclass
class Subscriber:
    """The policy of one master's subscriber connection (wake-up on release).

    It says the handshake, then keeps the master's subscriptions equal to the channels
    somebody waits on. Its replies are not matched to commands: a message wakes a waiter,
    anything else (subscribe confirmations, handshake OKs) is ignored, and an error reply
    means the connection is no use (wrong password, no permission) and is hung up.
    """

    node: int
    credentials: Credentials
    state: State = State.IDLE
    generation: int = 0
    subscribed: set[str] = field(default_factory=set)
    retry_at: float = 0.0

    def wants_connection(self, waiters: Waiters[Any], now: float) -> bool:
        if not waiters.channels() or self.state is State.CONNECTING or self.state is State.READY:
            return False
        if self.state is State.BACKING_OFF and now < self.retry_at:
            return False
        self.state = State.CONNECTING
        self.generation += 1
        return True

    def connected(self) -> list[Command]:
        self.state = State.READY
        self.subscribed.clear()
        return [step.command for step in identity_steps(self.credentials)]

    def changes(self, waiters: Waiters[Any]) -> list[Command]:
        """SUBSCRIBE / UNSUBSCRIBE commands that bring the master in line with the waiters."""
        if self.state is not State.READY:
            return []
        wanted = waiters.channels()
        subscribe, unsubscribe = subscription_changes(wanted, self.subscribed)
        self.subscribed = set(wanted)
        commands = []
        if subscribe:
            commands.append(Command(("SUBSCRIBE", *subscribe)))
        if unsubscribe:
            commands.append(Command(("UNSUBSCRIBE", *unsubscribe)))
        return commands

    def received(self, reply: object, waiters: Waiters[Any]) -> bool:
        """Account for one reply; False when the connection must be hung up."""
        if isinstance(reply, ErrorReply):
            return False
        if isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message":
            waiters.released(reply[1].decode(), reply[2])
        return True

    def lost(self, now: float) -> None:
        """Down: look again after a pause (waiters still retry on their own timers)."""
        self.state = State.BACKING_OFF
        self.retry_at = now + RECONNECT_BACKOFF_MAX
        self.subscribed.clear()
        self.generation += 1

    def forget(self) -> None:
        self.state = State.IDLE
        self.subscribed.clear()
        self.generation += 1


Kind = Literal["command", "subscriber"]


@dataclass(slots=True)  # (not frozen: one is made per command, and frozen triples its cost)
class Write:
    """Write ``data`` on the ``kind`` connection of master ``node``."""

    kind: Kind
    node: int
    data: bytes

    def __init__(self, kind: Kind, node: int, data: bytes) -> None:  # (see InFlight.__init__)
        self.kind = kind
        self.node = node
        self.data = data


@dataclass(frozen=True, slots=True)
class Connect:
    """Open the ``kind`` connection of master ``node``; hand the result to ``connected``."""

    kind: Kind
    node: int
    generation: int


@dataclass(frozen=True, slots=True)
class ReadOutcome:
    """What a driver does after feeding received bytes: write, then hang up or lose it."""

    write: bytes = b""
    #: The master refused us in the handshake: close the socket, the policy knows why.
    hang_up: bool = False
    #: The connection is no use (not RESP, a reply nobody asked for): lose it with this.
    failure: BaseException | str | None = None


_NOTHING_TO_DO = ReadOutcome()


class Connections:
    """Every connection of one client, as policy: what both drivers ask and are told.

    A driver owns the sockets (or transports) and the waiting; it asks this object what to
    do at each event (a round to send, a connect that finished, bytes that arrived, a
    connection lost) and carries out the :class:`Write` and :class:`Connect` it is given.
    Not thread-safe: the sync driver holds its lock around every call.
    """

    def __init__(
        self,
        names: Sequence[str],
        credentials: Sequence[Credentials],
        *,
        node_timeout: float,
        connect_timeout: float,
        health_check_interval: float = math.inf,
        strict: bool = False,
    ) -> None:
        self.connect_timeout = connect_timeout
        #: Every warning about a master is a refusal.
        self.strict = strict
        #: A fenced lock was made on this client: masters without an append-only file are
        #: warned about (refused, if strict).
        self.fencing = False
        #: Told of every warning and refusal found at a handshake (the client's telemetry).
        self.on_finding: Callable[[int, Finding], None] | None = None
        # Four timeouts in a row without a reply: not a slow answer any more.
        self.hung_after = 4 * node_timeout
        #: A health check unanswered for a whole request timeout: the connection is gone.
        self.probe_timeout = node_timeout
        #: Who waits for which round (see :meth:`wake`), by the round's id(): every link's.
        self.wakers: dict[int, Callable[[], None]] = {}
        self.links = [
            Link(
                node,
                name,
                credentials[node],
                self.hung_after,
                check_after_idle=health_check_interval,
                wakers=self.wakers,
            )
            for node, name in enumerate(names)
        ]
        for link in self.links:
            link.judge = self._judge
        self.subscribers = [Subscriber(node, credentials[node]) for node in range(len(names))]
        #: Who waits for which release; the drivers make the events.
        self.waiters: Waiters[Any] = Waiters()
        #: The encodings of the round last submitted (see :class:`RoundWires`).
        self.wires: RoundWires | None = None

    def wake(self, round_: Round, waker: Callable[[], None] | None) -> None:
        """Call ``waker`` once a master's outcome settles ``round_`` (None: nobody is to be
        woken any more). The drivers' side of a round: whoever waits for it, and how it is
        woken (a thread's event, a future, a simulated step), is theirs, not the round's."""
        if waker is None:
            self.wakers.pop(id(round_), None)
        else:
            self.wakers[id(round_)] = waker

    def submit(self, round_: Round, node: int, now: float) -> Write | Connect | None:
        """Take ``round_``'s command for master ``node``: what to do now, if anything."""
        link = self.links[node]
        if link.judgement.refusal is not None and link.state is State.READY and not round_.cleanup:
            link._record(round_, NodeStatus.MISCONFIGURED, link.judgement.refusal)
            recheck = link.recheck(now) if now >= link.judgement.recheck_at else None
            return None if recheck is None else Write("command", node, encode(recheck.args))
        action = link.submit(round_, now)
        if action is SEND:
            # (A driver submits a round to each of its masters in turn: one encoding for all.)
            wires = self.wires
            if wires is None or wires.round is not round_:
                wires = self.wires = RoundWires(round_)
            if round_.command.native and link.capabilities.native:
                form = native_form(round_.command, link.capabilities.native)  # (the one the link chose)
                if form is not None:
                    return Write("command", node, wires.native_form(form))
            return Write("command", node, wires.plain())
        if action is Submit.CONNECT:
            return Connect("command", node, link.generation)
        if action is Submit.PROBE:
            return Write("command", node, _PING)
        return None

    def expire_probes(self, now: float) -> list[Connect]:
        """Connections whose health check went unanswered: each is replaced (the driver
        hangs the old one up when it carries out the :class:`Connect`)."""
        return [
            Connect("command", link.node, link.generation)
            for link in self.links
            if link.state is State.PROBING and link.probe_expired(now, self.probe_timeout)
        ]

    def connecting(self) -> bool:
        return any(link.connecting() for link in self.links)

    def connection_states(self) -> list[tuple[bool, bool]]:
        """Whether each master's command and subscriber connections are up."""
        return [
            (link.state is State.READY or link.state is State.LEARNING, subscriber.state is State.READY)
            for link, subscriber in zip(self.links, self.subscribers, strict=True)
        ]

    def facts(self) -> list[MasterFacts]:
        """What each master said about itself on its current command connection."""
        return [link.judgement.facts for link in self.links]

    def same_servers(self) -> list[str | None]:
        """For each master, the earlier one it turned out to be the same server as, if any."""
        return [link.judgement.same_as for link in self.links]

    # --- what the masters are (see redlock._protocol.topology) ---------------------------------------

    def _judge(self, link: Link, now: float) -> None:
        """``link``'s master has just said what it is: warn about its risks, refuse it if unfit."""
        link.judgement.same_as = self._same_server_as(link)
        findings = judged_at_handshake(
            master_findings(
                link.judgement.facts, fencing=self.fencing, strict=self.strict, same_as=link.judgement.same_as
            )
        )
        for finding in findings:
            self._tell(link, finding)
        detail = refusal_detail(findings)
        if detail is not None:
            link.refuse(detail, now)
        else:
            link.judgement.refusal = None  # (it is back: the reply that brought this says so)

    def _same_server_as(self, link: Link) -> str | None:
        """The master already known under the run_id ``link``'s master answered with.

        The first address to answer keeps the server; each later one is the duplicate.
        (A run_id of a connection lost since still names that server: it changes only when
        the server restarts.)
        """
        run_id = link.judgement.facts.run_id
        if run_id is None:
            return None
        for other in self.links:
            if other is not link and other.judgement.same_as is None and other.judgement.facts.run_id == run_id:
                return other.name
        return None

    def _tell(self, link: Link, finding: Finding) -> None:
        if finding.code in link.judgement.told:
            return  # once per connection, however often it is asked again
        link.judgement.told.add(finding.code)
        # A refusal is logged as the master turning misconfigured, once per change of state.
        if finding.severity is Severity.WARNING:
            logger.warning("master %s: %s", link.name, finding.message)
        if self.on_finding is not None:
            self.on_finding(link.node, finding)

    def use_fencing(self, now: float) -> None:
        """A fenced lock was made on this client: the masters connected already are judged
        again (later ones are, at their handshake), now that their persistence matters."""
        if self.fencing:
            return
        self.fencing = True
        for link in self.links:
            if link.state is State.READY and link.judgement.facts.answered:
                self._judge(link, now)  # (a handshake under way is judged when its INFO answers)

    def rejudge(self, now: float) -> list[Write]:
        """Ask every connected master what it is again (``check()``: its answers are judged
        before the replies to what is sent next)."""
        writes = []
        for link in self.links:
            command = link.recheck(now) if link.state is State.READY else None
            if command is not None:
                writes.append(Write("command", link.node, encode(command.args)))
        return writes

    def time_out(self, round_: Round) -> None:
        """The round's time is up: each master it still waits for failed to answer (one it
        no longer needs, in a decided round, stays "not awaited")."""
        if round_.settled:
            return
        waited = round_.timeout + (round_.patience if round_.overtime else 0.0)
        for node in round_.pending:
            state = self.links[node].state
            waited_for = (
                "connection"
                if state is State.CONNECTING
                else "answer to a health check"
                if state is State.PROBING
                else "reply"
            )
            self.links[node]._record(round_, NodeStatus.TIMEOUT, f"no {waited_for} within {waited:.2f}s")

    def overtime(self, round_: Round, deadline: float) -> float | None:
        return overtime_deadline(self.links, round_, self.connect_timeout, deadline)

    def is_current(self, connect: Connect) -> bool:
        policy = self.links[connect.node] if connect.kind == "command" else self.subscribers[connect.node]
        return policy.generation == connect.generation

    def connected(self, connect: Connect, error: BaseException | None, now: float) -> Write | None:
        """A connect finished (``error`` None: the socket is up). What to write first on it.

        The driver only calls this for a current connect (:meth:`is_current`); a stale one's
        socket is closed without asking.
        """
        if connect.kind == "command":
            link = self.links[connect.node]
            if error is not None:
                link.connect_failed(error, now)
                return None
            return Write("command", connect.node, b"".join(encode(c.args) for c in link.connected(now)))
        subscriber = self.subscribers[connect.node]
        if error is not None:
            subscriber.lost(now)
            return None
        commands = [*subscriber.connected(), *subscriber.changes(self.waiters)]
        return Write("subscriber", connect.node, b"".join(encode(c.args) for c in commands))

    def lost(self, kind: Kind, node: int, error: BaseException | str, now: float) -> Connect | None:
        """A connection failed; a :class:`Connect` when its commands go again on a new one."""
        if kind == "subscriber":
            self.subscribers[node].lost(now)
            return None
        link = self.links[node]
        return Connect("command", node, link.generation) if link.lost(error, now) else None

    def received(self, kind: Kind, node: int, parser: Any, now: float) -> ReadOutcome:
        """Take every whole reply the parser holds; say what to write or whether to hang up."""
        writes: list[bytes] = []
        try:
            if kind == "subscriber":
                subscriber = self.subscribers[node]
                while (reply := parser.gets()) is not False:
                    if not subscriber.received(reply, self.waiters):
                        return ReadOutcome(b"".join(writes), failure="refused")
                return _NOTHING_TO_DO
            link = self.links[node]
            while (reply := parser.gets()) is not False:
                if not link.in_flight:
                    return ReadOutcome(b"".join(writes), failure=ProtocolViolation("a reply nobody asked for"))
                reaction = link.received(reply, now)
                if reaction is _NO_REACTION:
                    continue
                if reaction.hang_up:
                    return ReadOutcome(b"".join(writes), hang_up=True)
                for command in reaction.resend:
                    writes.append(encode(command.args))
        except ProtocolViolation as error:
            return ReadOutcome(b"".join(writes), failure=error)
        return ReadOutcome(b"".join(writes)) if writes else _NOTHING_TO_DO

    def subscriptions(self, enabled: bool, now: float) -> list[Write | Connect]:
        """Bring the subscriber connections in line with who waits: connect, (un)subscribe."""
        if not enabled:
            return []
        actions: list[Write | Connect] = []
        wanted = self.waiters.channels()
        for node, subscriber in enumerate(self.subscribers):
            if subscriber.state is State.READY and subscriber.subscribed == wanted:
                continue  # (already in line: every new waiter on a name others wait on asks)
            if subscriber.wants_connection(self.waiters, now):
                actions.append(Connect("subscriber", node, subscriber.generation))
            changes = subscriber.changes(self.waiters)
            if changes:
                actions.append(Write("subscriber", node, b"".join(encode(c.args) for c in changes)))
        return actions

    def delivering(self) -> bool:
        """Whether a connect under way still owes its master commands (close() waits)."""
        return any(link.connecting() and link.backlog for link in self.links)

    def close(self, now: float) -> None:
        for link in self.links:
            link.lost(CLOSED, now)

    def forget(self) -> None:
        """In a fork's child: drop the parent's state without telling anyone."""
        for link in self.links:
            link.forget()
        for subscriber in self.subscribers:
            subscriber.forget()
        self.waiters = Waiters()
