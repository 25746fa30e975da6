"""Lock-delay, and the operator's view: ``inspect`` and ``force_release``.

The pure parts (the key's life, reading a round into a LockInfo) are checked with
hypothesis; the rest on real masters, once per public API through the ``client`` fixture.
"""

from __future__ import annotations

import math
import threading
import time

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

import redlock
from redlock import LockInfo, LockLost, MasterInfo, NodeStatus
from redlock._protocol.core import MAX_TTL, Command, Request, Result, Round
from redlock._protocol.flows import LockSpec, force_release_flow, inspect_flow, lock_info
from redlock.servers import LocalMasters

from .cli_helpers import closed_ports
from .conftest import ClientFactory, eventually, unique
from .model import drive

NODES = tuple(f"m{i}" for i in range(5))


def _spec(ttl: float = 10.0, lock_delay: float = 0.0) -> LockSpec:
    return LockSpec("k", ttl, NODES, 0.05, 0.01, 0.2, 10.0, lock_delay=lock_delay)


# --- pure ----------------------------------------------------------------------------------------


@given(st.floats(0.01, 1e6), st.floats(0.0, 1e6))
def test_the_keys_live_ttl_plus_lock_delay_while_validity_counts_ttl(ttl: float, lock_delay: float) -> None:
    spec = _spec(ttl, lock_delay)
    assert spec.key_milliseconds(ttl) == max(1, math.floor((ttl + lock_delay) * 1000))
    assert spec.deadline_after(0.0) == _spec(ttl).deadline_after(0.0)  # the delay is never counted on


_reply = st.one_of(
    st.none(),  # no answer (timeout)
    st.tuples(st.sampled_from([None, b"a", b"b", b"c"]), st.sampled_from([-1, 0, 5, 10_000])),
)


@given(st.lists(_reply, min_size=5, max_size=5), st.booleans())
def test_lock_info_names_the_holder_only_with_a_quorum(replies: list[object], forced: bool) -> None:
    spec = _spec()
    flow = force_release_flow(spec) if forced else inspect_flow(spec)
    rounds: list[Round] = []

    def answer(round_: Request) -> float:
        assert isinstance(round_, Round)
        assert round_.wait_for_all
        rounds.append(round_)
        for node, reply in enumerate(replies):
            if reply is None:
                round_.record(node, NodeStatus.TIMEOUT, "no reply")
            else:
                token, pttl = reply  # type: ignore[misc]
                round_.record_reply(node, [1, token, pttl, [], None, -2])
        return 1.0

    info = lock_info(spec, drive(flow, answer))
    assert len(rounds) == 1
    tokens = [r[0].decode() for r in replies if r is not None and r[0] is not None]  # type: ignore[index]
    assert info.reachable == sum(r is not None for r in replies)
    assert info.votes == max((tokens.count(t) for t in tokens), default=0)
    assert (info.holder is not None) == (info.votes >= 3)
    if info.holder is not None:
        assert tokens.count(info.holder) >= 3
    for master, reply in zip(info.masters, replies, strict=True):
        if reply is None:
            assert (master.reachable, master.token, master.error) == (False, None, "no reply")
        elif reply[0] is None:  # type: ignore[index]
            assert (master.reachable, master.token, master.ttl) == (True, None, None)
        else:
            assert master.ttl == (math.inf if reply[1] == -1 else max(0, reply[1]) / 1000)  # type: ignore[index]


@given(
    st.lists(st.sets(st.sampled_from("rst"), max_size=3), min_size=5, max_size=5),
    st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_lock_info_counts_readers_on_a_quorum_and_the_most_marked_intent(
    readers: list[set[str]], marked: list[bool]
) -> None:
    spec = _spec()
    round_ = Round(Command(("X",)), spec.all_nodes, NODES, 3, 0.05, wait_for_all=True)
    for node, (mine, mark) in enumerate(zip(readers, marked, strict=True)):
        scored = [item for token in sorted(mine) for item in (token.encode(), 1500)]
        round_.record_reply(node, [1, None, -2, scored, b"w" if mark else None, 900 if mark else -2])
    info = lock_info(spec, Result(True, (), 0, rounds=(round_,)))
    assert info.readers == tuple(t for t in "rst" if sum(t in mine for mine in readers) >= 3)
    assert info.intent == ("w" if any(marked) else None)
    assert info.holder is None
    for master, mine, mark in zip(info.masters, readers, marked, strict=True):
        assert master.readers == tuple((token, 1.5) for token in sorted(mine))
        assert (master.intent, master.intent_ttl) == (("w", 0.9) if mark else (None, None))


def test_lock_info_of_an_unexpected_reply_is_not_a_holder() -> None:
    spec = _spec()
    round_ = Round(Command(("X",)), spec.all_nodes, NODES, 3, 0.05)
    round_.record_reply(0, [1, b"a"])  # not the script's six items
    for node in range(1, 5):
        round_.record(node, NodeStatus.ERROR, "WRONGTYPE")
    info = lock_info(spec, Result(True, (), 0, rounds=(round_,)))
    errors = ["unexpected reply [1, b'a']", *["WRONGTYPE"] * 4]
    assert info == LockInfo(
        "k",
        3,
        tuple(MasterInfo(n, False, error=e, status=NodeStatus.ERROR) for n, e in zip(NODES, errors, strict=True)),
    )
    assert (info.holder, info.leading, info.votes, info.reachable, info.answered) == (None, None, 0, 0, 5)


def test_lock_info_says_a_master_silent_until_the_timeout_timed_out() -> None:
    """A round that waits for all settles, past its timeout, without one that never replied:
    that master is reported as not answering in time, with the time waited, not as "not awaited"."""
    spec = _spec()
    round_ = Round(Command(("X",)), spec.all_nodes, NODES, 3, 0.5, wait_for_all=True)
    for node in range(4):
        round_.record_reply(node, [1, None, -2, [], None, -2])
    info = lock_info(spec, Result(True, (), 0, rounds=(round_,)))
    silent = info.masters[4]
    assert (silent.reachable, silent.status, silent.error) == (False, NodeStatus.TIMEOUT, "no reply within 0.50s")
    assert (info.reachable, info.answered) == (4, 4)


# --- lock-delay on real masters -----------------------------------------------------------------


def test_lock_delay_keeps_others_out_after_the_holders_validity(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl = client(masters.urls)
    name = unique()
    stopped = rl.lock(name, ttl=0.5, lock_delay=1.5)
    assert stopped.acquire()
    assert stopped.validity <= 0.5
    assert eventually(lambda: all(1000 < node.pttl(name) <= 2000 for node in raw))  # type: ignore[operator]
    # The holder stops without releasing (crashed, hung, cut off): its validity runs out...
    assert eventually(lambda: not stopped.locked())
    other = rl.lock(name, ttl=0.5)
    # ...yet nobody else gets in before the delay is over: late writes of the stopped
    # holder would land while nobody holds the lock.
    assert not other.acquire(blocking=False)
    assert rl.inspect(name).holder == stopped.token
    assert eventually(lambda: other.acquire(blocking=False), within=30)
    other.release()


def test_lock_delay_costs_nothing_on_release(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique()
    with rl.lock(name, ttl=1.0, lock_delay=60.0):
        pass
    second = rl.lock(name)
    assert second.acquire(blocking=False)  # the release deleted the keys at once
    second.release()


def test_extend_keeps_the_lock_delay(client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]) -> None:
    rl = client(masters.urls)
    lock = rl.lock(unique(), ttl=1.0, lock_delay=5.0)
    assert lock.acquire()
    assert lock.extend(2.0) <= 2.0
    assert eventually(lambda: all(5000 < node.pttl(lock.name) <= 7000 for node in raw))  # type: ignore[operator]
    lock.release()


def test_lock_delay_arguments_are_checked(masters: LocalMasters) -> None:
    with redlock.Redlock(masters.urls) as rl:
        with pytest.raises(ValueError, match="lock_delay"):
            rl.lock("x", lock_delay=-1.0)
        with pytest.raises(ValueError, match="lock_delay"):
            rl.lock("x", lock_delay=math.nan)
        with pytest.raises(TypeError, match="lock_delay"):
            rl.lock("x", lock_delay="5")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="ttl \\+ lock_delay"):
            rl.lock("x", ttl=MAX_TTL, lock_delay=1.0)
        lock = rl.lock("x", ttl=10.0, lock_delay=MAX_TTL - 10.0)
        lock._adopt("t" * 40)  # extend's arguments are checked before anything is sent
        with pytest.raises(ValueError, match="ttl \\+ lock_delay"):
            lock.extend(11.0)


# --- inspect and force_release -------------------------------------------------------------------


def test_inspect_shows_the_holder_on_each_master(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique()
    free = rl.inspect(name)
    assert (free.name, free.quorum, free.reachable, free.holder, free.votes) == (name, 3, 5, None, 0)
    assert all(master.reachable and master.token is None for master in free.masters)
    with rl.lock(name, ttl=30.0) as lock:
        assert eventually(lambda: rl.inspect(name).votes == 5)
        info = rl.inspect(name)
        assert info.holder == lock.token
        assert [master.master for master in info.masters] == [f"{m.host}:{m.port}" for m in masters]
        assert all(master.ttl is not None and 25.0 < master.ttl <= 30.0 for master in info.masters)
    assert rl.inspect(name).holder is None


def test_inspect_past_an_unreachable_minority(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client([*masters.urls[:3], *closed_ports(2)])
    with rl.lock(unique(), ttl=30.0) as lock:
        info = rl.inspect(lock.name)
        assert (info.reachable, info.votes, info.holder) == (3, 3, lock.token)
        assert [master.reachable for master in info.masters] == [True, True, True, False, False]
        assert all(master.error for master in info.masters[3:])


def test_force_release_removes_whatever_holds_the_lock(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl, operator = client(masters.urls), client(masters.urls)
    name = unique()
    holder = rl.lock(name, ttl=30.0, fencing=True)
    assert holder.acquire()
    assert eventually(lambda: operator.inspect(name).votes == 5)
    removed = operator.force_release(name)
    assert removed.holder == holder.token
    assert [master.token for master in removed.masters] == [holder.token] * 5
    assert all(master.ttl is not None and 0 < master.ttl <= 30.0 for master in removed.masters)
    assert [node.get(name) for node in raw] == [None] * 5
    assert operator.force_release(name).votes == 0  # nothing left to remove
    # The next holder gets in at once, with a larger fencing token: the counters stay.
    successor = rl.lock(name, ttl=30.0, fencing=True)
    assert successor.acquire(blocking=False)
    assert successor.fencing_token > holder.fencing_token  # type: ignore[operator]
    successor.release()
    # The forced-out holder learns of it when it releases.
    with pytest.raises(LockLost):
        holder.release()


@pytest.mark.slow
def test_inspect_and_force_release_see_a_read_write_locks_readers_and_waiting_writer(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    rl, operator = client(masters.urls, retry_delay=20.0), client(masters.urls)
    name = unique()
    rw = rl.rwlock(name, ttl=30.0)
    readers = [rw.read(), rw.read()]
    assert all(reader.acquire(blocking=False) for reader in readers)
    tokens = tuple(sorted(reader.token for reader in readers))
    assert eventually(lambda: operator.inspect(name).readers == tokens)
    info = operator.inspect(name)
    assert (info.holder, info.intent) == (None, None)
    for master in info.masters:
        assert tuple(sorted(token for token, _ in master.readers)) == tokens
        assert all(25.0 < left <= 30.0 for _, left in master.readers)
    # A writer that waits marks its intent; the operator sees whose.
    writer = rw.write()
    got: list[bool] = []
    waiting = threading.Thread(target=lambda: got.append(writer.acquire(timeout=30.0)))
    waiting.start()
    assert eventually(lambda: operator.inspect(name).intent is not None)
    marked = operator.inspect(name)
    assert all(m.intent_ttl is not None and 0 < m.intent_ttl <= 30.0 for m in marked.masters if m.intent)
    removed = operator.force_release(name)
    assert removed.readers == tokens
    assert removed.intent == marked.intent
    readers_key, intent_key = f"redlock-quorum:readers:{name}", f"redlock-quorum:intent:{name}"
    waiting.join(30)
    assert got == [True]  # woken by the forced release, well before its 10 s retry
    assert eventually(lambda: operator.inspect(name).holder == writer.token)
    assert [node.exists(readers_key) for node in raw] == [0] * 5
    assert operator.inspect(name).readers == ()
    writer.release()
    assert [node.exists(name, intent_key) for node in raw] == [0] * 5
    for reader in readers:  # the forced-out readers learn of it when they release
        with pytest.raises(LockLost):
            reader.release()


def test_force_release_wakes_waiters(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls, retry_delay=20.0)  # its first retry comes 10 s at the earliest
    name = unique()
    holder = rl.lock(name, ttl=60.0)
    assert holder.acquire()
    waiter = rl.lock(name, ttl=10.0)
    started = time.monotonic()
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)))
    thread.start()
    time.sleep(0.3)
    rl.force_release(name)
    thread.join(30)
    assert got == [True]
    assert time.monotonic() - started < 9  # woken by the announcement, not by its timer
    waiter.release()
