"""The loopback link proxy (chaos.proxy) against a real redis-server.

Timing bounds are deliberately loose (a 2-core CI box can stall for a while): latency is
checked as "at least what was asked", a hang as "times out", never to the millisecond.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chaos.proxy import Link, ProxyLoop
from tests.conftest import MastersFactory


def client_for(link: Link, timeout: float = 2.0) -> redis.Redis:
    # No retries: redis-py's default would quietly reconnect and hide what the link did.
    return redis.Redis(
        host=link.host,
        port=link.port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def wait_until(condition: object, timeout: float = 5.0) -> bool:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


@pytest.fixture
def proxies() -> Iterator[ProxyLoop]:
    with ProxyLoop() as loop:
        yield loop


@pytest.fixture
def master(fresh_masters: MastersFactory) -> tuple[str, int]:
    # Links only fault the network, never the server; it is open (owner_only=False), as the
    # chaos harness's are, since the clients through a link know its address only.
    [node] = fresh_masters(1, owner_only=False)
    return (node.host, node.port)


def test_commands_pass_through(proxies: ProxyLoop, master: tuple[str, int]) -> None:
    link = proxies.link(master, name="c1-A")
    assert link.port != master[1]
    with client_for(link) as r:
        assert r.ping()
        r.set("chaos-proxy:pass", "x" * 200_000)  # larger than one chunk
        assert r.get("chaos-proxy:pass") == b"x" * 200_000
        r.delete("chaos-proxy:pass")
    stats = link.stats
    assert stats.accepted == stats.connected == 1
    assert stats.to_server > 200_000
    assert stats.to_client > 200_000


def test_blackhole_hangs_old_and_new_connections_until_healed(proxies: ProxyLoop, master: tuple[str, int]) -> None:
    link = proxies.link(master)
    old = client_for(link, timeout=0.3)
    assert old.ping()
    link.blackhole()
    assert link.blackholed
    with pytest.raises(redis.TimeoutError):
        old.ping()
    # A new connection is accepted (the kernel completes the handshake) but never answered.
    new = client_for(link, timeout=0.3)
    with pytest.raises(redis.TimeoutError):
        new.ping()
    link.heal()
    assert not link.blackholed
    with client_for(link) as healed:
        assert healed.ping()
    old.close()
    new.close()


def test_only_the_blackholed_link_is_cut(proxies: ProxyLoop, master: tuple[str, int]) -> None:
    # Two clients' links to the same master: a partition cuts one and not the other.
    cut, kept = proxies.link(master, name="c1-A"), proxies.link(master, name="c2-A")
    cut.blackhole()
    with client_for(cut, timeout=0.3) as r1, client_for(kept) as r2:
        assert r2.ping()
        with pytest.raises(redis.TimeoutError):
            r1.ping()


def test_bytes_held_by_a_blackhole_land_on_heal_unless_reset(proxies: ProxyLoop, master: tuple[str, int]) -> None:
    link = proxies.link(master)
    direct = redis.Redis(host=master[0], port=master[1], socket_timeout=2)
    key = "chaos-proxy:late"
    direct.delete(key)
    with socket.create_connection(link.address, timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        assert sock.recv(100) == b"+PONG\r\n"
        link.blackhole()
        sock.sendall(f"SET {key} late\r\n".encode())
        time.sleep(0.2)
        assert direct.get(key) is None  # held, not delivered
        link.heal()
        # The request the client may long have given up on lands now.
        assert wait_until(lambda: direct.get(key) == b"late")
        assert sock.recv(100) == b"+OK\r\n"

    direct.delete(key)
    with socket.create_connection(link.address, timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        assert sock.recv(100) == b"+PONG\r\n"
        link.blackhole()
        sock.sendall(f"SET {key} dropped\r\n".encode())
        time.sleep(0.1)
        link.heal(reset=True)
        with pytest.raises(ConnectionResetError):
            sock.recv(100)  # RST, not FIN: the held bytes are gone with the connection
    time.sleep(0.1)
    assert direct.get(key) is None
    direct.close()


def test_latency_delays_each_direction(proxies: ProxyLoop, master: tuple[str, int]) -> None:
    link = proxies.link(master)
    with client_for(link, timeout=5) as r:
        assert r.ping()  # connected before timing
        link.set_latency(to_server=0.15, to_client=0.1)
        assert link.latency == (0.15, 0.1)
        start = time.monotonic()
        for _ in range(3):
            assert r.ping()
        elapsed = time.monotonic() - start
        assert elapsed >= 3 * 0.25
        assert elapsed < 3 * 0.25 + 3.0  # generous: only "not wildly more"
        link.set_latency()
        start = time.monotonic()
        for _ in range(3):
            assert r.ping()
        assert time.monotonic() - start < 3 * 0.25  # below what the latency alone took
    with pytest.raises(ValueError, match=">= 0"):
        link.set_latency(to_server=-1)


def test_close_all_resets_connections_but_keeps_listening(proxies: ProxyLoop, master: tuple[str, int]) -> None:
    link = proxies.link(master)
    with socket.create_connection(link.address, timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        assert sock.recv(100) == b"+PONG\r\n"
        assert link.close_all() == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(100)
    assert wait_until(lambda: link.stats.open == 0)
    with client_for(link) as r:
        assert r.ping()


def test_a_dead_target_closes_the_client_connection(proxies: ProxyLoop, fresh_masters: MastersFactory) -> None:
    [node] = fresh_masters(1, owner_only=False)
    link = proxies.link((node.host, node.port))
    node.kill()
    with client_for(link) as r, pytest.raises(redis.ConnectionError):
        r.ping()
    assert link.stats.refused == 1
    node.restart()
    with client_for(link) as r:
        assert r.ping()


def test_close_leaves_no_socket_or_thread(master: tuple[str, int]) -> None:
    loop = ProxyLoop()
    links = [loop.link(master, name=f"l{i}") for i in range(3)]
    socks = [socket.create_connection(link.address, timeout=2) for link in links]
    for sock in socks:
        sock.sendall(b"PING\r\n")
        assert sock.recv(100) == b"+PONG\r\n"
    links[1].blackhole()
    held = socket.create_connection(links[1].address, timeout=2)  # waiting on the blackhole
    threads = {t.name for t in threading.enumerate()}
    assert "chaos-proxy" in threads

    loop.close()
    loop.close()  # idempotent
    assert "chaos-proxy" not in {t.name for t in threading.enumerate()}
    for link in links:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(link.address, timeout=2).close()
    for sock in [*socks, held]:
        sock.settimeout(2)
        assert sock.recv(100) == b""  # the proxy closed its side
        sock.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.link(master)


def test_a_tap_sees_each_delivered_chunk(proxies: ProxyLoop, master: tuple[str, int]) -> None:
    link = proxies.link(master)
    seen: list[tuple[bool, bytes]] = []
    link.set_tap(lambda to_server, data: seen.append((to_server, data)))
    with client_for(link) as r:
        r.set("chaos-proxy:tap", "v", nx=True, px=1000)
        link.set_tap(lambda to_server, data: 1 / 0)  # a broken tap does not break the link
        assert r.ping()
    assert any(to_server and b"SET" in data and b"NX" in data for to_server, data in seen)
    assert (False, b"+OK\r\n") in seen
    assert link.tap_errors
    assert isinstance(link.tap_errors[0], ZeroDivisionError)
