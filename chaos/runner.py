"""Runs one scenario: builds its cluster, plays its script, judges the history, writes files.

A scenario (:class:`Scenario`) is a script over a :class:`Run`: the run gives it client
processes, a :class:`~chaos.nemesis.Nemesis`, a seeded random generator and the timing
parameters of the mode (quick or full). The script drives clients and faults; everything
they do lands in the history. Afterwards :func:`run_scenario` merges the histories of the
harness and of every client, runs :func:`chaos.checkers.check_all` over them, and compares:

* the *observed* verdict is UNSAFE if any checker found a violation, else SAFE;
* the scenario *passes* when that equals the verdict theory predicts, the violation kinds
  expected of an UNSAFE scenario were all found, and the scenario's own checks held (a
  liveness property, a bound on latency, no keys left over).

A mismatch either way means the lock or the harness is broken: a SAFE scenario with a
violation, or an UNSAFE one whose violation the harness failed to produce.

Files, in ``out_dir``: ``<NN>-<name>.json`` (the whole history, the verdict, the checks and
metrics) and ``<NN>-<name>.png`` (the timeline, :mod:`chaos.timeline`).
"""

from __future__ import annotations

import itertools
import json
import pathlib
import random
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import redis

from redlock import quorum_size
from redlock.servers import Persistence

from .checkers import Verdict, check_all
from .clients import ClientProcess
from .cluster import Cluster
from .history import FaultWindow, History, Recorder, merge_files
from .judgement import Judgement, judge_run
from .margins import Coverage, Margins, measure_coverage, measure_margins
from .nemesis import Nemesis
from .netns import NetworkKind, choose_network
from .observer import Observer
from .peer_client import Peers
from .workload import RESOURCE_PREFIX, direct_client

__all__ = [
    "Check",
    "Expected",
    "Params",
    "Run",
    "Scenario",
    "ScenarioResult",
    "fault_window",
    "leftover_keys",
    "partitions",
    "run_scenario",
]

Expected = Literal["SAFE", "UNSAFE"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Params:
    """How to run: the seed, quick (CI) or full, loop duration and number of masters, and
    the broken client every client runs (``variant``, for the self-test; None: the real one).

    The timing constants of each mode live here, so that every scenario scales together.
    """

    seed: int = 1
    quick: bool = True
    duration: float | None = None
    nodes: int = 5
    variant: str | None = None
    #: Where network faults act: "kernel" (namespaces and nftables) or "proxy"; scenarios
    #: that delay or hold packets run on the proxy whatever this says.
    network: NetworkKind = "proxy"
    #: Record the masters' ground truth (:mod:`chaos.observer`): margins and coverage.
    observe: bool = True
    #: Run every client as a worker of these peer clients (:mod:`chaos.trial`); None: the
    #: library's own client processes.
    peers: Peers | None = None

    @property
    def loop_duration(self) -> float:
        """How long free-running workloads run (``--duration``)."""
        if self.duration is not None:
            return self.duration
        return 4.0 if self.quick else 20.0

    @property
    def loop_ttl(self) -> float:
        """The TTL of free-running workloads (a killed majority stays down longer)."""
        return 1.0 if self.quick else 2.0

    @property
    def ttl(self) -> float:
        """The TTL of scripted scenarios (those that wait for expiry wait about this)."""
        return 2.0 if self.quick else 5.0

    @property
    def clock_ttl(self) -> float:
        """The TTL for clock rates: the unsafe window of x1.05 is ~4 % of it."""
        return 5.0 if self.quick else 10.0

    @property
    def rounds(self) -> int:
        """Rounds of simultaneous acquires in the split-vote scenario."""
        return 4 if self.quick else 15

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"seed": self.seed, "quick": self.quick, "duration": self.loop_duration}
        data["nodes"] = self.nodes
        data["network"] = self.network
        if self.variant is not None:
            data["variant"] = self.variant
        if not self.observe:
            data["observe"] = False
        if self.peers is not None:
            data["peers"] = self.peers.to_dict()
        return data


@dataclass(frozen=True)
class Check:
    """One property a scenario asserts beyond its verdict."""

    text: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Scenario:
    """One entry of the catalogue: a script and the verdict theory predicts for it."""

    number: str
    name: str
    title: str
    expected: Expected
    script: Callable[[Run], None]
    #: For UNSAFE scenarios: the violation kinds the script must produce.
    kinds: tuple[str, ...] = ()
    persistence: Persistence = "none"
    #: libfaketime on the masters both partitions share.
    clocked: bool = False
    #: libfaketime on every master (randomized schedules move any master's clock).
    all_clocked: bool = False
    #: A disk model under every master (chaos.powerloss), for power cuts.
    power_loss: bool = False
    proxies: bool = False
    #: Its network faults delay or hold packets, which only the proxy can (no netem here).
    delays: bool = False
    #: Its network fault needs the kernel network (a cut that TCP itself retransmits
    #: across); where namespaces cannot be made, it runs into an error that says why.
    kernel: bool = False
    #: Uses --duration (a free-running workload) rather than a fixed script.
    loop: bool = False
    #: Check afterwards that no lock key is left on any master.
    leftovers: bool = False
    why: str = ""

    @property
    def slug(self) -> str:
        """``05-restart-empty``, ``11a-clock-fast``: file names that sort in catalogue order."""
        digits = "".join(itertools.takewhile(str.isdigit, self.number))
        number = f"{int(digits):02d}{self.number[len(digits) :]}" if digits else self.number
        return f"{number}-{self.name}"


class Run:
    """What a scenario script works with: clients, nemesis, parameters, checks."""

    def __init__(
        self,
        scenario: Scenario,
        params: Params,
        cluster: Cluster,
        nemesis: Nemesis,
        *,
        recorder: Recorder,
        progress: Progress,
    ) -> None:
        self.scenario = scenario
        self.params = params
        self.cluster = cluster
        self.nemesis = nemesis
        self.recorder = recorder
        self.rng = random.Random(f"{params.seed}:{scenario.name}")
        self._progress = progress
        self.checks: list[Check] = []
        self.metrics: dict[str, Any] = {}
        #: Checks to run on the judged history (:meth:`after`).
        self.post_checks: list[Callable[[History, Verdict], None]] = []
        self.quorum = quorum_size(params.nodes)
        self.left, self.right, self.overlap = partitions(params.nodes)
        #: Follows grants and samples the masters (:mod:`chaos.observer`), if observing.
        self.observer: Observer | None = None

    # -- clients --

    def clients(
        self,
        names: Sequence[str],
        *,
        fencing: bool = False,
        wake_on_release: bool = False,
        node_timeout: float = 0.1,
        retry_delay: float = 0.2,
        unavailable_timeout: float = 10.0,
        clock_rates: dict[str, float] | None = None,
        clock_drift_factor: float | None = None,
    ) -> list[ClientProcess]:
        """Start client processes, connected and warmed up, each with its own proxies
        when the scenario has them; ``clock_rates`` runs some clients' clocks off (each
        recorded as a fault lasting the whole run)."""
        self.note(f"starting clients {', '.join(names)}")
        options: dict[str, Any] = {
            "node_timeout": node_timeout,
            "retry_delay": retry_delay,
            "unavailable_timeout": unavailable_timeout,
            "wake_on_release": wake_on_release,
        }
        if clock_drift_factor is not None:
            options["clock_drift_factor"] = clock_drift_factor
        for name, rate in (clock_rates or {}).items():
            self.nemesis.client_clock(name, rate)
        return self.cluster.add_clients(
            names,
            redlock_options=options,
            fencing=fencing,
            seed=self.params.seed,
            variant=self.params.variant,
            clock_rates=clock_rates,
            peers=self.params.peers,
        )

    def partition_k3(self, c1: str = "c1", c2: str = "c2") -> None:
        """Client ``c1`` reaches A,B,C only and ``c2`` C,D,E only (for 5 masters)."""
        self.nemesis.partition(c1, self.left)
        self.nemesis.partition(c2, self.right)

    # -- reporting --

    def note(self, message: str) -> None:
        self._progress(message)

    def expect(self, passed: bool, text: str, detail: str = "") -> bool:
        """Record a check of the scenario; returns ``passed``."""
        self.checks.append(Check(text, bool(passed), detail))
        if not passed:
            self.note(f"check failed: {text}{f' ({detail})' if detail else ''}")
        return bool(passed)

    def after(self, check: Callable[[History, Verdict], None]) -> None:
        """Run ``check(history, verdict)`` once the run is over and judged."""
        self.post_checks.append(check)

    def metric(self, key: str, value: Any) -> None:
        self.metrics[key] = value

    # -- time --

    @staticmethod
    def sleep(seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    @staticmethod
    def sleep_until(when: float) -> None:
        Run.sleep(when - time.monotonic())

    def keys_on(self, index: int) -> list[str]:
        """The lock keys on master ``index`` now (fencing counters aside)."""
        return _lock_keys(self.cluster.direct(index))

    def wait_key_gone(self, index: int, key: str, timeout: float) -> float | None:
        """Poll master ``index`` directly until ``key`` is gone; when it was seen gone, or
        None on timeout. Sleeps half the key's remaining TTL between looks, so it sees the
        expiry within a millisecond or two without hammering the master."""
        client = self.cluster.direct(index)
        deadline = time.monotonic() + timeout
        while True:
            left = int(client.pttl(key))
            now = time.monotonic()
            if left == -2:
                return now
            if now >= deadline:
                return None
            pause = left / 2000.0 if left > 0 else 0.01
            self.sleep(min(max(pause, 0.001), 0.5, deadline - now))


def partitions(nodes: int) -> tuple[list[int], list[int], list[int]]:
    """The partitions of K3/K4: client 1 reaches the first majority of masters, client 2
    the last; they share the masters in the third list (C, of A..E)."""
    quorum = quorum_size(nodes)
    left = list(range(quorum))
    right = list(range(nodes - quorum, nodes))
    return left, right, [i for i in left if i in right]


@dataclass
class ScenarioResult:
    """How one scenario ran and what was found."""

    scenario: Scenario
    params: Params
    observed: str
    verdict: Verdict | None
    checks: list[Check] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    elapsed: float = 0.0
    history_path: pathlib.Path | None = None
    plot_path: pathlib.Path | None = None
    error: str | None = None
    events: int = 0
    #: Where its network faults acted: "kernel", "proxy", or None (it had none).
    network: NetworkKind | None = None
    #: From the masters' ground truth (None when not observed).
    margins: Margins | None = None
    coverage: Coverage | None = None

    @property
    def expected(self) -> str:
        return self.scenario.expected

    @property
    def passed(self) -> bool:
        return self.error is None and self.observed == self.expected and all(c.passed for c in self.checks)

    @property
    def judgement(self) -> Judgement:
        """Its verdict against its expectation in one word, its own checks counted."""
        return judge_run(
            self.expected, self.observed, error=self.error, checks_passed=all(c.passed for c in self.checks)
        )

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.name,
            "number": self.scenario.number,
            "title": self.scenario.title,
            "expected": self.expected,
            "observed": self.observed,
            "passed": self.passed,
            "params": self.params.to_dict(),
            "network": self.network,
            "margins": None if self.margins is None else self.margins.to_dict(),
            "coverage": None if self.coverage is None else self.coverage.to_dict(),
            "elapsed": self.elapsed,
            "checks": [c.to_dict() for c in self.checks],
            "metrics": self.metrics,
            "error": self.error,
            "events": self.events,
            "history": None if self.history_path is None else str(self.history_path),
            "plot": None if self.plot_path is None else str(self.plot_path),
        }


def _final_values(cluster: Cluster) -> dict[str, int]:
    """The counters on the resource server now, by resource key."""
    client = direct_client(cluster.resource_url)
    try:
        values: dict[str, int] = {}
        for raw in client.scan_iter(match=f"{RESOURCE_PREFIX}*"):
            key = raw.decode()
            if key.endswith((":seq", ":fencing-token")):
                continue
            value = client.get(key)
            if value is not None:
                values[key] = int(value)
        return values
    finally:
        client.close()


def _lock_keys(client: redis.Redis) -> list[str]:
    return sorted(
        k.decode() for k in client.scan_iter() if not k.startswith((b"redlock-quorum:fence:", b"redlock:fence:"))
    )


def leftover_keys(cluster: Cluster) -> dict[str, list[str]]:
    """Keys still on the masters that are running, other than fencing counters, by master."""
    found: dict[str, list[str]] = {}
    for index in range(cluster.nodes):
        master = cluster.master(index)
        if not master.running or master.paused:
            continue
        client = direct_client(master.url)
        try:
            keys = _lock_keys(client)
        finally:
            client.close()
        if keys:
            found[cluster.label(index)] = keys
    return found


def run_scenario(
    scenario: Scenario,
    params: Params,
    out_dir: str | pathlib.Path,
    *,
    progress: Progress | None = None,
    plot: bool = True,
) -> ScenarioResult:
    """Run ``scenario`` once; every process it starts is stopped before this returns
    (also when it raises, e.g. KeyboardInterrupt)."""
    say: Progress = progress or (lambda _message: None)
    out = pathlib.Path(out_dir)
    if params.nodes < 3:
        raise ValueError(f"a scenario needs at least 3 masters, not {params.nodes}")
    started = time.monotonic()
    recorder = Recorder(source="nemesis")
    error: str | None = None
    with Cluster(
        params.nodes,
        persistence=scenario.persistence,
        clocked=range(params.nodes)
        if scenario.all_clocked
        else partitions(params.nodes)[2]
        if scenario.clocked
        else (),
        proxies=scenario.proxies,
        # (A kernel scenario on a machine without namespaces runs on the proxy, where its
        # fault raises with the reason.)
        network="proxy" if scenario.delays else choose_network("kernel")[0] if scenario.kernel else params.network,
        power_loss=scenario.power_loss,
        progress=say,
    ) as cluster:
        nemesis = Nemesis(cluster, recorder, progress=say)
        run = Run(scenario, params, cluster, nemesis, recorder=recorder, progress=say)
        if params.observe:
            urls = [cluster.master(i).url for i in range(params.nodes)]
            run.observer = Observer(urls, recorder, cluster.history_paths)
            run.observer.start()
        try:
            try:
                scenario.script(run)
            finally:
                nemesis.end_all()
        except Exception:
            error = traceback.format_exc()
            say(f"error: {error.strip().splitlines()[-1]}")
        # Clients flush their histories and close their connections before the masters stop.
        cluster.stop_clients()
        if run.observer is not None:
            run.observer.stop()
        final = _final_values(cluster)
        clients = merge_files(cluster.history_paths())
        if scenario.leftovers:
            # Healed links deliver what they held; let the masters apply it first.
            run.sleep(0.3)
            left = leftover_keys(cluster)
            run.checks.append(Check("no lock key left on any master", not left, json.dumps(left) if left else ""))
    history = History([*recorder.events, *clients.events])
    verdict = check_all(history, final=final)
    observed = "SAFE" if verdict.safe else "UNSAFE"
    for check in run.post_checks:
        try:
            check(history, verdict)
        except Exception:
            error = error or traceback.format_exc()
    if scenario.expected == "UNSAFE":
        for kind in scenario.kinds:
            run.checks.append(Check(f"a {kind} violation is found", kind in verdict.kinds))
    result = ScenarioResult(
        scenario=scenario,
        params=params,
        observed=observed if error is None else "ERROR",
        verdict=verdict,
        checks=run.checks,
        metrics=run.metrics,
        error=error,
        events=len(history),
        network=cluster.network_kind,
    )
    if params.observe:
        result.margins = measure_margins(history, params.nodes)
        result.coverage = measure_coverage(history, params.nodes, result.margins)
    # Made once there is something to write: a run that cannot start leaves no empty dir.
    out.mkdir(parents=True, exist_ok=True)
    result.history_path = out / f"{scenario.slug}.json"
    try:
        if plot:
            # matplotlib takes about a second to import: only when a picture is wanted.
            from .timeline import plot_timeline  # noqa: PLC0415

            picture = out / f"{scenario.slug}.png"
            plot_timeline(history, verdict, picture, judgement=result.judgement, title=_plot_title(result))
            result.plot_path = picture
    finally:
        # Written last, so that it says what summary.json says (the time, the picture), and
        # written even when the picture fails.
        result.elapsed = time.monotonic() - started
        _write_history(result, history)
    return result


def _plot_title(result: ScenarioResult) -> str:
    s = result.scenario
    variant = result.params.variant
    broken = f", with the broken client {variant}" if variant else ""
    return f"{s.number}. {s.name} (seed {result.params.seed}{broken})"


def _write_history(result: ScenarioResult, history: History) -> None:
    assert result.history_path is not None
    verdict = result.verdict
    document = {
        **result.to_dict(),
        "verdict": None if verdict is None else verdict.to_dict(),
        "tenures": [t.to_dict() for t in history.tenures()],
        "faults": [w.to_dict() for w in history.fault_windows()],
        "events": history.to_dicts(),
    }
    result.history_path.write_text(json.dumps(document, indent=1, allow_nan=False), encoding="utf-8")


def fault_window(history: History, fault: str) -> FaultWindow | None:
    """The window of the fault with id ``fault``."""
    for window in history.fault_windows():
        if window.fault == fault:
            return window
    return None
