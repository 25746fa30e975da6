"""Point trials: the cheapest trial that still asks a rate point's question.

Where it sits: above :mod:`chaos.sim.families` (the families, sweeps' points and settings)
and below :mod:`chaos.sim.search`, whose rates play it (``sim rates --trial point``).

A sweep trial (:func:`chaos.sim.families.edge_point`) is a 6 s random schedule of 3 clients
on 5 masters: a fault has to happen to meet a holding, among a bare majority, with a rival
trying at that moment, and most of its 7,400 events (the sweeps' probing workload) bear
on something else. A point trial stages only the meeting, with its phase random:

* **clock rate** ``r`` (``clock-rate=R``): 3 masters, 2 clients contending for one name,
  the partitions of K3 (c1 cannot reach B, c2 cannot reach A), so that every holding of c1
  is the bare majority {A, C} and c2 can complete one with {B, C} once C drops c1's key.
  C's clock runs at ``r`` from a random moment in the two ttls around c1's first attempt
  (at one ttl): half the time from before the key is set, else from part-way through the
  holding, which expires the key early by less. c1 works to the end of its validity (99.9
  to 100 % of it), as the theory's holder may; c2 starts trying when 30 % of c1's ttl is
  left (as soon as a master at a rate up to 1.4 can drop the key) and retries 5-15 ms after
  each attempt, until c1's first holding is over. An attempt that C refuses waits for the
  connect to A that the partition times out, 20 ms here rather than the sweeps' 100, so c2
  tries about every 30 ms (the window at 1.017 is under 1.4 ms wide).
* **holder pause** ``p`` ttls with ``lock_delay`` ``d`` ttls (``lock-delay=D,pause=P``): 3
  masters, 2 clients, one name, no partition. c1 is paused for ``p`` ttls from a random
  moment of its first ttl (of its first holding, mostly); holders check their validity
  before their work (K1), and work to 90-98 % of it. c2 starts trying shortly before c1's
  keys expire (90 % of ``(1 + d)`` ttls) and retries every 5-15 ms until c1 has resumed.

Both are judged by the same checkers as any trial. What they measure is a rate *per
meeting*: the share of meetings of the fault with a holding that end in a violation; a
6 s trial holds several such meetings or none, with workloads of their own, so the two
rates are not the same number, and a 6 s trial costs 20 to 35 times as much. Where a
sweep trial cannot show a violation at all, a point trial can: the sweeps' holders release
at 90-98 % of their validity, at least ~10 ms before its end, so a key that a clock at
1.017 drops 1.4 ms early is never missed by its holder.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from ..schedule import FaultOp, FaultSet, Schedule
from .families import PROBING, UNSAFE, Family, edge_point
from .trial import Settings

__all__ = ["PointTrial", "point_trial"]


@dataclass(frozen=True)
class PointTrial(Family):
    """A family whose every schedule is the one meeting of a rate point (module doc)."""

    kind: str = "clock-rate"
    #: The clock's rate, or the pause in ttls.
    value: float = 1.0
    #: When the workload stops starting attempts (seconds of the trial).
    horizon: float = 1.0

    def schedule(self, seed: int) -> Schedule:
        rng = random.Random(f"point:{seed}")
        ttl, end = self.ttl, self.duration
        if self.kind == "clock-rate":
            start = rng.uniform(0.0, 2 * ttl)
            ops = [
                FaultOp(0.0, end, "blackhole", "c1-B"),
                FaultOp(0.0, end, "blackhole", "c2-A"),
                FaultOp(round(start, 6), end, "clock-rate", "C", self.value),
            ]
        else:
            start = rng.uniform(0.0, ttl)
            ops = [FaultOp(round(start, 6), round(start + self.value * ttl, 6), "client-pause", "c1")]
        ops.sort(key=lambda op: op.start)
        return Schedule(tuple(ops), self.duration, self.nodes, self.clients, ttl, seed, self.faults)


def _family(faults: FaultSet, value: float, horizon: float, ttl: float) -> PointTrial:
    """Two clients on three masters, one meeting of ``faults``'s first kind (at ``value``),
    attempts started up to ``horizon`` and the run long enough for them to end."""
    return PointTrial(
        faults,
        duration=round(horizon + max(0.5, ttl), 6),
        ttl=ttl,
        nodes=3,
        clients=2,
        expected=UNSAFE,
        kind=faults.kinds[0],
        value=value,
        horizon=horizon,
    )


def _clock_rate(rate: float, ttl: float = 0.5) -> tuple[PointTrial, Settings]:
    # c1's first attempt at one ttl, its holding over by two; c2 from 1.7 ttls.
    family = _family(FaultSet("point-clock-rate", ("clock-rate", "blackhole"), safe=False), rate, 2.05 * ttl, ttl)
    # A connect to a master behind the partition times out after 20 ms, not 100: c2's
    # attempts wait for those connects (it needs A or C, and C is undecided until it drops
    # the key), and a shorter wait spends fewer of them outside the window probed.
    settings = replace(
        PROBING,
        names=1,
        hold_share=(0.999, 1.0),
        connect_timeout=0.02,
        starts=((ttl, ttl + 0.01), (1.7 * ttl, 1.75 * ttl)),
    )
    return family, settings


def _pause(delay: float, pause: float, ttl: float = 0.5) -> tuple[PointTrial, Settings]:
    # c1's keys expire (1 + delay) ttls after its first attempt; it resumes by 1 + pause.
    expiry = (1 + delay) * ttl
    horizon = max((1 + pause) * ttl, expiry) + 0.05
    faults = FaultSet("point-client-pause", ("client-pause",), safe=False, check_first=True)
    settings = replace(
        PROBING, names=1, lock_delay=delay * ttl, starts=((0.0, 0.01), (0.9 * expiry, 0.9 * expiry + 0.01))
    )
    return _family(faults, pause, horizon, ttl), settings


def point_trial(point: str) -> tuple[Family, Settings, str]:
    """The point trial of a sweep point (``clock-rate=1.017``, ``lock-delay=1,pause=1.1``),
    with its workload and theory's verdict, as :func:`chaos.sim.families.edge_point` gives
    the sweep trial of the same point."""
    _, _, theory = edge_point(point)  # (the same names, values and errors)
    pairs = [(name, float(value)) for name, value in (part.split("=") for part in point.split(","))]
    if len(pairs) == 1 and pairs[0][0] == "clock-rate":
        family, settings = _clock_rate(pairs[0][1])
    elif [name for name, _ in pairs] == ["lock-delay", "pause"]:
        family, settings = _pause(pairs[0][1], pairs[1][1])
    else:
        known = ["clock-rate=R", "lock-delay=D,pause=P"]
        raise ValueError(f"no point trial for {point!r}: {', '.join(known)} (other points: --trial sweep)")
    return family, settings, theory
