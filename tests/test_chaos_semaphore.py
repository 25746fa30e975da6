"""The semaphore checker on synthetic histories, against a brute-force count of holders.

A semaphore's holders may overlap up to its limit; :func:`check_semaphore_limits` must flag
exactly the moments with more, and mutual exclusion must leave a semaphore's tenures alone.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.checkers import check_all, check_mutual_exclusion, check_semaphore_limits, most_holders
from chaos.history import AcquireInvoked, AcquireReturned, Event, History, ReleaseInvoked

Holding = tuple[int, int, int | None]  # start, deadline, release (or None)


def history_of(holdings: list[Holding], limit: int, name: str = "pool") -> History:
    events: list[Event] = []
    for op, (start, deadline, release) in enumerate(holdings):
        client = f"c{op}"
        events.append(AcquireInvoked(time=start, client=client, name=name, op=op))
        events.append(
            AcquireReturned(
                time=start, client=client, name=name, op=op, ok=True, token=f"t{op}", deadline=deadline, limit=limit
            )
        )
        if release is not None:
            events.append(ReleaseInvoked(time=release, client=client, name=name, op=1000 + op, token=f"t{op}"))
    return History(events)


def oracle_most(holdings: list[Holding]) -> int:
    """Holders at each half-integer instant (times are integers: every stretch has one)."""
    ends = [min(deadline, release if release is not None else deadline) for _, deadline, release in holdings]
    return max(
        (
            sum(1 for (start, _, _), end in zip(holdings, ends, strict=True) if start < t + 0.5 < end)
            for t in range(0, 60)
        ),
        default=0,
    )


holdings = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 15), st.none() | st.integers(0, 20)).map(
        lambda h: (h[0], h[0] + h[1], None if h[2] is None else h[0] + h[2])
    ),
    max_size=10,
)


@given(holdings, st.integers(2, 4))
def test_crowding_is_flagged_exactly_when_more_than_the_limit_hold(cases: list[Holding], limit: int) -> None:
    history = history_of(cases, limit)
    most = oracle_most(cases)
    found = check_semaphore_limits(history)
    assert bool(found) == (most > limit)
    assert most_holders(history.tenures()).get("pool", 0) == most
    for crowd in found:
        assert len(crowd.holders) > limit
        assert crowd.end > crowd.start
        assert all(t.start <= crowd.start and t.end >= crowd.end for t in crowd.holders)
    assert check_mutual_exclusion(history) == []  # a semaphore's holders may share


def test_a_plain_majority_crowd_is_described_and_judged() -> None:
    history = history_of([(0, 10, None), (1, 10, None), (2, 10, 5), (3, 10, None)], limit=3)
    verdict = check_all(history)
    assert not verdict.safe
    assert verdict.kinds == ["semaphore-limit"]
    (crowd,) = verdict.crowding
    assert (crowd.start, crowd.end, len(crowd.holders)) == (3, 5, 4)
    assert "held by 4 at once" in crowd.describe()
    assert verdict.to_dict()["crowding"][0]["limit"] == 3


def test_handovers_at_the_limit_are_not_crowding() -> None:
    # The third holder's release is invoked at the very moment the fourth acquire returns.
    history = history_of([(0, 10, None), (1, 10, None), (2, 10, 4), (4, 10, None)], limit=3)
    assert check_semaphore_limits(history) == []
    assert check_all(history).safe


@pytest.mark.parametrize("limit", [None, 1])
def test_a_lock_is_still_judged_by_mutual_exclusion(limit: int | None) -> None:
    events: list[Event] = []
    for op in range(2):
        events.append(AcquireInvoked(time=op, client=f"c{op}", name="L", op=op))
        events.append(
            AcquireReturned(time=op, client=f"c{op}", name="L", op=op, ok=True, token=f"t{op}", deadline=5, limit=limit)
        )
    history = History(events)
    assert len(check_mutual_exclusion(history)) == 1
    assert check_semaphore_limits(history) == []
