"""Voters, the masters' ground truth, margins, coverage and the reactive nemesis.

The pure part (margins and coverage on synthetic histories, against brute-force oracles)
needs no server; the observer and the reactor are tested on real masters and clients.
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.__main__ import main
from chaos.explore import ExploreConfig, Round, _rounds, explore
from chaos.history import (
    AcquireInvoked,
    AcquireReturned,
    Event,
    ExtendReturned,
    FaultBegin,
    FaultEnd,
    History,
    KeySample,
    MasterClock,
    Recorder,
    ReleaseInvoked,
    event_from_dict,
    master_index,
    master_label,
    voters_of,
)
from chaos.margins import (
    GOAL_COUNTERS,
    Coverage,
    expiry_time,
    goals_reached,
    judge,
    judge_goals,
    measure_coverage,
    measure_margins,
    parse_goals,
)
from chaos.observer import Grant, Observer
from chaos.reactive import REACTIVE_KINDS, Reactor
from chaos.schedule import FAULT_SETS, generate
from chaos.workload import direct_client
from redlock import NodeOutcome, NodeStatus
from redlock.servers import LocalMasters

# --- voters in the history ------------------------------------------------------------------


def test_voters_are_the_masters_that_granted_by_label() -> None:
    outcomes = [
        NodeOutcome("h:1", NodeStatus.GRANTED),
        NodeOutcome("h:2", NodeStatus.DENIED),
        NodeOutcome("h:3", NodeStatus.GRANTED),
        NodeOutcome("h:4", NodeStatus.NOT_AWAITED),
    ]
    assert voters_of(outcomes, {"h:1": "A", "h:3": "C"}) == ("A", "C")
    assert voters_of(outcomes) == ("h:1", "h:3")


@given(st.integers(min_value=0, max_value=200))
def test_master_labels_and_indexes_are_inverse(index: int) -> None:
    assert master_index(master_label(index)) == index


def test_voters_survive_json_and_reach_the_tenure() -> None:
    events: list[Event] = [
        AcquireInvoked(time=0.0, client="c1", name="L", op=1),
        AcquireReturned(
            time=0.1, client="c1", name="L", op=1, ok=True, token="t", deadline=1.0, voters=("A", "B", "C")
        ),
        ExtendReturned(time=0.5, client="c1", name="L", op=2, ok=True, deadline=1.5, voters=("A", "D", "E")),
    ]
    for event in events:
        again = event_from_dict(json.loads(json.dumps(event.to_dict())))
        assert again == event
        hash(again)
    (tenure,) = History(events[:2]).tenures()
    assert tenure.voters == ("A", "B", "C")


# --- placing expiry on the time line ----------------------------------------------------------


@given(
    offset=st.floats(min_value=-1e6, max_value=1e6),
    since=st.floats(min_value=0.0, max_value=10.0),
    ahead=st.floats(min_value=0.001, max_value=20.0),
)
def test_a_clock_at_rate_one_expires_when_the_ttl_is_over(offset: float, since: float, ahead: float) -> None:
    readings = [(t / 10, t / 10 + offset) for t in range(0, 200)]
    wall_then = since + offset
    assert math.isclose(expiry_time(readings, wall_then + ahead, since), since + ahead, abs_tol=1e-6)


def test_a_jump_expires_the_key_when_it_happens() -> None:
    readings = [(0.0, 100.0), (0.1, 100.1), (0.2, 105.2), (0.3, 105.3)]
    assert expiry_time(readings, 101.0, 0.0, jumps=[0.15]) == 0.15
    # Without a fault recorded, the readings' own rate is taken between them.
    assert math.isclose(expiry_time(readings, 101.0, 0.0), 0.1 + 0.9 * 0.1 / 5.1)
    # A fast clock (x2, no fault): the key goes at half its ttl.
    fast = [(t / 10, 100 + 2 * t / 10) for t in range(30)]
    assert math.isclose(expiry_time(fast, 101.0, 0.0), 0.5)


# --- margins against a brute-force oracle -----------------------------------------------------


def _holding(
    ends: dict[str, float], *, nodes: int = 5, deadline: float = 1.0, release: float | None = None
) -> list[Event]:
    """c1 holds L from 0.1 (deadline ``deadline``), its key on the masters of ``ends`` until
    those moments (clocks at rate 1, wall = monotonic + 1000)."""
    events: list[Event] = [
        AcquireInvoked(time=0.0, client="c1", name="L", op=1),
        AcquireReturned(time=0.1, client="c1", name="L", op=1, ok=True, token="t", deadline=deadline),
    ]
    for number, (master, end) in enumerate(sorted(ends.items())):
        at = 0.11 + number * 0.001
        events.append(
            KeySample(time=at, master=master, name="L", token="t", holds=True, wall=at + 1000, expires=end + 1000)
        )
    for index in range(nodes):
        events.append(MasterClock(time=0.05, master=master_label(index), wall=1000.05))
    if release is not None:
        events.append(ReleaseInvoked(time=release, client="c1", name="L", op=2, token="t"))
    return events


@settings(max_examples=200)
@given(
    nodes=st.sampled_from([3, 5, 7]),
    data=st.data(),
)
def test_the_protection_ends_when_a_majority_is_free(nodes: int, data: st.DataObject) -> None:
    labels = [master_label(i) for i in range(nodes)]
    held = data.draw(st.lists(st.sampled_from(labels), min_size=nodes // 2 + 1, unique=True))
    ends = {m: data.draw(st.floats(min_value=0.2, max_value=3.0)) for m in held}
    (margin,) = measure_margins(_holding(ends, nodes=nodes), nodes).margins
    # Oracle: the first moment at which a majority of the masters holds no key of c1's.
    quorum = nodes // 2 + 1
    moments = sorted(ends.values())
    free_at = next(t for t in moments if nodes - sum(1 for e in moments if e > t) >= quorum)
    assert math.isclose(margin.protected_until, free_at, abs_tol=1e-6)
    assert math.isclose(margin.margin, free_at - 1.0, abs_tol=1e-6)
    assert set(margin.holders) == set(held)


def test_a_near_miss_and_a_release_that_ends_reliance_early() -> None:
    # A bare majority whose key on C expires 30 ms before the deadline: a near miss.
    margins = measure_margins(_holding({"A": 1.2, "B": 1.2, "C": 0.97}), 5)
    assert [round(m.margin, 3) for m in margins.margins] == [-0.03]
    assert len(margins.near_misses) == 1
    # Released at 0.5: the holder relied on it no longer than that.
    margins = measure_margins(_holding({"A": 1.2, "B": 1.2, "C": 0.97}, release=0.5), 5)
    assert [round(m.margin, 3) for m in margins.margins] == [0.47]
    assert margins.to_dict()["near_misses"] == 0


def test_a_restart_empty_ends_the_key_there() -> None:
    events = _holding({"A": 1.2, "B": 1.2, "C": 1.2})
    events += [
        FaultBegin(time=0.4, fault="f1", kind="crash-restart", target="C", detail="SIGKILL, restart empty"),
        FaultEnd(time=0.45, fault="f1"),
    ]
    history = History(events)
    (margin,) = measure_margins(history, 5).margins
    assert margin.protected_until == 0.4
    coverage = measure_coverage(history, 5)
    assert coverage.lost_live_keys == 1
    assert coverage.bare_majority == 1
    assert coverage.near_misses == 1
    # From its data: the key survives.
    kept = [*_holding({"A": 1.2, "B": 1.2, "C": 1.2})]
    kept.append(FaultBegin(time=0.4, fault="f1", kind="kill", target="C", detail="SIGKILL, restart from its data"))
    assert measure_margins(kept, 5).margins[0].margin > 0
    assert measure_coverage(kept, 5).lost_live_keys == 0


def test_a_history_without_ground_truth_has_no_margins() -> None:
    margins = measure_margins(_holding({})[:2], 5)
    assert margins.margins == ()
    assert not margins.sampled
    assert margins.describe() == "no acquisition sampled on the masters"


def test_a_pause_across_a_deadline_is_counted() -> None:
    events = [
        *_holding({"A": 1.2, "B": 1.2, "C": 1.2}),
        FaultBegin(time=0.5, fault="f1", kind="client-pause", target="c1", detail="reactive: grant: c1#1"),
        FaultEnd(time=1.3, fault="f1"),
    ]
    coverage = measure_coverage(events, 5)
    assert coverage.pauses_across_deadline == 1
    assert coverage.triggered == {"grant": 1}


def test_three_verdicts() -> None:
    assert judge(2, None)[0] == "unsafe"
    assert judge(0, None)[0] == "unknown"
    outcome, reason = judge(0, Coverage(bare_majority=3))
    assert outcome == "unknown"
    assert "3 bare-majority" in reason
    assert judge(0, Coverage(pauses_across_deadline=1))[0] == "safe"
    assert judge(0, Coverage(pauses_across_deadline=1), goal=2)[0] == "unknown"


def test_goals_are_parsed_with_their_argument_named() -> None:
    assert parse_goals(" bare_majority=20, near_misses=5 ,") == {"bare_majority": 20, "near_misses": 5}
    assert set(parse_goals(",".join(f"{name}=1" for name in GOAL_COUNTERS))) == set(GOAL_COUNTERS)
    for text, match in (
        ("bare=3", "unknown counter 'bare'"),
        ("edges", "needs a whole target"),
        ("edges=0", "needs a whole target"),
        ("edges=2.5", "needs a whole target"),
        ("edges=1,edges=2", "edges given twice"),
        (" , ", "none given"),
    ):
        with pytest.raises(ValueError, match=f"goals: .*{match}"):
            parse_goals(text)
    with pytest.raises(TypeError, match="goals"):
        parse_goals(3)  # type: ignore[arg-type]


counts = st.integers(0, 50)


@given(st.lists(st.tuples(counts, counts, counts, counts), min_size=1, max_size=4))
def test_coverage_adds_up_by_counter(parts: list[tuple[int, int, int, int]]) -> None:
    runs = [
        Coverage(bare_majority=a, lost_live_keys=b, near_misses=c, expiry_handovers=d, triggered={"t": a})
        for a, b, c, d in parts
    ]
    total = sum(runs, Coverage())
    assert total.bare_majority == sum(p[0] for p in parts)
    assert total.edges == sum(run.edges for run in runs)
    assert total.expiry_handovers == sum(p[3] for p in parts)
    assert total.triggered == ({"t": sum(p[0] for p in parts)} if parts else {})


def _round(bare: int, acquisitions: int = 10, violations: int = 0) -> Round:
    return Round(Coverage(bare_majority=bare), acquisitions, violations, {"bare": bare})


def test_rounds_stop_once_every_goal_is_reached_or_the_budget_is_spent() -> None:
    goals = {"bare_majority": 5, "acquisitions": 15}
    played: list[tuple[int, float]] = []

    def play(number: int, seconds: float) -> Round:
        played.append((number, seconds))
        return _round(bare=3)

    done = _rounds(goals, budget=100.0, round_seconds=30.0, play=play)
    assert played == [(1, 30.0), (2, 30.0)]  # 6 bare-majority acquisitions after two rounds
    assert done["stopped"] == "goals met"
    assert done["met"]
    assert done["goals"]["bare_majority"] == {"target": 5, "reached": 6, "met": True}
    assert (done["verdict"], done["acquisitions"], done["seconds_played"]) == ("safe", 20, 60.0)
    # Never reached: rounds until the budget is spent, the last one what is left of it.
    played.clear()
    short = _rounds({"bare_majority": 100}, budget=70.0, round_seconds=30.0, play=play)
    assert played == [(1, 30.0), (2, 30.0), (3, 10.0)]
    assert short["stopped"] == "budget spent"
    assert short["verdict"] == "unknown"
    assert "bare_majority 9 of 100" in short["verdict_reason"]
    assert len(short["rounds"]) == 3
    # A violation makes it unsafe whatever the goals.
    bad = _rounds({"bare_majority": 1}, budget=10.0, round_seconds=30.0, play=lambda n, s: _round(2, violations=1))
    assert (bad["verdict"], bad["met"], bad["stopped"]) == ("unsafe", True, "goals met")


def test_goals_judged() -> None:
    coverage = Coverage(bare_majority=4, near_misses=1)
    reached = goals_reached({"bare_majority": 3, "edges": 2, "acquisitions": 100}, coverage, 80)
    assert reached == {
        "bare_majority": {"target": 3, "reached": 4, "met": True},
        "edges": {"target": 2, "reached": 1, "met": False},
        "acquisitions": {"target": 100, "reached": 80, "met": False},
    }
    verdict, reason = judge_goals(0, reached)
    assert verdict == "unknown"
    assert "edges 1 of 2, acquisitions 80 of 100" in reason
    assert judge_goals(0, goals_reached({"bare_majority": 3}, coverage, 0))[0] == "safe"
    assert judge_goals(2, reached) == ("unsafe", "2 violations")


@pytest.mark.slow
@pytest.mark.servers
def test_explore_until_coverage_plays_rounds_until_its_goals(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["explore", "--faults", "safe", "--seed", "5", "--network", "proxy", "--no-plot", "-q"]
    # Acquisitions come at once, live keys lost never under the SAFE set (a kill keeps its data).
    goals = "acquisitions=1,lost_live_keys=1000"
    status = main([*argv, "--until-coverage", goals, "--duration", "8", "--round", "4", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped"] == "budget spent"
    assert [r["round"] for r in summary["rounds"]] == [1, 2]
    assert [r["seed"] for r in summary["rounds"]] == [5, 6]
    assert summary["goals"]["acquisitions"]["met"]
    assert not summary["goals"]["lost_live_keys"]["met"]
    assert summary["verdict"] == "unknown"
    assert (tmp_path / "round-2" / "summary.json").exists()
    assert "lost_live_keys: 0 of 1000 (NOT met)" in out
    # Met at the first round: it stops there.
    again = tmp_path / "met"
    assert (
        main([*argv, "--until-coverage", "acquisitions=1", "--duration", "8", "--round", "4", "--out", str(again)]) == 0
    )
    summary = json.loads((again / "summary.json").read_text())
    assert (summary["stopped"], len(summary["rounds"]), summary["met"]) == ("goals met", 1, True)
    assert main([*argv, "--until-coverage", "nope=1", "--out", str(tmp_path / "bad")]) == 2


def test_the_single_master_set_hits_one_master_at_a_time() -> None:
    schedule = generate(4, 120.0, FAULT_SETS["unsafe-single"], ttl=1.0)
    assert schedule.ops
    assert all(len(op.masters) == 1 for op in schedule.ops)
    config = ExploreConfig(FAULT_SETS["unsafe-single"], seed=4, duration=30.0, reactive=True)
    assert config.reactive_kinds == ("restart", "clock-jump")
    assert config.schedule().ops == ()
    assert ExploreConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="no reactive form"):
        Reactor(None, ["kill"], ttl=1.0, nodes=5)  # type: ignore[arg-type]
    assert set(REACTIVE_KINDS) <= {k for s in FAULT_SETS.values() for k in s.kinds}


# --- the observer, on real masters --------------------------------------------------------------


def test_the_observer_samples_the_key_right_after_a_grant(masters: LocalMasters, tmp_path: pathlib.Path) -> None:
    name = f"observed-{time.monotonic_ns()}"
    raws = [direct_client(url) for url in masters.urls]
    for raw in raws[:3]:
        raw.set(name, "tok", px=5000)
    raws[3].set(name, "other", px=5000)
    recorder = Recorder()
    client_file = tmp_path / "c1.jsonl"
    grants: list[Grant] = []
    with Observer(masters.urls, recorder, lambda: [client_file], clock_period=0.05) as observer:
        observer.listen(grants.append)
        with Recorder(client_file, source="c1") as client:
            op = client.acquire_invoked("c1", name, ttl=5.0)
            client.acquire_returned(
                "c1", name, op, ok=True, token="tok", deadline=time.monotonic() + 4.9, voters=("A", "B", "C")
            )
        deadline = time.monotonic() + 10
        while not grants and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.15)
    for raw in raws:
        raw.delete(name)
        raw.close()
    (grant,) = grants
    assert grant.holders == ("A", "B", "C")
    assert grant.voters == ("A", "B", "C")
    history = History([*recorder.events, *client.events])
    samples = history.of_type(KeySample)
    assert {s.master for s in samples} == {"A", "B", "C", "D", "E"}
    assert {s.master for s in samples if s.holds} == {"A", "B", "C"}
    assert [s.token for s in samples if s.master == "D"] == ["other"]
    assert all(4.0 < (s.expires or 0) - s.wall <= 5.0 for s in samples if s.token is not None)
    assert history.of_type(MasterClock)
    (margin,) = measure_margins(history, 5).margins
    assert margin.margin > 0


# --- real runs: voters, margins, a reactive explore -------------------------------------------


@pytest.mark.slow
@pytest.mark.servers
def test_a_reactive_explore_fires_on_grants_and_reports_its_verdict(tmp_path: pathlib.Path) -> None:
    config = ExploreConfig(FAULT_SETS["unsafe-pause"], seed=2, duration=6.0, reactive=True)
    outcome = explore(config, tmp_path, plot=False)
    assert outcome.result.error is None, outcome.result.error
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["verdict"] in ("safe", "unsafe", "unknown")
    assert summary["margins"]["count"] > 0
    assert summary["coverage"]["triggered"].get("contended-grant", 0) >= 1
    assert all(op.kind != "client-pause" for op in outcome.schedule.ops)
    history = History.from_dicts(json.loads(outcome.result.history_path.read_text())["events"])  # type: ignore[union-attr]
    reactive = [w for w in history.fault_windows() if w.detail.startswith("reactive:")]
    assert reactive
    assert all(w.kind == "client-pause" for w in reactive)
    granted = [e for e in history.of_type(AcquireReturned) if e.ok]
    assert granted
    assert all(e.voters is not None and len(e.voters) >= 3 for e in granted)


# --- the reactor's choices (a stand-in nemesis that only records what it is asked) -------------


class _Recording:
    """Records the faults a reactor asks for; the real nemesis is tested on real processes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, str]] = []

    def crash_restart(self, index: int, *, wipe: bool, detail: str = "") -> None:
        self.calls.append(("restart", index, detail))

    def clock_jump(self, index: int, seconds: float, *, cause: str = "") -> str:
        self.calls.append(("clock-jump", index, cause))
        return "f"

    def pause_client(self, client: str, detail: str = "") -> str:
        self.calls.append(("pause", client, detail))
        return "f"

    def end(self, fault: str) -> None:
        self.calls.append(("end", fault, ""))


def _grant(holders: tuple[str, ...], *, waiters: int = 0, age: float = 0.0, left: float = 0.8) -> Grant:
    now = time.monotonic()
    return Grant("c2/t1", "L1", 7, "tok", now - age, now + left, holders, holders, "acquire", waiters)


def test_the_reactor_fires_on_its_trigger_only_and_once_at_a_time() -> None:
    nemesis = _Recording()
    reactor = Reactor(nemesis, ["restart", "client-pause"], ttl=1.0, nodes=5, seed=1)  # type: ignore[arg-type]
    now = time.monotonic()
    reactor._react(_grant(("A", "B", "C", "D")), now)  # neither bare nor contended
    reactor._react(_grant(("A", "B", "C"), age=0.2), now)  # bare, but its moment has passed
    reactor._react(_grant(("A", "B", "C"), left=0.1), now)  # bare, too little validity left
    assert nemesis.calls == []
    reactor._react(_grant(("B", "D", "E")), now)
    ((kind, target, detail),) = nemesis.calls
    assert kind == "restart"
    assert target in (1, 3, 4)  # B, D or E
    assert detail.startswith("reactive: bare-majority: c2/t1#7 held L1 on B,D,E")
    assert "empty" in detail
    reactor._react(_grant(("A", "B", "C")), now)  # within the cool-down
    assert len(nemesis.calls) == 1
    reactor._quiet_until = 0.0
    reactor._react(_grant(("A", "B", "C", "D", "E"), waiters=2), now)
    assert nemesis.calls[-1][:2] == ("pause", "c2")
    reactor._react(_grant(("A", "B", "C"), waiters=1), now)  # a pause is still open
    assert len(nemesis.calls) == 2
    assert reactor.fired == {"bare-majority": 1, "contended-grant": 1}
    reactor.stop()
    assert nemesis.calls[-1][0] == "end"


@pytest.mark.chaos
def test_reactive_faults_find_the_single_master_overlaps_and_keep_the_safe_set_safe(tmp_path: pathlib.Path) -> None:
    unsafe = explore(
        ExploreConfig(FAULT_SETS["unsafe-single"], seed=2, duration=30.0, reactive=True), tmp_path / "u", plot=False
    )
    assert unsafe.result.error is None, unsafe.result.error
    assert unsafe.summary["verdict"] == "unsafe"
    assert unsafe.summary["coverage"]["triggered"]["bare-majority"] >= 1
    assert any(v.kind == "mutual-exclusion" for v in unsafe.violations)
    assert unsafe.summary["margins"]["near_misses"] >= 1
    safe = explore(ExploreConfig(FAULT_SETS["safe"], seed=2, duration=30.0, reactive=True), tmp_path / "s", plot=False)
    assert safe.result.error is None, safe.result.error
    assert safe.violations == [], [v.text for v in safe.violations]
    assert safe.summary["verdict"] in ("safe", "unknown")
    # (No claim on near misses: a clock-rate fault no longer steps a master's clock, which
    # made the one this run used to show, but a SAFE run's margin is only the drift
    # allowance, 12 ms at ttl 1 s, and a loaded machine may eat it; docs/chaos-results.md.)
    assert safe.summary["margins"]["count"] > 0
