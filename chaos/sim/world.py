"""The simulated world: masters, network and clients in one thread, on simulated time.

Where it sits: above the library's pure layers, which it drives as they are (the lock
flows of :mod:`redlock._protocol.flows` and the connection policy :class:`redlock._protocol.connection.Connections`,
both sans-I/O), and above :mod:`chaos.sim.model` (what a master does with a command).
Below :mod:`chaos.sim.trial`, which builds a world from a fault schedule and judges it.

Theory of operation
-------------------
One heap of events ordered by (true time, sequence number); nothing reads a real clock,
and every random choice comes from one seeded generator, so a seed replays a run exactly.

* **Clients** run the real flows. A ``Round`` is submitted to the real policy for each
  master; the policy answers with :class:`~redlock._protocol.connection.Write` and
  :class:`~redlock._protocol.connection.Connect` actions, which become messages. Replies are fed
  to the client's own ``hiredis`` parser and matched by the policy, which records them in
  the round; the round's timer and overtime follow the synchronous driver's ``_run_round``.
  A client reads its own clock (offset + rate); its deadlines are mapped back to true time
  for the history. A paused client (SIGSTOP) handles nothing until it resumes: replies and
  timers wait for it.
* **The network** delivers each connection's bytes in order (TCP), after a per-message
  delay; a link can be delayed, blackholed (bytes held until it heals, connects time out)
  or one-way (replies held back).
* **Masters** parse what arrives with ``hiredis.Reader`` and apply it through the model at
  their own wall-clock time (offset + rate, piecewise: jumps and rates compose). A paused
  master queues what arrives; a crashed one resets its connections and restarts with the
  data its persistence kept (``none``: empty; ``everysec``: all after a process crash, the
  last synced second's state after a power loss; ``always``: all).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hiredis

from redlock._protocol.config import Credentials
from redlock._protocol.connection import Connect, Connections, Write, reply_parser
from redlock._protocol.core import ErrorReply, Flow, Pause, Result, Round
from redlock._protocol.scripts import Script

from .model import UNMODELLED, Keyspace, Reply

__all__ = ["Client", "Clock", "Master", "Network", "World"]

#: How often an ``everysec`` master syncs its append-only file.
FSYNC_INTERVAL = 1.0


class World:
    """The event loop: ``at(time, fn, *args)`` runs ``fn(*args)`` at that true time."""

    def __init__(self, seed: int | str) -> None:
        self.now = 0.0
        self.rng = random.Random(f"world:{seed}")
        self.heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = itertools.count()
        self.events = 0
        self.network: Network

    def at(self, time: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.heap, (time if time > self.now else self.now, next(self.seq), fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        # (No clamp: every delay is >= 0. The hot path: tens of thousands a trial.)
        heapq.heappush(self.heap, (self.now + delay, next(self.seq), fn, args))

    def run(self, until: float) -> None:
        heap = self.heap
        pop = heapq.heappop
        events = 0
        while heap and heap[0][0] <= until:
            time, _, fn, args = pop(heap)
            self.now = time
            events += 1
            fn(*args)
        self.events += events
        self.now = until


@dataclass
class Clock:
    """A clock that reads ``base + rate * (t - since)`` at true time ``t``, piecewise."""

    base: float = 0.0
    rate: float = 1.0
    since: float = 0.0

    def read(self, t: float) -> float:
        return self.base + self.rate * (t - self.since)

    def jump(self, t: float, by: float) -> None:
        self.base, self.since = self.read(t) + by, t

    def set_rate(self, t: float, rate: float) -> None:
        self.base, self.since, self.rate = self.read(t), t, rate

    def true_time(self, reading: float) -> float:
        """When (true time) this clock reads ``reading``, on its current segment."""
        return self.since + (reading - self.base) / self.rate


#: The replies most commands get, written once: a lookup instead of a format per reply.
_CONSTANT: dict[object, bytes] = {0: b":0\r\n", 1: b":1\r\n", None: b"$-1\r\n", b"OK": b"+OK\r\n"}
_CONSTANT[b"PONG"] = b"+PONG\r\n"


def resp(reply: Reply) -> bytes:
    """A reply in RESP, as a master writes it."""
    kind = type(reply)
    if kind is list:  # (a fenced grant: [1, counter])
        return b"*%d\r\n" % len(reply) + b"".join([resp(item) for item in reply])  # type: ignore[arg-type,attr-defined]
    if kind is not dict:  # (dicts are not hashable)
        constant = _CONSTANT.get(reply)
        # (True == 1 and hashes alike: it gets ":1", as a real master's integer reply.)
        if constant is not None:
            return constant
    if reply is None:
        return b"$-1\r\n"
    if kind is int or kind is bool:
        return b":%d\r\n" % reply  # type: ignore[str-format]
    if isinstance(reply, ErrorReply):
        return b"-" + reply.message.encode() + b"\r\n"
    if isinstance(reply, bytes) and reply in (b"OK", b"PONG"):
        return b"+" + reply + b"\r\n"
    if isinstance(reply, bool | int):
        return b":%d\r\n" % int(reply)
    if isinstance(reply, bytes | str):
        data = reply.encode() if isinstance(reply, str) else reply
        return b"$%d\r\n%s\r\n" % (len(data), data)
    if isinstance(reply, list | tuple):
        return b"*%d\r\n" % len(reply) + b"".join(resp(item) for item in reply)
    raise TypeError(f"no RESP for {reply!r}")


@functools.lru_cache(maxsize=64)
def _sha(source: str) -> str:
    """A script's SHA-1, as SCRIPT LOAD answers (hashed once per source, not per connect)."""
    return Script(source).sha


def _info(run_id: str) -> bytes:
    """What a master says of itself at a client's handshake: a standalone master with no
    replicas, its run_id its own (a new one per start, as a real server's)."""
    return (
        b"# Server\r\nredis_version:7.0.0\r\nrun_id:%s\r\nredis_mode:standalone\r\n"
        b"# Replication\r\nrole:master\r\nconnected_slaves:0\r\n" % run_id.encode()
    )


@dataclass(eq=False)
class Conn:
    """One TCP connection between a client and a master, both ends."""

    client: Client
    node: int
    generation: int
    #: The master's incarnation it was opened to: a restarted master knows none before it.
    incarnation: int
    #: Its link's faults, looked up once: every message consults them.
    fault: LinkFault
    #: Commands arrive decoded (all the lock sends is ASCII): the model works on str.
    reader: Any = field(default_factory=lambda: hiredis.Reader(encoding="utf-8"))
    parser: Any = field(default_factory=reply_parser)
    open: bool = True
    #: The last delivery time of each direction, so that bytes arrive in order.
    up_at: float = 0.0
    down_at: float = 0.0


class Master:
    """A simulated redis-server: its keyspace, clock, persistence and process state."""

    def __init__(self, world: World, index: int, persistence: str) -> None:
        self.world = world
        self.index = index
        self.name = chr(ord("A") + index)
        self.persistence = persistence
        self.clock = Clock()
        self.data = Keyspace()
        self.synced = Keyspace()
        self.up = True
        self.paused = False
        self.incarnation = 0
        self.scripts: set[str] = set()
        self.queue: list[tuple[Conn, bytes]] = []
        self.conns: list[Conn] = []
        #: A sim-only fault: writes get an error reply (a full master, -OOM).
        self.refusing = False
        if persistence == "everysec":
            world.after(FSYNC_INTERVAL, self._fsync)

    def wall(self) -> float:
        return self.clock.read(self.world.now)

    def _fsync(self) -> None:
        if self.up:
            self.synced = self.data.copy()
        self.world.after(FSYNC_INTERVAL, self._fsync)

    def receive(self, conn: Conn, data: bytes) -> None:
        if not self.up or conn.incarnation != self.incarnation or not conn.open:
            return  # a connection of an earlier life: the real one was reset
        if self.paused:
            self.queue.append((conn, data))
            return
        reader = conn.reader
        reader.feed(data)
        command = reader.gets()
        if command is False:
            return
        out = resp(self.execute(command))
        while (command := reader.gets()) is not False:
            out += resp(self.execute(command))
        self.world.network.to_client(conn, out)

    def execute(self, args: list[str]) -> Reply:
        name = args[0]
        if name == "EVALSHA" and not self.refusing:
            # (First: nearly every command the lock sends is a script it has loaded.)
            sha = args[1]
            if sha in self.scripts:
                clock = self.clock  # (wall(), inlined)
                reply = self.data.run_script(sha, args, clock.base + clock.rate * (self.world.now - clock.since))
                if reply is not UNMODELLED:
                    return reply
        name = name.upper()
        if name == "PING":
            return b"PONG"
        if name == "INFO":
            return _info(f"sim-{self.name}-{self.incarnation}")
        if name == "SCRIPT":
            sha = _sha(args[2])
            self.scripts.add(sha)
            return sha.encode()
        if name == "EVALSHA" and args[1] not in self.scripts:
            return ErrorReply("NOSCRIPT No matching script. Please use EVAL.")
        if self.refusing:
            return ErrorReply("OOM command not allowed when used memory > 'maxmemory'.")
        if name == "EVAL":
            self.scripts.add(_sha(args[1]))
        clock = self.clock  # (wall(), inlined)
        return self.data.apply_text(args, clock.base + clock.rate * (self.world.now - clock.since))

    def crash(self, *, power: bool = False) -> None:
        """The process dies (``power``: the machine loses power: unsynced writes go)."""
        if not self.up:
            return
        self.up = False
        self.paused = False
        self.queue.clear()
        kept = {
            "always": self.data,
            "everysec": self.synced if power else self.data,
        }.get(self.persistence, Keyspace())
        self.data = kept.copy()
        self.synced = self.data.copy()
        self.scripts.clear()
        conns, self.conns = self.conns, []
        for conn in conns:
            conn.open = False
            self.world.network.reset(conn)

    def restart(self) -> None:
        if self.up:
            return
        self.up = True
        self.incarnation += 1

    def pause(self) -> None:
        self.paused = self.up

    def resume(self) -> None:
        self.paused = False
        queued, self.queue = self.queue, []
        for conn, data in queued:
            self.receive(conn, data)


@dataclass
class LinkFault:
    delay: float = 0.0
    blackhole: bool = False
    #: Replies held back this long (one-way).
    hold_replies: float = 0.0
    held: list[tuple[Conn, bytes, bool]] = field(default_factory=list)


class Network:
    """Per-connection ordered delivery with a base latency and per-link faults."""

    def __init__(self, world: World, masters: list[Master], latency: tuple[float, float]) -> None:
        self.world = world
        self.masters = masters
        self.latency = latency
        #: Set by the small-scope mode: each message's latency from a discrete choice
        #: (:mod:`chaos.sim.exhaustive`) instead of the seeded random draw.
        self.pick: Callable[[], float] | None = None
        #: A picked latency this long is one the client gives up on: ``late`` records that
        #: one was picked (a fault, in effect, for the checks that assume none).
        self.late_after = math.inf
        self.late = False
        self.links: dict[tuple[str, int], LinkFault] = {}

    def link(self, slot: str, node: int) -> LinkFault:
        fault = self.links.get((slot, node))
        if fault is None:
            fault = self.links[slot, node] = LinkFault()
        return fault

    def _picked(self) -> float:
        assert self.pick is not None
        delay = self.pick()
        if delay >= self.late_after:
            self.late = True
        return delay

    def _delay(self) -> float:
        if self.pick is not None:
            return self._picked()
        # random.uniform's own formula, inlined: the same draws, a call less per message.
        low, high = self.latency
        return low + (high - low) * self.world.rng.random()

    # to_master and to_client carry every message: _delay and World.at are inlined there.

    def to_master(self, conn: Conn, data: bytes) -> None:
        fault = conn.fault
        if fault.blackhole:
            fault.held.append((conn, data, True))
            return
        world = self.world
        if self.pick is None:
            low, high = self.latency
            delay = low + (high - low) * world.rng.random()
        else:
            delay = self._picked()
        at = world.now + delay + fault.delay
        at = max(at, conn.up_at)
        conn.up_at = at
        heapq.heappush(world.heap, (at, next(world.seq), self.masters[conn.node].receive, (conn, data)))

    def to_client(self, conn: Conn, data: bytes) -> None:
        fault = conn.fault
        if fault.blackhole:
            fault.held.append((conn, data, False))
            return
        world = self.world
        extra = fault.delay / 2 + fault.hold_replies
        if self.pick is None:
            low, high = self.latency
            delay = low + (high - low) * world.rng.random()
        else:
            delay = self._picked()
        at = world.now + delay + extra
        at = max(at, conn.down_at)
        conn.down_at = at
        heapq.heappush(world.heap, (at, next(world.seq), conn.client.receive, (conn, data)))

    def reset(self, conn: Conn) -> None:
        """The master's end is gone: the client hears of it after a trip (an RST)."""
        conn.down_at = max(conn.down_at, self.world.now + self._delay())
        self.world.at(conn.down_at, conn.client.reset, conn)

    def heal(self, slot: str, node: int) -> None:
        fault = self.link(slot, node)
        fault.blackhole = False
        held, fault.held = fault.held, []
        for conn, data, up in held:
            (self.to_master if up else self.to_client)(conn, data)

    def connect(self, client: Client, connect: Connect) -> None:
        fault = self.link(client.slot, connect.node)
        master = self.masters[connect.node]
        if fault.blackhole:
            self.world.after(
                client.connect_timeout, client.connect_done, connect, None, TimeoutError("connect timed out")
            )
            return
        rtt = 2 * self._delay() + fault.delay * 1.5 + fault.hold_replies
        if not master.up:
            self.world.after(rtt, client.connect_done, connect, None, ConnectionRefusedError("connection refused"))
            return
        # A paused master's kernel still accepts: the handshake then waits for it.
        conn = Conn(client, connect.node, connect.generation, master.incarnation, fault)
        master.conns.append(conn)
        self.world.after(rtt, client.connect_done, connect, conn, None)


class Client:
    """One client process: its own clock, the real connection policy, flows driven by events."""

    def __init__(
        self,
        world: World,
        name: str,
        slot: str,
        masters: list[Master],
        *,
        node_timeout: float,
        connect_timeout: float,
        clock: Clock | None = None,
    ) -> None:
        self.world = world
        self.name = name
        self.slot = slot
        self.node_timeout = node_timeout
        self.connect_timeout = connect_timeout
        self.clock = clock or Clock()
        names = [m.name for m in masters]
        self.policy = Connections(
            names, [Credentials() for _ in names], node_timeout=node_timeout, connect_timeout=connect_timeout
        )
        self.conns: dict[int, Conn] = {}
        self.alive = True
        self.on_crash: Callable[[Exception], None] | None = None
        self.paused = False
        self._deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        #: Rounds that settled inside the policy, continued once the event that settled
        #: them is handled (as the sync driver goes on once its read returns): no event each.
        self._ready: list[Callable[[], None]] = []

    def local(self) -> float:
        clock = self.clock  # (Clock.read, inlined: the policy asks at every step)
        return clock.base + clock.rate * (self.world.now - clock.since)

    def crashed(self, error: Exception) -> None:
        """A flow raised: this client does no more, and ``on_crash`` (the trial's record of
        it) hears why."""
        self.alive = False
        if self.on_crash is not None:
            self.on_crash(error)

    def true_time(self, reading: float) -> float:
        return self.clock.true_time(reading)

    # --- process state -------------------------------------------------------------------------

    def _gate(self, fn: Callable[..., None], *args: Any) -> bool:
        """False when the event must wait (paused) or never happen (dead)."""
        if not self.alive:
            return False
        if self.paused:
            self._deferred.append((fn, args))
            return False
        return True

    def pause(self) -> None:
        self.paused = self.alive

    def resume(self) -> None:
        self.paused = False
        deferred, self._deferred = self._deferred, []
        for fn, args in deferred:
            if self.alive and not self.paused:
                fn(*args)
            else:
                self._deferred.append((fn, args))

    def kill(self) -> None:
        self.alive = False
        self._deferred.clear()
        for conn in self.conns.values():
            conn.open = False

    def later(self, seconds: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` after ``seconds`` of this client's clock."""
        world = self.world  # (World.after, inlined: every round and pause sets a timer)
        heapq.heappush(world.heap, (world.now + seconds / self.clock.rate, next(world.seq), self._timer, (fn, args)))

    def _timer(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if self._gate(self._timer, fn, args):
            fn(*args)
            if self._ready:
                self._continue()

    def _continue(self) -> None:
        ready = self._ready
        while ready:
            ready.pop(0)()

    # --- the policy's actions ------------------------------------------------------------------

    def carry_out(self, action: Write | Connect | None) -> None:
        if type(action) is Write:  # (not isinstance: a check per message; neither is subclassed)
            conn = self.conns.get(action.node)
            if conn is not None and conn.open and action.data:
                self.world.network.to_master(conn, action.data)
        elif isinstance(action, Connect):
            old = self.conns.pop(action.node, None)
            if old is not None:
                old.open = False
            self.world.network.connect(self, action)

    def connect_done(self, connect: Connect, conn: Conn | None, error: BaseException | None) -> None:
        if not self._gate(self.connect_done, connect, conn, error):
            return
        if not self.policy.is_current(connect):
            if conn is not None:
                conn.open = False
            return
        if conn is not None:
            if not conn.open:  # the master died while we connected: refused, in effect
                conn, error = None, ConnectionResetError("reset during connect")
            else:
                self.conns[connect.node] = conn
        self.carry_out(self.policy.connected(connect, error, self.local()))
        if self._ready:
            self._continue()

    def receive(self, conn: Conn, data: bytes) -> None:
        if not self.alive:
            return
        if self.paused:  # (_gate, inlined: every reply comes this way)
            self._deferred.append((self.receive, (conn, data)))
            return
        if self.conns.get(conn.node) is not conn:
            return
        conn.parser.feed(data)
        clock = self.clock
        now = clock.base + clock.rate * (self.world.now - clock.since)
        outcome = self.policy.received("command", conn.node, conn.parser, now)
        if outcome.write:
            self.world.network.to_master(conn, outcome.write)
        if outcome.hang_up:
            del self.conns[conn.node]
            conn.open = False
        elif outcome.failure is not None:
            self._lose(conn, outcome.failure)
        if self._ready:
            self._continue()

    def reset(self, conn: Conn) -> None:
        if not self._gate(self.reset, conn) or self.conns.get(conn.node) is not conn:
            return
        self._lose(conn, ConnectionResetError("the master closed the connection"))
        if self._ready:
            self._continue()

    def _lose(self, conn: Conn, error: BaseException | str) -> None:
        self.conns.pop(conn.node, None)
        conn.open = False
        self.carry_out(self.policy.lost("command", conn.node, error, self.local()))

    # --- flows ----------------------------------------------------------------------------------

    def drive(self, flow: Flow, done: Callable[[Result], None]) -> None:
        """Run ``flow`` to its end, then call ``done`` with its result."""
        self._step(flow, done, None)

    def _step(self, flow: Flow, done: Callable[[Result], None], now: float | None) -> None:
        try:
            request = next(flow) if now is None else flow.send(now)
        except StopIteration as stop:
            done(stop.value)
            return
        except Exception as error:  # a broken client may raise: the run records it, goes on
            self.crashed(error)
            return
        if isinstance(request, Pause):
            self.later(request.seconds, self._resume_flow, flow, done)
        else:
            self._run_round(flow, done, request)

    def _resume_flow(self, flow: Flow, done: Callable[[Result], None]) -> None:
        self._step(flow, done, self.local())

    def _run_round(self, flow: Flow, done: Callable[[Result], None], round_: Round) -> None:
        now = self.local()
        run = _RoundRun(self, flow, done, round_, now + round_.timeout)
        self.policy.wake(round_, run.settled)
        policy, carry_out = self.policy, self.carry_out
        for node in round_.targets:
            carry_out(policy.submit(round_, node, now))
        if round_.settled:
            # (Every master skipped: the event that began the round continues it.)
            self.policy.wake(round_, None)
            self._ready.append(run.finish)
        else:
            self.later(round_.timeout, run.check, run.deadline)


class _RoundRun:
    """One round of a flow under way, as the synchronous driver's ``_run_round`` runs it:
    its timer, its overtime, and going on with the flow once it settles (one object a
    round, not three closures and a dict)."""

    __slots__ = ("client", "deadline", "done", "finished", "flow", "round")

    def __init__(
        self, client: Client, flow: Flow, done: Callable[[Result], None], round_: Round, deadline: float
    ) -> None:
        self.client = client
        self.flow = flow
        self.done = done
        self.round = round_
        self.deadline = deadline
        self.finished = False

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        client = self.client
        client.policy.wake(self.round, None)
        client.policy.time_out(self.round)
        client._step(self.flow, self.done, client.local())

    def settled(self) -> None:
        # Called from inside the policy while it records a reply: continue afterwards.
        self.client._ready.append(self.finish)

    def check(self, until: float) -> None:
        if self.finished:
            return
        if self.round.settled:
            self.finish()
            return
        client = self.client
        for connect in client.policy.expire_probes(client.local()):
            client.carry_out(connect)
        later = client.policy.overtime(self.round, self.deadline)
        if later is None or later <= client.local():
            self.finish()
        else:
            client.later(later - client.local(), self.check, later)
