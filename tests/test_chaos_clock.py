"""Clock faults (chaos.clock): libfaketime really moves a redis-server's key expiry.

The spec texts are checked without a server; the rest runs a real master started with
the controller's environment and watches keys expire early or late. Bounds are loose:
a 2-core CI box may stall, so "expired early" means well before the real TTL, not at an
exact instant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from chaos.clock import SPEC_FILE, ClockControl, client_env, client_shim, libfaketime_path
from chaos.shims import CompilerNotFound
from redlock.servers import LocalMaster, LocalMasters


class FakeWallClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_specs_keep_the_clock_continuous(tmp_path: Path) -> None:
    wall = FakeWallClock(1_700_000_000.0)  # 2023-11-14 22:13:20 UTC
    pokes: list[float] = []
    control = ClockControl(tmp_path / "node0", clock=wall, poke=lambda: pokes.append(wall.now))
    path = tmp_path / "node0" / SPEC_FILE
    assert path.read_text() == "+0.000000 x1.000000\n"

    # A step at real speed: relative, and without "x" (XRESET would ignore its offset).
    control.jump(10)
    assert control.spec == "+10.000000"
    wall.now += 5
    assert control.offset == pytest.approx(10)

    # A rate change carries "x": the master continues from its clock's last reading, and
    # the offset is what a restarted master would start from.
    control.rate(2)
    assert control.spec == "+10.000000 x2.000000"
    wall.now += 3
    assert control.offset == pytest.approx(13)  # 3 real seconds ran as 6
    assert pokes == []
    # A step off real speed: absolute, without "x", and poked so the master reads it now.
    control.jump(-20.5)
    assert control.spec == "@2023-11-14 22:13:20.500000"
    assert control.offset == pytest.approx(-7.5)
    assert pokes == [wall.now]

    control.rate(1)  # back to real speed, keeping the offset
    assert control.spec == "-7.500000 x1.000000"
    control.reset()
    assert control.spec == "+0.000000"
    assert control.offset == 0
    assert path.read_text() == "+0.000000\n"
    assert [p.name for p in path.parent.iterdir()] == [SPEC_FILE]  # no staging file left

    # reset() off real speed: the rate first, read by the master (poked), then the step.
    control.rate(3)
    wall.now += 1
    control.reset()
    assert control.spec == "+0.000000"
    assert control.offset == 0
    assert control.factor == 1
    assert pokes[-1] == wall.now


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    control = ClockControl(tmp_path)
    for factor in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="factor"):
            control.rate(factor)
    with pytest.raises(ValueError, match="finite"):
        control.jump(float("nan"))


def test_env_preloads_the_wheel_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    env = ClockControl(tmp_path).env()
    assert env["LD_PRELOAD"] == libfaketime_path()
    assert Path(env["LD_PRELOAD"]).is_file()
    assert env["FAKETIME_TIMESTAMP_FILE"] == str((tmp_path / SPEC_FILE).resolve())
    assert env["FAKETIME_NO_CACHE"] == env["DONT_FAKE_MONOTONIC"] == env["FAKETIME_XRESET"] == "1"
    monkeypatch.setenv("FAKETIME", "+1d")
    with pytest.raises(RuntimeError, match="FAKETIME"):
        ClockControl(tmp_path).env()


# --- against a real master ------------------------------------------------------------------


@pytest.fixture
def faked() -> Iterator[tuple[LocalMaster, ClockControl, redis.Redis]]:
    # Open: the tests slow its timers down with CONFIG SET hz.
    masters = LocalMasters(1, owner_only=False)
    node = masters[0]
    control = ClockControl(node.dir)
    node.env.update(control.env())
    with masters, redis.Redis(host=node.host, port=node.port, socket_timeout=5) as r:
        yield node, control, r


def master_offset(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6 - time.time()


def test_the_master_runs_on_real_time_until_told(faked: tuple[LocalMaster, ClockControl, redis.Redis]) -> None:
    _node, _control, r = faked
    assert abs(master_offset(r)) < 0.5
    r.set("k", "v", px=300)
    time.sleep(0.6)
    assert r.exists("k") == 0


def test_a_forward_jump_expires_a_key_at_once(faked: tuple[LocalMaster, ClockControl, redis.Redis]) -> None:
    _node, control, r = faked
    r.set("lock", "token", px=5000)
    control.jump(10)
    assert r.exists("lock") == 0
    assert master_offset(r) == pytest.approx(10, abs=0.5)


def test_a_backward_jump_makes_a_key_outlive_its_ttl(faked: tuple[LocalMaster, ClockControl, redis.Redis]) -> None:
    _node, control, r = faked
    r.set("lock", "token", px=300)
    control.jump(-10)
    time.sleep(0.6)
    assert r.exists("lock") == 1  # twice its TTL later, still there
    assert r.pttl("lock") > 9000
    control.reset()
    assert r.exists("lock") == 0


def test_a_fast_clock_expires_a_key_early(faked: tuple[LocalMaster, ClockControl, redis.Redis]) -> None:
    _node, control, r = faked
    control.rate(4)
    start = time.monotonic()
    r.set("lock", "token", px=2000)
    while r.exists("lock") and time.monotonic() - start < 5:
        time.sleep(0.01)
    lived = time.monotonic() - start
    # 2 s of TTL on a clock running 4x: about 0.5 s of real time.
    assert 0.3 < lived < 1.5


def test_a_rate_change_does_not_jump_the_clock(faked: tuple[LocalMaster, ClockControl, redis.Redis]) -> None:
    _node, control, r = faked
    # With "+0 x2" libfaketime would jump by the process's whole uptime at once.
    time.sleep(1.0)
    control.rate(2)
    since = time.monotonic()
    assert abs(master_offset(r)) < 0.3
    time.sleep(0.5)
    # At twice the speed the master gains what really passed (a busy host oversleeps).
    assert master_offset(r) == pytest.approx(time.monotonic() - since, abs=0.2)
    assert master_offset(r) == pytest.approx(control.offset, abs=0.2)
    control.rate(1)
    time.sleep(0.3)
    assert master_offset(r) == pytest.approx(control.offset, abs=0.2)  # keeps its lead
    control.reset()
    assert abs(master_offset(r)) < 0.2


def sampled_offset(r: redis.Redis) -> float:
    """The master's clock against the real one, from the quickest of five ``TIME`` round
    trips, stamped at their middle: a loaded machine makes some trips slow, rarely all."""
    best: tuple[float, float] | None = None
    for _ in range(5):
        sent = time.time()
        seconds, micros = r.time()
        received = time.time()
        trip = (received - sent, seconds + micros / 1e6 - (sent + received) / 2)
        best = trip if best is None or trip < best else best
    assert best is not None
    return best[1]


def test_a_rate_fault_is_continuous_at_its_start_and_its_end(
    faked: tuple[LocalMaster, ClockControl, redis.Redis],
) -> None:
    _node, control, r = faked
    # One cron tick a second and no traffic: the master reads its clock only when asked,
    # so it parses a new spec late. With an absolute "@" spec its clock stood still until
    # then: a step back by the idle time (90 ms in the run that found it).
    r.config_set("hz", "1")
    idle = 0.3
    steps = []
    for factor in (1.05, 1.0, 0.95, 1.0):
        before = sampled_offset(r)
        control.rate(factor)
        time.sleep(idle)
        after = sampled_offset(r)
        # What the old and new rates legitimately add over the idle time: at most 5 %.
        steps.append(abs(after - before) - 0.05 * (idle + 0.05))
    assert max(steps) < 0.01, steps
    # The lead the fast clock gained and the slow one lost is kept: no step at the end.
    assert abs(sampled_offset(r) - control.offset) < 0.01


def test_a_step_off_real_speed_is_exact(faked: tuple[LocalMaster, ClockControl, redis.Redis]) -> None:
    node, control, r = faked
    r.config_set("hz", "1")
    direct = redis.Redis(host=node.host, port=node.port, socket_timeout=1)
    control.poke = direct.time
    control.rate(1.05)
    time.sleep(0.1)
    before = sampled_offset(r)
    control.jump(2.0)
    time.sleep(0.3)
    # The step is what was asked, and the rate ran on through it.
    assert sampled_offset(r) - before == pytest.approx(2.0 + 0.05 * 0.3, abs=0.02)
    control.reset()
    time.sleep(0.3)
    assert abs(sampled_offset(r)) < 0.01
    direct.close()


def test_reapply_carries_the_clock_across_a_restart(faked: tuple[LocalMaster, ClockControl, redis.Redis]) -> None:
    node, control, r = faked
    control.jump(30)
    control.rate(2)
    time.sleep(0.2)
    control.reapply()
    started = time.monotonic()
    node.restart()
    restart = time.monotonic() - started
    # The new process starts its clock at the reapplied time when it loads, so it is
    # behind the model by up to the restart's duration, at twice the speed.
    lag = control.offset - master_offset(r)
    assert -0.2 < lag < 2 * restart + 0.2


# A client's clocks, CLOCK_MONOTONIC among them, at a rate from the process's start; the
# history's clock (the real CLOCK_MONOTONIC, read past libfaketime) at 1.0; waits as long as
# they say in real seconds. The child prints its stamps so that the parent can check they
# are on its own time line.
_RATES = """
import json, threading, time
from chaos.clock import history_clock
stamp = history_clock()
first, wall, mono = stamp(), time.time(), time.monotonic()
while stamp() - first < 0.2:
    pass
rates = ((time.monotonic() - mono) / (stamp() - first), (time.time() - wall) / (stamp() - first))
before = stamp(); time.sleep(0.05); slept = stamp() - before
before = stamp(); threading.Event().wait(0.05); waited = stamp() - before
print(json.dumps({"first": first, "last": stamp(), "rates": rates, "slept": slept, "waited": waited}))
"""


@pytest.fixture(scope="module")
def shim() -> str:
    """The client clock's shim; without a compiler to build it, the client tests skip."""
    try:
        return client_shim()
    except CompilerNotFound as exc:
        pytest.skip(str(exc))


def _client(rate: float, script: str, *args: str) -> str:
    env = {**os.environ, **client_env(rate), "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("rate", [0.9, 1.1])
def test_a_client_monotonic_clock_runs_at_its_rate_and_its_history_clock_stays_real(rate: float, shim: str) -> None:
    before = time.monotonic()
    seen = json.loads(_client(rate, _RATES))
    after = time.monotonic()
    # Ratios of two clocks read together: the machine's load cannot skew them.
    assert seen["rates"] == pytest.approx([rate, rate], abs=0.02)
    # The stamps are this process's CLOCK_MONOTONIC: inside the child's lifetime here.
    assert before <= seen["first"] <= seen["last"] <= after
    # A sleep and an Event wait keep their length in real seconds (an absolute wait on the
    # faked clock would otherwise last decades or end at once).
    assert seen["slept"] >= 0.05
    assert seen["waited"] >= 0.05


# The library's own clock path under a slow client clock: a lock whose keys are gone from
# the master still counts itself held, because time.monotonic (its default clock) lags.
_BELIEVES = """
import sys, time
import redis, redlock
from chaos.clock import history_clock
stamp = history_clock()
with redlock.Redlock([sys.argv[1]]) as rl, redis.Redis.from_url(sys.argv[1]) as master:
    lock = rl.lock("believes", 1.0)
    assert lock.acquire(blocking=False)
    start = stamp()
    while master.exists("believes"):
        time.sleep(0.01)
    print(f"{stamp() - start:.3f} {lock.locked()}")
"""


@pytest.mark.servers
def test_a_lock_on_a_slow_client_clock_outlives_its_keys(shim: str) -> None:
    with LocalMasters(1) as masters:
        gone_after, locked = _client(0.5, _BELIEVES, masters.urls[0]).split()
    # The key lived its ttl in real time; the lock, reading its own slow clock, counts
    # about half of that and still holds. On the real clock it would not.
    assert float(gone_after) >= 0.9
    assert locked == "True"


def test_a_client_clock_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rate"):
        client_env(0.0)
