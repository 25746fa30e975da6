"""Property tests of the semaphore and the multi-name lock in the pure core (no servers).

Both are the lock's flows with other commands and, for the semaphore, another quorum. The
flows run against the model masters of tests/model.py, which apply the semaphore and
multi-name scripts the way a real master does (with its own clock), while each attempt
reaches a random subset of them (the others time out).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redlock._protocol import core as _core
from redlock._protocol.core import Round
from redlock._protocol.flows import Lease, LockSpec, Tokens, acquire_flow, extend_flow, release_flow
from redlock._protocol.kinds import kind_of

from .model import ModelCluster

# --- the quorum -------------------------------------------------------------------------------


@given(st.integers(min_value=1, max_value=60), st.integers(min_value=1, max_value=100))
def test_semaphore_quorum_is_the_smallest_safe_count(nodes: int, limit: int) -> None:
    quorum = _core.semaphore_quorum(nodes, limit)
    # limit + 1 holders with `quorum` votes each would need more grants than the masters have...
    assert (limit + 1) * quorum > limit * nodes
    # ...and with one vote fewer they would fit: no smaller count is safe.
    assert (limit + 1) * (quorum - 1) <= limit * nodes
    assert _core.quorum_size(nodes) <= quorum <= nodes
    assert _core.semaphore_quorum(nodes, limit + 1) >= quorum
    if limit == 1:
        assert quorum == _core.quorum_size(nodes)
    if limit >= nodes - 1:
        assert quorum == nodes


@pytest.mark.parametrize(("nodes", "limit"), [(0, 1), (5, 0), (5, -1)])
def test_semaphore_quorum_refuses_nonsense(nodes: int, limit: int) -> None:
    with pytest.raises(ValueError, match=r"node_count|limit"):
        _core.semaphore_quorum(nodes, limit)


def primitive_spec(
    cluster: ModelCluster, *, limit: int = 0, names: tuple[str, ...] = (), ttl: float = 100.0
) -> LockSpec:
    """A semaphore ``pool`` of ``limit`` permits, or a lock on ``names``, on the cluster's
    masters; nothing expires during a test unless it asks for a shorter ttl."""
    return cluster.spec(key=names[0] if names else "pool", ttl=ttl, kind=kind_of(names=names, limit=limit))


reaches = st.integers(min_value=3, max_value=7).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.sets(st.integers(0, n - 1)), min_size=1, max_size=12))
)


# --- the semaphore ----------------------------------------------------------------------------


@given(reaches, st.integers(min_value=1, max_value=4))
def test_no_more_than_limit_hold_whatever_each_one_reaches(case: tuple[int, list[set[int]]], limit: int) -> None:
    n, attempts = case
    cluster = ModelCluster(n)
    spec = primitive_spec(cluster, limit=limit)
    held = 0
    for number, reach in enumerate(attempts):
        cluster.reach = reach
        result = cluster.acquire(spec, f"t{number}")
        held += result.ok
        if not result.ok:  # rolled back wherever it may have landed
            assert all(f"t{number}" not in m.permits.get("pool", {}) for i, m in enumerate(cluster.masters))
        assert all(len(m.permits.get("pool", {})) <= limit for m in cluster.masters)
    assert held <= limit


@given(
    nodes=st.integers(min_value=1, max_value=9),
    limit=st.integers(min_value=0, max_value=5),
    forced=st.integers(min_value=0, max_value=9),
    key=st.text(min_size=1, max_size=5),
)
def test_a_spec_works_out_its_quorum_once_and_anew_when_replaced(nodes: int, limit: int, forced: int, key: str) -> None:
    """The quorum and the masters' indexes are worked out when a spec is made (every round
    asks for them): a spec made from another, renamed or replaced, has its own."""
    kind = kind_of(limit=limit)
    spec = LockSpec("k", 10.0, tuple(f"m{node}" for node in range(nodes)), 0.05, 0.01, 0.2, 10.0, kind)
    assert (spec.quorum, spec.all_nodes) == (kind.quorum(nodes), tuple(range(nodes)))
    replaced = dataclasses.replace(spec, forced_quorum=forced)
    assert replaced.quorum == (forced or kind.quorum(nodes))
    renamed = replaced.named(key)
    assert renamed == dataclasses.replace(replaced, key=key)
    assert (renamed.key, renamed.quorum, renamed.all_nodes) == (key, replaced.quorum, spec.all_nodes)
    shrunk = dataclasses.replace(renamed, node_names=renamed.node_names[:1], forced_quorum=0)
    assert (shrunk.quorum, shrunk.all_nodes) == (1, (0,))


def test_a_plain_majority_lets_one_too_many_in() -> None:
    """The counterexample behind the quorum: four holders with 3 of 5 votes, limit 3."""
    cluster = ModelCluster(5)
    spec = primitive_spec(cluster, limit=3)
    plain = dataclasses.replace(spec, forced_quorum=3)
    spread = [{(h * 3 + j) % 5 for j in range(3)} for h in range(4)]
    outcomes = {}
    for name, which in (("own", spec), ("plain", plain)):
        cluster = ModelCluster(5)
        held = 0
        for number, reach in enumerate(spread):
            cluster.reach = reach
            held += cluster.acquire(which, f"{name}{number}").ok
        outcomes[name] = held
    assert outcomes == {"own": 0, "plain": 4}


def test_semaphore_extend_never_revives_and_release_needs_its_quorum() -> None:
    cluster = ModelCluster(5)
    spec = primitive_spec(cluster, limit=2, ttl=1.0)
    assert cluster.acquire(spec, "me").ok
    lease = Lease("me", cluster.now + 0.9)
    for master in cluster.masters[:2]:
        del master.permits["pool"]["me"]  # expired there, or lost in a restart
    extended = cluster.run(extend_flow(spec, lease, 1.0, cluster.now))
    assert not extended.ok  # 3 of 5 is not the 4 a permit of limit 2 needs
    assert extended.token_gone
    assert all("me" not in m.permits["pool"] for m in cluster.masters[:2])
    released = cluster.run(release_flow(spec, "me", cluster.now))
    assert not released.ok
    assert all(not m.permits["pool"] for m in cluster.masters)


# --- several names ----------------------------------------------------------------------------

name_sets = st.lists(st.sets(st.sampled_from("abcde"), min_size=1, max_size=3), min_size=1, max_size=8)


@given(reaches, name_sets)
def test_no_name_has_two_holders_and_a_failure_sets_nothing(
    case: tuple[int, list[set[int]]], sets: list[set[str]]
) -> None:
    n, attempts = case
    cluster = ModelCluster(n)
    holders: dict[str, str] = {}
    for number, (reach, names) in enumerate(zip(attempts, sets, strict=False)):
        cluster.reach = reach
        token = f"t{number}"
        result = cluster.acquire(primitive_spec(cluster, names=tuple(sorted(names))), token)
        if result.ok:
            assert not names & holders.keys(), f"{token} holds {names} beside {holders}"
            holders.update(dict.fromkeys(names, token))
        else:
            assert all(token != value for m in cluster.masters for value, _ in m.keys.values())
        for master in cluster.masters:  # each master holds whole sets only
            mine = {name for name, (value, _) in master.keys.items() if value == token}
            assert mine in (set(), names)


def test_multi_lock_waits_for_the_name_most_masters_found_held() -> None:
    cluster = ModelCluster(5)
    spec = primitive_spec(cluster, names=("a", "b", "c"))
    for master in cluster.masters[:3]:
        master.keys["c"] = ("other", 1e9)
    for master in cluster.masters[3:]:
        master.keys["b"] = ("other", 1e9)
    flow = acquire_flow(spec, Tokens(lambda: "me"), cluster.now, blocking=True, timeout=1.0, rng=random.Random(0))
    request = next(flow)
    assert isinstance(request, Round)
    while isinstance(request, Round):  # the attempt, and a rollback where a master had room (none here)
        request = flow.send(cluster.answer(request))
    assert isinstance(request, _core.Pause)
    assert request.wake_on == "c"
    flow.close()
