"""Scenarios 23 and 27: leader election: campaigners under paused, killed and fast masters,
and ``Election.run()``'s runners under a cut-off, paused or killed leader.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import redlock

from ..checkers import Verdict
from ..clients import ClientProcess, Pending
from ..history import History
from ..runner import Run, Scenario
from ._steps import _acquires, _leaderships

#: The name the campaigners of the election scenario stand for.
ELECTION = "chaos-election"


def _elect(run: Run, clients: Sequence[ClientProcess], until: float, ttl: float) -> list[Pending]:
    args: dict[str, Any] = {"name": ELECTION, "until": until, "ttl": ttl, "lead": (0.3, 0.8), "think": (0.0, 0.1)}
    return [c.submit("elect", reply_timeout=until - time.monotonic() + 60, **args) for c in clients]


def _current_leader(run: Run, watcher: redlock.Election, among: Sequence[str], timeout: float = 10.0) -> str | None:
    """The campaigner that leads now (asked as any observer would: ``leader()``)."""
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        leader = watcher.leader()
        if leader in among:
            return str(leader)
        run.sleep(0.02)
    return None


def election(run: Run) -> None:
    n = run.params.nodes
    ttl = run.params.loop_ttl
    duration = max(run.params.loop_duration, 8 * ttl)
    others = [i for i in range(n) if i not in run.overlap]
    paused_master, killed_master = run.rng.sample(others, 2)
    # Within the drift allowance (1 %) for the whole run, on the master(s) both halves share.
    for index in run.overlap:
        run.nemesis.clock_rate(index, 1.005)
    run.sleep(0.3)  # libfaketime takes up the rate at the master's next clock read
    names = ["c1", "c2", "c3"]
    clients = run.clients(names, wake_on_release=True)
    started = time.monotonic()
    until = started + duration
    pending = dict(zip(names, _elect(run, clients, until, ttl), strict=True))
    run.note(f"three campaigners stand for {ELECTION!r} for {duration:g}s (ttl {ttl:g}s)")
    # The harness only watches, as any observer would, straight to the masters.
    observer = redlock.Redlock(run.cluster.masters.urls, node_timeout=0.1)
    watcher = observer.election(ELECTION, ttl, identity="harness")
    events: dict[str, float] = {}
    try:
        run.sleep_until(started + 0.1 * duration)
        fault = run.nemesis.pause_master(paused_master)
        run.sleep(0.1 * duration)
        run.nemesis.end(fault)

        run.sleep_until(started + 0.25 * duration)
        fault = run.nemesis.kill(killed_master)
        run.sleep(ttl + 0.3)  # a delayed restart: every key it held has expired by then
        run.nemesis.end(fault)

        run.sleep_until(started + 0.45 * duration)
        paused = _current_leader(run, watcher, names)
        if run.expect(paused is not None, "a leader is elected with a master paused and another killed"):
            assert paused is not None
            fault = run.nemesis.pause_client(paused, "SIGSTOP the leader past its validity")
            events["pause"] = time.monotonic()
            run.sleep(1.5 * ttl)
            run.nemesis.end(fault)

        run.sleep_until(started + 0.65 * duration)
        killed = _current_leader(run, watcher, names)
        if run.expect(killed is not None, "a leader is elected after the leader's pause"):
            assert killed is not None
            run.nemesis.kill_client(killed)
            events["kill"] = time.monotonic()
            del pending[killed]
            (c4,) = run.clients(["c4"], wake_on_release=True)
            pending["c4"] = _elect(run, [c4], until, ttl)[0]
    finally:
        observer.close()
    results = {name: waiting.result() for name, waiting in pending.items()}
    # Only the campaigners that finished can say how many they lost (not the killed one).
    run.metric("leaderships_lost", {name: result["lost"] for name, result in results.items()})

    def leaders_throughout(history: History, verdict: Verdict) -> None:
        won = [r for _, r in _acquires(history) if r is not None and r.ok]
        terms = [r.fencing for r in sorted(won, key=lambda r: r.time)]
        run.metric("leaderships", _leaderships(won))
        run.metric("terms", terms)
        run.expect(all(t is not None for t in terms), "every leadership has a term")
        for fault, when in events.items():
            after = [r for r in won if r.time > when]
            run.expect(len(after) > 0, f"a campaigner leads again after the leader's {fault}", f"{len(after)} terms")

    run.after(leaders_throughout)


#: The name the runners of scenario 27 stand for.
ELECTION_RUN = "chaos-election-run"


def _run_elections(clients: Sequence[ClientProcess], until: float, ttl: float) -> list[Pending]:
    args: dict[str, Any] = {"name": ELECTION_RUN, "until": until, "ttl": ttl}
    return [c.submit("run_election", reply_timeout=until - time.monotonic() + 60, **args) for c in clients]


def election_runner(run: Run) -> None:
    """Three clients in ``Election.run()``; the leader is cut off from a majority, then a
    leader is SIGSTOPped past its validity, then a leader is killed (and replaced)."""
    n = run.params.nodes
    ttl = run.params.loop_ttl
    duration = max(run.params.loop_duration, 10 * ttl)
    names = ["c1", "c2", "c3"]
    clients = run.clients(names, wake_on_release=True)
    started = time.monotonic()
    until = started + duration
    pending = dict(zip(names, _run_elections(clients, until, ttl), strict=True))
    run.note(f"three runners stand for {ELECTION_RUN!r} for {duration:g}s (ttl {ttl:g}s)")
    observer = redlock.Redlock(run.cluster.masters.urls, node_timeout=0.1)
    watcher = observer.election(ELECTION_RUN, ttl, identity="harness")
    events: dict[str, float] = {}
    try:
        run.sleep_until(started + 0.15 * duration)
        cut = _current_leader(run, watcher, names)
        if run.expect(cut is not None, "a leader is elected"):
            assert cut is not None
            fault = run.nemesis.partition(cut, list(range(n // 2)))
            events["cut off"] = time.monotonic()
            run.sleep(1.5 * ttl)
            run.nemesis.end(fault)

        run.sleep_until(started + 0.45 * duration)
        paused = _current_leader(run, watcher, names)
        if run.expect(paused is not None, "a leader is elected after the leader was cut off"):
            assert paused is not None
            fault = run.nemesis.pause_client(paused, "SIGSTOP the leader past its validity")
            events["pause"] = time.monotonic()
            run.sleep(1.5 * ttl)
            run.nemesis.end(fault)

        run.sleep_until(started + 0.7 * duration)
        killed = _current_leader(run, watcher, names)
        if run.expect(killed is not None, "a leader is elected after the leader's pause"):
            assert killed is not None
            run.nemesis.kill_client(killed)
            events["kill"] = time.monotonic()
            del pending[killed]
            (c4,) = run.clients(["c4"], wake_on_release=True)
            pending["c4"] = _run_elections([c4], until, ttl)[0]
    finally:
        observer.close()
    results = {name: waiting.result() for name, waiting in pending.items()}
    for name, result in results.items():
        run.expect(
            result["ended"] == result["won"],
            f"{name}: on_lost was told the end of every leadership",
            f"{result['won']} won, {result['ended']} ended",
        )

    def one_leader_at_a_time(history: History, verdict: Verdict) -> None:
        won = sorted((r for _, r in _acquires(history) if r is not None and r.ok), key=lambda r: r.time)
        terms = [r.fencing for r in won]
        run.metric("leaderships", _leaderships(won))
        run.metric("terms", terms)
        run.expect(
            all(t is not None for t in terms) and all(a < b for a, b in itertools.pairwise(terms)),  # type: ignore[operator]
            "terms strictly increase in the order leaders were elected",
        )
        for fault, when in events.items():
            after = [r for r in won if r.time > when]
            run.expect(len(after) > 0, f"a runner leads again after the leader's {fault}", f"{len(after)} terms")
        # How late on_lost came after the validity ended (a paused runner could not act
        # before it was continued). A few ms of scheduling latency is the runner's due; a
        # whole ttl is a runner that believed it led after its validity (the leader's steps
        # here stop at the deadline themselves, so no overlap would ever show it).
        late = [
            t.released - t.deadline
            for t in history.tenures()
            if t.name == ELECTION_RUN and t.released is not None and t.deadline is not None
            and t.released > t.deadline and t.client not in paused_clients
        ]  # fmt: skip
        run.metric("on_lost_after_deadline_ms", round(1000 * max(late, default=0.0)))
        run.expect(
            max(late, default=0.0) < ttl,
            "on_lost comes within a ttl of the validity's end (runners not paused)",
            f"{1000 * max(late, default=0.0):.0f} ms late",
        )

    paused_clients = {paused} if paused is not None else set()
    run.after(one_leader_at_a_time)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("23", "election", "3 campaigners; a master paused, one killed, C x1.005, leader paused, leader killed",
             "SAFE", election, clocked=True,
             why="at most one leader at any moment (by validity), and terms strictly increase"),
    Scenario("27", "election-runner", "3 runners in Election.run(); leader cut off, leader paused, leader killed",
             "SAFE", election_runner, proxies=True,
             why="a runner is told on_lost by its validity's end at the latest and campaigns again after a "
                 "backoff: one leader at a time, terms increasing, and a new leader after each fault"),
)  # fmt: skip
