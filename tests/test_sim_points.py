"""The simulator's point trials (chaos.sim.points) and its compiled build (chaos.sim.compiled).

A point trial must keep the sweep's verdicts (violations on the UNSAFE side of a point,
none on the SAFE side) at a fraction of a sweep trial's cost; a compiled simulator must be
chosen only when it was built from the sources as they are.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from chaos.__main__ import main
from chaos.sim import compiled, points, search
from chaos.sim.trial import run_trial


def _violating(point: str, trials: int, seed: int = 1) -> int:
    family, settings, _ = points.point_trial(point)
    found = 0
    for index in range(trials):
        each = search.trial_seed(seed, index)
        found += run_trial(family.schedule(each), each, settings).violated
    return found


@pytest.mark.parametrize(
    ("point", "kind"), [("clock-rate=1.1", "mutual-exclusion"), ("lock-delay=0,pause=2", "lost-update")]
)
def test_a_point_trial_finds_the_unsafe_side(point: str, kind: str) -> None:
    family, settings, theory = points.point_trial(point)
    assert theory == "UNSAFE"
    kinds: set[str] = set()
    for index in range(20):
        each = search.trial_seed(1, index)
        kinds.update(run_trial(family.schedule(each), each, settings).kinds)
    assert kind in kinds


@pytest.mark.parametrize("point", ["clock-rate=1.012", "lock-delay=1,pause=0.9"])
def test_a_point_trial_finds_nothing_on_the_safe_side(point: str) -> None:
    assert points.point_trial(point)[2] == "SAFE"
    assert _violating(point, 150) == 0


def test_a_point_trial_is_a_few_events_and_one_meeting() -> None:
    family, settings, _ = points.point_trial("clock-rate=1.017")
    each = search.trial_seed(1, 0)
    schedule = family.schedule(each)
    assert (schedule.nodes, schedule.clients, len(schedule.ops)) == (3, 2, 3)
    assert family.schedule(each) == schedule  # seeded
    result = run_trial(schedule, each, settings)
    assert result.events < 300  # a 6 s sweep trial has thousands
    assert result.acquisitions >= 1


def test_rates_with_point_trials(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = search.rates(["clock-rate=1.1", "clock-rate=1.012"], 6, 1, chunk=4, trial="point")
    rows = {row["point"]: row for row in document["points"]}
    assert document["trial"] == "point"
    assert document["simulator"] == compiled.kind()
    assert rows["clock-rate=1.1"]["violations"] > 0
    assert rows["clock-rate=1.012"]["violations"] == 0
    out = tmp_path / "rates"
    argv = ["sim", "rates", "lock-delay=1,pause=1.1", "--trial", "point", "--trials", "2", "--out", str(out)]
    assert main(argv) == 0
    written = json.loads((out / "rates.json").read_text())
    assert (written["trial"], written["points"][0]["trials"]) == ("point", 2)
    # A point of the sweeps without a point trial, and a trial that does not exist.
    assert main(["sim", "rates", "restart-delay=2", "--trial", "point"]) == 2
    assert "no point trial" in capsys.readouterr().err
    with pytest.raises(ValueError, match="trial must be"):
        search.rates(["clock-rate=1.1"], 1, 1, trial="short")


def test_the_summary_says_which_simulator_ran(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x"
    assert main(["sim", "explore", "--faults", "safe", "--trials", "1", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulator"] == compiled.kind() in ("pure", "compiled")
    assert summary["core"] in ("pure", "compiled")
    capsys.readouterr()


def _fake_build(root: pathlib.Path, stamp: str) -> pathlib.Path:
    (root / "chaos" / "sim").mkdir(parents=True)
    (root / "stamp").write_text(stamp + "\n")
    return root


def test_a_build_of_the_current_sources_goes_first_and_no_other(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(compiled.PURE, raising=False)
    monkeypatch.setattr(compiled, "stale", None)
    current = _fake_build(tmp_path / "current", compiled._stamp())
    path = ["sources"]
    compiled.use_if_built(path, "chaos.sim", current)
    assert path == [str(current / "chaos" / "sim"), "sources"]
    # Not for the installed harness (redlock_chaos: the build's modules are chaos.sim's),
    # not with CHAOS_SIM_PURE=1, not where nothing was built.
    for package, root in (("redlock_chaos.sim", current), ("chaos.sim", tmp_path / "none")):
        path = ["sources"]
        compiled.use_if_built(path, package, root)
        assert path == ["sources"]
    monkeypatch.setenv(compiled.PURE, "1")
    compiled.use_if_built(path, "chaos.sim", current)
    assert path == ["sources"]
    assert compiled.stale is None
    # A build of other sources (the sources were edited since) is never run in their place.
    monkeypatch.delenv(compiled.PURE)
    compiled.use_if_built(path, "chaos.sim", _fake_build(tmp_path / "old", "0" * 64))
    assert path == ["sources"]
    assert compiled.stale is not None
    assert "other sources" in compiled.stale
