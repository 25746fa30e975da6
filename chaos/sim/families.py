"""The fault families a trial is drawn from, and the sweeps' points: which family and which
workload each value of a sweep plays, and what theory predicts there.

Where it sits: above :mod:`chaos.sim.trial` (whose :class:`~chaos.sim.trial.Settings` a
point's workload is) and below the two kinds of trials of a point: the sweep trial
(:func:`edge_point`, run by :mod:`chaos.sim.search`) and the point trial
(:mod:`chaos.sim.points`), which reads the same names and theory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..schedule import FAULT_SETS, FaultOp, FaultSet, Schedule, generate
from .trial import Settings

__all__ = [
    "FAMILIES",
    "PROBING",
    "SURFACES",
    "SWEEPS",
    "UNSAFE",
    "Family",
    "Fixed",
    "Surface",
    "edge_point",
    "rate_threshold",
]


@dataclass(frozen=True)
class Family:
    """A fault set with the shape of its trials (short runs: a trial is a few ttls)."""

    faults: FaultSet
    duration: float = 6.0
    ttl: float = 0.5
    nodes: int = 5
    clients: int = 3
    interval: float = 0.5
    #: Violation kinds its faults may cause a correct client (none for a SAFE family).
    expected: tuple[str, ...] = ()

    def schedule(self, seed: int) -> Schedule:
        return generate(
            seed,
            self.duration,
            self.faults,
            nodes=self.nodes,
            clients=self.clients,
            ttl=self.ttl,
            interval=self.interval,
        )


UNSAFE = ("mutual-exclusion", "lost-update")
FAMILIES: dict[str, Family] = {
    name: Family(faults, expected=() if faults.safe else UNSAFE) for name, faults in FAULT_SETS.items()
}
# The power cut under everysec: the catalogue's own scenario, as a family of its own.
FAMILIES.setdefault(
    "unsafe-powerloss", Family(FaultSet("unsafe-powerloss", ("power-loss",), safe=False), expected=UNSAFE)
)


#: The sweeps' workload probes the edge: holders work to the end of their validity (where
#: an early expiry or a late write shows), rivals retry every ~10 ms (as the real sweep's c2,
#: every ~20 ms), and nobody extends (an extend this close to the end would be late itself).
PROBING = Settings(hold_share=(0.9, 0.98), retry_delay=0.01, extend_share=0.0)


def _fixed(
    kind: str, value: float, *, faults: tuple[str, ...] = ("blackhole",), ttl: float = 0.5, check_first: bool = False
) -> Family:
    """A family whose every ``kind`` op has magnitude ``value`` (clock rate) or length
    ``value`` ttls (pause, restart delay), beside ``faults`` that make the K3 partitions.
    A longer ttl gets a longer run (twelve ttls at least), so that each trial sees about as
    many holdings and faults whatever the ttl."""
    faults_set = FaultSet(f"sweep-{kind}", (kind, *faults), safe=False, check_first=check_first)

    duration = max(6.0, 12 * ttl)
    return Fixed(faults_set, expected=UNSAFE, ttl=ttl, duration=duration, interval=ttl, kind=kind, value=value)


@dataclass(frozen=True)
class Fixed(Family):
    """A family of :func:`_fixed` (at module level: worker processes unpickle it)."""

    kind: str = "clock-rate"
    value: float = 1.0

    def fix(self, op: FaultOp) -> FaultOp:
        if op.kind != self.kind:
            return op
        if self.kind == "clock-rate":
            return replace(op, value=self.value)
        return replace(op, end=op.start + self.value * self.ttl)

    def schedule(self, seed: int) -> Schedule:
        base = super().schedule(seed)
        ops = [self.fix(op) for op in base.ops]
        return replace(base, ops=tuple(o for o in ops if o.end < self.duration - 1.0))


# (The default from an instance: on a compiled Settings the class holds a field's descriptor.)
def rate_threshold(ttl: float, drift_factor: float = Settings().drift_factor) -> float:
    """The clock rate past which a master expires a key before its holder's validity ends:
    ``ttl / r < ttl - drift`` with ``drift = ttl * f + 2 ms`` (the library's allowance)."""
    return 1 / (1 - drift_factor - 0.002 / ttl)


SWEEPS: dict[str, tuple[Callable[[float], Family], Callable[[float], str]]] = {
    # A master's clock rate: unsafe past the drift allowance (1.0142 at ttl 0.5 s).
    "clock-rate": (
        lambda v: _fixed("clock-rate", v),
        lambda v: "SAFE" if v <= rate_threshold(0.5) else "UNSAFE",
    ),
    # How long a killed master (no persistence) stays down, in ttls: safe beyond one ttl.
    "restart-delay": (
        lambda v: _fixed("kill", v),
        lambda v: "SAFE" if v > 1.0 else "UNSAFE",
    ),
}


@dataclass(frozen=True)
class Surface:
    """A 2-D sweep: the trials at each (x, y), and theory's boundary between the phases,
    given as the x at which a row of height y turns unsafe."""

    x_label: str
    y_label: str
    make: Callable[[float, float], tuple[Family, Settings]]
    boundary: Callable[[float], float]
    #: True when points right of the boundary (larger x) are the unsafe ones.
    unsafe_right: bool
    theory: str

    def unsafe(self, x: float, y: float) -> bool:
        edge = self.boundary(y)
        return x > edge if self.unsafe_right else x < edge


def _rate_by_ttl(rate: float, ttl: float) -> tuple[Family, Settings]:
    return _fixed("clock-rate", rate, ttl=ttl), PROBING


def _pause_by_lock_delay(delay: float, pause: float) -> tuple[Family, Settings]:
    # Holders check their validity before their work (K1), so that a pause makes a stale
    # write; the masters keep each key lock_delay (in ttls) past its ttl.
    family = _fixed("client-pause", pause, faults=(), check_first=True)
    return family, replace(PROBING, lock_delay=delay * family.ttl)


SURFACES: dict[tuple[str, str], Surface] = {
    ("clock-rate", "ttl"): Surface(
        "master clock rate",
        "ttl (s)",
        _rate_by_ttl,
        rate_threshold,
        unsafe_right=True,
        theory="two holders iff r > 1 / (1 - f - 0.002 s / ttl)",
    ),
    ("lock-delay", "pause"): Surface(
        "lock_delay (ttls)",
        "holder pause (ttls)",
        _pause_by_lock_delay,
        # A stale write needs the pause to outlast what validity was left plus lock_delay:
        # never when pause <= lock_delay, whatever moment the pause takes the holder.
        lambda pause: pause,
        unsafe_right=False,
        theory="a stale write only if the pause outlasts lock_delay (and what validity was left)",
    ),
}


def edge_point(point: str) -> tuple[Family, Settings, str]:
    """A point of a sweep by name, ``clock-rate=1.012`` (a 1-D sweep) or
    ``lock-delay=1,pause=1.1`` (a 2-D one): its family, workload and theory's verdict.
    The same trials as ``sweep`` plays at that value, so the counts agree for a seed."""
    try:
        pairs = [(name, float(value)) for name, value in (part.split("=") for part in point.split(","))]
    except ValueError:
        raise ValueError(f"point must be NAME=VALUE or X=V,Y=W, not {point!r}") from None
    if len(pairs) == 1 and pairs[0][0] in SWEEPS:
        ((name, value),) = pairs
        make, theory = SWEEPS[name]
        return make(value), PROBING, theory(value)
    if len(pairs) == 2 and (pairs[0][0], pairs[1][0]) in SURFACES:
        (x, x_value), (y, y_value) = pairs
        surface = SURFACES[x, y]
        family, settings_ = surface.make(x_value, y_value)
        return family, settings_, "UNSAFE" if surface.unsafe(x_value, y_value) else "SAFE"
    raise ValueError(f"no sweep has the point {point!r}: {', '.join(SWEEPS)} or X=V,Y=W of {list(SURFACES)}")
