"""Randomized fault schedules: which fault, on what, from when to when (pure, seeded).

Jepsen's nemesis generators compose faults over time; :func:`generate` does the same ahead
of time, so that a schedule is data: written next to a run, cut into the window around a
violation (:meth:`Schedule.window`) and played again (``python -m chaos replay``). It never
reads a clock and never touches a process: the same arguments give the same schedule, and
:mod:`chaos.explore` plays it against a real cluster.

Fault kinds and what they do to their target (a master A.., a link ``c1-A``, a client slot
``c1``):

* ``kill``: SIGKILL a master, restart it after the fault's length (from its data with
  ``appendfsync always`` in a SAFE set, else empty);
* ``restart``: SIGKILL a master and restart it empty at once (K4);
* ``power-loss``: a master loses its power: it dies with only what it fsynced on its disk
  (``appendfsync everysec``: up to about a second lost, :mod:`chaos.powerloss`) and is
  back after the fault's length;
* ``pause-master``: SIGSTOP a master;
* ``clock-jump``: step a master's wall clock forward by ``value`` seconds;
* ``clock-rate``: run a master's wall clock ``value`` times as fast;
* ``clock-strobe``: a master's wall clock flips between ``+value`` seconds and its own
  time every :data:`STROBE_PERIOD` (a time source that flaps: two NTP servers apart, a
  VM's clock source switching);
* ``clock-slew``: a master's clock rate ramps from 1 to ``value`` over the fault, in steps
  of :data:`SLEW_STEP` (an oscillator warming up, an NTP slew gone wrong), and back to 1 at
  its end, keeping the lead gained;
* ``link-delay``: delay one link by ``value`` seconds (half as much on the way back);
* ``blackhole``: one link forwards nothing (held bytes land when it heals);
* ``one-way``: one link delivers requests but holds replies back ``value`` seconds;
* ``client-pause``: SIGSTOP a client process (a GC pause);
* ``client-kill``: SIGKILL a client process; a new one takes its slot after the fault;
* on the kernel network only (nftables rules in the client's namespace, :mod:`chaos.netns`):
  ``drop-replies`` / ``drop-requests`` (simplex loss on one link: requests land and replies
  are lost, or the reverse), ``syn-drop`` (new connections time out, established ones
  live), ``reset`` (every packet answered with RST), ``loss`` (``value`` % of the packets
  dropped both ways) and ``half-open`` (drop the link, restart the master empty behind it,
  heal: the client's next write on an old connection gets RST).

A named set is played on the network it runs on (:meth:`FaultSet.on`): on the kernel's, its
delays (``link-delay``, ``one-way``: no netem here, only the proxy delays packets) give way
to the kernel's link faults, and one that also restarts masters empty gets ``half-open``.

:data:`FAULT_KINDS` is the one table of them that the schedule, the command line and the
player (:mod:`chaos.explore`, whose nemesis actions a test checks against it) read, and
:func:`fault_kind` refuses a kind that it does not list: a misspelt kind fails instead of
playing a schedule that injects nothing.

Safety classes. A SAFE schedule keeps every assumption of the algorithm: a killed master
keeps its data (``appendfsync always``) and stays down longer than the ttl (the delayed
restart; either alone keeps the locks safe, but the fencing counters need the data), clocks run fast by less than the
drift allowance and never run slow (putting a slow clock back to real time is a forward
jump), at most ``nodes - quorum`` masters are down (killed or paused) at once, and a
client's pause is harmless because its writes are fenced (:class:`FaultSet.fencing`).
The UNSAFE sets break one assumption each, with magnitudes that theory says break it:
masters restart early or empty (``unsafe-restart``), clocks jump or run fast beyond the
allowance (``unsafe-clock``), holders pause past their validity and write unfenced
(``unsafe-pause``); no bound on how many masters at once.

Clocks as real clocks misbehave. ``clock-strobe`` and ``clock-slew`` draw their magnitude
log-uniformly over two decades around the threshold theory derives (a step beyond the
validity a key has left, up to the ttl; a rate beyond the drift allowance, 1 %), so that a
run meets small faults as often as large ones and lands on both sides of the boundary; no
named set plays them (``--faults clock-strobe,clock-slew``), and the simulator does not.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal

from redlock import quorum_size

from .history import master_index, master_label

__all__ = [
    "FAULT_KINDS",
    "FAULT_SETS",
    "SLEW_STEP",
    "STROBE_PERIOD",
    "FaultKind",
    "FaultOp",
    "FaultSet",
    "Schedule",
    "fault_kind",
    "generate",
    "masters_down",
    "resolve_fault_set",
]

# How long the restart of a master takes to count as over: one fault per target at a time.
_INSTANT = 0.5
#: How often a strobing clock flips: well above the 10 ms a loaded machine can honour
#: (each flip rewrites libfaketime's file), below Redis's 100 ms expiry cycle, so that
#: each cycle may find the clock on either side.
STROBE_PERIOD = 0.025
#: How often a slewing clock's rate moves towards its target.
SLEW_STEP = 0.05
# The end of a run is fault-free this long (as a share of the ttl, at least a second), so
# that the run ends healed and the last holders finish.
_TAIL_TTLS = 2.0


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault (module docstring): what it hits and how the schedule treats it."""

    name: str
    #: What it hits: one or more masters (``A,C``), a link (``c1-A``) or a client slot (``c1``).
    target: Literal["master", "link", "client"]
    #: Whether the SAFE set plays it: it keeps every assumption of the algorithm there.
    safe: bool
    #: A master answers nobody meanwhile: the SAFE bound on masters down counts it.
    down: bool = False
    #: It moves a master's clock, so the masters run under libfaketime.
    clock: bool = False
    #: Only the simulator (chaos.sim) plays it: no real-process nemesis action, and no set of
    #: the real explore draws it.
    simulated: bool = False
    #: Only the kernel network plays it (an nftables rule, :mod:`chaos.netns`).
    kernel: bool = False
    #: Only the proxy plays it (it delays or holds packets).
    proxy: bool = False

    def magnitudes(self, safe: bool, ttl: float, rng: random.Random) -> tuple[float, float]:
        """How long a fault of this kind lasts and its value, for a set that is ``safe``.

        The thresholds (module docstring): a restart after more than the ttl, a clock rate
        within the 1 % allowance, against a restart well within the ttl, a jump past it, a
        rate of 5 % and more, and a pause longer than the validity.
        """
        kind = self.name
        if kind == "kill":
            # Safe: the delayed restart (down longer than the ttl). Unsafe: back early, empty.
            return (rng.uniform(1.2, 2.0) * ttl if safe else rng.uniform(0.05, 0.5) * ttl), 0.0
        if kind == "restart":
            return _INSTANT, 0.0
        if kind == "power-loss":
            # Back within the ttl with what everysec had synced: up to a second's grants gone.
            return rng.uniform(0.1, 0.5) * ttl, 0.0
        if kind == "pause-master":
            return rng.uniform(0.2, 1.5) * ttl, 0.0
        if kind == "clock-jump":
            return rng.uniform(0.5, 1.5) * ttl, rng.uniform(1.2, 3.0) * ttl
        if kind == "clock-rate":
            rate = rng.uniform(1.0, 1.005) if safe else rng.uniform(1.05, 1.5)
            return rng.uniform(1.0, 3.0) * ttl, rate
        if kind == "clock-strobe":
            # The step that matters is the validity a key has left (0 to ttl, less the
            # drift allowance): two decades around it, or, safe, within the allowance.
            step = _log_uniform(rng, 0.0005, 0.005) if safe else _log_uniform(rng, 0.03, 3.0)
            return rng.uniform(0.5, 2.0) * ttl, step * ttl
        if kind == "clock-slew":
            # The rate's excess over 1 against the 1 % drift allowance.
            excess = _log_uniform(rng, 0.0001, 0.005) if safe else _log_uniform(rng, 0.001, 0.5)
            return rng.uniform(1.0, 3.0) * ttl, 1.0 + excess
        if kind == "link-delay":
            return rng.uniform(0.3, 1.5), rng.uniform(0.05, 0.3)
        if kind == "blackhole":
            return rng.uniform(0.2, 1.5), 0.0
        if kind == "one-way":
            return rng.uniform(0.3, 1.0), rng.uniform(0.2, 0.8)
        if kind == "client-pause":
            # Unsafe: longer than any validity, so that the paused holder's write is stale.
            return (rng.uniform(0.2, 2.0) * ttl if safe else rng.uniform(1.2, 2.5) * ttl), 0.0
        if kind == "client-kill":
            # How long the slot stays empty before a new client takes it.
            return rng.uniform(0.2, 1.0), 0.0
        if kind in ("drop-replies", "drop-requests", "syn-drop", "reset"):
            return rng.uniform(0.2, 1.5), 0.0
        if kind == "loss":
            # The share of packets dropped, in %: from a bad link to a nearly dead one.
            return rng.uniform(0.3, 1.5), rng.uniform(10.0, 60.0)
        if kind == "half-open":
            return rng.uniform(0.2, 1.0), 0.0
        if kind == "error-replies":
            return rng.uniform(0.2, 1.0) * ttl, 0.0
        raise ValueError(f"unknown fault kind {kind!r}")


_KINDS = (
    FaultKind("kill", "master", safe=True, down=True),
    FaultKind("restart", "master", safe=False, down=True),
    FaultKind("power-loss", "master", safe=False, down=True),
    FaultKind("pause-master", "master", safe=True, down=True),
    FaultKind("clock-jump", "master", safe=False, clock=True),
    FaultKind("clock-rate", "master", safe=True, clock=True),
    FaultKind("clock-strobe", "master", safe=False, clock=True),
    FaultKind("clock-slew", "master", safe=False, clock=True),
    FaultKind("link-delay", "link", safe=True, proxy=True),
    FaultKind("blackhole", "link", safe=True),
    FaultKind("one-way", "link", safe=True, proxy=True),
    FaultKind("client-pause", "client", safe=True),
    FaultKind("client-kill", "client", safe=True),
    # A master that answers writes with an error (-OOM, -READONLY, ...): a refusal, never a grant.
    FaultKind("error-replies", "master", safe=True, simulated=True),
    FaultKind("drop-replies", "link", safe=True, kernel=True),
    FaultKind("drop-requests", "link", safe=True, kernel=True),
    FaultKind("syn-drop", "link", safe=True, kernel=True),
    FaultKind("reset", "link", safe=True, kernel=True),
    FaultKind("loss", "link", safe=True, kernel=True),
    # Restarts the master empty behind the dropped link: K4 as well as a network fault.
    FaultKind("half-open", "link", safe=False, kernel=True),
)

#: Every fault kind by name, in the order the command line lists them.
FAULT_KINDS: Mapping[str, FaultKind] = MappingProxyType({kind.name: kind for kind in _KINDS})


def fault_kind(name: str) -> FaultKind:
    """The kind called ``name``; ValueError naming it if there is none."""
    try:
        return FAULT_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown fault kind {name!r}; the kinds are {', '.join(FAULT_KINDS)}") from None


@dataclass(frozen=True)
class FaultSet:
    """A named choice of fault kinds and how the workload meets them.

    ``safe`` picks the magnitudes that keep Redlock's assumptions (module docstring) and
    the bound on masters down; ``fencing`` has the clients write through the fenced store;
    ``check_first`` has them check their lock's validity before their work rather than
    just before their write, so that a pause during the work makes a stale write (K1).
    ``most_masters``, when not 0, caps how many masters one master fault hits (1: the
    single-master K3/K4 edges, which only a holder on a bare majority meets).
    """

    name: str
    kinds: tuple[str, ...]
    safe: bool
    fencing: bool = False
    check_first: bool = False
    most_masters: int = 0

    @property
    def expected(self) -> str:
        return "SAFE" if self.safe else "UNSAFE"

    def __post_init__(self) -> None:
        for kind in self.kinds:
            fault_kind(kind)

    @property
    def clocked(self) -> bool:
        return any(FAULT_KINDS[k].clock for k in self.kinds)

    @property
    def proxied(self) -> bool:
        return any(FAULT_KINDS[k].target == "link" for k in self.kinds)

    def on(self, network: str) -> FaultSet:
        """This set as played on ``network`` ("kernel" or "proxy"; module docstring). A named
        set (:data:`FAULT_SETS`) trades the proxy's delays for the kernel's link faults on the
        kernel network; any other set is played as given. Raises ValueError for a kind the
        network cannot play."""
        kinds = self.kinds
        if network == "kernel" and FAULT_SETS.get(self.name) == self:
            kept = [k for k in kinds if not FAULT_KINDS[k].proxy]
            if any(FAULT_KINDS[k].target == "link" for k in kinds):
                kept += [k for k in _KERNEL_LINK_KINDS if FAULT_KINDS[k].safe]
                if "restart" in kinds:
                    kept.append("half-open")
            kinds = tuple(dict.fromkeys(kept))
        kernel = [k for k in kinds if FAULT_KINDS[k].kernel]
        proxy = [k for k in kinds if FAULT_KINDS[k].proxy]
        if kernel and network != "kernel":
            raise ValueError(f"faults: {', '.join(kernel)} need the kernel network (--network kernel)")
        if kernel and proxy:
            # (A run with the proxy's delays runs on the proxy, where no nftables rule acts.)
            raise ValueError(
                f"faults: {', '.join(proxy)} need the proxy and {', '.join(kernel)} the kernel network: not in one run"
            )
        return self if kinds == self.kinds else replace(self, kinds=kinds)

    @property
    def persistence(self) -> str:
        """The masters' persistence: a SAFE set's masters keep their data (``appendfsync
        always``), since the fencing counters live on them and a restart empty, even a
        delayed one, would set them back; a power loss needs an append-only file to
        restart from; every other UNSAFE restart is empty."""
        if self.safe:
            return "aof-always"
        return "aof-everysec" if "power-loss" in self.kinds else "none"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kinds": list(self.kinds),
            "safe": self.safe,
            "fencing": self.fencing,
            "check_first": self.check_first,
            "most_masters": self.most_masters,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultSet:
        return cls(
            name=str(data["name"]),
            kinds=tuple(data["kinds"]),
            safe=bool(data["safe"]),
            fencing=bool(data.get("fencing", False)),
            check_first=bool(data.get("check_first", False)),
            most_masters=int(data.get("most_masters", 0)),
        )


#: The kinds of the SAFE set: on the proxy network, which every machine has.
_SAFE_KINDS = tuple(name for name, kind in FAULT_KINDS.items() if kind.safe and not kind.simulated and not kind.kernel)
_KERNEL_LINK_KINDS = tuple(name for name, kind in FAULT_KINDS.items() if kind.kernel)

FAULT_SETS: dict[str, FaultSet] = {
    s.name: s
    for s in (
        FaultSet("safe", _SAFE_KINDS, safe=True, fencing=True),
        FaultSet("unsafe-restart", ("restart", "kill", "power-loss", "blackhole", "client-kill"), safe=False),
        FaultSet("unsafe-clock", ("clock-jump", "clock-rate", "blackhole", "link-delay"), safe=False),
        FaultSet("unsafe-pause", ("client-pause", "client-kill", "link-delay"), safe=False, check_first=True),
        # One master at a time: an overlap needs a holder whose key is on a bare majority.
        FaultSet("unsafe-single", ("restart", "clock-jump"), safe=False, most_masters=1),
    )
}


def resolve_fault_set(text: str) -> FaultSet:
    """A set by name (``safe``, ``unsafe-clock``, ...) or a comma-separated list of kinds.

    A list of kinds that the SAFE set allows is played with the SAFE set's magnitudes and
    fencing; a list with any other kind is UNSAFE. Raises ValueError naming what is unknown.
    """
    if not isinstance(text, str):
        raise TypeError(f"faults must be a string, got {type(text).__name__}")
    if text in FAULT_SETS:
        return FAULT_SETS[text]
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise ValueError(
            f"faults: unknown {', '.join(map(repr, unknown)) or 'empty list'}; "
            f"give a set ({', '.join(FAULT_SETS)}) or kinds from {', '.join(FAULT_KINDS)}"
        )
    safe = all(FAULT_KINDS[k].safe and not FAULT_KINDS[k].simulated for k in kinds)
    return FaultSet(",".join(kinds), kinds, safe=safe, fencing=safe, check_first=not safe and "client-pause" in kinds)


@dataclass(frozen=True)
class FaultOp:
    """One fault: ``kind`` on ``target`` from ``start`` to ``end`` (seconds from the start of
    the schedule), of magnitude ``value`` (seconds of a jump or a delay, a clock's rate)."""

    start: float
    end: float
    kind: str
    target: str
    value: float = 0.0

    def __post_init__(self) -> None:
        fault_kind(self.kind)

    @property
    def fault(self) -> FaultKind:
        return FAULT_KINDS[self.kind]

    @property
    def masters(self) -> tuple[int, ...]:
        """The masters' indexes: of a master fault (``A,C`` is 0, 2) or a link (``c1-C``)."""
        if self.fault.target == "client":
            return ()
        labels = self.target.rsplit("-", 1)[-1]
        return tuple(master_index(label) for label in labels.split(","))

    @property
    def client(self) -> str | None:
        """The client slot of a link or client fault."""
        if self.fault.target == "client":
            return self.target
        if self.fault.target == "link":
            return self.target.rsplit("-", 1)[0]
        return None

    def shifted(self, by: float) -> FaultOp:
        return replace(self, start=self.start + by, end=self.end + by)

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "kind": self.kind, "target": self.target, "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultOp:
        return cls(
            float(data["start"]),
            float(data["end"]),
            str(data["kind"]),
            str(data["target"]),
            float(data.get("value", 0.0)),
        )


@dataclass(frozen=True)
class Schedule:
    """Fault ops in order of start, for a run of ``duration`` seconds."""

    ops: tuple[FaultOp, ...]
    duration: float
    nodes: int
    clients: int
    ttl: float
    seed: int
    faults: FaultSet

    def steps(self) -> list[tuple[float, str, int]]:
        """The ops as (time, "start" | "stop", index into ops), in time order; a stop comes
        before a start at the same moment, so that a target is free again first."""
        steps = [(op.start, "start", i) for i, op in enumerate(self.ops)]
        steps += [(op.end, "stop", i) for i, op in enumerate(self.ops)]
        return sorted(steps, key=lambda s: (s[0], s[1] != "stop", s[2]))

    def window(self, start: float, end: float) -> Schedule:
        """The ops active at some moment of [start, end], moved so that ``start`` is 0 and
        clipped to it (an op already running at ``start`` starts at 0)."""
        start = max(0.0, start)
        picked = tuple(
            replace(op, start=max(op.start, start), end=max(op.end, start)).shifted(-start)
            for op in self.ops
            if op.start <= end and op.end >= start
        )
        tail = _tail(self.ttl)
        last = max([op.end for op in picked] + [end - start])
        return replace(self, ops=picked, duration=last + tail)

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration": self.duration,
            "nodes": self.nodes,
            "clients": self.clients,
            "ttl": self.ttl,
            "seed": self.seed,
            "faults": self.faults.to_dict(),
            "ops": [op.to_dict() for op in self.ops],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        return cls(
            ops=tuple(FaultOp.from_dict(op) for op in data["ops"]),
            duration=float(data["duration"]),
            nodes=int(data["nodes"]),
            clients=int(data["clients"]),
            ttl=float(data["ttl"]),
            seed=int(data["seed"]),
            faults=FaultSet.from_dict(data["faults"]),
        )


def masters_down(ops: Iterable[FaultOp], at: float) -> set[int]:
    """The masters that a down-kind fault of ``ops`` holds at moment ``at``."""
    return {m for op in ops if op.fault.down and op.start <= at < op.end for m in op.masters}


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _tail(ttl: float) -> float:
    return max(1.0, _TAIL_TTLS * ttl)


def _check(name: str, value: float, low: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= low):
        raise ValueError(f"{name} must be a finite number >= {low:g}, not {value!r}")


def generate(
    seed: int,
    duration: float,
    faults: FaultSet,
    *,
    nodes: int = 5,
    clients: int = 3,
    ttl: float = 1.0,
    interval: float = 0.7,
) -> Schedule:
    """A schedule of ``duration`` seconds composing ``faults`` at random, one new fault every
    ``interval`` seconds on average (exponential gaps, as Jepsen's staggered generators).

    Each target carries one fault at a time; every fault ends at least ``2 * ttl`` (and a
    second) before ``duration``, so the run ends healed. For a SAFE set, never more than
    ``nodes - quorum`` masters are down at once. Pure: the same arguments give the same
    schedule.
    """
    _check("duration", duration, 0.0)
    _check("ttl", ttl, 0.001)
    _check("interval", interval, 0.001)
    if not isinstance(nodes, int) or nodes < 3:
        raise ValueError(f"nodes must be an integer >= 3, not {nodes!r}")
    if not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients must be an integer >= 1, not {clients!r}")
    rng = random.Random(f"schedule:{seed}")
    slots = [f"c{i + 1}" for i in range(clients)]
    horizon = duration - _tail(ttl)
    busy: dict[str, float] = {}
    ops: list[FaultOp] = []
    now = min(0.5, duration)
    while True:
        now += rng.expovariate(1.0 / interval)
        if now >= horizon:
            break
        kind = rng.choice(faults.kinds)
        length, value = fault_kind(kind).magnitudes(faults.safe, ttl, rng)
        end = now + length
        if end > horizon:
            continue
        target = _pick_target(
            kind,
            faults.safe,
            start=now,
            end=end,
            ops=ops,
            busy=busy,
            nodes=nodes,
            slots=slots,
            rng=rng,
            most=faults.most_masters,
        )
        if target is None:
            continue
        op = FaultOp(round(now, 4), round(end, 4), kind, target, round(value, 6))
        ops.append(op)
        for resource in _resources(op):
            busy[resource] = op.end
    return Schedule(tuple(ops), duration, nodes, clients, ttl, seed, faults)


def _resources(op: FaultOp) -> list[str]:
    """What a fault occupies: its masters, its link or its client (a half-open link, its
    master too: it restarts it)."""
    if op.fault.target == "master":
        return [f"master:{m}" for m in op.masters]
    if op.kind == "half-open":
        return [op.target, *(f"master:{m}" for m in op.masters)]
    return [op.target if op.fault.target == "link" else f"client:{op.target}"]


def _pick_target(
    kind: str,
    safe: bool,
    *,
    start: float,
    end: float,
    ops: Sequence[FaultOp],
    busy: Mapping[str, float],
    nodes: int,
    slots: Sequence[str],
    rng: random.Random,
    most: int = 0,
) -> str | None:
    """A free target for a new fault, or None. A master fault takes a group of masters at
    once (an NTP step or a power event rarely hits one machine only): up to a majority in an
    UNSAFE set, up to ``nodes - quorum`` and within that bound of masters down in a SAFE one;
    never more than ``most`` when it is not 0."""

    def free(resource: str) -> bool:
        return busy.get(resource, -math.inf) <= start

    target = fault_kind(kind).target
    if target == "client":
        options = [slot for slot in slots if free(f"client:{slot}")]
        return rng.choice(options) if options else None
    if target == "link":
        links = [
            f"{slot}-{master_label(i)}"
            for slot in slots
            for i in range(nodes)
            if kind != "half-open" or free(f"master:{i}")
        ]
        options = [link for link in links if free(link)]
        return rng.choice(options) if options else None
    bound = nodes - quorum_size(nodes)
    size = rng.randint(1, bound if safe else quorum_size(nodes))
    if most:
        size = min(size, most)
    masters = [i for i in range(nodes) if free(f"master:{i}")]
    if safe and fault_kind(kind).down:
        room = bound - max(len(masters_down(ops, at)) for at in _rises(ops, start, end))
        masters = [i for i in masters if not _down_in(ops, i, start, end)]
        size = min(size, room)
    if size <= 0 or len(masters) < size:
        return None
    return ",".join(master_label(i) for i in sorted(rng.sample(masters, size)))


def _rises(ops: Sequence[FaultOp], start: float, end: float) -> list[float]:
    """The moments of [start, end) at which the count of masters down can rise: the count
    only rises when a fault starts, so these cover every moment of the span."""
    return [start] + [op.start for op in ops if op.fault.down and start < op.start < end]


def _down_in(ops: Sequence[FaultOp], master: int, start: float, end: float) -> bool:
    return any(op.fault.down and master in op.masters and op.start < end and start < op.end for op in ops)
