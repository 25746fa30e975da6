"""A short demonstration: local masters, contending clients, and a summary.

``python -m redlock.demo`` starts five redis-server masters on loopback (see
:mod:`redlock.servers`), runs several clients that each increment a shared counter with a
deliberately non-atomic read-modify-write under the lock, then kills one master and goes
on, and prints what happened: acquisitions, latency, and whether any update was lost.

Exit status: 0 when no update was lost and no client failed, 1 otherwise, 3 when a part
it needs is missing: a ``redis-server`` binary, or redis-py, which reads and writes the
shared counter (one line says how to get it; no traceback).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence

from redlock import Redlock
from redlock._extras import can_import, install_hint, redis_server_hint
from redlock._protocol.urls import redacted
from redlock.servers import LocalMasters, RedisServerNotFound

EXIT_MISSING = 3


def _percentile(samples: Sequence[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(clients: int, increments: int, masters: int) -> int:
    import redis  # noqa: PLC0415  (optional: main says which extra brings it)

    with LocalMasters(masters) as cluster, LocalMasters(1) as store_server:
        # Their passwords are nobody's business: the demo connects itself.
        print(f"started {masters} masters: {', '.join(map(redacted, cluster.urls))}")
        store = redis.Redis.from_url(store_server.urls[0])
        store.set("counter", 0)
        latencies: list[float] = []
        failures: list[BaseException] = []
        record = threading.Lock()
        rl = Redlock(cluster.urls, retry_delay=0.01)

        def client() -> None:
            try:
                for _ in range(increments):
                    lock = rl.lock("demo:counter", ttl=2.0)
                    started = time.perf_counter()
                    lock.acquire(timeout=30.0)
                    waited = time.perf_counter() - started
                    value = int(store.get("counter"))  # type: ignore[arg-type]
                    store.set("counter", value + 1)  # a lost update would show as a short count
                    lock.release()
                    with record:
                        latencies.append(waited)
            except BaseException as error:
                failures.append(error)

        def run_round(label: str) -> None:
            threads = [threading.Thread(target=client) for _ in range(clients)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
            print(f"{label}: {clients} clients x {increments} increments in {elapsed:.2f}s")

        run_round("all masters up")
        cluster[0].kill()
        print(f"killed master {redacted(cluster.urls[0])} (a minority: the lock stays available)")
        run_round("one master down")
        rl.close()

        expected = 2 * clients * increments
        counter = int(store.get("counter"))  # type: ignore[arg-type]
        store.close()
        print(f"acquisitions: {len(latencies)}, failures: {len(failures)}")
        if latencies:
            print(
                f"wait for the lock: p50 {statistics.median(latencies) * 1000:.1f} ms, "
                f"p99 {_percentile(latencies, 0.99) * 1000:.1f} ms"
            )
        verdict = "no lost update" if counter == expected else "LOST UPDATES"
        print(f"counter: {counter} of {expected} expected -> {verdict}")
        for error in failures[:3]:
            print(f"error: {error}")
        return 0 if counter == expected and not failures else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m redlock.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--increments", type=int, default=25)
    parser.add_argument("--masters", type=int, default=5)
    args = parser.parse_args(argv)
    if not can_import("redis"):
        print(f"{parser.prog}: redis-py is not installed: {install_hint('local')}", file=sys.stderr)
        return EXIT_MISSING
    try:
        return run(args.clients, args.increments, args.masters)
    except RedisServerNotFound:
        print(f"{parser.prog}: {redis_server_hint()}", file=sys.stderr)
        return EXIT_MISSING


if __name__ == "__main__":
    raise SystemExit(main())
