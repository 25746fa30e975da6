"""Contention on ONE name against node-redlock: C workers of one process loop on a blocking
acquire + release of the same name (no work under the lock), node-redlock at its default
200 ms retry delay and at 10 ms, this project's asyncio tasks and sync threads making a new
Lock per acquisition (as a request handler does), which hand the lock over to each other
(docs/algorithm.md, "Handing a lock over"). Acquisitions per second, fairness (the fewest
acquisitions of a worker over the mean: 1.0 is perfectly fair) and client CPU per
acquisition, each the median of ``rounds`` interleaved rounds. Needs node and npm, as the
node section does.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench_node import node_setup

import redlock.asyncio
from redlock import Redlock
from redlock.servers import LocalMasters

CONCURRENCY = (8, 64)
#: node-redlock's retry delays: its default, and one short enough to hand over quickly.
NODE_DELAYS_MS = (200, 10)


def _row(counts: list[int], elapsed: float, cpu: float) -> dict[str, Any]:
    total = sum(counts)
    mean = total / len(counts)
    return {
        "acq_per_s": total / elapsed,
        "fairness": min(counts) / mean if mean else 0.0,
        "cpu_us_per_acq": cpu / total * 1e6 if total else None,
    }


def node_contended(script: Path, cluster: LocalMasters, workers: int, seconds: float, delay_ms: int) -> dict[str, Any]:
    masters = json.dumps([f"{master.host}:{master.port}" for master in cluster])
    done = subprocess.run(
        ["node", str(script), masters, str(workers), str(seconds), "0.5", str(delay_ms)],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=True,
    )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    counts = row["per_loop"]
    mean = sum(counts) / len(counts)
    return {
        "acq_per_s": row["ops_per_s"],
        "fairness": min(counts) / mean if mean else 0.0,
        "cpu_us_per_acq": row["cpu_us_per_op"],
    }


def async_contended(cluster: LocalMasters, workers: int, seconds: float) -> dict[str, Any]:
    name = f"contended:{secrets.token_hex(4)}"

    async def run() -> dict[str, Any]:
        async with redlock.asyncio.Redlock(cluster.urls) as rl:
            counts = [0] * workers

            async def worker(index: int, until: float, count: bool) -> None:
                while time.perf_counter() < until:
                    lock = rl.lock(name, ttl=10)
                    if await lock.acquire(timeout=max(0.01, until - time.perf_counter())):
                        if count:
                            counts[index] += 1
                        await lock.release()

            warm = time.perf_counter() + 0.5
            await asyncio.gather(*(worker(i, warm, False) for i in range(workers)))
            cpu, started = time.process_time(), time.perf_counter()
            until = started + seconds
            await asyncio.gather(*(worker(i, until, True) for i in range(workers)))
            return _row(counts, time.perf_counter() - started, time.process_time() - cpu)

    return asyncio.run(run())


def sync_contended(cluster: LocalMasters, workers: int, seconds: float) -> dict[str, Any]:
    name = f"contended:{secrets.token_hex(4)}"
    with Redlock(cluster.urls) as rl:
        counts = [0] * workers

        def worker(index: int, until: float, count: bool) -> None:
            while time.perf_counter() < until:
                lock = rl.lock(name, ttl=10)
                if lock.acquire(timeout=max(0.01, until - time.perf_counter())):
                    if count:
                        counts[index] += 1
                    lock.release()

        def run_all(until: float, count: bool) -> None:
            threads = [threading.Thread(target=worker, args=(i, until, count)) for i in range(workers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        run_all(time.perf_counter() + 0.5, False)
        cpu, started = time.process_time(), time.perf_counter()
        run_all(started + seconds, True)
        return _row(counts, time.perf_counter() - started, time.process_time() - cpu)


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda row: row["acq_per_s"])
    middle = dict(ordered[len(ordered) // 2])
    middle["acq_per_s_rounds"] = [round(row["acq_per_s"]) for row in rows]
    return middle


def node_contention_section(cluster: LocalMasters, out: Path, seconds: float, rounds: int) -> dict[str, Any]:
    script, why = node_setup(out / "node")
    if script is None:
        print(f"node-contention section skipped: {why}", flush=True)
        return {"skipped": why}
    heading = f"contention on one name, {rounds} interleaved rounds of {seconds:g}s (acq/s, fairness, CPU/acq):"
    print(heading, flush=True)
    result: dict[str, Any] = {}
    for workers in CONCURRENCY:
        runs: dict[str, list[dict[str, Any]]] = {f"node-redlock {d} ms": [] for d in NODE_DELAYS_MS}
        runs["asyncio"], runs["sync"] = [], []
        for _ in range(rounds):
            for delay in NODE_DELAYS_MS:
                runs[f"node-redlock {delay} ms"].append(node_contended(script, cluster, workers, seconds, delay))
            runs["asyncio"].append(async_contended(cluster, workers, seconds))
            runs["sync"].append(sync_contended(cluster, workers, seconds))
        row = {client: _median(rows) for client, rows in runs.items()}
        best_node = max(row[f"node-redlock {d} ms"]["acq_per_s"] for d in NODE_DELAYS_MS)
        for client in ("asyncio", "sync"):
            row[client]["ratio_to_best_node"] = row[client]["acq_per_s"] / best_node
        result[str(workers)] = row
        line = f"  C={workers:<3}"
        for client, mine in row.items():
            ratio = f" ({mine['ratio_to_best_node']:.2f}x)" if "ratio_to_best_node" in mine else ""
            line += (
                f" | {client} {mine['acq_per_s']:6,.0f}{ratio} fair {mine['fairness']:.2f}"
                f" cpu {mine['cpu_us_per_acq'] or 0:4.0f} us"
            )
        print(line, flush=True)
    return result
