"""Scenarios 1-8, 26, 28 and 29: the masters fail (killed, paused, restarted empty or from
their files, cut from their power, answering error replies, evicting) and the lock stays
safe, or a master loses the lock it granted.

Scenarios 5-8 are the K4 case of docs/safety.md with each remedy beside it: a delayed
restart, the AOF with either fsync policy, and what a power cut leaves of each.
"""

from __future__ import annotations

import math
import time

from ..checkers import Verdict
from ..history import History
from ..runner import Run, Scenario, fault_window
from ._steps import LOCK, _acquires, _c1_holds, _c2_tries, _error, _finish, _long_ttl, _loop


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


SCENARIOS: tuple[Scenario, ...] = (
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
    Scenario("28", "rolling-restart", "every master in turn restarts empty under an auto-extended lock",
             "SAFE", rolling_restart, leftovers=True,
             why="each extension a majority confirms writes c1's key back (SET NX) where a master lost it: "
                 "c1 keeps a majority through all five restarts, and c2 is always refused"),
    Scenario("29", "eviction", "C evicts c1's key under maxmemory (volatile-lru)", "UNSAFE", eviction,
             kinds=("mutual-exclusion", "lost-update"), proxies=True,
             why="a volatile eviction policy may drop any lock key (each has a ttl): C grants c1's lock to c2"),
)  # fmt: skip
