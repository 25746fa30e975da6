"""Replies that would grow without bound: a hostile master on a real socket, beside real ones.

The hostile master is a socket server in this process, on a free loopback port: it answers
a connection's handshake as a master would (INFO, COMMAND INFO, SCRIPT LOAD), so the client
takes it for one, and answers the first command of a lock with a reply that never ends, or
announces one that cannot be held. Before the limits on a reply's size the
client read such a stream into memory without end (+254 MB in a few seconds) and a header
``*2147483647`` had hiredis ask for 16 GiB; here each call still succeeds on the healthy
masters, the hostile one counts as an error naming the limit, and the process's memory
stays within a loose bound (loose: it tells a bounded read from an unbounded one, and
measures nothing finer).

The pure part: :class:`redlock._protocol.connection.ReplyReader` cuts any stream of replies at any
point and reads it as hiredis alone does, within the limits, and refuses what goes past them.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from redlock import NodeStatus, QuorumUnavailable
from redlock._protocol.connection import ErrorReply, ProtocolViolation, ReplyTooLarge, reply_parser
from redlock.servers import LocalMasters

from .conftest import ClientFactory, unique

#: What a hostile master streams at most per connection: far beyond any limit, and enough
#: to fail the memory bound below by a wide margin if the stream is read into memory, yet
#: finite, so that a client without limits fails the test instead of exhausting the machine.
STREAM_CAP = 256 * 1024 * 1024

#: The replies a hostile master answers a lock's command with: a head, then its body
#: repeated until the client hangs up (or STREAM_CAP).
HOSTILE = {
    # A string that announces a gigabyte, and keeps coming.
    "endless string": (b"$1073741824\r\n", b"x"),
    # A status line whose end never comes (no length announced at all).
    "endless line": (b"+", b"x"),
    # An array of 2**31 - 1 elements (16 GiB of pointers, allocated at its header), coming.
    "giant array": (b"*2147483647\r\n", b":1\r\n"),
    # Arrays nested in arrays, each small, a few thousand elements in all.
    "nested arrays": (b"", b"*200\r\n"),
}


class HostileMaster:
    """A master by its handshake, then a reply that never ends to everything else."""

    def __init__(self, head: bytes, body: bytes) -> None:
        self.head = head
        self.chunk = body * (65536 // len(body))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}"
        self.run_id = uuid.uuid4().hex
        self.streams = 0
        self.connections: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.connections.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        reader = hiredis.Reader()
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                reader.feed(data)
                while (command := reader.gets()) is not False:
                    answer = self._answer(command)
                    if answer is None:
                        self._stream(conn)
                        return
                    conn.sendall(answer)

    def _answer(self, command: list[bytes]) -> bytes | None:
        name = command[0].upper()
        if name == b"INFO":
            info = f"# Server\r\nredis_version:7.0.0\r\nrun_id:{self.run_id}\r\n# Replication\r\nrole:master\r\n"
            return b"$%d\r\n%s\r\n" % (len(info), info.encode())
        if name == b"COMMAND":  # COMMAND INFO of the native commands: it has none
            return b"*%d\r\n" % (len(command) - 2) + b"*-1\r\n" * (len(command) - 2)
        if name == b"SCRIPT":
            return b"$40\r\n%s\r\n" % hashlib.sha1(command[2]).hexdigest().encode()
        if name in (b"AUTH", b"SELECT", b"CLIENT"):
            return b"+OK\r\n"
        return None  # a lock's command, or a health check's PING

    def _stream(self, conn: socket.socket) -> None:
        self.streams += 1
        with contextlib.suppress(OSError):
            conn.sendall(self.head)
            sent = 0
            while sent < STREAM_CAP:  # until the client hangs up (an OSError here)
                conn.sendall(self.chunk)
                sent += len(self.chunk)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # (wakes accept(); close() alone does not)
        self.listener.close()
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in self.threads:
            thread.join(timeout=10)


@pytest.fixture(params=sorted(HOSTILE))
def hostile(request: pytest.FixtureRequest) -> Iterator[HostileMaster]:
    master = HostileMaster(*HOSTILE[request.param])
    try:
        yield master
    finally:
        master.close()


def rss_bytes() -> int:
    """This process's resident memory now (not its peak: that would hide a recovery)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_a_hostile_master_is_an_error_and_memory_stays_bounded(
    client: ClientFactory, masters: LocalMasters, hostile: HostileMaster, caplog: pytest.LogCaptureFixture
) -> None:
    # Four healthy masters and the hostile one: every call has its majority without it.
    rl = client([*masters.urls[:4], hostile.url], unavailable_timeout=5.0)
    before = rss_bytes()
    with caplog.at_level(logging.WARNING, logger="redlock"):
        for _ in range(20):
            name = unique("hostile")
            lock = rl.lock(name, ttl=10.0)
            assert lock.acquire(blocking=False)
            *healthy, theirs = lock.outcomes
            assert theirs.status is not NodeStatus.GRANTED
            assert sum(outcome.status is NodeStatus.GRANTED for outcome in healthy) >= lock.quorum
            assert rl.inspect(name).leading == lock.token
            lock.release()
            assert rl.inspect(name).leading is None
    grown = rss_bytes() - before
    assert hostile.streams > 0, "the hostile master was never asked anything"
    assert grown < 50 * 1024 * 1024, f"memory grew by {grown / 2**20:.0f} MiB while a master streamed"
    # The operator is told, once, why that master counts as an error.
    port = hostile.url.rsplit(":", 1)[1]
    reasons = [r.getMessage() for r in caplog.records if f":{port} answers with errors" in r.getMessage()]
    assert reasons, "the hostile master's too-long reply was never reported"
    assert "max_reply_" in reasons[0]
    assert "its connection was closed" in reasons[0]


def test_the_outcome_names_the_limit(client: ClientFactory, masters: LocalMasters, hostile: HostileMaster) -> None:
    # One healthy master, the hostile one and one that refuses connections: the round needs
    # the hostile master's answer, and gets its failure, with the reason.
    # The reader must take in a limit's worth of the stream before it can name it: on a
    # loaded machine that outlasts the suite's 0.1 s (a timeout, not the reason).
    rl = client([masters.urls[0], hostile.url, "redis://127.0.0.1:1"], node_timeout=2.0)
    with pytest.raises(QuorumUnavailable) as failed:
        rl.lock(unique("hostile"), ttl=10.0).acquire(blocking=False)
    healthy, theirs, down = failed.value.outcomes
    assert (healthy.status, theirs.status, down.status) == (
        NodeStatus.GRANTED,
        NodeStatus.ERROR,
        NodeStatus.UNREACHABLE,
    )
    assert "max_reply_" in theirs.detail
    assert "its connection was closed" in theirs.detail


# --- the reader itself (pure) ------------------------------------------------------------------------


def _resp(reply: Any) -> bytes:
    if isinstance(reply, list):
        return b"*%d\r\n" % len(reply) + b"".join(_resp(element) for element in reply)
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if reply is None:
        return b"$-1\r\n"
    return b"$%d\r\n%s\r\n" % (len(reply), reply)


_REPLIES = st.recursive(
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.binary(max_size=300)),
    lambda children: st.lists(children, max_size=6),
    max_leaves=40,
)


def _read(stream: bytes, cuts: list[int], *, drain: bool) -> list[Any]:
    """The replies of ``stream`` fed in pieces, taken after each (``drain``) or at the end
    (as the sync driver does while a socket has more)."""
    reader = reply_parser(1 << 16, 256)
    replies = []
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        reader.feed(stream[start:cut])
        start = max(start, cut)
        while drain and (reply := reader.gets()) is not False:
            replies.append(reply)
    while (reply := reader.gets()) is not False:
        replies.append(reply)
    return replies


@given(st.lists(_REPLIES, max_size=8), st.lists(st.integers(0, 20_000), max_size=12), st.booleans())
def test_any_cut_of_any_replies_within_the_limits_reads_as_hiredis_reads_it(
    replies: list[Any], cuts: list[int], drain: bool
) -> None:
    stream = b"".join(_resp(reply) for reply in replies)
    # (Cuts through the stream at random points: lines, headers, CRLFs and bodies split.)
    assert _read(stream, [cut % (len(stream) + 1) for cut in cuts], drain=drain) == replies


@given(st.integers(1, 40), st.lists(st.integers(0, 400), max_size=6))
def test_a_reply_past_the_limits_is_refused_however_it_is_cut(prefix_replies: int, cuts: list[int]) -> None:
    before = b"+OK\r\n" * prefix_replies
    for too_much, limit in [
        (b"$70000\r\n" + b"x" * 70_000 + b"\r\n", "max_reply_bytes"),
        (b"+" + b"x" * 70_000, "max_reply_bytes"),
        (b"*2147483647\r\n:1\r\n", "max_reply_elements"),
        (b"*100\r\n" * 3, "max_reply_elements"),
        (b"*2\r\n" + b"$40000\r\n" + b"x" * 40_000 + b"\r\n" + b"$40000\r\n", "max_reply_bytes"),
    ]:
        stream = before + too_much
        reader = reply_parser(1 << 16, 256)
        read: list[Any] = []
        start = 0
        with pytest.raises(ReplyTooLarge, match=limit):
            for cut in [*sorted(cut % len(stream) for cut in cuts), len(stream)]:
                reader.feed(stream[start:cut])
                start = max(start, cut)
                while (reply := reader.gets()) is not False:
                    read.append(reply)
        # The replies before it still count: fed before the refusal, read after it.
        while (reply := reader.gets()) is not False:
            read.append(reply)
        assert read == [b"OK"] * prefix_replies


def test_no_resp3_aggregate_passes() -> None:
    # (hiredis reads them, asked for or not, and one could hide a length from the scan.)
    for resp3 in (b"%1\r\n+a\r\n+b\r\n", b"~1\r\n:1\r\n", b">1\r\n:1\r\n", b"|1\r\n+a\r\n+b\r\n:1\r\n"):
        reader = reply_parser()
        with pytest.raises(ProtocolViolation, match="not a RESP2 reply"):
            reader.feed(b":1\r\n" + resp3)
        assert reader.gets() == 1
    reader = reply_parser()
    reader.feed(b"-ERR no\r\n")
    assert isinstance(reader.gets(), ErrorReply)
