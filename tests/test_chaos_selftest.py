"""The self-test (``python -m chaos selftest``): broken clients, and whether the catalogue
catches them.

The relays that make the flow-level mistakes are driven by hand here (pure tier); the
patches themselves are applied only in client processes, never in this one, since they
change the library for the whole interpreter. The smoke tests run one variant on one
scenario each: one that must catch it and one that cannot. The whole self-test (every
variant, the whole catalogue, two runs) is marked ``chaos``.
"""

from __future__ import annotations

import json
import pathlib
import random

import pytest

from chaos.__main__ import main
from chaos.checkers import check_all
from chaos.history import AcquireInvoked, AcquireReturned, Event, History
from chaos.runner import Check, Expected, Params, Scenario, ScenarioResult
from chaos.selftest import judge
from chaos.variants import VARIANTS, _relay, find
from redlock._protocol.core import Request, Result, Round, drift_allowance
from redlock._protocol.flows import LockSpec, Tokens, acquire_flow
from redlock.exceptions import NodeStatus

from .model import drive

ROUND_TRIP = 0.3
SPEC = LockSpec(
    key="k",
    ttl=2.0,
    node_names=("A", "B", "C", "D", "E"),
    node_timeout=0.5,
    clock_drift_factor=0.01,
    retry_delay=0.2,
    unavailable_timeout=1.0,
)


def _drive(*, grant: int, **mistake: bool) -> tuple[Result, list[Round]]:
    """One non-blocking acquire at t=0 whose rounds each take ROUND_TRIP and are granted by
    the first ``grant`` masters; the result and the rounds that went out."""
    flow = _relay(
        acquire_flow(SPEC, Tokens(lambda: "t"), 0.0, blocking=False, timeout=None, rng=random.Random(1)), 0.0, **mistake
    )
    sent: list[Round] = []

    def answer(request: Request) -> float:
        assert isinstance(request, Round)
        sent.append(request)
        for node in request.targets:
            request.record(node, NodeStatus.GRANTED if node < grant else NodeStatus.DENIED)
        return len(sent) * ROUND_TRIP

    return drive(flow, answer), sent


def test_the_relay_without_a_mistake_changes_nothing() -> None:
    result, sent = _drive(grant=5)
    assert result.ok
    assert result.deadline == pytest.approx(SPEC.ttl - drift_allowance(SPEC.ttl, 0.01))
    assert len(sent) == 1


def test_hiding_the_rounds_counts_validity_from_the_replies() -> None:
    result, _ = _drive(grant=5, hide_rounds=True)
    assert result.deadline == pytest.approx(ROUND_TRIP + SPEC.ttl - drift_allowance(SPEC.ttl, 0.01))


def test_skipping_clean_ups_sends_no_rollback() -> None:
    correct, sent = _drive(grant=2)
    assert not correct.ok
    assert [r.cleanup for r in sent] == [False, True]
    broken, sent = _drive(grant=2, skip_cleanups=True)
    assert not broken.ok
    assert [r.cleanup for r in sent] == [False]


def test_every_variant_is_listed_once() -> None:
    names = [v.name for v in VARIANTS]
    assert len(set(names)) == len(names) >= 6
    assert find("no-drift").mistake
    with pytest.raises(KeyError, match="known"):
        find("no-such-variant")


# --- smoke: real processes, one variant, one scenario -----------------------------------------


@pytest.mark.servers
def test_selftest_catches_validity_from_the_replies(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["selftest", "--variants", "validity-from-replies", "--scenarios", "slow-replies"]
    assert main([*argv, "--runs", "1", "--quick", "-q", "--seed", "3", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "selftest.json").read_text())
    [cell] = report["cells"]
    assert cell["caught"], cell
    assert cell["robust"], cell
    # Both ways: the overlap with c2, and the claim itself, past what the harness can prove.
    assert cell["overlap_ms"] > 50, cell
    assert cell["overstated_ms"] > 50, cell
    assert "validity-from-replies" in capsys.readouterr().out


@pytest.mark.servers
@pytest.mark.parametrize(
    ("variant", "scenario"),
    [("shared-joins-holding", "shared-lock"), ("nested-release-lets-go", "shared-lock-reentrant")],
)
@pytest.mark.slow
def test_selftest_catches_a_shared_lock_that_lets_two_threads_hold(
    variant: str, scenario: str, tmp_path: pathlib.Path
) -> None:
    """24a and 24b prove what they claim: broken sharing shows up as overlaps between the
    threads of one process (each recorded as a client of its own) and as lost increments."""
    argv = ["selftest", "--variants", variant, "--scenarios", scenario, "--runs", "1", "--quick", "-q"]
    assert main([*argv, "--seed", "3", "--out", str(tmp_path)]) == 0
    [cell] = json.loads((tmp_path / "selftest.json").read_text())["cells"]
    assert cell["robust"], cell
    assert cell["overlap_ms"] > 0, cell


@pytest.mark.slow
@pytest.mark.servers
def test_selftest_exits_non_zero_when_a_variant_escapes(tmp_path: pathlib.Path) -> None:
    # An extend that re-creates keys is harmless where nobody extends.
    argv = ["selftest", "--variants", "extend-recreates", "--scenarios", "slow-replies", "--runs", "1"]
    assert main([*argv, "--quick", "-q", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "selftest.json").read_text())
    assert report["variants"]["extend-recreates"]["escaped_runs"] == [1]


@pytest.mark.slow
@pytest.mark.servers
def test_selftest_still_catches_an_extend_that_re_creates_without_a_majority(tmp_path: pathlib.Path) -> None:
    """The real extend now writes our key back where a master lost it, but only after a
    majority confirmed it: the variant that re-creates keys whatever the others say (an
    expired holder reviving a lock someone else holds) is still caught, by its late extend."""
    argv = ["selftest", "--variants", "extend-recreates", "--scenarios", "late-extend", "--runs", "1", "--quick"]
    assert main([*argv, "-q", "--seed", "3", "--out", str(tmp_path)]) == 0
    [cell] = json.loads((tmp_path / "selftest.json").read_text())["cells"]
    assert cell["robust"], cell
    assert cell["late_ms"] > 0 or cell["failed_checks"], cell


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--variants", "nope"], ["--scenarios", "nope"]])
def test_selftest_usage_errors(argv: list[str], tmp_path: pathlib.Path) -> None:
    assert main(["selftest", *argv, "--out", str(tmp_path)]) == 2


# --- the whole self-test ------------------------------------------------------------------------


@pytest.mark.chaos
def test_every_variant_is_caught_robustly(tmp_path: pathlib.Path) -> None:
    assert main(["selftest", "--quick", "--runs", "2", "-q", "--out", str(tmp_path)]) == 0


# --- judging one cell (pure) --------------------------------------------------------------------


def _result(
    expected: Expected, kinds: tuple[str, ...], events: list[Event], *, failed: str | None = None
) -> ScenarioResult:
    scenario = Scenario("99", "synthetic", "a synthetic run", expected, lambda run: None, kinds=kinds)
    verdict = check_all(History(events))
    checks = [Check(failed, False)] if failed else []
    observed = "SAFE" if verdict.safe else "UNSAFE"
    return ScenarioResult(scenario=scenario, params=Params(seed=1), observed=observed, verdict=verdict, checks=checks)


def _holders(second_start: float, *, first_deadline: float = 10.0, ttl: float | None = None) -> list[Event]:
    """c1 holds from 1 until ``first_deadline``; c2 from ``second_start`` until 20."""
    return [
        AcquireInvoked(time=0.0, client="c1", name="n", op=1, ttl=ttl, blocking=False),
        AcquireReturned(time=1.0, client="c1", name="n", op=1, ok=True, token="a", deadline=first_deadline),
        AcquireInvoked(time=second_start, client="c2", name="n", op=1),
        AcquireReturned(time=second_start, client="c2", name="n", op=1, ok=True, token="b", deadline=20.0),
    ]


def test_a_long_overlap_in_a_safe_scenario_is_a_robust_catch() -> None:
    cell = judge("v", 1, _result("SAFE", (), _holders(9.5)))
    assert (cell.caught, cell.robust) == (True, True)
    assert cell.overlap_ms == pytest.approx(500.0)
    assert cell.tag() == "ov500"


def test_a_hair_of_overlap_is_caught_but_not_robustly() -> None:
    cell = judge("v", 1, _result("SAFE", (), _holders(9.999)))
    assert (cell.caught, cell.robust) == (True, False)
    assert cell.tag() == "(ov1)"


def test_a_failed_check_is_a_robust_catch_and_nothing_is_none() -> None:
    assert judge("v", 1, _result("SAFE", (), _holders(12.0), failed="c3 is refused")).tag() == "check"
    assert judge("v", 1, _result("SAFE", (), _holders(12.0))).tag() == "-"


def test_an_unsafe_scenario_catches_only_what_its_fault_cannot_explain() -> None:
    expected = ("mutual-exclusion",)
    assert not judge("v", 1, _result("UNSAFE", expected, _holders(9.5))).caught
    # c1's claim runs 8 s past invoked + ttl - drift: that is the client's doing.
    cell = judge("v", 1, _result("UNSAFE", expected, _holders(9.5, ttl=2.0)))
    assert (cell.caught, cell.robust) == (True, True)
    assert cell.overlap_ms == 0.0
    assert cell.overstated_ms > 7000


@pytest.mark.servers
@pytest.mark.parametrize(
    "scenario",
    [
        "error-oom",
        pytest.param("error-readonly", marks=pytest.mark.slow),
        pytest.param("error-misconf", marks=pytest.mark.slow),
        pytest.param("error-busy", marks=pytest.mark.slow),
        pytest.param("error-loading", marks=pytest.mark.slow),
    ],
)
def test_selftest_catches_an_error_reply_counted_as_a_grant(scenario: str, tmp_path: pathlib.Path) -> None:
    """26a-26e are the only scenarios where a master answers an error at all: without
    them a client that took -OOM, -READONLY, -MISCONF, -BUSY or -LOADING for a vote would
    pass the catalogue."""
    argv = ["selftest", "--variants", "error-granted", "--scenarios", scenario, "--runs", "1", "--quick", "-q"]
    assert main([*argv, "--seed", "3", "--out", str(tmp_path)]) == 0
    [cell] = json.loads((tmp_path / "selftest.json").read_text())["cells"]
    assert cell["caught"], cell


@pytest.mark.slow
@pytest.mark.servers
def test_selftest_catches_a_runner_that_believes_it_leads_past_its_validity(tmp_path: pathlib.Path) -> None:
    """Scenario 27's leaders stop their own steps at the Lock's deadline, so a runner that
    tells on_lost only at stop() overlaps nobody: its lateness, past a ttl, is what fails."""
    argv = ["selftest", "--variants", "runner-outlives-validity", "--scenarios", "election-runner", "--runs", "1"]
    assert main([*argv, "--quick", "-q", "--seed", "3", "--out", str(tmp_path)]) == 0
    [cell] = json.loads((tmp_path / "selftest.json").read_text())["cells"]
    assert cell["robust"], cell
    assert any("on_lost comes within a ttl" in text for text in cell["failed_checks"]), cell


@pytest.mark.servers
@pytest.mark.slow
def test_selftest_catches_a_handover_that_does_not_compare(tmp_path: pathlib.Path) -> None:
    """Scenario 31 is the one where a handover lands after the releaser's keys expired and
    another client took the lock: a swap that did not compare would hand that lock over."""
    argv = ["selftest", "--variants", "handoff-blind", "--scenarios", "handoff-late", "--runs", "1", "--quick", "-q"]
    assert main([*argv, "--seed", "3", "--out", str(tmp_path)]) == 0
    [cell] = json.loads((tmp_path / "selftest.json").read_text())["cells"]
    assert cell["robust"], cell
    assert cell["overlap_ms"] > 100, cell
