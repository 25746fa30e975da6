"""Ground truth from the masters, and the events a reactive nemesis listens to.

The checkers see what the clients recorded; an :class:`Observer` records what the masters
really held, on side connections of the harness's own (unix sockets on the kernel network,
direct connections otherwise: outside every fault):

* about every ``clock_period`` seconds, each master's ``TIME``
  (:class:`~chaos.history.MasterClock`), so that a master's wall-clock expiry can be placed on
  the history's time line even while its clock jumps or runs fast. The gaps are drawn at
  random from half to one and a half periods: at a fixed 100 ms, a clock strobing every
  25 ms was read on the same side of every flip (the sampler was phase-locked to the fault,
  and the history showed no strobe at all);
* right after each grant or extend a client records, the lock's key on every master, in one
  transaction each (``GET``, ``PTTL``, ``TIME``: :class:`~chaos.history.KeySample`): which
  masters hold the holder's token, and when the key expires on each. ``PTTL`` rather than
  ``PEXPIRETIME``, which the redis-server 6.2 the clock scenarios run lacks.

It learns of grants by following the clients' history files (each client flushes every
event as it happens), every ``poll`` seconds: a few milliseconds after the grant, well
within any validity. Each sampled grant is also handed, as a :class:`Grant`, to the
listeners added with :meth:`Observer.listen`: that is how :mod:`chaos.reactive` fires a
fault on an event rather than on a timer.

A master that is down, paused or restarting just gives no sample that round (its
connection times out quickly); a sample is never retried, since a late one would say
something else.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import pathlib
import random
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

import redis

from .history import KeySample, MasterClock, Recorder, master_label
from .workload import direct_client

__all__ = ["Grant", "Observer"]

#: How long one look at a master may take before it counts as no answer (a paused master).
_LOOK_TIMEOUT = 0.05


@dataclass(frozen=True)
class Grant:
    """A grant (or extend) a client recorded, with what the masters held right after it."""

    client: str
    name: str
    op: int
    token: str
    #: When the client's event says it returned (``time.monotonic()``).
    time: float
    deadline: float | None
    #: The masters whose grant the client counted (labels), if it recorded them.
    voters: tuple[str, ...] | None
    #: The masters that held ``token`` when the observer looked (labels).
    holders: tuple[str, ...]
    #: "acquire" or "extend".
    kind: str
    #: Other clients whose acquire of ``name`` was in flight when it was granted: a contended
    #: grant, whose holder, paused, is overtaken at once.
    waiters: int = 0

    @property
    def process(self) -> str:
        """The client process behind ``client`` (a thread ``c1/t2`` runs in ``c1``)."""
        return self.client.split("/", 1)[0]


Listener = Callable[[Grant], None]


class _Tail:
    """The complete lines appended to one file since the last read (the file stays open:
    it is read every few milliseconds)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.file: IO[bytes] | None = None
        self.partial = b""

    def lines(self) -> list[bytes]:
        try:
            if self.file is None:
                self.file = open(self.path, "rb")  # noqa: SIM115 (closed by close())
            data = self.file.read()
        except OSError:
            return []
        if not data:
            return []
        *complete, self.partial = (self.partial + data).split(b"\n")
        return complete

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class Observer:
    """Samples ``urls`` (one per master, in master order) into ``recorder`` while running.

    ``files`` returns the client history files to follow (called again each poll: clients
    come and go). A context manager: the threads stop on exit.
    """

    def __init__(
        self,
        urls: Sequence[str],
        recorder: Recorder,
        files: Callable[[], Sequence[pathlib.Path]],
        *,
        clock_period: float = 0.1,
        poll: float = 0.002,
    ) -> None:
        self.recorder = recorder
        self.labels = [master_label(i) for i in range(len(urls))]
        self._urls = list(urls)
        self._files = files
        self._clock_period = clock_period
        self._clock_jitter = random.Random()
        self._poll = poll
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listeners: list[Listener] = []
        self._tails: dict[pathlib.Path, _Tail] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(len(self._urls), thread_name_prefix="chaos-observer-look")
        #: (client, op) -> token of extends in flight (their returned events carry none).
        self._extending: dict[tuple[str, int], str | None] = {}
        #: (client, op) -> name of acquires in flight.
        self._waiting: dict[tuple[str, int], str] = {}
        self.grants_seen = 0

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` with every sampled grant, in the observer's thread (keep it short)."""
        self._listeners.append(listener)

    def __enter__(self) -> Observer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        # Each thread its own connections: redis-py clients are not shared across threads here.
        for target, name in ((self._clocks, "chaos-observer-clock"), (self._follow, "chaos-observer-tail")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop and wait; a last poll first, so a grant recorded just before is sampled."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self._threads.clear()
        self._pool.shutdown(wait=True)

    # -- the masters' clocks --

    def _connect(self) -> list[redis.Redis]:
        return [direct_client(url, timeout=_LOOK_TIMEOUT) for url in self._urls]

    def _clocks(self) -> None:
        masters = self._connect()
        try:
            while not self._stop.is_set():
                for label, master in zip(self.labels, masters, strict=True):
                    before = time.monotonic()
                    try:
                        seconds, micros = master.time()
                    except (redis.RedisError, OSError):
                        continue
                    middle = (before + time.monotonic()) / 2
                    self.recorder.record(MasterClock(time=middle, master=label, wall=seconds + micros / 1e6))
                self._stop.wait(self._clock_period * self._clock_jitter.uniform(0.5, 1.5))
        finally:
            for master in masters:
                master.close()

    # -- grants --

    def _follow(self) -> None:
        masters = self._connect()
        try:
            while True:
                stopping = self._stop.is_set()
                try:
                    for path in self._files():
                        tail = self._tails.setdefault(path, _Tail(path))
                        for line in tail.lines():
                            self._line(line, masters)
                except Exception:
                    # The ground truth is a witness, not the run: say what broke and go on.
                    self.recorder.error("observer", traceback.format_exc())
                if stopping:
                    return
                self._stop.wait(self._poll)
        finally:
            for master in masters:
                master.close()
            for tail in self._tails.values():
                tail.close()

    def _line(self, line: bytes, masters: Sequence[redis.Redis]) -> None:
        try:
            event: dict[str, Any] = json.loads(line)
        except ValueError:
            return
        kind = event.get("type")
        if kind == "acquire_invoked":
            self._waiting[(event["client"], event["op"])] = event["name"]
            return
        if kind == "acquire_returned":
            self._waiting.pop((event["client"], event["op"]), None)
        if kind == "extend_invoked":
            self._extending[(event["client"], event["op"])] = event.get("token")
            return
        if kind not in ("acquire_returned", "extend_returned") or not event.get("ok"):
            return
        if kind == "acquire_returned":
            token = event.get("token")
        else:
            token = self._extending.pop((event["client"], event["op"]), None)
        if not token or event.get("limit"):
            return  # a semaphore's permits are not one key per name
        holders = self.sample(event["name"], token, masters)
        voters = event.get("voters")
        grant = Grant(
            client=event["client"],
            name=event["name"],
            op=event["op"],
            token=token,
            time=event["time"],
            deadline=event.get("deadline"),
            voters=None if voters is None else tuple(voters),
            holders=holders,
            kind="acquire" if kind == "acquire_returned" else "extend",
        )
        waiters = sum(1 for (client, _), name in self._waiting.items() if name == grant.name and client != grant.client)
        grant = dataclasses.replace(grant, waiters=waiters)
        self.grants_seen += 1
        for listener in self._listeners:
            listener(grant)

    def sample(self, name: str, token: str, masters: Sequence[redis.Redis]) -> tuple[str, ...]:
        """Record what each master holds for ``name`` now; the masters that hold ``token``.

        The masters are looked at all at once: a paused one, which takes the whole look
        timeout to fail, must not make the others' samples late (a late sample may find
        the key already released, and the grant's moment past for a reactive nemesis)."""
        looks = list(self._pool.map(lambda pair: self._look(name, *pair), zip(self.labels, masters, strict=True)))
        holders: list[str] = []
        for label, look in zip(self.labels, looks, strict=True):
            if look is None:
                continue
            middle, held, pttl, wall = look
            holds = held == token
            # The expiry of whichever token is there: a sample says something of every holder.
            expires = wall + pttl / 1000 if held is not None and pttl >= 0 else None
            self.recorder.record(
                KeySample(time=middle, master=label, name=name, token=held, holds=holds, wall=wall, expires=expires)
            )
            if holds:
                holders.append(label)
        return tuple(holders)

    @staticmethod
    def _look(name: str, label: str, master: redis.Redis) -> tuple[float, str | None, int, float] | None:
        """One master's key and clock, read in one transaction: (when, token, PTTL, wall)."""
        before = time.monotonic()
        try:
            with master.pipeline(transaction=True) as pipe:
                pipe.get(name)
                pipe.pttl(name)
                pipe.time()
                value, pttl, (seconds, micros) = pipe.execute()
        except (redis.RedisError, OSError, ValueError):
            return None
        held = value.decode(errors="replace") if isinstance(value, bytes) else None
        return (before + time.monotonic()) / 2, held, int(pttl), seconds + micros / 1e6
