"""The catalogue: each scenario of REDLOCK.md and issue 4, with the verdict theory predicts.

Masters are A, B, C, ... (5 by default). Where a scenario needs the partitions of K3/K4,
client c1 reaches A,B,C only and c2 reaches C,D,E only (with N masters: the first and the
last majority, sharing the middle); the fault then hits the shared master(s), "C".

The UNSAFE scenarios are timed so that their violation happens on every run, not by luck:
each step waits for the previous one to have happened (an acquire returned, a key seen
gone on the master, a process seen stopped), never for a guessed delay. The SAFE ones
follow the same script with the one change that theory says makes it safe (a delayed
restart, fsync always, a slower clock, fencing, ...), so that each pair shows exactly
what the remedy buys.

Each entry's ``why`` says what the scenario shows; ``python -m chaos list`` prints them.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import redlock

from ..checkers import Verdict, most_holders, overlapping_pairs
from ..clients import ClientProcess, Pending
from ..clock import client_env
from ..history import AcquireInvoked, AcquireReturned, History
from ..runner import Run, Scenario, fault_window
from ..workload import direct_client

__all__ = ["CATALOGUE", "LOCK", "NAMES", "clock_rate_trial", "find", "restart_after"]

#: The lock name of the scripted scenarios.
LOCK = "chaos-lock"
#: The names the free-running workloads contend for.
NAMES = ("L1", "L2")


def _acquires(history: History) -> list[tuple[AcquireInvoked, AcquireReturned | None]]:
    returned = {(e.client, e.op): e for e in history.of_type(AcquireReturned)}
    return [(e, returned.get((e.client, e.op))) for e in history.of_type(AcquireInvoked)]


def _leaderships(won: Sequence[AcquireReturned]) -> dict[str, int]:
    """Leaderships per client, from the history's grants rather than the campaigners'
    replies: a killed campaigner never replies, and its leaderships count as much as anyone's."""
    return dict(Counter(returned.client for returned in won))


def _loop(
    run: Run, clients: Sequence[ClientProcess], *, duration: float | None = None, **spec: Any
) -> tuple[float, list[Pending]]:
    """Start the free-running workload on every client, for ``duration`` (default
    ``--duration``); returns (until, pending replies)."""
    duration = run.params.loop_duration if duration is None else duration
    until = time.monotonic() + duration
    args = {"names": list(NAMES), "until": until, "ttl": run.params.loop_ttl, **spec}
    pending = [c.submit("loop", reply_timeout=duration + 60, **args) for c in clients]
    run.note(f"workload running for {duration:.1f}s on {', '.join(args['names'])}")
    return until, pending


def _finish(pending: Sequence[Pending]) -> list[Any]:
    return [waiting.result() for waiting in pending]


# --- 1-4: the cluster degrades, the lock stays safe ------------------------------------------


def baseline(run: Run) -> None:
    clients = run.clients(["c1", "c2", "c3"], wake_on_release=True)
    _, pending = _loop(run, clients)
    results = _finish(pending)
    for client, result in zip(clients, results, strict=True):
        acquired = result["acquired"]
        run.expect(acquired > 0, f"{client.name} acquired at least once", f"{acquired} acquisitions")

    def no_errors(history: History, verdict: Verdict) -> None:
        errors = [r for _, r in _acquires(history) if r is not None and r.error]
        run.expect(not errors, "no acquire failed with an error", f"{len(errors)} errors")

    run.after(no_errors)


def kill_minority(run: Run) -> None:
    n = run.params.nodes
    victims = sorted(run.rng.sample(range(n), n // 2))
    clients = run.clients(["c1", "c2", "c3"], wake_on_release=True)
    until, pending = _loop(run, clients)
    run.sleep_until(until - run.params.loop_duration * 0.75)
    faults = [run.nemesis.kill(i) for i in victims]
    _finish(pending)

    def still_live(history: History, verdict: Verdict) -> None:
        windows = [fault_window(history, f) for f in faults]
        since = max(w.start for w in windows if w is not None)
        ok = [r for i, r in _acquires(history) if i.time > since and r is not None and r.ok]
        run.expect(
            len(ok) > 0, f"acquires still succeed with {run.cluster.labels(victims)} down", f"{len(ok)} succeeded"
        )
        run.metric("acquired_while_down", len(ok))

    run.after(still_live)


def kill_majority(run: Run) -> None:
    n = run.params.nodes
    victims = sorted(run.rng.sample(range(n), run.quorum))
    duration = run.params.loop_duration
    # Down for longer than the TTL (the delayed restart), so that no holder can overlap
    # with one that the restarted, empty masters let in; and up again for a while after.
    down = max(duration * 0.45, run.params.loop_ttl + 0.5)
    total = max(duration, duration * 0.25 + down + max(1.0, duration * 0.3))
    clients = run.clients(["c1", "c2", "c3"], unavailable_timeout=0.3)
    started = time.monotonic()
    _, pending = _loop(run, clients, duration=total, acquire_timeout=0.3)
    run.sleep_until(started + duration * 0.25)
    faults = [run.nemesis.kill(i) for i in victims]
    run.sleep(down)
    # A fault's window closes once its master is back; a majority may be up a moment
    # before the first window closes, so "down" ends when the first restart begins.
    restarts_began = time.monotonic()
    for fault in faults:
        run.nemesis.end(fault)
    _finish(pending)

    def unavailable_then_live(history: History, verdict: Verdict) -> None:
        windows = [w for w in (fault_window(history, f) for f in faults) if w is not None]
        down, up = max(w.start for w in windows), min([w.end for w in windows] + [restarts_began])
        during = [(i, r) for i, r in _acquires(history) if i.time > down and r is not None and r.time < up]
        granted = [r for _, r in during if r.ok]
        refused = [r for _, r in during if r.error and r.error.startswith("QuorumUnavailable")]
        run.expect(not granted, "no acquire succeeds while a majority is down", f"{len(granted)} succeeded")
        run.expect(len(refused) > 0, "acquires fail with QuorumUnavailable meanwhile", f"{len(refused)} did")
        after = [r for i, r in _acquires(history) if i.time > up and r is not None and r.ok]
        run.expect(len(after) > 0, "acquires succeed again once the masters are back", f"{len(after)} succeeded")

    run.after(unavailable_then_live)


def pause_masters(run: Run) -> None:
    n = run.params.nodes
    victims = sorted(run.rng.sample(range(n), min(2, n // 2)))
    node_timeout = 0.05
    clients = run.clients(["c1", "c2", "c3"], node_timeout=node_timeout)
    until, pending = _loop(run, clients, blocking=False, think=(0.01, 0.05))
    duration = run.params.loop_duration
    run.sleep_until(until - duration * 0.75)
    faults = [run.nemesis.pause_master(i) for i in victims]
    run.sleep(duration * 0.5)
    for fault in faults:
        run.nemesis.end(fault)
    _finish(pending)
    # One attempt is a SET round and at most a rollback round, each cut at node_timeout;
    # the rest is slack for a busy machine. A hang would last as long as the pause.
    bound = 4 * node_timeout + 0.3

    def bounded(history: History, verdict: Verdict) -> None:
        windows = [w for w in (fault_window(history, f) for f in faults) if w is not None]
        start, end = max(w.start for w in windows), min(w.end for w in windows)
        # Every attempt started during the pause, however late it returned (or never did).
        during = [(i, r) for i, r in _acquires(history) if start < i.time < end]
        latencies = [(math.inf if r is None else r.time) - i.time for i, r in during]
        worst = max(latencies, default=0.0)
        run.metric("latency_max_while_paused", worst if math.isfinite(worst) else "never returned")
        run.expect(
            bool(latencies) and worst <= bound,
            f"every acquire during the pause returns within {bound:.2f}s (node_timeout={node_timeout})",
            f"{len(latencies)} attempts, slowest {worst:.3f}s",
        )
        granted = [r for _, r in during if r is not None and r.ok]
        run.expect(len(granted) > 0, "acquires still succeed with the masters paused", f"{len(granted)} succeeded")

    run.after(bounded)


# --- 5-8: a master loses the lock it granted, or keeps it ------------------------------------------------


class Held(NamedTuple):
    """c1 holds the lock (until ``deadline``, monotonic); c2 waits on the other side."""

    c1: ClientProcess
    c2: ClientProcess
    deadline: float


def _c1_holds(
    run: Run, ttl: float, *, before: Callable[[], object] | None = None, drift: float | None = None
) -> Held | None:
    """Clients c1 and c2 in the K3/K4 partitions; c1 acquires (through A,B,C) and reads.
    ``before`` runs just before the acquire; ``drift``, the clients' clock_drift_factor
    (default the library's). None if c1 could not acquire."""
    c1, c2 = run.clients(["c1", "c2"], clock_drift_factor=drift)
    run.partition_k3()
    if before is not None:
        before()
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(got["ok"], f"c1 acquires through {run.cluster.labels(run.left)}", _error(got)):
        return None
    c1.call("read", name=LOCK)
    run.note(f"c1 holds {LOCK!r} on {run.cluster.labels(run.left)} for {ttl:g}s")
    return Held(c1, c2, float(got["deadline"]))


def _c2_tries(run: Run, held: Held, ttl: float, *, expect_denied: bool = False) -> None:
    """c2 tries to take the lock that c1 believes it holds; if it gets it, both do their
    read-modify-write at once (c1 read before the fault and writes now, if its lock is
    still valid), which loses one increment."""
    c1, c2, _ = held
    got = c2.call("acquire", name=LOCK, ttl=ttl, timeout=1.5)
    if got["ok"]:
        run.note(f"c2 holds {LOCK!r} on {run.cluster.labels(run.right)}")
        c2.call("read", name=LOCK)
        run.sleep(0.1)
        wrote = c1.call("write", name=LOCK)
        run.sleep(0.2)
        c2.call("write", name=LOCK)
        run.sleep(0.1)
        c2.call("release", name=LOCK)
    else:
        run.note("c2 could not acquire")
        wrote = c1.call("write", name=LOCK)
    c1.call("release", name=LOCK)
    run.metric("c1_wrote", bool(wrote.get("written")))
    if not expect_denied:
        run.expect(got["ok"], f"c2 acquires through {run.cluster.labels(run.right)}", _error(got))
        return
    run.expect(not got["ok"], "c2 is refused: C still has c1's key")
    # Free again once c1's key expires on C (c1's release could not reach C through the
    # connection the restart broke): the cost is availability only.
    again = c2.call("acquire", name=LOCK, ttl=ttl, timeout=2 * ttl + 1)
    if run.expect(again["ok"], "c2 acquires once c1's key is gone", _error(again)):
        _use(run, c2)


def _use(run: Run, client: ClientProcess, *, hold: float = 0.2, release: bool = True) -> None:
    """The holder's work: read, hold a while (so that the timeline shows it), write, and
    release."""
    client.call("read", name=LOCK)
    run.sleep(hold)
    client.call("write", name=LOCK)
    if release:
        run.sleep(hold / 2)
        client.call("release", name=LOCK)


def _error(reply: dict[str, Any]) -> str:
    error = reply.get("error")
    return "" if error is None else str(error)


def _long_ttl(run: Run) -> float:
    # Where nothing waits for expiry, a long TTL costs nothing and leaves the overlap
    # plenty of room on a slow machine.
    return 3 * run.params.ttl


# --- 26: masters that answer with an error reply ----------------------------------------


def _error_replies(run: Run, error: str) -> None:
    """c1 holds the lock on every master; then C, D, E answer every write with ``error``
    and c2 tries: A, B say no (c1's key), C, D, E refuse with an error. An error is a
    refusal, so c2 has no vote at all; a client that took one for a grant would count 3."""
    ttl = _long_ttl(run)
    c1, c2 = run.clients(["c1", "c2"])
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(got["ok"], "c1 acquires on every master", _error(got)):
        return
    c1.call("read", name=LOCK)
    erring = sorted({*run.overlap, *run.right})
    if error == "LOADING":
        # Not a setting: the masters restart from their data, slow to load (kept c1's key).
        faults = run.nemesis.loading(erring)
        # One attempt: the masters answer -LOADING only until they have loaded.
        tried = c2.call("acquire", name=LOCK, ttl=ttl, blocking=False)
    else:
        faults = [run.nemesis.error_replies(i, error) for i in erring]
    try:
        if error != "LOADING":
            tried = c2.call("acquire", name=LOCK, ttl=ttl, timeout=0.5)
        if tried["ok"]:
            c2.call("read", name=LOCK)
            c1.call("write", name=LOCK)
            c2.call("write", name=LOCK)
        run.expect(not tried["ok"], f"c2 is refused while {run.cluster.labels(erring)} answer -{error}")
        # The refusal must be the error's doing, not a timeout or a closed connection.
        run.expect(tried["ok"] or error in _error(tried), f"c2's refusal names -{error}", _error(tried))
    finally:
        for fault in faults:
            run.nemesis.end(fault)
    run.metric("c2_acquired", bool(tried["ok"]))
    if not tried["ok"]:
        c1.call("write", name=LOCK)
    c1.call("release", name=LOCK)


def error_oom(run: Run) -> None:
    _error_replies(run, "OOM")


def error_readonly(run: Run) -> None:
    _error_replies(run, "READONLY")


def error_misconf(run: Run) -> None:
    _error_replies(run, "MISCONF")


def error_busy(run: Run) -> None:
    _error_replies(run, "BUSY")


def error_loading(run: Run) -> None:
    _error_replies(run, "LOADING")


def restart_empty(run: Run) -> None:
    ttl = _long_ttl(run)
    held = _c1_holds(run, ttl)
    if held is None:
        return
    for i in run.overlap:
        run.nemesis.crash_restart(i, wipe=True)
    _c2_tries(run, held, ttl)


def eviction(run: Run) -> None:
    """As K4, but C keeps running: over its ``maxmemory`` under ``volatile-lru`` it evicts
    c1's key (every lock key has a ttl, so it is a candidate) and grants the lock again."""
    ttl = _long_ttl(run)
    held = _c1_holds(run, ttl)
    if held is None:
        return
    for i in run.overlap:
        evicted = run.nemesis.evict(i, LOCK)
        run.expect(evicted, f"{run.cluster.label(i)} evicts c1's key under memory pressure")
    _c2_tries(run, held, ttl)


def restart_delayed(run: Run) -> None:
    restart_after(run, run.params.ttl + 0.5)


def restart_after(run: Run, delay: float, *, ttl: float | None = None) -> None:
    """K4 with C killed right after c1's acquire and restarted empty ``delay`` seconds
    later; then c2 tries. ``ttl`` defaults to the mode's (the sweeps move both)."""
    ttl = run.params.ttl if ttl is None else ttl
    held = _c1_holds(run, ttl)
    if held is None:
        return
    kills = [run.nemesis.kill(i) for i in run.overlap]
    run.note(f"waiting {delay:g}s (the TTL is {ttl:g}s) before the restart")
    run.sleep(delay)
    for kill in kills:
        run.nemesis.end(kill)
    _c2_tries(run, held, ttl)


# A key of the harness's own, written to C to take the fsync of the second.
_FSYNC_TICK = "chaos:fsync-tick"


def _just_after_an_fsync(run: Run) -> None:
    """Have c1's SET reach C early in a wall-clock second in which C has already fsynced.

    ``appendfsync everysec`` fsyncs at the first write of each new second (Redis compares
    whole seconds of its wall clock), so a SET that comes later in the same second waits
    for the next one: up to a second in which it is in the page cache only. The harness
    waits for a new second, writes a key of its own to C (which takes that second's
    fsync, if nothing did yet) and waits for C's background fsync to be over, so that C
    writes c1's SET to the file at once instead of postponing it behind that fsync. Under
    ``always`` the same steps change nothing: every write is fsynced before its reply.
    """
    now = time.time()
    run.sleep(math.ceil(now) - now + 0.02)
    for index in run.overlap:
        direct = run.cluster.direct(index)
        direct.set(_FSYNC_TICK, repr(now))
        deadline = time.monotonic() + 5.0
        while int(direct.info("persistence").get("aof_pending_bio_fsync", 0)) and time.monotonic() < deadline:
            run.sleep(0.002)


def _c_fails_and_restarts(run: Run, *, power: bool, refused: bool) -> None:
    """K4 with C keeping its data: C crashes (SIGKILL: the page cache survives) or loses its
    power (only what it fsynced survives) right after c1 acquired, and restarts at once.
    ``refused``: theory's answer, checked as the scenario's own check; the verdict is what
    the checkers find."""
    ttl = run.params.ttl if refused else _long_ttl(run)
    held = _c1_holds(run, ttl, before=lambda: _just_after_an_fsync(run))
    if held is None:
        return
    for index in run.overlap:
        label = run.cluster.label(index)
        if power:
            losses = run.nemesis.power_loss(index)
            run.metric(f"{label}_unsynced_bytes_lost", sum(loss.lost for loss in losses))
        else:
            run.nemesis.crash_restart(index, wipe=False)
        kept = bool(run.cluster.direct(index).exists(LOCK))
        run.metric(f"c1_key_on_{label}_after_restart", kept)
        run.note(f"{label} is back {'with' if kept else 'without'} c1's key")
    _c2_tries(run, held, ttl, expect_denied=refused)


def restart_aof_always(run: Run) -> None:
    _c_fails_and_restarts(run, power=False, refused=True)


def restart_aof_everysec(run: Run) -> None:
    _c_fails_and_restarts(run, power=False, refused=True)


def power_loss_always(run: Run) -> None:
    _c_fails_and_restarts(run, power=True, refused=True)


def power_loss_everysec(run: Run) -> None:
    _c_fails_and_restarts(run, power=True, refused=False)


# --- 9-11: a master's clock ------------------------------------------------------------------


def clock_jump_forward(run: Run) -> None:
    ttl = _long_ttl(run)
    held = _c1_holds(run, ttl)
    if held is None:
        return
    jumps = [run.nemesis.clock_jump(i, 2 * ttl) for i in run.overlap]
    _c2_tries(run, held, ttl)
    for jump in jumps:
        run.nemesis.end(jump)


def clock_jump_backward(run: Run) -> None:
    ttl = run.params.ttl
    held = _c1_holds(run, ttl)
    if held is None:
        return
    c1, c2, _ = held
    jumps = [run.nemesis.clock_jump(i, -10 * ttl) for i in run.overlap]
    c1.call("write", name=LOCK)
    # c1 does not release: its keys expire on A and B, but C's clock now runs 10 TTLs late.
    run.note("c1 keeps the lock past its TTL; C's copy outlives it")
    early = c2.call("acquire", name=LOCK, ttl=ttl, timeout=ttl + 0.5)
    run.expect(not early["ok"], "c2 is refused while C's late clock keeps c1's key (less available, still safe)")
    c1.call("release", name=LOCK)
    got = c2.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if run.expect(got["ok"], "c2 acquires once c1 released its key on C", _error(got)):
        _use(run, c2)
    for jump in jumps:
        run.nemesis.end(jump)


def clock_rate_trial(run: Run, factor: float, *, ttl: float | None = None, drift: float | None = None) -> None:
    """C runs ``factor`` times as fast from before c1's acquire; c2 tries the moment C has
    expired c1's key. ``ttl`` defaults to the mode's; ``drift`` is the clients'
    clock_drift_factor (the sweeps move both)."""
    ttl = run.params.clock_ttl if ttl is None else ttl
    rates: list[str] = []

    def speed_up() -> None:
        rates.extend(run.nemesis.clock_rate(i, factor) for i in run.overlap)
        # libfaketime takes up a new rate at the master's next clock read; let it settle.
        run.sleep(0.3)

    held = _c1_holds(run, ttl, before=speed_up, drift=drift)
    if held is None:
        return
    run.note(f"waiting for c1's key to expire on {run.cluster.labels(run.overlap)}, whose clock runs x{factor:g}")
    gone = [run.wait_key_gone(i, LOCK, timeout=2 * ttl) for i in run.overlap]
    if not run.expect(all(g is not None for g in gone), "c1's key expires on C"):
        return
    seen = max(g for g in gone if g is not None)
    run.metric("c1_validity_left_when_key_gone_on_C", held.deadline - seen)
    _c2_tries(run, held, ttl)
    for rate in rates:
        run.nemesis.end(rate)


def clock_fast(run: Run) -> None:
    clock_rate_trial(run, 1.05)


def clock_within_drift(run: Run) -> None:
    clock_rate_trial(run, 1.005)


# --- 12-13, 16: a client pauses ---------------------------------------------------------------


def pause_during_acquire(run: Run) -> None:
    ttl = run.params.ttl
    c1, c2 = run.clients(["c1", "c2"])
    marker = f"\r\nSET\r\n${len(LOCK)}\r\n{LOCK}\r\n".encode()
    fired = run.nemesis.stop_client_on_send("c1", marker, "SIGSTOP between sending SETs and reading replies")
    pending = c1.submit("acquire", name=LOCK, ttl=ttl, blocking=False)
    if not run.expect(fired.wait(10.0), "c1 is stopped as its SET goes out"):
        return
    c1.wait_stopped()
    run.note("c1 is stopped with its SETs sent; waiting for the keys to expire")
    got = c2.call("acquire", name=LOCK, ttl=ttl, timeout=2 * ttl + 1)
    if run.expect(got["ok"], "c2 acquires once c1's keys expired", _error(got)):
        _use(run, c2, release=False)
    run.nemesis.end(run.nemesis.tap_faults["c1"])
    late = pending.result()
    run.expect(not late["ok"], "c1, continued, reads its OKs but finds no validity left and does not hold")
    if got["ok"]:
        c2.call("release", name=LOCK)


def _holder_pause(run: Run, *, fencing: bool = False, lock_delay: float = 0.0, within_delay: bool = False) -> None:
    ttl = run.params.ttl
    c1, c2 = run.clients(["c1", "c2"], fencing=fencing)
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl, lock_delay=lock_delay)
    if not run.expect(got["ok"], "c1 acquires", _error(got)):
        return
    c1.call("read", name=LOCK)
    # c1 checks that its lock is valid, then stops (GC, swap) before it writes.
    stale = c1.submit("write", name=LOCK, pause="before")
    c1.wait_stopped()
    run.note("c1 is stopped between its validity check and its write")
    if within_delay:
        _resume_within_the_lock_delay(run, (c1, c2), stale, got["deadline"], lock_delay)
        return
    other = c2.call("acquire", name=LOCK, ttl=ttl, timeout=2 * ttl + lock_delay + 1)
    if run.expect(other["ok"], "c2 acquires once c1's lock expired", _error(other)):
        _use(run, c2)
    run.sleep(0.2)  # a gap, so that the timeline shows what c1 does after it
    c1.resume()
    wrote = stale.result()
    c1.call("release", name=LOCK)
    _stale_write_judged(run, wrote, fencing=fencing, tokens=(got, other))


def _stale_write_judged(
    run: Run, wrote: dict[str, Any], *, fencing: bool, tokens: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """c1 wrote after c2 had acquired: a fenced store must reject it, a plain one cannot.
    ``tokens`` are c1's and c2's acquire replies."""
    if fencing:
        run.expect(
            wrote.get("accepted") is False,
            "the fenced store rejects c1's stale write",
            f"c1 token {tokens[0].get('fencing')}, c2 token {tokens[1].get('fencing')}",
        )
    else:
        run.expect(wrote.get("accepted") is True, "c1's stale write lands (nothing stops it)")


def _resume_within_the_lock_delay(
    run: Run, clients: tuple[ClientProcess, ClientProcess], stale: Pending, deadline: float, lock_delay: float
) -> None:
    c1, c2 = clients
    ttl = run.params.ttl
    waiting = c2.submit("acquire", name=LOCK, ttl=ttl, timeout=2 * ttl + lock_delay + 5)
    # Past c1's validity (its write is now stale: without the delay c2 would hold the lock),
    # but not past the lock-delay, during which c1's keys keep c2 out.
    run.sleep_until(deadline + lock_delay / 2)
    run.note("c1's validity is over, its keys live on for the lock-delay; c1 resumes")
    c1.resume()
    wrote = stale.result()
    c1.call("release", name=LOCK)
    other = waiting.result()
    run.expect(wrote.get("accepted") is True, "c1's late write lands while nobody else holds the lock")
    if run.expect(other["ok"], "c2 acquires once c1 released", _error(other)):
        _use(run, c2)


def holder_pause(run: Run) -> None:
    _holder_pause(run)


def holder_pause_fenced(run: Run) -> None:
    _holder_pause(run, fencing=True)


def holder_pause_within_delay(run: Run) -> None:
    _holder_pause(run, lock_delay=run.params.ttl, within_delay=True)


def holder_pause_past_delay(run: Run) -> None:
    _holder_pause(run, lock_delay=run.params.ttl)


def late_extend(run: Run) -> None:
    ttl = run.params.ttl
    c1, c2 = run.clients(["c1", "c2"])
    pending = c1.submit("acquire", name=LOCK, ttl=ttl, timeout=ttl, pause="after")
    c1.wait_stopped()
    run.note("c1 stopped right after acquiring")
    got = c2.call("acquire", name=LOCK, ttl=ttl, timeout=2 * ttl + 1)
    if run.expect(got["ok"], "c2 acquires once c1's lock expired", _error(got)):
        _use(run, c2)
    run.sleep(0.2)  # a gap, so that the timeline shows what c1 does after it
    c1.resume()
    first = pending.result()
    if not run.expect(first["ok"], "c1 had acquired before it stopped"):
        return
    extended = c1.call("extend", name=LOCK)
    run.expect(not extended["ok"], "c1's extend fails: its token is gone", _error(extended))
    released = c1.call("release", name=LOCK)
    run.expect(not released["ok"], "c1's release reports the lock lost")


# --- 17-20: what a broken client would get wrong (python -m chaos selftest) -------------------


def stale_release(run: Run) -> None:
    ttl = run.params.ttl
    c1, c2, c3 = run.clients(["c1", "c2", "c3"])
    pending = c1.submit("acquire", name=LOCK, ttl=ttl, timeout=ttl, pause="after")
    c1.wait_stopped()
    run.note("c1 stopped right after acquiring")
    # c2 holds for long, so that a third holder would overlap it by far.
    got = c2.call("acquire", name=LOCK, ttl=_long_ttl(run), timeout=2 * ttl + 1)
    if not run.expect(got["ok"], "c2 acquires once c1's lock expired", _error(got)):
        return
    c2.call("read", name=LOCK)
    c1.resume()
    run.expect(pending.result()["ok"], "c1 had acquired before it stopped")
    released = c1.call("release", name=LOCK)
    run.expect(not released["ok"], "c1's late release reports its lock lost and leaves c2's key")
    third = c3.call("acquire", name=LOCK, ttl=ttl, blocking=False)
    run.expect(not third["ok"], "c3 is refused: c2 still holds the lock")
    if third["ok"]:
        _use(run, c3, hold=0.3, release=False)
    c2.call("write", name=LOCK)
    c2.call("release", name=LOCK)
    if third["ok"]:
        c3.call("release", name=LOCK)


def _outlives_its_keys(run: Run, c1: ClientProcess, c2: ClientProcess, *, believes_too_long: bool = False) -> None:
    """c1 acquires (one attempt) and reads; once its keys are gone from every master, c2
    acquires and reads; c1 writes if it still believes its lock valid, then c2 writes. A
    client that believes too long overlaps c2 and loses c2's increment."""
    ttl = run.params.ttl
    got = c1.call("acquire", name=LOCK, ttl=ttl, blocking=False)
    if not run.expect(got["ok"], "c1 acquires", _error(got)):
        return
    c1.call("read", name=LOCK)
    gone = [run.wait_key_gone(i, LOCK, timeout=2 * ttl) for i in range(run.params.nodes)]
    if not run.expect(all(g is not None for g in gone), "c1's keys expire on every master"):
        return
    run.metric("c1_validity_left_when_keys_gone", float(got["deadline"]) - max(g for g in gone if g is not None))
    other = c2.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(other["ok"], "c2 acquires once c1's keys are gone", _error(other)):
        return
    c2.call("read", name=LOCK)
    wrote = bool(c1.call("write", name=LOCK).get("written"))
    if believes_too_long:
        run.expect(wrote, "c1 writes: by its own clock its lock is still valid")
    else:
        run.expect(not wrote, "c1 does not write: its own validity check says the lock ran out")
    c2.call("write", name=LOCK)
    # Both release only once c1's own deadline is past, so that the overlap, if any, shows
    # its full length.
    run.sleep_until(float(got["deadline"]) + 0.05)
    c2.call("release", name=LOCK)
    c1.call("release", name=LOCK)


def slow_replies(run: Run) -> None:
    delay = 0.3
    c1, c2 = run.clients(["c1", "c2"], node_timeout=2 * delay)
    for i in range(run.params.nodes):
        run.nemesis.latency("c1", i, to_server=0.0, to_client=delay)
    _outlives_its_keys(run, c1, c2)


def failed_acquire_rollback(run: Run) -> None:
    ttl = run.params.ttl
    c1, c2 = run.clients(["c1", "c2"])
    run.nemesis.partition("c1", run.left)
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(got["ok"], f"c1 acquires through {run.cluster.labels(run.left)}", _error(got)):
        return
    others = [i for i in range(run.params.nodes) if i not in run.left]
    tried = c2.call("acquire", name=LOCK, ttl=ttl, blocking=False)
    if not run.expect(not tried["ok"], f"c2 gets only {run.cluster.labels(others)}, a minority, and is refused"):
        _use(run, c2, hold=0.3)
    left = [run.keys_on(i) for i in others]
    stale = sum(len(keys) for keys in left)
    run.metric("keys_left_by_failed_attempt", stale)
    run.expect(stale == 0, f"c2's failed attempt left no key on {run.cluster.labels(others)}", f"{stale} left")
    c1.call("release", name=LOCK)


def client_clock_slow(run: Run) -> None:
    c1, c2 = run.clients(["c1", "c2"], clock_rates={"c1": 0.9})
    _outlives_its_keys(run, c1, c2, believes_too_long=True)


def client_clock_fast(run: Run) -> None:
    c1, c2 = run.clients(["c1", "c2"], clock_rates={"c1": 1.1})
    _outlives_its_keys(run, c1, c2)


# --- 14-15: the network and contention -------------------------------------------------------


def link_faults(run: Run) -> None:
    n = run.params.nodes
    names = ["c1", "c2", "c3"]
    clients = run.clients(names, wake_on_release=True)
    until, pending = _loop(run, clients)
    kinds: dict[str, int] = {"latency": 0, "blackhole": 0}
    while time.monotonic() < until - 0.8:
        run.sleep(run.rng.uniform(0.1, 0.3))
        targets = {(run.rng.choice(names), run.rng.randrange(n)) for _ in range(run.rng.choice((1, 2)))}
        kind = run.rng.choice(("latency", "blackhole"))
        kinds[kind] += 1
        faults = []
        for client, index in sorted(targets):
            if kind == "latency":
                # Longer than node_timeout: the request times out in the client, then lands.
                delay = run.rng.uniform(0.12, 0.25)
                faults.append(run.nemesis.latency(client, index, to_server=delay, to_client=delay / 2))
            else:
                faults.append(run.nemesis.blackhole(client, index))
        run.sleep(run.rng.uniform(0.2, 0.5))
        for fault in faults:
            run.nemesis.end(fault)
    run.metric("link_faults", kinds)
    _finish(pending)

    def live(history: History, verdict: Verdict) -> None:
        ok = [r for _, r in _acquires(history) if r is not None and r.ok]
        run.expect(len(ok) > 0, "acquires succeed while links misbehave", f"{len(ok)} succeeded")

    run.after(live)


def split_vote(run: Run) -> None:
    n = run.params.nodes
    names = ["c1", "c2", "c3"]
    clients = run.clients(names, wake_on_release=True)
    # Each client reaches "its own" masters first (c1 A,D; c2 B,E; c3 C); the others get
    # its SET 10 ms later, by which time their own client's SET is in: a three-way split
    # with no majority for anyone on the first attempt of every round.
    groups = [list(range(n))[i::3] for i in range(3)]
    for client, own in zip(names, groups, strict=True):
        run.nemesis.slow_links(client, [i for i in range(n) if i not in own], 0.01)
    starts: list[float] = []
    for number in range(run.params.rounds):
        at = time.monotonic() + 0.2
        starts.append(at)
        pending = [c.submit("cycle", name=LOCK, ttl=run.params.ttl, at=at, timeout=10.0) for c in clients]
        results = [p.result() for p in pending]
        run.note(f"round {number + 1}: {sum(1 for r in results if r['ok'])} of 3 got the lock in turn")

    def time_to_winner(history: History, verdict: Verdict) -> None:
        firsts = []
        for at in starts:
            won = [r.time for r in history.of_type(AcquireReturned) if r.ok and r.time >= at]
            if won:
                firsts.append(min(won) - at)
        run.expect(len(firsts) == len(starts), "every round has a winner", f"{len(firsts)} of {len(starts)}")
        if firsts:
            run.metric("time_to_winner_p50", statistics.median(firsts))
            run.metric("time_to_winner_max", max(firsts))
            # A first attempt takes ~10 ms; a winner after 80 ms needed a retry: the vote split.
            run.metric("split_rounds", sum(1 for f in firsts if f > 0.08))

    run.after(time_to_winner)


# --- 21-22: the other primitives: a semaphore, a lock on several names ---------------------

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


def _kill_then_pause(run: Run, until: float) -> None:
    """Under a free-running workload that ends at ``until``: a fifth of the way in, kill a
    master, restart it (empty) after the ttl, then SIGSTOP another for a fifth of the run."""
    duration, ttl = run.params.loop_duration, run.params.loop_ttl
    victim, hung = run.rng.sample(range(run.params.nodes), 2)
    run.sleep_until(until - duration * 0.8)
    killed = run.nemesis.kill(victim)
    run.sleep(ttl + 0.5)  # restarted empty only once every key it held has expired
    run.nemesis.end(killed)
    paused = run.nemesis.pause_master(hung)
    run.sleep(duration * 0.2)
    run.nemesis.end(paused)


def multi_lock(run: Run) -> None:
    clients = run.clients([f"c{i}" for i in range(1, 9)], wake_on_release=True)
    until, pending = _loop(run, clients, names=list(MULTI_NAMES), together=2)
    _kill_then_pause(run, until)
    _finish(pending)

    def live(history: History, verdict: Verdict) -> None:
        ok = [r for _, r in _acquires(history) if r is not None and r.ok]
        run.expect(len(ok) > 0, "multi-name locks are acquired", f"{len(ok)} name holdings")

    run.after(live)


# --- 30: the read-write lock ------------------------------------------------------------------

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


# --- 23: leader election ---------------------------------------------------------------------

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


# --- 27: the election runner ---------------------------------------------------------------------

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


# --- 24-25: a Lock shared by threads; an operator's force-release ------------------------------

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


# --- 28: a holder outlives the restart of every master -----------------------------------------


def rolling_restart(run: Run) -> None:
    """c1 holds an auto-extended lock while every master in turn crashes and comes back
    empty (no persistence), the next only once the previous one has c1's key again; after
    each restart c2 tries to take the lock. Each extension a majority confirms writes c1's
    key back where it was lost, so c1 never falls to a minority; without that write-back,
    the third restart (of five) would leave c1 two keys, and c2 the other three."""
    ttl = run.params.ttl
    c1, c2 = run.clients(["c1", "c2"])
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl, auto_extend=True)
    if not run.expect(got["ok"], "c1 acquires, auto-extended", _error(got)):
        return
    token = str(got["token"]).encode()
    c1.call("read", name=LOCK)
    restored: list[float] = []
    for i in range(run.params.nodes):
        label = run.cluster.labels([i])
        direct = run.cluster.direct(i)
        run.nemesis.crash_restart(i, wipe=True)
        gone_at = time.monotonic()
        # The renewer extends every ttl/3: two periods and a busy machine's slack. c1 is
        # asked for its deadline meanwhile, so that its recorded holding never lapses
        # between the renewer's unrecorded extensions (see ClientSession.renewal).
        while direct.get(LOCK) != token and time.monotonic() < gone_at + 3 * ttl:
            c1.call("renewal", name=LOCK)
            run.sleep(0.02)
        back = direct.get(LOCK) == token
        if run.expect(back, f"{label} has c1's key again after c1's next extension"):
            restored.append(time.monotonic() - gone_at)
            left = int(direct.pttl(LOCK))
            run.expect(0 < left <= ttl * 1000, f"{label}'s restored key expires within the ttl", f"pttl {left} ms")
        held = c1.call("renewal", name=LOCK)
        run.expect(held["held"], f"c1 still holds the lock after {label}'s restart", f"lost={held['lost']}")
        tried = c2.call("acquire", name=LOCK, ttl=ttl, blocking=False)
        run.expect(not tried["ok"], f"c2 is refused after {label}'s restart", _error(tried))
        if tried["ok"]:
            c2.call("release", name=LOCK)
    run.metric("restored_within_s", [round(t, 3) for t in restored])
    held = c1.call("renewal", name=LOCK)
    run.expect(held["held"] and not held["lost"], "c1 never lost the lock", f"held={held['held']}, lost={held['lost']}")
    c1.call("write", name=LOCK)
    released = c1.call("release", name=LOCK)
    run.expect(released["ok"], "c1's release is confirmed by a majority", _error(released))


# --- 31: a handover that lands after the releaser's keys expired ------------------------------


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


# --- 32-35: the published counterexamples (K4b, K2, the failover race, fsync and a clock) ------

#: How much faster than the real one the K4b supervisor's clock runs.
_SUPERVISOR_RATE = 8.0
# The supervisor's wait, as its own process measures it: by its wall clock, faked.
_SUPERVISOR = """
import sys, time
start = time.time()
while time.time() - start < float(sys.argv[1]):
    time.sleep(0.002)
"""


def _supervisor_waits(seconds: float, rate: float) -> float:
    """Wait ``seconds`` as a supervisor process whose wall clock runs ``rate`` times as fast
    measures them (libfaketime, :func:`~chaos.clock.client_env`); the real seconds it took."""
    started = time.monotonic()
    env = {**os.environ, **client_env(rate)}
    subprocess.run([sys.executable, "-c", _SUPERVISOR, repr(seconds)], env=env, check=True, timeout=seconds + 30)
    return time.monotonic() - started


def restart_delayed_fast_clock(run: Run) -> None:
    """K4b (Kleppmann): C crashes right after c1's acquire, and its supervisor restarts it
    empty only once "the ttl" has passed, the delayed restart of scenario 6; but the
    supervisor's clock runs fast, so the ttl it waits is short in real time, and C is back
    empty while c1 still relies on its key."""
    ttl = _long_ttl(run)
    held = _c1_holds(run, ttl)
    if held is None:
        return
    kills = [run.nemesis.kill(i) for i in run.overlap]
    run.note(f"C's supervisor waits the ttl ({ttl:g}s) on a clock running x{_SUPERVISOR_RATE:g}")
    waited = _supervisor_waits(ttl, _SUPERVISOR_RATE)
    run.metric("supervisor_waited_s", round(waited, 3))
    run.expect(waited < ttl, f"the supervisor restarts C before the ttl really passed ({ttl:g}s)", f"{waited:.3f}s")
    for kill in kills:
        run.nemesis.end(kill)
    _c2_tries(run, held, ttl)


def _delayed_write(run: Run, *, fencing: bool) -> None:
    """K2: c1 writes within its validity, but the network holds the packets (every one
    between c1 and the resource dropped, so TCP retransmits with backoff) past the
    validity; c2 acquires once c1's keys expired and does its read-modify-write; c1's write
    lands after it. Unfenced, it overwrites c2's increment; fenced, the store refuses it."""
    ttl = run.params.loop_ttl
    c1, c2 = run.clients(["c1", "c2"], fencing=fencing)
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(got["ok"], "c1 acquires", _error(got)):
        return
    c1.call("read", name=LOCK)
    cut = run.nemesis.resource_cut("c1")
    writing = c1.submit("write", name=LOCK)
    run.note("c1 writes within its validity; the network holds the packets")
    _c2_takes_over(run, c2, ttl)
    run.nemesis.end(cut)
    wrote = writing.result()
    run.metric("c1_write_landed_after_validity_s", round(time.monotonic() - float(got["deadline"]), 3))
    _late_write(run, wrote, "c1's write, sent within its validity, lands after the heal", fencing=fencing)


def _c2_takes_over(run: Run, c2: ClientProcess, ttl: float) -> float | None:
    """c2 acquires once c1's keys expired (c1 still at work) and does its read-modify-write;
    when its acquire returned (None: it did not get the lock)."""
    second = c2.call("acquire", name=LOCK, ttl=ttl, timeout=2 * ttl + 1)
    granted = time.monotonic()
    if not run.expect(second["ok"], "c2 acquires once c1's keys expired", _error(second)):
        return None
    _use(run, c2)
    return granted


def _late_write(run: Run, wrote: dict[str, Any], landed: str, *, fencing: bool) -> None:
    """c1's write after c2's: it landed; fenced, the store refused it."""
    run.expect(bool(wrote.get("written")), landed)
    run.metric("c1_write_accepted", wrote.get("accepted"))
    if fencing:
        run.expect(not wrote.get("accepted"), "the store refuses c1's late write: c2's token is larger")


def delayed_write(run: Run) -> None:
    _delayed_write(run, fencing=False)


def delayed_write_fenced(run: Run) -> None:
    _delayed_write(run, fencing=True)


def failover(run: Run) -> None:
    """The failover race of the Redis docs: C has a replica (asynchronous replication),
    c1's SET reaches C but not yet the replica, C dies and the replica is promoted in its
    place, without c1's key: the reason Redlock's masters must be independent, not
    Sentinel-managed."""
    ttl = _long_ttl(run)
    [shared] = run.overlap[:1]
    replica, link = run.cluster.add_replica(shared)
    stall: list[str] = []
    held = _c1_holds(run, ttl, before=lambda: stall.append(run.nemesis.replication_stall(shared, link)))
    if held is None:
        return
    run.nemesis.failover(shared, replica, stall[0])
    with direct_client(replica.url) as promoted:
        kept = bool(promoted.exists(LOCK))
    run.metric("c1_key_on_promoted_replica", kept)
    run.expect(not kept, "the promoted replica lacks c1's key (never replicated)")
    _c2_tries(run, held, ttl)


def fsync_clock(run: Run) -> None:
    """``appendfsync always`` is no cure when a clock moves: C fsyncs c1's SET, crashes,
    and comes back from its AOF with its clock stepped forward at boot (an RTC that is
    off, an NTP step). The AOF stores the key's absolute expiry (PEXPIREAT), which C's
    clock has passed: the key is gone the moment C is back, and c2 gets C."""
    ttl = _long_ttl(run)
    held = _c1_holds(run, ttl)
    if held is None:
        return
    kills = [run.nemesis.kill(i, restart_wipe=False) for i in run.overlap]
    for index in run.overlap:
        aof = (run.cluster.master(index).dir / "appendonly.aof").read_bytes()
        run.metric(f"c1_key_in_{run.cluster.label(index)}_aof", LOCK.encode() in aof and b"PEXPIREAT" in aof)
    jumps = [run.nemesis.clock_jump(i, 2 * ttl, cause="at boot") for i in run.overlap]
    for kill in kills:
        run.nemesis.end(kill)
    for index in run.overlap:
        label = run.cluster.label(index)
        kept = bool(run.cluster.direct(index).exists(LOCK))
        run.metric(f"c1_key_on_{label}_after_restart", kept)
        run.expect(not kept, f"{label} is back without c1's key: its clock passed the stored expiry")
    _c2_tries(run, held, ttl)
    for jump in jumps:
        run.nemesis.end(jump)


def _auto_extend_cut_off(run: Run, *, fencing: bool) -> None:
    """etcd #10811, for Redlock: c1 runs a job longer than its ttl under an auto-extended
    lock, relying on the renewer as ``with lock:`` code does, and looks at the lock only
    when the job is done. c1 is cut off from every master but A and B, so the renewer's
    extends find no majority and the validity runs out while the job runs; c2, which
    reaches a majority, takes the lock once c1's keys expire and does its read-modify-write;
    then c1's job writes what it computed. The lock reports the loss on time (``lost``,
    ``on_lost``), but nothing stops a job that does not look: unfenced, its write overwrites
    c2's increment; fenced, the store refuses it. The metrics time c2's grant and c1's
    write against the end of c1's validity."""
    ttl = run.params.loop_ttl
    c1, c2 = run.clients(["c1", "c2"], fencing=fencing)
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl, auto_extend=True)
    if not run.expect(got["ok"], "c1 acquires, auto-extended", _error(got)):
        return
    c1.call("read", name=LOCK)
    # A renewal or two first: the cut lands on a lock the renewer has been keeping.
    run.sleep(0.6 * ttl)
    reach = list(range(redlock.quorum_size(run.params.nodes) - 1))
    cut = run.nemesis.partition("c1", reach)
    # c1's own view, polled: the last deadline its renewer gave it is where its validity ends.
    validity = float(got["deadline"])
    lost = False
    while time.monotonic() < validity + 2 * ttl:
        held = c1.call("renewal", name=LOCK)
        if not held["held"]:
            lost = bool(held["lost"])
            break
        validity = float(held["deadline"])
        # A poll is recorded as an extend: one read just before the deadline and stamped
        # just after it (a loaded machine) would be an extend of a lapsed lock. So the
        # last look comes just past the deadline, where the lock must say it is lost.
        left = validity - time.monotonic()
        run.sleep(0.02 if left > 0.1 * ttl else max(0.0, left) + 0.01)
    run.expect(lost, "c1's lock reports itself lost once its validity ran out, no extend finding a majority")
    granted = _c2_takes_over(run, c2, ttl)
    if granted is not None:
        run.metric("c2_acquired_after_validity_s", round(granted - validity, 3))
    # The job ends: it writes what it computed, without looking at the lock (check=False).
    wrote = c1.call("write", name=LOCK, check=False)
    run.metric("work_after_validity_s", round(time.monotonic() - validity, 3))
    run.nemesis.end(cut)
    _late_write(run, wrote, "c1's job writes after its validity ended", fencing=fencing)


def auto_extend_cut_off(run: Run) -> None:
    _auto_extend_cut_off(run, fencing=False)


def auto_extend_cut_off_fenced(run: Run) -> None:
    _auto_extend_cut_off(run, fencing=True)


CATALOGUE: tuple[Scenario, ...] = (
    Scenario("1", "baseline", "no faults", "SAFE", baseline, loop=True,
             why="three clients contend for two names; every holder interval is disjoint"),
    Scenario("2", "kill-minority", "kill 2 of 5 masters", "SAFE", kill_minority, loop=True,
             why="a majority is still up: safe and still live"),
    Scenario("3", "kill-majority", "kill 3 of 5 masters, restart them after the TTL", "SAFE", kill_majority,
             loop=True, why="no majority: nobody acquires, QuorumUnavailable at once; live again after"),
    Scenario("4", "pause-masters", "SIGSTOP 2 of 5 masters", "SAFE", pause_masters, loop=True,
             why="hung masters cost at most node_timeout per round, never a hang"),
    Scenario("5", "restart-empty", "K4: C crashes and restarts empty at once", "UNSAFE", restart_empty,
             kinds=("mutual-exclusion", "lost-update"), proxies=True,
             why="C forgets c1's key and grants it to c2, which reaches C,D,E: two holders"),
    Scenario("6", "restart-delayed", "K4 with C restarted only after the TTL", "SAFE", restart_delayed,
             proxies=True, why="the spec's remedy: by the time C is back, c1's validity is over"),
    Scenario("7a", "restart-aof-always", "K4 with appendfsync always", "SAFE", restart_aof_always,
             persistence="aof-always", proxies=True,
             why="C comes back with c1's key, so c2 is refused; so it would under everysec (7b): a crash "
                 "tests the AOF, not the fsync policy"),
    Scenario("7b", "restart-aof-everysec", "K4 with appendfsync everysec, c1's SET not yet fsynced", "SAFE",
             restart_aof_everysec, persistence="aof-everysec", proxies=True,
             why="a process crash keeps the page cache: C reads c1's unsynced SET back, and c2 is refused"),
    Scenario("8a", "power-loss-always", "as 7a, but C loses its power", "SAFE", power_loss_always,
             persistence="aof-always", power_loss=True, proxies=True,
             why="C fsynced c1's SET before it replied: the disk has it, and c2 is refused"),
    Scenario("8b", "power-loss-everysec", "as 7b, but C loses its power", "UNSAFE", power_loss_everysec,
             kinds=("mutual-exclusion",), persistence="aof-everysec", power_loss=True, proxies=True,
             why="C loses its unsynced last second, c1's SET in it, and grants the lock to c2"),
    Scenario("9", "clock-jump-forward", "K3: C's clock jumps past the TTL", "UNSAFE", clock_jump_forward,
             kinds=("mutual-exclusion", "lost-update"), clocked=True, proxies=True,
             why="C expires c1's key early and grants it to c2"),
    Scenario("10", "clock-jump-backward", "C's clock steps backward", "SAFE", clock_jump_backward,
             clocked=True, proxies=True, why="keys on C live longer: less available, never unsafe"),
    Scenario("11a", "clock-fast", "C's clock runs x1.05 (drift allowance 1 %)", "UNSAFE", clock_fast,
             kinds=("mutual-exclusion",), clocked=True, proxies=True,
             why="C expires c1's key ~4 % of the TTL before c1's validity ends; c2 gets in"),
    Scenario("11b", "clock-within-drift", "C's clock runs x1.005, within the allowance", "SAFE",
             clock_within_drift, clocked=True, proxies=True,
             why="C's key outlives c1's validity: the drift allowance covers the rate"),
    Scenario("12", "pause-during-acquire", "K5: c1 stopped between sending SETs and reading replies", "SAFE",
             pause_during_acquire, proxies=True, delays=True,
             why="validity counts from before the SETs: c1's late OKs leave it nothing"),
    Scenario("13a", "holder-pause", "K1: holder stopped past its validity, then writes", "UNSAFE",
             holder_pause, kinds=("lost-update",),
             why="no lock can stop a paused holder from writing late: c2's increment is lost"),
    Scenario("13b", "holder-pause-fenced", "K1 with fencing tokens", "SAFE", holder_pause_fenced,
             why="the store rejects c1's older fencing token"),
    Scenario("13c", "holder-pause-within-delay", "K1 with lock_delay=ttl, paused shorter than the delay",
             "SAFE", holder_pause_within_delay,
             why="c1's keys outlive its validity by the delay: its late write lands before c2 gets in"),
    Scenario("13d", "holder-pause-past-delay", "K1 with lock_delay=ttl, paused longer than the delay",
             "UNSAFE", holder_pause_past_delay, kinds=("lost-update",),
             why="a delay only postpones the next holder: a longer pause still loses c2's increment"),
    Scenario("14", "link-faults", "latency and blackholes on 1-2 links", "SAFE", link_faults, loop=True,
             proxies=True, delays=True, leftovers=True,
             why="late and lost requests: still safe, and every key set by a failed attempt is undone"),
    Scenario("15", "split-vote", "three clients split the vote", "SAFE", split_vote, proxies=True, delays=True,
             why="nobody gets a majority at first; random retry delays pick a winner"),
    Scenario("16", "late-extend", "an expired holder extends after another acquired and released", "SAFE",
             late_extend, why="extend never revives a key that is gone"),
    Scenario("17", "stale-release", "an expired holder releases while another holds", "SAFE", stale_release,
             why="release deletes only its own token: c2 keeps the lock, and c3 is refused"),
    Scenario("18", "slow-replies", "every reply to c1 comes 300 ms late", "SAFE", slow_replies, proxies=True,
             delays=True,
             why="validity counts from before the requests: c1 stops believing before its keys expire"),
    Scenario("19", "failed-acquire-rollback", "c2's attempt is granted by a minority only", "SAFE",
             failed_acquire_rollback, proxies=True,
             why="a failed attempt takes back the keys it set: nothing of c2 is left on D, E"),
    Scenario("20a", "client-clock-slow", "c1's clock runs x0.9 (drift allowance 1 %)", "UNSAFE", client_clock_slow,
             kinds=("mutual-exclusion", "lost-update", "validity-overstated"),
             why="c1 measures too little elapsed time and believes ~10 % of the TTL past its keys' expiry"),
    Scenario("20b", "client-clock-fast", "c1's clock runs x1.1", "SAFE", client_clock_fast,
             why="c1 measures too much elapsed time: it gives the lock up early (less available, safe)"),
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
    Scenario("23", "election", "3 campaigners; a master paused, one killed, C x1.005, leader paused, leader killed",
             "SAFE", election, clocked=True,
             why="at most one leader at any moment (by validity), and terms strictly increase"),
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
    Scenario("26a", "error-oom", "C, D, E answer -OOM (maxmemory 1, noeviction) while c2 tries", "SAFE",
             error_oom, why="an error reply is a refusal: c2 has 0 votes, not 3"),
    Scenario("26b", "error-readonly", "C, D, E demoted to replicas answer -READONLY while c2 tries", "SAFE",
             error_readonly, why="an error reply is a refusal: c2 has 0 votes, not 3"),
    Scenario("26c", "error-misconf", "C, D, E answer -MISCONF (a failed background save) while c2 tries", "SAFE",
             error_misconf, why="an error reply is a refusal: c2 has 0 votes, not 3"),
    Scenario("26d", "error-busy", "C, D, E answer -BUSY (a script past lua-time-limit) while c2 tries", "SAFE",
             error_busy, why="an error reply is a refusal: c2 has 0 votes, not 3"),
    Scenario("26e", "error-loading", "C, D, E restart from a slow-loading AOF and answer -LOADING while c2 "
             "tries", "SAFE", error_loading, persistence="aof-always",
             why="an error reply is a refusal: c2 has 0 votes, not 3"),
    Scenario("27", "election-runner", "3 runners in Election.run(); leader cut off, leader paused, leader killed",
             "SAFE", election_runner, proxies=True,
             why="a runner is told on_lost by its validity's end at the latest and campaigns again after a "
                 "backoff: one leader at a time, terms increasing, and a new leader after each fault"),
    Scenario("28", "rolling-restart", "every master in turn restarts empty under an auto-extended lock",
             "SAFE", rolling_restart, leftovers=True,
             why="each extension a majority confirms writes c1's key back (SET NX) where a master lost it: "
                 "c1 keeps a majority through all five restarts, and c2 is always refused"),
    Scenario("29", "eviction", "C evicts c1's key under maxmemory (volatile-lru)", "UNSAFE", eviction,
             kinds=("mutual-exclusion", "lost-update"), proxies=True,
             why="a volatile eviction policy may drop any lock key (each has a ttl): C grants c1's lock to c2"),
    Scenario("30a", "rwlock", "8 clients read (3 in 4) and write one read-write lock; kill, pauses", "SAFE",
             rwlock, loop=True, proxies=True, leftovers=True,
             why="a master grants a reader only without a writer and a writer only without readers: a read "
                 "majority and a write majority share a master, which refused one of them"),
    Scenario("30b", "rwlock-restart-empty", "K4 for a read-write lock: c1 reads; C restarts empty; c2 writes",
             "UNSAFE", rwlock_restart_empty, kinds=("mutual-exclusion",), proxies=True,
             why="C forgets c1's reader and grants c2 the writer's key: as for the lock, only persistence or a "
                 "delayed restart keeps the shared master's vote"),
    Scenario("31", "handoff-late", "c1 hands its lock to its own waiter by a swap that lands after its keys expired",
             "SAFE", handoff_late, proxies=True, delays=True,
             why="the swap replaces only c1's own token: where c2's holds, it writes nothing, and c1's waiter "
                 "is refused"),
    Scenario("32", "restart-delayed-fast-clock", "K4b: C restarted empty after 'the ttl' on a supervisor's "
             "clock running x8", "UNSAFE", restart_delayed_fast_clock, kinds=("mutual-exclusion", "lost-update"),
             proxies=True,
             why="the delayed restart relies on the supervisor's clock: a fast one brings C back empty while "
                 "c1's validity runs, and C grants c1's lock to c2"),
    Scenario("33a", "delayed-write", "K2: c1's write to the resource held by the network past its validity",
             "UNSAFE", delayed_write, kinds=("lost-update",), proxies=True, kernel=True,
             why="no lock can recall a write already sent: it lands after c2's and overwrites its increment"),
    Scenario("33b", "delayed-write-fenced", "K2 with fencing tokens", "SAFE", delayed_write_fenced, proxies=True,
             kernel=True,
             why="the store checks the token when the write lands: c2's is larger, c1's late write is refused"),
    Scenario("34", "failover", "C's replica, behind by c1's SET, promoted in C's place", "UNSAFE", failover,
             kinds=("mutual-exclusion", "lost-update"), proxies=True, delays=True,
             why="asynchronous replication: the promoted replica never had c1's key and grants the lock to c2 "
                 "(why Redlock's masters are independent, not Sentinel-managed)"),
    Scenario("35", "fsync-clock", "appendfsync always; C crashes and boots with its clock stepped forward",
             "UNSAFE", fsync_clock, kinds=("mutual-exclusion", "lost-update"), persistence="aof-always",
             clocked=True, proxies=True,
             why="the AOF keeps the key with its absolute expiry, which C's stepped clock has passed: fsync "
                 "saves the key, not the lock"),
    Scenario("36a", "auto-extend-cut-off", "etcd #10811: c1's job under an auto-extended lock outlives it, c1 cut "
             "off from a majority", "UNSAFE", auto_extend_cut_off, kinds=("lost-update",), proxies=True,
             why="the renewer cannot extend without a majority: the lock reports the loss at its deadline, but a "
                 "job that does not look runs on, and its write lands after c2's"),
    Scenario("36b", "auto-extend-cut-off-fenced", "as 36a, writes fenced", "SAFE", auto_extend_cut_off_fenced,
             proxies=True,
             why="the job still runs past the validity, but the store refuses its write: c2's token is larger"),
)  # fmt: skip


def find(name: str) -> Scenario:
    """A scenario by name ("restart-empty") or number ("5", "11a")."""
    for scenario in CATALOGUE:
        if name in (scenario.name, scenario.number, scenario.slug):
            return scenario
    known = ", ".join(s.name for s in CATALOGUE)
    raise KeyError(f"no scenario {name!r}; known: {known}")
