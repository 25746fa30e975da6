"""``python -m chaos``: list the scenarios, run them, report expected against observed.

From a checkout, ``python -m chaos``; installed (as ``redlock_chaos``), ``redlock-chaos``:

    python -m chaos list
    python -m chaos run restart-empty --seed 7 --out chaos-out
    python -m chaos run --all --quick
    python -m chaos selftest --quick --out chaos-selftest
    python -m chaos explore --faults unsafe-clock --duration 60 --seed 3 --out explore-out
    python -m chaos explore --faults safe --until-coverage bare_majority=20,near_misses=5 --duration 600
    python -m chaos replay explore-out/violations/violation-1.json
    python -m chaos shrink explore-out/violations/violation-1.json --tries 3 --need 2
    python -m chaos explore --faults unsafe-single --duration 30 --shrink
    python -m chaos sweep clock-rate --values 1.0 1.005 1.02 1.05 --trials 5
    python -m chaos trial pottery --scenarios 1,5,13a --explore restart,pause --duration 20
    python -m chaos trial redlock-quorum --with node-redlock --scenarios 5,9
    python -m chaos trial --all

Exit status: 0 when every scenario ran and its observed verdict (and checks) matched the
expected one; 1 when any did not (a SAFE scenario with a violation, or an UNSAFE one whose
violation the harness failed to produce); 2 for a usage error; 3 when the environment lacks
something (no redis-server, no libfaketime); 130 on Ctrl-C. ``selftest`` exits 1 when a
broken client (:mod:`chaos.variants`) escaped the catalogue (:mod:`chaos.selftest`). Every process a run starts is
stopped before it exits, whichever way it exits.

``explore`` exits 0 when its fault set met its expectation (no violation under ``safe``,
some under an ``unsafe-*`` set, over all its rounds with ``--until-coverage``) and 1
otherwise, whatever the goals (the summary says which were met); ``replay`` 0 when the saved violation's
kind happened again in any of its ``--tries`` (it says "reproduced k of n tries") and 1
when in none; ``shrink`` 0 when the window reproduced and was shrunk, 1 when the whole
window did not reproduce (``--need`` of ``--tries``); ``sweep`` 0 once every trial ran (its curve is the
result, not a verdict). ``trial`` exits 0 once every client it could start was tried (its
table is the result: :mod:`chaos.trial`), 1 when a deliberately broken adapter did not come
out worse than the client it wraps. Usage errors, the environment and Ctrl-C as for ``run``.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import random
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

from redlock._cli.console import to_a_reader
from redlock._extras import can_import, install_hint, redis_server_hint
from redlock.servers import RedisServerNotFound

from .clock import LibfaketimeNotFound
from .explore import ExploreConfig, explore, explore_until, replay
from .margins import GOAL_COUNTERS, parse_goals
from .netns import NetworkKind, choose_network, unavailable
from .powerloss import CompilerNotFound
from .report import details, text_table, write_summary
from .runner import Params, ScenarioResult, run_scenario
from .scenarios import CATALOGUE, find
from .schedule import FAULT_KINDS, FAULT_SETS, resolve_fault_set
from .selftest import add_arguments as add_selftest_arguments
from .selftest import selftest
from .shrink import shrink_window
from .sweep import PARAMETERS, run_sweep
from .trial import FAMILIES, QUICK_SCENARIOS, clients, run_trial
from .trial import SCENARIOS as TRIAL_SCENARIOS

__all__ = ["main"]

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# The source tree is chaos/, the installed package redlock_chaos: name the command the way
# it was started, so that the command a report records can be run again as it stands.
PROG = "python -m chaos" if __package__ == "chaos" else "redlock-chaos"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Fault injection on real Redis masters: run Redlock's scenarios and check their verdicts.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the scenarios and their expected verdicts")
    run = commands.add_parser("run", help="run scenarios and report expected against observed")
    run.add_argument("names", nargs="*", metavar="NAME", help="scenario names or numbers (see list)")
    run.add_argument("--all", action="store_true", help="run the whole catalogue")
    run.add_argument("--seed", type=int, default=None, help="seed for every random choice (default: random)")
    run.add_argument("--duration", type=float, default=None, help="seconds of free-running workload")
    run.add_argument("--nodes", type=int, default=5, help="number of masters (default 5, at least 3)")
    run.add_argument("--out", default="chaos-out", help="directory for histories, timelines, report")
    run.add_argument("--quick", action="store_true", help="short TTLs and durations (CI)")
    run.add_argument("--no-plot", action="store_true", help="skip the PNG timelines")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    _add_network_argument(run)
    add_selftest_arguments(commands.add_parser("selftest", help="would the catalogue catch a broken client?"))
    _add_explore_parsers(commands)
    _add_trial_parser(commands)
    # Everything after "sim" is chaos.sim.cli's to parse (it needs no redis-server).
    commands.add_parser("sim", help="deterministic simulation (python -m chaos sim --help)", add_help=False)
    return parser


def _add_trial_parser(commands: Any) -> None:
    trial = commands.add_parser(
        "trial", help="put any Redlock client (a peers worker) through the catalogue and explore"
    )
    trial.add_argument("client", nargs="?", help="the client: one of peers.install.CLIENTS (docs/peers.md)")
    trial.add_argument("--with", dest="partner", default=None, help="a second client on the same masters and names")
    trial.add_argument("--all", action="store_true", help="every installed client, one comparison")
    trial.add_argument(
        "--scenarios",
        default=None,
        help=f"numbers, comma-separated, of: {', '.join(TRIAL_SCENARIOS)} (default: all of them; with --all: "
        f"{','.join(QUICK_SCENARIOS)}; 'none' for none)",
    )
    trial.add_argument(
        "--explore",
        default=None,
        help=f"fault families, comma-separated, of: {', '.join(FAMILIES)} (default: none; with --all: all)",
    )
    trial.add_argument("--duration", type=float, default=15.0, help="seconds of explore per family (default 15)")
    trial.add_argument("--seed", type=int, default=None, help="seed of every run (default: random)")
    trial.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        metavar="S",
        help="bound on each request to a master, given to every client that has a setting for it "
        "(default: each client's own)",
    )
    trial.add_argument(
        "--retry-delay",
        type=float,
        default=None,
        metavar="S",
        help="mean pause between attempts, given to every client that has a setting for it "
        "(default: each client's own)",
    )
    trial.add_argument("--out", default="chaos-trial", help="directory for trial.json, trial.md and each run's files")
    trial.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _trial(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    if args.all == (args.client is not None):
        print("error: give a CLIENT or --all", file=sys.stderr)
        return EXIT_USAGE
    try:
        known = clients()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    chosen = [args.client, args.partner] if args.client else []
    unknown = [c for c in chosen if c is not None and c not in known]
    if unknown:
        print(f"error: unknown client {unknown[0]!r}; choose from {', '.join(known)}", file=sys.stderr)
        return EXIT_USAGE
    trials: list[tuple[str, ...]] = (
        [(client,) for client in known]
        if args.all
        else [(args.client,) if args.partner is None else (args.client, args.partner)]
    )
    default_scenarios = QUICK_SCENARIOS if args.all else tuple(TRIAL_SCENARIOS)
    scenarios = _listed(args.scenarios, default_scenarios)
    families = _listed(args.explore, tuple(FAMILIES) if args.all else ())
    try:
        document = run_trial(
            trials,
            args.out,
            scenarios=scenarios,
            families=families,
            duration=args.duration,
            seed=seed,
            request_timeout=args.request_timeout,
            retry_delay=args.retry_delay,
            progress=_progress(args.quiet),
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print((pathlib.Path(args.out) / "trial.md").read_text(encoding="utf-8"))
    print(f"written: {pathlib.Path(args.out) / 'trial.json'} (seed {seed}, {document['seconds']:.0f}s)")
    return EXIT_MISMATCH if any(not entry["worse"] for entry in document["selftest"]) else EXIT_OK


def _listed(text: str | None, default: Sequence[str]) -> list[str]:
    if text is None:
        return list(default)
    return [] if text.strip() == "none" else [item.strip() for item in text.split(",") if item.strip()]


def _add_explore_parsers(commands: Any) -> None:
    explore = commands.add_parser("explore", help="a randomized, seeded fault schedule against a contended workload")
    explore.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="seconds of workload (default 60); with --until-coverage, the budget of all rounds",
    )
    explore.add_argument(
        "--seed", type=int, default=None, help="seed of the schedule and the workload (default: random)"
    )
    explore.add_argument(
        "--faults",
        default="safe",
        help=f"a set ({', '.join(FAULT_SETS)}) or kinds, comma-separated: {', '.join(FAULT_KINDS)}",
    )
    explore.add_argument("--nodes", type=int, default=5, help="number of masters (default 5)")
    explore.add_argument("--clients", type=int, default=4, help="client processes (default 4)")
    explore.add_argument("--ttl", type=float, default=1.0, help="the workload's ttl in seconds (default 1)")
    explore.add_argument(
        "--out",
        default="chaos-explore",
        help="directory for summary.json, schedule.json, E-explore.json, timeline.png, over-time.png, violations/",
    )
    explore.add_argument("--no-plot", action="store_true", help="skip the PNG timeline")
    explore.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    explore.add_argument(
        "--reactive",
        action="store_true",
        help="fire restart, clock-jump and client-pause on events (a grant on a bare majority, a contended grant) "
        "instead of on the schedule's timer",
    )
    explore.add_argument(
        "--until-coverage",
        metavar="GOALS",
        default=None,
        help="play rounds (each a new schedule, in round-N/) until every goal is reached or --duration is spent; "
        f"GOALS as bare_majority=20,near_misses=5, of: {', '.join(GOAL_COUNTERS)}",
    )
    explore.add_argument(
        "--round", type=float, default=30.0, help="seconds of one round of --until-coverage (default 30)"
    )
    explore.add_argument(
        "--shrink",
        action="store_true",
        help="then shrink the first violation's window (as the shrink command, 3 tries, into OUT/shrink)",
    )
    _add_network_argument(explore)
    replay = commands.add_parser("replay", help="play the fault schedule saved around a violation again")
    replay.add_argument("file", help="a violations/violation-N.json of an explore run")
    replay.add_argument("--out", default="chaos-replay", help="directory for the replay's files, one try-N/ per try")
    replay.add_argument(
        "--tries",
        type=int,
        default=3,
        help="how many times to play it (default 3): a replay repeats the faults' times, not the "
        "interleaving, so whether it reproduces depends on timing",
    )
    replay.add_argument("--no-plot", action="store_true", help="skip the PNG timeline")
    replay.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    shrink = commands.add_parser("shrink", help="cut a saved violation's window to the fewest faults that reproduce it")
    shrink.add_argument("file", help="a violations/violation-N.json of an explore run")
    shrink.add_argument("--out", default="chaos-shrink", help="directory for shrink.json and each replay")
    shrink.add_argument("--tries", type=int, default=3, help="replays per subset of faults (default 3)")
    shrink.add_argument(
        "--need", type=int, default=1, help="how many of a subset's --tries must reproduce it (default 1)"
    )
    shrink.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    sweep = commands.add_parser("sweep", help="violation probability per value of one parameter, with its threshold")
    sweep.add_argument("parameter", choices=sorted(PARAMETERS), help="what to move")
    sweep.add_argument("--values", type=float, nargs="+", default=None, help="the values (default: the parameter's)")
    sweep.add_argument("--trials", type=int, default=5, help="trials per value (default 5)")
    sweep.add_argument("--seed", type=int, default=None, help="seed (default: random)")
    sweep.add_argument("--nodes", type=int, default=5, help="number of masters (default 5)")
    sweep.add_argument("--out", default="chaos-sweep", help="directory for sweep.json, sweep.png and trials/")
    sweep.add_argument("--no-plot", action="store_true", help="skip the PNG curve")
    sweep.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _add_network_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--network",
        choices=("kernel", "proxy"),
        default=None,
        help="where network faults act: network namespaces and nftables (kernel; the default where "
        "namespaces can be made) or a userspace proxy; delays always use the proxy",
    )


def _network(args: argparse.Namespace) -> NetworkKind:
    """The network asked for, or the default; a fallback is said once, on one line."""
    network, reason = choose_network(args.network)
    if reason is not None:
        if args.network == "kernel":
            print(f"warning: --network kernel: {reason}", file=sys.stderr)
        else:
            print(f"note: {reason}", file=sys.stderr)
    return network


def _list() -> int:
    width = max(len(s.name) for s in CATALOGUE)
    for scenario in CATALOGUE:
        print(f"{scenario.number:>4}  {scenario.name:<{width}}  {scenario.expected:<6}  {scenario.title}")
        if scenario.why:
            print(f"{'':>4}  {'':<{width}}  {'':<6}  -> {scenario.why}")
    return EXIT_OK


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops a run as Ctrl-C does: every process is stopped on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _missing(exc: RedisServerNotFound | LibfaketimeNotFound | CompilerNotFound) -> int:
    """What the environment lacks: say how to get it."""
    message = redis_server_hint() if isinstance(exc, RedisServerNotFound) else str(exc)
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ENVIRONMENT


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.all == bool(args.names):
        print("error: give scenario names, or --all", file=sys.stderr)
        return EXIT_USAGE
    if args.nodes < 3:
        print(f"error: --nodes must be at least 3, not {args.nodes}", file=sys.stderr)
        return EXIT_USAGE
    if args.duration is not None and args.duration <= 0:
        print("error: --duration must be positive", file=sys.stderr)
        return EXIT_USAGE
    try:
        scenarios = list(CATALOGUE) if args.all else [find(name) for name in args.names]
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    reason = unavailable() if args.all and any(s.kernel for s in scenarios) else None
    if reason is not None:
        # --all means what this machine can run; named ones run and say why they cannot.
        skipped = [s for s in scenarios if s.kernel]
        scenarios = [s for s in scenarios if not s.kernel]
        print(
            f"skipped {', '.join(s.number for s in skipped)}: they need the kernel network: {reason}", file=sys.stderr
        )
    plot = not args.no_plot
    if plot and not can_import("matplotlib"):
        # Said once, before anything runs, so that a run's exit status stays its verdict's.
        print(f"timelines skipped: matplotlib is not installed; {install_hint('chaos')}", file=sys.stderr)
        plot = False
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    params = Params(seed=seed, quick=args.quick, duration=args.duration, nodes=args.nodes, network=_network(args))
    mode = "quick" if args.quick else "full"
    command = shlex.join([*PROG.split(), *argv])
    print(
        f"seed {seed}, {mode} mode, {args.nodes} masters, {params.network} network, output in {args.out}",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    results: list[ScenarioResult] = []
    try:
        with _sigterm_interrupts():
            for position, scenario in enumerate(scenarios, start=1):
                prefix = f"[{position}/{len(scenarios)}] {scenario.number} {scenario.name}"

                def progress(message: str, prefix: str = prefix) -> None:
                    if not args.quiet:
                        print(f"{time.monotonic() - started:7.1f}s {prefix}: {message}", file=sys.stderr, flush=True)

                progress(f"{scenario.title} (expected {scenario.expected})")
                result = run_scenario(scenario, params, args.out, progress=progress, plot=plot)
                results.append(result)
                outcome = "ok" if result.passed else "MISMATCH"
                progress(f"observed {result.observed}: {outcome} ({result.elapsed:.1f}s)")
    except KeyboardInterrupt:
        print("\ninterrupted: every process was stopped", file=sys.stderr)
        if results:
            print(text_table(results))
        return EXIT_INTERRUPTED
    except (RedisServerNotFound, LibfaketimeNotFound, CompilerNotFound) as exc:
        return _missing(exc)
    write_summary(results, args.out, command=f"{command}  # seed {seed}")
    print(text_table(results))
    print()
    print(details(results))
    failed = [r for r in results if not r.passed]
    total = time.monotonic() - started
    if failed:
        print(f"\n{len(failed)} of {len(results)} scenarios did not match their expected verdict ({total:.0f}s)")
        return EXIT_MISMATCH
    print(f"\nall {len(results)} scenarios matched their expected verdict ({total:.0f}s; seed {seed})")
    return EXIT_OK


def _progress(quiet: bool) -> Callable[[str], None]:
    started = time.monotonic()

    def say(message: str) -> None:
        if not quiet:
            print(f"{time.monotonic() - started:7.1f}s {message}", file=sys.stderr, flush=True)

    return say


def _guarded(call: Callable[[], int]) -> int:
    """Run a command; map what the environment lacks, and Ctrl-C, to their exit statuses."""
    try:
        with _sigterm_interrupts():
            return call()
    except KeyboardInterrupt:
        print("\ninterrupted: every process was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (RedisServerNotFound, LibfaketimeNotFound, CompilerNotFound) as exc:
        return _missing(exc)


def _plot_wanted(args: argparse.Namespace) -> bool:
    if args.no_plot:
        return False
    if not can_import("matplotlib"):
        print(f"pictures skipped: matplotlib is not installed; {install_hint('chaos')}", file=sys.stderr)
        return False
    return True


def _explore(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    try:
        config = ExploreConfig(
            resolve_fault_set(args.faults),
            seed=seed,
            duration=args.duration,
            nodes=args.nodes,
            clients=args.clients,
            ttl=args.ttl,
            network=_network(args),
            reactive=args.reactive,
        )
        goals = None if args.until_coverage is None else parse_goals(args.until_coverage)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    plot = _plot_wanted(args)
    if goals is not None:
        return _explore_until(args, config, goals, plot=plot)
    print(
        f"explore {config.faults.name} ({', '.join(config.faults.kinds)}) for {config.duration:g}s on the "
        f"{config.network} network, seed {seed}, output in {args.out}",
        file=sys.stderr,
    )
    outcome = explore(config, args.out, progress=_progress(args.quiet), plot=plot)
    summary = outcome.summary
    print(
        f"{summary.get('acquisitions', 0)} acquisitions, {len(outcome.violations)} violations "
        f"{summary.get('violations_by_kind', {})}, availability {summary.get('availability', 0):.0%}, "
        f"{summary.get('faults_scheduled', 0)} faults; expected {config.faults.expected}: "
        f"{'ok' if outcome.passed else 'MISMATCH'}"
    )
    first = summary.get("first_violation")
    print(
        f"verdict {summary.get('verdict')} ({summary.get('verdict_reason')})"
        + ("" if first is None else f"; first violation at {first:.1f}s")
    )
    for path in outcome.windows[:5]:
        print(f"  replay with: {PROG} replay {path}")
    if outcome.result.error:
        print(outcome.result.error, file=sys.stderr)
    if args.shrink and outcome.windows:
        _say_shrunk(
            shrink_window(outcome.windows[0], pathlib.Path(args.out) / "shrink", progress=_progress(args.quiet))
        )
    return EXIT_OK if outcome.passed else EXIT_MISMATCH


def _explore_until(args: argparse.Namespace, config: ExploreConfig, goals: dict[str, int], *, plot: bool) -> int:
    print(
        f"explore {config.faults.name} on the {config.network} network until {args.until_coverage}, at most "
        f"{config.duration:g}s in rounds of {args.round:g}s, seed {config.seed}, output in {args.out}",
        file=sys.stderr,
    )
    try:
        document, outcomes = explore_until(
            config, goals, args.out, round_seconds=args.round, progress=_progress(args.quiet), plot=plot
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for name, goal in document["goals"].items():
        print(f"  {name}: {goal['reached']} of {goal['target']} ({'met' if goal['met'] else 'NOT met'})")
    print(
        f"{len(outcomes)} rounds, {document['seconds_played']:g}s: {document['stopped']}; "
        f"{document['acquisitions']} acquisitions, {document['violations']} violations; "
        f"verdict {document['verdict']} ({document['verdict_reason']})"
    )
    errors = [o.result.error for o in outcomes if o.result.error]
    for error in errors:
        print(error, file=sys.stderr)
    found = bool(document["violations"])
    passed = not errors and (not found if config.faults.safe else found)
    return EXIT_OK if passed else EXIT_MISMATCH


def _replay(args: argparse.Namespace) -> int:
    if args.tries < 1:
        print(f"error: --tries must be at least 1, not {args.tries}", file=sys.stderr)
        return EXIT_USAGE
    plot = _plot_wanted(args)
    reproduced = 0
    found: list[str] = []
    networks: set[str] = set()
    for attempt in range(1, args.tries + 1):
        out = pathlib.Path(args.out) / f"try-{attempt}"
        try:
            outcome, again, kind = replay(args.file, out, progress=_progress(args.quiet), plot=plot)
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: cannot replay {args.file}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        reproduced += again
        networks.add(str(outcome.summary.get("network")))
        found.append(", ".join(sorted({v.kind for v in outcome.violations})) or "none")
    print(
        f"saved violation: {kind}; reproduced {reproduced} of {args.tries} tries on the {', '.join(sorted(networks))} "
        f"network (found per try: {'; '.join(found)}). "
        "A replay repeats the faults at the same times, not the same interleaving: timing decides each try."
    )
    return EXIT_OK if reproduced else EXIT_MISMATCH


def _shrink(args: argparse.Namespace) -> int:
    try:
        summary = shrink_window(args.file, args.out, tries=args.tries, need=args.need, progress=_progress(args.quiet))
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot shrink {args.file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK if _say_shrunk(summary) else EXIT_MISMATCH


def _say_shrunk(summary: dict[str, Any]) -> bool:
    """Print what shrinking found; whether the window reproduced at all."""
    kind = summary["violation"]["kind"]
    if not summary["reproduced"]:
        print(
            f"the window's {kind} did not come back in {summary['need']} of {summary['tries']} replays: "
            "nothing to shrink"
        )
        return False
    print(
        f"{kind} from {summary['faults_after']} of the window's {summary['faults_before']} faults "
        f"({summary['replays']} replays): {summary['cause']}; {summary['assumption']}"
    )
    print("\n".join(summary["steps"]))
    return True


def _sweep(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    values = args.values if args.values is not None else list(PARAMETERS[args.parameter].defaults)
    try:
        document = run_sweep(
            args.parameter,
            values,
            args.trials,
            args.out,
            seed=seed,
            nodes=args.nodes,
            progress=_progress(args.quiet),
            plot=_plot_wanted(args),
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{args.parameter}: theory's threshold {document['threshold']:.4g} ({document['theory']})")
    for point in document["points"]:
        probability = point["probability"]
        shown = "-" if probability is None else f"{probability:.2f} [{point['low']:.2f}, {point['high']:.2f}]"
        print(f"  {point['value']:>8g}  {point['violations']}/{point['trials']}  P={shown}  theory {point['theory']}")
    binary, margin = document["binary_fit"], document["margin_fit"]
    print(
        "  fitted: "
        + (
            "P(violation) = 1/2 at " + f"{binary['threshold']:.4g}"
            if binary
            else "no logistic fit (too few mixed values)"
        )
        + "; "
        + (
            f"margins cross 0 at {margin['threshold']:.4g} +- {margin['stderr']:.2g} ({margin['margins']} margins)"
            if margin
            else "no margin fit"
        )
    )
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["sim"]:
        from .sim.cli import main as sim_main  # noqa: PLC0415

        return sim_main(arguments[1:])
    try:
        args = _parser().parse_args(arguments)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "list":
        return _list()
    if args.command == "selftest":
        return _selftest(args)
    with _no_empty_out(args.out):
        if args.command in ("explore", "replay", "shrink", "sweep", "trial"):
            command = {"explore": _explore, "replay": _replay, "shrink": _shrink, "sweep": _sweep, "trial": _trial}[
                args.command
            ]
            return _guarded(lambda: command(args))
        return _run(args, arguments)


@contextlib.contextmanager
def _no_empty_out(out: str) -> Iterator[None]:
    """A command that wrote no file (the environment lacks something, Ctrl-C before the
    first result) leaves no empty output directory behind, as it found none."""
    path = pathlib.Path(out)
    existed = path.exists()
    try:
        yield
    finally:
        if not existed and path.is_dir() and not any(found.is_file() for found in path.rglob("*")):
            shutil.rmtree(path, ignore_errors=True)


def _selftest(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.nodes < 3:
        print("error: --runs must be at least 1 and --nodes at least 3", file=sys.stderr)
        return EXIT_USAGE

    def say(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    try:
        with _sigterm_interrupts():
            return selftest(args, say=say)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ninterrupted: every process was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (RedisServerNotFound, LibfaketimeNotFound, CompilerNotFound) as exc:
        return _missing(exc)


if __name__ == "__main__":
    sys.exit(to_a_reader(main))
