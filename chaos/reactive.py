"""A nemesis that fires on events: faults aimed at the edge the moment a run reaches it.

An open-loop schedule meets the precondition of a single-master K3/K4 overlap (a holder
whose key is on a *bare* majority, and a fault on one of those masters within its
validity) only by chance. A :class:`Reactor` listens to the grants the
:class:`~chaos.observer.Observer` samples and fires, within milliseconds:

* ``restart`` on a grant held on a bare majority: SIGKILL one of those masters and restart
  it empty (K4), while the holder still relies on the lock;
* ``clock-jump`` on the same trigger: step one of those masters' clock forward past the
  ttl (K3), put back after a ttl;
* ``client-pause`` on a contended grant (another client's acquire of the name is in
  flight): SIGSTOP the holder until about a ttl after its deadline (K1), so that,
  checking its validity before its work, it writes after the next holder.

Each fault it fires is recorded with its cause: its detail starts with
``reactive: <trigger>: <holder> held <name> on <masters>``, which :mod:`chaos.margins`
counts per trigger. One reactive fault at a time, each followed by a pause of half a ttl
(``cooldown``), so that what one fault causes can unfold before the next.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Sequence

from redlock import quorum_size

from .history import master_index
from .nemesis import Nemesis
from .observer import Grant

__all__ = ["REACTIVE_KINDS", "Reactor"]

#: Fault kinds a reactor plays, and the trigger each waits for.
REACTIVE_KINDS = {"restart": "bare-majority", "clock-jump": "bare-majority", "client-pause": "contended-grant"}

#: A grant older than this when the reactor sees it is stale: its moment has passed.
_STALE = 0.05


class Reactor:
    """Fires ``kinds`` (of :data:`REACTIVE_KINDS`) on ``nemesis`` as grants come in."""

    def __init__(self, nemesis: Nemesis, kinds: Sequence[str], *, ttl: float, nodes: int, seed: int = 0) -> None:
        unknown = [k for k in kinds if k not in REACTIVE_KINDS]
        if unknown:
            raise ValueError(f"kinds: no reactive form of {unknown}; reactive kinds are {sorted(REACTIVE_KINDS)}")
        self.nemesis = nemesis
        self.kinds = tuple(kinds)
        self.ttl = ttl
        self.quorum = quorum_size(nodes)
        self.cooldown = ttl / 2
        self.rng = random.Random(f"reactive:{seed}")
        self.fired: dict[str, int] = {}
        #: Bare-majority grants seen (fired on or not).
        self.bare = 0
        #: Faults that could not be fired (their target was gone).
        self.misfires = 0
        self._grants: queue.Queue[Grant] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: (when to end it, fault id) of the reactive faults still open.
        self._open: list[tuple[float, str]] = []
        self._quiet_until = 0.0

    def on_grant(self, grant: Grant) -> None:
        """The observer's listener: hand the grant over (the observer must not wait)."""
        self._grants.put(grant)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-reactor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        for _, fault in self._open:
            self.nemesis.end(fault)
        self._open.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                grant = self._grants.get(timeout=0.005)
            except queue.Empty:
                grant = None
            now = time.monotonic()
            for due, fault in [o for o in self._open if o[0] <= now]:
                self._open.remove((due, fault))
                self.nemesis.end(fault)
                self._quiet_until = now + self.cooldown
            if grant is not None:
                self._react(grant, now)

    def _react(self, grant: Grant, now: float) -> None:
        bare = grant.kind == "acquire" and len(grant.holders) == self.quorum
        self.bare += bare
        if self._open or now < self._quiet_until or now - grant.time > _STALE:
            return
        left = (grant.deadline or 0.0) - now
        if left < 0.2 * self.ttl:
            return  # too little validity left for another holder to get in before it ends
        contended = grant.kind == "acquire" and grant.waiters > 0
        met = {"bare-majority": bare, "contended-grant": contended}
        options = [k for k in self.kinds if met[REACTIVE_KINDS[k]]]
        if not options:
            return
        kind = self.rng.choice(options)
        trigger = REACTIVE_KINDS[kind]
        cause = f"reactive: {trigger}: {grant.client}#{grant.op} held {grant.name} on {','.join(grant.holders)}"
        try:
            self._fire(kind, grant, cause, left)
        except Exception:  # a target gone meanwhile (a killed client): nothing to hit
            self.misfires += 1
            return
        self.fired[trigger] = self.fired.get(trigger, 0) + 1

    def _fire(self, kind: str, grant: Grant, cause: str, left: float) -> None:
        if kind == "restart":
            master = self._pick(grant.holders)
            self.nemesis.crash_restart(master, wipe=True, detail=f"{cause}; SIGKILL, restart empty")
            self._quiet_until = time.monotonic() + self.cooldown
        elif kind == "clock-jump":
            master = self._pick(grant.holders)
            fault = self.nemesis.clock_jump(master, 2 * self.ttl, cause=cause)
            self._open.append((time.monotonic() + self.ttl, fault))
        else:
            fault = self.nemesis.pause_client(grant.process, f"{cause}; SIGSTOP past its deadline")
            # Past the deadline by about a ttl: time for the next holder to take the lock and
            # write, so that the paused holder's late write overwrites that increment.
            self._open.append((time.monotonic() + left + self.rng.uniform(0.8, 1.5) * self.ttl, fault))

    def _pick(self, holders: Sequence[str]) -> int:
        return master_index(self.rng.choice(list(holders)))
