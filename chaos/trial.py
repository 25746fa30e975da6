"""``python -m chaos trial``: any Redlock client through the catalogue and explore, judged alike.

A trial runs the catalogue's scenarios that an arbitrary client can play, and explore's
randomized schedules by fault family, with every client of the run a worker of the peers
protocol (:mod:`chaos.peer_client`): the same cluster, faults, histories and checkers as the
library's own runs, and the same expected verdicts. A mixed trial (``--with``) puts two
clients on the same masters and names at once, alternating (c1 the first, c2 the second,
...), checked as one history.

Which scenarios (:data:`SCENARIOS`): those built from plain acquire, hold, read-modify-write,
extend and release, under faults on masters, clocks, the network and client pauses.
:data:`EXCLUDED` says why each of the others is left out: most are this library's features
(fencing, lock_delay, semaphores, multi-name locks, shared and reentrant locks, elections,
auto-extension, read-write locks, the hand-over), two fault a client's own clock through
libfaketime (the harness maps a faked clock onto the history for its own worker only), and
one stops a client by a tap on this library's wire format. A client whose keys carry a
prefix (pottery's ``redlock:``) takes the scenario's names under it, so the scenarios that
look at the lock's key on the masters by its bare name (:data:`KEYED`) are not run for it.

Settings: the ttl and the acquire timeout are the scenario's (explore: ttl 1 s, timeout 2
ttl) for every client. ``--request-timeout`` and ``--retry-delay`` give every client the
same bound on each request to a master and the same mean pause between attempts, each
where the client has a setting for it (``peers.workers.Settings``); without them, and for
what a client cannot be given, every client, this library too, runs with its own defaults.
The drift factor is always each client's. The output's ``settings`` says what every client
ran with (the workers' greetings), and the adapters' ``claims`` what the clients do.

Figures, per client and fault family (:data:`FAMILIES`): violations per 1,000 acquisitions
with the Wilson 95 % interval (violations counted as explore counts them, one per overlap,
lost increment, late extend or overstated validity), availability as grants per second and
the share of time bins with a grant, and the time from a master's return after a crash or
restart to the next grant. Files, under ``--out`` (``chaos-trial/``): a directory per
client (or pair) with each scenario's history and each family's explore files, and
``trial.json`` and ``trial.md``, the comparison.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redlock.servers import LocalMasters

from .explore import ExploreConfig, explore
from .history import AcquireReturned, History
from .peer_client import ANSWER_GRACE, Peers, peers_tier
from .runner import Params, ScenarioResult, run_scenario
from .scenarios import CATALOGUE, find
from .schedule import FAULT_SETS, FaultSet, resolve_fault_set
from .sweep import wilson_interval

__all__ = [
    "EXCLUDED",
    "FAMILIES",
    "KEYED",
    "SCENARIOS",
    "Outcome",
    "clients",
    "greet",
    "recovery_times",
    "run_trial",
    "to_markdown",
    "worse",
]

Progress = Callable[[str], None]

#: The catalogue's scenarios a trial runs, by number: what each shows for any client.
SCENARIOS: dict[str, str] = {
    "1": "no faults: every client acquires, nothing overlaps",
    "2": "a killed minority: safe and available",
    "3": "a killed majority: safe, unavailable until it is back",
    "4": "a paused minority: safe; a client without per-master timeouts waits",
    "5": "K4, a master restarted empty at once: unsafe for every Redlock",
    "6": "K4 with the restart delayed past the ttl: safe",
    "7a": "K4 with appendfsync always: safe",
    "7b": "K4 with appendfsync everysec, after a crash (not a power loss): safe",
    "8a": "a power loss with appendfsync always: safe",
    "8b": "a power loss with appendfsync everysec: unsafe",
    "9": "K3, a master clock jumps forward: unsafe",
    "10": "a master clock steps backward: safe",
    "11a": "a master clock running x1.05: unsafe",
    "11b": "a master clock running x1.005, within the drift allowance: safe",
    "13a": "K1, the holder paused past its validity, then writes: unsafe without fencing",
    "14": "latency and blackholes on links: safe",
    "15": "three clients split the vote: safe",
    "16": "an expired holder extends after another's whole tenure: the extend must fail",
    "17": "an expired holder releases while another holds: the release must leave it",
    "18": "every reply to c1 300 ms late: the validity must count the wait",
    "19": "a grant by a minority only: rolled back",
    "26a": "-OOM replies from a majority: refusals, never grants",
    "26b": "-READONLY replies: refusals",
    "26c": "-MISCONF replies: refusals",
    "26d": "-BUSY replies: refusals",
    "26e": "-LOADING replies: refusals",
    "29": "a master evicts the key: unsafe",
    "32": "K4b, a restart 'after the ttl' on a fast clock: unsafe",
    "33a": "K2, the holder's write delayed past its validity: unsafe without fencing",
    "34": "a replica promoted without the key: unsafe",
    "35": "fsync always, but the master boots with its clock stepped forward: unsafe",
}

#: The catalogue's other scenarios, and why a trial leaves each out.
EXCLUDED: dict[str, str] = {
    "12": "stops the client by a tap on this library's wire format (a SET of the name to every master before any "
    "reply is read): clients that acquire by a script, or one master after another, never trigger it",
    "13b": "fencing tokens: this library's feature",
    "13c": "lock_delay: this library's feature",
    "13d": "lock_delay: this library's feature",
    "20a": "a client's own clock under libfaketime: the harness maps a faked clock onto the history for its own "
    "worker only",
    "20b": "a client's own clock under libfaketime (as 20a)",
    "21a": "a semaphore: this library's feature",
    "21b": "a semaphore: this library's feature",
    "22": "a lock on several names: this library's feature",
    "23": "leader election: this library's feature",
    "24a": "threads sharing one Lock object: this library's feature",
    "24b": "reentrant shared locks: this library's feature",
    "25a": "an operator's force-release (redlock release --force): this library's command",
    "25b": "force-release with fencing: this library's features",
    "27": "the election runner: this library's feature",
    "28": "auto-extension: this library's feature",
    "30a": "a read-write lock: this library's feature",
    "30b": "a read-write lock: this library's feature",
    "31": "the hand-over to a waiter: this library's feature",
    "33b": "fencing tokens: this library's feature",
    "36a": "auto-extension: this library's feature",
    "36b": "auto-extension with fencing: this library's features",
}

#: Scenarios that look at the lock's key on the masters by the scenario's bare name (wait
#: for it to expire, evict it, or a tap that matches it): not run for a client whose keys
#: carry a prefix.
KEYED = frozenset({"7a", "7b", "8a", "8b", "11a", "11b", "18", "29"})

#: A short set for ``--all``: one scenario of each kind of fault a trial covers.
QUICK_SCENARIOS = ("1", "5", "6", "9", "13a", "16", "17")


def _family(name: str, kinds: str) -> FaultSet:
    # Without fencing (a peer has none): a safe family keeps the safe magnitudes only.
    return dataclasses.replace(resolve_fault_set(kinds), name=name, fencing=False)


#: Explore's fault families of a trial: name -> the fault set played (no fencing anywhere).
FAMILIES: dict[str, FaultSet] = {
    "masters": _family("masters", "kill,pause-master"),
    "network": _family("network", "link-delay,blackhole,one-way"),
    "restart": dataclasses.replace(FAULT_SETS["unsafe-restart"], name="restart"),
    "clock": dataclasses.replace(FAULT_SETS["unsafe-clock"], name="clock"),
    "pause": dataclasses.replace(FAULT_SETS["unsafe-pause"], name="pause"),
}

#: The faults after which a master comes back: the recovery time counts from their end.
_RETURNS = frozenset({"kill", "crash-restart", "power-loss"})

#: Explore's workload for every client: the ttl, and its acquire timeout (2 ttl).
EXPLORE_TTL = 1.0


def clients() -> tuple[str, ...]:
    """Every client a trial can put a worker of on masters (``peers.install.CLIENTS``)."""
    return tuple(peers_tier().install.CLIENTS)


def _check_known(numbers: Sequence[str]) -> None:
    for number in numbers:
        if number in EXCLUDED:
            raise ValueError(f"scenarios: {number} is not played in a trial: {EXCLUDED[number]}")
        if number not in SCENARIOS:
            raise ValueError(f"scenarios: no scenario {number!r}; a trial plays {', '.join(SCENARIOS)}")


def greet(
    clients: Sequence[str], directory: pathlib.Path | None = None, settings: Any = None
) -> dict[str, dict[str, Any]]:
    """Each client's greeting (version, supports, claims, key_prefix, wraps, and the
    settings it runs with, given ``settings``), from a worker started on a master of its
    own, or ``{"error": why}`` where it cannot be installed or started."""
    tier = peers_tier()
    found: dict[str, dict[str, Any]] = {}
    with LocalMasters(1, owner_only=False) as master:
        address = f"{master[0].host}:{master[0].port}"
        for client in dict.fromkeys(clients):
            try:
                with tier.workers.start(client, [address], directory, settings) as worker:
                    found[client] = worker.greeting
            except (tier.install.InstallFailed, tier.workers.WorkerError, OSError) as exc:
                found[client] = {"error": str(exc)}
    return found


def key_prefix(greetings: dict[str, dict[str, Any]], clients: Sequence[str]) -> str:
    """The prefix a run's names take: the one its clients' keys carry, if any; clients whose
    keys carry different ones cannot share a name."""
    prefixes = {str(greetings[c].get("key_prefix") or "") for c in clients} - {""}
    if len(prefixes) > 1:
        raise ValueError(f"clients {list(clients)}: their keys carry different prefixes {sorted(prefixes)}")
    return next(iter(prefixes), "")


def recovery_times(history: History) -> list[float]:
    """For each master's return from a crash, a kill or a power loss: seconds from its
    return to the next grant, by any client (a return with no grant after it is left out)."""
    grants = sorted(e.time for e in history.of_type(AcquireReturned) if e.ok)
    times: list[float] = []
    for window in history.fault_windows():
        if window.kind not in _RETURNS or window.end == float("inf"):
            continue
        after = [g for g in grants if g >= window.end]
        if after:
            times.append(after[0] - window.end)
    return times


def rate(violations: int, acquisitions: int) -> dict[str, float | None]:
    """Violations per 1,000 acquisitions, with the Wilson 95 % interval (None without any)."""
    if acquisitions == 0:
        return {"per_1000": None, "low": None, "high": None}
    low, high = wilson_interval(min(violations, acquisitions), acquisitions)
    return {"per_1000": 1000 * violations / acquisitions, "low": 1000 * low, "high": 1000 * high}


#: The line that opens a Python traceback.
TRACEBACK = "Traceback (most recent call last):"


def error_headline(error: str) -> str:
    """The line of a run's error that says what went wrong: the exception line of its last
    traceback, or its last line when it is no traceback."""
    lines = error.strip().splitlines()
    if TRACEBACK in lines:
        # Not the text's last line: a hung worker's exception carries the tail of the
        # worker's stderr (a Node stack, say) after its message.
        after = lines[len(lines) - lines[::-1].index(TRACEBACK) :]
        raised = [line for line in after if line and not line[0].isspace()]
        if raised:
            return raised[0]
    return lines[-1] if lines else ""


def _scenario_row(result: ScenarioResult) -> dict[str, Any]:
    verdict = result.verdict
    return {
        "number": result.scenario.number,
        "scenario": result.scenario.name,
        "expected": result.expected,
        # The history is judged also when the script stopped on an error (a client that hung).
        "observed": result.observed if verdict is None else "SAFE" if verdict.safe else "UNSAFE",
        "matches": verdict is not None and ("SAFE" if verdict.safe else "UNSAFE") == result.expected,
        "checks_failed": [c.text for c in result.failed_checks],
        "violations": [] if verdict is None else verdict.violations,
        "kinds": [] if verdict is None else list(verdict.kinds),
        "acquired": None if verdict is None else verdict.liveness.succeeded,
        "attempts": None if verdict is None else verdict.liveness.attempts,
        "error": None if result.error is None else error_headline(result.error),
        "seconds": round(result.elapsed, 1),
        "history": None if result.history_path is None else str(result.history_path),
    }


def _explore_row(family: str, config: ExploreConfig, summary: dict[str, Any], history: History) -> dict[str, Any]:
    acquisitions = int(summary.get("acquisitions") or 0)
    violations = int(summary.get("violations") or 0)
    recoveries = recovery_times(history)
    return {
        "family": family,
        "kinds": list(config.faults.kinds),
        "expected": config.faults.expected,
        "duration": config.duration,
        "acquisitions": acquisitions,
        "attempts": summary.get("attempts"),
        "violations": violations,
        "violations_by_kind": summary.get("violations_by_kind", {}),
        **{f"rate_{key}": value for key, value in rate(violations, acquisitions).items()},
        "grants_per_second": acquisitions / config.duration,
        "availability": summary.get("availability"),
        "recover_median": statistics.median(recoveries) if recoveries else None,
        "recover_max": max(recoveries) if recoveries else None,
        "returns": len(recoveries),
        "error": None if not summary.get("error") else error_headline(str(summary["error"])),
    }


@dataclass
class Outcome:
    """What a trial of one client (or a mixed pair) found."""

    label: str
    clients: tuple[str, ...]
    scenarios: list[dict[str, Any]]
    explore: list[dict[str, Any]]
    skipped: dict[str, str]

    @property
    def violations(self) -> int:
        """Every violation found: in the scenarios and in explore."""
        found = [len(row["violations"]) for row in self.scenarios] + [int(row["violations"]) for row in self.explore]
        return sum(found)

    @property
    def acquisitions(self) -> int:
        granted = [int(row["acquired"] or 0) for row in self.scenarios]
        granted += [int(row["acquisitions"]) for row in self.explore]
        return sum(granted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "clients": list(self.clients),
            "violations": self.violations,
            "acquisitions": self.acquisitions,
            "scenarios": self.scenarios,
            "explore": self.explore,
            "skipped": self.skipped,
        }


def worse(broken: Outcome, wrapped: Outcome) -> bool:
    """Whether ``broken`` fared worse than ``wrapped`` on the same trial: more violations
    per acquisition, or as many with more scenarios whose verdict was not the expected one."""
    per = [o.violations / max(o.acquisitions, 1) for o in (broken, wrapped)]
    missed = [sum(not row["matches"] for row in o.scenarios) for o in (broken, wrapped)]
    return per[0] > per[1] or (per[0] == per[1] and missed[0] > missed[1])


def trial_one(
    clients: tuple[str, ...],
    greetings: dict[str, dict[str, Any]],
    out: pathlib.Path,
    *,
    scenarios: Sequence[str],
    families: Sequence[str],
    duration: float,
    seed: int,
    directory: pathlib.Path | None = None,
    request_timeout: float | None = None,
    retry_delay: float | None = None,
    say: Progress,
) -> Outcome:
    """The scenarios and explore families for one client (or a mixed pair), each run with
    the same ``seed`` (and settings) as every other client's."""
    label = "+".join(clients)
    peers = Peers(
        clients,
        key_prefix(greetings, clients),
        None if directory is None else str(directory),
        request_timeout=request_timeout,
        retry_delay=retry_delay,
    )
    where = out / label
    skipped: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for number in scenarios:
        if peers.key_prefix and number in KEYED:
            skipped[number] = f"looks at the key by its bare name; {label}'s keys carry {peers.key_prefix!r}"
            continue
        scenario = find(number)
        say(f"{label}: scenario {scenario.number} {scenario.name}")
        params = Params(seed=seed, quick=True, peers=peers)
        result = run_scenario(scenario, params, where / "scenarios", progress=lambda m: say(f"  {m}"), plot=False)
        rows.append(_scenario_row(result))
        say(f"  expected {result.expected}, observed {result.observed}")
    explored: list[dict[str, Any]] = []
    for family in families:
        config = ExploreConfig(faults=FAMILIES[family], seed=seed, duration=duration, ttl=EXPLORE_TTL)
        say(f"{label}: explore {family} ({', '.join(config.faults.kinds)}) for {duration:g}s")
        outcome = explore(
            config, where / f"explore-{family}", progress=lambda m: say(f"  {m}"), plot=False, peers=peers
        )
        path = outcome.result.history_path
        events = [] if path is None else json.loads(path.read_text(encoding="utf-8"))["events"]
        history = History.from_dicts(events)
        explored.append(_explore_row(family, config, outcome.summary, history))
        say(f"  {outcome.summary.get('acquisitions')} acquisitions, {len(outcome.violations)} violations")
    return Outcome(label, clients, rows, explored, skipped)


def settings(duration: float, request_timeout: float | None = None, retry_delay: float | None = None) -> dict[str, str]:
    """What every client of a trial is given, and what is left to each client's defaults."""
    given = [
        f"{what} {value:g} s"
        for what, value in (("request timeout", request_timeout), ("retry delay", retry_delay))
        if value is not None
    ]
    left = [
        what
        for what, value in (("per-master timeout", request_timeout), ("pause between attempts", retry_delay))
        if value is None
    ]
    return {
        "same for every client": (
            f"the scenario's ttl and acquire timeout (quick mode: ttl 2 s scripted, 1 s free-running); explore: "
            f"ttl {EXPLORE_TTL:g} s, acquire timeout {2 * EXPLORE_TTL:g} s, 4 clients on 3 names, 5 masters, "
            f"{duration:g} s per family, the same seed and schedule"
            + "".join(f"; {item}, where the client has a setting for it" for item in given)
        ),
        "each client's defaults": (
            ", ".join([*left, "drift factor, connection settings"])
            + ", and what a client has no setting for (the table of what each ran with says which); the adapters "
            "repeat single attempts until the timeout, with the client's own pause or the one given"
        ),
        "validity relied on": (
            "the deadline the client tells (validity_ms at grant); for a client that tells none, ttl - (ttl x 0.01 "
            "+ 2 ms) from the start of a single attempt, or from the return of a blocking acquire (the most the "
            f"validity checker allows any client); an answer may take {ANSWER_GRACE:g} s past its timeout before "
            "the worker counts as hung"
        ),
    }


def run_trial(
    trials: Sequence[tuple[str, ...]],
    out: str | pathlib.Path,
    *,
    scenarios: Sequence[str],
    families: Sequence[str],
    duration: float,
    seed: int,
    directory: pathlib.Path | None = None,
    request_timeout: float | None = None,
    retry_delay: float | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Each of ``trials`` (a client, or a mixed pair) through ``scenarios`` and ``families``,
    every client given ``request_timeout`` and ``retry_delay`` where it takes them (None:
    its default); writes ``trial.json`` and ``trial.md`` under ``out`` and returns the document."""
    _check_known(scenarios)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"explore: unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    if duration <= 0:
        raise ValueError(f"duration must be > 0, not {duration!r}")
    given = peers_tier().workers.Settings(request_timeout, retry_delay)  # (refuses a value <= 0)
    say = progress or (lambda _message: None)
    started = time.monotonic()
    greetings = greet([c for trial in trials for c in trial], directory, given)
    outcomes: list[Outcome] = []
    unavailable: dict[str, str] = {}
    for clients in trials:
        missing = [c for c in clients if "error" in greetings[c]]
        if missing:
            unavailable["+".join(clients)] = "; ".join(f"{c}: {greetings[c]['error']}" for c in missing)
            say(f"{'+'.join(clients)}: not run: {unavailable['+'.join(clients)]}")
            continue
        outcomes.append(
            trial_one(
                clients,
                greetings,
                pathlib.Path(out),
                scenarios=scenarios,
                families=families,
                duration=duration,
                seed=seed,
                directory=directory,
                request_timeout=request_timeout,
                retry_delay=retry_delay,
                say=say,
            )
        )
    document = {
        "seed": seed,
        "settings": settings(duration, request_timeout, retry_delay),
        "given": {"request_timeout": request_timeout, "retry_delay": retry_delay},
        "scenarios": {number: SCENARIOS[number] for number in scenarios},
        "excluded": EXCLUDED,
        "families": {name: list(FAMILIES[name].kinds) for name in families},
        "clients": {client: greetings[client] for trial in trials for client in trial},
        "unavailable": unavailable,
        "selftest": _selftest(outcomes, greetings),
        "trials": [o.to_dict() for o in outcomes],
        "seconds": round(time.monotonic() - started, 1),
    }
    target = pathlib.Path(out)
    target.mkdir(parents=True, exist_ok=True)
    (target / "trial.json").write_text(json.dumps(document, indent=1, allow_nan=False), encoding="utf-8")
    (target / "trial.md").write_text(to_markdown(document), encoding="utf-8")
    return document


def _selftest(outcomes: Sequence[Outcome], greetings: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """For each deliberately broken adapter of the trial (its greeting's ``wraps``) whose
    wrapped client ran too: whether it came out worse, as it must."""
    by_label = {o.label: o for o in outcomes}
    found: list[dict[str, Any]] = []
    for outcome in outcomes:
        wrapped = str(greetings[outcome.clients[0]].get("wraps") or "") if len(outcome.clients) == 1 else ""
        if wrapped and wrapped in by_label:
            found.append({"broken": outcome.label, "wraps": wrapped, "worse": worse(outcome, by_label[wrapped])})
    return found


def _interval(row: dict[str, Any]) -> str:
    if row["rate_per_1000"] is None:
        return "-"
    return f"{row['rate_per_1000']:.1f} [{row['rate_low']:.1f}, {row['rate_high']:.1f}]"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def to_markdown(document: dict[str, Any]) -> str:
    """The comparison: a table of explore's families, one of the scenarios, the settings."""
    trials = document["trials"]
    families = list(document["families"])
    lines = ["# chaos trial", ""]
    if families:
        lines += [
            "Violations per 1,000 acquisitions [Wilson 95 %] (violations / acquisitions), by fault family:",
            "",
            "| client | " + " | ".join(f"{f} ({FAMILIES[f].expected})" for f in families) + " |",
            "| --- |" + " --- |" * len(families),
        ]
        for trial in trials:
            cells = {row["family"]: row for row in trial["explore"]}
            lines.append(
                f"| {trial['label']} | "
                + " | ".join(
                    f"{_interval(cells[f])} ({cells[f]['violations']}/{cells[f]['acquisitions']})" for f in families
                )
                + " |"
            )
        lines += [
            "",
            "Availability: grants per second (share of 2 s bins with a grant); time from a master's return to the "
            "next grant, median / max (returns):",
            "",
            "| client | " + " | ".join(families) + " |",
            "| --- |" + " --- |" * len(families),
        ]
        for trial in trials:
            cells = {row["family"]: row for row in trial["explore"]}
            lines.append(f"| {trial['label']} | " + " | ".join(_availability(cells[f]) for f in families) + " |")
    numbers = list(document["scenarios"])
    if numbers:
        lines += [
            "",
            "Scenarios: the observed verdict (expected in the header; ✗ not the expected one; `(err)` the script "
            "stopped on an error, the history up to there judged; `-` not run):",
            "",
            "| client | " + " | ".join(f"{n} ({_expected(n)})" for n in numbers) + " |",
            "| --- |" + " --- |" * len(numbers),
        ]
        for trial in trials:
            cells = {row["number"]: row for row in trial["scenarios"]}
            lines.append(f"| {trial['label']} | " + " | ".join(_verdict(cells.get(n)) for n in numbers) + " |")
    lines += ["", "Settings:", ""]
    lines += [f"- {key}: {value}" for key, value in document["settings"].items()]
    ran = {name: greeting["settings"] for name, greeting in document["clients"].items() if "settings" in greeting}
    if ran:
        lines += [
            "",
            "What each client ran with:",
            "",
            "| client | per-request timeout | pause between attempts |",
            "| --- | --- | --- |",
        ]
        lines += [f"| {name} | {taken['request_timeout']} | {taken['retry_delay']} |" for name, taken in ran.items()]
        lines.append("")
    for label, why in document["unavailable"].items():
        lines.append(f"- not run: {label}: {why}")
    for entry in document["selftest"]:
        lines.append(f"- self-test: {entry['broken']} (wraps {entry['wraps']}) came out worse: {entry['worse']}")
    return "\n".join(lines) + "\n"


def _availability(row: dict[str, Any]) -> str:
    share = row["availability"]
    shown = "-" if share is None else f"{share:.0%}"
    return (
        f"{row['grants_per_second']:.1f}/s ({shown}); "
        f"{_seconds(row['recover_median'])} / {_seconds(row['recover_max'])} s ({row['returns']})"
    )


def _expected(number: str) -> str:
    return next(s.expected for s in CATALOGUE if s.number == number)


def _verdict(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    mark = "" if row["matches"] else " ✗"
    return f"{row['observed']}{mark}{' (err)' if row['error'] is not None else ''}"
