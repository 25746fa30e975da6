"""One simulated trial: a fault schedule played against contending clients, then judged.

Where it sits: above :mod:`chaos.sim.world` (it builds the masters, network and clients
and turns each op of a :class:`chaos.schedule.Schedule` into events) and below the search,
sweeps and command line (:mod:`chaos.sim.search`, :mod:`chaos.sim.cli`). The clients run
the workload of ``python -m chaos explore`` (:mod:`chaos.workload`'s loop): acquire one
of a few names, read the name's counter, hold for a share of the validity, sometimes
extend, write the counter plus one, release. Everything is recorded as
:mod:`chaos.history` events on the true time line, and :func:`chaos.checkers.check_all`
judges the history exactly as it judges a real run.

A trial's acquires make one attempt each (``blocking=False``; the workload retries), so
that :func:`chaos.checkers.check_validity` bounds every deadline from its invocation.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlock._api import state as _lock
from redlock._protocol.core import Result, retry_delays
from redlock._protocol.flows import Lease, LockSpec, Tokens, extend_flow, release_flow
from redlock._protocol.kinds import FENCED, PLAIN

from ..checkers import Verdict, check_all
from ..history import Event, History, Recorder, voters_of
from ..schedule import FaultOp, FaultSet, Schedule
from .watch import Watch, WatchedMaster
from .world import Client, Clock, Master, Network, World

__all__ = ["SIM_KINDS", "Settings", "TrialResult", "run_trial"]

#: Fault kinds only the simulator plays: a master answering writes with an error (-OOM).
SIM_KINDS = ("error-replies",)


@dataclass(frozen=True)
class Settings:
    """The workload and the client's settings for a trial (the explore defaults, scaled)."""

    names: int = 2
    node_timeout: float = 0.05
    connect_timeout: float = 0.1
    drift_factor: float = 0.01
    retry_delay: float = 0.05
    hold_share: tuple[float, float] = (0.05, 0.95)
    think: tuple[float, float] = (0.0, 0.02)
    extend_share: float = 0.1
    latency: tuple[float, float] = (0.0002, 0.001)
    #: Each client's clock rate (1.0: true time); its offset is random.
    client_rates: tuple[float, ...] = ()
    lock_delay: float = 0.0
    #: When each client slot makes its first attempt (a window, drawn once a start); a slot
    #: past the tuple's end starts within the first 10 ms. A point trial starts its rival
    #: late, where the holding it probes ends (:mod:`chaos.sim.points`).
    starts: tuple[tuple[float, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __reduce__(self) -> tuple[type[Settings], tuple[Any, ...]]:
        # Pickled as a call of the constructor (worker processes and a cluster's get one):
        # compiled, a frozen dataclass refuses the assignments pickle's default would make.
        return (Settings, tuple(getattr(self, field_.name) for field_ in dataclasses.fields(self)))


class _Memory(Recorder):
    """A recorder that keeps events in memory only (no JSON per event: a trial is short)."""

    def record(self, event: Event) -> Event:
        self._events.append(event)
        return event


@dataclass
class TrialResult:
    verdict: Verdict
    acquisitions: int
    #: Sim-only findings: keys a failed attempt left on masters that answered its rollback,
    #: and clients whose flow raised.
    leftovers: list[str] = field(default_factory=list)
    events: int = 0
    #: The judged history (for a picture of the trial).
    history: History | None = field(default=None, repr=False, compare=False)

    @property
    def violated(self) -> bool:
        return not self.verdict.safe or bool(self.leftovers)

    @property
    def kinds(self) -> list[str]:
        return [*self.verdict.kinds, *(["leftover-key"] if self.leftovers else [])]

    def describe(self) -> list[str]:
        return [*self.verdict.violations, *self.leftovers]


class _Worker:
    """One client slot's workload loop (a new client takes the slot after a kill)."""

    def __init__(self, trial: _Trial, slot: str, rng: random.Random) -> None:
        self.trial = trial
        self.slot = slot
        self.rng = rng
        self.generation = 0
        self.client: Client | None = None
        self.start()

    def start(self) -> None:
        self.generation += 1
        trial = self.trial
        index = int(self.slot[1:]) - 1
        rates = trial.settings.client_rates
        rate = rates[index] if index < len(rates) else 1.0
        name = self.slot if self.generation == 1 else f"{self.slot}.{self.generation}"
        self.client = Client(
            trial.world,
            name,
            self.slot,
            trial.masters,
            node_timeout=trial.settings.node_timeout,
            connect_timeout=trial.settings.connect_timeout,
            clock=Clock(base=self.rng.uniform(100.0, 1000.0), rate=rate),
        )
        self.counter = itertools.count()
        self.delays = retry_delays(trial.settings.retry_delay, self.rng)
        self.client.on_crash = self.crashed
        starts = trial.settings.starts
        low, high = starts[index] if index < len(starts) else (0.0, 0.01)
        self.client.later(self.rng.uniform(low, high), self.acquire)

    def crashed(self, error: Exception) -> None:
        assert self.client is not None
        message = f"{type(error).__name__}: {error}"
        self.trial.recorder.error(self.client.name, message)
        self.trial.leftovers.append(f"{self.client.name} crashed: {message}")

    def spec(self, name: str) -> LockSpec:
        # One a name for the whole trial (its settings never change): not one an attempt.
        spec = self.trial.specs.get(name)
        if spec is None:
            spec = self.trial.specs[name] = self._spec(name)
        return spec

    def _spec(self, name: str) -> LockSpec:
        s = self.trial.settings
        return LockSpec(
            key=name,
            ttl=self.trial.ttl,
            node_names=tuple(m.name for m in self.trial.masters),
            node_timeout=s.node_timeout,
            clock_drift_factor=s.drift_factor,
            retry_delay=s.retry_delay,
            unavailable_timeout=1.0,
            kind=FENCED if self.trial.faults.fencing else PLAIN,
            lock_delay=s.lock_delay,
        )

    def acquire(self) -> None:
        client = self.client
        assert client is not None
        trial = self.trial
        if trial.world.now >= trial.stop_at:
            return
        name = self.rng.choice(trial.names)
        spec = self.spec(name)
        rec = trial.recorder
        op = rec.acquire_invoked(client.name, name, ttl=spec.ttl, blocking=False)
        tokens = Tokens(lambda: f"{client.name}:{next(self.counter)}:{self.rng.getrandbits(32):08x}")
        # Looked up where the Lock looks it up, so that a broken client's relay applies.
        flow = vars(_lock)["acquire_flow"](spec, tokens, client.local(), blocking=False, timeout=None, rng=self.rng)

        def done(result: Result) -> None:
            self.acquired(spec, op, tokens, result)

        client.drive(flow, done)

    def acquired(self, spec: LockSpec, op: int, tokens: Tokens, result: Result) -> None:
        client = self.client
        assert client is not None
        trial = self.trial
        rec = trial.recorder
        trial.check_leftovers(client, tokens, result)
        if not result.ok:
            rec.acquire_returned(client.name, spec.key, op, ok=False)
            # The next attempt comes a retry delay later, as within the real workload's
            # blocking acquire (not a think time: that hot loop made nine attempts in ten
            # fail against a held name and cost most of a trial's events).
            client.later(next(self.delays), self.acquire)
            return
        trial.acquisitions += 1
        assert result.token is not None
        rec.acquire_returned(
            client.name,
            spec.key,
            op,
            ok=True,
            token=result.token,
            deadline=client.true_time(result.deadline),
            fencing=result.fencing_token,
            voters=voters_of(result.outcomes),
        )
        lease = Lease(result.token, result.deadline, result.fencing_token)
        read = trial.resource.get(spec.key, 0)
        rec.resource_read(client.name, spec.key, spec.key, read, fencing=lease.fencing_token)
        valid = not trial.faults.check_first or lease.deadline > client.local()
        hold = max(0.0, lease.deadline - client.local()) * self.rng.uniform(*trial.settings.hold_share)
        client.later(hold, self.held, spec, lease, read, valid)

    def held(self, spec: LockSpec, lease: Lease, read: int, valid: bool) -> None:
        client = self.client
        assert client is not None
        if self.rng.random() < self.trial.settings.extend_share:
            rec = self.trial.recorder
            op = rec.extend_invoked(client.name, spec.key, token=lease.token, ttl=spec.ttl)
            if lease.deadline <= client.local():
                # Lock.extend() refuses a lease whose validity ran out before it began
                # (LockLost, nothing sent: LockState._notice_lapse), as this client does.
                rec.extend_returned(client.name, spec.key, op, ok=False, deadline=None, voters=None)
                self.write(spec, lease, read, valid)
                return

            def extended(result: Result) -> None:
                rec.extend_returned(
                    client.name,
                    spec.key,
                    op,
                    ok=result.ok,
                    deadline=client.true_time(lease.deadline) if result.ok else None,
                    voters=voters_of(result.outcomes) if result.ok else None,
                )
                self.write(spec, lease, read, valid)

            client.drive(extend_flow(spec, lease, spec.ttl, client.local()), extended)
        else:
            self.write(spec, lease, read, valid)

    def write(self, spec: LockSpec, lease: Lease, read: int, valid: bool) -> None:
        client = self.client
        assert client is not None
        trial = self.trial
        check_first = trial.faults.check_first
        if valid and (check_first or lease.deadline > client.local()):
            fencing = lease.fencing_token if trial.faults.fencing else None
            accepted = True
            if fencing is not None:
                accepted = fencing >= trial.highest.get(spec.key, -1)
                if accepted:
                    trial.highest[spec.key] = fencing
            if accepted:
                trial.resource[spec.key] = read + 1
            trial.seq += 1
            trial.recorder.resource_write(
                client.name,
                spec.key,
                spec.key,
                read + 1,
                read_value=read,
                fencing=fencing,
                accepted=accepted,
                seq=trial.seq,
            )
        rec = trial.recorder
        op = rec.release_invoked(client.name, spec.key, token=lease.token)
        lease.ended = True

        def released(result: Result) -> None:
            rec.release_returned(client.name, spec.key, op, ok=result.ok)
            client.later(self.rng.uniform(*trial.settings.think), self.acquire)

        client.drive(release_flow(spec, lease.token, client.local()), released)


class _Trial:
    def __init__(self, schedule: Schedule, seed: int, settings: Settings, watch: Watch | None = None) -> None:
        self.world = World(seed)
        self.settings = settings
        self.faults: FaultSet = schedule.faults
        self.ttl = schedule.ttl
        persistence = {"aof-always": "always", "aof-everysec": "everysec"}.get(schedule.faults.persistence, "none")
        self.masters = [
            Master(self.world, i, persistence) if watch is None else WatchedMaster(self.world, i, persistence, watch)
            for i in range(schedule.nodes)
        ]
        self.world.network = Network(self.world, self.masters, settings.latency)
        self.recorder = _Memory(clock=lambda: self.world.now, source="sim")
        self.names = [f"L{i + 1}" for i in range(settings.names)]
        self.specs: dict[str, LockSpec] = {}
        self.resource: dict[str, int] = {}
        self.highest: dict[str, int] = {}
        self.seq = 0
        self.acquisitions = 0
        self.leftovers: list[str] = []
        self.faulted_nodes: set[int] = set()
        #: Any fault begun yet (the leftover check only judges a run still fault-free).
        self.faulted = False
        self.stop_at = schedule.duration - max(0.5, schedule.ttl)
        rng = random.Random(f"workload:{seed}")
        self.workers = {
            f"c{i + 1}": _Worker(self, f"c{i + 1}", random.Random(rng.getrandbits(64))) for i in range(schedule.clients)
        }
        self._fault_ids: dict[int, str] = {}
        for index, op in enumerate(schedule.ops):
            self.world.at(op.start, self.begin, index, op)
            self.world.at(op.end, self.end, index, op)

    # --- faults ---------------------------------------------------------------------------------

    def begin(self, index: int, op: FaultOp) -> None:
        self._fault_ids[index] = self.recorder.fault_begin(op.kind, op.target, f"{op.value:g}")
        self.faulted = True
        net = self.world.network
        for node in op.masters:
            self.faulted_nodes.add(node)
        if op.kind in ("kill", "restart", "power-loss"):
            for node in op.masters:
                self.masters[node].crash(power=op.kind == "power-loss")
            if op.kind == "restart":
                for node in op.masters:
                    self.masters[node].restart()
        elif op.kind == "pause-master":
            for node in op.masters:
                self.masters[node].pause()
        elif op.kind == "clock-jump":
            for node in op.masters:
                self.masters[node].clock.jump(self.world.now, op.value)
        elif op.kind == "clock-rate":
            for node in op.masters:
                self.masters[node].clock.set_rate(self.world.now, op.value)
        elif op.kind == "error-replies":
            for node in op.masters:
                self.masters[node].refusing = True
        elif op.kind == "link-delay":
            net.link(op.client or "", op.masters[0]).delay = op.value
        elif op.kind == "blackhole":
            net.link(op.client or "", op.masters[0]).blackhole = True
        elif op.kind == "one-way":
            net.link(op.client or "", op.masters[0]).hold_replies = op.value
        elif op.kind == "client-pause":
            self._client(op).pause()
        elif op.kind == "client-kill":
            self._client(op).kill()

    def end(self, index: int, op: FaultOp) -> None:
        net = self.world.network
        if op.kind in ("kill", "power-loss"):
            for node in op.masters:
                self.masters[node].restart()
        elif op.kind == "pause-master":
            for node in op.masters:
                self.masters[node].resume()
        elif op.kind == "clock-rate":
            for node in op.masters:
                self.masters[node].clock.set_rate(self.world.now, 1.0)
        elif op.kind == "error-replies":
            for node in op.masters:
                self.masters[node].refusing = False
        elif op.kind == "link-delay":
            net.link(op.client or "", op.masters[0]).delay = 0.0
        elif op.kind == "blackhole":
            net.heal(op.client or "", op.masters[0])
        elif op.kind == "one-way":
            net.link(op.client or "", op.masters[0]).hold_replies = 0.0
        elif op.kind == "client-pause":
            self._client(op).resume()
        elif op.kind == "client-kill":
            self.workers[op.target].start()
        self.recorder.fault_end(self._fault_ids.pop(index))

    def _client(self, op: FaultOp) -> Client:
        client = self.workers[op.target].client
        assert client is not None
        return client

    # --- sim-only checks ------------------------------------------------------------------------

    def check_leftovers(self, client: Client, tokens: Tokens, result: Result) -> None:
        """A failed attempt must take its keys back: with no fault anywhere yet, every master
        answered its rollback, so a key still holding that attempt's token is one it left."""
        if self.faulted or self.world.network.late:
            return
        winner = result.token if result.ok else None
        mine = client.name + ":"
        for master in self.masters:
            for key, (value, _) in list(master.data.keys.items()):
                if (
                    isinstance(value, str)
                    and value.startswith(mine)
                    and value != winner
                    and value not in tokens.outstanding
                    and master.data.holder(key, master.wall()) == value
                ):
                    self.leftovers.append(f"{key!r}: {client.name}'s failed attempt left its key on {master.name}")


def run_trial(
    schedule: Schedule,
    seed: int,
    settings: Settings | None = None,
    *,
    pick: Callable[[], float] | None = None,
    watch: Watch | None = None,
) -> TrialResult:
    """Play ``schedule`` with workload seed ``seed``; the judged history and its counts.
    ``pick``: each message's latency, chosen (the small-scope mode) rather than drawn;
    ``watch``: counts the interleavings of :mod:`chaos.sim.watch` (the same history)."""
    trial = _Trial(schedule, seed, settings or Settings(), watch)
    trial.world.network.pick = pick
    trial.world.network.late_after = trial.settings.node_timeout
    trial.world.run(schedule.duration)
    history = trial.recorder.history()
    verdict = check_all(history, initial=0, final=None)
    return TrialResult(verdict, trial.acquisitions, trial.leftovers[:3], trial.world.events, history)


def schedule_of(
    ops: Sequence[FaultOp], faults: FaultSet, *, duration: float, nodes: int, clients: int, ttl: float, seed: int
) -> Schedule:
    return Schedule(tuple(sorted(ops, key=lambda op: op.start)), duration, nodes, clients, ttl, seed, faults)
