"""Redlock against the physical floor, measured side by side in one run.

    python benchmarks/bench.py [--quick] [--out benchmarks/out]

Starts its own masters (redlock.servers) and prints p50/p99 for:

* floor: one SET NX PX + one Lua compare-and-delete on ONE master with plain redis-py
  (sync and asyncio): what any lock costs at the least;
* acquire+release on 5 masters, sync and asyncio, and the ratio to the floor;
* acquire+release while one of the 5 masters is SIGSTOPped, against the same floor (a round
  is decided by the other four; about node_timeout at worst, never a hang);
* contended throughput, 8 clients on one name, against redis-py's single-node Lock in the
  same run, with each client's share;
* handoff: from the start of a release to the next holder's acquire returning, 8 waiters,
  with wake-up on release and with plain polling.

Writes bench.json and bench.png to --out (bench.png needs matplotlib, from the [bench]
extra; without it the run says so once and writes bench.json alone). On a machine with 2 or more CPUs the servers are
pinned to one CPU and this process to another (sched_setaffinity, as taskset does), since a
same-CPU round trip and a cross-CPU one can differ several times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
from redis.lock import Lock as RedisPyLock

import redlock.asyncio
from redlock import Redlock, RedlockError
from redlock._extras import install_hint, redis_server_hint
from redlock.servers import LocalMasters, RedisServerNotFound

EXIT_NO_REDIS_SERVER = 3

UNLOCK = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


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


def redlock_sync(urls: list[str], count: int, **kwargs: Any) -> list[float]:
    with Redlock(urls, **kwargs) as rl:

        def once() -> None:
            lock = rl.lock("bench", ttl=10.0)
            if not lock.acquire(blocking=False):
                raise RuntimeError("uncontended acquire failed")
            lock.release()

        return timed(once, count)


def redlock_async(urls: list[str], count: int) -> list[float]:
    async def run() -> list[float]:
        async with redlock.asyncio.Redlock(urls) as rl:

            async def once() -> None:
                lock = rl.lock("bench", ttl=10.0)
                if not await lock.acquire(blocking=False):
                    raise RuntimeError("uncontended acquire failed")
                await lock.release()

            return await timed_async(once, count)

    return asyncio.run(run())


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


# --- report ---------------------------------------------------------------------------------


def can_chart() -> bool:
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ModuleNotFoundError as missing:
        if missing.name is None or missing.name.split(".")[0] != "matplotlib":
            raise
        return False
    return True


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 (optional: see can_chart)

    matplotlib.use("Agg")  # files only, no display; must precede pyplot
    import matplotlib.pyplot as plt  # noqa: PLC0415

    latency = results["latency"]
    names = list(latency)
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.8))
    positions = range(len(names))
    left.barh([p - 0.2 for p in positions], [latency[n]["p50_ms"] for n in names], height=0.4, label="p50")
    left.barh([p + 0.2 for p in positions], [latency[n]["p99_ms"] for n in names], height=0.4, label="p99")
    left.set_yticks(list(positions), names, fontsize=8)
    left.set_xlabel("ms per acquire+release")
    left.legend()
    contention = results["contention"]
    labels = list(contention)
    middle.bar(labels, [contention[k]["throughput_per_s"] for k in labels])
    middle.set_ylabel("acquisitions/s, 8 clients, one name")
    middle.tick_params(axis="x", rotation=15, labelsize=8)
    handoff = results["handoff"]
    labels = list(handoff)
    spots = range(len(labels))
    right.bar([p - 0.2 for p in spots], [handoff[k]["handoff"]["p50_ms"] for k in labels], width=0.4, label="p50")
    right.bar([p + 0.2 for p in spots], [handoff[k]["handoff"]["p99_ms"] for k in labels], width=0.4, label="p99")
    right.set_xticks(list(spots), labels, rotation=15, fontsize=8)
    right.set_ylabel("handoff ms: release -> next holder")
    right.legend()
    fig.suptitle(f"redlock-quorum benchmark: {results['machine']['summary']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, shorter contention runs")
    parser.add_argument("--out", default="benchmarks/out")
    args = parser.parse_args(argv)
    count = 300 if args.quick else 2000
    seconds = 2.0 if args.quick else 6.0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot = can_chart()
    if not plot:
        print(f"bench.png skipped: matplotlib is not installed; {install_hint('bench')}", file=sys.stderr)
    try:
        return run(count, seconds, out, plot=plot)
    except RedisServerNotFound:
        print(f"bench.py: {redis_server_hint()}", file=sys.stderr)
        return EXIT_NO_REDIS_SERVER


def run(count: int, seconds: float, out: Path, *, plot: bool) -> int:
    with LocalMasters(5) as cluster:
        pinning = pin(cluster)
        machine = {
            "summary": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {pinning}",
            "redis_server": cluster[0].binary,
        }
        print(f"machine: {machine['summary']}", flush=True)
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

    results = {"machine": machine, "latency": latency, "contention": contention, "handoff": handoff, "samples": count}
    (out / "bench.json").write_text(json.dumps(results, indent=2))
    if plot:
        chart(results, out / "bench.png")
        print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    else:
        print(f"wrote {out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
