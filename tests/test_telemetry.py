"""OpenTelemetry metrics and spans, and the ``redlock`` logger, on real masters, for both APIs.

Measurements go to the real OpenTelemetry SDK, read back through its in-memory metric reader
and span exporter; each test has providers of its own, passed to the client (the global
providers are tried in a process of their own, since they can be set once per process).
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import redlock
from redlock import ClientClosed, LockLost, MasterMisconfigured, QuorumUnavailable
from redlock._api import telemetry as _telemetry
from redlock._protocol.config import Credentials
from redlock._protocol.connection import CLOSED, Link, Submit
from redlock._protocol.core import Command, Round
from redlock.servers import LocalMasters

from .cli_helpers import PATIENCE, without_modules
from .conftest import ClientFactory, MastersFactory, eventually, unique

Point = HistogramDataPoint | NumberDataPoint


class Telemetry:
    """A meter provider and a tracer provider of the SDK, read back in memory."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def providers(self) -> dict[str, Any]:
        return {"meter_provider": self.meter_provider, "tracer_provider": self.tracer_provider}

    def metrics(self) -> dict[str, Any]:
        """Every metric collected now, by name."""
        data = self.reader.get_metrics_data()
        found: dict[str, Any] = {}
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                assert scope.scope.name == "redlock"
                assert scope.scope.version == redlock.__version__
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str, **attributes: object) -> list[Point]:
        """The data points of metric ``name`` whose attributes include ``attributes``
        (dots in attribute names are written as double underscores)."""
        metric = self.metrics().get(name)
        if metric is None:
            return []
        wanted = {key.replace("__", "."): value for key, value in attributes.items()}
        return [
            point
            for point in metric.data.data_points
            if all(point.attributes.get(key) == value for key, value in wanted.items())
        ]

    def count(self, name: str, **attributes: object) -> int:
        """Measurements in a histogram, or the sum of a counter, over the matching points."""
        return sum(
            int(point.count) if isinstance(point, HistogramDataPoint) else int(point.value)
            for point in self.points(name, **attributes)
        )

    def spans(self, name: str) -> list[ReadableSpan]:
        _telemetry.flush()  # spans are made off the callers' path, by the library's reporter
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def shutdown(self) -> None:
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    telemetry = Telemetry()
    yield telemetry
    telemetry.shutdown()


def ports(cluster: LocalMasters) -> list[int]:
    return [master.port for master in cluster]


# --- metrics and spans of the operations --------------------------------------------------------


def test_an_acquire_extend_and_release_are_measured_and_traced(
    client: ClientFactory, masters: LocalMasters, otel: Telemetry
) -> None:
    # node_timeout 1 s: every master is to answer every round, also one that a loaded
    # machine (four test workers on two cores) keeps waiting past the usual 0.1 s.
    rl = client(masters.urls, node_timeout=1.0, **otel.providers)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    assert otel.count("redlock.lock.held") == 1
    lock.extend()
    lock.release()
    # A round returns once a majority answered: the others' replies, and the request durations
    # recorded as they come, may still be on their way (on a loaded machine, for a while).
    steps = ("acquire", "extend", "release")
    assert eventually(
        lambda: all(
            len(otel.points("redlock.master.request.duration", redlock__round__step=step)) == len(ports(masters))
            for step in steps
        )
    )

    found = otel.metrics()
    units = {name: metric.unit for name, metric in found.items()}
    assert units == {
        "redlock.acquire.duration": "s",
        "redlock.acquire.attempts": "{attempt}",
        "redlock.validity.remaining": "s",
        "redlock.extend.duration": "s",
        "redlock.release.duration": "s",
        "redlock.master.request.duration": "s",
        "redlock.master.connections": "{connection}",
        "redlock.lock.held": "{lock}",
    }
    assert otel.count("redlock.acquire.duration", redlock__outcome="acquired") == 1
    assert otel.count("redlock.acquire.attempts", redlock__outcome="acquired") == 1
    assert otel.count("redlock.extend.duration", redlock__outcome="extended") == 1
    assert otel.count("redlock.release.duration", redlock__outcome="released") == 1
    assert otel.count("redlock.lock.held") == 0
    [validity] = otel.points("redlock.validity.remaining")
    assert isinstance(validity, HistogramDataPoint)
    assert 9.0 < validity.sum <= 10.0
    [acquire] = otel.points("redlock.acquire.duration")
    assert isinstance(acquire, HistogramDataPoint)
    assert acquire.explicit_bounds[0] < 0.001  # a loopback round is well under a millisecond
    # Every master answered every round: one request duration each, per step, by address.
    for step in steps:
        requests = otel.points("redlock.master.request.duration", redlock__round__step=step)
        assert sorted(point.attributes["server.port"] for point in requests) == sorted(ports(masters))
        assert {point.attributes["server.address"] for point in requests} == {"127.0.0.1"}
        assert all(isinstance(point, HistogramDataPoint) and point.count == 1 for point in requests)
    connections = otel.points("redlock.master.connections", redlock__connection__kind="command")
    assert sorted(point.attributes["server.port"] for point in connections) == sorted(ports(masters))
    assert all(isinstance(point, NumberDataPoint) and point.value == 1 for point in connections)
    # No metric carries the lock's name: one series per name would swamp a metrics store.
    for metric in found.values():
        for point in metric.data.data_points:
            assert lock.name not in map(str, point.attributes.values())

    for operation, outcome in (("acquire", "acquired"), ("extend", "extended"), ("release", "released")):
        [span] = otel.spans(f"redlock.{operation}")
        assert span.attributes is not None
        assert span.attributes["redlock.lock.name"] == lock.name
        assert span.attributes["redlock.outcome"] == outcome
        assert span.status.status_code is StatusCode.UNSET
        [event] = span.events
        assert event.name == "redlock.round"
        assert event.attributes is not None
        assert event.attributes["redlock.round.step"] == operation
        assert event.attributes["redlock.votes.granted"] >= 3  # type: ignore[operator]  # decided at a majority
        assert event.attributes["redlock.votes.quorum"] == 3
        assert len(event.attributes["redlock.master.names"]) == 5  # type: ignore[arg-type]
        assert set(event.attributes["redlock.master.statuses"]) <= {"granted", "not awaited"}  # type: ignore[arg-type]
        assert span.start_time is not None
        assert span.end_time is not None
        assert span.start_time <= event.timestamp <= span.end_time


def test_a_restore_is_a_step_of_the_extension_not_an_extension_of_its_own(
    client: ClientFactory, fresh_masters: MastersFactory, otel: Telemetry
) -> None:
    """The renewer writes our key back on a master that restarted empty: that round is
    measured as the step ``restore``, and no extension is counted failed for it (its one
    target could never make a majority)."""
    masters = fresh_masters(3)
    rl = client(masters.urls, **otel.providers)
    lock = rl.lock(unique(), ttl=1.5, auto_extend=True)
    assert lock.acquire(blocking=False)
    masters[0].restart(wipe=True)
    with redis.Redis.from_url(masters.urls[0]) as restarted:
        assert eventually(lambda: restarted.get(lock.name) is not None)
    lock.release()
    restores = otel.points("redlock.master.request.duration", redlock__round__step="restore")
    assert [point.attributes["server.port"] for point in restores] == [masters[0].port]
    outcomes = {point.attributes["redlock.outcome"] for point in otel.points("redlock.extend.duration")}
    assert outcomes <= {"extended", "failed"}  # failed: the first, on the connection the restart broke
    assert otel.count("redlock.extend.duration", redlock__outcome="extended") >= 1
    assert otel.count("redlock.extend.duration", redlock__outcome="lost") == 0


def test_the_acquire_span_is_a_child_of_the_callers(masters: LocalMasters, otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    with redlock.Redlock(masters.urls, **otel.providers) as rl, tracer.start_as_current_span("work") as work:
        lock = rl.lock(unique())
        assert lock.acquire(blocking=False)
        lock.release()
    [acquire] = otel.spans("redlock.acquire")
    assert acquire.parent is not None
    assert acquire.parent.span_id == work.get_span_context().span_id


def test_a_lock_held_by_another_is_outcome_held(client: ClientFactory, masters: LocalMasters, otel: Telemetry) -> None:
    rl = client(masters.urls, **otel.providers)
    name = unique()
    holder = rl.lock(name)
    assert holder.acquire(blocking=False)
    assert not rl.lock(name).acquire(blocking=False)
    holder.release()
    [held] = otel.points("redlock.acquire.duration", redlock__outcome="held")
    assert "error.type" not in held.attributes  # a busy lock is no error
    [span, _] = sorted(otel.spans("redlock.acquire"), key=lambda span: span.attributes["redlock.outcome"] != "held")  # type: ignore[index]
    assert span.status.status_code is StatusCode.UNSET
    statuses = span.events[0].attributes["redlock.master.statuses"]  # type: ignore[index]
    assert "denied" in statuses  # type: ignore[operator]
    # A rollback follows where a master's answer was not awaited: it may have set our token.
    steps = [event.attributes["redlock.round.step"] for event in span.events]  # type: ignore[index]
    assert steps in (["acquire"], ["acquire", "rollback"])


def test_masters_down_are_outcome_unavailable_counted_and_logged_once(
    client: ClientFactory, fresh_masters: MastersFactory, otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redlock")
    cluster = fresh_masters(3)
    rl = client(cluster.urls, **otel.providers)
    lock = rl.lock(unique())
    assert lock.acquire(blocking=False)
    lock.release()
    cluster[0].kill()
    cluster[1].kill()
    for _ in range(4):
        with pytest.raises(QuorumUnavailable):
            lock.acquire(blocking=False)
    [unavailable] = otel.points("redlock.acquire.duration", redlock__outcome="unavailable")
    assert unavailable.attributes["error.type"] == "QuorumUnavailable"
    assert isinstance(unavailable, HistogramDataPoint)
    assert unavailable.count == 4
    dead = {cluster[0].port, cluster[1].port}
    errors = otel.points("redlock.master.errors", redlock__node__status="unreachable")
    assert {point.attributes["server.port"] for point in errors} == dead
    assert otel.count("redlock.master.errors", server__port=cluster[2].port) == 0
    spans = [span for span in otel.spans("redlock.acquire") if span.attributes["redlock.outcome"] == "unavailable"]  # type: ignore[index]
    assert len(spans) == 4
    assert all(span.status.status_code is StatusCode.ERROR for span in spans)

    # Once per master going down, not once per round that finds it down.
    down = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert sorted(record.getMessage().split()[1] for record in down) == sorted(f"127.0.0.1:{port}" for port in dead), [
        record.getMessage() for record in down
    ]
    assert all("is unreachable" in record.getMessage() for record in down)

    cluster[0].start()

    def acquired() -> bool:
        try:
            return bool(lock.acquire(blocking=False))
        except QuorumUnavailable:
            return False  # until the client's backoff lets it try the master again

    assert eventually(acquired)
    lock.release()
    back = [record.getMessage() for record in caplog.records if "answers again" in record.getMessage()]
    assert back == [f"master 127.0.0.1:{cluster[0].port} answers again (it was unreachable)"]


def test_a_wrong_password_is_outcome_misconfigured(
    client: ClientFactory, acl_masters: LocalMasters, otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redlock")
    rl = client([master.url_as(password="wrong") for master in acl_masters], **otel.providers)
    lock = rl.lock(unique())
    for _ in range(2):
        with pytest.raises(MasterMisconfigured):
            lock.acquire(blocking=False)
    [misconfigured] = otel.points("redlock.acquire.duration", redlock__outcome="misconfigured")
    assert misconfigured.attributes["error.type"] == "MasterMisconfigured"
    errors = otel.points("redlock.master.errors", redlock__node__status="misconfigured")
    assert sorted(point.attributes["server.port"] for point in errors) == sorted(ports(acl_masters))
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == len(acl_masters), warnings
    assert all("is misconfigured" in message and "WRONGPASS" in message for message in warnings)


EVICTING = ("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")


def test_what_a_master_says_at_its_handshake_is_counted_once_per_connection(
    client: ClientFactory, fresh_masters: MastersFactory, otel: Telemetry
) -> None:
    cluster = fresh_masters(3, extra_args=EVICTING)
    rl = client(cluster.urls, **otel.providers)
    with rl.lock(unique(), timeout=3):
        pass
    rl.check()  # asks every master again: nothing new to count
    _telemetry.flush()
    findings = otel.points("redlock.master.findings", redlock__finding="evicts-keys")
    assert sorted(point.attributes["server.port"] for point in findings) == sorted(ports(cluster))
    assert {(point.attributes["redlock.finding.severity"], point.value) for point in findings} == {("warning", 1)}


def test_an_operation_cut_short_is_outcome_error(
    client: ClientFactory, masters: LocalMasters, otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="redlock")
    rl = client(masters.urls, **otel.providers)
    name = unique()
    assert rl.lock(name, ttl=30.0).acquire(blocking=False)
    failures: list[BaseException] = []

    def wait() -> None:
        try:
            rl.lock(name).acquire(timeout=30.0)
        except ClientClosed as error:
            failures.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    # Its first attempt was refused: it waits for the next one when the client closes.
    assert eventually(lambda: sum(f"acquire {name!r}, round 1" in r.getMessage() for r in caplog.records) == 2)
    rl.close()
    waiter.join(timeout=PATIENCE)
    assert len(failures) == 1
    [error] = otel.points("redlock.acquire.duration", redlock__outcome="error")
    assert error.attributes["error.type"] == "ClientClosed"
    [span] = [span for span in otel.spans("redlock.acquire") if span.attributes["redlock.outcome"] == "error"]  # type: ignore[index]
    assert span.status.status_code is StatusCode.ERROR
    assert {event.name for event in span.events[:-1]} == {"redlock.round"}  # an attempt, maybe its rollback
    assert span.events[-1].name == "exception"


# --- lost locks ---------------------------------------------------------------------------------


def test_lost_locks_are_counted_and_logged_once_by_cause(
    client: ClientFactory, masters: LocalMasters, otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redlock")
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, **otel.providers)

    def held_then_deleted(lock: Any) -> Any:
        assert lock.acquire(blocking=False)
        for master in raw:
            master.delete(lock.name)
        return lock

    extended = held_then_deleted(rl.lock(unique()))
    with pytest.raises(LockLost):
        extended.extend()
    with pytest.raises(LockLost):
        extended.release()  # the same loss: counted and logged once
    [extend] = otel.spans("redlock.extend")
    assert extend.attributes["redlock.outcome"] == "lost"  # type: ignore[index]
    assert extend.status.status_code is StatusCode.ERROR

    released = held_then_deleted(rl.lock(unique()))
    with pytest.raises(LockLost):
        released.release()

    renewed = held_then_deleted(rl.lock(unique(), ttl=0.5, auto_extend=True))
    assert eventually(lambda: otel.count("redlock.lock.lost", redlock__lost__cause="extend_failed") == 2)
    with pytest.raises(LockLost):
        renewed.release()

    assert otel.count("redlock.lock.lost", redlock__lost__cause="extend_failed") == 2
    assert otel.count("redlock.lock.lost", redlock__lost__cause="release_refused") == 1
    assert otel.count("redlock.extend.duration", redlock__outcome="lost") == 2  # extend(), then the renewer's
    assert otel.count("redlock.release.duration", redlock__outcome="lost") == 3
    lost = sorted((r.levelname, r.getMessage()) for r in caplog.records if "was lost" in r.getMessage())
    # A WARNING where nobody else hears of it; where the caller gets LockLost, INFO.
    assert lost == sorted(
        [
            ("INFO", f"lock {extended.name!r} was lost: an extend found our token gone from a majority"),
            ("INFO", f"lock {released.name!r} was lost: its release found our token gone from a majority"),
            ("WARNING", f"lock {renewed.name!r} was lost: auto-extension could not renew it in time"),
        ]
    )
    for master in raw:
        master.close()


# --- logging --------------------------------------------------------------------------------------


def test_debug_logs_every_round_without_opentelemetry_configured(
    client: ClientFactory, masters: LocalMasters, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="redlock")
    rl = client(masters.urls)
    lock = rl.lock(unique())
    assert lock.acquire(blocking=False)
    lock.release()
    rounds = [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG]
    assert len(rounds) == 2
    named = re.escape(repr(lock.name))
    assert re.match(rf"acquire {named}, round 1 \(acquire\): [345] of 5 granted, quorum 3, in ", rounds[0])
    assert rounds[1].startswith(f"release {lock.name!r}, round 1 (release): ")


def test_the_library_logger_prints_nothing_by_default() -> None:
    assert any(isinstance(handler, logging.NullHandler) for handler in logging.getLogger("redlock").handlers)


# --- without OpenTelemetry, and with the global providers ---------------------------------------


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )


def checkout_env() -> dict[str, str]:
    root = str(pathlib.Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


def test_without_opentelemetry_the_library_works_and_prints_nothing(
    masters: LocalMasters, tmp_path: pathlib.Path
) -> None:
    env = without_modules(tmp_path / "shadow", checkout_env(), "opentelemetry")
    code = f"""
        import redis, redlock
        from redlock._api import telemetry as _telemetry

        assert not _telemetry.AVAILABLE
        urls = {masters.urls!r}
        try:
            redlock.Redlock(urls, meter_provider=object())
        except ValueError as error:
            assert "meter_provider" in str(error), error
        else:
            raise AssertionError("a provider without OpenTelemetry was taken")
        with redlock.Redlock(urls) as rl:
            lock = rl.lock("no-otel:{unique()}")
            assert lock.acquire(blocking=False) and lock._cluster._telemetry is None
            lock.release()
            assert lock.acquire(blocking=False)
            for url in urls:
                redis.Redis.from_url(url).delete(lock.name)
            try:
                lock.extend()  # lost: a WARNING no handler of the application shows
            except redlock.LockLost:
                pass
        print("ok")
    """
    done = run_python(code, env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


@pytest.mark.servers
def test_without_opentelemetry_what_a_master_says_is_still_judged(tmp_path: pathlib.Path) -> None:
    env = without_modules(tmp_path / "shadow", checkout_env(), "opentelemetry")
    code = f"""
        import logging, redlock
        from redlock.servers import LocalMasters

        logging.basicConfig(format="%(message)s")
        with LocalMasters(3, extra_args={EVICTING!r}) as cluster, redlock.Redlock(cluster.urls) as rl:
            with rl.lock("no-otel:{unique()}", timeout=3):
                pass
            assert rl.check().verdict is redlock.Verdict.WARNINGS
        print("ok")
    """
    done = run_python(code, env)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
    assert done.stderr.count("maxmemory-policy allkeys-lru") == 3, done.stderr


def test_the_global_providers_are_the_default(masters: LocalMasters) -> None:
    code = f"""
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        import redlock

        # A client made before the application configures OpenTelemetry reports too, once it does.
        rl = redlock.Redlock({masters.urls!r})
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        lock = rl.lock("global:{unique()}")
        assert lock.acquire(blocking=False)
        lock.release()
        rl.close()
        data = reader.get_metrics_data()
        names = {{m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}}
        assert {{"redlock.acquire.duration", "redlock.release.duration"}} <= names, names
        print("ok")
    """
    done = run_python(code, checkout_env())
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


def test_providers_are_checked(masters: LocalMasters) -> None:
    with pytest.raises(TypeError, match="meter_provider must be an opentelemetry MeterProvider"):
        redlock.Redlock(masters.urls, meter_provider=trace.NoOpTracerProvider())
    with pytest.raises(TypeError, match="tracer_provider must be an opentelemetry TracerProvider"):
        redlock.Redlock(masters.urls, tracer_provider="jaeger")


def test_a_master_is_logged_once_per_change_of_state_and_never_for_our_own_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The policy alone (no sockets): refused connects in a row are one warning; a client
    closed while a connection says its handshake is no news about the master."""
    caplog.set_level(logging.INFO, logger="redlock")
    link = Link(0, "a:1", Credentials(), hung_after=1.0)

    def attempt(now: float) -> Submit:
        round_ = Round(Command(("SET", "k", "v")), (0,), ("a:1",), quorum=1, timeout=0.1, cleanup=True)
        return link.submit(round_, now)

    for now in (0.0, 1.0, 2.0):
        assert attempt(now) is Submit.CONNECT
        link.connect_failed(ConnectionRefusedError("refused"), now)
    assert attempt(3.0) is Submit.CONNECT
    link.connected(3.0)
    link.received(b"OK", 3.0)  # the first handshake reply: it answers again
    link.lost(CLOSED, 4.0)  # closed mid-handshake (the rest of it still in flight)
    assert attempt(5.0) is Submit.CONNECT
    link.connected(5.0)
    link.lost(ClientClosed("the client was closed"), 5.0)  # closed mid-handshake
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "master a:1 is unreachable: refused"),
        ("INFO", "master a:1 answers again (it was unreachable)"),
    ]
