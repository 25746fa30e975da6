"""The read-write lock in the pure core: its kinds, its flows on model masters, and the
model of its scripts checked against a real master.

The flows run against the model masters of tests/model.py, which apply the read-write
scripts as a real master does (with its own clock); a stateful test drives readers and
writers through acquires, extends, releases, expiry and masters going down, and checks
after every step that no writer ever shares the name with anyone.
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from chaos.sim.model import Keyspace
from redlock._protocol import scripts as _scripts
from redlock._protocol.connection import Waiters
from redlock._protocol.core import (
    READERS_MARK,
    Command,
    Pause,
    Round,
    intent_key,
    order_key,
    readers_key,
    release_channel,
    reply_status,
    wakes_all,
)
from redlock._protocol.flows import Lease, LockSpec, Tokens, acquire_flow, extend_flow, release_flow
from redlock._protocol.kinds import ALL_STEPS, READ, WRITE, kind_of
from redlock.exceptions import NodeStatus
from redlock.servers import LocalMasters

from .conftest import unique
from .model import FaultyClusterMachine, ModelCluster, ModelMaster


def side(cluster: ModelCluster, mode: str, ttl: float = 1.0, key: str = "k") -> LockSpec:
    return dataclasses.replace(cluster.spec(ttl=ttl, key=key), kind=kind_of(mode=mode))


def readers(master: ModelMaster, now: float, key: str = "k") -> dict[str, float]:
    """The unexpired readers of ``key`` on ``master`` (token -> expiry, ms)."""
    value = master.get(readers_key(key), now)
    ms = math.floor(now * 1000)
    return {t: s for t, s in value.items() if s >= ms} if isinstance(value, dict) else {}


def test_the_kinds_and_their_steps() -> None:
    assert kind_of(mode="read") is READ
    assert kind_of(mode="write") is WRITE
    assert (READ.mode, WRITE.mode, kind_of().mode) == ("read", "write", "")
    assert WRITE.marks_refusals
    assert not READ.marks_refusals
    # A client's waiting writers take turns at the masters; its readers all go together.
    assert WRITE.waits_in_line
    assert not READ.waits_in_line
    for script in (_scripts.RW_READ_ACQUIRE, _scripts.RW_WRITE_ACQUIRE, _scripts.RW_WRITE_RELEASE):
        assert script.sha in ALL_STEPS
        assert script in _scripts.ALL
    # Readers wait on their own channel, where the writer's release wakes them all at once.
    refused = Round(Command(("SET", "k", "t")), (0, 1, 2), ("a", "b", "c"), quorum=2, timeout=0.05)
    assert READ.wake_key("k", refused) == readers_key("k")
    assert WRITE.wake_key("k", refused) == "k"
    assert wakes_all(release_channel(readers_key("k")))
    assert not wakes_all(release_channel("k"))
    assert not wakes_all(release_channel("redlock:readersX"))


def test_a_refused_writer_marks_its_intent_and_takes_it_back_when_it_gives_up() -> None:
    cluster = ModelCluster(5)
    assert cluster.acquire(side(cluster, "read"), "r1").ok
    write = side(cluster, "write")
    tokens = Tokens(lambda: "w1")
    flow = acquire_flow(write, tokens, cluster.now, blocking=True, timeout=0.5, rng=random.Random(1))
    # Drive it by hand to its first pause after an attempt (a blocking acquire first takes
    # its place in the client's line): the intent is on every master meanwhile.
    before = len(cluster.rounds)
    request = next(flow)
    while not (isinstance(request, Pause) and len(cluster.rounds) > before):
        request = flow.send(cluster.answer(request))
    assert all(m.holder(intent_key("k"), cluster.now) == "w1" for m in cluster.masters)
    assert not cluster.acquire(side(cluster, "read"), "r2").ok  # no new reader meanwhile
    lease = Lease("r1", cluster.now + 0.5)
    assert cluster.run(extend_flow(side(cluster, "read"), lease, 1.0, cluster.now)).ok  # r1 stays
    with pytest.raises(StopIteration) as stop:
        while True:
            request = flow.send(cluster.answer(request))
    assert stop.value.value.timed_out
    # It gave up: its last round took the intent back everywhere, and announced it.
    last = cluster.rounds[-1]
    assert last.command.script is _scripts.RW_WRITE_RELEASE
    assert last.targets == (0, 1, 2, 3, 4)
    assert all(m.get(intent_key("k"), cluster.now) is None for m in cluster.masters)
    assert cluster.acquire(side(cluster, "read"), "r3").ok


def test_a_writer_that_won_clears_every_intent_of_its_own_at_release() -> None:
    cluster = ModelCluster(5)
    # A reader on two masters only (a failed read acquire elsewhere, say): the writer wins
    # on the other three and marks its intent on these two.
    for master in cluster.masters[:2]:
        master.set(readers_key("k"), {"r": math.floor(cluster.now * 1000) + 5000}, cluster.now, 5000)
    write = side(cluster, "write")
    assert cluster.acquire(write, "w").ok
    assert [m.holder(intent_key("k"), cluster.now) for m in cluster.masters] == ["w", "w", None, None, None]
    assert cluster.run(release_flow(write, "w", cluster.now)).ok
    assert all(m.get(intent_key("k"), cluster.now) is None for m in cluster.masters)
    assert all(m.get("k", cluster.now) is None for m in cluster.masters)


reaches = st.integers(min_value=1, max_value=7).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.sets(st.integers(0, n - 1)), min_size=1, max_size=8))
)


@given(reaches, st.lists(st.sampled_from(["read", "write"]), min_size=8, max_size=8))
def test_no_writer_holds_beside_anyone_whatever_each_attempt_reaches(
    case: tuple[int, list[set[int]]], modes: list[str]
) -> None:
    """Attempts that each reach a random subset of masters (the others time out, so their
    command may have landed) never leave a writer beside another holder."""
    n, attempts = case
    cluster = ModelCluster(n)
    held: list[tuple[str, str]] = []
    for number, (reach, mode) in enumerate(zip(attempts, modes, strict=False)):
        cluster.reach = reach
        token = f"{mode}{number}"
        if cluster.acquire(side(cluster, mode, ttl=100.0), token).ok:
            held.append((mode, token))
    writers = [token for mode, token in held if mode == "write"]
    assert len(writers) <= 1
    assert not writers or len(held) == 1, held


class ReadWriteExclusion(FaultyClusterMachine):
    """Readers and writers acquire, extend and release on model masters that may go down
    and come back with their data, while time passes; a writer never holds (by its own
    deadline) beside any other holder, and every holder has a majority behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = ModelCluster(5, round_time=0.01)
        self.modes = ["read", "read", "read", "write", "write"]
        self.leases: dict[str, Lease] = {}

    def token(self, client: int) -> str:
        return f"{self.modes[client]}{client}"

    @rule(client=st.integers(0, 4), blocking=st.booleans(), seed=st.integers(0, 100))
    def acquire(self, client: int, blocking: bool, seed: int) -> None:
        token = self.token(client)
        lease = self.leases.get(token)
        if lease is not None and lease.deadline > self.cluster.now:
            return
        spec = side(self.cluster, self.modes[client])
        flow = acquire_flow(
            spec,
            Tokens(lambda: token),
            self.cluster.now,
            blocking=blocking,
            timeout=0.3 if blocking else None,
            rng=random.Random(seed),
        )
        result = self.cluster.run(flow)
        if result.ok:
            self.leases[token] = Lease(token, result.deadline)

    @rule(client=st.integers(0, 4))
    def release(self, client: int) -> None:
        token = self.token(client)
        if self.leases.pop(token, None) is not None:
            self.cluster.run(release_flow(side(self.cluster, self.modes[client]), token, self.cluster.now))

    @rule(client=st.integers(0, 4), ttl=st.sampled_from([0.05, 0.3, 1.0, 2.0]))
    def extend(self, client: int, ttl: float) -> None:
        token = self.token(client)
        lease = self.leases.get(token)
        if lease is not None:
            result = self.cluster.run(extend_flow(side(self.cluster, self.modes[client]), lease, ttl, self.cluster.now))
            if result.token_gone and not result.ok:
                del self.leases[token]

    def holding(self) -> list[str]:
        return [token for token, lease in self.leases.items() if lease.deadline > self.cluster.now]

    @invariant()
    def a_writer_holds_alone(self) -> None:
        holding = self.holding()
        writers = [token for token in holding if token.startswith("write")]
        assert not writers or holding == writers[:1], holding

    @invariant()
    def every_holder_has_a_majority(self) -> None:
        now = self.cluster.now
        for token in self.holding():
            if token.startswith("write"):
                votes = sum(m.holder("k", now) == token for m in self.cluster.masters)
            else:
                votes = sum(token in readers(m, now) for m in self.cluster.masters)
            assert votes >= 3, (token, votes)


TestReadWriteExclusion = ReadWriteExclusion.TestCase
TestReadWriteExclusion.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


# --- the model against a real master ------------------------------------------------------

operations = st.lists(
    st.tuples(st.sampled_from(["read", "write", "extend", "release"]), st.integers(0, 3)), min_size=1, max_size=25
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
def test_the_model_answers_as_a_real_master(masters: LocalMasters, ops: list[tuple[str, int]]) -> None:
    """The same commands, with ttls long enough that nothing expires meanwhile, get the same
    replies from the model and from a real master, and leave the same keys behind."""
    name = unique("rwmodel")
    model = Keyspace()
    numbers: dict[str, int] = {}
    with redis.Redis.from_url(masters.urls[0]) as real:
        for op, who in ops:
            token = f"{'w' if who >= 2 else 'r'}{who}"
            spec_kind = WRITE if token.startswith("w") else READ
            numbers[token] = numbers.get(token, 0) + 1
            command: Command
            if op in ("read", "write"):
                kind = READ if op == "read" else WRITE
                command = kind.acquire(name, token, 60_000)
            elif op == "extend":
                command = spec_kind.extend(name, token, 60_000, numbers[token])
            else:
                command = spec_kind.release(name, token, notify=True)
            now = _master_time(real)
            assert command.script is not None
            real.script_load(command.script.source)
            got = real.evalsha(command.script.sha, *command.args[2:])
            want = model.command(command, now)
            assert _as_int(got) == _as_int(want), (op, token)
        for key in (name, intent_key(name)):
            value = real.get(key)
            assert model.holder(key, _master_time(real)) == (None if value is None else value.decode())
        members = {m.decode() for m in real.zrange(readers_key(name), 0, -1)}  # type: ignore[union-attr]
        assert members == set(model.get(readers_key(name), _master_time(real)) or {})
        real.delete(name, intent_key(name), readers_key(name), order_key(name), order_key(readers_key(name)))


def _master_time(real: redis.Redis) -> float:
    seconds, micros = real.time()  # type: ignore[misc]
    return int(seconds) + int(micros) / 1e6


def _as_int(reply: object) -> int:
    return {NodeStatus.GRANTED: 1, NodeStatus.DENIED: 0}[reply_status(reply)]


def test_the_writers_release_wakes_every_waiting_reader_of_a_client_once() -> None:
    waiters: Waiters[Any] = Waiters()
    readers_channel, writers_channel = release_channel(readers_key("k")), release_channel("k")
    reading = [threading.Event() for _ in range(3)]
    writing = [threading.Event() for _ in range(2)]
    for event in reading:
        waiters.add(readers_channel, event)
    for event in writing:
        waiters.add(writers_channel, event)
    for _ in range(5):  # one announcement per master, on both channels
        waiters.released(readers_channel, b"writer-1")
        waiters.released(writers_channel, b"writer-1")
    assert all(event.is_set() for event in reading)  # readers share: all of them go
    assert [event.is_set() for event in writing] == [True, False]  # writers compete: one goes


@given(st.integers(min_value=2, max_value=6), st.integers(min_value=1, max_value=3), st.integers(0, 100))
def test_a_writer_gets_in_under_a_steady_stream_of_readers(hold: int, arrivals: int, seed: int) -> None:
    """Between two attempts of a waiting writer, ``arrivals`` readers come, and each reads
    until ``hold`` more of the writer's attempts have passed, so a reader is always in. With
    its intent the writer gets in once the readers that were in at its first refusal have
    left; a writer whose refusals mark nothing (the same stream, its marks wiped after each
    attempt) never does."""
    for marks in (True, False):
        cluster = ModelCluster(5, round_time=0.001)
        read, write = side(cluster, "read", ttl=10.0), side(cluster, "write", ttl=10.0)
        numbers = iter(range(1000))
        tokens = Tokens(lambda numbers=numbers: f"w{next(numbers)}")  # type: ignore[misc]
        flow = acquire_flow(write, tokens, cluster.now, blocking=True, timeout=3.0, rng=random.Random(seed))
        # Readers are in already when the writer first asks.
        reading = [(f"r0.{n}", hold) for n in range(arrivals) if cluster.acquire(read, f"r0.{n}").ok]
        assert reading
        attempts = 0
        with pytest.raises(StopIteration) as done:
            request = next(flow)
            while True:
                if isinstance(request, Pause):  # between two attempts: the readers' turn
                    attempts += 1
                    if not marks:
                        for master in cluster.masters:
                            master.delete(intent_key("k"))
                    for token, leaves in [r for r in reading if r[1] <= attempts]:
                        cluster.run(release_flow(read, token, cluster.now))
                        reading.remove((token, leaves))
                    for arrival in range(arrivals):
                        token = f"r{attempts}.{arrival}"
                        if cluster.acquire(read, token).ok:
                            reading.append((token, attempts + hold))
                request = flow.send(cluster.answer(request))
        if marks:
            assert done.value.value.ok
            assert attempts <= hold + 1  # the readers in at its first refusal, and no one after
            assert not reading  # it got in alone
        else:
            assert not done.value.value.ok
            assert done.value.value.timed_out


def test_a_side_is_restored_only_where_its_own_acquire_would_grant_it() -> None:
    """After an extend a majority confirmed, a master that lost our entry gets it back by the
    side's own acquire: a reader not beside a writer (or its intent), the writer not beside
    a reader let in meanwhile; never counted either way."""
    cluster = ModelCluster(5)
    read, write = side(cluster, "read", ttl=2.0), side(cluster, "write", ttl=2.0)
    assert cluster.acquire(read, "me").ok
    for master in cluster.masters[:2]:
        master.keys.clear()  # restarted empty
    cluster.masters[1].reply_to(write.acquire_command("other-writer"), cluster.now)  # a writer got in there
    result = cluster.run(extend_flow(read, Lease("me", cluster.now + 1), 2.0, cluster.now))
    assert result.ok
    assert result.granted == 3
    assert "me" in readers(cluster.masters[0], cluster.now)  # back
    assert "me" not in readers(cluster.masters[1], cluster.now)  # never beside the writer
    assert cluster.masters[1].holder("k", cluster.now) == "other-writer"

    cluster = ModelCluster(5)
    write = side(cluster, "write", ttl=2.0)
    assert cluster.acquire(write, "me").ok
    for master in cluster.masters[:2]:
        master.keys.clear()
    cluster.masters[1].reply_to(side(cluster, "read", ttl=2.0).acquire_command("reader"), cluster.now)
    result = cluster.run(extend_flow(write, Lease("me", cluster.now + 1), 2.0, cluster.now))
    assert result.ok
    assert result.granted == 3
    assert cluster.masters[0].holder("k", cluster.now) == "me"  # back
    # Never beside the reader: the name's key holds the readers' mark there, so that master
    # answers the extend "held by another" and is not restored to at all.
    assert cluster.masters[1].holder("k", cluster.now) == READERS_MARK
    assert cluster.masters[1].holder(intent_key("k"), cluster.now) is None
    assert cluster.run(release_flow(write, "me", cluster.now)).ok
    assert all(master.get(intent_key("k"), cluster.now) is None for master in cluster.masters)
