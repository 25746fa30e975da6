"""Redlock against the physical floor, measured side by side in one run.

    python benchmarks/bench.py [--quick] [--out benchmarks/out] [--only SECTION ...]

Starts its own masters (redlock.servers) and prints p50/p99 for:

* floor: one SET NX PX + one Lua compare-and-delete on ONE master with plain redis-py
  (sync and asyncio): what any lock costs at the least;
* acquire+release on 5 masters, sync and asyncio, and the ratio to the floor;
* acquire+release while one of the 5 masters is SIGSTOPped, against the same floor (a round
  is decided by the other four; about node_timeout at worst, never a hang);
* primitives: acquire+release of a semaphore (limit 3) and of a lock on 3 names, each against
  the single lock in the same run (interleaved), sync and asyncio, with the ratio to the
  single lock's p50 (the target: 1.3x at most);
* contended throughput, 8 clients on one name, against redis-py's single-node Lock in the
  same run, with each client's share;
* handoff: from the start of a release to the next holder's acquire returning, 8 waiters,
  with wake-up on release and with plain polling;
* scale: lock+unlock on distinct names with C = 1, 10, 100, 1000 asyncio tasks and C = 1, 8,
  32 threads on ONE client (5 masters, default settings), each case a fresh client, a warm-up
  (its first burst) and then a fixed duration (3 s, 1 s with --quick): ops/s, errors (any
  exception or a False acquire), p50/p99 per op, peak open fds of the process (sampled every
  10 ms from /proc/self/fd) and client CPU per op (process_time / ops); beside each, the floor
  at the same C in the same run: redis-py (a BlockingConnectionPool of C) / redis.asyncio (a
  pool of C) on ONE master doing SET NX PX + the compare-and-delete script. Also the 5-master
  "send all, then read all" floor of client CPU (one thread, 5 raw redis-py connections), and
  the ratios and targets. About a minute (20 s with --quick);
* node-contention: the same clients looping on ONE name (blocking acquire + release), against
  node-redlock at its 200 ms and a 10 ms retry delay: acquisitions/s, fairness, CPU per
  acquisition (the contention target); needs node and npm, as the node section;
* node: node-redlock (on ioredis) against the asyncio and sync clients on the same masters,
  lock+unlock on distinct names at C = 1, 10, 100, 1000, three interleaved rounds each, with
  the ratios (the targets); needs node and npm, else it says why and is skipped;
* native (only when asked: ``--only native``): extend and release by Valkey 9's native
  commands against the scripts, on Valkey masters of its own (see bench_native.py);
* network (only when asked: ``--only network``; root): the compiled build against its
  sources and the early handover against none, with masters in network namespaces a round
  trip of ``--rtt`` ms away (0.2 and 1 by default), in ``--rounds`` interleaved rounds;
  ``--compiled`` names a Python whose redlock is a compiled install (see bench_network.py);
* telemetry: acquire+release p50 (sync and asyncio, 5 masters) with OpenTelemetry absent,
  installed with no SDK configured (the API's no-op providers), and recording with the SDK
  (metrics into an in-memory reader, spans through a batch processor to an exporter that
  drops them), in interleaved rounds, one client per case; the overhead is the median over
  the rounds of each round's ratio to the absent case (target: under 10 % with the SDK).

Writes bench.json and bench.png to --out (bench.png needs matplotlib, from the [bench]
extra; without it the run says so once and writes bench.json alone). On a machine with 2 or more CPUs the servers are
pinned to one CPU and this process to another (sched_setaffinity, as taskset does), since a
same-CPU round trip and a cross-CPU one can differ several times.

This file is the command line and the report; each section is a module beside it
(bench_latency.py for latency and primitives, bench_contention.py, bench_scale.py,
bench_telemetry.py, bench_node.py, bench_node_contention.py, bench_network.py), with what they share in _common.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import percentiles
from bench_contention import contention_panel, contention_section, handoff_panel, waiters_section
from bench_latency import latency_panel, latency_section, primitives_section
from bench_native import native_section
from bench_network import RTTS_MS, network_section
from bench_node import node_panel, node_section
from bench_node_contention import node_contention_section
from bench_scale import raise_fd_limit, scale_panel, scale_section
from bench_telemetry import telemetry_panel, telemetry_section
from redis.utils import HIREDIS_AVAILABLE

from redlock._extras import can_import, install_hint, redis_server_hint
from redlock.servers import LocalMasters, RedisServerNotFound

EXIT_NO_REDIS_SERVER = 3


def pin(cluster: LocalMasters) -> str:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    for pid in cluster.pids:
        if pid is not None:
            os.sched_setaffinity(pid, {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))
    return f"servers on CPU {cpus[-1]}, client on CPU {','.join(map(str, cpus[:-1]))}"


def chart(results: dict[str, Any], path: Path) -> None:
    """bench.png: :func:`chart_figure`, saved (none when no section measured draws a panel)."""
    figure = chart_figure(results)
    if figure is not None:
        figure.savefig(path, dpi=100)


#: Panels per row of bench.png: more side by side would each be too narrow to read.
CHART_COLUMNS = 3


def chart_figure(results: dict[str, Any], *, dpi: float = 100) -> Any:
    """One panel per section measured, at most :data:`CHART_COLUMNS` to a row, each
    legend to the right of its panel (outside the data: inside, it covered bars and points)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 (optional: see can_import)
    from matplotlib.figure import Figure  # noqa: PLC0415

    panels: list[Callable[[Any], None]] = []
    if "latency" in results:
        panels.append(lambda ax: latency_panel(ax, results["latency"]))
    if "primitives" in results:
        panels.append(lambda ax: latency_panel(ax, results["primitives"]))
    if "contention" in results:
        panels.append(lambda ax: contention_panel(ax, results["contention"]))
        panels.append(lambda ax: handoff_panel(ax, results["handoff"]))
    if "scale" in results:
        panels.append(lambda ax: scale_panel(ax, results["scale"]))
    if "node" in results:
        panels.append(lambda ax: node_panel(ax, results["node"]))
    if "native" in results:
        panels.append(lambda ax: latency_panel(ax, results["native"]["rows"], "ms per extend or release, Valkey"))
    if results.get("telemetry"):
        panels.append(lambda ax: telemetry_panel(ax, results["telemetry"]))
    if not panels:  # (a section that draws no panel, run alone)
        return None
    columns = min(CHART_COLUMNS, len(panels))
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(7.4 * columns, 4.6 * rows + 0.6), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, columns, squeeze=False).flat
    for index, ax in enumerate(axes):
        if index >= len(panels):
            ax.set_visible(False)
            continue
        panels[index](ax)
        legend = ax.get_legend()
        if legend is not None:
            handles, labels = ax.get_legend_handles_labels()
            ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    title = f"redlock-quorum benchmark: {results['machine']['summary']}"
    fig.suptitle(textwrap.fill(title, width=70 * columns), fontsize=10)
    fig.tight_layout()
    return fig


SECTIONS = ("latency", "primitives", "contention", "scale", "node", "node-contention", "telemetry")
#: Run only when named with --only: native needs another server (Valkey 9), network needs root
#: (network namespaces) and an interpreter with a compiled install (--compiled).
OPTIONAL_SECTIONS = ("native", "network")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, shorter contention and scale runs")
    parser.add_argument("--out", default="benchmarks/out")
    parser.add_argument(
        "--only",
        action="append",
        choices=SECTIONS + OPTIONAL_SECTIONS,
        help="run only this section (repeatable); default: all. contention includes handoff",
    )
    parser.add_argument(
        "--rtt",
        action="append",
        type=float,
        help=f"network: a round trip to add, ms (repeatable; default {' and '.join(map(str, RTTS_MS))})",
    )
    parser.add_argument("--rounds", type=int, default=5, help="network: interleaved A/B rounds per case")
    parser.add_argument(
        "--compiled",
        default=sys.executable,
        help="network: a Python whose redlock is a compiled install (REDLOCK_COMPILE=1), run against its sources",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    if any(rtt < 0 for rtt in args.rtt or ()):
        parser.error(f"--rtt must not be negative: {args.rtt}")
    sections = set(args.only or SECTIONS)
    network = (tuple(args.rtt or RTTS_MS), args.rounds, args.compiled)
    count = 300 if args.quick else 2000
    telemetry_rounds = (3, 200) if args.quick else (9, 400)
    seconds = 2.0 if args.quick else 6.0
    scale_seconds, scale_warmup = (1.0, 0.25) if args.quick else (3.0, 0.5)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot = can_import("matplotlib")
    if not plot:
        print(f"bench.png skipped: matplotlib is not installed; {install_hint('bench')}", file=sys.stderr)
    try:
        return run(
            sections,
            count,
            seconds,
            (scale_seconds, scale_warmup),
            out,
            plot=plot,
            telemetry=telemetry_rounds,
            network=network,
            quick=args.quick,
        )
    except RedisServerNotFound:
        print(f"bench.py: {redis_server_hint()}", file=sys.stderr)
        return EXIT_NO_REDIS_SERVER


def run(
    sections: set[str],
    count: int,
    seconds: float,
    scale_times: tuple[float, float],
    out: Path,
    *,
    plot: bool,
    telemetry: tuple[int, int] = (9, 400),
    network: tuple[tuple[float, ...], int, str] = (RTTS_MS, 5, sys.executable),
    quick: bool = False,
) -> int:
    scale_seconds, scale_warmup = scale_times
    limit = raise_fd_limit()  # before the servers start: they inherit it

    results: dict[str, Any] = {"samples": count}
    if "network" in sections:
        # Masters of its own, in network namespaces; the loopback ones are for the rest.
        rtts, rounds, compiled = network
        results["network"] = network_section(rtts, rounds, compiled, pin, quick=quick)
    if sections - {"network"}:
        # Open (owner_only=False): the contention section resets the masters' statistics (CONFIG
        # RESETSTAT), and node-redlock and the floors are given the masters' bare addresses.
        with LocalMasters(5, owner_only=False) as cluster:
            pinning = pin(cluster)
            python = platform.python_version()
            machine = {
                "summary": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {python}, {pinning}",
                "redis_server": cluster[0].binary,
                "hiredis": HIREDIS_AVAILABLE,
                "fd_limit": limit,
            }
            results["machine"] = machine
            print(f"machine: {machine['summary']}; hiredis {HIREDIS_AVAILABLE}; {limit}", flush=True)
            if "latency" in sections:
                results["latency"] = latency_section(cluster, count)
            if "primitives" in sections:
                print("acquire+release on 5 masters: semaphore and 3-name lock against the single lock", flush=True)
                results["primitives"] = primitives_section(cluster.urls, count)
            if "contention" in sections:
                results["contention"], results["handoff"] = contention_section(cluster, seconds)
                results["waiters"] = waiters_section(cluster, seconds)
            if "scale" in sections:
                results["scale"] = scale_section(cluster, scale_seconds, scale_warmup)
            if "node" in sections:
                results["node"] = node_section(cluster, out, 5 * scale_seconds / 3, scale_warmup, rounds=3)
            if "node-contention" in sections:
                results["node_contention"] = node_contention_section(cluster, out, 5 * scale_seconds / 3, rounds=3)
            if "telemetry" in sections:
                results["telemetry"] = telemetry_section(cluster, *telemetry)
            if "native" in sections:
                results["native"] = native_section(count, percentiles, pin)

    (out / "bench.json").write_text(json.dumps(results, indent=2))
    if plot:
        chart(results, out / "bench.png")
        print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    else:
        print(f"wrote {out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
