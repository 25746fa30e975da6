"""``python -m chaos sim``: explore, selftest, sweep and replay on the simulator.

    python -m chaos sim explore --faults unsafe-clock --trials 2000 --seed 1 --workers 2 --out DIR
    python -m chaos sim explore --faults safe --trials 1000000 --scheduler tcp://HOST:8786 --out DIR
    python -m chaos sim selftest
    python -m chaos sim exhaust --deviations 2 --horizon 60 [--variant validity-from-replies]
    python -m chaos sim sweep clock-rate --values 1.0 1.005 1.02 1.05 --trials 500 --out DIR
    python -m chaos sim sweep clock-rate --values 1.0 1.02 1.05 --by ttl --by-values 0.25 0.5 1 --out DIR
    python -m chaos sim rates clock-rate=1.012 clock-rate=1.017 --trials 1000000 --seconds 3600
    python -m chaos sim rates clock-rate=1.017 --trial point --trials 1000000
    python -m chaos sim hunt --faults restarts-kept --trials 10000 [--target extend-crossing-restart]
    python -m chaos sim replay DIR/summary.json            # in the simulator again
    python -m chaos sim replay DIR/summary.json --real     # on real redis-server processes
    python -m chaos sim build                              # the compiled simulator, in this checkout

``--faults NAME`` names the fault set, as ``python -m chaos explore --faults`` does;
``--set NAME``, its old name here, still works and says so on stderr.

``explore`` writes ``summary.json`` and, with matplotlib (the chaos extra) and unless
``--no-plot``, the pictures of :mod:`chaos.sim.pictures`: ``trials.png``, ``rates.png``
and ``counterexample.png``.

Exit status as ``python -m chaos``: 0 when the result met its expectation (``explore``: no
violation in a SAFE set, some in an UNSAFE one; ``selftest``: every broken client caught;
``replay``: the violation happened again), 1 when not, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import pathlib
import sys
from collections.abc import Sequence

from redlock._extras import can_import, install_hint

from ..schedule import Schedule
from . import compiled, search
from .trial import SIM_KINDS, run_trial

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos sim", description="Deterministic simulation of Redlock.")
    commands = parser.add_subparsers(dest="command", required=True)
    explore = commands.add_parser("explore", help="trials of a fault family; rate, counterexample")
    _add_fault_set(explore, sorted(search.FAMILIES), "safe")
    explore.add_argument("--trials", type=int, default=1000)
    explore.add_argument("--seed", type=int, default=1)
    explore.add_argument("--workers", type=int, default=1, help="processes (same numbers whatever K)")
    explore.add_argument("--scheduler", default=None, help="a dask.distributed scheduler's address (the sim extra)")
    explore.add_argument(
        "--duration", type=float, default=None, help="simulated seconds a trial (default 6; shorter: more an hour)"
    )
    explore.add_argument("--out", default="chaos-sim", help="directory for summary.json and the pictures")
    explore.add_argument("--no-plot", action="store_true", help="skip the PNG pictures")
    selftest = commands.add_parser("selftest", help="is every broken client caught?")
    selftest.add_argument("--budget", type=int, default=300, help="trials per variant at most")
    selftest.add_argument("--seed", type=int, default=1)
    selftest.add_argument("--out", default=None, help="write selftest.json here")
    selftest.add_argument("variants", nargs="*", help="only these variants")
    sweep = commands.add_parser("sweep", help="violation rate per value of one magnitude, or of two (--by)")
    sweep.add_argument("parameter", choices=sorted({*search.SWEEPS, *(x for x, _ in search.SURFACES)}))
    sweep.add_argument("--values", type=float, nargs="+", required=True)
    sweep.add_argument(
        "--by",
        choices=sorted({y for _, y in search.SURFACES}),
        help="a second magnitude: a phase diagram (clock-rate --by ttl, lock-delay --by pause)",
    )
    sweep.add_argument("--by-values", type=float, nargs="+", default=[])
    sweep.add_argument("--trials", type=int, default=200)
    sweep.add_argument("--seed", type=int, default=1)
    sweep.add_argument("--workers", type=int, default=1)
    sweep.add_argument("--scheduler", default=None, help="a dask.distributed scheduler's address (the sim extra)")
    sweep.add_argument("--out", default="chaos-sim-sweep")
    rates = commands.add_parser("rates", help="violation rates with exact intervals at a few sweep points")
    rates.add_argument("points", nargs="+", help="clock-rate=1.012, lock-delay=1,pause=1.1, ...")
    rates.add_argument("--trials", type=int, default=1_000_000, help="per point")
    rates.add_argument("--seconds", type=float, default=None, help="stop after so much wall time")
    rates.add_argument("--seed", type=int, default=1)
    rates.add_argument(
        "--trial",
        choices=search.TRIALS,
        default="sweep",
        help="sweep: the sweep's 6 s random trials; point: the point's cheapest trial (chaos/sim/points.py)",
    )
    rates.add_argument("--out", default="chaos-sim-rates")
    hunt = commands.add_parser("hunt", help="interleavings outside the catalogue, counted; any violation")
    _add_fault_set(hunt, sorted({*search.FAMILIES, *search.HUNTS}), "restarts-kept")
    hunt.add_argument("--trials", type=int, default=1000, help="random trials (or the budget, with --target)")
    hunt.add_argument("--target", choices=search.KINDS, default=None, help="hypothesis steers towards this one")
    hunt.add_argument("--ignore", nargs="*", default=[], help="with --target: violation kinds not to stop at")
    hunt.add_argument("--seed", type=int, default=1)
    hunt.add_argument("--out", default=None, help="write hunt.json here")
    exhaust = commands.add_parser("exhaust", help="every timing of 2 clients and 3 masters, up to a bound")
    exhaust.add_argument("--deviations", type=int, default=2, help="messages off the prompt latency, at most")
    exhaust.add_argument("--horizon", type=int, default=60, help="among the first so many messages")
    exhaust.add_argument("--seed", type=int, default=1)
    exhaust.add_argument("--variant", default=None, help="a broken client of the self-test, applied")
    exhaust.add_argument("--out", default=None, help="write exhaust.json here")
    commands.add_parser("build", help="compile the simulator with mypyc, in this checkout (chaos/sim/compiled.py)")
    replay = commands.add_parser("replay", help="play a summary's counterexample again")
    replay.add_argument("file", help="DIR/summary.json of sim explore")
    replay.add_argument("--real", action="store_true", help="on real redis-server processes (python -m chaos)")
    replay.add_argument("--tries", type=int, default=1, help="real plays of it (--real): how often it reproduces")
    replay.add_argument("--out", default="chaos-sim-replay")
    return parser


def _add_fault_set(command: argparse.ArgumentParser, names: Sequence[str], default: str) -> None:
    """``--faults NAME``, and ``--set NAME``, its deprecated old spelling (:func:`_fault_set`)."""
    command.add_argument(
        "--faults", dest="name", default=None, choices=names, help=f"the fault set (default {default})"
    )
    command.add_argument("--set", dest="old_name", default=None, choices=names, help=argparse.SUPPRESS)
    command.set_defaults(default_name=default)


def _fault_set(args: argparse.Namespace) -> str | None:
    """The fault set asked for, saying on stderr that ``--set`` is deprecated; None (after
    saying why) when ``--set`` and ``--faults`` disagree."""
    if args.old_name is None:
        return str(args.name or args.default_name)
    print("warning: --set is deprecated; use --faults (as python -m chaos explore does)", file=sys.stderr)
    if args.name is not None and args.name != args.old_name:
        print(f"error: --set {args.old_name} and --faults {args.name} disagree", file=sys.stderr)
        return None
    return str(args.old_name)


def _plot_wanted(args: argparse.Namespace) -> bool:
    if getattr(args, "no_plot", False):
        return False
    if not can_import("matplotlib"):
        print(f"pictures skipped: matplotlib is not installed; {install_hint('chaos')}", file=sys.stderr)
        return False
    return True


def _write(out: str, name: str, document: object) -> pathlib.Path:
    path = pathlib.Path(out)
    path.mkdir(parents=True, exist_ok=True)
    target = path / name
    target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return target


def _usable(args: argparse.Namespace) -> bool:
    """Whether the counts and the executor asked for can be had (else it says why)."""
    if args.trials < 1 or args.workers < 1:
        print("error: --trials and --workers must be at least 1", file=sys.stderr)
        return False
    if args.scheduler is not None and importlib.util.find_spec("distributed") is None:
        print("error: --scheduler needs dask.distributed: .venv/bin/pip install -e '.[sim]'", file=sys.stderr)
        return False
    return True


def _explore(args: argparse.Namespace) -> int:
    name = _fault_set(args)
    if name is None or not _usable(args):
        return EXIT_USAGE
    if args.duration is not None and not args.duration >= 2.0:
        # (A trial's faults end two ttls and a second before its end: shorter leaves none.)
        print("error: --duration must be at least 2 seconds", file=sys.stderr)
        return EXIT_USAGE
    summary = search.explore(
        name, args.trials, args.seed, workers=args.workers, duration=args.duration, scheduler=args.scheduler
    )
    target = _write(args.out, "summary.json", summary)
    if _plot_wanted(args):
        from .pictures import write_explore_pictures  # noqa: PLC0415  (matplotlib: only for pictures)

        write_explore_pictures(summary, args.out)
    rate = summary["rate"]
    print(
        f"{name}: {summary['violations']}/{summary['trials']} trials violated "
        f"(rate {rate['value']:.4f} [{rate['low']:.4f}, {rate['high']:.4f}]), "
        f"{summary['acquisitions']} acquisitions in {summary['seconds']}s "
        f"({summary['acquisitions_per_second']}/s); {target}"
    )
    if "counterexample" in summary:
        example = summary["counterexample"]
        ops = example["schedule"]["ops"]
        print(f"counterexample (trial {example['trial']}, shrunk to {len(ops)} ops):")
        for op in ops:
            print(f"  {op['kind']} {op['target']} [{op['start']:g}-{op['end']:g}s] {op['value']:g}")
        for line in example["violations"]:
            print(f"  -> {line}")
    expected_violation = summary["expected"] == "UNSAFE"
    return EXIT_OK if bool(summary["violations"]) == expected_violation else EXIT_MISMATCH


def _selftest(args: argparse.Namespace) -> int:
    try:
        rows = search.selftest(args.budget, args.seed, names=args.variants)
    except RuntimeError as error:  # (a compiled core: the broken clients cannot patch it)
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.out:
        _write(args.out, "selftest.json", rows)
    return EXIT_OK if rows and all(row["caught"] for row in rows) else EXIT_MISMATCH


def _sweep(args: argparse.Namespace) -> int:
    if not _usable(args):
        return EXIT_USAGE
    if args.by is not None or args.parameter not in search.SWEEPS:
        return _sweep2d(args)
    document = search.sweep(
        args.parameter, args.values, args.trials, args.seed, workers=args.workers, scheduler=args.scheduler
    )
    _write(args.out, "sweep.json", document)
    for point in document["points"]:
        print(
            f"  {point['value']:>8g}  {point['violations']}/{point['trials']}  "
            f"rate {point['rate']:.3f} [{point['low']:.3f}, {point['high']:.3f}]  theory {point['theory']}"
        )
    return EXIT_OK


def _sweep2d(args: argparse.Namespace) -> int:
    if (args.parameter, args.by) not in search.SURFACES or not args.by_values:
        known = ", ".join(f"{x} --by {y}" for x, y in search.SURFACES)
        print(f"error: the 2-D sweeps are {known}, each with --by-values", file=sys.stderr)
        return EXIT_USAGE
    document = search.sweep2d(
        (args.parameter, args.values),
        (args.by, args.by_values),
        args.trials,
        args.seed,
        workers=args.workers,
        scheduler=args.scheduler,
    )
    _write(args.out, "sweep.json", document)
    if _plot_wanted(args):
        from .pictures import write_surface  # noqa: PLC0415  (matplotlib: only for pictures)

        write_surface(document, pathlib.Path(args.out) / "sweep.png")
    for point in document["points"]:
        print(
            f"  {args.parameter} {point['x']:>7g}  {args.by} {point['y']:>6g}  "
            f"{point['violations']}/{point['trials']}  rate {point['rate']:.3f} "
            f"[{point['low']:.3f}, {point['high']:.3f}]  theory {point['theory']}"
        )
    return EXIT_OK


def _rates(args: argparse.Namespace) -> int:
    if args.trials < 1:
        print("error: --trials must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        for point in args.points:
            search.trials_of(args.trial)(point)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    document = search.rates(
        args.points,
        args.trials,
        args.seed,
        seconds=args.seconds,
        save=lambda d: _write(args.out, "rates.json", d),
        trial=args.trial,
    )
    _write(args.out, "rates.json", document)
    for row in document["points"]:
        print(
            f"  {row['point']:<24} {row['violations']}/{row['trials']}  rate {row['rate']:.2e}  "
            f"exact [{row['exact_low']:.2e}, {row['exact_high']:.2e}]  theory {row['theory']}"
        )
    return EXIT_OK


def _hunt(args: argparse.Namespace) -> int:
    name = _fault_set(args)
    if name is None:
        return EXIT_USAGE
    if args.trials < 1:
        print("error: --trials must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.target is None:
        document = search.hunt(name, args.trials, args.seed)
        for kind, row in document["interleavings"].items():
            print(
                f"  {kind:<26} {row['occurrences']} times in {row['trials']} of {args.trials} trials, "
                f"{row['violating_trials']} of those violating"
            )
        found = document["violations"]
        if found:
            print(f"  violating trials by kind: {document['kinds']}")
    else:
        document = search.hunt_targeted(name, args.target, args.trials, args.seed, ignore=args.ignore)
        print(
            f"  {args.target}: in {document['with']} of {document['trials']} trials, "
            f"{document['occurrences']} times, at most {document['most']} in one; "
            f"{document['ignored']} violating only by {', '.join(args.ignore) or 'nothing'} (ignored)"
        )
        found = int(document["violation"] is not None)
    if args.out:
        _write(args.out, "hunt.json", document)
    print(f"{name}: {found} violating trials in {document['seconds']}s")
    # Every hunted set is SAFE: a violation there is a finding, not the expectation.
    expected = search.hunted(name).faults.safe
    return EXIT_OK if bool(found) != expected else EXIT_MISMATCH


def _exhaust(args: argparse.Namespace) -> int:
    from . import exhaustive, variants  # noqa: PLC0415  (variants patches the library while applied)

    if args.deviations < 0 or args.horizon < 0:
        print("error: --deviations and --horizon must not be negative", file=sys.stderr)
        return EXIT_USAGE
    chosen = [v for v in variants.SIM_VARIANTS if v.name == args.variant]
    if args.variant is not None and not chosen:
        known = ", ".join(v.name for v in variants.SIM_VARIANTS)
        print(f"error: no variant {args.variant!r}; known: {known}", file=sys.stderr)
        return EXIT_USAGE
    scope = exhaustive.Scope(deviations=args.deviations, horizon=args.horizon, seed=args.seed)
    try:
        with variants.applied(chosen[0]) if chosen else contextlib.nullcontext():
            outcome = exhaustive.exhaust(scope, stop_at_first=bool(chosen))
    except RuntimeError as error:  # (as in _selftest)
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    document = exhaustive.describe(outcome, scope)
    if args.out:
        _write(args.out, "exhaust.json", document)
    print(f"{outcome.runs} runs in {document['seconds']}s, {outcome.violations} violating")
    example = document.get("counterexample")
    if example is not None:
        timing = ", ".join(f"latency choice {k} {v}" for k, v in example["choices"].items()) or "all prompt"
        print(f"first: {timing}")
        for line in example["violations"]:
            print(f"  -> {line}")
    # A correct client must survive every timing; a broken one must be caught.
    return EXIT_OK if bool(outcome.violations) == bool(chosen) else EXIT_MISMATCH


def _build(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("mypyc") is None:
        print("error: the compiled simulator needs mypyc: .venv/bin/pip install -e '.[dev]'", file=sys.stderr)
        return EXIT_USAGE
    out = compiled.build()
    print(f"the next python -m chaos sim runs it (CHAOS_SIM_PURE=1: the sources); {out}")
    return EXIT_OK


def _replay(args: argparse.Namespace) -> int:
    summary = json.loads(pathlib.Path(args.file).read_text(encoding="utf-8"))
    example = summary.get("counterexample")
    if example is None:
        print("error: that summary has no counterexample", file=sys.stderr)
        return EXIT_USAGE
    schedule = Schedule.from_dict(example["schedule"])
    if not args.real:
        result = run_trial(schedule, int(example["seed"]))
        for line in result.describe():
            print(f"  -> {line}")
        return EXIT_OK if result.violated else EXIT_MISMATCH
    if args.tries < 1:
        print("error: --tries must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    names = int(summary.get("settings", {}).get("names", 2))
    return replay_real(schedule, args.out, names=names, tries=args.tries)


def replay_real(schedule: Schedule, out: str, *, names: int = 2, tries: int = 1) -> int:
    """Play the schedule with ``python -m chaos``'s explore on real masters, ``tries`` times
    (the faults replay exactly, the real workload's timing does not: a fault that needs a
    holder at that moment reproduces in some plays, not all); 0 when a violation happened
    there at least once. Sim-only fault kinds are left out (said so)."""
    import dataclasses  # noqa: PLC0415

    from ..explore import ExploreConfig, explore  # noqa: PLC0415  (starts real processes)

    kept = tuple(op for op in schedule.ops if op.kind not in SIM_KINDS)
    if len(kept) < len(schedule.ops):
        print(f"left out {len(schedule.ops) - len(kept)} sim-only ops ({', '.join(SIM_KINDS)})", file=sys.stderr)
    schedule = dataclasses.replace(schedule, ops=kept)
    config = ExploreConfig(
        faults=schedule.faults,
        seed=schedule.seed,
        duration=schedule.duration,
        nodes=schedule.nodes,
        clients=max(2, schedule.clients),
        # As many names as the simulated workload contended for: fewer names, more overlaps.
        names=names,
        ttl=schedule.ttl,
    )
    reproduced = 0
    for attempt in range(1, tries + 1):
        where = out if tries == 1 else str(pathlib.Path(out) / f"try-{attempt}")
        outcome = explore(config, where, schedule=schedule, plot=False)
        kinds = sorted({v.kind for v in outcome.violations})
        reproduced += bool(outcome.violations)
        print(f"real replay {attempt}/{tries}: {len(outcome.violations)} violations {kinds}; files in {where}")
    if tries > 1:
        print(f"reproduced in {reproduced} of {tries} real plays")
    return EXIT_OK if reproduced else EXIT_MISMATCH


def main(argv: Sequence[str]) -> int:
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    command = {
        "explore": _explore,
        "selftest": _selftest,
        "sweep": _sweep,
        "exhaust": _exhaust,
        "rates": _rates,
        "hunt": _hunt,
        "replay": _replay,
        "build": _build,
    }[args.command]
    if compiled.stale is not None and args.command != "build":
        print(f"note: {compiled.stale} (python -m chaos sim build makes it again)", file=sys.stderr)
    return command(args)
