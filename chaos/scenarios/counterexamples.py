"""Scenarios 32-36: the published counterexamples: K4b (a delayed restart on a fast
supervisor's clock), K2 (a write the network delays past the validity), a failover to a
replica behind by the lock's SET, fsync with a clock stepped at boot, and etcd #10811 (a
job under an auto-extended lock cut off from a majority), each with its remedy where one
exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import redlock

from ..clients import ClientProcess
from ..clock import client_env
from ..runner import Run, Scenario
from ..workload import direct_client
from ._steps import LOCK, _c1_holds, _c2_tries, _error, _long_ttl, _use

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


SCENARIOS: tuple[Scenario, ...] = (
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
