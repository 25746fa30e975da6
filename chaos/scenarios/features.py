"""Scenarios 24, 25 and 31: the lock's own features under faults: one Lock shared by a
process's threads (reentrant or not), an operator's force-release, a handover that lands
after the releaser's keys expired.
"""

from __future__ import annotations

import itertools
import time

from ..checkers import Verdict
from ..history import History
from ..runner import Run, Scenario
from ._steps import LOCK, NAMES, _error, _finish, _kill_then_pause, _long_ttl, _loop, _stale_write_judged, _use

#: How many threads of each client process share its Lock objects in scenarios 24a, 24b.
THREADS = 4


def _shared_lock(run: Run, *, reentrant: bool) -> None:
    """Three client processes, each with ``THREADS`` threads that share one Lock object per
    name (each thread recorded as a client of its own, ``c1/t2``), contend for two names
    while a master is killed and another paused. ``reentrant``: each holder acquires twice
    more inside its critical section and releases those before it writes."""
    clients = run.clients(["c1", "c2", "c3"], wake_on_release=True)
    until, pending = _loop(run, clients, threads=THREADS, reentrant=reentrant)
    _kill_then_pause(run, until)
    results = _finish(pending)
    for client, result in zip(clients, results, strict=True):
        took = [thread for thread, counts in result["threads"].items() if counts["acquired"]]
        run.expect(
            len(took) > 1, f"{client.name}'s threads take turns on its Lock objects", f"{len(took)} of {THREADS} held"
        )
    if reentrant:
        nested, miscounted = (sum(r[key] for r in results) for key in ("nested", "miscounted"))
        run.metric("nested_holders", nested)
        run.expect(
            nested > 0 and not miscounted,
            "every nested acquire and release is counted in the Lock, under the holder's token",
            f"{nested} holders nested twice, {miscounted} miscounted",
        )

    def handovers(history: History, verdict: Verdict) -> None:
        # A Lock object passed from one thread to another of the same process.
        local, tenures = 0, history.tenures()
        for name in NAMES:
            mine = [t for t in tenures if t.name == name]
            for before, after in itertools.pairwise(mine):
                process = before.client.split("/")[0]
                local += after.client != before.client and after.client.startswith(f"{process}/")
        run.metric("local_handovers", local)

    run.after(handovers)


def shared_lock(run: Run) -> None:
    _shared_lock(run, reentrant=False)


def shared_lock_reentrant(run: Run) -> None:
    _shared_lock(run, reentrant=True)


def _force_release(run: Run, *, fencing: bool) -> None:
    """c1 acquires and reads; an operator force-releases the lock; c2 acquires, reads and
    writes; c1, never told, writes last."""
    # c1's validity outlasts the whole script: only the operator takes its lock away.
    ttl = _long_ttl(run)
    c1, c2 = run.clients(["c1", "c2"], fencing=fencing)
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(got["ok"], "c1 acquires", _error(got)):
        return
    c1.call("read", name=LOCK)
    run.note("c1 holds the lock and is at work")
    removed = run.nemesis.force_release(LOCK)
    run.expect(
        removed.holder == got["token"] and removed.votes == run.params.nodes,
        "the force-release removes c1's token from every master",
        f"{removed.votes} of {run.params.nodes} masters held the leading token",
    )
    other = c2.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if run.expect(other["ok"], "c2 acquires at once", _error(other)):
        _use(run, c2)
    wrote = c1.call("write", name=LOCK)
    run.expect(wrote.get("written") is True, "c1 writes: its own validity check still says it holds the lock")
    released = c1.call("release", name=LOCK)
    run.expect(not released["ok"], "c1's release reports its lock lost", _error(released))
    _stale_write_judged(run, wrote, fencing=fencing, tokens=(got, other))


def force_release(run: Run) -> None:
    _force_release(run, fencing=False)


def force_release_fenced(run: Run) -> None:
    _force_release(run, fencing=True)


def handoff_late(run: Run) -> None:
    """c1 holds the lock, and a second Lock of c1 waits in line for it; c1's requests reach
    the masters late. c1 releases shortly before its validity ends, which hands the lock to
    its waiter: a swap of tokens (docs/algorithm.md, "Handing a lock over") that lands only
    after c1's keys expired and c2 took the lock. The swap compares, so it finds c2's token,
    writes nothing, and the waiter is refused; one that did not compare would give c1's
    waiter c2's lock."""
    ttl = run.params.ttl
    delay = 0.4 * ttl
    # c1's waiter waits for the release, never for its own timer; c2 polls, to get in as
    # soon as c1's keys expire.
    (c1,) = run.clients(["c1"], retry_delay=10 * ttl, node_timeout=2 * delay)
    (c2,) = run.clients(["c2"], retry_delay=0.05)
    got = c1.call("acquire", name=LOCK, ttl=ttl, blocking=False)
    if not run.expect(got["ok"], "c1 acquires", _error(got)):
        return
    run.nemesis.slow_links("c1", range(run.params.nodes), to_server=delay)
    release_at = got["deadline"] - 0.05 * ttl
    patience = release_at - time.monotonic() + delay + 0.5 * ttl
    pending = c1.submit("hand_over", name=LOCK, ttl=ttl, release_at=release_at, timeout=patience)
    theirs = c2.call("acquire", name=LOCK, ttl=_long_ttl(run), timeout=2 * ttl)
    if not run.expect(theirs["ok"], "c2 acquires once c1's keys expired", _error(theirs)):
        return
    c2.call("read", name=LOCK)
    outcome = pending.result()
    released, handed = outcome["released"], outcome["handed"]
    run.expect(not released["ok"], "c1's late handover finds c2's token: its release reports the lock lost")
    run.expect(not handed.get("ok"), "c1's waiter is not handed c2's lock", _error(handed))
    run.sleep(0.25 * ttl)  # c2 works on: a waiter handed its lock would hold beside it
    c2.call("write", name=LOCK)
    c2.call("release", name=LOCK)
    if handed.get("ok"):
        c1.call("release", name=LOCK)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("24a", "shared-lock", "3 clients x 4 threads sharing one Lock per name; kill, pause", "SAFE",
             shared_lock, loop=True, leftovers=True,
             why="a thread waits for the Lock object locally, then acquires on the masters under a new token: "
                 "threads of one process are kept apart as processes are"),
    Scenario("24b", "shared-lock-reentrant", "as 24a, reentrant, every holder nesting two more acquires", "SAFE",
             shared_lock_reentrant, loop=True, leftovers=True,
             why="nested acquires and releases are only counted: the masters are released with the last one, "
                 "so nobody enters while the holder still works"),
    Scenario("25a", "force-release", "an operator force-releases a working holder's lock", "UNSAFE",
             force_release, kinds=("lost-update",),
             why="the holder is not told: it writes late, as after an expiry, and c2's increment is lost"),
    Scenario("25b", "force-release-fenced", "as 25a, writes through FencedStore", "SAFE", force_release_fenced,
             why="force_release keeps the fencing counter: c2's token is larger, and the store rejects c1's write"),
    Scenario("31", "handoff-late", "c1 hands its lock to its own waiter by a swap that lands after its keys expired",
             "SAFE", handoff_late, proxies=True, delays=True,
             why="the swap replaces only c1's own token: where c2's holds, it writes nothing, and c1's waiter "
                 "is refused"),
)  # fmt: skip
