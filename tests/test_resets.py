"""Connections that masters and middleboxes reset, on real masters, for both APIs.

Production closes idle connections: the server's ``timeout``, an admin's ``CLIENT KILL``,
a master restarted with its data, a load balancer or NAT that forgets a flow without a word.
None of these may turn a healthy lock into a false ``ReleaseUnconfirmed``, ``LockLost`` or
``QuorumUnavailable``, nor leave our keys behind. Each test makes the reset for real and
looks at the masters afterwards.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import redlock
import redlock._io.sync
import redlock.asyncio
from chaos.proxy import ProxyLoop
from redlock import ExtendUnconfirmed, LockLost
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, unique


def _kill_our_connections(raw: list[redis.Redis]) -> None:
    """CLIENT KILL every normal connection but the killer's own: the Redlock client's."""
    for master in raw:
        master.client_kill_filter(_type="normal", skipme=True)


def _only_raw_connected(raw: list[redis.Redis]) -> bool:
    return all(len(master.client_list()) == 1 for master in raw)


def _keys(raw: list[redis.Redis], name: str) -> list[int]:
    return [master.exists(name) for master in raw]


#: The node timeout of a test whose step follows a reset: the step waits for a new
#: connection's handshake (INFO, COMMAND INFO, a SCRIPT LOAD of every script), which can take
#: a master more than the suite's 0.1 s on a loaded machine. The steps are judged, not their speed.
AFTER_A_RESET = 0.5


@pytest.fixture
def three(fresh_masters: MastersFactory) -> Iterator[tuple[LocalMasters, list[redis.Redis]]]:
    masters = fresh_masters(3)
    raw = [redis.Redis.from_url(url, socket_timeout=5) for url in masters.urls]
    yield masters, raw
    for master in raw:
        master.close()


@pytest.mark.parametrize("step", ["release", "extend", "acquire"])
def test_client_kill_between_operations_is_not_an_outage(
    client: ClientFactory, three: tuple[LocalMasters, list[redis.Redis]], step: str
) -> None:
    masters, raw = three
    rl = client(masters.urls, wake_on_release=False, node_timeout=AFTER_A_RESET)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    _kill_our_connections(raw)
    assert eventually(lambda: _only_raw_connected(raw))
    if step == "release":
        lock.release()
        assert _keys(raw, lock.name) == [0, 0, 0]
    elif step == "extend":
        assert lock.extend() > 9.0
        assert lock.locked()
        lock.release()
    else:
        other = rl.lock(unique(), ttl=10.0)
        assert other.acquire(blocking=False)  # not QuorumUnavailable on healthy masters
        other.release()
        lock.release()
    assert _keys(raw, lock.name) == [0, 0, 0]


def _killed_between_operations(client: ClientFactory, masters: LocalMasters) -> None:
    """Release and extend after every master killed our connections, both succeeding on
    new ones, and nothing of ours left behind."""
    raw = [redis.Redis.from_url(url, socket_timeout=5) for url in masters.urls]
    try:
        rl = client(masters.urls, wake_on_release=False, node_timeout=AFTER_A_RESET)
        lock = rl.lock(unique(), ttl=10.0)
        assert lock.acquire(blocking=False)
        _kill_our_connections(raw)
        assert lock.extend() > 9.0
        _kill_our_connections(raw)
        lock.release()
        assert _keys(raw, lock.name) == [0, 0, 0]
    finally:
        for master in raw:
            master.close()


def test_client_kill_over_tls(client: ClientFactory, tls_masters: LocalMasters) -> None:
    """Resets on TLS connections (the Debian server of the matrix serves TLS)."""
    _killed_between_operations(client, tls_masters)


def test_client_kill_over_unix_sockets(client: ClientFactory, unix_masters: LocalMasters) -> None:
    _killed_between_operations(client, unix_masters)


class _WritesWithoutLooking(redlock._io.sync.Driver):
    def _look_before_writing(self) -> None:
        pass


@pytest.mark.parametrize("step", ["release", "extend"])
def test_a_connection_reset_under_a_written_command_sends_it_again(
    three: tuple[LocalMasters, list[redis.Redis]], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The race no look-before-writing can close: the reset lands while the command is on
    its way. A compare-and-act on our own token goes again on a new connection."""
    masters, raw = three
    # Write without looking first: the reset is only found by the write's own failure or
    # the read after it. (A subclass, not a patch: a compiled driver's methods cannot be
    # replaced, and the compiled tier runs this test too.)
    monkeypatch.setattr(redlock.Redlock, "_driver_class", _WritesWithoutLooking)
    rl = redlock.Redlock(masters.urls, node_timeout=AFTER_A_RESET, wake_on_release=False)
    try:
        lock = rl.lock(unique(), ttl=10.0)
        assert lock.acquire(blocking=False)
        _kill_our_connections(raw)
        assert eventually(lambda: _only_raw_connected(raw))
        if step == "extend":
            assert lock.extend() > 9.0
        lock.release()
        assert _keys(raw, lock.name) == [0, 0, 0]
    finally:
        rl.close()


@pytest.mark.slow
def test_server_timeout_closes_idle_connections_and_every_operation_still_works(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    masters = matrix_masters(3, owner_only=False)  # open: CONFIG SET timeout
    # (Checked before use when idle: the masters close the test's own idle connections too;
    # and tried again when the master closes one just as its check goes out, seen under load.)
    again = {"retry": Retry(NoBackoff(), 3), "retry_on_error": [redis.exceptions.ConnectionError]}
    raw = [redis.Redis.from_url(url, health_check_interval=0.5, **again) for url in masters.urls]
    for master in raw:
        master.config_set("timeout", 1)
    rl = client(masters.urls, wake_on_release=False)
    lock = rl.lock(unique(), ttl=30.0)
    assert lock.acquire(blocking=False)
    assert eventually(lambda: _only_raw_connected(raw))
    assert lock.extend() > 29.0
    assert eventually(lambda: _only_raw_connected(raw))
    lock.release()
    assert _keys(raw, lock.name) == [0, 0, 0]
    assert eventually(lambda: _only_raw_connected(raw))
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_master_restarted_with_its_data_keeps_the_lock_and_takes_the_release(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    masters = fresh_masters(3, persistence="aof-always")
    raw = [redis.Redis.from_url(url, socket_timeout=5) for url in masters.urls]
    # The extend after the restarts goes on new connections, behind their handshakes, and
    # each master fsyncs it before replying, which can take every master more than 0.1 s on
    # a loaded machine.
    rl = client(masters.urls, wake_on_release=False, node_timeout=0.5)
    lock = rl.lock(unique(), ttl=30.0)
    assert lock.acquire(blocking=False)
    # The acquire returns on a majority's replies: the third master may not have run its
    # SET yet (a loaded machine delays it, and a restart would then lose it unread).
    assert eventually(lambda: _keys(raw, lock.name) == [1, 1, 1])
    for master in masters:
        master.restart()  # keeps its keys (AOF, fsync always), not our sockets
    assert _keys(raw, lock.name) == [1, 1, 1]
    assert lock.extend() > 29.0
    lock.release()
    assert _keys(raw, lock.name) == [0, 0, 0]


@pytest.fixture
def proxied(fresh_masters: MastersFactory) -> Iterator[tuple[list[str], ProxyLoop, list[redis.Redis]]]:
    """Three masters, each behind a loopback proxy that can forget its flows silently."""
    masters = fresh_masters(3, owner_only=False)  # a link's URL is the proxy's: no password
    raw = [redis.Redis.from_url(url, socket_timeout=5) for url in masters.urls]
    with ProxyLoop() as proxies:
        links = [proxies.link(("127.0.0.1", master.port), name=f"m{i}") for i, master in enumerate(masters)]
        yield [link.url for link in links], proxies, raw
    for master in raw:
        master.close()


@pytest.mark.slow
@pytest.mark.parametrize("step", ["release", "extend", "acquire"])
def test_a_flow_forgotten_by_a_middlebox_is_found_by_the_health_check(
    client: ClientFactory, proxied: tuple[list[str], ProxyLoop, list[redis.Redis]], step: str
) -> None:
    """A NAT or load balancer that forgot an idle flow drops what is written on it, with no
    FIN or RST: only a check of the idle connection finds that out before a command is lost."""
    urls, proxies, raw = proxied
    rl = client(urls, wake_on_release=False, health_check_interval=0.2)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    assert eventually(lambda: _keys(raw, lock.name) == [1, 1, 1])  # (the acquire needs only 2)
    time.sleep(0.3)  # idle past the health-check interval
    for link in proxies.links:
        assert link.forget_all() == 1
    if step == "release":
        lock.release()
    elif step == "extend":
        assert lock.extend() > 9.0
        lock.release()
    else:
        other = rl.lock(unique(), ttl=10.0)
        assert other.acquire(blocking=False)
        other.release()
        assert eventually(lambda: _keys(raw, other.name) == [0, 0, 0])
        lock.release()
    # A release returns once a majority confirmed it, past its node_timeout: the last one
    # may land a moment later, on its new connection.
    assert eventually(lambda: _keys(raw, lock.name) == [0, 0, 0])


def test_without_a_health_check_a_forgotten_flow_costs_the_release(
    proxied: tuple[list[str], ProxyLoop, list[redis.Redis]],
) -> None:
    """What the health check buys: the same forgotten flows with it turned off swallow the
    release (the test above is meaningful only if this one fails the release)."""
    urls, proxies, raw = proxied
    rl = redlock.Redlock(urls, wake_on_release=False, health_check_interval=None, node_timeout=0.1)
    try:
        lock = rl.lock(unique(), ttl=10.0)
        assert lock.acquire(blocking=False)
        assert eventually(lambda: _keys(raw, lock.name) == [1, 1, 1])  # (the acquire needs only 2)
        for link in proxies.links:
            link.forget_all()
        with pytest.raises(redlock.ReleaseUnconfirmed):
            lock.release()
        assert _keys(raw, lock.name) == [1, 1, 1]
    finally:
        rl.close()


def test_every_connection_has_tcp_keepalive(three: tuple[LocalMasters, list[redis.Redis]]) -> None:
    masters, _ = three
    rl = redlock.Redlock(masters.urls, wake_on_release=False)
    try:
        lock = rl.lock(unique(), ttl=10.0)
        assert lock.acquire(blocking=False)
        lock.release()
        socks = [conn.sock for conn in rl._driver._conns.values()]
        assert len(socks) == 3
        for sock in socks:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60
    finally:
        rl.close()


def test_asyncio_connections_have_tcp_keepalive(three: tuple[LocalMasters, list[redis.Redis]]) -> None:
    masters, _ = three

    async def main() -> list[int]:
        rl = redlock.asyncio.Redlock(masters.urls, wake_on_release=False)
        try:
            async with rl.lock(unique(), ttl=10.0):
                pass
            return [
                conn.transport.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
                for conn in rl._driver._conns.values()
            ]
        finally:
            await rl.aclose()

    assert asyncio.run(main()) == [1, 1, 1]


def test_an_extend_no_majority_answered_is_unconfirmed_not_a_loss(
    client: ClientFactory, three: tuple[LocalMasters, list[redis.Redis]]
) -> None:
    masters, raw = three
    rl = client(masters.urls, wake_on_release=False)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    masters[1].pause()
    masters[2].pause()
    try:
        with pytest.raises(ExtendUnconfirmed) as unconfirmed:
            lock.extend()
        assert "may be retried" in str(unconfirmed.value)
        assert not isinstance(unconfirmed.value, LockLost)
        assert lock.locked()
        assert not lock.lost
        # The lease of the acquire still stands (less the time the refused extend took,
        # which a loaded machine stretches): not zeroed, not shortened to nothing.
        assert lock.validity > 5.0
    finally:
        time.sleep(1.2)
        masters[1].resume()
        masters[2].resume()
    # The retry must find them answering. Right after SIGCONT a master has not yet written
    # what it owes our connection, and a connection owing replies for more than 4 node
    # timeouts (a loaded machine stretches the refused extend and the asserts past that) is
    # skipped as hung: the retry would be refused again, rightly. A master that answers a
    # PING of its own connection has already run what our connection sent before it.
    assert raw[1].ping()
    assert raw[2].ping()
    assert lock.extend() > 5.0  # retried, now with a majority
    lock.release()
    assert _keys(raw, lock.name) == [0, 0, 0]


def test_after_lock_lost_from_extend_locked_is_false(
    client: ClientFactory, three: tuple[LocalMasters, list[redis.Redis]]
) -> None:
    masters, raw = three
    rl = client(masters.urls, wake_on_release=False)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    for master in raw:
        master.delete(lock.name)
    with pytest.raises(LockLost):
        lock.extend()
    assert not lock.locked()
    assert lock.lost


class _Clock:
    """time.monotonic, plus a jump the test makes: a holder that was paused."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def test_a_loss_found_by_locked_is_reported_once(
    client: ClientFactory, three: tuple[LocalMasters, list[redis.Redis]]
) -> None:
    """A holder paused past its validity resumes, and its own locked() sees the expiry
    before the renewer does: the loss is recorded there, and on_lost called once, whoever
    finds it later."""
    masters, _ = three
    clock = _Clock()
    lost: list[Any] = []
    rl = client(masters.urls, wake_on_release=False, clock=clock)
    lock = rl.lock(unique(), ttl=1.5, auto_extend=True, on_lost=lost.append)
    assert lock.acquire(blocking=False)
    clock.offset = 5.0  # the pause: its validity ran out meanwhile
    assert not lock.locked()
    assert lock.lost
    assert len(lost) == 1
    time.sleep(1.2)  # the renewer wakes, and finds the lock lost too
    assert len(lost) == 1
    assert not lock.locked()
    with pytest.raises(LockLost, match="validity ran out"):
        lock.release()


def _two_event_loops(urls: list[str]) -> None:
    rl = redlock.asyncio.Redlock(urls, wake_on_release=False)

    async def cycle() -> float:
        started = time.monotonic()
        async with rl.lock(unique(), ttl=5.0):
            pass
        return time.monotonic() - started

    assert asyncio.run(cycle()) < 5.0
    assert asyncio.run(cycle()) < 5.0  # not unavailable_timeout (10 s) of "hung" masters

    async def close() -> None:
        await rl.aclose()

    asyncio.run(close())


def test_an_asyncio_client_moves_to_a_new_event_loop(three: tuple[LocalMasters, list[redis.Redis]]) -> None:
    """A module-level client used by two ``asyncio.run()`` calls (a test runner's loop per
    test does the same): the second loop reconnects at once, and nothing is left unclosed
    (an unclosed transport would fail this suite: warnings are errors)."""
    _two_event_loops(three[0].urls)


def test_an_asyncio_client_moves_to_a_new_event_loop_over_tls(tls_masters: LocalMasters) -> None:
    _two_event_loops(tls_masters.urls)


def test_an_asyncio_client_refuses_a_second_running_loop(three: tuple[LocalMasters, list[redis.Redis]]) -> None:
    """Two loops running at once (two threads) cannot share one client's connections."""
    masters, _ = three
    rl = redlock.asyncio.Redlock(masters.urls, wake_on_release=False)
    started, finish = threading.Event(), threading.Event()

    async def hold_the_loop() -> None:
        async with rl.lock(unique(), ttl=5.0):
            started.set()
            while not finish.is_set():
                await asyncio.sleep(0.01)

    holder = threading.Thread(target=asyncio.run, args=(hold_the_loop(),))
    holder.start()
    try:
        assert started.wait(10)

        async def second() -> None:
            await rl.lock(unique(), ttl=5.0).acquire(blocking=False)

        with pytest.raises(RuntimeError, match="one client per event loop"):
            asyncio.run(second())
    finally:
        finish.set()
        holder.join(10)

    async def close() -> None:
        await rl.aclose()

    asyncio.run(close())
