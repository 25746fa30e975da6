"""Scenarios 21, 22 and 30: the other primitives under faults: a semaphore (and its
counting self-test), a lock on several names, the read-write lock.
"""

from __future__ import annotations

import time
from typing import Any

from ..checkers import Verdict, most_holders, overlapping_pairs
from ..history import History
from ..runner import Run, Scenario
from ._steps import _acquires, _error, _finish, _kill_then_pause, _long_ttl, _loop

#: The semaphore of scenarios 21a/21b and its number of permits; the names of scenario 22.
SEMAPHORE, PERMITS = "chaos-pool", 3
MULTI_NAMES = ("M1", "M2", "M3")


def _spread(nodes: int, holders: int, votes: int) -> list[list[int]]:
    """Masters for each of ``holders`` clients, ``votes`` each, taken round-robin: no master
    serves more than ceil(holders * votes / nodes) of them. With a plain majority of 5 and 4
    holders: ABC, DEA, BCD, EAB, at most 3 per master, so all 4 fit a limit of 3."""
    return [[(h * votes + j) % nodes for j in range(votes)] for h in range(holders)]


def _semaphore(run: Run, *, majority: bool) -> None:
    """Phase 1: limit + 1 clients, each cut off from all but a plain majority of masters,
    spread so that no master sees more than ``limit`` of them, try to take a permit and
    hold it. Phase 2: 8 clients contend for the permits while a master is killed (and
    restarted after the TTL), another is paused, and clients are stopped past their
    validity. ``majority`` forces every client to count a plain majority as enough."""
    n, ttl = run.params.nodes, run.params.loop_ttl
    quorum = run.quorum if majority else 0
    names = [f"c{i}" for i in range(1, 9)]
    clients = run.clients(names, wake_on_release=True, unavailable_timeout=0.5)
    spread = _spread(n, PERMITS + 1, run.quorum)
    cuts = [run.nemesis.partition(client.name, reach) for client, reach in zip(clients, spread, strict=False)]
    hold = 3 * ttl
    got = [
        c.call("acquire", name=SEMAPHORE, ttl=hold, blocking=False, limit=PERMITS, quorum=quorum)
        for c in clients[: len(spread)]
    ]
    holders = [c for c, g in zip(clients, got, strict=False) if g["ok"]]
    run.metric("phase1_holders", len(holders))
    run.note(f"phase 1: {len(holders)} of {len(spread)} clients hold a permit, each with {run.quorum} votes")
    if majority:
        run.expect(len(holders) > PERMITS, f"with a plain majority, more than {PERMITS} clients get a permit")
    else:
        run.expect(not holders, f"with the semaphore's quorum, none gets a permit from {run.quorum} masters")
    run.sleep(0.2)
    for client in holders:
        client.call("release", name=SEMAPHORE)
    for cut in cuts:
        run.nemesis.end(cut)

    duration = run.params.loop_duration
    started = time.monotonic()
    until = started + duration
    args: dict[str, Any] = {"names": [SEMAPHORE], "until": until, "ttl": ttl, "limit": PERMITS, "quorum": quorum}
    pending = [c.submit("loop", reply_timeout=duration + 60, acquire_timeout=0.5, **args) for c in clients]
    run.note(f"phase 2: 8 clients contend for {PERMITS} permits of {SEMAPHORE!r} for {duration:g}s")
    victim, hung = run.rng.sample(range(n), 2)
    run.sleep_until(started + duration * 0.1)
    killed = run.nemesis.kill(victim)
    run.sleep(ttl + 0.5)  # restarted empty only once every permit it held has expired
    run.nemesis.end(killed)
    stops = 0
    while time.monotonic() < until - (ttl + 1.0):
        stopped = run.nemesis.pause_client(run.rng.choice(names), "SIGSTOP past the validity")
        if stops == 0:
            paused = run.nemesis.pause_master(hung)
        run.sleep(ttl + run.rng.uniform(0.2, 0.5))
        if stops == 0:
            run.nemesis.end(paused)
        run.nemesis.end(stopped)
        stops += 1
    run.metric("client_pauses", stops)
    _finish(pending)

    def count(history: History, verdict: Verdict) -> None:
        most = most_holders(history.tenures()).get(SEMAPHORE, 0)
        run.metric("most_holders_at_once", most)
        ok = [r for i, r in _acquires(history) if i.time > started and r is not None and r.ok]
        run.expect(len(ok) > 0, "permits are granted in phase 2", f"{len(ok)} granted, at most {most} at once")

    run.after(count)


def semaphore(run: Run) -> None:
    _semaphore(run, majority=False)


def semaphore_majority(run: Run) -> None:
    _semaphore(run, majority=True)


def multi_lock(run: Run) -> None:
    clients = run.clients([f"c{i}" for i in range(1, 9)], wake_on_release=True)
    until, pending = _loop(run, clients, names=list(MULTI_NAMES), together=2)
    _kill_then_pause(run, until)
    _finish(pending)

    def live(history: History, verdict: Verdict) -> None:
        ok = [r for _, r in _acquires(history) if r is not None and r.ok]
        run.expect(len(ok) > 0, "multi-name locks are acquired", f"{len(ok)} name holdings")

    run.after(live)


#: The name of scenario 30's read-write lock.
RWLOCK = "chaos-rw"


def rwlock(run: Run) -> None:
    """8 clients take the read-write lock on one name, a reader 3 times in 4, under the kill
    (restarted empty once its keys expired), the master pause and the client pauses past
    their validity of scenario 21a. Readers may share; a writer overlapping anyone is a
    mutual-exclusion violation, and its read-modify-write a lost update."""
    names = [f"c{i}" for i in range(1, 9)]
    clients = run.clients(names, wake_on_release=True, unavailable_timeout=0.5)
    ttl, duration = run.params.loop_ttl, run.params.loop_duration
    started = time.monotonic()
    until = started + duration
    args: dict[str, Any] = {"names": [RWLOCK], "until": until, "ttl": ttl, "rwlock": True, "read_share": 0.75}
    pending = [c.submit("loop", reply_timeout=duration + 60, acquire_timeout=0.5, **args) for c in clients]
    run.note(f"8 clients read and write {RWLOCK!r} for {duration:g}s")
    victim, hung = run.rng.sample(range(run.params.nodes), 2)
    run.sleep_until(started + duration * 0.1)
    killed = run.nemesis.kill(victim)
    run.sleep(ttl + 0.5)  # restarted empty only once every reader and writer it held expired
    run.nemesis.end(killed)
    paused = run.nemesis.pause_master(hung)
    stopped = run.nemesis.pause_client(run.rng.choice(names), "SIGSTOP past the validity")
    run.sleep(ttl + run.rng.uniform(0.2, 0.5))
    run.nemesis.end(paused)
    run.nemesis.end(stopped)
    _finish(pending)

    def both_sides(history: History, verdict: Verdict) -> None:
        modes = [r.mode for _, r in _acquires(history) if r is not None and r.ok]
        reads, writes = modes.count("read"), modes.count("write")
        run.metric("reads", reads)
        run.metric("writes", writes)
        shared = sum(1 for a, b in overlapping_pairs(history.tenures()) if a.mode == b.mode == "read")
        run.metric("reader_overlaps", shared)
        run.expect(reads > 0 and writes > 0, "readers and writers both get in", f"{reads} reads, {writes} writes")

    run.after(both_sides)


def rwlock_restart_empty(run: Run) -> None:
    """K4 for the read-write lock: c1 reads through A, B, C; C restarts empty at once; c2,
    cut off from A and B, asks to write through C, D, E."""
    ttl = _long_ttl(run)
    c1, c2 = run.clients(["c1", "c2"])
    run.partition_k3()
    got = c1.call("acquire", name=RWLOCK, ttl=ttl, timeout=ttl, mode="read")
    if not run.expect(got["ok"], f"c1 reads through {run.cluster.labels(run.left)}", _error(got)):
        return
    for i in run.overlap:
        run.nemesis.crash_restart(i, wipe=True)
    wrote = c2.call("acquire", name=RWLOCK, ttl=ttl, timeout=1.5, mode="write")
    run.expect(wrote["ok"], f"c2 writes through {run.cluster.labels(run.right)} beside c1", _error(wrote))
    run.sleep(0.2)
    for client, held in ((c2, wrote), (c1, got)):
        if held["ok"]:
            client.call("release", name=RWLOCK)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("21a", "semaphore", "8 clients on a semaphore of 3 permits, kills and pauses", "SAFE", semaphore,
             loop=True, proxies=True, leftovers=True,
             why="a permit needs floor(3N/4)+1 votes: 4 holders would need more than the 3N permits the "
                 "masters have, so at most 3 hold at any moment (and clients with only a majority get none)"),
    Scenario("21b", "semaphore-plain-majority", "as 21a, every client counting a plain majority", "UNSAFE",
             semaphore_majority, kinds=("semaphore-limit",), loop=True, proxies=True,
             why="self-test: 4 holders with 3 votes each fit in 5 masters of 3 permits; the checker sees 4"),
    Scenario("22", "multi-lock", "8 clients lock overlapping pairs of 3 names, kills and pauses", "SAFE",
             multi_lock, loop=True, leftovers=True,
             why="each master sets all names or none: no name has two holders, nobody deadlocks"),
    Scenario("30a", "rwlock", "8 clients read (3 in 4) and write one read-write lock; kill, pauses", "SAFE",
             rwlock, loop=True, proxies=True, leftovers=True,
             why="a master grants a reader only without a writer and a writer only without readers: a read "
                 "majority and a write majority share a master, which refused one of them"),
    Scenario("30b", "rwlock-restart-empty", "K4 for a read-write lock: c1 reads; C restarts empty; c2 writes",
             "UNSAFE", rwlock_restart_empty, kinds=("mutual-exclusion",), proxies=True,
             why="C forgets c1's reader and grants c2 the writer's key: as for the lock, only persistence or a "
                 "delayed restart keeps the shared master's vote"),
)  # fmt: skip
