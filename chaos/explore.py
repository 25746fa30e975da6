"""``python -m chaos explore`` and ``replay``: a randomized fault schedule against a live workload.

:func:`chaos.schedule.generate` composes faults over time; :func:`explore` plays the
schedule against a real cluster while K client processes contend for a few names with the
read-modify-write of :mod:`chaos.workload` (holders work for a random share of their
validity, so locks often end near their deadline, and killed or paused holders leave their
locks to expire). It runs as a :class:`~chaos.runner.Scenario` through
:func:`~chaos.runner.run_scenario`, so the cluster, the histories and the checkers are the
catalogue's; on top of them it writes, in ``--out``:

* ``summary.json``: acquisitions, violations by kind, their rate per 1,000 acquisitions
  and per fault-hour (the summed length of every fault window), availability (the share of
  time bins of ``max(1 s, 2 ttl)`` in which some client acquired: with K clients always
  trying and holds shorter than a ttl, a bin without one means nobody could), and acquire
  latency and throughput per bin;
* ``schedule.json``: the fault schedule played; ``E-explore.json``: the whole history and
  verdict, as the catalogue writes it;
* ``timeline.png``: the catalogue's timeline (of the first minute, or of the minute around
  the first violation); ``over-time.png``: latency and throughput over the whole run, the
  violations marked. Both titles start with the run's verdict against its set's
  expectation (:class:`chaos.judgement.Judgement`);
* ``violations/violation-N.json``: for each violation, the schedule of the window around
  it (from ``3 ttl + 2 s`` before to half a second after), which ``python -m chaos replay
  FILE`` plays again with the same seed and parameters.

The SAFE set must give no violation however long it runs; an UNSAFE set should find some
(the exit status says whether the run matched its set's expectation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pathlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redlock._process import proc as _proc
from redlock.servers import Persistence

from .checkers import TokenRegression, Verdict, check_all, percentile
from .clients import ClientError, ClientProcess, Pending
from .history import AcquireInvoked, AcquireReturned, Event, History
from .judgement import FAILURE_COLOUR, judge_run
from .margins import Coverage, goals_reached, judge, judge_goals
from .netns import NetworkKind, unavailable
from .peer_client import Peers
from .reactive import REACTIVE_KINDS, Reactor
from .runner import Params, Run, Scenario, ScenarioResult, run_scenario
from .scenarios import _loop
from .schedule import FAULT_KINDS, SLEW_STEP, STROBE_PERIOD, FaultOp, FaultSet, Schedule, generate

__all__ = [
    "ExploreConfig",
    "ExploreOutcome",
    "Violation",
    "explore",
    "explore_until",
    "find_violations",
    "replay",
    "time_bins",
]

# How far before a violation its saved window starts, in ttls, plus this many seconds: a
# cause (a restart, a pause) precedes the overlap by up to about two ttls.
_WINDOW_TTLS = 3.0
_WINDOW_EXTRA = 2.0
_WINDOW_AFTER = 0.5
#: How many seconds of a run ``timeline.png`` shows (a longer run is unreadable there).
_PLOT_SPAN = 60.0


@dataclass(frozen=True)
class ExploreConfig:
    """What an explore run plays: the fault set, the workload and the schedule's seed."""

    faults: FaultSet
    seed: int = 1
    duration: float = 60.0
    nodes: int = 5
    clients: int = 4
    names: int = 3
    ttl: float = 1.0
    interval: float = 0.7
    #: Where link faults act; delays ("link-delay", "one-way") always need the proxy, and
    #: the kernel's own kinds the kernel (a named set is adapted: FaultSet.on).
    network: NetworkKind = "proxy"
    #: Fire the set's kinds that have a reactive form (:data:`chaos.reactive.REACTIVE_KINDS`)
    #: on events, by a :class:`~chaos.reactive.Reactor`, instead of on the schedule's timer.
    reactive: bool = False

    def __post_init__(self) -> None:
        for name, low in (("duration", 0.0), ("ttl", 0.05), ("interval", 0.01)):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > low):
                raise ValueError(f"{name} must be a number > {low:g}, not {value!r}")
        for name, low in (("nodes", 3), ("clients", 2), ("names", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, not {value!r}")
        # (frozen: the one way to store the set as played.)
        object.__setattr__(self, "faults", self.faults.on(self.network))

    def schedule(self) -> Schedule:
        """The open-loop schedule: without the kinds a reactive run fires on events."""
        schedule = generate(
            self.seed,
            self.duration,
            self.faults,
            nodes=self.nodes,
            clients=self.clients,
            ttl=self.ttl,
            interval=self.interval,
        )
        if not self.reactive:
            return schedule
        return dataclasses.replace(schedule, ops=tuple(op for op in schedule.ops if op.kind not in self.reactive_kinds))

    @property
    def acquire_timeout(self) -> float:
        """How long the workload's acquires wait before they give up: two ttls."""
        return 2 * self.ttl

    @property
    def reactive_kinds(self) -> tuple[str, ...]:
        """The kinds a reactive run fires on events (none unless ``reactive``)."""
        return tuple(k for k in self.faults.kinds if k in REACTIVE_KINDS) if self.reactive else ()

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["faults"] = self.faults.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExploreConfig:
        fields = dict(data)
        fields["faults"] = FaultSet.from_dict(fields["faults"])
        return cls(**fields)


# --- playing a schedule ---------------------------------------------------------------------


class _Player:
    """Starts and stops the ops of a schedule on a run, and keeps each client slot filled."""

    def __init__(self, run: Run, config: ExploreConfig, schedule: Schedule) -> None:
        self.run = run
        self.config = config
        self.schedule = schedule
        self.nemesis = run.nemesis
        self.spec: dict[str, Any] = {
            "names": [f"L{i + 1}" for i in range(config.names)],
            "ttl": config.ttl,
            "hold_share": (0.05, 0.95),
            "check_first": config.faults.check_first,
            "acquire_timeout": config.acquire_timeout,
            "extend_share": 0.1,
        }
        self.slots: dict[str, ClientProcess] = {}
        self.generation: dict[str, int] = {}
        self.pending: list[Pending] = []
        self.replacing: list[threading.Thread] = []
        self.skipped = 0
        self.failed_replacements = 0
        self.until = 0.0
        self._open: dict[int, list[str]] = {}
        self._lock = threading.Lock()

    def _clients(self, names: Sequence[str]) -> list[ClientProcess]:
        return self.run.clients(names, fencing=self.config.faults.fencing, wake_on_release=True)

    def play(self) -> None:
        slots = [f"c{i + 1}" for i in range(self.schedule.clients)]
        for slot, client in zip(slots, self._clients(slots), strict=True):
            self.slots[slot] = client
        t0 = time.monotonic()
        self.run.metric("schedule_t0", t0)
        reactor = self._reactor()
        self.until, pending = _loop(self.run, list(self.slots.values()), duration=self.schedule.duration, **self.spec)
        self.pending.extend(pending)
        try:
            for at, what, index in self.schedule.steps():
                self.run.sleep_until(t0 + at)
                op = self.schedule.ops[index]
                if what == "start":
                    self._start(index, op)
                else:
                    self._stop(index)
            # The reactor fires until the last stretch, which is left to heal like the schedule's.
            if reactor is not None:
                self.run.sleep_until(t0 + self.schedule.duration - max(1.0, 2 * self.config.ttl))
        finally:
            if reactor is not None:
                reactor.stop()
                self.run.metric("reactive_fired", dict(reactor.fired))
                self.run.metric("reactive_bare_majority_seen", reactor.bare)
                self.run.metric("reactive_misfires", reactor.misfires)
        _finish_all(self.pending)
        for thread in self.replacing:
            thread.join()
        self.run.metric("ops_skipped", self.skipped)
        self.run.metric("replacements_failed", self.failed_replacements)

    def _reactor(self) -> Reactor | None:
        kinds = self.config.reactive_kinds
        if not kinds:
            return None
        observer = self.run.observer
        if observer is None:
            raise RuntimeError("a reactive run needs the observer (Params.observe)")
        reactor = Reactor(self.nemesis, kinds, ttl=self.config.ttl, nodes=self.config.nodes, seed=self.config.seed)
        observer.listen(reactor.on_grant)
        reactor.start()
        return reactor

    def _alive(self, slot: str) -> ClientProcess | None:
        with self._lock:
            client = self.slots.get(slot)
        if client is None or not _proc.running(client.pid):
            return None
        return client

    def _start(self, index: int, op: FaultOp) -> None:
        action = _NEMESIS_ACTIONS.get(op.kind)  # (FaultOp refuses a kind that is not in the table)
        if action is None:
            raise ValueError(f"fault kind {op.kind!r} is played by the simulator only (python -m chaos sim)")
        name = ""
        if op.client is not None:
            client = self._alive(op.client)
            if client is None:
                # Its slot is still being refilled after a client-kill: nothing to hit.
                self.skipped += 1
                return
            name = client.name
        self._open[index] = action(self, op, name)

    def _stop(self, index: int) -> None:
        for fault in self._open.pop(index, []):
            self.nemesis.end(fault)

    def _replace(self, slot: str) -> None:
        """A new client takes ``slot``, in the background: starting a process takes a
        second or so, and the schedule must not wait for it. The thread lives as long as
        the client's workload: a worker dies with the thread that started it
        (PR_SET_PDEATHSIG is per thread)."""

        def start() -> None:
            with self._lock:
                generation = self.generation.get(slot, 1) + 1
                self.generation[slot] = generation
            left = self.until - time.monotonic()
            if left <= 0.5:
                return
            try:
                (client,) = self._clients([f"{slot}.{generation}"])
                _, pending = _loop(self.run, [client], duration=self.until - time.monotonic(), **self.spec)
            except ClientError as exc:
                # The run goes on with one client fewer; the report says so.
                self.run.note(f"no client took slot {slot}: {exc}")
                with self._lock:
                    self.failed_replacements += 1
                return
            with self._lock:
                self.slots[slot] = client
            _finish_all(pending)

        thread = threading.Thread(target=start, name=f"replace-{slot}", daemon=True)
        self.replacing.append(thread)
        thread.start()


# --- what the nemesis does for each kind of fault ------------------------------------------------
#
# One action per kind of chaos.schedule.FAULT_KINDS (a test checks that each kind has one):
# given the player, the op and the name of the client process it hits (links and clients),
# it starts the op's fault and returns the nemesis's handles of it, which the op's stop ends.

_Action = Callable[[_Player, FaultOp, str], list[str]]


def _kill(player: _Player, op: FaultOp, client: str) -> list[str]:
    empty = player.config.faults.persistence != "aof-always"
    return [player.nemesis.kill(i, restart_wipe=empty) for i in op.masters]


def _restart(player: _Player, op: FaultOp, client: str) -> list[str]:
    for i in op.masters:
        player.nemesis.crash_restart(i, wipe=True)
    return []  # over once restarted: nothing for the stop to end


def _kill_client(player: _Player, op: FaultOp, client: str) -> list[str]:
    slot = op.target
    return [player.nemesis.kill_client_until(client, lambda: player._replace(slot))]


_NEMESIS_ACTIONS: Mapping[str, _Action] = {
    "kill": _kill,
    "restart": _restart,
    # The disk keeps what was fsynced (chaos.powerloss); back after the op's length.
    "power-loss": lambda player, op, client: [player.nemesis.power_off(i) for i in op.masters],
    "pause-master": lambda player, op, client: [player.nemesis.pause_master(i) for i in op.masters],
    "clock-jump": lambda player, op, client: [player.nemesis.clock_jump(i, op.value) for i in op.masters],
    "clock-rate": lambda player, op, client: [player.nemesis.clock_rate(i, op.value) for i in op.masters],
    "clock-strobe": lambda player, op, client: [
        player.nemesis.clock_strobe(i, op.value, STROBE_PERIOD) for i in op.masters
    ],
    "clock-slew": lambda player, op, client: [
        player.nemesis.clock_slew(i, op.value, op.end - op.start, SLEW_STEP) for i in op.masters
    ],
    "link-delay": lambda player, op, client: [
        player.nemesis.latency(client, op.masters[0], to_server=op.value, to_client=op.value / 2)
    ],
    "blackhole": lambda player, op, client: [player.nemesis.blackhole(client, op.masters[0])],
    "one-way": lambda player, op, client: [
        player.nemesis.latency(client, op.masters[0], to_server=0.0, to_client=op.value)
    ],
    "client-pause": lambda player, op, client: [
        player.nemesis.pause_client(client, f"SIGSTOP {op.end - op.start:.2f}s")
    ],
    "client-kill": _kill_client,
    # The kernel network's own (nftables rules in the client's namespace).
    "drop-replies": lambda player, op, client: [player.nemesis.link_fault(client, op.masters, "drop-replies")],
    "drop-requests": lambda player, op, client: [player.nemesis.link_fault(client, op.masters, "drop-requests")],
    "syn-drop": lambda player, op, client: [player.nemesis.link_fault(client, op.masters, "syn-drop")],
    "reset": lambda player, op, client: [player.nemesis.link_fault(client, op.masters, "reset")],
    "loss": lambda player, op, client: [player.nemesis.link_fault(client, op.masters, "loss", percent=op.value)],
    "half-open": lambda player, op, client: [player.nemesis.half_open(client, op.masters[0])],
}


def _finish_all(pending: Sequence[Pending]) -> None:
    for waiting in pending:
        # A killed client's loop never answers: its history says what it did.
        with contextlib.suppress(ClientError):
            waiting.result()


def _scenario(config: ExploreConfig, schedule: Schedule) -> Scenario:
    faults = config.faults

    def script(run: Run) -> None:
        _Player(run, config, schedule).play()

    return Scenario(
        number="E",
        name="explore",
        title=f"randomized schedule of {faults.name} faults",
        expected="SAFE" if faults.safe else "UNSAFE",
        script=script,
        persistence=cast(Persistence, faults.persistence),
        all_clocked=faults.clocked,
        power_loss="power-loss" in faults.kinds,
        proxies=faults.proxied,
        delays=any(FAULT_KINDS[kind].proxy for kind in faults.kinds),
        loop=True,
    )


# --- what a run found -----------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """One violation: its kind, when it happened (seconds from the schedule's start) and
    the checker's description."""

    kind: str
    time: float
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "time": self.time, "text": self.text}


def find_violations(verdict: Verdict, t0: float) -> list[Violation]:
    """Every violation of ``verdict`` as a moment, counted one per overlap, lost increment,
    stale write accepted, fencing regression and late extend; each text says which one,
    timed in seconds from ``t0`` (the schedule's start), as the pictures are."""
    found = [Violation("mutual-exclusion", o.start - t0, o.describe(t0)) for o in verdict.overlaps]
    for report in verdict.lost_updates:
        for lost, by in zip(report.lost_writes, report.overwritten_by, strict=True):
            # The increment is lost when the write that did not build on it lands (when
            # several wrote one value, which of them is "lost" is arbitrary, but not when).
            when = (lost if by is None else by).time - t0
            text = f"{report.resource!r}: {lost.client}'s increment to {lost.value} (at t={lost.time - t0:.3f}) lost"
            if by is not None:
                text += f", overwritten by {by.client}'s write of {by.value} at t={when:.3f}"
            found.append(Violation("lost-update", when, text))
        if not report.ok and not report.lost_writes:
            # Short of its count with no write to blame (a write the history does not
            # have): the end of the run is the only moment known.
            found.append(Violation("lost-update", (verdict.liveness.window or (t0, t0))[1] - t0, report.describe()))
    found += [
        Violation("stale-write", s.write.time - t0, f"{s.describe()} at t={s.write.time - t0:.3f}")
        for s in verdict.stale_writes
    ]
    for f in verdict.fencing:
        when = f.later.start if isinstance(f, TokenRegression) else f.second.start
        found.append(Violation("fencing", when - t0, f"{f.describe()} at t={when - t0:.3f}"))
    found += [
        Violation("late-extend", e.revived.start - t0, f"{e.describe()} at t={e.revived.start - t0:.3f}")
        for e in verdict.late_extends
    ]
    return sorted(found, key=lambda v: v.time)


def time_bins(history: History, t0: float, end: float, width: float) -> list[dict[str, Any]]:
    """Per bin of ``width`` seconds from ``t0`` to ``end``: acquires that succeeded, and the
    latency of every acquire that returned in it (p50, max)."""
    count = max(1, math.ceil((end - t0) / width))
    invoked = {(e.client, e.op): e.time for e in history.of_type(AcquireInvoked)}
    bins: list[dict[str, Any]] = [{"start": i * width, "acquired": 0, "latencies": []} for i in range(count)]
    for ret in history.of_type(AcquireReturned):
        index = math.floor((ret.time - t0) / width)
        if not 0 <= index < count:
            continue
        if ret.ok:
            bins[index]["acquired"] += 1
        began = invoked.get((ret.client, ret.op))
        if began is not None:
            bins[index]["latencies"].append(ret.time - began)
    out = []
    for b in bins:
        latencies = b.pop("latencies")
        out.append({
            **b,
            "returned": len(latencies),
            "latency_p50": percentile(latencies, 50) if latencies else None,
            "latency_max": max(latencies) if latencies else None,
        })  # fmt: skip
    return out


@dataclass
class ExploreOutcome:
    """A finished explore run: the scenario's result and what was computed from it."""

    config: ExploreConfig
    schedule: Schedule
    result: ScenarioResult
    summary: dict[str, Any]
    violations: list[Violation]
    windows: list[pathlib.Path]

    @property
    def passed(self) -> bool:
        """Whether the run met its set's expectation: none for SAFE, some for UNSAFE."""
        if self.result.error is not None:
            return False
        return not self.violations if self.config.faults.safe else bool(self.violations)


def _summary(
    config: ExploreConfig, schedule: Schedule, result: ScenarioResult, history: History, violations: list[Violation]
) -> dict[str, Any]:
    verdict = result.verdict
    assert verdict is not None
    t0 = float(result.metrics.get("schedule_t0", history.start or 0.0))
    end = t0 + schedule.duration
    width = max(1.0, 2 * config.ttl)
    bins = time_bins(history, t0, end, width)
    acquisitions = verdict.liveness.succeeded
    fault_seconds = sum(
        min(w.end, end) - max(w.start, t0) for w in history.fault_windows() if min(w.end, end) > w.start
    )
    fault_hours = fault_seconds / 3600
    kinds: dict[str, int] = {}
    for v in violations:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
    verdict3, reason = judge(len(violations), result.coverage)
    return {
        "config": config.to_dict(),
        "expected": config.faults.expected,
        "observed": "UNSAFE" if violations else "SAFE",
        "verdict": verdict3,
        "verdict_reason": reason,
        "first_violation": violations[0].time if violations else None,
        "margins": None if result.margins is None else result.margins.to_dict(),
        "coverage": None if result.coverage is None else result.coverage.to_dict(),
        "error": result.error,
        "duration": schedule.duration,
        "faults_scheduled": len(schedule.ops),
        "faults_by_kind": {k: sum(1 for op in schedule.ops if op.kind == k) for k in config.faults.kinds},
        "fault_hours": fault_hours,
        "acquisitions": acquisitions,
        "attempts": verdict.liveness.attempts,
        "violations": len(violations),
        "violations_by_kind": kinds,
        "violations_per_1000_acquisitions": 1000 * len(violations) / acquisitions if acquisitions else None,
        "violations_per_fault_hour": len(violations) / fault_hours if fault_hours else None,
        "availability": sum(1 for b in bins if b["acquired"]) / len(bins),
        "bin_seconds": width,
        "latency_p50": verdict.liveness.latency_p50,
        "latency_p99": verdict.liveness.latency_p99,
        "bins": bins,
        "violation_list": [v.to_dict() for v in violations],
        "metrics": result.metrics,
        "history": None if result.history_path is None else str(result.history_path),
    }


def _panels(
    bins: list[dict[str, Any]], width: float, timeout: float, xlabel: str, violations: Sequence[float] = ()
) -> list[Callable[[Any, float], None]]:
    """The latency and throughput panels (x in seconds from the schedule's start, as
    ``bins`` and ``violations``, the moments marked, are). The latency panel marks the
    acquire timeout: a max that reaches it is an acquire that gave up, not one that took
    that long to succeed."""
    xs = [b["start"] + width / 2 for b in bins]

    def marked(ax: Any) -> None:
        for number, when in enumerate(violations):
            ax.axvline(when, color=FAILURE_COLOUR, linewidth=0.8, alpha=0.6, label=None if number else "violation")

    def latency(ax: Any, origin: float) -> None:
        for key, style, label in (("latency_p50", "-", "p50"), ("latency_max", ":", "max")):
            ys = [math.nan if b[key] is None else b[key] * 1000 for b in bins]
            ax.plot(xs, ys, style, color="#1f77b4", label=label)
        reached = any(b["latency_max"] is not None and b["latency_max"] >= 0.95 * timeout for b in bins)
        note = f"acquire timeout {timeout:g}s" + ("\n(max there: acquires\nthat gave up)" if reached else "")
        ax.axhline(timeout * 1000, color="#7f7f7f", linestyle="--", linewidth=1, label=note)
        marked(ax)
        ax.set_ylabel("acquire ms")
        ax.set_xlabel(xlabel)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        ax.grid(alpha=0.3)

    def throughput(ax: Any, origin: float) -> None:
        ax.bar(xs, [b["acquired"] / width for b in bins], width=width * 0.9, color="#2ca02c", label="acquired")
        marked(ax)
        ax.set_ylabel("acquired/s")
        ax.set_xlabel(xlabel)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        ax.grid(alpha=0.3)

    return [latency, throughput]


def explore(
    config: ExploreConfig,
    out_dir: str | pathlib.Path,
    *,
    schedule: Schedule | None = None,
    progress: Callable[[str], None] | None = None,
    plot: bool = True,
    peers: Peers | None = None,
) -> ExploreOutcome:
    """Play ``schedule`` (default: the one ``config`` generates) and write the files of the
    module docstring to ``out_dir``; ``peers``: the clients are workers of those peer
    clients (:mod:`chaos.trial`), not the library's own."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    schedule = config.schedule() if schedule is None else schedule
    (out / "schedule.json").write_text(json.dumps(schedule.to_dict(), indent=1), encoding="utf-8")
    params = Params(
        seed=config.seed,
        quick=True,
        duration=schedule.duration,
        nodes=config.nodes,
        network=config.network,
        peers=peers,
    )
    result = run_scenario(_scenario(config, schedule), params, out, progress=progress, plot=False)
    assert result.history_path is not None
    history = History.from_dicts(json.loads(result.history_path.read_text(encoding="utf-8"))["events"])
    t0 = float(result.metrics.get("schedule_t0", history.start or 0.0))
    violations = [] if result.verdict is None else find_violations(result.verdict, t0)
    summary = _summary(config, schedule, result, history, violations) if result.verdict is not None else {}
    windows = _save_windows(config, schedule, violations, out / "violations", network=result.network)
    summary["windows"] = [str(p) for p in windows]
    summary["network"] = result.network
    (out / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=False), encoding="utf-8")
    if plot and result.verdict is not None:
        _plot(config, summary, history, t0=t0, violations=violations, out=out)
    return ExploreOutcome(config, schedule, result, summary, violations, windows)


#: The shortest round worth starting: a schedule keeps its last ``2 ttl`` (at least 1 s) free.
_ROUND_LEAST = 3.0


@dataclass(frozen=True)
class Round:
    """What one round of :func:`explore_until` found (the part its goals and verdict need)."""

    coverage: Coverage | None
    acquisitions: int
    violations: int
    summary: Mapping[str, Any]


def _rounds(
    goals: Mapping[str, int], budget: float, round_seconds: float, play: Callable[[int, float], Round]
) -> dict[str, Any]:
    """Play rounds of ``round_seconds`` (the last one shorter) until every goal is reached
    or ``budget`` seconds are spent; ``play(number, seconds)`` plays one. The totals, which
    goal was met, why it stopped and the verdict. Pure but for ``play``."""
    rounds: list[Round] = []
    spent = 0.0
    coverage = Coverage()
    acquisitions = violations = 0
    reached = goals_reached(goals, coverage, acquisitions)
    stopped = "budget spent"
    while budget - spent >= min(_ROUND_LEAST, budget):
        seconds = min(round_seconds, budget - spent)
        found = play(len(rounds) + 1, seconds)
        rounds.append(found)
        spent += seconds
        coverage += found.coverage or Coverage()
        acquisitions += found.acquisitions
        violations += found.violations
        reached = goals_reached(goals, coverage, acquisitions)
        if all(goal["met"] for goal in reached.values()):
            stopped = "goals met"
            break
    verdict, reason = judge_goals(violations, reached)
    return {
        "goals": reached,
        "met": all(goal["met"] for goal in reached.values()),
        "stopped": stopped,
        "budget": budget,
        "round_seconds": round_seconds,
        "seconds_played": spent,
        "rounds": [dict(r.summary) for r in rounds],
        "acquisitions": acquisitions,
        "violations": violations,
        "coverage": coverage.to_dict(),
        "verdict": verdict,
        "verdict_reason": reason,
    }


def explore_until(
    config: ExploreConfig,
    goals: Mapping[str, int],
    out_dir: str | pathlib.Path,
    *,
    round_seconds: float = 30.0,
    progress: Callable[[str], None] | None = None,
    plot: bool = True,
) -> tuple[dict[str, Any], list[ExploreOutcome]]:
    """Explore in rounds until every goal (:func:`chaos.margins.parse_goals`) is reached or
    ``config.duration`` seconds of rounds are played: round N (in ``out_dir/round-N``) is an
    :func:`explore` run of its own, with seed ``config.seed + N - 1``, so each plays a new
    schedule. Writes and returns the summary of them all (``summary.json``: the goals, each
    with its target, the count reached and whether it is met; why it stopped; the verdict),
    and the rounds' outcomes."""
    if not (math.isfinite(round_seconds) and round_seconds >= _ROUND_LEAST):
        raise ValueError(f"round_seconds must be at least {_ROUND_LEAST:g}, not {round_seconds!r}")
    out = pathlib.Path(out_dir)
    outcomes: list[ExploreOutcome] = []

    def play(number: int, seconds: float) -> Round:
        played = dataclasses.replace(config, seed=config.seed + number - 1, duration=seconds)
        outcome = explore(played, out / f"round-{number}", progress=progress, plot=plot)
        outcomes.append(outcome)
        summary = outcome.summary
        brief = {
            "round": number,
            "seed": played.seed,
            "seconds": seconds,
            "out": str(out / f"round-{number}"),
            **{key: summary.get(key) for key in ("acquisitions", "violations", "verdict", "error")},
        }
        return Round(outcome.result.coverage, int(summary.get("acquisitions") or 0), len(outcome.violations), brief)

    document = {"config": config.to_dict(), **_rounds(goals, config.duration, round_seconds, play)}
    document["network"] = outcomes[-1].summary.get("network") if outcomes else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(document, indent=1, allow_nan=False), encoding="utf-8")
    return document, outcomes


_XLABEL = "seconds since the schedule's start"


def _plot(
    config: ExploreConfig,
    summary: dict[str, Any],
    history: History,
    *,
    t0: float,
    violations: Sequence[Violation],
    out: pathlib.Path,
) -> None:
    """``timeline.png`` and ``over-time.png`` (:func:`_figures`)."""
    timeline, over_time = _figures(config, summary, history, t0=t0, violations=violations)
    timeline.savefig(str(out / "timeline.png"), format="png")
    over_time.savefig(str(out / "over-time.png"), format="png")


def _figures(
    config: ExploreConfig,
    summary: dict[str, Any],
    history: History,
    *,
    t0: float,
    violations: Sequence[Violation],
    dpi: float = 80,
) -> tuple[Any, Any]:
    """The timeline: at most :data:`_PLOT_SPAN` seconds (from a little before the first
    violation, else from the start), holders by client slot, timed from the schedule's
    start as the summary is; and latency and throughput over the whole run, each panel
    once. Both titled with the run's verdict."""
    # matplotlib takes a second to import: only when a picture is wanted.
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    from .timeline import timeline_figure, verdict_title  # noqa: PLC0415

    judgement = judge_run(config.faults.expected, "UNSAFE" if violations else "SAFE", error=summary.get("error"))
    start = max(0.0, violations[0].time - _PLOT_SPAN / 4) if violations else 0.0
    # Judged whole, drawn in part: a window's own check would miss what came before it.
    renamed = _by_slot(history)
    shown = _between(renamed, t0 + start, t0 + start + _PLOT_SPAN)
    verdict = _within(check_all(renamed), t0 + start, t0 + start + _PLOT_SPAN)
    width = summary["bin_seconds"]
    # The title counts the run's violations, the footer names those of the window shown.
    listed = [v.text for v in violations if start <= v.time <= start + _PLOT_SPAN]
    title = f"explore {config.faults.name} (seed {config.seed}): {len(violations)} violations"
    if config.duration > _PLOT_SPAN:
        title += f"; {start:.0f}-{start + _PLOT_SPAN:.0f}s of {config.duration:g}s shown, with {len(listed)}"
    timeline = timeline_figure(
        shown, verdict, judgement=judgement, title=title, origin=t0, footer=listed, xlabel=_XLABEL, dpi=dpi
    )
    figure = Figure(figsize=(11, 5), dpi=dpi)
    FigureCanvasAgg(figure)
    latency, throughput = _panels(
        summary["bins"], width, config.acquire_timeout, _XLABEL, violations=[v.time for v in violations]
    )
    first = figure.add_subplot(2, 1, 1)
    latency(first, t0)
    throughput(figure.add_subplot(2, 1, 2, sharex=first), t0)
    first.set_xlim(0, max(config.duration, len(summary["bins"]) * width))
    verdict_title(
        figure, judgement, f"explore {config.faults.name} (seed {config.seed}): acquire latency and throughput per "
        f"{width:g}s, {len(violations)} violations",
    )  # fmt: skip
    figure.tight_layout()
    return timeline, figure


def _within(verdict: Verdict, start: float, end: float) -> Verdict:
    """``verdict`` with only the violations between ``start`` and ``end``, for a picture of
    that window (a zoom on one outside it would show nothing)."""

    def inside(when: float) -> bool:
        return start <= when <= end

    lost = []
    for report in verdict.lost_updates:
        kept = [(w, by) for w, by in zip(report.lost_writes, report.overwritten_by, strict=True) if inside(w.time)]
        lost.append(
            dataclasses.replace(
                report, lost_writes=tuple(w for w, _ in kept), overwritten_by=tuple(by for _, by in kept)
            )
        )
    return dataclasses.replace(
        verdict,
        overlaps=tuple(o for o in verdict.overlaps if inside(o.start) and o.end <= end),
        lost_updates=tuple(lost),
        overstated=tuple(v for v in verdict.overstated if inside(v.bound)),
    )


def _between(history: History, start: float, end: float) -> History:
    return History(e for e in history if start <= e.time <= end)


def _by_slot(history: History) -> History:
    """The history with each replacement client (``c1.3``) named by its slot (``c1``), for
    a picture with one colour per slot rather than per process. Its op numbers move by a
    million per generation, so that ``(client, op)`` still names one operation."""

    def renamed(event: Event) -> Event:
        client = getattr(event, "client", None)
        if not isinstance(client, str) or "." not in client:
            return event
        slot, generation = client.split(".", 1)
        op = getattr(event, "op", None)
        changes: dict[str, Any] = {"client": slot}
        if isinstance(op, int):
            changes["op"] = op + int(generation) * 1_000_000
        return dataclasses.replace(event, **changes)

    return History(renamed(e) for e in history)


def _save_windows(
    config: ExploreConfig,
    schedule: Schedule,
    violations: Sequence[Violation],
    directory: pathlib.Path,
    *,
    network: NetworkKind | None,
) -> list[pathlib.Path]:
    """One file per violation: the schedule of the window around it, to replay, and the
    network its faults acted on (None: it had no network faults)."""
    paths: list[pathlib.Path] = []
    for number, violation in enumerate(violations, start=1):
        start = violation.time - _WINDOW_TTLS * config.ttl - _WINDOW_EXTRA
        window = schedule.window(start, violation.time + _WINDOW_AFTER)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"violation-{number}.json"
        document = {
            "config": config.to_dict(),
            "violation": violation.to_dict(),
            "window": [max(0.0, start), violation.time + _WINDOW_AFTER],
            "network": network,
            "schedule": window.to_dict(),
        }
        path.write_text(json.dumps(document, indent=1), encoding="utf-8")
        paths.append(path)
    return paths


def replay(
    path: str | pathlib.Path,
    out_dir: str | pathlib.Path,
    *,
    progress: Callable[[str], None] | None = None,
    plot: bool = True,
    ops: Sequence[FaultOp] | None = None,
) -> tuple[ExploreOutcome, bool, str]:
    """Play the window saved in ``path`` again, on the network it was found on; returns the
    outcome, whether a violation of the saved kind happened again, and that kind. ``ops``,
    when given, is played instead of the window's ops (a subset of them, as
    :mod:`chaos.shrink` tries), for the window's whole length. Raises ValueError when that
    network is the kernel's and this machine cannot make it (a replay elsewhere would not be
    the same run)."""
    document = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    config = ExploreConfig.from_dict(document["config"])
    schedule = Schedule.from_dict(document["schedule"])
    if ops is not None:
        schedule = dataclasses.replace(schedule, ops=tuple(ops))
    network = cast(NetworkKind | None, document.get("network")) or config.network
    if network == "kernel" and (reason := unavailable()) is not None:
        raise ValueError(f"the violation was found on the kernel network, which this machine cannot make: {reason}")
    config = dataclasses.replace(config, duration=schedule.duration, network=network)
    kind = str(document["violation"]["kind"])
    outcome = explore(config, out_dir, schedule=schedule, progress=progress, plot=plot)
    return outcome, any(v.kind == kind for v in outcome.violations), kind
