"""Randomized fault schedules (chaos.schedule), explore and replay (chaos.explore), sweeps
(chaos.sweep).

The pure parts (the schedule generator, the Wilson interval, the summary's bins) are
property-tested. The default run has a short smoke of each command on real processes: a
few seconds of SAFE explore, a replay of a saved window, a sweep of two values with one
trial each. The long versions (minutes of explore per fault set, whole sweeps) are marked
``chaos`` and run with ``-m chaos`` or ``REDLOCK_CHAOS=1``.

No assertion is about how long something took. The smoke's UNSAFE windows are built so
that their violation does not hang on luck: a clock jump on a majority of masters while
four clients contend for three names holds keys of some holder nearly every time, three
times over.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import random
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.__main__ import main
from chaos.checkers import check_all
from chaos.explore import _NEMESIS_ACTIONS, ExploreConfig, explore, find_violations, replay, time_bins
from chaos.history import AcquireInvoked, AcquireReturned, History, MasterClock, ReleaseInvoked
from chaos.netns import unavailable
from chaos.schedule import (
    FAULT_KINDS,
    FAULT_SETS,
    FaultOp,
    FaultSet,
    Schedule,
    fault_kind,
    generate,
    masters_down,
    resolve_fault_set,
)
from chaos.sweep import PARAMETERS, clopper_pearson_interval, margin_fit, wilson_interval
from redlock import quorum_size

RELAXED = settings(deadline=None, max_examples=60)

sets = st.sampled_from(sorted(FAULT_SETS))
seeds = st.integers(0, 2**32)
durations = st.floats(0.0, 120.0, allow_nan=False)
nodes = st.integers(3, 7)
clients = st.integers(1, 6)
ttls = st.sampled_from([0.5, 1.0, 2.0])


# --- the schedule generator (pure) -------------------------------------------------------------


@RELAXED
@given(seeds, durations, sets, nodes, clients, ttls)
def test_the_same_seed_gives_the_same_schedule(
    seed: int, duration: float, name: str, n: int, k: int, ttl: float
) -> None:
    first = generate(seed, duration, FAULT_SETS[name], nodes=n, clients=k, ttl=ttl)
    again = generate(seed, duration, FAULT_SETS[name], nodes=n, clients=k, ttl=ttl)
    assert first == again
    assert Schedule.from_dict(json.loads(json.dumps(first.to_dict()))) == first


@RELAXED
@given(seeds, durations, sets, nodes, clients, ttls)
def test_every_fault_is_healed_before_the_end(
    seed: int, duration: float, name: str, n: int, k: int, ttl: float
) -> None:
    schedule = generate(seed, duration, FAULT_SETS[name], nodes=n, clients=k, ttl=ttl)
    for op in schedule.ops:
        assert 0 <= op.start < op.end <= duration - max(1.0, 2 * ttl) + 1e-3
        assert op.kind in FAULT_SETS[name].kinds
        assert all(0 <= m < n for m in op.masters)
        if op.fault.target in ("client", "link"):
            assert op.client in {f"c{i + 1}" for i in range(k)}
    # Steps: every op starts once and stops once, the stop after the start.
    steps = schedule.steps()
    assert sorted(i for _, what, i in steps if what == "start") == list(range(len(schedule.ops)))
    assert sorted(i for _, what, i in steps if what == "stop") == list(range(len(schedule.ops)))
    assert [s[0] for s in steps] == sorted(s[0] for s in steps)


@RELAXED
@given(seeds, st.floats(5.0, 200.0), nodes, clients, ttls)
def test_a_safe_schedule_keeps_the_assumptions(seed: int, duration: float, n: int, k: int, ttl: float) -> None:
    schedule = generate(seed, duration, FAULT_SETS["safe"], nodes=n, clients=k, ttl=ttl, interval=0.3)
    bound = n - quorum_size(n)
    for op in schedule.ops:
        # Checking at every start suffices: the count of masters down only rises there.
        assert len(masters_down(schedule.ops, op.start)) <= bound
        if op.fault.down:
            assert len(op.masters) <= bound
        if op.kind == "kill":
            assert op.end - op.start > ttl  # the delayed restart
        if op.kind == "clock-rate":
            assert 1.0 <= op.value <= 1.005  # within the 1 % allowance, never slow
        assert op.kind not in ("restart", "power-loss", "clock-jump")


@RELAXED
@given(seeds, st.floats(5.0, 120.0), sets, nodes, clients)
def test_one_fault_per_target_at_a_time(seed: int, duration: float, name: str, n: int, k: int) -> None:
    schedule = generate(seed, duration, FAULT_SETS[name], nodes=n, clients=k, interval=0.2)

    def holds(op: FaultOp) -> set[str]:
        if op.fault.target == "link":
            return {op.target}
        if op.fault.target == "client":
            return {f"client {op.target}"}
        return {f"master {m}" for m in op.masters}

    for i, a in enumerate(schedule.ops):
        for b in schedule.ops[i + 1 :]:
            if a.start < b.end and b.start < a.end:
                assert not holds(a) & holds(b), (a, b)


@RELAXED
@given(seeds, sets, st.floats(0.0, 40.0), st.floats(0.0, 10.0))
def test_a_window_keeps_what_overlaps_it(seed: int, name: str, start: float, length: float) -> None:
    schedule = generate(seed, 60.0, FAULT_SETS[name])
    window = schedule.window(start, start + length)
    overlapping = [op for op in schedule.ops if op.start <= start + length and op.end >= start]
    assert len(window.ops) == len(overlapping)
    for op in window.ops:
        assert 0 <= op.start <= op.end <= window.duration
    assert window.faults == schedule.faults


def test_fault_sets_by_name_or_list() -> None:
    assert resolve_fault_set("safe").safe
    assert resolve_fault_set("safe").fencing
    assert not resolve_fault_set("unsafe-clock").safe
    assert resolve_fault_set("unsafe-pause").check_first
    listed = resolve_fault_set("kill, blackhole")
    assert listed.kinds == ("kill", "blackhole")
    assert listed.safe
    assert not resolve_fault_set("kill,restart").safe
    with pytest.raises(ValueError, match="faults: unknown 'nap'"):
        resolve_fault_set("kill,nap")
    with pytest.raises(ValueError, match="faults"):
        resolve_fault_set("")
    with pytest.raises(ValueError, match="duration"):
        generate(1, -1.0, FAULT_SETS["safe"])
    with pytest.raises(ValueError, match="nodes"):
        generate(1, 10.0, FAULT_SETS["safe"], nodes=2)
    with pytest.raises(ValueError, match="clients"):
        ExploreConfig(FAULT_SETS["safe"], clients=1)


def test_an_unknown_fault_kind_is_refused_wherever_it_comes_from() -> None:
    # A misspelt kind must fail, not play a schedule that injects nothing.
    with pytest.raises(ValueError, match="unknown fault kind 'pause_master'"):
        fault_kind("pause_master")
    with pytest.raises(ValueError, match="unknown fault kind 'nap'"):
        FaultOp(0.0, 1.0, "nap", "A")
    with pytest.raises(ValueError, match="unknown fault kind 'nap'"):
        FaultOp.from_dict({"start": 0.0, "end": 1.0, "kind": "nap", "target": "A"})
    with pytest.raises(ValueError, match="unknown fault kind 'nap'"):
        FaultSet.from_dict({"name": "mine", "kinds": ["kill", "nap"], "safe": True})


def test_every_fault_kind_has_a_nemesis_action_and_a_magnitude() -> None:
    real = {name for name, kind in FAULT_KINDS.items() if not kind.simulated}
    assert set(_NEMESIS_ACTIONS) == real  # (the simulator's own kinds are played by chaos.sim)
    # The SAFE set is the table's safe kinds, and a SAFE schedule keeps a master down only
    # through the kinds the table says take one down.
    assert set(FAULT_SETS["safe"].kinds) == {
        name for name in real if FAULT_KINDS[name].safe and not FAULT_KINDS[name].kernel
    }
    rng = random.Random(0)
    for kind in FAULT_KINDS.values():
        for safe in (True, False):
            length, value = kind.magnitudes(safe, 1.0, rng)
            assert length > 0
            assert value >= 0


def test_real_clock_faults_span_their_threshold_log_uniformly() -> None:
    """clock-strobe's step against the ttl, clock-slew's rate against the 1 % allowance:
    as many draws a decade below the threshold as a decade above, on both sides of it."""
    rng = random.Random(7)
    ttl = 2.0
    steps = [FAULT_KINDS["clock-strobe"].magnitudes(False, ttl, rng)[1] / ttl for _ in range(4000)]
    assert min(steps) >= 0.03
    assert max(steps) <= 3.0
    assert 0.4 < sum(s < 0.3 for s in steps) / len(steps) < 0.6  # log-uniform: the middle decade splits them
    excess = [FAULT_KINDS["clock-slew"].magnitudes(False, ttl, rng)[1] - 1 for _ in range(4000)]
    assert min(excess) >= 0.001
    assert max(excess) <= 0.5
    assert 0.2 < sum(e < 0.01 for e in excess) / len(excess) < 0.5  # below the allowance too
    # A SAFE set's draws stay within the allowance.
    assert all(FAULT_KINDS["clock-slew"].magnitudes(True, ttl, rng)[1] <= 1.005 for _ in range(200))
    assert all(FAULT_KINDS["clock-strobe"].magnitudes(True, ttl, rng)[1] <= 0.005 * ttl for _ in range(200))
    assert not FAULT_KINDS["clock-strobe"].safe
    assert not {"clock-strobe", "clock-slew"} & {k for s in FAULT_SETS.values() for k in s.kinds}


def test_a_named_set_on_the_kernel_network_trades_delays_for_the_kernels_link_faults() -> None:
    kernel_kinds = {name for name, kind in FAULT_KINDS.items() if kind.kernel}
    safe = FAULT_SETS["safe"].on("kernel")
    assert not {"link-delay", "one-way"} & set(safe.kinds)
    assert {"drop-replies", "drop-requests", "syn-drop", "reset", "loss", "blackhole"} <= set(safe.kinds)
    assert "half-open" not in safe.kinds  # it restarts a master empty: never in the SAFE set
    assert safe.safe
    assert safe.fencing
    assert "half-open" in FAULT_SETS["unsafe-restart"].on("kernel").kinds
    # No link fault in the set, none added; on the proxy every named set is as it was.
    assert FAULT_SETS["unsafe-single"].on("kernel") == FAULT_SETS["unsafe-single"]
    for faults in FAULT_SETS.values():
        assert faults.on("proxy") == faults
        assert not kernel_kinds & set(faults.kinds)
    # A set made by hand is played as given, and refused where it cannot be.
    listed = resolve_fault_set("kill,drop-replies,loss")
    assert listed.safe
    assert listed.on("kernel") == listed
    with pytest.raises(ValueError, match="drop-replies, loss need the kernel network"):
        listed.on("proxy")
    with pytest.raises(ValueError, match="link-delay need the proxy and syn-drop the kernel network"):
        resolve_fault_set("link-delay,syn-drop").on("kernel")
    assert not resolve_fault_set("kill,half-open").safe
    # ExploreConfig keeps the set as played, so that its schedule draws the kernel's kinds.
    config = ExploreConfig(FAULT_SETS["safe"], seed=4, duration=60.0, network="kernel")
    assert config.faults == safe
    assert ExploreConfig.from_dict(config.to_dict()) == config
    drawn = {op.kind for op in config.schedule().ops}
    assert drawn & kernel_kinds
    assert not drawn & {"link-delay", "one-way"}
    with pytest.raises(ValueError, match="need the kernel network"):
        ExploreConfig(listed, network="proxy")


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10_000))
def test_a_half_open_link_holds_its_master_too(seed: int) -> None:
    faults = FAULT_SETS["unsafe-restart"].on("kernel")
    schedule = generate(seed, 60.0, faults, nodes=5, clients=4, interval=0.3)
    for op in schedule.ops:
        if op.kind != "half-open":
            continue
        [master] = op.masters
        others = [o for o in schedule.ops if o is not op and o.start < op.end and op.start < o.end]
        assert not [o for o in others if o.fault.target == "master" and master in o.masters]
        assert not [o for o in others if o.kind == "half-open" and o.masters == op.masters]


# --- the Wilson interval (pure) ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_brackets_the_estimate(pair: tuple[int, int]) -> None:
    k, n = pair
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= high <= 1.0
    if n:
        assert low <= k / n <= high
        assert (low == 0.0) == (k == 0)
        assert (high == 1.0) == (k == n)
        # The interval of the failures is the mirror image of the successes'.
        mirror = wilson_interval(n - k, n)
        assert math.isclose(low, 1 - mirror[1], abs_tol=1e-12)
        assert math.isclose(high, 1 - mirror[0], abs_tol=1e-12)
        # Four times the trials at the same share: a narrower interval.
        wider = high - low
        low4, high4 = wilson_interval(4 * k, 4 * n)
        assert high4 - low4 <= wider + 1e-12
    else:
        assert (low, high) == (0.0, 1.0)


def _tail_at(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), by the plain sum (a check of the fast one)."""
    return math.fsum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_the_exact_interval_brackets_the_estimate(pair: tuple[int, int]) -> None:
    k, n = pair
    low, high = clopper_pearson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    assert (low == 0.0) == (k == 0)
    assert (high == 1.0) == (k == n)
    mirror = clopper_pearson_interval(n - k, n)
    assert math.isclose(low, 1 - mirror[1], abs_tol=1e-9)
    # Each bound sits where the observed count is on a 2.5 % tail.
    if k < n:
        assert math.isclose(_tail_at(k, n, high), 0.025, abs_tol=1e-6)


def test_the_exact_interval_known_values_and_bad_input() -> None:
    assert clopper_pearson_interval(0, 10) == (0.0, pytest.approx(1 - 0.025**0.1))
    low, high = clopper_pearson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.18709, abs=1e-5), pytest.approx(0.81291, abs=1e-5))
    # A million trials, the rate tables' size: 3 in 1e6 (and it answers at once).
    low, high = clopper_pearson_interval(3, 1_000_000)
    assert (low, high) == (pytest.approx(6.187e-7, rel=1e-3), pytest.approx(8.767e-6, rel=1e-3))
    assert clopper_pearson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson_interval(3, 2)
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson_interval(1, 2, confidence=1.0)
    with pytest.raises(TypeError, match="integers"):
        clopper_pearson_interval(1.0, 2)  # type: ignore[arg-type]


def test_wilson_interval_known_values_and_bad_input() -> None:
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert math.isclose(high, 0.2775, abs_tol=1e-4)
    low, high = wilson_interval(5, 10)
    assert math.isclose(low, 0.2366, abs_tol=1e-4)
    assert math.isclose(high, 0.7634, abs_tol=1e-4)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(3, 2)
    with pytest.raises(TypeError, match="integers"):
        wilson_interval(1.0, 2)  # type: ignore[arg-type]


@given(
    st.floats(0.9, 1.2),
    st.floats(-50.0, 50.0).filter(lambda slope: abs(slope) > 0.01),
    st.lists(st.integers(0, 50).map(lambda i: 0.8 + i / 100), min_size=2, max_size=8, unique=True),
    st.integers(1, 3),
)
@RELAXED
def test_margin_fit_finds_where_exact_margins_cross_zero(
    boundary: float, slope: float, values: list[float], trials: int
) -> None:
    points = [{"value": v, "margins": [slope * (v - boundary)] * trials} for v in values]
    if len(values) * trials < 3:
        assert margin_fit(points) is None
        return
    fit = margin_fit(points)
    assert fit is not None
    assert math.isclose(fit["threshold"], boundary, abs_tol=1e-6)
    assert math.isclose(fit["slope"], slope, rel_tol=1e-6)
    assert fit["stderr"] < 1e-6  # no noise, no doubt
    assert fit["margins"] == len(values) * trials


def test_margin_fit_declines_what_cannot_carry_a_line() -> None:
    assert margin_fit([{"value": 1.0, "margins": [0.1, 0.2, 0.3]}]) is None  # one value
    assert margin_fit([{"value": 1.0, "margins": [0.1]}, {"value": 1.1, "margins": [0.2]}]) is None  # two margins
    flat = [{"value": v, "margins": [0.05, 0.05]} for v in (1.0, 1.1)]
    assert margin_fit(flat) is None
    noisy = [{"value": 1.0, "margins": [0.1, 0.3]}, {"value": 1.2, "margins": [-0.1, -0.3]}]
    fit = margin_fit(noisy)
    assert fit is not None
    assert math.isclose(fit["threshold"], 1.1)
    assert fit["stderr"] > 0
    assert [p.name for p in PARAMETERS.values() if p.margins] == ["clock-rate", "drift-factor"]


def test_each_sweep_threshold_lies_between_its_default_values() -> None:
    for parameter in PARAMETERS.values():
        sides = {parameter.unsafe(v) for v in parameter.defaults}
        assert sides == {True, False}, parameter.name


# --- the summary's views (pure) ------------------------------------------------------------


def test_bins_and_violations_of_a_synthetic_history() -> None:
    events = [
        AcquireInvoked(time=10.0, client="c1", name="L", op=1),
        AcquireReturned(time=10.1, client="c1", name="L", op=1, ok=True, token="a", deadline=12.0),
        AcquireInvoked(time=10.5, client="c2", name="L", op=1),
        AcquireReturned(time=11.5, client="c2", name="L", op=1, ok=True, token="b", deadline=13.0),
        ReleaseInvoked(time=11.8, client="c1", name="L", op=2, token="a"),
        AcquireInvoked(time=13.5, client="c1", name="L", op=3),
        AcquireReturned(time=13.6, client="c1", name="L", op=3, ok=False),
    ]
    history = History(events)
    bins = time_bins(history, 10.0, 14.0, 2.0)
    assert [b["acquired"] for b in bins] == [2, 0]
    assert [b["returned"] for b in bins] == [2, 1]
    assert bins[0]["latency_max"] == pytest.approx(1.0)
    (violation,) = find_violations(check_all(history), 10.0)
    assert violation.kind == "mutual-exclusion"
    assert violation.time == pytest.approx(1.5)


# --- smoke, real processes -------------------------------------------------------------------


@pytest.mark.servers
def test_explore_safe_smoke(tmp_path: pathlib.Path) -> None:
    config = ExploreConfig(FAULT_SETS["safe"], seed=3, duration=5.0, interval=0.4)
    outcome = explore(config, tmp_path)
    assert outcome.result.error is None, outcome.result.error
    assert outcome.violations == [], [v.text for v in outcome.violations]
    assert outcome.passed
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["expected"] == summary["observed"] == "SAFE"
    assert summary["verdict"] in ("safe", "unknown")
    assert summary["margins"]["count"] > 0
    assert summary["first_violation"] is None
    assert summary["acquisitions"] > 0
    assert summary["faults_scheduled"] == len(outcome.schedule.ops) > 0
    assert 0.0 <= summary["availability"] <= 1.0
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert Schedule.from_dict(json.loads((tmp_path / "schedule.json").read_text())) == outcome.schedule


@pytest.mark.slow
@pytest.mark.servers
def test_explore_plays_strobing_and_slewing_clocks(tmp_path: pathlib.Path) -> None:
    config = ExploreConfig(resolve_fault_set("clock-strobe,clock-slew"), seed=2, duration=5.0, network="proxy")
    ops = (FaultOp(0.5, 2.0, "clock-strobe", "A", 0.3), FaultOp(0.5, 2.5, "clock-slew", "B,C", 1.2))
    schedule = Schedule(ops, 5.0, 5, config.clients, config.ttl, config.seed, config.faults)
    outcome = explore(config, tmp_path, schedule=schedule, plot=False)
    assert outcome.result.error is None, outcome.result.error
    history = History.from_dicts(json.loads(outcome.result.history_path.read_text())["events"])  # type: ignore[union-attr]
    windows = {(w.kind, w.target) for w in history.fault_windows()}
    assert {("clock-strobe", "A"), ("clock-slew", "B"), ("clock-slew", "C")} <= windows
    # The masters' clocks as the observer read them: A flapped +0.3 s and back, B and C
    # ran fast; each ends where its fault left it (A on its own time, B and C ahead).
    offsets: dict[str, list[float]] = {}
    for event in history:
        if isinstance(event, MasterClock):
            offsets.setdefault(event.master, []).append(event.wall - event.time)
    a = offsets["A"]
    assert max(a) - min(a) > 0.2  # seen on both sides of a flip
    assert abs(a[-1] - a[0]) < 0.1  # back on its own time
    assert offsets["B"][-1] - offsets["B"][0] > 0.05  # a ramp to x1.2 over 2 s gains about 0.2 s


def _saved_window(path: pathlib.Path) -> None:
    """A window as explore saves it: clock jumps on a majority, three times."""
    config = ExploreConfig(FAULT_SETS["unsafe-clock"], seed=5, duration=6.0)
    ops = tuple(
        FaultOp(at, at + 0.6, "clock-jump", masters, 3.0)
        for at, masters in ((1.5, "A,B,C"), (3.0, "C,D,E"), (4.5, "A,C,E"))
    )
    schedule = Schedule(ops, 6.5, 5, config.clients, config.ttl, config.seed, config.faults)
    document = {
        "config": config.to_dict(),
        "violation": {"kind": "mutual-exclusion", "time": 2.0, "text": "(made by hand)"},
        "window": [0.0, 6.0],
        "schedule": schedule.to_dict(),
    }
    path.write_text(json.dumps(document))


@pytest.mark.slow
@pytest.mark.servers
def test_replay_plays_a_saved_window_again(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    window = tmp_path / "violation-1.json"
    _saved_window(window)
    status = main(["replay", str(window), "--out", str(tmp_path / "replay"), "--tries", "2", "--no-plot", "-q"])
    out = capsys.readouterr().out
    assert status == 0, out
    # Timing decides whether a try meets the interleaving again: it says how many did.
    tries = [json.loads((tmp_path / "replay" / f"try-{n}" / "summary.json").read_text()) for n in (1, 2)]
    again = sum(summary["violations_by_kind"].get("mutual-exclusion", 0) > 0 for summary in tries)
    assert (
        f"saved violation: mutual-exclusion; reproduced {again} of 2 tries on the proxy network (found per try: " in out
    )
    assert again > 0
    # Each violation of the replay saved its own window, which replays in turn.
    assert any((tmp_path / "replay" / f"try-{n}" / "violations" / "violation-1.json").exists() for n in (1, 2))


@pytest.mark.slow
@pytest.mark.servers
def test_explore_plays_the_kernel_kinds_and_replay_keeps_the_network(tmp_path: pathlib.Path) -> None:
    if (reason := unavailable()) is not None:
        pytest.skip(f"no kernel network: {reason}")
    config = ExploreConfig(FAULT_SETS["safe"], seed=4, duration=6.0, interval=0.25, network="kernel")
    outcome = explore(config, tmp_path / "run", plot=False)
    assert outcome.result.error is None, outcome.result.error
    assert outcome.violations == [], [v.text for v in outcome.violations]
    summary = outcome.summary
    assert summary["network"] == "kernel"
    played = {k for k, n in summary["faults_by_kind"].items() if n and FAULT_KINDS[k].kernel}
    assert played, summary["faults_by_kind"]
    # A window found on the kernel network replays there (made by hand: a SAFE run has none).
    window = tmp_path / "violation-1.json"
    ops = (FaultOp(0.5, 1.5, "drop-replies", "c1-A"), FaultOp(1.0, 2.0, "loss", "c2-B", 40.0))
    schedule = Schedule(ops, 3.5, 5, config.clients, config.ttl, config.seed, config.faults)
    document = {
        "config": config.to_dict(),
        "violation": {"kind": "mutual-exclusion", "time": 1.0, "text": "(made by hand)"},
        "window": [0.0, 2.5],
        "network": "kernel",
        "schedule": schedule.to_dict(),
    }
    window.write_text(json.dumps(document))
    again, _, _ = replay(window, tmp_path / "replay", plot=False)
    assert again.result.error is None, again.result.error
    assert again.summary["network"] == "kernel"
    kinds = {
        w.kind for w in History.from_dicts(json.loads(again.result.history_path.read_text())["events"]).fault_windows()
    }
    assert {"drop-replies", "loss"} <= kinds


@pytest.mark.slow
@pytest.mark.servers
def test_sweep_smoke(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "pause", "--values", "0.5", "2.0", "--trials", "1", "--seed", "2", "--out", str(tmp_path), "-q"]
    assert main(argv) == 0
    document = json.loads((tmp_path / "sweep.json").read_text())
    short, long = document["points"]
    assert (short["value"], short["violations"], short["trials"]) == (0.5, 0, 1)
    assert (long["value"], long["violations"], long["trials"]) == (2.0, 1, 1)
    assert document["threshold"] == 1.0
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "threshold" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["explore", "--faults", "kill,nap"],
        ["explore", "--duration", "0"],
        ["explore", "--clients", "1"],
        ["sweep", "no-such-parameter"],
        ["sweep", "pause", "--trials", "0"],
    ],
)
def test_usage_errors(argv: list[str], tmp_path: pathlib.Path) -> None:
    assert main([*argv, "--out", str(tmp_path)]) == 2


# --- the long runs (-m chaos) ------------------------------------------------------------------


@pytest.mark.chaos
def test_safe_set_finds_nothing_over_minutes(tmp_path: pathlib.Path) -> None:
    seed = int(os.environ.get("REDLOCK_CHAOS_SEED", "7"))
    outcome = explore(ExploreConfig(FAULT_SETS["safe"], seed=seed, duration=180.0), tmp_path, plot=False)
    assert outcome.result.error is None, outcome.result.error
    assert outcome.violations == [], [v.text for v in outcome.violations[:5]]


@pytest.mark.chaos
@pytest.mark.parametrize("name", ["unsafe-restart", "unsafe-clock", "unsafe-pause"])
def test_unsafe_sets_find_violations_unscripted(name: str, tmp_path: pathlib.Path) -> None:
    seed = int(os.environ.get("REDLOCK_CHAOS_SEED", "7"))
    outcome = explore(ExploreConfig(FAULT_SETS[name], seed=seed, duration=60.0), tmp_path, plot=False)
    assert outcome.result.error is None, outcome.result.error
    assert outcome.violations


@pytest.mark.chaos
@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_sweep_is_safe_below_and_unsafe_beyond_the_threshold(name: str, tmp_path: pathlib.Path) -> None:
    parameter = PARAMETERS[name]
    # The extremes of the defaults: far from the threshold, where theory leaves no doubt.
    values = [min(parameter.defaults), max(parameter.defaults)]
    assert main(["sweep", name, "--values", *map(str, values), "--trials", "3", "--out", str(tmp_path), "-q"]) == 0
    points = json.loads((tmp_path / "sweep.json").read_text())["points"]
    for point in points:
        if point["theory"] == "SAFE":
            assert point["violations"] == 0, point
        else:
            assert point["violations"] == point["trials"], point


def test_a_run_the_environment_cannot_start_leaves_no_directory_behind(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 3 (no redis-server here) with nothing written: neither the output directory nor
    a run's working directory in the temp dir is left, empty, behind."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("REDLOCK_REDIS_SERVER", str(tmp_path / "no-such-redis-server"))
    runs = {
        # explore writes the schedule it was to play first: a file worth keeping.
        ("explore", "--duration", "2"): ["schedule.json"],
        ("run", "baseline", "--quick"): [],
        ("sweep", "clock-rate", "--trials", "1"): [],
    }
    for argv, kept in runs.items():
        out = tmp_path / argv[0]
        assert main([*argv, "--out", str(out), "--no-plot", "-q"]) == 3
        assert "error: " in capsys.readouterr().err
        left = sorted(found.name for found in out.rglob("*")) if out.exists() else None
        assert left == (kept or None)
    assert list(temp.iterdir()) == []
