"""Shrinking a violation's window (chaos.shrink).

The search is delta debugging on replays; here a fake reproducer stands in for them, so
that hypothesis can check what the search promises: a subset that reproduces, from which
no single fault can be dropped, exactly the culprits when reproducing needs all of them,
and m-of-k stopping as soon as the answer is known. The smoke (slow: a few replays of a
few seconds each) shrinks a hand-made window, a clock jump on a majority beside a fault
that does nothing to the lock, to the jump alone, and names it.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.__main__ import main
from chaos.checkers import Overlap
from chaos.explore import ExploreConfig
from chaos.history import Tenure
from chaos.schedule import FAULT_SETS, FaultOp, Schedule
from chaos.shrink import classify, ddmin, m_of_k, steps

RELAXED = settings(deadline=None, max_examples=150)

sizes = st.integers(0, 14)


@given(sizes.flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, max(n - 1, 0)), max_size=n))))
@RELAXED
def test_ddmin_finds_exactly_the_culprits_when_all_are_needed(case: tuple[int, set[int]]) -> None:
    size, culprits = case
    culprits = {c for c in culprits if c < size}
    asked: list[tuple[int, ...]] = []

    def reproduces(subset: tuple[int, ...]) -> bool:
        asked.append(subset)
        return culprits <= set(subset)

    found = ddmin(range(size), reproduces)
    assert set(found) == culprits
    assert list(found) == sorted(found)  # kept in their order
    assert len(asked) == len(set(asked))  # each subset asked once


@given(sizes, st.data())
@RELAXED
def test_ddmin_result_reproduces_and_is_one_minimal(size: int, data: st.DataObject) -> None:
    # Any answer at all, as flaky replays may give, except that the whole set reproduces.
    answers = data.draw(st.dictionaries(st.frozensets(st.integers(0, max(size - 1, 0))), st.booleans()))
    whole = frozenset(range(size))

    def reproduces(subset: tuple[int, ...]) -> bool:
        key = frozenset(subset)
        return key == whole or answers.get(key, False)

    found = ddmin(range(size), reproduces)
    assert reproduces(found)
    for dropped in range(len(found)):
        assert not reproduces(found[:dropped] + found[dropped + 1 :])


@given(st.integers(1, 8), st.data())
@RELAXED
def test_m_of_k_stops_once_the_answer_is_known(tries: int, data: st.DataObject) -> None:
    need = data.draw(st.integers(1, tries))
    outcomes = data.draw(st.lists(st.booleans(), min_size=tries, max_size=tries))
    played: list[int] = []

    def trial(n: int) -> bool:
        played.append(n)
        return outcomes[n - 1]

    reproduced, count = m_of_k(trial, need, tries)
    assert played == list(range(1, count + 1))
    assert reproduced == sum(outcomes[:count])
    # The verdict is the one all k replays would give, and one replay fewer would not have settled it.
    assert (reproduced >= need) == (sum(outcomes) >= need)
    before = sum(outcomes[: count - 1])
    assert before < need
    assert before + (tries - count + 1) >= need


@pytest.mark.parametrize(("need", "tries"), [(0, 3), (4, 3), (1, 0), (1.5, 3)])
def test_m_of_k_refuses_bad_counts(need: object, tries: object) -> None:
    with pytest.raises(ValueError, match=r"need|tries"):
        m_of_k(lambda n: True, need, tries)  # type: ignore[arg-type]


def _op(kind: str, target: str, start: float = 1.0, value: float = 0.0) -> FaultOp:
    return FaultOp(start, start + 0.5, kind, target, value)


@pytest.mark.parametrize(
    ("ops", "cause", "assumption"),
    [
        ([_op("restart", "C")], "restart-empty voter", "K4"),
        ([_op("power-loss", "A")], "power loss", "K4"),
        ([_op("clock-rate", "B", value=1.3)], "clock rate", "K3"),
        ([_op("clock-jump", "A,B,C", value=3.0)], "clock jump", "K3"),
        ([_op("client-pause", "c1")], "pause", "K1"),
        ([_op("blackhole", "c2-A"), _op("restart", "A")], "restart-empty voter + network", "K4"),
        ([_op("link-delay", "c1-A", value=0.2)], "network", "K2"),
        (
            [_op("clock-slew", "B", value=1.05), _op("clock-strobe", "A,C", value=0.3)],
            "clock strobe + clock slew",
            "K3",
        ),
        ([], "no fault", "none"),
    ],
)
def test_classify_names_the_broken_assumption(ops: Sequence[FaultOp], cause: str, assumption: str) -> None:
    found = classify(ops)
    assert found.name == cause
    assert found.assumption.startswith(assumption)


def test_steps_name_one_master_or_several() -> None:
    (one,) = steps([_op("restart", "C")], "v", nodes=5)[:1]
    (several,) = steps([_op("restart", "A,B,C")], "v", nodes=5)[:1]
    assert one == "1. t=1.00: master C crashes and restarts empty at once"
    assert several == "1. t=1.00: masters A,B,C crash and restart empty at once"


def test_a_kill_that_keeps_its_data_is_not_a_restart_empty() -> None:
    assert classify([_op("kill", "C")]).name == "restart-empty voter"
    assert classify([_op("kill", "C")], empty_kills=False).name == "no fault"


def test_steps_tell_the_overlap_in_time_order() -> None:
    def tenure(client: str, start: float, voters: tuple[str, ...]) -> Tenure:
        return Tenure(client, "L1", "t", None, 1, start, start, start + 1.0, start + 1.0, None, voters=voters)

    first, second = tenure("c1", 100.5, ("A", "B", "C")), tenure("c2", 101.2, ("C", "D", "E"))
    overlap = Overlap("L1", first, second, 101.2, 101.5)
    lines = steps([_op("restart", "C", start=0.9)], "two holders", nodes=5, overlap=overlap, origin=100.0, margin=-0.4)
    assert lines == [
        "1. t=0.50: c1 acquires 'L1' on A, B, C (a bare majority), valid until t=1.50",
        "2. t=0.90: master C crashes and restarts empty at once",
        "3. t=1.20: c2 acquires 'L1' on C, D, E (a bare majority) while c1 still holds it",
        "4. t=1.50: c1 lets the lock go (its release or deadline); its key had kept others out until -0.40 s "
        "from here (its margin on the masters)",
        "5. two holders",
    ]


# --- smoke, real processes -------------------------------------------------------------------


def _window(path: pathlib.Path) -> None:
    """A window as explore saves it: a clock jump on a majority (a violation nearly every
    time, four clients contending for three names) and a client kill that is beside the point."""
    config = ExploreConfig(FAULT_SETS["unsafe-clock"], seed=5, duration=4.0, ttl=0.6)
    ops = (FaultOp(0.3, 0.6, "client-kill", "c4"), FaultOp(1.5, 2.2, "clock-jump", "A,B,C", 2.0))
    schedule = Schedule(ops, 4.0, 5, config.clients, config.ttl, config.seed, config.faults)
    document = {
        "config": config.to_dict(),
        "violation": {"kind": "mutual-exclusion", "time": 1.6, "text": "(made by hand)"},
        "window": [0.0, 3.0],
        "schedule": schedule.to_dict(),
    }
    path.write_text(json.dumps(document))


@pytest.mark.slow
@pytest.mark.servers
def test_shrink_keeps_the_clock_jump_alone(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    window = tmp_path / "violation-1.json"
    _window(window)
    status = main(["shrink", str(window), "--out", str(tmp_path / "shrink"), "--tries", "3", "-q"])
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "shrink" / "shrink.json").read_text())
    assert status == 0, out
    assert summary["reproduced"]
    assert summary["faults_before"] == 2
    # Timing decides a replay: the jump must stay; the client kill may, if the run without it was unlucky.
    kinds = [op["kind"] for op in summary["ops"]]
    assert "clock-jump" in kinds
    assert summary["cause"].startswith("clock jump")
    assert summary["assumption"].startswith("K3")
    assert summary["steps"][-1].startswith(f"{len(summary['steps'])}. ")
    assert f"{summary['cause']}" in out
    assert (tmp_path / "shrink" / "subset-1" / "try-1" / "summary.json").exists()


def test_shrink_refuses_bad_counts_before_any_replay(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    window = tmp_path / "violation-1.json"
    _window(window)
    status = main(["shrink", str(window), "--out", str(tmp_path / "shrink"), "--tries", "2", "--need", "3", "-q"])
    assert status == 2
    assert "need must be" in capsys.readouterr().err
    assert not (tmp_path / "shrink" / "subset-1").exists()
