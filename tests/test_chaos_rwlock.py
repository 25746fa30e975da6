"""The read-write rule of the mutual-exclusion checker, on synthetic histories against a
brute-force oracle; and the self-test's broken reader, caught by scenario 30 on real
processes."""

from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.__main__ import main
from chaos.checkers import check_all, check_mutual_exclusion
from chaos.history import AcquireInvoked, AcquireReturned, Event, History, ReleaseInvoked

Holding = tuple[str, int, int, int | None]  # mode, start, deadline, release (or None)


def history_of(holdings: list[Holding], name: str = "rw") -> History:
    events: list[Event] = []
    for op, (mode, start, deadline, release) in enumerate(holdings):
        client = f"c{op}"
        events.append(AcquireInvoked(time=start, client=client, name=name, op=op))
        events.append(
            AcquireReturned(
                time=start, client=client, name=name, op=op, ok=True, token=f"t{op}", deadline=deadline, mode=mode
            )
        )
        if release is not None:
            events.append(ReleaseInvoked(time=release, client=client, name=name, op=1000 + op, token=f"t{op}"))
    return History(events)


def oracle(holdings: list[Holding]) -> set[frozenset[int]]:
    """The pairs (by index) that share some half-integer instant, one of them a writer."""
    ends = [min(deadline, release if release is not None else deadline) for _, _, deadline, release in holdings]
    found = set()
    for i, (mode_i, start_i, _, _) in enumerate(holdings):
        for j, (mode_j, start_j, _, _) in enumerate(holdings[:i]):
            if mode_i == mode_j == "read":
                continue
            if any(start_i < t + 0.5 < ends[i] and start_j < t + 0.5 < ends[j] for t in range(60)):
                found.add(frozenset((i, j)))
    return found


holdings = st.lists(
    st.tuples(
        st.sampled_from(["read", "write"]), st.integers(0, 20), st.integers(0, 15), st.none() | st.integers(0, 20)
    ).map(lambda h: (h[0], h[1], h[1] + h[2], None if h[3] is None else h[1] + h[3])),
    max_size=10,
)


@given(holdings)
def test_a_writer_overlapping_anyone_is_flagged_and_readers_may_share(cases: list[Holding]) -> None:
    overlaps = check_mutual_exclusion(history_of(cases))
    flagged = {frozenset((int(o.first.client[1:]), int(o.second.client[1:]))) for o in overlaps}
    assert flagged == oracle(cases)
    for overlap in overlaps:
        assert "write" in (overlap.first.mode, overlap.second.mode)


def test_the_mode_travels_through_json_and_a_writer_beside_readers_is_unsafe() -> None:
    history = history_of([("read", 0, 10, None), ("read", 1, 10, 5), ("write", 4, 10, None)])
    again = History.from_json(history.to_json())
    assert [t.mode for t in again.tenures()] == ["read", "read", "write"]
    verdict = check_all(again)
    assert verdict.kinds == ["mutual-exclusion"]
    assert len(verdict.overlaps) == 2  # the writer with each reader; the readers together are fine


@pytest.mark.slow
@pytest.mark.servers
def test_selftest_catches_a_reader_that_ignores_the_writer(tmp_path: pathlib.Path) -> None:
    argv = ["selftest", "--variants", "reader-ignores-writer", "--scenarios", "rwlock", "--runs", "1", "--quick", "-q"]
    assert main([*argv, "--seed", "5", "--out", str(tmp_path)]) == 0
    [cell] = json.loads((tmp_path / "selftest.json").read_text())["cells"]
    assert cell["robust"], cell
    assert cell["overlap_ms"] > 0, cell
