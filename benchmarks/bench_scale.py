"""The ``scale`` section: many concurrent operations on ONE client, against the floor at the same C.

lock+unlock on distinct names with C asyncio tasks or threads on one client (5 masters),
each case a fresh client, a warm-up and then a fixed duration: ops/s, errors, p50/p99 per
op, peak open fds, client and servers' CPU per op; the floor is redis-py (or redis.asyncio)
with a pool of C connections on ONE master, plus the 5-master "send all, then read all"
floor of client CPU. Then the ratios, the CPU ceilings and the targets (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import resource
import secrets
import textwrap
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis
import redis.asyncio
from _common import TOKEN_BYTES, UNLOCK, percentiles
from redis.utils import HIREDIS_AVAILABLE

import redlock.asyncio
from redlock import Redlock
from redlock._process import proc as _proc
from redlock.servers import LocalMasters

SCALE_TASKS = (1, 10, 100, 1000)
SCALE_THREADS = (1, 8, 32)

# "2N + a few": N command and N pub/sub connections, plus the driver's own wake-up fds.
FD_SLACK = 4


class Refused(Exception):
    """An operation that did not raise but did not do its job (a False acquire, a lost delete)."""


def raise_fd_limit() -> str:
    """Soft RLIMIT_NOFILE up to the hard limit, before any server starts (they inherit it):
    the 1,000-task floor holds 1,000 sockets, and redis-server lowers its maxclients to fit
    the limit it starts with."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return f"RLIMIT_NOFILE soft {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}"


def open_fds() -> int:
    """Open file descriptors of this process, not counting the one that lists them."""
    return len(os.listdir("/proc/self/fd")) - 1


class FdPeak:
    """The most file descriptors this process held at once, sampled every ``interval`` s."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.baseline = open_fds()
        self.peak = self.baseline
        self.end = self.baseline  # set by the caller just before it closes the client
        self.after = self.baseline  # once the client is closed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="fd-sampler", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, open_fds())

    def __enter__(self) -> FdPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.after = open_fds()
        self.peak = max(self.peak, self.end, self.after)


class Tally:
    """What one phase of a scale case did: latency of every op, failures by kind."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.failures: dict[str, int] = {}
        self.first: dict[str, str] = {}
        self._lock = threading.Lock()

    def fail(self, error: BaseException) -> None:
        kind = type(error).__name__
        with self._lock:
            self.failures[kind] = self.failures.get(kind, 0) + 1
            if kind not in self.first:
                self.first[kind] = "".join(traceback.format_exception(error)).rstrip()

    @property
    def errors(self) -> int:
        return sum(self.failures.values())


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of these processes (all their threads), in seconds; a pid that is gone
    counts nothing."""
    ticks = 0
    for pid in pids:
        found = _proc.stat(pid)
        if found is not None:
            ticks += found.utime + found.stime
    return ticks / CLOCK_TICKS


def server_cores(pids: Sequence[int]) -> int:
    """The CPUs the servers may run on (the CPU they were pinned to, or all of them)."""
    cpus: set[int] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            cpus |= os.sched_getaffinity(pid)
    return len(cpus) or os.cpu_count() or 1


def scale_row(
    tally: Tally, warmup: Tally, elapsed: float, cpu: float, fds: FdPeak, *, server_cpu: float
) -> dict[str, Any]:
    done = len(tally.latencies) - tally.errors
    return {
        "ops_per_s": done / elapsed,
        "ops": done,
        "errors": tally.errors,
        "errors_by_kind": tally.failures,
        "first_error": tally.first,
        "warmup_errors": warmup.errors,
        "warmup_errors_by_kind": warmup.failures,
        "warmup_first_error": warmup.first,
        **(percentiles(tally.latencies) if tally.latencies else {"p50_ms": math.nan, "p99_ms": math.nan, "n": 0}),
        "fds_baseline": fds.baseline,
        "fds_peak": fds.peak,
        "fds_end": fds.end,
        "fds_after_close": fds.after,
        "cpu_us_per_op": cpu / max(1, len(tally.latencies)) * 1e6,
        "seconds": elapsed,
        # The redis-server processes' CPU over the same window (all masters together), and
        # each side's share of one CPU: with the servers pinned to one CPU, 1.0 is saturated.
        "server_cpu_us_per_op": server_cpu / max(1, len(tally.latencies)) * 1e6,
        "server_busy": server_cpu / elapsed if elapsed > 0 else math.nan,
        "client_busy": cpu / elapsed if elapsed > 0 else math.nan,
    }


async def run_tasks(op: Callable[[str], Awaitable[None]], tasks: int, seconds: float, prefix: str) -> Tally:
    """``tasks`` tasks, each doing ``op`` on a name of its own, again and again, for ``seconds``."""
    tally = Tally()
    until = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        done = 0
        while time.perf_counter() < until:
            started = time.perf_counter()
            try:
                await op(f"{prefix}:{index}:{done}")
            except Exception as error:
                tally.fail(error)
            tally.latencies.append(time.perf_counter() - started)
            done += 1

    await asyncio.gather(*(worker(i) for i in range(tasks)))
    return tally


def scale_async(
    open_client: Callable[[int], Any],
    op: Callable[[Any, str], Awaitable[None]],
    tasks: int,
    seconds: float,
    warmup: float,
    *,
    servers: Sequence[int] = (),
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> dict[str, Any]:
    """One client for ``tasks`` concurrent tasks: a warm-up (the fresh client's burst), then
    ``seconds`` measured; ``servers`` are the pids whose CPU time the window also reads;
    ``loop_factory`` makes another event loop than asyncio's own (uvloop's)."""

    async def run() -> dict[str, Any]:
        prefix = f"scale:{secrets.token_hex(4)}"
        with FdPeak() as fds:
            client = open_client(tasks)
            try:
                warm = await run_tasks(lambda name: op(client, name), tasks, warmup, f"{prefix}:warm")
                server_cpu = server_cpu_seconds(servers)
                cpu = time.process_time()
                started = time.perf_counter()
                tally = await run_tasks(lambda name: op(client, name), tasks, seconds, prefix)
                elapsed = time.perf_counter() - started
                cpu = time.process_time() - cpu
                server_cpu = server_cpu_seconds(servers) - server_cpu
            finally:
                fds.end = open_fds()
                await client.aclose()
                await asyncio.sleep(0.01)  # a closed transport lets go of its socket on a later loop turn
        return scale_row(tally, warm, elapsed, cpu, fds, server_cpu=server_cpu)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(run())


def run_threads(
    op: Callable[[str], None], threads: int, seconds: float, prefix: str, servers: Sequence[int] = ()
) -> tuple[Tally, float, float, float]:
    """``threads`` threads, each doing ``op`` on a name of its own, again and again, for
    ``seconds``; returns the tally, the elapsed time, the process CPU time it took and the
    CPU time the ``servers`` pids took over the same window."""
    tally = Tally()
    go = threading.Event()
    until = [0.0]

    def worker(index: int) -> None:
        go.wait()
        done = 0
        while time.perf_counter() < until[0]:
            started = time.perf_counter()
            try:
                op(f"{prefix}:{index}:{done}")
            except Exception as error:
                tally.fail(error)
            tally.latencies.append(time.perf_counter() - started)
            done += 1

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    server_cpu = server_cpu_seconds(servers)
    cpu = time.process_time()
    started = time.perf_counter()
    until[0] = started + seconds
    go.set()
    for thread in pool:
        thread.join()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return tally, elapsed, cpu, server_cpu_seconds(servers) - server_cpu


def scale_sync(
    open_client: Callable[[int], Any],
    op: Callable[[Any, str], None],
    threads: int,
    seconds: float,
    warmup: float,
    *,
    servers: Sequence[int] = (),
) -> dict[str, Any]:
    prefix = f"scale:{secrets.token_hex(4)}"
    with FdPeak() as fds:
        client = open_client(threads)
        try:
            warm, *_ = run_threads(lambda name: op(client, name), threads, warmup, f"{prefix}:warm")
            tally, elapsed, cpu, server_cpu = run_threads(
                lambda name: op(client, name), threads, seconds, prefix, servers
            )
        finally:
            fds.end = open_fds()
            client.close()
    return scale_row(tally, warm, elapsed, cpu, fds, server_cpu=server_cpu)


def redlock_op_sync(rl: Redlock, name: str) -> None:
    lock = rl.lock(name, ttl=10)
    if not lock.acquire(blocking=False):
        raise Refused("acquire returned False")
    lock.release()


async def redlock_op_async(rl: redlock.asyncio.Redlock, name: str) -> None:
    lock = rl.lock(name, ttl=10)
    if not await lock.acquire(blocking=False):
        raise Refused("acquire returned False")
    await lock.release()


class FloorSync:
    """The floor: redis-py on ONE master, SET NX PX then the compare-and-delete script."""

    def __init__(self, url: str, connections: int) -> None:
        self.client = redis.Redis(
            connection_pool=redis.BlockingConnectionPool.from_url(url, max_connections=connections)
        )
        self.unlock = self.client.register_script(UNLOCK)

    def op(self, name: str) -> None:
        token = secrets.token_hex(TOKEN_BYTES)
        if not self.client.set(name, token, nx=True, px=10_000):
            raise Refused("SET NX refused")
        if self.unlock(keys=[name], args=[token]) != 1:
            raise Refused("compare-and-delete deleted nothing")

    def close(self) -> None:
        self.client.close()
        self.client.connection_pool.disconnect()


class FloorAsync:
    """The asyncio floor: redis.asyncio on ONE master, SET NX PX then the compare-and-delete."""

    def __init__(self, url: str, connections: int) -> None:
        pool = redis.asyncio.BlockingConnectionPool.from_url(url, max_connections=connections)
        self.client = redis.asyncio.Redis(connection_pool=pool)
        self.unlock = self.client.register_script(UNLOCK)

    async def op(self, name: str) -> None:
        token = secrets.token_hex(TOKEN_BYTES)
        if not await self.client.set(name, token, nx=True, px=10_000):
            raise Refused("SET NX refused")
        if await self.unlock(keys=[name], args=[token]) != 1:
            raise Refused("compare-and-delete deleted nothing")

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.client.connection_pool.disconnect()


def send(conn: redis.Connection, *command: str | int) -> None:
    """Write one command, no reply read (redis-py leaves ``send_command`` untyped)."""
    conn.send_command(*command)  # type: ignore[no-untyped-call]


def send_all_floor(urls: list[str], seconds: float, warmup: float, servers: Sequence[int] = ()) -> dict[str, Any]:
    """The least client CPU a 5-master lock+unlock can cost with redis-py's parser: one
    thread, one raw connection per master; write the SET to all, then read every reply;
    the same for the compare-and-delete."""
    pools = [redis.ConnectionPool.from_url(url) for url in urls]
    conns = [pool.get_connection() for pool in pools]
    try:
        shas = []
        for conn in conns:
            send(conn, "SCRIPT", "LOAD", UNLOCK)
            shas.append(conn.read_response())
        prefix = f"scale:{secrets.token_hex(4)}"

        def op(name: str) -> None:
            token = secrets.token_hex(TOKEN_BYTES)
            for conn in conns:
                send(conn, "SET", name, token, "NX", "PX", 10_000)
            if sum(conn.read_response() is not None for conn in conns) != len(conns):
                raise Refused("SET NX refused")
            for conn, sha in zip(conns, shas, strict=True):
                send(conn, "EVALSHA", sha, 1, name, token)
            if sum(conn.read_response() for conn in conns) != len(conns):
                raise Refused("compare-and-delete deleted nothing")

        with FdPeak() as fds:
            warm, *_ = run_threads(op, 1, warmup, f"{prefix}:warm")
            tally, elapsed, cpu, server_cpu = run_threads(op, 1, seconds, prefix, servers)
            fds.end = open_fds()
        return scale_row(tally, warm, elapsed, cpu, fds, server_cpu=server_cpu)
    finally:
        for pool, conn in zip(pools, conns, strict=True):
            pool.release(conn)
            pool.disconnect()


# One interpreter, one GIL: however many threads, the client's Python runs on one CPU at a time.
CLIENT_CORES = 1


def scale_section(cluster: LocalMasters, seconds: float, warmup: float) -> dict[str, Any]:
    print(
        f"scale: lock+unlock on distinct names, redlock on {len(cluster.urls)} masters, floor on 1 master"
        f" with a pool of C connections; {seconds:g} s per case after a {warmup:g} s warm-up"
        " on a fresh client",
        flush=True,
    )
    print(SCALE_HEADER, flush=True)
    started = time.perf_counter()
    result = scale(cluster, seconds, warmup)
    print_scale_summary(result)
    print(f"scale section took {time.perf_counter() - started:.0f} s")
    return result


def scale(cluster: LocalMasters, seconds: float, warmup: float) -> dict[str, Any]:
    urls, one = cluster.urls, cluster.urls[0]
    servers = [pid for pid in cluster.pids if pid is not None]
    result: dict[str, Any] = {
        "masters": len(urls),
        "seconds": seconds,
        "warmup_seconds": warmup,
        "hiredis": HIREDIS_AVAILABLE,
        "client_cores": CLIENT_CORES,
        "server_cores": server_cores(servers),
        "asyncio": {},
        "sync": {},
    }
    for tasks in SCALE_TASKS:
        row: dict[str, Any] = {}
        result["asyncio"][str(tasks)] = row
        row["redlock"] = scale_async(
            lambda _: redlock.asyncio.Redlock(urls), redlock_op_async, tasks, seconds, warmup, servers=servers
        )
        row["floor"] = scale_async(
            lambda c: FloorAsync(one, c), lambda f, name: f.op(name), tasks, seconds, warmup, servers=servers
        )
        print_scale_pair("asyncio", tasks, row, flush=True)
    # On a shared machine one window's CPU time can be inflated by neighbours: measured before
    # and after the sync cases, the lower CPU/op is the floor (the conservative ratio).
    send_all_runs = [send_all_floor(urls, seconds, warmup, servers)]
    for threads in SCALE_THREADS:
        row = {}
        result["sync"][str(threads)] = row
        row["redlock"] = scale_sync(lambda _: Redlock(urls), redlock_op_sync, threads, seconds, warmup, servers=servers)
        row["floor"] = scale_sync(
            lambda c: FloorSync(one, c), lambda f, name: f.op(name), threads, seconds, warmup, servers=servers
        )
        print_scale_pair("sync", threads, row, flush=True)
    send_all_runs.append(send_all_floor(urls, seconds, warmup, servers))
    result["send_all_floor_runs"] = send_all_runs
    result["send_all_floor"] = min(send_all_runs, key=lambda row: float(row["cpu_us_per_op"]))
    result["ratios"] = scale_ratios(result)
    result["ceilings"] = scale_ceilings(result)
    return result


def ceiling(row: dict[str, Any], client_cores: int, server_cores: int) -> dict[str, Any]:
    """The ops/s each side's CPU allows at this row's CPU per op (cores / CPU seconds per op),
    the lower of the two (the binding side) and the measured ops/s against it."""

    def allows(cores: int, us_per_op: float) -> float:
        return cores / (us_per_op / 1e6) if us_per_op > 0 else math.nan

    client = allows(client_cores, row["cpu_us_per_op"])
    server = allows(server_cores, row["server_cpu_us_per_op"])
    binding = "server" if math.isnan(client) or server < client else "client"
    lower = server if binding == "server" else client
    return {
        "client_ops_per_s": client,
        "server_ops_per_s": server,
        "binding": binding,
        "lower_ops_per_s": lower,
        "ops_per_s": row["ops_per_s"],
        "ops_vs_lower": row["ops_per_s"] / lower if lower > 0 else math.nan,
    }


def scale_ceilings(result: dict[str, Any]) -> dict[str, Any]:
    client_cores, cores = result["client_cores"], result["server_cores"]

    def server_ratio(api: str, c: str) -> float:
        floor = result[api][c]["floor"]["server_cpu_us_per_op"]
        return float(result[api][c]["redlock"]["server_cpu_us_per_op"] / floor) if floor > 0 else math.nan

    return {
        "client_cores": client_cores,
        "server_cores": cores,
        **{
            api: {
                c: {client: ceiling(pair[client], client_cores, cores) for client in ("redlock", "floor")}
                for c, pair in result[api].items()
            }
            for api in ("asyncio", "sync")
        },
        "send_all_floor": ceiling(result["send_all_floor"], client_cores, cores),
        "server_cpu_vs_floor": {api: {c: server_ratio(api, c) for c in result[api]} for api in ("asyncio", "sync")},
    }


def scale_ratios(result: dict[str, Any]) -> dict[str, Any]:
    def ops(api: str, c: int, client: str = "redlock") -> float:
        return float(result[api][str(c)][client]["ops_per_s"])

    send_all = result["send_all_floor"]["cpu_us_per_op"]
    return {
        "ops_vs_floor": {
            api: {str(c): ops(api, c) / ops(api, c, "floor") for c in counts}
            for api, counts in (("asyncio", SCALE_TASKS), ("sync", SCALE_THREADS))
        },
        "asyncio_1000_vs_100": ops("asyncio", 1000) / ops("asyncio", 100),
        "floor_asyncio_1000_vs_100": ops("asyncio", 1000, "floor") / ops("asyncio", 100, "floor"),
        "sync_vs_1_thread": {str(c): ops("sync", c) / ops("sync", 1) for c in SCALE_THREADS},
        "p50_c1_vs_floor": {
            api: result[api]["1"]["redlock"]["p50_ms"] / result[api]["1"]["floor"]["p50_ms"]
            for api in ("asyncio", "sync")
        },
        "cpu_vs_send_all_floor": {
            api: {str(c): result[api][str(c)]["redlock"]["cpu_us_per_op"] / send_all for c in counts}
            for api, counts in (("asyncio", SCALE_TASKS), ("sync", SCALE_THREADS))
        },
    }


SCALE_HEADER = (
    f"{'api':8s} {'C':>5s} {'client':8s} {'ops/s':>8s} {'errors':>6s} {'warm-up':>7s} {'p50 ms':>8s} {'p99 ms':>8s}"
    f" {'fds peak':>8s} {'(+base)':>7s} {'end':>5s} {'closed':>6s} {'CPU us/op':>9s} {'vs floor':>8s}"
    f" {'srv us/op':>9s} {'busy c/s':>9s}"
)


def scale_line(api: str, c: int | str, client: str, row: dict[str, Any], versus: str = "") -> str:
    return (
        f"{api:8s} {c!s:>5s} {client:8s} {row['ops_per_s']:8.0f} {row['errors']:6d} {row['warmup_errors']:7d}"
        f" {row['p50_ms']:8.3f} {row['p99_ms']:8.2f} {row['fds_peak']:8d} {row['fds_peak'] - row['fds_baseline']:+7d}"
        f" {row['fds_end']:5d} {row['fds_after_close']:6d} {row['cpu_us_per_op']:9.1f} {versus:>8s}"
        f" {row['server_cpu_us_per_op']:9.1f} {row['client_busy']:4.2f}/{row['server_busy']:4.2f}"
    )


def print_scale_pair(api: str, c: int, pair: dict[str, Any], *, flush: bool = False) -> None:
    ratio = pair["redlock"]["ops_per_s"] / pair["floor"]["ops_per_s"] if pair["floor"]["ops_per_s"] else math.nan
    print(scale_line(api, c, "redlock", pair["redlock"], f"x{ratio:.2f}"), flush=flush)
    print(scale_line(api, c, "floor", pair["floor"]), flush=flush)


def print_scale_summary(result: dict[str, Any]) -> None:
    ratios = result["ratios"]
    send_all = result["send_all_floor"]
    masters = result["masters"]
    for run in result["send_all_floor_runs"]:
        print(scale_line("sync", 1, "send-all", run, "(5 m.)"))
    print(
        f"send-all-then-read-all floor ({masters} masters, 1 thread, raw redis-py connections, the lower of"
        f" {len(result['send_all_floor_runs'])} runs): {send_all['cpu_us_per_op']:.1f} us CPU/op,"
        f" {send_all['ops_per_s']:.0f} ops/s, p50 {send_all['p50_ms']:.3f} ms"
    )
    for api in ("asyncio", "sync"):
        cpu = ", ".join(f"C={c}: x{r:.2f}" for c, r in ratios["cpu_vs_send_all_floor"][api].items())
        print(f"  redlock {api} client CPU/op vs that floor: {cpu}")
    for api in ("asyncio", "sync"):
        versus = ", ".join(f"C={c}: x{r:.2f}" for c, r in ratios["ops_vs_floor"][api].items())
        print(f"redlock {api} ops/s vs one-master floor: {versus}")
    print(
        f"redlock asyncio C=1000 vs C=100: x{ratios['asyncio_1000_vs_100']:.2f}"
        f" (floor: x{ratios['floor_asyncio_1000_vs_100']:.2f})"
    )
    print(
        "redlock sync ops/s vs 1 thread: "
        + ", ".join(f"C={c}: x{r:.2f}" for c, r in ratios["sync_vs_1_thread"].items())
    )
    p50 = ratios["p50_c1_vs_floor"]
    print(f"single-op p50 (C=1) acquire+release vs floor: asyncio x{p50['asyncio']:.2f}, sync x{p50['sync']:.2f}")
    print_ceilings(result)

    rows = [(api, c, result[api][c]["redlock"]) for api in ("asyncio", "sync") for c in result[api]]
    everything = [
        (f"{client} {api}", c, result[api][c][client]) for api, c, _ in rows for client in ("redlock", "floor")
    ]
    fd_bound = 2 * masters + FD_SLACK
    checks = [
        (
            "zero errors at every C (warm-up included)",
            all(r["errors"] == 0 and r["warmup_errors"] == 0 for *_, r in rows),
        ),
        (
            f"open fds at most 2N+{FD_SLACK} = {fd_bound} over the baseline at every C",
            all(r["fds_peak"] - r["fds_baseline"] <= fd_bound for *_, r in rows),
        ),
        ("asyncio C=100 at least the floor's ops/s", ratios["ops_vs_floor"]["asyncio"]["100"] >= 1.0),
        ("asyncio C=1000 at least 80 % of C=100", ratios["asyncio_1000_vs_100"] >= 0.8),
        ("single-op p50 within 1.5x of the floor", max(p50.values()) <= 1.5),
        (
            "sync client CPU/op within 1.5x of the send-all floor (C=1)",
            ratios["cpu_vs_send_all_floor"]["sync"]["1"] <= 1.5,
        ),
    ]
    print("targets:")
    for label, met in checks:
        print(f"  [{'met' if met else 'MISSED'}] {label}")
    for label, c, row in everything:
        for kind, text in {**row["warmup_first_error"], **row["first_error"]}.items():
            count = row["errors_by_kind"].get(kind, 0) + row["warmup_errors_by_kind"].get(kind, 0)
            print(f"first {kind} of {label} C={c} ({count} in all):\n{textwrap.indent(text, '    ')}")


def print_ceilings(result: dict[str, Any]) -> None:
    ceilings = result["ceilings"]
    cores, masters = ceilings["server_cores"], result["masters"]
    top = str(max(int(c) for c in result["sync"]))
    print(
        f"ceiling (sync): the ops/s each side's CPU allows, cores / CPU per op; client: {ceilings['client_cores']}"
        f" core (one GIL-bound interpreter), servers: {cores} CPU{'s' if cores != 1 else ''}"
        f" (the {'CPUs they may run on' if cores != 1 else 'one they are pinned to'}, shared by all masters)"
    )
    for client, servers in (("redlock", masters), ("floor", 1)):
        row, c = result["sync"][top][client], ceilings["sync"][top][client]
        print(
            f"  {client} C={top}: client {c['client_ops_per_s']:.0f} ops/s ({row['cpu_us_per_op']:.1f} us/op),"
            f" servers ({servers} master{'s' if servers != 1 else ''}) {c['server_ops_per_s']:.0f} ops/s"
            f" ({row['server_cpu_us_per_op']:.1f} us/op); binding: {c['binding']};"
            f" busy client {row['client_busy']:.2f}, servers {row['server_busy']:.2f}"
        )
    c = ceilings["sync"][top]["redlock"]
    print(
        f"  redlock sync C={top}: {c['ops_per_s']:.0f} ops/s = {c['ops_vs_lower']:.2f} of the lower ceiling"
        f" ({c['binding']}'s, {c['lower_ops_per_s']:.0f} ops/s)"
    )
    send_all, c = result["send_all_floor"], ceilings["send_all_floor"]
    print(
        f"  send-all floor (the least client CPU a {masters}-master op costs with redis-py's parser, 1 thread):"
        f" client {c['client_ops_per_s']:.0f} ops/s ({send_all['cpu_us_per_op']:.1f} us/op),"
        f" servers {c['server_ops_per_s']:.0f} ops/s ({send_all['server_cpu_us_per_op']:.1f} us/op)"
    )
    versus = ", ".join(f"C={c}: x{r:.2f}" for c, r in ceilings["server_cpu_vs_floor"]["sync"].items())
    print(f"  servers' CPU/op, redlock ({masters} masters) vs floor (1 master), sync: {versus}")


def scale_panel(ax: Any, scale_result: dict[str, Any]) -> None:
    for api, style in (("asyncio", "o"), ("sync", "s")):
        counts = [int(c) for c in scale_result[api]]
        for client, line in (("redlock", "-"), ("floor", ":")):
            label = f"{client} {api}" + (" (1 master)" if client == "floor" else "")
            ops = [scale_result[api][str(c)][client]["ops_per_s"] for c in counts]
            ax.plot(counts, ops, line + style, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("concurrent tasks / threads on one client")
    ax.set_ylabel("lock+unlock ops/s, distinct names")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
