"""Property tests of the pure parts of bounded holds, adoption, ``extend(add=...)``, the
bound on attempts and the decorator's names: no servers, the model masters of tests/model.py.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redlock._api.locked import NO_DEFAULT, LockedCall, _fields
from redlock._protocol.core import drift_allowance, validity_left
from redlock._protocol.flows import (
    Lease,
    Tokens,
    acquire_flow,
    added_ttl,
    bounded_extend_flow,
    extend_flow,
    held_ttl,
    hold_start,
    renewal_flow,
)

from .model import ModelCluster

# --- bounded holds ----------------------------------------------------------------------------


@given(
    ttl=st.floats(min_value=0.1, max_value=100),
    room=st.floats(min_value=-10, max_value=200),
    left=st.floats(min_value=0, max_value=100),
)
def test_a_capped_extend_never_passes_the_bound_and_still_gives_validity(ttl: float, room: float, left: float) -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=ttl)
    now = cluster.now
    lease = Lease("me", now + left, hold_until=now + room)
    capped = held_ttl(spec, lease, ttl, now)
    if capped is None:
        assert lease.hold_until - now < ttl  # only the bound makes an extend pointless
        return
    assert capped <= ttl
    assert capped == ttl or spec.deadline_after(now, capped) <= lease.hold_until
    assert capped == ttl or validity_left(capped, spec.node_timeout, spec.clock_drift_factor) > 0
    if capped < ttl:
        assert spec.deadline_after(now, capped) > lease.deadline  # worth its round


@given(
    max_hold_ttls=st.floats(min_value=1.0, max_value=6.0),
    round_time=st.floats(min_value=0.0005, max_value=0.02),
)
def test_renewal_stops_at_the_bound_and_the_keys_expire_with_it(max_hold_ttls: float, round_time: float) -> None:
    cluster = ModelCluster(5, round_time=round_time)
    spec = cluster.spec(ttl=1.0)
    acquired = cluster.acquire(spec, "me")
    assert acquired.ok
    started = hold_start(spec, acquired.deadline)
    assert started <= cluster.now  # the first SET was sent at or before the reply came
    lease = Lease("me", acquired.deadline, hold_until=started + max_hold_ttls * spec.ttl)
    rounds_before = len(cluster.rounds)
    cluster.run(renewal_flow(spec, lease, cluster.now))
    assert lease.lost
    assert lease.held_out  # lost to the bound, not to a failed renewal
    assert lease.deadline <= lease.hold_until
    assert cluster.now >= lease.deadline  # never reported lost while validity remained
    # The last extend set a ttl that ends with the hold: the next holder gets the lock then.
    assert cluster.holders("me") == 0 or cluster.now < lease.hold_until + spec.ttl * 0.02 + 0.01
    other = cluster.acquire(spec, "other")
    assert other.ok or cluster.now < lease.hold_until + spec.ttl * 0.02 + 0.01
    # A renewal every ttl/3 or so: a bounded number of rounds, no busy loop near the end.
    assert len(cluster.rounds) - rounds_before <= 3 * max_hold_ttls + 4


def test_an_extend_past_the_bound_is_capped_then_sends_nothing() -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=1.0)
    acquired = cluster.acquire(spec, "me")
    lease = Lease("me", acquired.deadline, hold_until=cluster.now + 1.5)
    cluster.now += 0.6
    result = cluster.run(bounded_extend_flow(spec, lease, 1.0, cluster.now))
    assert result.ok
    assert lease.held_out
    assert lease.deadline <= lease.hold_until
    rounds = len(cluster.rounds)
    again = cluster.run(bounded_extend_flow(spec, lease, 1.0, cluster.now))
    assert again.ok
    assert len(cluster.rounds) == rounds  # nothing left to add: no round


# --- extend(add=...) --------------------------------------------------------------------------


@given(
    factor=st.floats(min_value=0, max_value=0.5),
    left=st.floats(min_value=0, max_value=1000),
    add=st.floats(min_value=0.001, max_value=1000),
)
def test_add_moves_the_deadline_by_exactly_add(factor: float, left: float, add: float) -> None:
    cluster = ModelCluster(3)
    spec = cluster.spec(clock_drift_factor=factor)
    lease = Lease("me", cluster.now + left)
    ttl = added_ttl(spec, lease, add, cluster.now)
    assert spec.deadline_after(cluster.now, ttl) == pytest.approx(lease.deadline + add, rel=1e-9, abs=1e-9)
    assert ttl - drift_allowance(ttl, factor) == pytest.approx(left + add, rel=1e-9, abs=1e-9)


def test_extend_with_add_on_model_masters() -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=1.0)
    acquired = cluster.acquire(spec, "me")
    lease = Lease("me", acquired.deadline)
    before = lease.deadline
    result = cluster.run(extend_flow(spec, lease, added_ttl(spec, lease, 2.0, cluster.now), cluster.now))
    assert result.ok
    assert lease.deadline == pytest.approx(before + 2.0)


# --- adoption -----------------------------------------------------------------------------------


@given(giver_extends=st.integers(min_value=0, max_value=20), adopter_extends=st.integers(min_value=1, max_value=5))
def test_an_adopter_extends_for_real_however_many_extends_the_giver_made(
    giver_extends: int, adopter_extends: int
) -> None:
    """The masters remember the number of the last extend of a holding; an adopter numbers
    its own from 1. Its adoption replaces the number, so its extends are never taken for
    late ones (which would answer yes and change nothing while it counted on them)."""
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=1.0)
    giver = Lease("me", cluster.acquire(spec, "me").deadline)
    for _ in range(giver_extends):
        assert cluster.run(extend_flow(spec, giver, 5.0, cluster.now)).ok
    adopter = Lease("me", cluster.now)
    assert cluster.run(extend_flow(spec, adopter, 1.0, cluster.now, adopt=True)).ok
    for _ in range(adopter_extends):
        cluster.now += 0.5
        assert cluster.run(extend_flow(spec, adopter, 1.0, cluster.now)).ok
        # Every master really carries the adopter's ttl, not the giver's longer one.
        assert all(master.pttl("k", cluster.now) <= 1000 for master in cluster.masters)


def test_an_adoption_of_a_token_that_does_not_hold_is_refused() -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=1.0)
    assert cluster.acquire(spec, "other").ok
    lease = Lease("me", cluster.now)
    result = cluster.run(extend_flow(spec, lease, 1.0, cluster.now, adopt=True))
    assert not result.ok
    assert result.token_gone
    assert cluster.holders("other") == 5  # never touched


# --- a bound on attempts ------------------------------------------------------------------------


@given(max_attempts=st.integers(min_value=1, max_value=8), seed=st.integers())
def test_a_blocking_acquire_makes_at_most_max_attempts(max_attempts: int, seed: int) -> None:
    cluster = ModelCluster(5)
    spec = cluster.spec(ttl=100.0)
    assert cluster.acquire(spec, "other").ok
    tokens = Tokens(lambda: "me")
    flow = acquire_flow(
        spec, tokens, cluster.now, blocking=True, timeout=None, rng=random.Random(seed), max_attempts=max_attempts
    )
    result = cluster.run(flow)
    assert not result.ok
    assert not result.timed_out
    assert result.attempts == max_attempts
    sets = [round_ for round_ in cluster.rounds[1:] if round_.command.args[0] == "SET"]
    assert len(sets) == max_attempts


# --- the decorator's names ----------------------------------------------------------------------


def _plan(*templates: str) -> LockedCall:
    return LockedCall(None, templates, len(templates) > 1, "wait", NO_DEFAULT, {}, False)  # type: ignore[arg-type]


@given(user_id=st.integers() | st.text(max_size=20), kind=st.text(min_size=1, max_size=10))
def test_a_template_is_filled_from_the_call_with_defaults_applied(user_id: object, kind: str) -> None:
    def report(user_id: object, kind: str = "daily", *, verbose: bool = False) -> None: ...

    call = _plan("report:{user_id}:{kind}").bound_to(report)
    assert call.names((user_id,), {}) == (f"report:{user_id}:daily",)
    assert call.names((), {"user_id": user_id, "kind": kind}) == (f"report:{user_id}:{kind}",)
    assert call.names((user_id, kind), {"verbose": True}) == (f"report:{user_id}:{kind}",)


def test_a_template_field_must_name_a_parameter() -> None:
    def report(user_id: int) -> None: ...

    with pytest.raises(ValueError, match=r"\{user\} is not a parameter of .*report.*user_id"):
        _plan("report:{user}").bound_to(report)
    with pytest.raises(ValueError, match="name a parameter"):
        _fields("report:{}")
    with pytest.raises(ValueError, match="name a parameter"):
        _fields("report:{0}")
    assert _fields("{order.id}:{items[0]}:{n!r:>4}") == ["order", "items", "n"]


def test_a_call_that_does_not_fit_the_signature_fails_as_the_call_would() -> None:
    def report(user_id: int) -> None: ...

    call = _plan("report:{user_id}").bound_to(report)
    with pytest.raises(TypeError):
        call.names((), {})


def test_a_template_that_cannot_be_filled_says_which() -> None:
    def report(order: object) -> None: ...

    call = _plan("order:{order.id}").bound_to(report)
    with pytest.raises(ValueError, match=r"order:\{order.id\}"):
        call.names((object(),), {})


def test_several_templates_make_several_names() -> None:
    def move(source: str, target: str) -> None: ...

    call = _plan("stock:{source}", "stock:{target}").bound_to(move)
    assert call.names(("a", "b"), {}) == ("stock:a", "stock:b")
