"""Real network partitions: every master and client in a network namespace of its own,
and faults as nftables rules in the client's namespace, where Jepsen puts them.

Where it sits: below :mod:`chaos.cluster` (which starts masters and clients inside the
namespaces) and :mod:`chaos.nemesis` (which turns a partition into rules). It is the
kernel's alternative to :mod:`chaos.proxy`; the proxy stays for what the kernel cannot do
here without netem (delay, holding replies until a client is stopped).

Theory of operation
-------------------
A :class:`Network` makes a *hub* namespace holding a bridge, and one namespace per
endpoint (a master, the resource server, a client), joined to the bridge by a veth pair
that is created inside the hub and the endpoint, so neither end ever exists in the host's
own namespace. Endpoints get addresses of :data:`SUBNET`, which exists only inside these
namespaces: nothing is routed to or from the host, no NAT, no host interface is touched.
The harness itself reaches masters through their unix sockets, outside every fault.

Faults are rules of one table (``inet chaos``) in a client's namespace; each change
rewrites the whole table in one ``nft -f`` transaction, so a heal never leaves half a rule
set. What each :data:`FAULT_KINDS` entry does to TCP, as the kernel really behaves:

* ``blackhole``: drop both ways. Connects retry their SYN (1, 3, 7 s...); a request in
  flight is retransmitted with backoff and, if its connection is still open at heal, lands
  late.
* ``drop-replies``: simplex loss; requests land and run, their answers never arrive.
* ``drop-requests``: the reverse; nothing lands, the master's own packets still arrive.
* ``syn-drop``: only new connections time out; established ones keep working.
* ``reset``: ``reject with tcp reset``: a connect is refused, a write on a live connection
  is answered with RST (ECONNRESET).
* ``loss``: each packet, either way, dropped with a probability (``numgen random``).

Half-open connections are a composition (:meth:`chaos.nemesis.Nemesis.half_open`): drop,
restart the master, heal; the master has no record of the connection and answers the
client's next write with RST.

Names all start with :data:`PREFIX` and the owning process's pid, so a start can sweep
what a killed run left (its owner is gone) without touching a live run's; :meth:`close`
deletes by name, and an ``atexit`` hook closes whatever a crash left open.
"""

from __future__ import annotations

import atexit
import dataclasses
import ipaddress
import itertools
import os
import random
import shutil
import subprocess
import threading
from collections.abc import Sequence
from typing import Literal

__all__ = [
    "FAULT_KINDS",
    "PREFIX",
    "SUBNET",
    "TOPOLOGIES",
    "Endpoint",
    "FaultKind",
    "Network",
    "NetworkKind",
    "choose_network",
    "sweep_leftovers",
    "topology",
    "unavailable",
]

NetworkKind = Literal["kernel", "proxy"]

#: Every namespace this module makes is called ``PREFIX-<pid>-<n>-<endpoint>``.
PREFIX = "rlqnet"
#: The endpoints' addresses: a private range that exists only inside our namespaces. A
#: host that routes it already is refused (:func:`unavailable`), so that no address we
#: give out could ever mean a machine outside.
SUBNET = ipaddress.IPv4Network("10.213.0.0/24")
_FIRST_HOST = 10

FAULT_KINDS = ("blackhole", "drop-replies", "drop-requests", "syn-drop", "reset", "loss")
FaultKind = Literal["blackhole", "drop-replies", "drop-requests", "syn-drop", "reset", "loss"]

_TABLE = "chaos"
# A command that hangs (a wedged kernel module load) must not hang a run.
_COMMAND_TIMEOUT = 10.0
_counter = itertools.count(1)
# unavailable()'s one answer, once probed.
_probed: list[str | None] = []
_check_lock = threading.Lock()


def _run(argv: Sequence[str], *, stdin: str | None = None) -> None:
    result = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")


def _list_namespaces() -> list[str]:
    # `ip netns list` prints "name (id: N)" for namespaces that have an id.
    result = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=_COMMAND_TIMEOUT, check=False
    )
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def _delete_namespace(name: str) -> None:
    # Deleting a namespace destroys the veth ends inside it, and with them their peers.
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=_COMMAND_TIMEOUT, check=False)


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_leftovers() -> list[str]:
    """Delete the namespaces that runs which are gone left behind; returns their names."""
    swept = []
    for name in _list_namespaces():
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != PREFIX or not parts[1].isdigit():
            continue
        if _owner_alive(int(parts[1])):
            continue
        _delete_namespace(name)
        swept.append(name)
    return swept


def _subnet_in_use() -> str | None:
    """Where the host itself routes or holds an address of :data:`SUBNET`, or None."""
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT, check=False)
        for line in result.stdout.splitlines():
            for word in line.split():
                if _overlaps(word):
                    return line.strip()
    return None


def _overlaps(word: str) -> bool:
    # Only words shaped like an address or a prefix: "100" would parse as 0.0.0.100.
    if "/" not in word and word.count(".") != 3:
        return False
    try:
        return ipaddress.IPv4Network(word, strict=False).overlaps(SUBNET)
    except ValueError:
        return False


def unavailable() -> str | None:
    """Why this machine cannot run the kernel network, or None when it can.

    Checked once per process, by making a namespace and a rule set in it for real (root,
    ``ip`` and ``nft`` present, and a kernel with namespaces, veth, bridges and nftables).
    """
    with _check_lock:
        if not _probed:
            _probed.append(_probe())
        return _probed[0]


def _probe() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"no `{tool}` command (install {package})"
    used = _subnet_in_use()
    if used is not None:
        return f"the host already uses {SUBNET}, which the namespaces need to themselves: {used}"
    sweep_leftovers()
    try:
        with Network() as network:
            network.add("probe")
            network.add("probe2")
            network.apply("probe", "check", "blackhole", network.endpoint("probe2").address, 1)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"cannot make network namespaces here: {exc}"
    return None


def choose_network(requested: NetworkKind | None) -> tuple[NetworkKind, str | None]:
    """The network to run on, and the one-line reason when it is not the one asked for
    (None asks for the default: the kernel's wherever namespaces can be made)."""
    if requested == "proxy":
        return "proxy", None
    reason = unavailable()
    if reason is None:
        return "kernel", None
    return "proxy", f"the proxy network instead of the kernel's: {reason}"


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One namespace on the bridge: its name (for ``ip netns exec``) and its address."""

    name: str
    namespace: str
    address: str

    @property
    def launcher(self) -> list[str]:
        """The argv prefix that runs a command inside this endpoint's namespace."""
        return ["ip", "netns", "exec", self.namespace]


@dataclasses.dataclass(frozen=True)
class _Rule:
    fault: str
    chain: Literal["input", "output"]
    text: str


class Network:
    """A bridge and a namespace per endpoint, and the fault rules in them; a context
    manager, and :meth:`close` is idempotent."""

    def __init__(self) -> None:
        self.tag = f"{PREFIX}-{os.getpid()}-{next(_counter)}"
        self.hub = f"{self.tag}-hub"
        self.endpoints: dict[str, Endpoint] = {}
        self._rules: dict[str, list[_Rule]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._made: list[str] = []
        _open_networks.add(self)
        try:
            self._make_namespace(self.hub)
            _run(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.hub, "link", "set", "br0", "up"])
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Network {self.tag} {sorted(self.endpoints)}>"

    def _make_namespace(self, name: str) -> None:
        # Recorded before it exists: a failure half-way still deletes it by name.
        self._made.append(name)
        _run(["ip", "netns", "add", name])
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def add(self, name: str) -> Endpoint:
        """A namespace for endpoint ``name`` ("A", "resource", "c1") with the next address."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            if name in self.endpoints:
                return self.endpoints[name]
            index = len(self.endpoints)
            hosts = SUBNET.num_addresses - _FIRST_HOST - 1
            if index >= hosts:
                raise RuntimeError(f"{SUBNET} has room for {hosts} endpoints")
            address = str(SUBNET.network_address + _FIRST_HOST + index)
            namespace = f"{self.tag}-{index}"
            veth = f"v{index}"
            self._make_namespace(namespace)
            # Both ends are made inside namespaces: the host's own never sees either.
            peer = ["peer", "name", "eth0", "netns", namespace]
            _run(["ip", "-n", self.hub, "link", "add", veth, "type", "veth", *peer])
            _run(["ip", "-n", self.hub, "link", "set", veth, "master", "br0", "up"])
            _run(["ip", "-n", namespace, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0"])
            _run(["ip", "-n", namespace, "link", "set", "eth0", "up"])
            endpoint = Endpoint(name, namespace, address)
            self.endpoints[name] = endpoint
            return endpoint

    def endpoint(self, name: str) -> Endpoint:
        return self.endpoints[name]

    # -- faults --

    def apply(self, client: str, fault: str, kind: FaultKind, address: str, port: int, *, percent: float = 0.0) -> None:
        """Add fault ``fault`` (an id the caller chooses) of ``kind`` on the link from
        endpoint ``client`` to ``address:port``; several calls may share one id."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"no network fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
        ipaddress.IPv4Address(address)
        out = f"ip daddr {address} tcp dport {int(port)}"
        back = f"ip saddr {address} tcp sport {int(port)}"
        rules: list[_Rule] = []
        if kind in ("blackhole", "drop-requests"):
            rules.append(_Rule(fault, "output", f"{out} drop"))
        if kind in ("blackhole", "drop-replies"):
            rules.append(_Rule(fault, "input", f"{back} drop"))
        if kind == "syn-drop":
            rules.append(_Rule(fault, "output", f"{out} tcp flags & (syn | ack) == syn drop"))
        if kind == "reset":
            rules.append(_Rule(fault, "output", f"{out} reject with tcp reset"))
        if kind == "loss":
            if not 0 < percent <= 100:
                raise ValueError(f"loss needs a percentage in (0, 100], not {percent!r}")
            # nft compares with a value of the modulus's range: 100 % is a plain drop.
            chance = f"numgen random mod 10000 < {round(percent * 100)} " if percent < 100 else ""
            rules.append(_Rule(fault, "output", f"{out} {chance}drop"))
            rules.append(_Rule(fault, "input", f"{back} {chance}drop"))
        with self._lock:
            self._rules.setdefault(client, []).extend(rules)
            self._write(client)

    def remove(self, client: str, fault: str) -> None:
        """Take fault ``fault``'s rules out of ``client``'s namespace; a no-op if gone."""
        with self._lock:
            rules = self._rules.get(client, [])
            kept = [rule for rule in rules if rule.fault != fault]
            if len(kept) == len(rules) or self._closed:
                return
            self._rules[client] = kept
            self._write(client)

    def rules(self, client: str) -> str:
        """The rule set as nft would load it (for reports and tests)."""
        with self._lock:
            return self._ruleset(client)

    def _ruleset(self, client: str) -> str:
        lines = [f"add table inet {_TABLE}", f"delete table inet {_TABLE}", f"table inet {_TABLE} {{"]
        for chain in ("output", "input"):
            lines.append(f"  chain {chain} {{")
            lines.append(f"    type filter hook {chain} priority 0; policy accept;")
            lines += [f"    {rule.text}" for rule in self._rules.get(client, []) if rule.chain == chain]
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _write(self, client: str) -> None:
        # One transaction: the old table goes and the new one comes at once.
        endpoint = self.endpoints[client]
        _run([*endpoint.launcher, "nft", "-f", "-"], stdin=self._ruleset(client))

    # -- teardown --

    def close(self) -> None:
        """Delete every namespace this network made (with its veths, rules and bridge)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for name in reversed(self._made):
            _delete_namespace(name)
        _open_networks.discard(self)


_open_networks: set[Network] = set()


@atexit.register
def _close_open_networks() -> None:
    for network in list(_open_networks):
        network.close()


# --- topologies: which masters each client reaches ----------------------------------------

TOPOLOGIES = ("isolate-one", "random-halves", "minority-third", "majorities-ring")


def topology(kind: str, nodes: int, clients: Sequence[str], rng: random.Random) -> dict[str, list[int]]:
    """Per-client views of ``nodes`` masters for Jepsen's partition topologies.

    * ``isolate-one``: one master is cut off from every client;
    * ``random-halves``: masters and clients are shuffled into two halves; each client
      reaches its own half (one side holds a majority, the other does not);
    * ``minority-third``: a random third of the masters (a minority) is cut off from
      every client;
    * ``majorities-ring``: every client reaches a majority, and neighbouring clients
      reach different majorities (client i: masters i, i+1, ... mod n): every two still
      overlap, as majorities must.
    """
    if nodes < 1 or not clients:
        raise ValueError("a topology needs masters and clients")
    masters = list(range(nodes))
    if kind == "isolate-one":
        isolated = rng.choice(masters)
        return {c: [m for m in masters if m != isolated] for c in clients}
    if kind == "minority-third":
        third = set(rng.sample(masters, max(1, nodes // 3)))
        return {c: [m for m in masters if m not in third] for c in clients}
    if kind == "random-halves":
        shuffled = rng.sample(masters, nodes)
        halves = [sorted(shuffled[: (nodes + 1) // 2]), sorted(shuffled[(nodes + 1) // 2 :])]
        order = rng.sample(list(clients), len(clients))
        return {c: halves[i % 2] for i, c in enumerate(order)}
    if kind == "majorities-ring":
        quorum = nodes // 2 + 1
        start = rng.randrange(nodes)
        return {c: sorted((start + i + k) % nodes for k in range(quorum)) for i, c in enumerate(clients)}
    raise ValueError(f"no topology {kind!r}; known: {', '.join(TOPOLOGIES)}")
