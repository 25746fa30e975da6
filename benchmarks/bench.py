"""Redlock against the physical floor, measured side by side in one run.

    python benchmarks/bench.py [--quick] [--out benchmarks/out] [--only latency|contention|scale|telemetry ...]

Starts its own masters (redlock.servers) and prints p50/p99 for:

* floor: one SET NX PX + one Lua compare-and-delete on ONE master with plain redis-py
  (sync and asyncio): what any lock costs at the least;
* acquire+release on 5 masters, sync and asyncio, and the ratio to the floor;
* acquire+release while one of the 5 masters is SIGSTOPped, against the same floor (a round
  is decided by the other four; about node_timeout at worst, never a hang);
* primitives: acquire+release of a semaphore (limit 3) and of a lock on 3 names, each against
  the single lock in the same run (interleaved), sync and asyncio, with the ratio to the
  single lock's p50 (issue 12's target: 1.3x at most);
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
  the ratios and targets of issue 9. About a minute (20 s with --quick);
* telemetry: acquire+release p50 (sync and asyncio, 5 masters) with OpenTelemetry absent,
  installed with no SDK configured (the API's no-op providers), and recording with the SDK
  (metrics into an in-memory reader, spans through a batch processor to an exporter that
  drops them), in interleaved rounds, one client per case; the overhead is the median over
  the rounds of each round's ratio to the absent case (target: under 10 % with the SDK).

Writes bench.json and bench.png to --out (bench.png needs matplotlib, from the [bench]
extra; without it the run says so once and writes bench.json alone). On a machine with 2 or more CPUs the servers are
pinned to one CPU and this process to another (sched_setaffinity, as taskset does), since a
same-CPU round trip and a cross-CPU one can differ several times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import resource
import secrets
import statistics
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
from redis.lock import Lock as RedisPyLock
from redis.utils import HIREDIS_AVAILABLE

import redlock.asyncio
from redlock import Redlock, RedlockError, _proc, _telemetry
from redlock._extras import can_import, install_hint, redis_server_hint
from redlock.servers import LocalMasters, RedisServerNotFound

EXIT_NO_REDIS_SERVER = 3

UNLOCK = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
TOKEN_BYTES = 20  # random bytes in a token, as redlock's own


#: Uncontended latency cases acquire blocking, within this: on a shared machine a stall past
#: node_timeout (a neighbour's burst on the masters' CPU) makes an attempt fail, and one
#: retried sample among hundreds leaves the p50 alone where an exception would end the run.
RETRY_FOR = 5.0


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        "n": len(ordered),
    }


def timed(operation: Callable[[], object], count: int, warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        operation()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - started)
    return samples


async def timed_async(operation: Callable[[], Any], count: int, warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        await operation()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await operation()
        samples.append(time.perf_counter() - started)
    return samples


def pin(cluster: LocalMasters) -> str:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    for pid in cluster.pids:
        if pid is not None:
            os.sched_setaffinity(pid, {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))
    return f"servers on CPU {cpus[-1]}, client on CPU {','.join(map(str, cpus[:-1]))}"


# --- floor and uncontended ------------------------------------------------------------------


def floor_sync(url: str, count: int) -> list[float]:
    client = redis.Redis.from_url(url)
    unlock = client.register_script(UNLOCK)

    def once() -> None:
        client.set("floor", "token", nx=True, px=10_000)
        unlock(keys=["floor"], args=["token"])

    try:
        return timed(once, count)
    finally:
        client.close()


def floor_async(url: str, count: int) -> list[float]:
    async def run() -> list[float]:
        client = redis.asyncio.Redis.from_url(url)
        unlock = client.register_script(UNLOCK)

        async def once() -> None:
            await client.set("floor", "token", nx=True, px=10_000)
            await unlock(keys=["floor"], args=["token"])

        try:
            return await timed_async(once, count)
        finally:
            await client.aclose()

    return asyncio.run(run())


#: What the latency rows lock: the single lock, and the issue 12 primitives beside it.
PRIMITIVES: dict[str, Callable[[Any], Any]] = {
    "lock": lambda rl: rl.lock("bench", ttl=10.0),
    "semaphore (limit 3)": lambda rl: rl.semaphore("bench:pool", 3, ttl=10.0),
    # Limit 1 needs the lock's own majority (3 of 5), limit 3 needs 4: the difference between
    # the two rows is what the larger quorum costs, the rest is the script's.
    "semaphore (limit 1)": lambda rl: rl.semaphore("bench:pool1", 1, ttl=10.0),
    "3-name lock": lambda rl: rl.lock(["bench:a", "bench:b", "bench:c"], ttl=10.0),
}


def redlock_sync(urls: list[str], count: int, kind: str = "lock", **kwargs: Any) -> list[float]:
    make = PRIMITIVES[kind]
    with Redlock(urls, **kwargs) as rl:

        def once() -> None:
            lock = make(rl)
            if not lock.acquire(timeout=RETRY_FOR):
                raise RuntimeError("uncontended acquire failed")
            lock.release()

        return timed(once, count)


def redlock_async(urls: list[str], count: int, kind: str = "lock") -> list[float]:
    make = PRIMITIVES[kind]

    async def run() -> list[float]:
        async with redlock.asyncio.Redlock(urls) as rl:

            async def once() -> None:
                lock = make(rl)
                if not await lock.acquire(timeout=RETRY_FOR):
                    raise RuntimeError("uncontended acquire failed")
                await lock.release()

            return await timed_async(once, count)

    return asyncio.run(run())


def primitives_section(urls: list[str], count: int, rounds: int = 3) -> dict[str, Any]:
    """Each primitive's acquire+release against the single lock, per API, in the same run.

    The kinds take turns (``rounds`` rounds of count/rounds each) so that a slow stretch of
    a busy machine falls on all of them alike; the ratio is to the single lock's p50.
    """
    rows: dict[str, Any] = {}
    for api, measure in (("sync", redlock_sync), ("asyncio", redlock_async)):
        samples: dict[str, list[float]] = {kind: [] for kind in PRIMITIVES}
        for _ in range(rounds):
            for kind in PRIMITIVES:
                samples[kind] += measure(urls, max(50, count // rounds), kind)
        single = percentiles(samples["lock"])["p50_ms"]
        for kind, taken in samples.items():
            row = percentiles(taken)
            row["x_lock_p50"] = row["p50_ms"] / single
            row["within_target"] = row["x_lock_p50"] <= PRIMITIVE_TARGET
            rows[f"{kind} {api}"] = row
            print(
                f"{kind + ' ' + api:40s} p50 {row['p50_ms']:8.3f} ms  p99 {row['p99_ms']:8.3f} ms"
                f"  x{row['x_lock_p50']:5.2f} lock (target x{PRIMITIVE_TARGET})"
            )
    return rows


#: Issue 12: a semaphore or a 3-name lock within 1.3x of the single lock's p50.
PRIMITIVE_TARGET = 1.3


def hung_master(cluster: LocalMasters, count: int) -> dict[str, Any]:
    """acquire+release with one master SIGSTOPped: the same operation as the floor's and the
    other rows', so that its ratio to the floor compares like with like."""
    with Redlock(cluster.urls) as rl:
        rl.lock("warm").acquire(blocking=False)
        cluster[4].pause()
        try:
            samples = []
            for index in range(count):
                lock = rl.lock(f"hung:{index}", ttl=10.0)
                started = time.perf_counter()
                if not lock.acquire(blocking=False):
                    raise RuntimeError("acquire with one hung master failed")
                lock.release()
                samples.append(time.perf_counter() - started)
        finally:
            cluster[4].resume()
        return {**percentiles(samples), "node_timeout_ms": rl.node_timeout * 1000}


# --- contention -----------------------------------------------------------------------------


def contended(make_lock: Callable[[], Any], clients: int, seconds: float, think: float = 0.0) -> dict[str, Any]:
    """``clients`` threads take the lock in turn, each holding it briefly.

    With ``think`` > 0 a client waits that long after releasing before it asks again, so the
    lock passes to one of the waiters rather than back to the releaser: that is the handoff
    the latency figures describe.
    """
    stop = time.perf_counter() + seconds
    counts = [0] * clients
    failures = [0] * clients
    events: list[tuple[float, str, int]] = []
    record = threading.Lock()

    def client(index: int) -> None:
        lock = make_lock()
        # redis-py's Lock names the wait bound blocking_timeout; ours (like threading) timeout.
        bound = "blocking_timeout" if isinstance(lock, RedisPyLock) else "timeout"
        while time.perf_counter() < stop:
            try:
                if not lock.acquire(blocking=True, **{bound: max(0.01, stop - time.perf_counter())}):
                    continue
                acquired = time.perf_counter()
                time.sleep(0.0005)  # some work under the lock
                releasing = time.perf_counter()
                lock.release()
            except (RedlockError, redis.exceptions.LockError):
                # A starved host makes masters miss node_timeout: count it, keep measuring.
                failures[index] += 1
                continue
            counts[index] += 1
            with record:
                events.append((acquired, "acquired", index))
                events.append((releasing, "release", index))
            if think:
                time.sleep(think)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    handoffs = handoff_latencies(events)
    mean = sum(counts) / clients
    return {
        "throughput_per_s": sum(counts) / elapsed,
        "per_client": counts,
        "min_share_of_mean": min(counts) / mean if mean else 0.0,
        "failed": sum(failures),
        "handoff": percentiles(handoffs) if handoffs else None,
    }


def handoff_latencies(events: list[tuple[float, str, int]]) -> list[float]:
    """For each acquire, the time since the previous holder started releasing."""
    latencies = []
    last_release: float | None = None
    for at, kind, _ in sorted(events):
        if kind == "release":
            last_release = at
        elif last_release is not None:
            latencies.append(at - last_release)
            last_release = None
    return latencies


# --- scale: many concurrent operations on one client ----------------------------------------

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
) -> dict[str, Any]:
    """One client for ``tasks`` concurrent tasks: a warm-up (the fresh client's burst), then
    ``seconds`` measured; ``servers`` are the pids whose CPU time the window also reads."""

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

    return asyncio.run(run())


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
    print("targets (issue 9):")
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


# --- report ---------------------------------------------------------------------------------


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 (optional: see can_import)

    matplotlib.use("Agg")  # files only, no display; must precede pyplot
    import matplotlib.pyplot as plt  # noqa: PLC0415

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
    if results.get("telemetry"):
        panels.append(lambda ax: telemetry_panel(ax, results["telemetry"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.4 * len(panels) + 0.6, 4.8), squeeze=False)
    for panel, ax in zip(panels, axes[0], strict=True):
        panel(ax)
    title = f"redlock-quorum benchmark: {results['machine']['summary']}"
    fig.suptitle(textwrap.fill(title, width=70 * len(panels)), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def latency_panel(ax: Any, latency: dict[str, Any]) -> None:
    names = list(latency)
    positions = range(len(names))
    ax.barh([p - 0.2 for p in positions], [latency[n]["p50_ms"] for n in names], height=0.4, label="p50")
    ax.barh([p + 0.2 for p in positions], [latency[n]["p99_ms"] for n in names], height=0.4, label="p99")
    ax.set_yticks(list(positions), names, fontsize=8)
    ax.set_xlabel("ms per acquire+release (hung: acquire only)")
    ax.legend()


def contention_panel(ax: Any, contention: dict[str, Any]) -> None:
    labels = list(contention)
    ax.bar(labels, [contention[k]["throughput_per_s"] for k in labels])
    ax.set_ylabel("acquisitions/s, 8 clients, one name")
    ax.tick_params(axis="x", rotation=15, labelsize=8)


def handoff_panel(ax: Any, handoff: dict[str, Any]) -> None:
    labels = list(handoff)
    spots = range(len(labels))
    ax.bar([p - 0.2 for p in spots], [handoff[k]["handoff"]["p50_ms"] for k in labels], width=0.4, label="p50")
    ax.bar([p + 0.2 for p in spots], [handoff[k]["handoff"]["p99_ms"] for k in labels], width=0.4, label="p99")
    ax.set_xticks(list(spots), labels, rotation=15, fontsize=8)
    ax.set_ylabel("handoff ms: release -> next holder")
    ax.legend()


def telemetry_panel(ax: Any, telemetry: dict[str, Any]) -> None:
    apis = list(telemetry)
    width = 0.8 / len(TELEMETRY_CASES)
    for index, case in enumerate(TELEMETRY_CASES):
        spots = [position + (index - 1) * width for position in range(len(apis))]
        ax.bar(spots, [telemetry[api][case]["p50_ms"] for api in apis], width=width, label=case)
    ax.set_xticks(range(len(apis)), apis)
    ax.set_ylabel("acquire+release p50 ms, by OpenTelemetry")
    ax.legend(fontsize=8)


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


SECTIONS = ("latency", "primitives", "contention", "scale", "telemetry")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, shorter contention and scale runs")
    parser.add_argument("--out", default="benchmarks/out")
    parser.add_argument(
        "--only",
        action="append",
        choices=SECTIONS,
        help="run only this section (repeatable); default: all. contention includes handoff",
    )
    args = parser.parse_args(argv)
    sections = set(args.only or SECTIONS)
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
        return run(sections, count, seconds, (scale_seconds, scale_warmup), out, plot=plot, telemetry=telemetry_rounds)
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
) -> int:
    scale_seconds, scale_warmup = scale_times
    limit = raise_fd_limit()  # before the servers start: they inherit it

    results: dict[str, Any] = {"samples": count}
    with LocalMasters(5) as cluster:
        pinning = pin(cluster)
        machine = {
            "summary": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {pinning}",
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
        if "scale" in sections:
            print(
                f"scale: lock+unlock on distinct names, redlock on {len(cluster.urls)} masters, floor on 1 master"
                f" with a pool of C connections; {scale_seconds:g} s per case after a {scale_warmup:g} s warm-up"
                " on a fresh client",
                flush=True,
            )
            print(SCALE_HEADER, flush=True)
            started = time.perf_counter()
            results["scale"] = scale(cluster, scale_seconds, scale_warmup)
            print_scale_summary(results["scale"])
            print(f"scale section took {time.perf_counter() - started:.0f} s")
        if "telemetry" in sections:
            results["telemetry"] = telemetry_section(cluster, *telemetry)

    (out / "bench.json").write_text(json.dumps(results, indent=2))
    if plot:
        chart(results, out / "bench.png")
        print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    else:
        print(f"wrote {out / 'bench.json'}")
    return 0


def latency_section(cluster: LocalMasters, count: int) -> dict[str, Any]:
    latency: dict[str, Any] = {}
    latency["floor sync (1 master)"] = percentiles(floor_sync(cluster.urls[0], count))
    latency["floor asyncio (1 master)"] = percentiles(floor_async(cluster.urls[0], count))
    latency["redlock sync (5 masters)"] = percentiles(redlock_sync(cluster.urls, count))
    latency["redlock asyncio (5 masters)"] = percentiles(redlock_async(cluster.urls, count))
    latency["redlock sync (5 masters, 1 hung)"] = hung_master(cluster, max(50, count // 10))
    floor = latency["floor sync (1 master)"]["p50_ms"]
    for name, row in latency.items():
        ratio = row["p50_ms"] / floor
        print(f"{name:40s} p50 {row['p50_ms']:8.3f} ms  p99 {row['p99_ms']:8.3f} ms  x{ratio:5.2f} floor")
    return latency


def contention_section(cluster: LocalMasters, seconds: float) -> tuple[dict[str, Any], dict[str, Any]]:
    contention: dict[str, Any] = {}
    handoff: dict[str, Any] = {}
    single = redis.Redis.from_url(cluster.urls[0])
    redis_py_lock = lambda: RedisPyLock(single, "bench:redis-py", timeout=10)  # noqa: E731
    contention["redis-py Lock (1 node)"] = contended(redis_py_lock, 8, seconds)
    handoff["redis-py Lock (1 node)"] = contended(redis_py_lock, 8, seconds, think=0.005)
    for label, wake in (("redlock wake-up", True), ("redlock polling", False)):
        rl = Redlock(cluster.urls, wake_on_release=wake)
        contention[label] = contended(lambda rl=rl: rl.lock("bench:contended", ttl=10.0), 8, seconds)  # type: ignore[misc]
        handoff[label] = contended(lambda rl=rl: rl.lock("bench:handoff", ttl=10.0), 8, seconds, think=0.005)  # type: ignore[misc]
        rl.close()
    single.close()
    print("contended, 8 clients on one name, no pause between turns:")
    for name, row in contention.items():
        share = row["min_share_of_mean"]
        failed = f"  ({row['failed']} failed)" if row["failed"] else ""
        print(f"  {name:26s} {row['throughput_per_s']:8.1f} acq/s  min share {share:.2f} of mean{failed}")
    print("handoff, 8 clients, 5 ms between a client's turns (release start -> next holder's acquire returns):")
    for name, row in handoff.items():
        h = row["handoff"]
        print(
            f"  {name:26s} p50 {h['p50_ms']:7.2f} ms  p99 {h['p99_ms']:7.2f} ms  ({h['n']} handoffs,"
            f" {row['throughput_per_s']:.0f} acq/s, min share {row['min_share_of_mean']:.2f})"
        )
    return contention, handoff


# --- telemetry ------------------------------------------------------------------------------


@contextlib.contextmanager
def opentelemetry_absent() -> Any:
    """Clients made inside take the path of an environment without OpenTelemetry: the one
    flag redlock._telemetry sets when its import fails, so the same code runs as there."""
    available, _telemetry.AVAILABLE = _telemetry.AVAILABLE, False
    try:
        yield
    finally:
        _telemetry.AVAILABLE = available


def sdk_providers() -> tuple[Any, Any] | None:
    """A meter provider and a tracer provider of the SDK that record everything and send it
    nowhere; None without the SDK."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415 (optional)
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ModuleNotFoundError:
        return None

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Drop()))
    return MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer_provider


#: "absent again" is a second client like the first: how far two identical cases differ in
#: this run is the noise the other ratios must be read against.
TELEMETRY_CASES = ("absent", "absent again", "API, no SDK", "SDK")


def telemetry_clients(make: Callable[..., Any], urls: list[str], providers: tuple[Any, Any]) -> dict[str, Any]:
    with opentelemetry_absent():
        absent = [make(urls), make(urls)]
    meter_provider, tracer_provider = providers
    sdk = make(urls, meter_provider=meter_provider, tracer_provider=tracer_provider)
    return dict(zip(TELEMETRY_CASES, (*absent, make(urls), sdk), strict=True))


def telemetry_rounds_sync(
    urls: list[str], providers: tuple[Any, Any], rounds: int, count: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    clients = telemetry_clients(Redlock, urls, providers)
    p50s: dict[str, list[float]] = {case: [] for case in clients}
    p99s: dict[str, list[float]] = {case: [] for case in clients}
    try:
        for index in range(rounds):
            for case, rl in clients.items():

                def once(rl: Redlock = rl) -> None:
                    lock = rl.lock("bench:telemetry", ttl=10.0)
                    if not lock.acquire(timeout=RETRY_FOR):
                        raise RuntimeError("uncontended acquire failed")
                    lock.release()

                row = percentiles(timed(once, count, warmup=200 if index == 0 else 20))
                p50s[case].append(row["p50_ms"])
                p99s[case].append(row["p99_ms"])
    finally:
        for rl in clients.values():
            rl.close()
    return p50s, p99s


def telemetry_rounds_async(
    urls: list[str], providers: tuple[Any, Any], rounds: int, count: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    async def run() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        clients = telemetry_clients(redlock.asyncio.Redlock, urls, providers)
        p50s: dict[str, list[float]] = {case: [] for case in clients}
        p99s: dict[str, list[float]] = {case: [] for case in clients}
        try:
            for index in range(rounds):
                for case, rl in clients.items():

                    async def once(rl: redlock.asyncio.Redlock = rl) -> None:
                        lock = rl.lock("bench:telemetry", ttl=10.0)
                        if not await lock.acquire(timeout=RETRY_FOR):
                            raise RuntimeError("uncontended acquire failed")
                        await lock.release()

                    row = percentiles(await timed_async(once, count, warmup=200 if index == 0 else 20))
                    p50s[case].append(row["p50_ms"])
                    p99s[case].append(row["p99_ms"])
        finally:
            for rl in clients.values():
                await rl.aclose()
        return p50s, p99s

    return asyncio.run(run())


def telemetry_section(cluster: LocalMasters, rounds: int, count: int) -> dict[str, Any]:
    if not _telemetry.AVAILABLE:
        print(f"telemetry: skipped, OpenTelemetry is not installed; {install_hint('bench')}", flush=True)
        return {}
    providers = sdk_providers()
    if providers is None:
        print(f"telemetry: skipped, the OpenTelemetry SDK is not installed; {install_hint('bench')}", flush=True)
        return {}
    print(
        f"telemetry: acquire+release p50 on {len(cluster.urls)} masters, {rounds} interleaved rounds of {count}"
        " per case; overhead: the median of the rounds' ratios to the absent case",
        flush=True,
    )
    result: dict[str, Any] = {}
    try:
        for api, measure in (("sync", telemetry_rounds_sync), ("asyncio", telemetry_rounds_async)):
            p50s, p99s = measure(cluster.urls, providers, rounds, count)
            row: dict[str, Any] = {}
            for case in TELEMETRY_CASES:
                ratios = [mine / off for mine, off in zip(p50s[case], p50s["absent"], strict=True)]
                row[case] = {
                    "p50_ms": statistics.median(p50s[case]),
                    "p99_ms": statistics.median(p99s[case]),
                    "round_p50s_ms": p50s[case],
                    "ratio": statistics.median(ratios),
                }
            result[api] = row
            for case in TELEMETRY_CASES:
                cells = row[case]
                print(
                    f"  {api:8s} {case:12s} p50 {cells['p50_ms']:.3f} ms (x{cells['ratio']:.3f})"
                    f"  p99 {cells['p99_ms']:.3f} ms",
                    flush=True,
                )
    finally:
        for provider in providers:
            provider.shutdown()
    sdk = max(result[api]["SDK"]["ratio"] for api in result)
    noise = max(abs(result[api]["absent again"]["ratio"] - 1) for api in result)
    verdict = "met" if sdk < 1.10 else "NOT met"
    print(
        f"  SDK overhead, worst API: {100 * (sdk - 1):+.1f} % (target under 10 %: {verdict});"
        f" noise (absent against itself): {100 * noise:.1f} %",
        flush=True,
    )
    return result


if __name__ == "__main__":
    sys.exit(main())
