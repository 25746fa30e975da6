"""Scenarios 9-11: a master's wall clock jumps or runs fast (K3 of docs/safety.md), and the
rate the drift allowance covers; :func:`clock_rate_trial` is also the clock-rate sweep's
trial (:mod:`chaos.sweep`).
"""

from __future__ import annotations

from ..runner import Run, Scenario
from ._steps import LOCK, _c1_holds, _c2_tries, _error, _long_ttl, _use


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


SCENARIOS: tuple[Scenario, ...] = (
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
)  # fmt: skip
