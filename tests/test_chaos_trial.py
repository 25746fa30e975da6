"""``chaos trial``: any client of the peers protocol as a client of a chaos run (chaos.peer_client,
chaos.trial).

The pure parts (which scenarios a trial plays, the rates and their intervals, the recovery
times, the comparison) are checked here without servers. The protocol's generic operations
that the harness drives (``read``, ``write`` with the holder's deadline, ``stop``,
``deadline_ns``) are checked against a worker of this library and of node-redlock (each
language's generic layer). The default run's smoke puts this library's worker through two
scenarios by ``python -m chaos trial``: the baseline, and K1, whose SIGSTOP must stop the
worker process itself. The slow tier (``-m slow``) runs every installed client through a few
scenarios and an explore family, a mixed trial of this library and node-redlock, and the
self-test: a deliberately broken adapter (its greeting names the client it ``wraps``) must
come out worse than that client in the same trial. A peer that cannot be installed is
skipped, saying why.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chaos.__main__ import main
from chaos.history import AcquireReturned, FaultBegin, FaultEnd, History, ResourceWrite
from chaos.peer_client import Peers, caller_deadline
from chaos.scenarios import CATALOGUE
from chaos.trial import (
    EXCLUDED,
    FAMILIES,
    KEYED,
    SCENARIOS,
    Outcome,
    error_headline,
    greet,
    rate,
    recovery_times,
    run_trial,
    settings,
    to_markdown,
    worse,
)
from peers import install, workers
from redlock._process import proc as _proc
from redlock.servers import LocalMasters

from .conftest import _in_ci

OURS = install.OWN


def started(client: str, addresses: list[str]) -> workers.Worker:
    """A worker of ``client``, or a skip saying why it cannot be installed (a failure under CI)."""
    try:
        return workers.start(client, addresses)
    except install.InstallFailed as exc:
        reason = f"peer {client} cannot be installed here: {exc}"
        if _in_ci():
            pytest.fail(f"{reason} (and CI is set)")
        pytest.skip(reason)


def assert_tried(document: dict[str, Any], label: str) -> dict[str, Any]:
    """The trial of ``label`` in a trial document; fails saying why it was not run."""
    unavailable = document["unavailable"]
    if label in unavailable:
        reason = f"{label} cannot be started here: {unavailable[label]}"
        if _in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    (found,) = [t for t in document["trials"] if t["label"] == label]
    return dict(found)


# --- what a trial plays (pure) --------------------------------------------------------------


def test_every_scenario_of_the_catalogue_is_played_or_excluded_with_a_reason() -> None:
    numbers = {s.number for s in CATALOGUE}
    assert set(SCENARIOS) | set(EXCLUDED) == numbers
    assert not set(SCENARIOS) & set(EXCLUDED)
    assert all(EXCLUDED.values())
    assert all(SCENARIOS.values())
    assert set(KEYED) <= set(SCENARIOS)


def test_no_family_fences_and_each_has_its_expectation() -> None:
    # A peer has no fencing tokens: a family that asked for them could not start a client.
    assert all(not family.fencing for family in FAMILIES.values())
    assert FAMILIES["masters"].safe
    assert FAMILIES["network"].safe
    assert not FAMILIES["restart"].safe
    assert not FAMILIES["clock"].safe
    assert not FAMILIES["pause"].safe


def test_clients_of_a_mixed_run_alternate_and_replacements_keep_their_slot() -> None:
    peers = Peers((OURS, "node-redlock"))
    assert [peers.client_for(name, i) for i, name in enumerate(["c1", "c2", "c3"])] == [
        OURS,
        "node-redlock",
        OURS,
    ]
    assert peers.client_for("c2.3", 7) == "node-redlock"
    assert peers.client_for("observer", 1) == "node-redlock"
    with pytest.raises(ValueError, match="clients"):
        Peers(("no-such-client",))
    with pytest.raises(ValueError, match="clients"):
        Peers(())


def test_a_client_that_tells_no_validity_is_credited_with_what_the_checker_allows() -> None:
    from chaos.checkers import validity_bound  # noqa: PLC0415

    assert caller_deadline(10.0, 2.0) == pytest.approx(validity_bound(10.0, 2.0))


def test_rates_have_wilson_intervals_per_thousand() -> None:
    assert rate(0, 0) == {"per_1000": None, "low": None, "high": None}
    none = rate(0, 500)
    assert none["per_1000"] == 0.0
    assert none["low"] == 0.0
    assert none["high"] is not None
    assert 0 < none["high"] < 10
    some = rate(5, 1000)
    assert some["low"] is not None
    assert some["high"] is not None
    assert some["low"] < 5.0 < some["high"]


def test_recovery_counts_from_a_masters_return_to_the_next_grant() -> None:
    history = History(
        [
            FaultBegin(time=1.0, fault="f1", kind="kill", target="A"),
            AcquireReturned(time=1.5, client="c1", name="L", op=1, ok=True, deadline=2.0),
            FaultEnd(time=2.0, fault="f1"),
            AcquireReturned(time=2.2, client="c1", name="L", op=2, ok=False),
            AcquireReturned(time=2.7, client="c2", name="L", op=1, ok=True, deadline=3.0),
            FaultBegin(time=3.0, fault="f2", kind="blackhole", target="c1-A"),
            FaultEnd(time=3.1, fault="f2"),
            FaultBegin(time=4.0, fault="f3", kind="power-loss", target="B"),
            FaultEnd(time=5.0, fault="f3"),
        ]
    )
    # The kill's return is followed by a grant 0.7 s later; the blackhole is no return; the
    # power loss has no grant after it.
    assert recovery_times(history) == [pytest.approx(0.7)]


def _outcome(label: str, violations: int, acquired: int, matches: bool = True) -> Outcome:
    row = {"violations": ["x"] * violations, "acquired": acquired, "matches": matches}
    return Outcome(label, (label,), [row], [], {})


def test_a_broken_client_is_worse_by_its_violations_per_acquisition_then_its_verdicts() -> None:
    assert worse(_outcome("broken", 3, 100), _outcome("real", 0, 100))
    assert not worse(_outcome("broken", 0, 100), _outcome("real", 0, 100))
    assert worse(_outcome("broken", 0, 100, matches=False), _outcome("real", 0, 100))
    # Per acquisition: more violations in many more acquisitions are not worse.
    assert not worse(_outcome("broken", 2, 1000), _outcome("real", 1, 100))


def test_an_errors_headline_is_its_exception_not_the_stderr_it_carries() -> None:
    """The trial's run of node-redlock through scenario 6 hung; the exception's message ends
    with the worker's stderr, a Node stack, whose last line the table showed instead."""
    hung = (
        "Traceback (most recent call last):\n"
        '  File "chaos/runner.py", line 453, in run_scenario\n'
        "    scenario.script(run)\n"
        "chaos.peer_client._Hung: c2: node-redlock: no answer within 11.5 s; its stderr: che/ioredis/Redis.js:417:29)\n"
        "[ioredis] Unhandled error event: Error: write EPIPE\n"
        "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)\n"
    )
    assert error_headline(hung).startswith("chaos.peer_client._Hung: c2: node-redlock: no answer within 11.5 s")
    chained = "Traceback (most recent call last):\n  x\nKeyError: 'a'\n\nDuring handling...\n" + hung
    assert error_headline(chained).startswith("chaos.peer_client._Hung: c2")
    assert error_headline("a worker died\nexit status 1\n") == "exit status 1"


def test_the_command_refuses_what_a_trial_cannot_play(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trial"]) == 2
    assert main(["trial", "no-such-client"]) == 2
    capsys.readouterr()
    assert main(["trial", OURS, "--scenarios", "13b", "--out", "unused-trial-out"]) == 2
    assert "13b is not played in a trial: fencing tokens" in capsys.readouterr().err
    assert main(["trial", OURS, "--scenarios", "none", "--explore", "nothing", "--out", "unused-trial-out"]) == 2
    capsys.readouterr()
    assert main(["trial", OURS, "--scenarios", "1", "--request-timeout", "0", "--out", "unused-trial-out"]) == 2
    assert "request_timeout must be > 0 seconds, not 0.0" in capsys.readouterr().err
    assert not pathlib.Path("unused-trial-out").exists()


def test_settings_say_what_is_given_and_what_is_left_to_each_client() -> None:
    left = settings(10.0)
    assert "request timeout" not in left["same for every client"]
    assert left["each client's defaults"].startswith("per-master timeout, pause between attempts, drift factor")
    given = settings(10.0, request_timeout=0.1, retry_delay=0.2)
    assert "; request timeout 0.1 s, where the client has a setting for it" in given["same for every client"]
    assert "; retry delay 0.2 s, where the client has a setting for it" in given["same for every client"]
    assert given["each client's defaults"].startswith("drift factor")
    ran = {
        "request_timeout": "commandTimeout 100 ms on each master's ioredis client",
        "retry_delay": "retryInterval 200 ms, fixed",
    }
    document = {
        "trials": [],
        "families": {},
        "scenarios": {},
        "settings": given,
        "clients": {"redis-semaphore": {"settings": ran}, "gone": {"error": "not installed"}},
        "unavailable": {},
        "selftest": [],
    }
    text = to_markdown(document)
    assert (
        "| redis-semaphore | commandTimeout 100 ms on each master's ioredis client | retryInterval 200 ms, fixed |"
        in text
    )
    assert "| gone |" not in text
    assert Peers((OURS,), request_timeout=0.1).to_dict()["request_timeout"] == 0.1
    with pytest.raises(TypeError, match="retry_delay must be a number of seconds, not str"):
        workers.Settings(retry_delay="0.2")  # type: ignore[arg-type]
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="request_timeout must be > 0 seconds"):
            workers.Settings(request_timeout=bad)


# --- the protocol's generic operations --------------------------------------------------------


@pytest.fixture(scope="module")
def one_master() -> Iterator[list[str]]:
    with LocalMasters(1, owner_only=False) as master:
        yield [f"{master[0].host}:{master[0].port}"]


@pytest.mark.servers
@pytest.mark.parametrize("client", [OURS, "node-redlock"])
def test_read_write_stop_and_deadline_are_the_workers_own(client: str, one_master: list[str]) -> None:
    """Each language's generic layer: the deadline a granted acquire tells, the counter's
    read and write (refused past the holder's deadline), and a stop that stops the worker
    process itself until it is continued."""
    counter = f"trial-test:{client}:{time.monotonic_ns()}"
    with started(client, one_master) as worker:
        granted = worker.call({"op": "acquire", "name": f"{counter}:lock", "ttl_ms": 5000, "blocking": False})
        assert granted["ok"], granted
        assert granted["t1"] <= granted["deadline_ns"] <= granted["t0"] + 5_000_000_000
        address = one_master[0]
        assert worker.call({"op": "read", "resource": address, "counter": counter})["value"] == 0
        late = worker.call(
            {"op": "write", "resource": address, "counter": counter, "value": 1, "until_ns": granted["t0"]}
        )
        assert late["ok"] is True, late
        assert late["written"] is False, late
        worker.send(
            {
                "op": "write",
                "resource": address,
                "counter": counter,
                "value": 7,
                "until_ns": granted["deadline_ns"],
                "stop": "before",
            }
        )
        assert _proc.wait_for_stop(worker.process.pid, stopped=True, timeout=10.0)
        assert not worker.ready(0.2), "a stopped worker answered"
        os.kill(worker.process.pid, signal.SIGCONT)
        wrote = worker.receive()
        assert wrote["written"]
        assert wrote["seq"] >= 1
        assert wrote["t0"] <= wrote["stopped_ns"] < wrote["continued_ns"] <= wrote["t1"]
        assert worker.call({"op": "read", "resource": address, "counter": counter})["value"] == 7
        assert worker.call({"op": "write", "resource": address, "counter": counter, "stop": "later"})["ok"] is False
        assert worker.call({"op": "release", "name": f"{counter}:lock"})["ok"]


@pytest.mark.servers
def test_greetings_say_the_key_prefix_and_what_a_broken_adapter_wraps() -> None:
    found = greet([OURS, "pottery"])
    assert found[OURS]["key_prefix"] == ""
    assert found[OURS]["wraps"] == ""
    if "error" in found["pottery"]:
        pytest.skip(f"peer pottery cannot be installed here: {found['pottery']['error']}")
    assert found["pottery"]["key_prefix"] == "redlock:"


# --- trials -----------------------------------------------------------------------------------


@pytest.mark.servers
def test_a_trial_of_this_librarys_worker_matches_the_catalogue(tmp_path: pathlib.Path) -> None:
    """The smoke: the baseline and K1 through ``python -m chaos trial``; K1's holder is the
    worker process, stopped between its validity check and its write."""
    out = tmp_path / "trial"
    assert main(["trial", OURS, "--scenarios", "1,13a", "--seed", "3", "--out", str(out), "-q"]) == 0
    document = json.loads((out / "trial.json").read_text())
    trial = assert_tried(document, OURS)
    rows = {row["number"]: row for row in trial["scenarios"]}
    assert rows["1"]["observed"] == "SAFE", rows["1"]
    assert rows["1"]["acquired"] > 0, rows["1"]
    assert rows["13a"]["observed"] == "UNSAFE", rows["13a"]
    assert "lost-update" in rows["13a"]["kinds"], rows["13a"]
    assert all(row["matches"] and row["error"] is None for row in rows.values())
    history = History.from_dicts(json.loads(pathlib.Path(rows["13a"]["history"]).read_text())["events"])
    (pause,) = [w for w in history.fault_windows() if w.kind == "client-pause"]
    stale = [w for w in history.of_type(ResourceWrite) if w.client == "c1"]
    assert pause.target == "c1"
    assert stale
    assert stale[0].time >= pause.end
    assert "| redlock-quorum |" in (out / "trial.md").read_text()


@pytest.mark.servers
@pytest.mark.slow
def test_every_installed_client_goes_through_scenarios_and_an_explore_family(tmp_path: pathlib.Path) -> None:
    document = run_trial(
        [(client,) for client in install.CLIENTS],
        tmp_path,
        scenarios=["1", "5", "13a"],
        families=["restart"],
        duration=6.0,
        seed=5,
    )
    for client in install.CLIENTS:
        if client in document["unavailable"]:
            continue
        trial = assert_tried(document, client)
        rows = {row["number"]: row for row in trial["scenarios"]}
        assert rows["1"]["acquired"] > 0, (client, rows["1"])
        # K1 is unsafe for every client without fencing: the stopped holder writes late.
        assert rows["13a"]["observed"] == "UNSAFE", (client, rows["13a"])
        (explored,) = trial["explore"]
        assert explored["family"] == "restart", (client, explored)
        assert explored["acquisitions"] > 0, (client, explored)
    ours = assert_tried(document, OURS)
    assert all(row["matches"] and row["error"] is None for row in ours["scenarios"])


@pytest.mark.servers
@pytest.mark.slow
def test_given_a_request_timeout_a_client_that_hangs_on_a_partitioned_master_plays_to_the_end(
    tmp_path: pathlib.Path,
) -> None:
    """node-redlock 4 waits for every master's answer and bounds no request: in K3 (scenario
    5), where a client reaches three masters of five, its acquire never answers with its
    defaults. Given a request timeout (ioredis's commandTimeout), it plays the scenario to the
    end, and its verdict is the scenario's."""
    client = "node-redlock-4"
    document = run_trial(
        [(client,)], tmp_path, scenarios=["5"], families=[], duration=1.0, seed=11, request_timeout=0.1
    )
    trial = assert_tried(document, client)
    (row,) = trial["scenarios"]
    assert row["error"] is None, row
    assert row["matches"], row
    assert document["clients"][client]["settings"]["request_timeout"].startswith("commandTimeout 100 ms"), document
    assert document["given"] == {"request_timeout": 0.1, "retry_delay": None}


@pytest.mark.servers
@pytest.mark.slow
def test_a_mixed_trial_checks_both_clients_as_one_history(tmp_path: pathlib.Path) -> None:
    pair = (OURS, "node-redlock")
    document = run_trial([pair], tmp_path, scenarios=["1", "13a"], families=[], duration=1.0, seed=7)
    trial = assert_tried(document, "+".join(pair))
    rows = {row["number"]: row for row in trial["scenarios"]}
    history = History.from_dicts(json.loads(pathlib.Path(rows["1"]["history"]).read_text())["events"])
    granted = {event.client for event in history.of_type(AcquireReturned) if event.ok}
    assert {"c1", "c2", "c3"} <= granted  # c1 and c3 this library, c2 node-redlock
    assert rows["1"]["observed"] == "SAFE", rows["1"]
    # K1 across clients: this library's stopped holder and node-redlock's next one.
    assert rows["13a"]["observed"] == "UNSAFE", rows["13a"]


@pytest.mark.servers
@pytest.mark.slow
def test_selftest_a_broken_adapter_comes_out_worse_than_the_client_it_wraps(tmp_path: pathlib.Path) -> None:
    greetings = greet(install.CLIENTS)
    broken = {c: str(g["wraps"]) for c, g in greetings.items() if g.get("wraps")}
    if not broken:
        pytest.skip(
            "no deliberately broken adapter among the peers yet (its greeting names the client it wraps, "
            "docs/peers.md); the adapters branch adds one"
        )
    trials = [(client,) for pair in broken.items() for client in pair]
    document = run_trial(
        trials, tmp_path, scenarios=["1", "5", "9", "13a", "16"], families=["restart"], duration=10.0, seed=9
    )
    found = {entry["broken"]: entry for entry in document["selftest"]}
    for client, wrapped in broken.items():
        assert_tried(document, client)
        assert_tried(document, wrapped)
        assert found[client]["worse"], f"{client} (wrapping {wrapped}) did not come out worse: {document['trials']}"
