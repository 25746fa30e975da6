"""The ``network`` section: what the costly pieces buy when the masters are a round trip away.

Whether two costly pieces pay for their complexity on a network, not only on loopback:
the mypyc build (``REDLOCK_COMPILE=1``: the core and the drivers compiled) and the early
handover (:class:`redlock._protocol.core.Handoff`: a release swaps its token for a waiting
Lock's of the same client in one round). Each is measured against its absence, side by side:

* the builds: one interpreter whose redlock is a compiled install (``--compiled``), run as
  is and with ``REDLOCK_PURE=1`` (the same install's sources), so nothing else differs:
  acquire+release latency of one client (sync and asyncio) with its CPU per operation, and
  throughput of :data:`THREADS` threads and :data:`TASKS` tasks on distinct names;
* the handover: :data:`WAITERS` threads of one process contending for one name, on the
  sources (``REDLOCK_PURE=1``, this checkout's), with the handover and with it patched out
  (the lock kind's ``hands_over`` made False in the worker process, which is what a build
  without it would do: the release wakes the waiter, which then acquires by itself):
  acquisitions/s and the time from a release's start to the next waiter's grant.

The network: the five masters and the client each in a network namespace of their own
(:class:`chaos.netns.Network`: veths to a bridge, addresses of a private range), the client
process started inside its namespace for every measurement. The round trip is made by a
``netem`` delay qdisc on every endpoint (half of it each way) where the kernel has netem,
else by :file:`delay_relay.c`, a small C relay in a namespace of its own between the client
and the masters that delivers each chunk half the round trip after it arrived, each way
(the kernel's refusal is printed; the relay runs on the masters' CPU). Every case runs in
``rounds`` interleaved A/B rounds (the order alternating), each a fresh process; the
figures are the medians over the rounds with their spread (min to max), since the 2 CPUs are
shared with other work.

This file is also the worker: ``python bench_network.py CASE URL...`` runs one case in the
current process and prints its figures as JSON (bench.py's section starts it inside the
client's namespace).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RTTS_MS = (0.2, 1.0)
THREADS = 16
TASKS = 256
WAITERS = 8
BUILD_CASES = ("sync latency", "asyncio latency", f"sync, {THREADS} threads", f"asyncio, {TASKS} tasks")
HANDOFF_CASE = f"one name, {WAITERS} waiting threads"
BUILDS = ("compiled", "pure")
HANDOFF = ("handover on", "handover off")
#: The figures summed up over the rounds, where a case has them. The share of one CPU the
#: client and the servers (the masters, and the relay if any) were busy shows which side a
#: throughput was bound by.
METRICS = (
    "p50_ms",
    "p99_ms",
    "ops_per_s",
    "cpu_us_per_op",
    "client_busy",
    "server_busy",
    "handoff_p50_ms",
    "handoff_p99_ms",
)


# --- the worker: one case, in the client's namespace ------------------------------------------


def _disable_handover() -> None:
    """What a build without the early handover does: no blocking acquire offers to take a
    holding over, so no release claims one; a release wakes this client's waiter, which then
    acquires by itself. Only the sources can be patched (REDLOCK_PURE=1)."""
    from redlock._protocol import kinds  # noqa: PLC0415 (after the build is chosen)

    kinds.LockKind.hands_over = property(lambda self: False)


def run_case(case: str, urls: list[str], count: int, seconds: float, servers: Sequence[int] = ()) -> dict[str, Any]:
    from _common import percentiles  # noqa: PLC0415
    from bench_contention import contended  # noqa: PLC0415
    from bench_latency import redlock_async, redlock_sync  # noqa: PLC0415
    from bench_scale import redlock_op_async, redlock_op_sync, scale_async, scale_sync  # noqa: PLC0415

    import redlock._protocol.core  # noqa: PLC0415
    import redlock.asyncio  # noqa: PLC0415
    from redlock import Redlock  # noqa: PLC0415
    from redlock._protocol.kinds import PLAIN  # noqa: PLC0415

    compiled = not redlock._protocol.core.__file__.endswith(".py")
    # What the run was: a compiled core or its sources, the handover there or patched out.
    row: dict[str, Any] = {"compiled": compiled, "hands_over": PLAIN.hands_over}
    if case == "ping":
        row.update(_ping(urls, count))
    elif case in ("sync latency", "asyncio latency"):
        spent: list[float] = []
        samples = (redlock_sync if case.startswith("sync") else redlock_async)(urls, count, cpu=spent)
        row.update(percentiles(samples), cpu_us_per_op=spent[0] / len(samples) * 1e6)
    elif case == BUILD_CASES[2]:
        row.update(scale_sync(lambda _: Redlock(urls), redlock_op_sync, THREADS, seconds, seconds / 4, servers=servers))
    elif case == BUILD_CASES[3]:
        row.update(
            scale_async(
                lambda _: redlock.asyncio.Redlock(urls), redlock_op_async, TASKS, seconds, seconds / 4, servers=servers
            )
        )
    elif case == HANDOFF_CASE:
        with Redlock(urls) as rl:
            cpu = time.process_time()
            found = contended(lambda: rl.lock("bench:network:handover", ttl=10.0), WAITERS, seconds)
        done = sum(found["per_client"])
        handoff = found["handoff"] or {"p50_ms": float("nan"), "p99_ms": float("nan")}
        row.update(
            ops_per_s=found["throughput_per_s"],
            handoff_p50_ms=handoff["p50_ms"],
            handoff_p99_ms=handoff["p99_ms"],
            cpu_us_per_op=(time.process_time() - cpu) / max(1, done) * 1e6,
            failed=found["failed"],
            min_share_of_mean=found["min_share_of_mean"],
        )
    else:
        raise ValueError(f"no case {case!r}")
    return row


def _ping(urls: list[str], count: int) -> dict[str, Any]:
    """The round trip the client sees: a PING's, to each master in turn."""
    import redis  # noqa: PLC0415
    from _common import percentiles, timed  # noqa: PLC0415

    samples: list[float] = []
    for url in urls:
        with redis.Redis.from_url(url) as client:
            samples += timed(client.ping, count, warmup=10)
    return {"rtt_p50_ms": percentiles(samples)["p50_ms"]}


def worker_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="one case of the network section, as JSON on stdout")
    parser.add_argument("case")
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--no-handover", action="store_true")
    parser.add_argument("--servers", default="", help="the servers' pids, comma-separated, whose CPU time to read")
    args = parser.parse_args(argv)
    if args.no_handover:
        _disable_handover()
    servers = [int(pid) for pid in args.servers.split(",") if pid]
    print(json.dumps(run_case(args.case, args.urls, args.count, args.seconds, servers)))
    return 0


# --- the section: the network, the rounds, the report ------------------------------------------


def network_section(
    rtts: Sequence[float],
    rounds: int,
    compiled_python: str,
    pin: Callable[[Any], str],
    *,
    quick: bool,
) -> dict[str, Any]:
    """Every case at every round trip of ``rtts`` (ms), in interleaved rounds; or
    ``{"skipped": reason}`` where this machine cannot make the namespaces."""
    # The chaos harness is a package of this checkout, not of the installed distribution.
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from chaos import netns  # noqa: PLC0415

    reason = netns.unavailable()
    if reason is not None:
        print(f"network section skipped: {reason}", file=sys.stderr)
        return {"skipped": reason}
    count, seconds = (30, 0.3) if quick else (400, 2.0)
    result: dict[str, Any] = {"rounds": rounds, "count": count, "seconds": seconds, "rtts": {}}
    from redlock.servers import LocalMasters  # noqa: PLC0415

    with contextlib.ExitStack() as stack:
        network = stack.enter_context(netns.Network())
        client = network.add("client")
        masters = LocalMasters(5, unix_socket=True, owner_only=False)
        stack.callback(masters.stop)
        for index, master in enumerate(masters):
            endpoint = network.add(f"m{index}")
            master.netns, master.host = endpoint.namespace, endpoint.address
        masters.start()
        result["pinning"] = pin(masters)
        netem_refused = _netem_refusal(network)
        if netem_refused is not None:
            try:
                _relay_binary()
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                print(f"network section skipped: {netem_refused}, and no relay: {exc}", file=sys.stderr)
                return {"skipped": f"{netem_refused}, and no relay: {exc}"}
        result["delay_by"] = "netem" if netem_refused is None else f"delay_relay.c ({netem_refused})"
        result["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        print(f"network: {result['machine']}; {result['pinning']}; round trip by {result['delay_by']}", flush=True)
        for rtt in rtts:
            with _round_trip(network, masters, rtt, netem=netem_refused is None) as (urls, servers):
                print(f"round trip {rtt} ms added:", flush=True)
                result["rtts"][str(rtt)] = _measure_all(
                    client.launcher, (urls, servers), compiled_python, rounds, count=count, seconds=seconds
                )
    return result


def _netem_refusal(network: Any) -> str | None:
    """Why the kernel will not add a netem qdisc, or None when it does (tried for real)."""
    from chaos.netns import _run  # noqa: PLC0415

    endpoint = network.endpoint("client")
    try:
        _run([*endpoint.launcher, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", "0ms"])
        _run([*endpoint.launcher, "tc", "qdisc", "del", "dev", "eth0", "root"])
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"the kernel refuses netem: {exc}"
    return None


@contextlib.contextmanager
def _round_trip(network: Any, masters: Any, rtt_ms: float, *, netem: bool) -> Iterator[tuple[list[str], list[int]]]:
    """The masters' URLs as the client reaches them with ``rtt_ms`` of added round trip, and
    the pids of the servers on the way (the masters, and the relay if any)."""
    pids = [pid for pid in masters.pids if pid is not None]
    from chaos.netns import _run  # noqa: PLC0415

    one_way_us = round(rtt_ms * 500)
    if netem:
        endpoints = [network.endpoint("client"), *(network.endpoint(f"m{i}") for i in range(len(masters.urls)))]
        for endpoint in endpoints:
            tc = [*endpoint.launcher, "tc", "qdisc"]
            if one_way_us:
                _run([*tc, "replace", "dev", "eth0", "root", "netem", "delay", f"{one_way_us}us"])
            else:  # (none there yet is as good)
                subprocess.run([*tc, "del", "dev", "eth0", "root"], capture_output=True, timeout=10, check=False)
        yield masters.urls, pids
        return
    relay = network.add("relay")
    binary = _relay_binary()
    port = 7000
    mappings = [f"{port + i}={m.host}:{m.port}" for i, m in enumerate(masters)]
    process = subprocess.Popen(
        [*relay.launcher, str(binary), str(one_way_us), relay.address, *mappings],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = process.stdout.readline() if process.stdout is not None else ""
        if ready.strip() != "ready":
            raise RuntimeError(f"delay_relay did not start (exit {process.poll()})")
        # On the masters' CPU: what is not the client runs beside the servers.
        with contextlib.suppress(OSError):
            os.sched_setaffinity(process.pid, os.sched_getaffinity(pids[0]))
        yield [f"redis://{relay.address}:{port + i}" for i in range(len(mappings))], [*pids, process.pid]
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def _relay_binary() -> Path:
    """delay_relay.c, compiled once per checkout (under benchmarks/out/, ignored by git)."""
    source = HERE / "delay_relay.c"
    binary = HERE / "out" / "delay_relay"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise RuntimeError("the kernel has no netem and there is no C compiler for delay_relay.c")
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], check=True, timeout=120)
    return binary


def _measure_all(
    launcher: list[str],
    reached: tuple[list[str], list[int]],
    compiled_python: str,
    rounds: int,
    *,
    count: int,
    seconds: float,
) -> dict[str, Any]:
    urls, servers = reached
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The builds: the --compiled install, as is and its sources (PYTHONPATH would put this
    # checkout's sources first); the handover: this checkout's sources, on and patched out.
    variants: dict[str, tuple[list[str], dict[str, str]]] = {
        "compiled": ([compiled_python], base),
        "pure": ([compiled_python], {**base, "REDLOCK_PURE": "1"}),
        "handover on": ([sys.executable], {**os.environ, "REDLOCK_PURE": "1"}),
        "handover off": ([sys.executable], {**os.environ, "REDLOCK_PURE": "1"}),
    }

    def once(variant: str, case: str) -> dict[str, Any]:
        python, env = variants[variant]
        argv = [*launcher, *python, str(HERE / "bench_network.py"), case, *urls]
        argv += ["--count", str(count), "--seconds", str(seconds), "--servers", ",".join(map(str, servers))]
        if variant == "handover off":
            argv.append("--no-handover")
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{variant} / {case} failed ({done.returncode}):\n{done.stderr}")
        row: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
        return row

    found: dict[str, Any] = {"rtt_p50_ms": once("compiled", "ping")["rtt_p50_ms"], "cases": {}}
    print(f"  round trip measured by PING: p50 {found['rtt_p50_ms']:.3f} ms", flush=True)
    plan = [(case, BUILDS) for case in BUILD_CASES] + [(HANDOFF_CASE, HANDOFF)]
    for case, pair in plan:
        samples: dict[str, list[dict[str, Any]]] = {variant: [] for variant in pair}
        for index in range(rounds):
            for variant in pair if index % 2 == 0 else pair[::-1]:
                samples[variant].append(once(variant, case))
        found["cases"][case] = summary = summarize(samples)
        print_case(case, summary)
    return found


def summarize(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per variant and figure: the median over the rounds and its spread; and per figure the
    median of each round's ratio of the first variant to the second."""
    first, second = samples
    summary: dict[str, Any] = {}
    for variant, rows in samples.items():
        summary[variant] = {
            "compiled": all(row["compiled"] for row in rows),
            "hands_over": all(row["hands_over"] for row in rows),
            **{
                metric: {
                    "median": statistics.median(row[metric] for row in rows),
                    "min": min(row[metric] for row in rows),
                    "max": max(row[metric] for row in rows),
                }
                for metric in METRICS
                if metric in rows[0]
            },
        }
    summary["ratio"] = {
        metric: statistics.median(a[metric] / b[metric] for a, b in zip(samples[first], samples[second], strict=True))
        for metric in METRICS
        if metric in samples[first][0] and all(b[metric] for b in samples[second])
    }
    return summary


def print_case(case: str, summary: dict[str, Any]) -> None:
    variants = [name for name in summary if name != "ratio"]
    print(f"  {case}:")
    for variant in variants:
        row = summary[variant]
        figures = "  ".join(
            f"{metric} {row[metric]['median']:.3g} [{row[metric]['min']:.3g}..{row[metric]['max']:.3g}]"
            for metric in METRICS
            if metric in row
        )
        built = (
            "" if row["compiled"] or variant != "compiled" else "  (NOT compiled: --compiled has no compiled install)"
        )
        print(f"    {variant:13s} {figures}{built}")
    ratios = "  ".join(f"{metric} {value:.2f}x" for metric, value in summary["ratio"].items())
    print(f"    {variants[0]} / {variants[1]}: {ratios}", flush=True)


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
