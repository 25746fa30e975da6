"""The node section: node-redlock against redlock-quorum on the same five masters.

node-redlock (the maintained ``@sesamecare-oss/redlock`` fork, on ioredis) is the best
Redlock client outside Python, so it is the anchor of the speed issue: lock+unlock on
distinct names, non-blocking, at C = 1, 10, 100, 1000 concurrent loops. At each C the three
clients run in turn on the same masters in the same run, interleaved over ``rounds`` rounds,
and each is reported by its median round: ops/s, p50 of one lock+unlock and client CPU per
op. node-redlock runs in a process of its own (node), pinned where this process is.

Needs ``node`` and ``npm``: the packages of ``benchmarks/node/package.json`` are installed
once into a scratch folder (``--out``'s ``node/``); where either is missing, or the install
fails (no registry), the section says why and is skipped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench_scale import redlock_op_async, redlock_op_sync, scale_async, scale_sync

import redlock.asyncio
from redlock import Redlock
from redlock.servers import LocalMasters

try:
    import uvloop
except ImportError:  # (the bench extra brings it; without it the row is left out)
    uvloop = None  # type: ignore[assignment]

HERE = Path(__file__).resolve().parent / "node"
#: Our clients, beside node-redlock: asyncio on its own loop and on uvloop (uvicorn's), sync.
CLIENTS = ("asyncio", "uvloop", "sync")
CONCURRENCY = (1, 10, 100, 1000)
#: Threads beyond this add nothing on one interpreter (issue 9): the sync client stops here.
SYNC_CONCURRENCY = (1, 10)


def node_setup(scratch: Path) -> tuple[Path | None, str]:
    """The script to run with node, installed with its packages in ``scratch``; or None and why not."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return None, "node and npm are not both on PATH"
    scratch.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "redlock_bench.js"):
        shutil.copyfile(HERE / name, scratch / name)
    if not (scratch / "node_modules" / "@sesamecare-oss" / "redlock").exists():
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            return None, f"npm install failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"
    return scratch / "redlock_bench.js", ""


def run_node(script: Path, cluster: LocalMasters, concurrency: int, seconds: float, warmup: float) -> dict[str, Any]:
    masters = json.dumps([f"{master.host}:{master.port}" for master in cluster])
    done = subprocess.run(
        ["node", str(script), masters, str(concurrency), str(seconds), str(warmup)],
        capture_output=True,
        text=True,
        timeout=seconds + warmup + 120,
        check=True,
    )
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "ops_per_s": row["ops_per_s"],
        "p50_ms": (row["p50_us"] or 0) / 1000,
        "p99_ms": (row["p99_us"] or 0) / 1000,
        "cpu_us_per_op": row["cpu_us_per_op"],
        "errors": row["errors"],
    }


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median ops/s, and the spread of ops/s across rounds."""
    ordered = sorted(rows, key=lambda row: row["ops_per_s"])
    middle = dict(ordered[len(ordered) // 2])
    middle["ops_per_s_rounds"] = [round(row["ops_per_s"]) for row in rows]
    return middle


def node_section(cluster: LocalMasters, out: Path, seconds: float, warmup: float, rounds: int) -> dict[str, Any]:
    script, why = node_setup(out / "node")
    if script is None:
        print(f"node section skipped: {why}", flush=True)
        return {"skipped": why}
    servers = [pid for pid in cluster.pids if pid is not None]
    result: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "rows": {}}
    core = "compiled (mypyc)" if redlock.compiled else "pure Python"
    loops = "asyncio's own loop" + ("" if uvloop is None else " and uvloop")
    print(
        f"node-redlock vs redlock-quorum ({core} core; {loops}), lock+unlock on distinct names,"
        f" {rounds} interleaved rounds:",
        flush=True,
    )
    result["compiled"] = redlock.compiled
    for concurrency in CONCURRENCY:
        runs: dict[str, list[dict[str, Any]]] = {"node-redlock": [], "asyncio": []}
        if uvloop is not None:
            runs["uvloop"] = []
        if concurrency in SYNC_CONCURRENCY:
            runs["sync"] = []
        for _ in range(rounds):
            runs["node-redlock"].append(run_node(script, cluster, concurrency, seconds, warmup))
            runs["asyncio"].append(
                scale_async(
                    lambda _tasks: redlock.asyncio.Redlock(cluster.urls),
                    redlock_op_async,
                    concurrency,
                    seconds,
                    warmup,
                    servers=servers,
                )
            )
            if uvloop is not None:
                runs["uvloop"].append(
                    scale_async(
                        lambda _tasks: redlock.asyncio.Redlock(cluster.urls),
                        redlock_op_async,
                        concurrency,
                        seconds,
                        warmup,
                        servers=servers,
                        loop_factory=uvloop.new_event_loop,
                    )
                )
            if "sync" in runs:
                runs["sync"].append(
                    scale_sync(
                        lambda _threads: Redlock(cluster.urls),
                        redlock_op_sync,
                        concurrency,
                        seconds,
                        warmup,
                        servers=servers,
                    )
                )
        row = {client: _median_row(rows) for client, rows in runs.items()}
        anchor = row["node-redlock"]
        for client in CLIENTS:
            if client in row:
                row[client]["ops_ratio"] = row[client]["ops_per_s"] / anchor["ops_per_s"]
                row[client]["p50_ratio"] = row[client]["p50_ms"] / anchor["p50_ms"] if anchor["p50_ms"] else None
        result["rows"][concurrency] = row
        print_node_row(concurrency, row)
    return result


def print_node_row(concurrency: int, row: dict[str, Any]) -> None:
    anchor = row["node-redlock"]
    line = (
        f"  C={concurrency:<5} node-redlock {anchor['ops_per_s']:8,.0f} ops/s p50 {anchor['p50_ms'] * 1000:6.0f} us"
        f" cpu {anchor['cpu_us_per_op'] or 0:5.0f} us/op"
    )
    for client in CLIENTS:
        if client in row:
            mine = row[client]
            line += (
                f" | {client} {mine['ops_per_s']:8,.0f} ({mine['ops_ratio']:.2f}x)"
                f" p50 {mine['p50_ms'] * 1000:6.0f} us cpu {mine['cpu_us_per_op']:5.0f} us/op"
            )
    print(line, flush=True)


def node_panel(ax: Any, result: dict[str, Any]) -> None:
    if "rows" not in result:
        ax.set_title(f"node section skipped: {result.get('skipped', '')}", fontsize=8)
        return
    levels = sorted(result["rows"], key=int)
    for client in ("node-redlock", *CLIENTS):
        points = [(int(c), result["rows"][c][client]["ops_per_s"]) for c in levels if client in result["rows"][c]]
        ax.plot([c for c, _ in points], [ops for _, ops in points], marker="o", label=client)
    ax.set_xscale("log")
    ax.set_xlabel("concurrent loops (C)")
    ax.set_ylabel("lock+unlock ops/s (median round)")
    ax.set_title("against node-redlock, same 5 masters", fontsize=9)
    ax.legend(fontsize=8)
