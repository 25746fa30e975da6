"""``python -m chaos``: list the scenarios, run them, report expected against observed.

From a checkout, ``python -m chaos``; installed (as ``redlock_chaos``), ``redlock-chaos``:

    python -m chaos list
    python -m chaos run restart-empty --seed 7 --out chaos-out
    python -m chaos run --all --quick
    python -m chaos selftest --quick --out chaos-selftest

Exit status: 0 when every scenario ran and its observed verdict (and checks) matched the
expected one; 1 when any did not (a SAFE scenario with a violation, or an UNSAFE one whose
violation the harness failed to produce); 2 for a usage error; 3 when the environment lacks
something (no redis-server, no libfaketime); 130 on Ctrl-C. ``selftest`` exits 1 when a
broken client (:mod:`chaos.variants`) escaped the catalogue (:mod:`chaos.selftest`). Every process a run starts is
stopped before it exits, whichever way it exits.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType

from redlock._extras import install_hint, redis_server_hint
from redlock.servers import RedisServerNotFound

from .clock import LibfaketimeNotFound
from .powerloss import CompilerNotFound
from .report import details, text_table, write_summary
from .runner import Params, ScenarioResult, run_scenario
from .scenarios import CATALOGUE, find
from .selftest import add_arguments as add_selftest_arguments
from .selftest import selftest

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
    add_selftest_arguments(commands.add_parser("selftest", help="would the catalogue catch a broken client?"))
    return parser


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


def _can_plot() -> bool:
    """Whether matplotlib can be imported; the pictures are optional, the verdicts are not."""
    try:
        import matplotlib  # noqa: F401, PLC0415 (about a second: only when pictures are wanted)
    except ModuleNotFoundError as missing:
        if missing.name is None or missing.name.split(".")[0] != "matplotlib":
            raise
        return False
    return True


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
    plot = not args.no_plot
    if plot and not _can_plot():
        # Said once, before anything runs, so that a run's exit status stays its verdict's.
        print(f"timelines skipped: matplotlib is not installed; {install_hint('chaos')}", file=sys.stderr)
        plot = False
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    params = Params(seed=seed, quick=args.quick, duration=args.duration, nodes=args.nodes)
    mode = "quick" if args.quick else "full"
    command = shlex.join([*PROG.split(), *argv])
    print(f"seed {seed}, {mode} mode, {args.nodes} masters, output in {args.out}", file=sys.stderr, flush=True)
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
    except RedisServerNotFound:
        print(f"error: {redis_server_hint()}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except (LibfaketimeNotFound, CompilerNotFound) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
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


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(arguments)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "list":
        return _list()
    if args.command == "selftest":
        return _selftest(args)
    return _run(args, arguments)


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
    except (RedisServerNotFound, LibfaketimeNotFound) as exc:
        message = redis_server_hint() if isinstance(exc, RedisServerNotFound) else str(exc)
        print(f"error: {message}", file=sys.stderr)
        return EXIT_ENVIRONMENT


if __name__ == "__main__":
    sys.exit(main())
