"""The ``latency`` and ``primitives`` sections: uncontended acquire+release against the floor.

The floor is one SET NX PX plus one Lua compare-and-delete on ONE master with plain redis-py;
the rows time the same operation with redlock on 5 masters (one of them SIGSTOPped in the
last row), and the primitives (a semaphore, a lock on 3 names, the two sides of a read-write
lock) against the single lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
from _common import RETRY_FOR, UNLOCK, percentiles, timed, timed_async

import redlock.asyncio
from redlock import Redlock
from redlock.servers import LocalMasters


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


#: What the latency rows lock: the single lock, and the other primitives beside it.
PRIMITIVES: dict[str, Callable[[Any], Any]] = {
    "lock": lambda rl: rl.lock("bench", ttl=10.0),
    "semaphore (limit 3)": lambda rl: rl.semaphore("bench:pool", 3, ttl=10.0),
    # Limit 1 needs the lock's own majority (3 of 5), limit 3 needs 4: the difference between
    # the two rows is what the larger quorum costs, the rest is the script's.
    "semaphore (limit 1)": lambda rl: rl.semaphore("bench:pool1", 1, ttl=10.0),
    "3-name lock": lambda rl: rl.lock(["bench:a", "bench:b", "bench:c"], ttl=10.0),
    # A reader's script reads the master's TIME and adds to a sorted set (as a semaphore's);
    # a writer's checks the readers' set, then sets a key (as a lock's).
    "read-write lock, read": lambda rl: rl.rwlock("bench:rw", ttl=10.0).read(),
    "read-write lock, write": lambda rl: rl.rwlock("bench:rw", ttl=10.0).write(),
}


def redlock_sync(
    urls: list[str], count: int, kind: str = "lock", *, cpu: list[float] | None = None, **kwargs: Any
) -> list[float]:
    make = PRIMITIVES[kind]
    with Redlock(urls, **kwargs) as rl:

        def once() -> None:
            lock = make(rl)
            if not lock.acquire(timeout=RETRY_FOR):
                raise RuntimeError("uncontended acquire failed")
            lock.release()

        return timed(once, count, cpu=cpu)


def redlock_async(urls: list[str], count: int, kind: str = "lock", *, cpu: list[float] | None = None) -> list[float]:
    make = PRIMITIVES[kind]

    async def run() -> list[float]:
        async with redlock.asyncio.Redlock(urls) as rl:

            async def once() -> None:
                lock = make(rl)
                if not await lock.acquire(timeout=RETRY_FOR):
                    raise RuntimeError("uncontended acquire failed")
                await lock.release()

            return await timed_async(once, count, cpu=cpu)

    return asyncio.run(run())


#: The target: a semaphore or a 3-name lock within 1.3x of the single lock's p50.
PRIMITIVE_TARGET = 1.3


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


def latency_panel(
    ax: Any, latency: dict[str, Any], xlabel: str = "ms per acquire+release (hung: acquire only)"
) -> None:
    names = list(latency)
    positions = range(len(names))
    ax.barh([p - 0.2 for p in positions], [latency[n]["p50_ms"] for n in names], height=0.4, label="p50")
    ax.barh([p + 0.2 for p in positions], [latency[n]["p99_ms"] for n in names], height=0.4, label="p99")
    ax.set_yticks(list(positions), names, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.legend()
