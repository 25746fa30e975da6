"""The ``telemetry`` section: what OpenTelemetry costs an acquire+release.

OpenTelemetry absent, installed with no SDK configured, and recording with the SDK, in
interleaved rounds, one client per case; the overhead is the median over the rounds of each
round's ratio to the absent case (target: under 10 % with the SDK).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Callable
from typing import Any

from _common import RETRY_FOR, percentiles, timed, timed_async

import redlock.asyncio
from redlock import Redlock
from redlock._api import telemetry as _telemetry
from redlock._extras import install_hint
from redlock.servers import LocalMasters


@contextlib.contextmanager
def opentelemetry_absent() -> Any:
    """Clients made inside take the path of an environment without OpenTelemetry: the one
    flag redlock._api.telemetry sets when its import fails, so the same code runs as there."""
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


def telemetry_panel(ax: Any, telemetry: dict[str, Any]) -> None:
    apis = list(telemetry)
    width = 0.8 / len(TELEMETRY_CASES)
    for index, case in enumerate(TELEMETRY_CASES):
        spots = [position + (index - 1) * width for position in range(len(apis))]
        ax.bar(spots, [telemetry[api][case]["p50_ms"] for api in apis], width=width, label=case)
    ax.set_xticks(range(len(apis)), apis)
    ax.set_ylabel("acquire+release p50 ms, by OpenTelemetry")
    ax.legend(fontsize=8)
