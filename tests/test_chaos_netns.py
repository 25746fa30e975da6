"""The kernel network (chaos.netns): each fault kind's effect on real TCP, seen by a real
client inside a namespace, and nothing left behind; skipped where namespaces cannot be made.

The client's sockets are opened inside its namespace by moving the test's own thread
there for the duration (setns acts on the calling thread only), so no process per probe.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import random
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from chaos import netns
from chaos.cluster import harness_server
from redlock.servers import LocalMasters

_CLONE_NEWNET = 0x40000000
_SHORT = 0.4

#: The network, master A in its namespace, and the client endpoint c1 whose links fault.
Rig = tuple[netns.Network, LocalMasters, netns.Endpoint]


def _namespaces() -> list[str]:
    result = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def _ours() -> set[str]:
    """The namespaces this test process made (netns names them ``PREFIX-<pid>-...``). Other
    processes on the machine (a parallel run, another project) may make and delete theirs
    at any time, so teardown checks compare only these."""
    mine = f"{netns.PREFIX}-{os.getpid()}-"
    return {name for name in _namespaces() if name.startswith(mine)}


@pytest.fixture(scope="module")
def kernel() -> None:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(f"no kernel network: {reason}")


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """Run the block with this thread in ``namespace``'s network, then move it back."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(target, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            yield
        finally:
            if libc.setns(home, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(target)
        os.close(home)


@pytest.fixture
def link(kernel: None) -> Iterator[Rig]:
    """A network with master A (its own namespace) and an endpoint c1 to fault."""
    before = _ours()
    network = netns.Network()
    masters = LocalMasters(1, unix_socket=True, binary=harness_server(), owner_only=False)
    try:
        a = network.add("A")
        client = network.add("c1")
        # What the teardown check below looks at includes what the network made.
        assert {a.namespace, client.namespace} <= _ours() - before
        masters[0].netns, masters[0].host = a.namespace, a.address
        masters.start()
        yield network, masters, client
    finally:
        masters.stop()
        network.close()
        assert _ours() == before, "the network's namespaces outlived it"


def _connect(address: str, port: int, timeout: float = _SHORT) -> socket.socket:
    sock = socket.create_connection((address, port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def _ask(sock: socket.socket, command: bytes) -> bytes:
    sock.sendall(command)
    return sock.recv(100)


def _key(masters: LocalMasters, key: str) -> bytes | None:
    import redis  # noqa: PLC0415  (the harness's own look, over the unix socket)

    with redis.Redis.from_url(masters[0].url) as direct:
        value = direct.get(key)
    return value if value is None or isinstance(value, bytes) else str(value).encode()


@pytest.mark.servers
def test_blackhole_times_out_then_late_requests_land(link: Rig) -> None:
    network, masters, client = link
    master = masters[0]
    with inside(client.namespace):
        sock = _connect(master.host, master.port)
        assert _ask(sock, b"PING\r\n") == b"+PONG\r\n"
        network.apply("c1", "f", "blackhole", master.host, master.port)
        with pytest.raises(TimeoutError):
            _ask(sock, b"SET late 1\r\n")
        with pytest.raises(TimeoutError):
            _connect(master.host, master.port)
        assert _key(masters, "late") is None
        network.remove("c1", "f")
        # TCP retransmits the SET after the heal: a request sent during the fault lands.
        sock.settimeout(5.0)
        assert sock.recv(100) == b"+OK\r\n"
        sock.close()
    assert _key(masters, "late") == b"1"


@pytest.mark.servers
def test_simplex_loss_either_way(link: Rig) -> None:
    network, masters, client = link
    master = masters[0]
    with inside(client.namespace):
        sock = _connect(master.host, master.port)
        network.apply("c1", "replies", "drop-replies", master.host, master.port)
        with pytest.raises(TimeoutError):
            _ask(sock, b"SET landed 1\r\n")
        network.remove("c1", "replies")
        sock.close()
        sock = _connect(master.host, master.port)
        network.apply("c1", "requests", "drop-requests", master.host, master.port)
        with pytest.raises(TimeoutError):
            _ask(sock, b"SET lost 1\r\n")
        sock.close()
    # Requests land while their replies vanish; the reverse loses the request itself.
    assert _key(masters, "landed") == b"1"
    assert _key(masters, "lost") is None


@pytest.mark.servers
def test_syn_drop_blocks_new_connections_only(link: Rig) -> None:
    network, masters, client = link
    master = masters[0]
    with inside(client.namespace):
        sock = _connect(master.host, master.port)
        network.apply("c1", "f", "syn-drop", master.host, master.port)
        with pytest.raises(TimeoutError):
            _connect(master.host, master.port)
        assert _ask(sock, b"PING\r\n") == b"+PONG\r\n"
        sock.close()


@pytest.mark.servers
def test_reset_refuses_connects_and_resets_live_ones(link: Rig) -> None:
    network, masters, client = link
    master = masters[0]
    with inside(client.namespace):
        sock = _connect(master.host, master.port)
        network.apply("c1", "f", "reset", master.host, master.port)
        with pytest.raises(ConnectionRefusedError):
            _connect(master.host, master.port)
        with pytest.raises(ConnectionResetError):
            _ask(sock, b"PING\r\n")
        sock.close()


@pytest.mark.servers
def test_total_loss_and_a_wrong_percentage(link: Rig) -> None:
    network, masters, client = link
    master = masters[0]
    with pytest.raises(ValueError, match="percentage"):
        network.apply("c1", "f", "loss", master.host, master.port, percent=0)
    network.apply("c1", "half", "loss", master.host, master.port, percent=12.5)
    assert f"tcp dport {master.port} numgen random mod 10000 < 1250 drop" in network.rules("c1")
    network.remove("c1", "half")
    network.apply("c1", "f", "loss", master.host, master.port, percent=100)
    with inside(client.namespace), pytest.raises(TimeoutError):
        _connect(master.host, master.port)


@pytest.mark.servers
def test_half_open_write_gets_reset(link: Rig) -> None:
    network, masters, client = link
    master = masters[0]
    with inside(client.namespace):
        sock = _connect(master.host, master.port)
    try:
        with inside(client.namespace):
            assert _ask(sock, b"PING\r\n") == b"+PONG\r\n"
        network.apply("c1", "f", "blackhole", master.host, master.port)
        master.restart(wipe=True)
        network.remove("c1", "f")
        with inside(client.namespace):
            # The restarted master never heard of this connection: its kernel answers RST.
            # Unless the killed master's FIN, held by the blackhole and retransmitted, comes
            # first (it can, on a loaded machine): then an end of file. Dead either way.
            try:
                answer = _ask(sock, b"PING\r\n")
            except ConnectionResetError:
                answer = None
            assert answer in (None, b""), answer
    finally:
        sock.close()


def test_teardown_on_failure_and_sweep_of_dead_owners(kernel: None) -> None:
    before = _ours()
    # Someone else's namespace, made meanwhile and still up at the check: not ours to judge.
    foreign = f"other-{os.getpid()}"
    try:
        with pytest.raises(RuntimeError, match="boom"), netns.Network() as network:
            assert network.add("c1").namespace in _ours()
            subprocess.run(["ip", "netns", "add", foreign], check=True)
            raise RuntimeError("boom")
        assert _ours() == before
    finally:
        subprocess.run(["ip", "netns", "delete", foreign], capture_output=True, check=False)
    # A namespace named as if a process that is gone had made it, then a live one's.
    dead = f"{netns.PREFIX}-{_dead_pid()}-1-hub"
    live = f"{netns.PREFIX}-{os.getpid()}-999-hub"
    for name in (dead, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert dead in netns.sweep_leftovers()
        assert dead not in _namespaces()
        assert live in _namespaces()
    finally:
        for name in (dead, live):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    assert _ours() == before


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    return proc.pid


def test_unknown_kind_is_refused_before_any_rule(kernel: None) -> None:
    with netns.Network() as network:
        network.add("c1")
        with pytest.raises(ValueError, match="no network fault"):
            network.apply("c1", "f", "delay", "10.213.0.10", 1)  # type: ignore[arg-type]


def test_choose_network() -> None:
    assert netns.choose_network("proxy") == ("proxy", None)
    network, reason = netns.choose_network(None)
    assert (network == "kernel") == (reason is None) == (netns.unavailable() is None)


# --- topologies (pure) ----------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [3, 4, 5, 7])
@pytest.mark.parametrize("seed", range(5))
def test_topologies(nodes: int, seed: int) -> None:
    clients = [f"c{i}" for i in range(1, 6)]
    rng = random.Random(seed)
    quorum = nodes // 2 + 1
    ring = netns.topology("majorities-ring", nodes, clients, rng)
    for name, view in ring.items():
        assert len(view) == quorum
        for other, seen in ring.items():
            assert set(view) & set(seen), (name, other)
    assert len({tuple(v) for v in ring.values()}) == min(nodes, len(clients))
    isolated = netns.topology("isolate-one", nodes, clients, rng)
    assert all(len(v) == nodes - 1 for v in isolated.values())
    assert len({tuple(v) for v in isolated.values()}) == 1
    third = netns.topology("minority-third", nodes, clients, rng)
    assert all(quorum <= len(v) < nodes for v in third.values())
    halves = netns.topology("random-halves", nodes, clients, rng)
    sides = {tuple(v) for v in halves.values()}
    assert len(sides) == 2
    assert not set.intersection(*(set(s) for s in sides))
    # An odd count leaves one side a majority; an even one splits into two minorities.
    assert sum(len(s) >= quorum for s in sides) == nodes % 2
    with pytest.raises(ValueError, match="no topology"):
        netns.topology("ring", nodes, clients, rng)


@pytest.mark.servers
def test_kernel_scenario_runs_in_namespaces(kernel: None, tmp_path: pathlib.Path) -> None:
    from chaos.runner import Params, run_scenario  # noqa: PLC0415
    from chaos.scenarios import find  # noqa: PLC0415

    before = _ours()
    started = time.monotonic()
    # run_scenario runs in this process, so its namespaces carry this pid.
    result = run_scenario(find("restart-empty"), Params(seed=1, network="kernel"), tmp_path, plot=False)
    assert result.network == "kernel"
    assert result.passed, (result.error, result.failed_checks)
    assert _ours() == before
    assert time.monotonic() - started < 30
