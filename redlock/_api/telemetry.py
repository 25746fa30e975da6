"""What the lock operations report: OpenTelemetry metrics and spans, and DEBUG logs per round.

Where it sits: :mod:`redlock._api.state` hands every flow it starts (acquire, release, extend, and
auto-extension) to :func:`observe`, and both drivers run whatever comes back like any other
flow, so both APIs report the same things from this one module.

Theory of operation
-------------------
A flow yields its rounds and receives the time each one completed (see :mod:`redlock._protocol.core`),
so everything worth reporting passes through it. :func:`observe` wraps the flow in a
generator that hands every request and every time through unchanged and, on the side, times
each round and reads its outcomes, and once the flow returns, classifies its result. Each
master's request duration is taken where it is known, in the connection policy, as the reply
arrives: the wrapper hands the round a recorder (:attr:`Round.latencies
<redlock._protocol.core.Round.latencies>`), so a reply that comes after the round was decided (the
slowest master's, always) is measured too. Auto-extension is one long flow of pauses and
extends: each of its rounds is reported as an extend of its own.

The caller only measures (clock reads, a few appends); the OpenTelemetry calls, which take
microseconds each in the SDK (tens for a span), are queued and made by :class:`Reporter`, a
thread of its own, and first thing at every metrics collection. So a span is made once its
operation is over, from what was recorded: it starts at the public call, ends when the flow
returned (or was closed early: an interruption, a closed client), has the caller's current
span as parent (captured at the call), and carries one event per round, stamped with the
time that round completed.

When nothing listens (OpenTelemetry not installed, and the ``redlock`` logger not enabled
for DEBUG), :func:`observe` returns the flow as it is: an operation pays an attribute read
and an ``isEnabledFor``. With the API installed and no provider given, as long as the
application has set no global provider either (it may, later), an operation also asks the
API for the two global providers, and measures nothing (``benchmarks/bench.py --only
telemetry`` measures all three cases).

Instruments follow the OpenTelemetry semantic conventions: durations in seconds, with
buckets fine enough for sub-millisecond rounds; masters as ``server.address`` and
``server.port``; no lock names on metrics (one series per lock name would swamp any
metrics store; spans carry the name). They are made once per meter provider and shared by
the clients that report to it, since an observable instrument is registered once per name.

Logs (the ``redlock`` logger; it has a NullHandler, so nothing is printed unless the
application configures logging): WARNING when auto-extension finds a lock lost
(``redlock._api.state``; INFO when the caller gets LockLost for it anyway), when a master turns
misconfigured, unreachable or hung (``redlock._protocol.connection``, once per change of state), and
when a master's handshake shows a risk to the locks (replicas, an evicting memory policy,
fencing without an append-only file: once per connection, also counted as
``redlock.master.findings``); INFO when it answers again, DEBUG for every round.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from redlock._extras import install_hint
from redlock._protocol.config import Clock, MasterAddress
from redlock._protocol.core import Flow, Result, Round
from redlock._protocol.kinds import ALL_STEPS
from redlock._protocol.topology import Finding
from redlock.exceptions import NodeOutcome, NodeStatus

try:
    from opentelemetry import context, metrics, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # the [otel] extra is not installed: logging only
    AVAILABLE = False
else:
    AVAILABLE = True
    try:
        # What the global getters return until an application sets a provider (the proxy
        # class of the metrics API is not public; without it, the global meter provider is
        # taken as set).
        from opentelemetry.metrics._internal import _ProxyMeterProvider

        _UNSET_METERS: tuple[type, ...] = (metrics.NoOpMeterProvider, _ProxyMeterProvider)
    except ImportError:  # pragma: no cover (another version of the API)
        _UNSET_METERS = ()
    _UNSET_TRACERS = (trace.NoOpTracerProvider, trace.ProxyTracerProvider)

logger = logging.getLogger("redlock")

#: Seconds: from a tenth of a millisecond (a loopback round) to a minute (a blocking acquire).
DURATION_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
ATTEMPT_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100)
#: Seconds of validity at acquire: ttls run from 10 ms to hours.
VALIDITY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

#: What a caller sees for each outcome that is a failure (the span's status and ``error.type``).
FAILURES = {
    "unavailable": "QuorumUnavailable",
    "misconfigured": "MasterMisconfigured",
    "lost": "LockLost",
    "failed": "ExtendUnconfirmed",
    "unconfirmed": "ReleaseUnconfirmed",
}

#: Master outcomes counted as errors of that master (a denial is an answer, not an error).
MASTER_ERRORS = frozenset({NodeStatus.UNREACHABLE, NodeStatus.TIMEOUT, NodeStatus.ERROR, NodeStatus.MISCONFIGURED})

STEPS = ("acquire", "fence", "rollback", "release", "extend", "restore")


class ObservedLock(Protocol):
    """What telemetry reads of a lock (a ``redlock._api.state.LockState``, which sits above)."""

    @property
    def name(self) -> str: ...
    @property
    def quorum(self) -> int: ...
    def locked(self) -> bool: ...


#: Whether each master's command and subscriber connections are up, by master (none once
#: the client is closed): the driver's answer, asked at each metrics collection.
ConnectionStates = Callable[[], Iterable[tuple[bool, bool]]]


def step_of(operation: str, round_: Round) -> str:
    """What a round does: acquire, fence, rollback (of a failed attempt), release, extend,
    restore (an extend writing our key back where a master lost it: the kind's acquire)."""
    script = round_.command.script
    step = ALL_STEPS.get(script.sha, "script") if script is not None else str(round_.command.args[0]).lower()
    if step in ("set", "acquire"):
        return "restore" if operation == "extend" else "acquire"
    if operation == "acquire" and step == "release":
        return "rollback"
    return step


def outcome_of(operation: str, result: Result) -> str:
    """One word for how an operation ended, the ``redlock.outcome`` attribute."""
    if operation == "acquire":
        if result.ok:
            return "acquired"
        if result.misconfigured:
            return "misconfigured"
        return "unavailable" if result.quorum_unreachable else "held"
    done = "released" if operation == "release" else "extended"
    if result.ok:
        return done
    if result.token_gone:
        return "lost"
    return "unconfirmed" if operation == "release" else "failed"


def auto_extension_outcome(round_: Round) -> str:
    """How one round of auto-extension ended (its flow goes on, so it has no Result)."""
    if round_.majority_granted:
        return "extended"
    return "lost" if round_.count(NodeStatus.DENIED) > len(round_.node_names) - round_.quorum else "failed"


def check_providers(meter_provider: object, tracer_provider: object) -> None:
    """Bad providers are refused when the client is made, before any traffic."""
    if meter_provider is None and tracer_provider is None:
        return
    if not AVAILABLE:
        raise ValueError(
            f"meter_provider and tracer_provider need OpenTelemetry, which is not installed: {install_hint('otel')}"
        )
    if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
        raise TypeError(f"meter_provider must be an opentelemetry MeterProvider, got {type(meter_provider).__name__}")
    if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
        raise TypeError(
            f"tracer_provider must be an opentelemetry TracerProvider, got {type(tracer_provider).__name__}"
        )


def for_client(
    masters: Sequence[MasterAddress],
    connections: ConnectionStates,
    clock: Clock,
    version: str,
    *,
    meter_provider: Any,
    tracer_provider: Any,
) -> ClientTelemetry | None:
    """The telemetry of a new client (providers checked); None without OpenTelemetry."""
    if not AVAILABLE:
        return None
    return ClientTelemetry(
        masters, connections, clock, version, meter_provider=meter_provider, tracer_provider=tracer_provider
    )


class Instruments:
    """The instruments of one meter provider, shared by every client that reports to it."""

    def __init__(self, meter: metrics.Meter) -> None:
        def duration(name: str, what: str) -> metrics.Histogram:
            return meter.create_histogram(
                name, unit="s", description=what, explicit_bucket_boundaries_advisory=DURATION_BUCKETS
            )

        self.acquire = duration("redlock.acquire.duration", "Duration of Lock.acquire, all attempts included")
        self.release = duration("redlock.release.duration", "Duration of Lock.release")
        self.extend = duration("redlock.extend.duration", "Duration of an extend (explicit, or by auto-extension)")
        self.attempts = meter.create_histogram(
            "redlock.acquire.attempts",
            unit="{attempt}",
            description="Attempts per acquire",
            explicit_bucket_boundaries_advisory=ATTEMPT_BUCKETS,
        )
        self.validity = meter.create_histogram(
            "redlock.validity.remaining",
            unit="s",
            description="Validity left when an acquire returns the lock held",
            explicit_bucket_boundaries_advisory=VALIDITY_BUCKETS,
        )
        self.lost = meter.create_counter(
            "redlock.lock.lost", unit="{lock}", description="Locks lost while held, by what found out"
        )
        self.request = duration("redlock.master.request.duration", "Duration of one command on one master")
        self.errors = meter.create_counter(
            "redlock.master.errors", unit="{error}", description="Masters that failed a round, by how"
        )
        self.findings = meter.create_counter(
            "redlock.master.findings",
            unit="{finding}",
            description="Risks and refusals found in what a master said at a connection's handshake",
        )
        #: Clients and held locks, for the observable instruments; weak, so that reporting
        #: keeps nothing alive.
        self.clients: weakref.WeakSet[ClientTelemetry] = weakref.WeakSet()
        self.locks: weakref.WeakSet[ObservedLock] = weakref.WeakSet()
        meter.create_observable_up_down_counter(
            "redlock.lock.held", [self._held], unit="{lock}", description="Locks held (valid) in this process"
        )
        meter.create_observable_up_down_counter(
            "redlock.master.connections",
            [self._connections],
            unit="{connection}",
            description="Open connections to each master",
        )

    def _held(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        # Called at every collection, before the synchronous instruments are read: what the
        # operations queued until now goes into this collection.
        flush()
        held = 0
        for lock in list(self.locks):
            if lock.locked():
                held += 1
            else:
                self.locks.discard(lock)  # acquiring it again adds it again
        return [metrics.Observation(held)]

    def _connections(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        counts: dict[tuple[tuple[str, Any], ...], int] = {}
        for client in list(self.clients):
            for key, count in client.open_connections():
                counts[key] = counts.get(key, 0) + count
        return [metrics.Observation(count, dict(key)) for key, count in counts.items()]


_instruments: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()


class Reporter:
    """Makes the OpenTelemetry calls of every client of the process, off the callers' path.

    An SDK takes some microseconds per measurement and tens per span: made by the caller,
    the dozen of an acquire+release would add a third to a loopback lock (see the
    benchmark). A caller only queues what it measured (a deque append); this thread does
    the calls, every :attr:`INTERVAL`, and so does any metrics collection, first (see
    ``Instruments._held``), and the process's exit.
    """

    INTERVAL = 0.01

    def __init__(self) -> None:
        self.queue: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        #: One drainer at a time: a client's reports are made in the order they were queued.
        self._draining = threading.Lock()
        self._pid = 0

    def start(self) -> None:
        """Make sure the thread runs in this process (a fork's child starts its own)."""
        if self._pid == os.getpid():
            return
        with self._draining:
            if self._pid == os.getpid():
                return
            if not self._pid:
                atexit.register(self.flush)
            self._pid = os.getpid()
            threading.Thread(target=self._serve, name="redlock-telemetry", daemon=True).start()

    def after_fork(self) -> None:
        """In a fork's child: the parent's thread is not here, and it may have held the lock;
        what the parent measured is the parent's to report."""
        self._draining = threading.Lock()
        self.queue.clear()

    def _serve(self) -> None:
        while True:
            time.sleep(self.INTERVAL)
            self.flush()

    def flush(self) -> None:
        with self._draining:
            while self.queue:
                call, args = self.queue.popleft()
                try:
                    call(*args)
                except Exception:  # a failing exporter or SDK must not stop the others' reports
                    logger.exception("reporting to OpenTelemetry failed")


_reporter = Reporter()
os.register_at_fork(after_in_child=_reporter.after_fork)


def flush() -> None:
    """Make now the OpenTelemetry calls of everything measured so far (tests, exit)."""
    _reporter.flush()


def instruments_for(meter_provider: Any, version: str) -> Instruments:
    provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
    instruments = _instruments.get(provider)
    if instruments is None:
        instruments = _instruments[provider] = Instruments(provider.get_meter("redlock", version))
    return instruments


def master_attributes(masters: Sequence[MasterAddress]) -> list[dict[str, str | int]]:
    """``server.address`` and ``server.port`` of each master (a unix socket: its path)."""
    attributes: list[dict[str, str | int]] = []
    for master in masters:
        if master.path is not None:
            attributes.append({"server.address": master.path})
        else:
            attributes.append({"server.address": str(master.host), "server.port": int(master.port or 0)})
    return attributes


#: How often a client that records nothing looks whether the application has set global
#: providers since (a client made before OpenTelemetry is configured starts within this).
_LOOK_AGAIN = 1.0


class LatencyRecorder:
    """Records ``recorder[node] = seconds`` as that master's request duration of one step."""

    def __init__(self, histogram: metrics.Histogram, attributes: list[dict[str, str | int]]) -> None:
        self._histogram = histogram
        self._attributes = attributes

    def __setitem__(self, node: int, seconds: float) -> None:
        _reporter.queue.append((self._histogram.record, (seconds, self._attributes[node])))


class ClientTelemetry:
    """One client's instruments and tracer, and what it measures per round and operation."""

    def __init__(
        self,
        masters: Sequence[MasterAddress],
        connections: ConnectionStates,
        clock: Clock,
        version: str,
        *,
        meter_provider: Any,
        tracer_provider: Any,
    ) -> None:
        self._connections = connections
        self.clock = clock
        self._given = meter_provider is not None or tracer_provider is not None
        self._active = False
        self._next_look = 0.0
        self.instruments = instruments_for(meter_provider, version)
        self.instruments.clients.add(self)
        self.tracer = trace.get_tracer("redlock", version, tracer_provider)
        self._masters = master_attributes(masters)
        self._master_keys = [tuple(sorted(attributes.items())) for attributes in self._masters]
        #: Made once, not per reply or per round.
        self._recorders = {step: self._recorder(step) for step in STEPS}
        self._error_attributes = {
            (node, status): {**attributes, "redlock.node.status": status.value}
            for node, attributes in enumerate(self._masters)
            for status in MASTER_ERRORS
        }

    def active(self) -> bool:
        """Whether anything would record: providers given, or global ones an application set.

        Asked per operation, so that a client made before the application configures
        OpenTelemetry reports from then on; until then the operation skips even the
        queueing. The global providers are looked at again at most every
        ``_LOOK_AGAIN`` seconds (a look costs more than the rest of this check, per
        operation), and once set they stay set: OpenTelemetry refuses to replace them.
        """
        if self._active:
            return True
        now = time.monotonic()
        if now < self._next_look:
            return False
        self._next_look = now + _LOOK_AGAIN
        self._active = (
            self._given
            or not isinstance(metrics.get_meter_provider(), _UNSET_METERS)
            or not isinstance(trace.get_tracer_provider(), _UNSET_TRACERS)
        )
        return self._active

    def _recorder(self, step: str) -> LatencyRecorder:
        attributes = [{**master, "redlock.round.step": step} for master in self._masters]
        return LatencyRecorder(self.instruments.request, attributes)

    def latencies(self, step: str) -> LatencyRecorder:
        recorder = self._recorders.get(step)
        return self._recorder(step) if recorder is None else recorder

    def open_connections(self) -> Iterable[tuple[tuple[tuple[str, Any], ...], int]]:
        for node, (command, subscriber) in enumerate(self._connections()):
            key = self._master_keys[node]
            yield (*key, ("redlock.connection.kind", "command")), int(command)
            yield (*key, ("redlock.connection.kind", "subscriber")), int(subscriber)

    def report(self, operation: _Operation, outcome: str, ended_ns: int, seconds: float, validity: float) -> None:
        """In the reporter: the measurements and the span of one finished operation."""
        attributes: dict[str, str] = {"redlock.outcome": outcome}
        error = operation.error
        if outcome == "error":
            attributes["error.type"] = type(error).__qualname__ if error is not None else "interrupted"
        elif outcome in FAILURES:
            attributes["error.type"] = FAILURES[outcome]
        instruments = self.instruments
        kind = operation.operation
        result = operation.result
        if kind == "acquire":
            instruments.acquire.record(seconds, attributes)
            if result is not None:
                instruments.attempts.record(result.attempts, attributes)
            if outcome == "acquired":
                instruments.validity.record(validity)
                instruments.locks.add(operation.lock)
        elif kind == "release":
            instruments.release.record(seconds, attributes)
        else:
            instruments.extend.record(seconds, attributes)
        for done in operation.rounds:
            for node, outcome_of_node in done.outcomes.items():
                if outcome_of_node.status in MASTER_ERRORS:
                    instruments.errors.add(1, self._error_attributes[node, outcome_of_node.status])
        self._trace(operation, attributes, ended_ns)

    def _trace(self, operation: _Operation, attributes: dict[str, str], ended_ns: int) -> None:
        lock = operation.lock
        span = self.tracer.start_span(
            f"redlock.{operation.operation}",
            context=operation.parent,
            start_time=operation.started_ns,
            attributes={
                "redlock.lock.name": lock.name,
                "redlock.quorum": lock.quorum,
                "redlock.masters": len(self._masters),
                **attributes,
            },
        )
        if not span.is_recording():
            span.end(end_time=ended_ns)
            return
        if operation.result is not None and operation.operation == "acquire":
            span.set_attribute("redlock.attempts", operation.result.attempts)
        for done in operation.rounds:
            round_ = done.round
            statuses = [
                (NodeStatus.NOT_AWAITED if node not in done.outcomes else done.outcomes[node].status).value
                for node in round_.targets
            ]
            span.add_event(
                "redlock.round",
                {
                    "redlock.round.step": done.step,
                    "redlock.round.number": done.number,
                    "redlock.round.duration": done.seconds,
                    "redlock.votes.granted": done.votes,
                    "redlock.votes.quorum": round_.quorum,
                    "redlock.master.names": [round_.node_names[node] for node in round_.targets],
                    "redlock.master.statuses": statuses,
                },
                timestamp=done.at_ns,
            )
        if operation.error is not None:
            span.record_exception(operation.error, timestamp=ended_ns)
        if "error.type" in attributes:
            span.set_status(Status(StatusCode.ERROR, f"{operation.operation}: {attributes['redlock.outcome']}"))
        span.end(end_time=ended_ns)

    def master_finding(self, node: int, finding: Finding) -> None:
        """A warning or refusal about master ``node``, found at a connection's handshake."""
        attributes = {
            **self._masters[node],
            "redlock.finding": finding.code,
            "redlock.finding.severity": finding.severity.value,
        }
        _reporter.queue.append((self.instruments.findings.add, (1, attributes)))

    def lock_lost(self, cause: str) -> None:
        _reporter.queue.append((self.instruments.lost.add, (1, {"redlock.lost.cause": cause})))


# --- the wrapped flows ----------------------------------------------------------------------


def observe(telemetry: ClientTelemetry | None, operation: str, lock: ObservedLock, flow: Flow) -> Flow:
    """``flow``, reported on (see the module); itself when nothing listens.

    ``operation`` is acquire, release, extend, or renewal (auto-extension).
    """
    if telemetry is not None and not telemetry.active():
        telemetry = None
    if telemetry is None and not logger.isEnabledFor(logging.DEBUG):
        return flow
    if operation == "renewal":
        return _auto_extension(telemetry, lock, flow)
    return _Operation(telemetry, operation, lock).run(flow)


class RoundDone(NamedTuple):
    """One round of an operation, as it was when it completed."""

    round: Round
    step: str
    number: int
    seconds: float
    #: When it completed, in nanoseconds since the epoch (the span event's timestamp).
    at_ns: int
    outcomes: dict[int, NodeOutcome]
    votes: int


class _Operation:
    """One operation under way: when it started, its rounds so far, and how it ended.

    The span is made from this record once the operation is over, in the reporter: its
    start, and each round's event, carry the times measured here.
    """

    def __init__(self, telemetry: ClientTelemetry | None, operation: str, lock: ObservedLock) -> None:
        self.telemetry = telemetry
        self.operation = operation
        self.lock = lock
        # Read at the public call: a span and a duration that start there include the wait
        # for the driver, which is part of what the caller waited.
        self.started = time.monotonic()
        self.started_ns = time.time_ns()
        #: The caller's current span (and the rest of its context): the parent of ours.
        self.parent = context.get_current() if telemetry is not None else None
        self.rounds: list[RoundDone] = []
        self.result: Result | None = None
        self.error: BaseException | None = None

    def run(self, flow: Flow) -> Flow:
        try:
            request = next(flow)
            while True:
                if isinstance(request, Round):
                    step = self.sent(request)
                    sent = time.monotonic()
                    now = yield request
                    self.round_finished(request, step, time.monotonic() - sent)
                else:
                    now = yield request
                request = flow.send(now)
        except StopIteration as stop:
            result: Result = stop.value
            self.result = result
            self.end(outcome_of(self.operation, result))
            return result
        except BaseException as error:
            self.interrupted(error)
            raise
        finally:
            flow.close()

    def sent(self, round_: Round) -> str:
        """The round is about to go out: its step, and where its masters' latencies go."""
        step = step_of(self.operation, round_)
        if self.telemetry is not None:
            round_.latencies = self.telemetry.latencies(step)
        return step

    def round_finished(self, round_: Round, step: str, seconds: float) -> None:
        number = len(self.rounds) + 1
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s %r, round %d (%s): %d of %d granted, quorum %d, in %.3f ms: %s",
                self.operation,
                self.lock.name,
                number,
                step,
                round_.granted + round_.credited,
                len(round_.node_names),
                round_.quorum,
                seconds * 1000,
                ", ".join(map(str, round_.ordered_outcomes())),
            )
        # The outcomes as they were when the flow went on: a late reply is still recorded in
        # the round afterwards, while the reporter may be reading it.
        votes = round_.granted + round_.credited
        self.rounds.append(RoundDone(round_, step, number, seconds, time.time_ns(), dict(round_.outcomes), votes))

    def end(self, outcome: str) -> None:
        if self.telemetry is None:
            return
        seconds = time.monotonic() - self.started
        result = self.result
        validity = max(0.0, result.deadline - self.telemetry.clock()) if result is not None and result.ok else 0.0
        _reporter.queue.append((self.telemetry.report, (self, outcome, time.time_ns(), seconds, validity)))
        _reporter.start()

    def interrupted(self, error: BaseException) -> None:
        # A driver closes the flow (GeneratorExit) while what interrupted it propagates:
        # that is the error the caller sees.
        self.error = error.__context__ if isinstance(error, GeneratorExit) else error
        self.end("error")


def _auto_extension(telemetry: ClientTelemetry | None, lock: ObservedLock, flow: Flow) -> Flow:
    """A renewal flow, each of its rounds reported as an extend of its own."""
    try:
        request = next(flow)
        while True:
            if isinstance(request, Round) and step_of("extend", request) == "restore":
                # It belongs to the extension just reported, which it cannot change: its
                # masters' latencies are measured, and it is no extension of its own.
                if telemetry is not None:
                    request.latencies = telemetry.latencies("restore")
                now = yield request
            elif isinstance(request, Round):
                extend = _Operation(telemetry, "extend", lock)
                step = extend.sent(request)
                try:
                    now = yield request
                except BaseException as error:
                    extend.interrupted(error)
                    raise
                extend.round_finished(request, step, time.monotonic() - extend.started)
                extend.end(auto_extension_outcome(request))
            else:
                now = yield request
            request = flow.send(now)
    except StopIteration as stop:
        result: Result = stop.value
        return result
    finally:
        flow.close()
