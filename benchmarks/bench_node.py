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

import asyncio
import hashlib
import json
import secrets
import shutil
import subprocess
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hiredis
from _common import TOKEN_BYTES, UNLOCK
from bench_scale import Refused, redlock_op_async, redlock_op_sync, scale_async, scale_sync, send_all_floor

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
#: What the event loop alone allows (:class:`EventLoopFloor`), on each loop.
FLOORS = ("asyncio floor", "uvloop floor", "sync floor")
CONCURRENCY = (1, 10, 100, 1000)
#: Threads beyond this add nothing on one interpreter (the GIL): the sync client stops here.
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


class _FloorConnection(asyncio.BufferedProtocol):
    """One master: replies go, in order, to the callbacks of the commands that asked.

    It reads into a buffer of its own, as the library's connections do: a plain protocol's
    transport reads into a new 256 KiB bytes object each time, and whether that costs three
    system calls and a page fault per read depends on the process's malloc history (glibc's
    threshold for mapping memory), which made this floor move from run to run."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.buffer = memoryview(bytearray(65536))
        self.waiting: deque[Callable[[object], None]] = deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is not an asyncio.Transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.feed(self.buffer, 0, nbytes)
        while (reply := self.reader.gets()) is not False:
            self.waiting.popleft()(reply)


class EventLoopFloor:
    """The least client CPU a 5-master lock+unlock can cost on an event loop from Python: the
    traffic of a Redlock client (SET NX PX to every master, then the compare-and-delete
    script to every master, each waited for on all of them) and nothing else: one raw
    protocol per master, hiredis's parser and packer, no timeouts, no majority arithmetic,
    no lock objects. It writes each command as it comes, as a lone operation must: at C = 1
    a client with a lock's logic on top cannot go below it on that loop. With many tasks a
    client that sends a loop turn's commands in one write per master (this library does)
    saves system calls the floor makes, so there the floor bounds the logic's cost, not the
    sends'."""

    def __init__(self, addresses: list[tuple[str, int]]) -> None:
        self.addresses = addresses
        self.conns: list[_FloorConnection] = []
        self.sha = hashlib.sha1(UNLOCK.encode()).hexdigest()
        self._connected: asyncio.Future[None] | None = None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        conns = []
        for host, port in self.addresses:
            _, conn = await loop.create_connection(_FloorConnection, host, port)
            conns.append(conn)
        self.conns = conns
        await self._to_all(hiredis.pack_command(("SCRIPT", "LOAD", UNLOCK)))  # type: ignore[arg-type]

    async def _to_all(self, command: bytes) -> int:
        """Send ``command`` to every master; how many answered OK or 1."""
        future = asyncio.get_running_loop().create_future()
        tally = [len(self.conns), 0]

        def answered(reply: object) -> None:
            tally[0] -= 1
            tally[1] += reply in (b"OK", 1)
            if tally[0] == 0:
                future.set_result(tally[1])

        for conn in self.conns:
            conn.waiting.append(answered)
            assert conn.transport is not None
            conn.transport.write(command)
        granted: int = await future
        return granted

    async def op(self, name: str) -> None:
        if not self.conns:
            if self._connected is None:
                self._connected = asyncio.ensure_future(self._connect())
            await asyncio.shield(self._connected)
        token = secrets.token_hex(TOKEN_BYTES)
        # Text only: hiredis.pack_command makes an int text in a way a signal can crash.
        acquire = ("SET", name, token, "NX", "PX", "10000")
        if await self._to_all(hiredis.pack_command(acquire)) != len(self.conns):  # type: ignore[arg-type]
            raise Refused("SET NX refused")
        release = ("EVALSHA", self.sha, "1", name, token)
        if await self._to_all(hiredis.pack_command(release)) != len(self.conns):  # type: ignore[arg-type]
            raise Refused("compare-and-delete deleted nothing")

    async def aclose(self) -> None:
        for conn in self.conns:
            if conn.transport is not None:
                conn.transport.close()


async def floor_op(floor: EventLoopFloor, name: str) -> None:
    await floor.op(name)


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
    addresses = [(master.host, master.port) for master in cluster]
    for concurrency in CONCURRENCY:
        runs: dict[str, list[dict[str, Any]]] = {"node-redlock": [], "asyncio": []}
        if uvloop is not None:
            runs["uvloop"] = []
        if concurrency in SYNC_CONCURRENCY:
            runs["sync"] = []
        runs["asyncio floor"] = []
        if uvloop is not None:
            runs["uvloop floor"] = []
        if concurrency == 1:
            # One thread, one raw redis-py connection per master, the SETs all written and
            # then every reply read: what a lone sync lock+unlock cannot go below.
            runs["sync floor"] = []
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
            runs["asyncio floor"].append(
                scale_async(lambda _tasks: EventLoopFloor(addresses), floor_op, concurrency, seconds, warmup)
            )
            if uvloop is not None:
                runs["uvloop floor"].append(
                    scale_async(
                        lambda _tasks: EventLoopFloor(addresses),
                        floor_op,
                        concurrency,
                        seconds,
                        warmup,
                        loop_factory=uvloop.new_event_loop,
                    )
                )
            if "sync floor" in runs:
                runs["sync floor"].append(send_all_floor(cluster.urls, seconds, warmup))
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
        for client in (*CLIENTS, *FLOORS):
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
    floors = "  " + " " * len(f"C={concurrency:<5}") + " what the loop alone allows:"
    for clients, start in ((CLIENTS, line), (FLOORS, floors)):
        text = start
        for client in clients:
            if client in row:
                mine = row[client]
                text += (
                    f" | {client} {mine['ops_per_s']:8,.0f} ({mine['ops_ratio']:.2f}x)"
                    f" p50 {mine['p50_ms'] * 1000:6.0f} us cpu {mine['cpu_us_per_op']:5.0f} us/op"
                )
        print(text, flush=True)


def node_panel(ax: Any, result: dict[str, Any]) -> None:
    if "rows" not in result:
        ax.set_title(f"node section skipped: {result.get('skipped', '')}", fontsize=8)
        return
    levels = sorted(result["rows"], key=int)
    for client in ("node-redlock", *CLIENTS, *FLOORS):
        points = [(int(c), result["rows"][c][client]["ops_per_s"]) for c in levels if client in result["rows"][c]]
        style = ":" if client in FLOORS else "-"
        ax.plot([c for c, _ in points], [ops for _, ops in points], marker="o", linestyle=style, label=client)
    ax.set_xscale("log")
    ax.set_xlabel("concurrent loops (C)")
    ax.set_ylabel("lock+unlock ops/s (median round)")
    ax.set_title("against node-redlock, same 5 masters", fontsize=9)
    ax.legend(fontsize=8)
