"""Scenarios 17-20: what a broken client would get wrong (a release of another's token,
validity counted from after the requests, a failed attempt left behind, a client's own
clock trusted past the drift allowance), so ``python -m chaos selftest`` can tell the
catalogue catches each of them (:mod:`chaos.variants`).
"""

from __future__ import annotations

from ..clients import ClientProcess
from ..runner import Run, Scenario
from ._steps import LOCK, _error, _long_ttl, _use


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


SCENARIOS: tuple[Scenario, ...] = (
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
)  # fmt: skip
