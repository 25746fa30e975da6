"""The ``contention`` section: 8 clients on one name, throughput and handoff latency
(and the same 8 as 7 readers and a writer of one read-write lock).

Against redis-py's single-node Lock in the same run; redlock with wake-up on release and
with plain polling. The handoff is the time from the start of a release to the next
holder's acquire returning.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
from _common import percentiles
from redis.lock import Lock as RedisPyLock

import redlock.asyncio
from redlock import Redlock, RedlockError
from redlock.servers import LocalMasters


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
        if wake:
            # The same 8 clients on one read-write lock: all readers (who never wait for each
            # other), then 7 readers and a writer that asks again as soon as it released (each
            # write waits for the readers in to leave, and keeps new ones out meanwhile).
            rw = rl.rwlock("bench:rw-contended", ttl=10.0)
            contention["redlock rwlock 8 readers"] = contended(rw.read, 8, seconds)
            sides = itertools.count()
            contention["redlock rwlock 7 readers+1 writer"] = contended(
                lambda rw=rw, sides=sides: rw.write() if next(sides) == 0 else rw.read(),  # type: ignore[misc]
                8,
                seconds,
            )
        rl.close()
    single.close()
    print("contended, 8 clients on one name, no pause between turns:")
    for name, row in contention.items():
        share = row["min_share_of_mean"]
        failed = f"  ({row['failed']} failed)" if row["failed"] else ""
        print(f"  {name:34s} {row['throughput_per_s']:8.1f} acq/s  min share {share:.2f} of mean{failed}")
    print("handoff, 8 clients, 5 ms between a client's turns (release start -> next holder's acquire returns):")
    for name, row in handoff.items():
        h = row["handoff"]
        print(
            f"  {name:34s} p50 {h['p50_ms']:7.2f} ms  p99 {h['p99_ms']:7.2f} ms  ({h['n']} handoffs,"
            f" {row['throughput_per_s']:.0f} acq/s, min share {row['min_share_of_mean']:.2f})"
        )
    return contention, handoff


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


def waiters_section(cluster: LocalMasters, seconds: float) -> dict[str, Any]:
    """Master commands per acquisition when a web service waits on one name, as it is
    usually written: a new Lock per request, every request a blocking acquire, each holder
    briefly at work. One waiter (requests one after another) against a hundred at once: the
    client's line (redlock._protocol.core.Line) should keep the hundred near the one."""
    rows: dict[str, Any] = {}
    for waiters in (1, 100):
        rows[str(waiters)] = asyncio.run(_waiting_service(cluster, waiters, seconds))
    base = rows["1"]["commands_per_acquisition"]
    for row in rows.values():
        row["ratio_to_one"] = row["commands_per_acquisition"] / base if base else None
    print("many waiters on one name (asyncio, a new Lock per request, 2 ms of work under it):")
    for label, row in rows.items():
        print(
            f"  {label:>3} waiting  {row['acquisitions_per_s']:7.1f} acq/s  "
            f"{row['commands_per_acquisition']:5.1f} commands per acquisition per master "
            f"({row['ratio_to_one']:.2f}x one waiter's), client CPU {row['cpu_ms_per_acquisition']:.2f} ms/acq"
        )
    return rows


async def _waiting_service(cluster: LocalMasters, waiters: int, seconds: float) -> dict[str, Any]:
    name = f"bench:waiters:{waiters}"
    async with redlock.asyncio.Redlock(cluster.urls) as rl:
        stop = time.perf_counter() + seconds
        acquisitions = 0

        async def request() -> None:
            nonlocal acquisitions
            while time.perf_counter() < stop:
                lock = rl.lock(name, ttl=10.0)
                if await lock.acquire(timeout=max(0.01, stop - time.perf_counter())):
                    await asyncio.sleep(0.002)
                    await lock.release()
                    acquisitions += 1

        _reset_stats(cluster)
        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(request() for _ in range(waiters)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        commands = _commands(cluster)
    return {
        "acquisitions_per_s": acquisitions / elapsed,
        "commands_per_acquisition": commands / len(cluster.urls) / max(1, acquisitions),
        "cpu_ms_per_acquisition": 1000 * cpu / max(1, acquisitions),
    }


def _reset_stats(cluster: LocalMasters) -> None:
    for url in cluster.urls:
        with redis.Redis.from_url(url) as client:
            client.config_resetstat()


def _commands(cluster: LocalMasters) -> int:
    """Commands the masters ran since their statistics were reset, but our own INFO calls
    and the subscriber's (a wake-up is a message, not a command)."""
    total = 0
    for url in cluster.urls:
        with redis.Redis.from_url(url) as client:
            stats = client.info("commandstats")
        total += sum(
            int(row["calls"])
            for command, row in stats.items()
            if command not in ("cmdstat_info", "cmdstat_config|resetstat", "cmdstat_config", "cmdstat_subscribe")
        )
    return total
