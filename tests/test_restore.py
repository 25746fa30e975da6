"""A holder outlives a master's restart: an extend a majority confirmed writes our key back on
the masters that answered "no key at all", never over another holder, never counted.

The pure part drives the extend flow on model masters (tests/model.py) over every layout of
"ours", "another's" and "nothing" on five masters, for each kind of lock; the rest restarts
real masters empty under a held lock, in both APIs.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from redlock._api.telemetry import step_of
from redlock._protocol import scripts as _scripts
from redlock._protocol.core import Command, Round, fence_key, order_key, quorum_size
from redlock._protocol.flows import Lease, extend_flow, lost_keys
from redlock._protocol.kinds import FENCED, MultiLock, Semaphore
from redlock.exceptions import ExtendUnconfirmed, LockLost, NodeStatus

from .conftest import ClientFactory, MastersFactory, eventually, unique
from .model import ModelCluster

# --- the flow on model masters (pure) -------------------------------------------------------------

layouts = st.lists(st.sampled_from(["mine", "other", "none"]), min_size=5, max_size=5)


def _lay_out(cluster: ModelCluster, layout: list[str]) -> None:
    for master, state in zip(cluster.masters, layout, strict=True):
        if state != "none":
            master.keys["k"] = ("me" if state == "mine" else "other", cluster.now + 5)


@given(layouts, st.booleans())
def test_an_extend_restores_our_key_only_where_none_was_and_only_with_a_majority(
    layout: list[str], fenced: bool
) -> None:
    cluster = ModelCluster(5)
    _lay_out(cluster, layout)
    spec = cluster.spec(ttl=2.0, kind=FENCED) if fenced else cluster.spec(ttl=2.0)
    started = cluster.now
    result = cluster.run(extend_flow(spec, Lease("me", started + 1, fencing_token=7 if fenced else None), 2.0, started))
    mine = layout.count("mine")
    # Decided by the masters where the compare-and-pexpire succeeded, and by nothing else.
    assert result.ok == (mine >= quorum_size(5))
    assert result.granted == mine
    assert [o.status for o in result.outcomes].count(NodeStatus.GRANTED) == mine
    for master, state in zip(cluster.masters, layout, strict=True):
        holder = master.holder("k", cluster.now)
        if state == "other":
            assert holder == "other"  # never overwritten
        elif state == "none" and not result.ok:
            assert holder is None  # no majority: nothing is re-created
        else:
            assert holder == "me"
            # No longer than the extend gave the majority: its ttl, counted from its start.
            assert master.keys["k"][1] <= started + 2.0
            if state == "none":  # restored: no longer than the holder relies on it
                assert master.keys["k"][1] <= result.deadline
        if fenced and state == "none" and result.ok:
            assert master.holder(fence_key("k"), cluster.now) == "7"  # the lost counter too
    restores = cluster.rounds[1:]
    assert len(restores) == (1 if result.ok and "none" in layout else 0)
    if restores:
        assert restores[0].targets == tuple(i for i, state in enumerate(layout) if state == "none")


def test_a_restore_is_not_sent_once_the_lease_ended_or_was_lost() -> None:
    for flag in ("ended", "lost"):
        cluster = ModelCluster(5)
        _lay_out(cluster, ["none", "mine", "mine", "mine", "mine"])
        lease = Lease("me", cluster.now + 1)
        flow = extend_flow(cluster.spec(), lease, 1.0, cluster.now)
        extend = next(flow)
        setattr(lease, flag, True)  # a release (or the renewer's loss) while the extend was out
        with pytest.raises(StopIteration):
            flow.send(cluster.answer(extend))
        assert cluster.masters[0].holder("k", cluster.now) is None


def test_the_native_extends_nil_is_taken_for_a_lost_key_and_the_set_nx_sorts_it_out() -> None:
    """``SET ... IFEQ`` answers nil for another's token as for no key: a restore is tried
    there too, and its SET NX changes nothing where the key is taken."""
    round_ = Round(Command(("SET", "k", "me", "IFEQ", "me", "PX", 1000)), (0, 1, 2), ("a", "b", "c"), 2, 0.1)
    round_.record_reply(0, b"OK")
    round_.record_reply(1, None)
    round_.record_reply(2, 0)  # the script's "another token"
    assert lost_keys(round_) == (1,)


def test_a_semaphore_permit_is_restored_only_where_a_permit_is_free() -> None:
    cluster = ModelCluster(7)  # two permits need 5 of 7 votes: two masters may restart
    spec = cluster.spec(ttl=2.0, kind=Semaphore(2), key="s")
    for token in ("me", "a"):
        assert cluster.acquire(spec, token).ok
    # Master 0 restarts empty, and two others fill it up; master 1 restarts and gets one.
    cluster.masters[0].keys.clear()
    cluster.masters[1].keys.clear()
    for token in ("b", "c"):
        cluster.masters[0].reply_to(spec.acquire_command(token), cluster.now)
    cluster.masters[1].reply_to(spec.acquire_command("b"), cluster.now)
    result = cluster.run(extend_flow(spec, Lease("me", cluster.now + 1), 2.0, cluster.now))
    assert result.ok
    assert result.granted == 5
    assert set(cluster.masters[0].permits["s"]) == {"b", "c"}  # full: never a third permit
    assert set(cluster.masters[1].permits["s"]) == {"b", "me"}  # room: ours again


def test_a_multi_name_lock_is_restored_all_names_or_none() -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=2.0, kind=MultiLock(("x", "y")), key="x")
    assert cluster.acquire(spec, "me").ok
    cluster.masters[0].keys.clear()
    cluster.masters[1].keys.clear()
    cluster.masters[1].keys["y"] = ("other", cluster.now + 5)
    result = cluster.run(extend_flow(spec, Lease("me", cluster.now + 1), 2.0, cluster.now))
    assert result.ok
    assert [cluster.masters[0].holder(n, cluster.now) for n in ("x", "y")] == ["me", "me"]
    assert [cluster.masters[1].holder(n, cluster.now) for n in ("x", "y")] == [None, "other"]


class RollingRestarts(RuleBasedStateMachine):
    """A holder extends while masters restart empty, one at a time: the next restart only
    after the holder's next successful extend (the discipline of docs/operations.md: wait an
    extension period). The extends' write-backs keep the holder on all masters but the one
    just restarted, and a contender never gets in while the holder's validity lasts. (Without
    the write-back, the third restart leaves the holder two keys: both invariants fail.)"""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = ModelCluster(5, round_time=0.005)
        self.spec = self.cluster.spec(ttl=1.0)
        assert self.cluster.acquire(self.spec, "holder").ok
        self.lease = Lease("holder", self.cluster.now + 0.9)
        self.contender_until = 0.0
        self.extended_since_restart = True

    def _holder_keys(self) -> int:
        return self.cluster.holders("holder")

    @rule()
    def extend(self) -> None:
        if self.lease.deadline > self.cluster.now:
            result = self.cluster.run(extend_flow(self.spec, self.lease, 1.0, self.cluster.now))
            self.extended_since_restart |= result.ok

    @rule(seconds=st.floats(min_value=0.0, max_value=0.5))
    def time_passes(self, seconds: float) -> None:
        self.cluster.now += seconds

    @rule(node=st.integers(0, 4))
    def restart_empty(self, node: int) -> None:
        holding = self.lease.deadline > self.cluster.now
        if self.extended_since_restart or not holding:
            self.cluster.masters[node].keys.clear()
            self.extended_since_restart = False

    @rule()
    def contender_tries(self) -> None:
        result = self.cluster.acquire(self.spec, "contender")
        if result.ok:
            self.contender_until = result.deadline

    @invariant()
    def one_holder_at_a_time(self) -> None:
        now = self.cluster.now
        assert not (self.lease.deadline > now and self.contender_until > now)

    @invariant()
    def a_valid_holder_keeps_all_but_one_master(self) -> None:
        if self.lease.deadline > self.cluster.now and not self.lease.lost:
            assert self._holder_keys() >= 4


TestRollingRestarts = RollingRestarts.TestCase
TestRollingRestarts.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


# --- real masters, both APIs -----------------------------------------------------------------------


def _extend_until_back(lock: object, master: redis.Redis, name: str, token: str, within: float = 8.0) -> bool:
    """Extend until ``master`` has our key again: the first extend after a restart may find
    the old connection broken (no answer, so no restore), and the client then backs off
    before it connects again (longer on a loaded machine); a later one has a new connection."""
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        lock.extend()  # type: ignore[attr-defined]
        if master.get(name) == token.encode():
            return True
        time.sleep(0.05)
    return False


def test_a_master_restarted_empty_gets_our_key_back_and_another_holder_keeps_its_own(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    masters = matrix_masters(5)
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, wake_on_release=False)
    name = unique()
    lock = rl.lock(name, ttl=10.0)
    assert lock.acquire(blocking=False)
    token = lock.token
    assert token is not None
    masters[0].restart(wipe=True)  # comes back empty: the lock's key is gone there
    raw[1].set(name, "other", px=60_000)  # and master 1 somehow holds another token
    assert raw[0].get(name) is None
    assert _extend_until_back(lock, raw[0], name, token)
    assert 0 < raw[0].pttl(name) <= 10_000  # what was left of the extend's ttl
    assert raw[1].get(name) == b"other"  # SET NX: never over another holder
    assert [master.get(name) for master in raw[2:]] == [token.encode()] * 3
    lock.extend()  # the restored key is extended like any other from now on
    assert raw[0].get(name) == token.encode()
    lock.release()
    assert [master.get(name) for master in raw] == [None, b"other", None, None, None]
    assert raw[0].exists(order_key(name)) == 0


def test_no_restore_without_a_majority(client: ClientFactory, matrix_masters: MastersFactory) -> None:
    """Two of three masters restarted empty: the extend finds the lock gone and re-creates
    nothing (the self-test's extend-recreates variant is that mistake)."""
    masters = matrix_masters(3)
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, wake_on_release=False)
    lock = rl.lock(unique(), ttl=10.0)
    assert lock.acquire(blocking=False)
    masters[0].restart(wipe=True)
    masters[1].restart(wipe=True)
    for _ in range(40):
        try:
            lock.extend()
        except ExtendUnconfirmed:  # the restarts broke the connections: not answered yet
            time.sleep(0.05)
        except LockLost:
            break
    else:
        pytest.fail("the extend never found our token gone from the majority")
    assert [master.get(lock.name) for master in raw[:2]] == [None, None]


def test_an_auto_extended_lock_survives_a_rolling_restart_of_every_master(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    masters = matrix_masters(3)
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, wake_on_release=False)
    lost: list[object] = []
    lock = rl.lock(unique(), ttl=1.5, auto_extend=True, on_lost=lost.append)
    assert lock.acquire(blocking=False)
    token = lock.token
    assert token is not None
    for i, master in enumerate(masters):
        master.restart(wipe=True)
        # The renewer's next extension (every ttl/3) writes it back.
        assert eventually(lambda m=raw[i]: m.get(lock.name) == token.encode(), within=10), i
    assert lock.locked()
    assert lost == []
    lock.release()
    assert [master.exists(lock.name) for master in raw] == [0, 0, 0]


def test_a_fenced_lock_restores_the_fencing_counter_too(client: ClientFactory, matrix_masters: MastersFactory) -> None:
    masters = matrix_masters(3)
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, wake_on_release=False)
    name = unique()
    lock = rl.lock(name, ttl=10.0, fencing=True)
    assert lock.acquire(blocking=False)
    token, fencing = lock.token, lock.fencing_token
    assert token is not None
    assert fencing is not None
    masters[2].restart(wipe=True)
    assert _extend_until_back(lock, raw[2], name, token)
    assert raw[2].get(fence_key(name)) == str(fencing).encode()
    lock.release()


def test_a_semaphore_and_a_multi_name_lock_are_restored_too(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    masters = matrix_masters(5)  # a permit of two needs 4 of 5 votes: one master may restart
    raw = [redis.Redis.from_url(url) for url in masters.urls]
    rl = client(masters.urls, wake_on_release=False)
    name = unique()
    permit = rl.semaphore(name, 2, ttl=10.0)
    both = rl.lock([unique(), unique()], ttl=10.0)
    assert permit.acquire(blocking=False)
    assert both.acquire(blocking=False)
    masters[0].restart(wipe=True)
    for _ in range(20):
        permit.extend()
        both.extend()
        if raw[0].exists(name, *both.names) == 3:
            break
        time.sleep(0.05)
    assert permit.token is not None
    assert both.token is not None
    assert raw[0].zscore(name, permit.token) is not None
    assert [raw[0].get(n) for n in both.names] == [both.token.encode()] * 2
    permit.release()
    both.release()


def test_the_extend_scripts_tell_no_key_from_another_holders(matrix_masters: MastersFactory) -> None:
    (master,) = (redis.Redis.from_url(url) for url in matrix_masters(1).urls)
    name = unique()

    def extend(script: _scripts.Script, keys: list[str], token: str = "me") -> object:
        return master.eval(script.source, len(keys), *keys, token, 1000, 1)

    assert extend(_scripts.EXTEND, [name, order_key(name)]) is None
    master.set(name, "other")
    assert extend(_scripts.EXTEND, [name, order_key(name)]) == 0
    multi = [unique(), unique(), order_key(name)]
    assert extend(_scripts.MULTI_EXTEND, multi) is None
    master.set(multi[1], "other")
    assert extend(_scripts.MULTI_EXTEND, multi) == 0
    semaphore = [unique(), order_key(unique())]
    assert extend(_scripts.SEMAPHORE_EXTEND, semaphore) is None
    master.zadd(semaphore[0], {"me": 1})  # there, long expired
    assert extend(_scripts.SEMAPHORE_EXTEND, semaphore) == 0


def test_restore_rounds_are_named_restore_in_telemetry() -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec()
    set_nx = Round(spec.restore_command("me", 1.0, None), (0,), spec.node_names, 3, 0.1)
    assert step_of("extend", set_nx) == "restore"
    assert step_of("acquire", set_nx) == "acquire"
    fenced = dataclasses.replace(spec, kind=FENCED)
    assert step_of("extend", Round(fenced.restore_command("me", 1.0, 3), (0,), spec.node_names, 3, 0.1)) == "restore"
