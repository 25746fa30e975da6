"""What every section of the benchmark uses: the compare-and-delete of the floors, and timing.

The sections (bench_latency.py, bench_contention.py, bench_scale.py, bench_telemetry.py) are
run by bench.py, whose docstring says what each measures; these modules sit beside it and are
imported as top-level modules (``python benchmarks/bench.py`` puts this directory first on
``sys.path``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

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


def timed(operation: Callable[[], object], count: int, warmup: int = 50, cpu: list[float] | None = None) -> list[float]:
    """``count`` durations of ``operation`` after ``warmup`` untimed calls; with ``cpu``, the
    process CPU time of the timed calls is appended to it (the client's set-up left out)."""
    for _ in range(warmup):
        operation()
    samples = []
    spent = time.process_time()
    for _ in range(count):
        started = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - started)
    if cpu is not None:
        cpu.append(time.process_time() - spent)
    return samples


async def timed_async(
    operation: Callable[[], Any], count: int, warmup: int = 50, cpu: list[float] | None = None
) -> list[float]:
    """:func:`timed` for a coroutine function."""
    for _ in range(warmup):
        await operation()
    samples = []
    spent = time.process_time()
    for _ in range(count):
        started = time.perf_counter()
        await operation()
        samples.append(time.perf_counter() - started)
    if cpu is not None:
        cpu.append(time.process_time() - spent)
    return samples
