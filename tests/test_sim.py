"""The simulator (chaos.sim): its model of the scripts, its determinism, and that it finds
what theory says it must find (and nothing where theory says there is nothing)."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

import redlock
from chaos.__main__ import main
from chaos.history import AcquireReturned, ExtendReturned
from chaos.schedule import FaultOp, Schedule
from chaos.sim import families, search, variants
from chaos.sim.model import MODELLED, Keyspace
from chaos.sim.trial import Settings, _Trial, run_trial
from chaos.sim.watch import KINDS, Watch, WatchedMaster
from chaos.sim.world import Clock, World, resp
from redlock._protocol import scripts as _scripts
from redlock._protocol.connection import reply_parser
from redlock._protocol.core import Command, ErrorReply
from redlock._protocol.kinds import PLAIN


def test_every_script_is_modelled() -> None:
    assert {script.sha for script in _scripts.ALL} <= set(MODELLED)


def test_set_nx_px_and_release_by_the_masters_clock() -> None:
    keys = Keyspace()
    assert keys.command(Command.set_nx_px("k", "a", 1000), 10.0) == b"OK"
    assert keys.command(Command.set_nx_px("k", "b", 1000), 10.5) is None
    release = Command.run_script(_scripts.RELEASE, ["k", "o"], ["b"])
    assert keys.command(release, 10.6) == 0  # not b's key
    assert keys.command(Command.set_nx_px("k", "b", 1000), 11.0) == b"OK"  # a's expired
    assert keys.apply(("EVALSHA", "0" * 40, 0), 11.0).message.startswith("NOSCRIPT")  # type: ignore[attr-defined]


@pytest.mark.parametrize("reply", [b"OK", None, 0, 1, [1, 7], [1, None, -2], b"abc", ErrorReply("OOM full")])
def test_replies_travel_as_resp(reply: object) -> None:
    parser = reply_parser()
    parser.feed(resp(reply))
    got = parser.gets()
    if isinstance(reply, ErrorReply):
        assert isinstance(got, ErrorReply)
        assert got.message == reply.message
    else:
        assert got == reply


def test_clocks_compose_jumps_and_rates() -> None:
    clock = Clock()
    clock.set_rate(10.0, 2.0)
    clock.jump(12.0, 5.0)
    assert clock.read(12.0) == 19.0
    assert clock.read(13.0) == 21.0
    assert clock.true_time(21.0) == 13.0


def _quiet(duration: float = 4.0) -> Schedule:
    return Schedule((), duration, 5, 3, 0.5, 1, search.FAMILIES["safe"].faults)


def test_same_seed_same_history() -> None:
    schedule = search.FAMILIES["unsafe-clock"].schedule(7)
    first, second = run_trial(schedule, 7), run_trial(schedule, 7)
    assert first.acquisitions == second.acquisitions > 0
    assert first.kinds == second.kinds
    assert first.verdict.to_dict() == second.verdict.to_dict()


#: The whole recorded history of trial 0 of seed 5, hashed, per family (and one sweep point),
#: as the simulator wrote it before its speed-ups (main at fe2707b): the speed-ups (constant
#: replies, the script fast path, one object per round, cached specs, the compiled core) must
#: not move one event. A deliberate change of the library's flows or policy, or of the
#: simulator's model, changes them too: then put the new values (the test prints them) here.
GOLDEN = {
    "safe": "f4890225d3fc6673",
    "unsafe-clock": "30ca608183dcae21",
    "unsafe-pause": "8385ba7c20dd72ca",
    "unsafe-restart": "0f26f1c28d8d584a",
    "unsafe-powerloss": "95a37fc44279f346",
    "clock-rate=1.05": "4727a867e4a7fb28",
}


@pytest.mark.parametrize("simulator", ["pure", "as built"])
def test_same_seed_same_history_as_before_the_speed_ups_in_a_fresh_process(simulator: str) -> None:
    # A fresh interpreter with another string-hash seed: nothing may hang on set order. It
    # runs the compiled core where one is built (REDLOCK_PURE=0; .ci/run's compiled tier
    # runs this test there), which must not move an event either; and the simulator's own
    # sources, or its compiled build where this checkout has a current one (`sim build`:
    # the compiled tier makes one, and says so with CHAOS_SIM_EXPECT_COMPILED=1).
    names = ["safe", "unsafe-powerloss", "clock-rate=1.05"]
    code = (
        "import redlock\nfrom chaos.sim import compiled, search\n"
        f"print(redlock.compiled, compiled.kind(), [search.history_digest(n, 5) for n in {names!r}])"
    )
    here = str(pathlib.Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": here, "REDLOCK_PURE": "0"}
    if simulator == "pure":
        env["CHAOS_SIM_PURE"] = "1"
    else:
        env.pop("CHAOS_SIM_PURE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    compiled, kind, digests = done.stdout.strip().split(" ", 2)
    assert digests == repr([GOLDEN[name] for name in names]), done.stdout
    if os.environ.get("REDLOCK_EXPECT_COMPILED") == "1":
        assert compiled == "True", "the compiled tier ran the simulator on the pure core"
    if simulator == "pure":
        assert kind == "pure"
    elif os.environ.get("CHAOS_SIM_EXPECT_COMPILED") == "1":
        assert kind == "compiled", "the compiled tier ran the simulator's sources: no current build"


def test_same_seed_same_history_in_this_process() -> None:
    digests = {name: search.history_digest(name, 5) for name in GOLDEN}
    assert digests == GOLDEN


def test_a_fault_free_run_is_safe_and_busy() -> None:
    result = run_trial(_quiet(), 1)
    assert not result.violated, result.describe()
    assert result.acquisitions > 20


def test_the_simulator_records_the_voters_of_every_grant() -> None:
    trial = _Trial(_quiet(2.0), 1, Settings())
    trial.world.run(2.0)
    history = trial.recorder.history()
    granted = [e for e in history.of_type(AcquireReturned) if e.ok]
    assert granted
    for event in granted:
        assert event.voters is not None
        assert len(event.voters) >= 3
        assert set(event.voters) <= set("ABCDE")
    assert all(e.voters is not None for e in history.of_type(ExtendReturned) if e.ok)


def test_the_safe_family_finds_nothing() -> None:
    summary = search.explore("safe", 12, 1)
    assert summary["violations"] == 0, summary.get("counterexample")
    assert summary["acquisitions"] > 0


@pytest.mark.parametrize("family", ["unsafe-restart", "unsafe-clock", "unsafe-pause", "unsafe-powerloss"])
def test_each_unsafe_family_is_found_unaided(family: str) -> None:
    found = search.first_violation(family, 40, 1)
    assert found is not None, f"{family}: no violation in 40 trials"


def test_a_holder_paused_past_its_validity_writes_stale() -> None:
    faults = search.FAMILIES["unsafe-pause"].faults
    ops = tuple(FaultOp(start, start + 1.0, "client-pause", "c1") for start in (0.5, 2.0))
    result = run_trial(Schedule(ops, 5.0, 5, 3, 0.5, 1, faults), 2)
    assert "lost-update" in result.kinds


def test_workers_do_not_change_the_numbers() -> None:
    one = search.explore("unsafe-clock", 6, 3, workers=1)
    two = search.explore("unsafe-clock", 6, 3, workers=2)
    for field in ("violations", "acquisitions", "events", "kinds"):
        assert one[field] == two[field]


@pytest.mark.parametrize("name", ["quorum-half", "no-drift", "no-rollback"])
def test_broken_clients_are_caught_and_the_library_restored(name: str) -> None:
    rows = search.selftest(60, 1, names=[name], say=lambda _: None)
    assert rows[0]["caught"], rows
    assert run_trial(_quiet(3.0), 1).violated is False  # every patch was taken back


def test_a_broken_client_refuses_a_compiled_core(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Compiled classes cannot be patched: the variant would silently be the correct client.
    monkeypatch.setattr(redlock, "compiled", True)
    with pytest.raises(RuntimeError, match="REDLOCK_PURE=1"), variants.applied(variants.SIM_VARIANTS[0]):
        pass
    assert main(["sim", "selftest", "quorum-half", "--budget", "1"]) == 2
    assert "REDLOCK_PURE=1" in capsys.readouterr().err


def test_every_sim_variant_has_a_distinct_name() -> None:
    names = [v.name for v in variants.SIM_VARIANTS]
    assert len(names) == len(set(names))
    assert "error-granted" in names


def test_cli_explore_writes_a_summary_and_replays_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x"
    assert main(["sim", "explore", "--faults", "unsafe-clock", "--trials", "4", "--seed", "1", "--out", str(out)]) == 0
    assert "deprecated" not in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["set"] == "unsafe-clock"
    for key in ("trials", "violations", "rate", "acquisitions", "seconds", "counterexample"):
        assert key in summary
    Schedule.from_dict(summary["counterexample"]["schedule"])  # the chaos schedule format
    assert main(["sim", "replay", str(out / "summary.json")]) == 0
    assert main(["sim", "explore", "--trials", "0"]) == 2
    capsys.readouterr()


@pytest.mark.parametrize("command", ["explore", "hunt"])
def test_the_old_set_flag_still_names_the_fault_set_and_says_it_is_deprecated(
    command: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--faults`` is the flag, as in the real harness's explore; ``--set`` still works."""
    out = tmp_path / "x"
    args = ["--trials", "1", "--out", str(out)] + (["--no-plot"] if command == "explore" else [])
    assert main(["sim", command, "--set", "unsafe-clock", *args]) in (0, 1)
    err = capsys.readouterr().err
    assert "--set is deprecated; use --faults" in err
    document = json.loads((out / ("summary.json" if command == "explore" else "hunt.json")).read_text())
    assert document["set"] == "unsafe-clock"
    # Both, disagreeing: a usage error, not a silent choice.
    assert main(["sim", command, "--set", "safe", "--faults", "unsafe-clock", *args]) == 2
    assert "disagree" in capsys.readouterr().err


@pytest.mark.chaos
def test_the_whole_selftest_catches_every_variant() -> None:
    rows = search.selftest(400, 1, say=lambda _: None)
    assert all(row["caught"] for row in rows), [row["variant"] for row in rows if not row["caught"]]


@pytest.mark.chaos
def test_a_thousand_safe_trials_find_nothing() -> None:
    assert search.explore("safe", 1000, 2, workers=2)["violations"] == 0


def test_the_rate_threshold_is_the_drift_allowance() -> None:
    assert families.rate_threshold(0.5) == pytest.approx(1 / (1 - 0.01 - 0.004))
    surface = families.SURFACES["clock-rate", "ttl"]
    assert surface.unsafe(1.05, 0.5)
    assert not surface.unsafe(1.01, 0.5)
    assert families.SURFACES["lock-delay", "pause"].unsafe(0.5, 2.0)


def test_cli_draws_a_phase_diagram(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "surface"
    argv = ["sim", "sweep", "lock-delay", "--values", "0", "1", "--by", "pause", "--by-values", "2"]
    assert main([*argv, "--trials", "1", "--out", str(out)]) == 0
    document = json.loads((out / "sweep.json").read_text())
    assert [(p["x"], p["y"], p["theory"]) for p in document["points"]] == [(0, 2, "UNSAFE"), (1, 2, "UNSAFE")]
    assert (out / "sweep.png").stat().st_size > 0
    assert main(["sim", "sweep", "clock-rate", "--values", "1", "--by", "pause", "--by-values", "1"]) == 2
    capsys.readouterr()


def test_sweeps_run_on_workers_with_the_same_numbers() -> None:
    one = search.sweep2d(("lock-delay", [0.0]), ("pause", [2.0]), 2, 1)
    two = search.sweep2d(("lock-delay", [0.0]), ("pause", [2.0]), 2, 1, workers=2)
    assert one["points"] == two["points"]


def test_rates_at_edge_points_count_the_trials_sweep_plays(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = search.rates(["lock-delay=0,pause=2", "clock-rate=1.012"], 3, 1, chunk=2)
    rows = {row["point"]: row for row in document["points"]}
    assert [row["trials"] for row in document["points"]] == [3, 3]
    swept = search.sweep2d(("lock-delay", [0.0]), ("pause", [2.0]), 3, 1)["points"][0]
    assert rows["lock-delay=0,pause=2"]["violations"] == swept["violations"]
    assert rows["lock-delay=0,pause=2"]["acquisitions"] == swept["acquisitions"]
    assert rows["lock-delay=0,pause=2"]["theory"] == "UNSAFE"
    assert rows["clock-rate=1.012"]["theory"] == "SAFE"
    for row in rows.values():
        assert row["exact_low"] <= row["rate"] <= row["exact_high"]
    out = tmp_path / "rates"
    assert main(["sim", "rates", "clock-rate=1.012", "--trials", "1", "--out", str(out)]) == 0
    assert json.loads((out / "rates.json").read_text())["points"][0]["trials"] == 1
    assert main(["sim", "rates", "clock-rate=fast"]) == 2
    assert main(["sim", "rates", "pause=1,lock-delay=1"]) == 2
    capsys.readouterr()


def test_a_watched_trial_is_the_same_trial() -> None:
    # The watch only counts: the history is event for event the unwatched one's.
    family = search.FAMILIES["unsafe-clock"]
    each = search.trial_seed(5, 0)
    watch = Watch()
    trial = _Trial(family.schedule(each), each, Settings(), watch)
    trial.world.run(family.duration)
    assert hashlib.sha256(trial.recorder.history().to_json().encode()).hexdigest()[:16] == GOLDEN["unsafe-clock"]


def test_the_hunt_sees_each_interleaving_in_a_safe_set_and_no_violation(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = search.hunt("restarts-kept", 10, 1)
    assert document["violations"] == 0, document["violating"]
    for kind in KINDS:
        row = document["interleavings"][kind]
        assert row["trials"] > 0, kind
        assert kind in row["first"]["seen"]
    out = tmp_path / "hunt"
    argv = ["sim", "hunt", "--trials", "3", "--target", "release-overtaken", "--ignore", "late-extend"]
    assert main([*argv, "--out", str(out)]) == 0
    assert json.loads((out / "hunt.json").read_text())["ignore"] == ["late-extend"]
    assert main(["sim", "hunt", "--trials", "0"]) == 2
    capsys.readouterr()


def test_the_watch_names_a_release_that_finds_another_holder() -> None:
    world = World(1)
    watch = Watch()
    master = WatchedMaster(world, 0, "none", watch)
    master.scripts.add(_scripts.RELEASE.sha)
    assert master.execute(["SET", "L1", "a:1", "NX", "PX", "100"]) == b"OK"
    world.now = 0.2  # a's key lapsed: b takes the name, then a's release lands
    assert master.execute(["SET", "L1", "b:1", "NX", "PX", "100"]) == b"OK"
    assert master.execute(["EVALSHA", _scripts.RELEASE.sha, "1", "L1", "a:1"]) == 0
    assert watch.counts == {"release-overtaken": 1}
    assert master.execute(["SET", "L2", "a:1", "NX", "PX", "100"]) == b"OK"  # after a's release ran
    assert watch.counts["late-grant-after-rollback"] == 1


def test_the_small_scope_mode_clears_the_client_and_catches_a_slow_round_counted_late() -> None:
    from chaos.sim import exhaustive  # noqa: PLC0415

    clean = exhaustive.exhaust(exhaustive.Scope(deviations=1, horizon=15), stop_at_first=False)
    assert clean.runs == 1 + 15 * 2
    assert clean.violations == 0, clean.first
    variant = next(v for v in variants.SIM_VARIANTS if v.name == "validity-from-replies")
    with variants.applied(variant):
        caught = exhaustive.exhaust(exhaustive.Scope(deviations=2, horizon=10))
    assert caught.first is not None
    assert sorted(caught.first[0].values()) == [1, 1]  # two slow replies make the round slow


def test_cli_exhaust(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "exhaust", "--deviations", "2", "--horizon", "8", "--variant", "quorum-half"]) == 0
    assert main(["sim", "exhaust", "--variant", "nope"]) == 2
    capsys.readouterr()


@pytest.mark.slow  # a LocalCluster of processes: 1.5-3 s
def test_a_dask_cluster_gives_the_same_numbers() -> None:
    distributed = pytest.importorskip("distributed")  # the [sim] extra, in [dev]
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        there = search.explore("unsafe-clock", 4, 3, scheduler=cluster.scheduler_address)
    here = search.explore("unsafe-clock", 4, 3)
    for field in ("violations", "acquisitions", "events", "kinds", "counterexample"):
        assert there[field] == here[field]


def test_a_handover_swaps_only_the_releasers_own_token() -> None:
    keys = Keyspace()
    assert keys.command(Command.set_nx_px("k", "a", 1000), 10.0) == b"OK"
    assert keys.command(PLAIN.handoff("k", "b", "c", 1000), 10.1) == 0  # not b's: nothing changes
    assert keys.command(PLAIN.handoff("k", "a", "c", 2000), 10.2) == 1
    assert keys.command(Command.set_nx_px("k", "x", 1000), 11.5) is None  # c's, with c's ttl
    assert keys.command(Command.set_nx_px("k", "x", 1000), 12.3) == b"OK"
