"""Scenarios 12, 13 and 16: a client stopped (SIGSTOP) during its acquire (K5 of
docs/safety.md) or while it holds the lock (K1), with fencing and ``lock_delay`` as the
remedies, and an expired holder that extends late.
"""

from __future__ import annotations

from ..clients import ClientProcess, Pending
from ..runner import Run, Scenario
from ._steps import LOCK, _error, _stale_write_judged, _use


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


SCENARIOS: tuple[Scenario, ...] = (
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
    Scenario("16", "late-extend", "an expired holder extends after another acquired and released", "SAFE",
             late_extend, why="extend never revives a key that is gone"),
)  # fmt: skip
