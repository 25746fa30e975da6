"""Nemeses: the faults a scenario injects, each recorded as a window in the history.

Every method acts on the real processes or links of a :class:`~chaos.cluster.Cluster` and
records a :class:`~chaos.history.FaultBegin` / :class:`~chaos.history.FaultEnd` pair with
the harness's :class:`~chaos.history.Recorder`, so the checkers can name the faults around
a violation and the timeline can shade them. Faults that last (a killed master, a paused
one, a clock off, a partition) return their fault id, to be passed to the method that
ends them; :meth:`Nemesis.end_all` ends whatever is still open at the end of a run.

Masters are named by index (0 is A); clients by name ("c1"). An operator's
``force_release`` is here too: for the holder it removes, it is a fault like any other.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import pathlib
import signal
import threading
import time
from collections.abc import Callable, Sequence

import redis

import redlock
from redlock.servers import LocalMaster

from .cluster import Cluster
from .history import ForceReleased, Recorder
from .netns import FaultKind
from .powerloss import FileLoss
from .proxy import Link
from .workload import direct_client

__all__ = ["ERROR_REPLIES", "Nemesis"]

_POWER_CUT = "SIGKILL; its files keep only what it fsynced"
#: Who force-releases, in the history.
OPERATOR = "operator"
#: The operator's one call runs on fresh connections: its round must outlast their connects.
_OPERATOR_NODE_TIMEOUT = 0.5


def _oom(master: redis.Redis) -> Callable[[], None]:
    # Over maxmemory under noeviction, every command that may grow memory is refused, a
    # SET NX on a key that exists too: the check comes before the command runs.
    master.config_set("maxmemory-policy", "noeviction")
    master.config_set("maxmemory", "1")

    def undo() -> None:
        master.config_set("maxmemory", "0")

    return undo


def _readonly(master: redis.Redis) -> Callable[[], None]:
    # Demoted to a replica of a port on its own loopback where nothing listens: it never
    # syncs, so it keeps its keys, as a replica cut off from its new master does.
    master.replicaof("127.0.0.1", 1)

    def undo() -> None:
        master.replicaof("NO", "ONE")

    return undo


def _bgsave_status(master: redis.Redis, want: str, timeout: float = 10.0) -> None:
    """Wait until the master's last background save ended ``want`` ("ok" or "err")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = master.info("persistence")
        if not info.get("rdb_bgsave_in_progress") and info.get("rdb_last_bgsave_status") == want:
            return
        time.sleep(0.01)
    raise RuntimeError(f"the master's background save did not end {want!r} within {timeout}s")


def _misconf(master: redis.Redis) -> Callable[[], None]:
    # A background save that fails, with save points and stop-writes-on-bgsave-error (the
    # defaults of a redis.conf), makes the master refuse every write with -MISCONF. The
    # save fails because its file name is taken by a directory (rename onto a directory
    # fails even for root).
    directory = pathlib.Path(str(master.config_get("dir")["dir"]))
    old_name = str(master.config_get("dbfilename")["dbfilename"])
    old_save = str(master.config_get("save")["save"])
    blocker = directory / "chaos-misconf.rdb"
    blocker.mkdir(exist_ok=True)
    master.config_set("stop-writes-on-bgsave-error", "yes")
    master.config_set("save", "3600 1")
    master.config_set("dbfilename", blocker.name)
    master.bgsave()
    _bgsave_status(master, "err")

    def undo() -> None:
        blocker.rmdir()
        master.config_set("dbfilename", old_name)
        master.bgsave()
        _bgsave_status(master, "ok")
        master.config_set("save", old_save)

    return undo


def _busy(master: redis.Redis) -> Callable[[], None]:
    # A script that runs past lua-time-limit: the master then answers every other command
    # with -BUSY until SCRIPT KILL (the script writes nothing, so it may be killed).
    master.config_set("lua-time-limit", "1")

    def spin() -> None:
        # On a connection of the client's pool of its own: the pings below take another.
        with contextlib.suppress(redis.RedisError):
            master.eval("while true do end", 0)

    thread = threading.Thread(target=spin, name="chaos-busy-script", daemon=True)
    thread.start()
    # Until the master says so: a scenario that went on before would find it answering
    # normally (on a loaded machine the script may not have started: c2 would be refused by
    # c1's key, with no -BUSY to name).
    deadline = time.monotonic() + 30.0
    while True:
        try:
            master.ping()
        except redis.ResponseError as exc:
            if str(exc).startswith("BUSY"):
                break
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the master never answered -BUSY: its spinning script did not start, or ended")
        time.sleep(0.005)

    def undo() -> None:
        with contextlib.suppress(redis.ResponseError):  # (the script may have ended already)
            master.script_kill()
        thread.join(timeout=5.0)
        master.config_set("lua-time-limit", "5000")

    return undo


_FILLER_DB = 1
_LOADING = "-LOADING to every command: SIGKILL, restart from its data, which loads slowly"


def _in_parallel(actions: Sequence[Callable[[], object]]) -> None:
    threads = [threading.Thread(target=action, daemon=True) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _fill_aof(master: redis.Redis, keys: int, timeout: float = 20.0) -> None:
    """Give ``master`` ``keys`` filler keys (in its current database) and an AOF of plain
    commands that holds them."""
    master.config_set("aof-use-rdb-preamble", "no")
    # (redis-py has no typed method for DEBUG.)
    master.execute_command("DEBUG", "POPULATE", keys, "chaos:loading-filler", 1)  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + timeout

    def rewriting() -> bool:
        info = master.info("persistence")
        return bool(info.get("aof_rewrite_in_progress") or info.get("aof_rewrite_scheduled"))

    while rewriting() and time.monotonic() < deadline:
        time.sleep(0.01)
    master.bgrewriteaof()
    time.sleep(0.05)
    while rewriting():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the AOF rewrite did not end within {timeout}s")
        time.sleep(0.01)


def _answers_loading(probe: redis.Redis, start: threading.Thread, timeout: float) -> bool:
    """Whether the master ``probe`` reaches answers -LOADING before ``start`` (its start,
    which returns once it has loaded) ends."""
    deadline = time.monotonic() + timeout
    while start.is_alive() and time.monotonic() < deadline:
        try:
            probe.exists("chaos:loading-probe")
        except redis.BusyLoadingError:  # (redis-py's name for -LOADING)
            return True
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # not listening yet
        time.sleep(0.005)
    return False


#: How to make a master answer writes with each error reply; each returns its undo.
ERROR_REPLIES: dict[str, Callable[[redis.Redis], Callable[[], None]]] = {
    "OOM": _oom,
    "READONLY": _readonly,
    "MISCONF": _misconf,
    "BUSY": _busy,
}


class Nemesis:
    """Injects faults into ``cluster`` and records them with ``recorder``."""

    def __init__(
        self,
        cluster: Cluster,
        recorder: Recorder,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.recorder = recorder
        self._progress = progress or (lambda _message: None)
        self._open: dict[str, Callable[[], None]] = {}
        #: client -> the fault id of a pause that a tap started (stop_client_on_send).
        self.tap_faults: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- bookkeeping --

    def _begin(self, kind: str, target: str, detail: str, undo: Callable[[], None]) -> str:
        fault = self.recorder.fault_begin(kind, target, detail)
        with self._lock:
            self._open[fault] = undo
        self._progress(f"fault: {kind} {target}{f' ({detail})' if detail else ''}")
        return fault

    def end(self, fault: str) -> None:
        """Undo the fault ``fault`` and record its end; a no-op if it is over."""
        with self._lock:
            undo = self._open.pop(fault, None)
        if undo is None:
            return
        undo()
        self.recorder.fault_end(fault)

    def end_all(self) -> None:
        """End every fault still open, newest first (heal links, resume, restore clocks)."""
        with self._lock:
            faults = list(self._open)
        for fault in reversed(faults):
            self.end(fault)

    def _label(self, index: int) -> str:
        return self.cluster.label(index)

    # -- masters: crash, restart, pause --

    def kill(self, index: int, *, restart_wipe: bool = True) -> str:
        """SIGKILL master ``index``; :meth:`end` restarts it (empty, unless told otherwise)."""
        master = self.cluster.master(index)
        master.kill()

        def restart() -> None:
            self._reapply_clock(index)
            master.restart(wipe=restart_wipe)

        # The detail says whether its keys survive: chaos.margins reads it.
        detail = "SIGKILL, restart empty" if restart_wipe else "SIGKILL, restart from its data"
        return self._begin("kill", self._label(index), detail, restart)

    def crash_restart(self, index: int, *, wipe: bool, detail: str = "") -> None:
        """SIGKILL master ``index`` and start it again at once, empty (``wipe``) or from
        what it persisted."""
        master = self.cluster.master(index)
        what = "empty" if wipe else f"from its data ({master.persistence})"
        with self.recorder.fault("crash-restart", self._label(index), detail or f"SIGKILL, restart {what}"):
            self._progress(f"fault: crash {self._label(index)} and restart it {what}")
            master.kill()
            self._reapply_clock(index)
            master.restart(wipe=wipe)

    def power_off(self, index: int) -> str:
        """Cut master ``index``'s power: it dies, and its files keep only what it fsynced
        (:mod:`chaos.powerloss`); :meth:`end` starts it again from what they kept."""
        master = self.cluster.master(index)
        self._cut_power(index)

        def power_on() -> None:
            self._reapply_clock(index)
            master.start()

        return self._begin("power-loss", self._label(index), _POWER_CUT, power_on)

    def power_loss(self, index: int) -> list[FileLoss]:
        """Cut master ``index``'s power and start it again at once from what its disk kept;
        returns what each of its data files lost."""
        master = self.cluster.master(index)
        with self.recorder.fault("power-loss", self._label(index), _POWER_CUT):
            losses = self._cut_power(index)
            self._reapply_clock(index)
            master.start()
        return losses

    def _cut_power(self, index: int) -> list[FileLoss]:
        disk = self.cluster.disks.get(index)
        if disk is None:
            raise RuntimeError(
                f"master {self._label(index)} has no power-loss disk: build the cluster with power_loss=True"
            )
        losses = disk.cut()
        lost = ", ".join(str(loss) for loss in losses if loss.lost) or "nothing was unsynced"
        self._progress(f"fault: power loss on {self._label(index)}: {lost}")
        return losses

    def pause_master(self, index: int) -> str:
        """SIGSTOP master ``index`` (its connections stay open); :meth:`end` resumes it."""
        master = self.cluster.master(index)
        master.pause()
        return self._begin("pause", self._label(index), "SIGSTOP", master.resume)

    def error_replies(self, index: int, error: str) -> str:
        """Make master ``index`` answer every write with an error reply (:data:`ERROR_REPLIES`:
        ``OOM``, ``READONLY``, ``MISCONF``, ``BUSY``: every command); :meth:`end` makes it a
        writable master again."""
        undo = ERROR_REPLIES[error](self.cluster.direct(index))
        return self._begin("error-reply", self._label(index), f"-{error} to every write", undo)

    def loading(self, indexes: Sequence[int], *, keys: int = 200_000, timeout: float = 20.0) -> list[str]:
        """Restart masters ``indexes`` from their data, made slow to load, so that each
        answers ``-LOADING`` for a while (a master still reading its AOF after a restart);
        returns once every one of them has answered it, one fault per master. :meth:`end`
        waits until that master has loaded and removes the filler.

        The masters must persist to an AOF. Each first gets ``keys`` filler keys of its own
        in database 1 (``DEBUG POPULATE``) and an AOF rewritten as plain commands, since a
        master serves clients every thousand commands while it loads an AOF but only every
        2 MB of an RDB preamble; then all are killed and started at once, and load together.
        """
        masters = [self.cluster.master(i) for i in indexes]
        if any(master.persistence == "none" for master in masters):
            raise RuntimeError("a -LOADING fault needs masters that persist to an AOF")
        fillers = [self.cluster.direct(i, db=_FILLER_DB) for i in indexes]
        _in_parallel([functools.partial(_fill_aof, filler, keys) for filler in fillers])
        for master in masters:
            master.kill()
        starts: list[threading.Thread] = []
        for index, master in zip(indexes, masters, strict=True):
            self._reapply_clock(index)
            # start() returns once the master answers PING for real, i.e. when it has loaded.
            start = threading.Thread(target=master.start, name=f"chaos-loading-{self._label(index)}", daemon=True)
            start.start()
            starts.append(start)
        probes = [direct_client(master.url, timeout=0.2) for master in masters]
        try:
            for index, probe, start in zip(indexes, probes, starts, strict=True):
                if not _answers_loading(probe, start, timeout):
                    raise RuntimeError(
                        f"master {self._label(index)} never answered -LOADING: it loaded {keys} keys too soon"
                    )
        finally:
            for probe in probes:
                probe.close()
        faults = []
        for index, start, filler in zip(indexes, starts, fillers, strict=True):

            def loaded(start: threading.Thread = start, filler: redis.Redis = filler) -> None:
                start.join(timeout)
                filler.flushdb()

            faults.append(self._begin("error-reply", self._label(index), _LOADING, loaded))
        return faults

    def replication_stall(self, index: int, link: Link) -> str:
        """Hold back master ``index``'s replication stream on ``link`` (the replica's, from
        :meth:`Cluster.add_replica`): what it writes now is not replicated yet, as under
        asynchronous replication whose stream is in flight; :meth:`end` drops what was held
        with the connection."""
        link.blackhole()
        return self._begin(
            "replication-stall", self._label(index), "its stream to its replica held", lambda: link.heal(reset=True)
        )

    def failover(self, index: int, replica: LocalMaster, stall: str) -> str:
        """Master ``index`` dies and its replica, behind by what ``stall`` held, is promoted
        in its place: every client's link to ``index`` now leads to the replica, as a
        Sentinel-managed address would. Returns the kill's fault (its :meth:`end` restarts
        the old master empty, where nobody reaches it any more)."""
        kill = self.kill(index)
        self.end(stall)
        with self.recorder.fault("failover", self._label(index), "its replica promoted in its place"):
            self._progress(f"fault: {self._label(index)}'s replica promoted in its place")
            with direct_client(replica.url) as promoted:
                promoted.replicaof("NO", "ONE")
            for (_client, target), link in self.cluster.links.items():
                if target == index:
                    link.target = (replica.host, replica.port)
                    link.close_all()
        return kill

    def evict(self, index: int, key: str, *, timeout: float = 10.0) -> bool:
        """Fill master ``index`` past a ``maxmemory`` just above what it uses, under
        ``volatile-lru``, with keys of its own (each with a ttl, so each may be evicted),
        until it evicts ``key``; then take the limit and the filler away. True if ``key``
        was evicted. Every lock key has a ttl, so a volatile policy may evict it; the idle
        one of a holder that is working goes among the first."""
        master = self.cluster.direct(index)
        filler = f"chaos:evict-filler:{index}:"
        with self.recorder.fault("eviction", self._label(index), "maxmemory, volatile-lru, filled with keys"):
            self._progress(f"fault: {self._label(index)} evicts under memory pressure")
            used = int(master.info("memory")["used_memory"])
            master.config_set("maxmemory-policy", "volatile-lru")
            master.config_set("maxmemory", str(used + 256 * 1024))
            deadline = time.monotonic() + timeout
            written = 0
            try:
                while master.exists(key) and time.monotonic() < deadline:
                    with master.pipeline(transaction=False) as pipe:
                        for n in range(written, written + 64):
                            pipe.set(f"{filler}{n}", b"x" * 1024, px=600_000)
                        pipe.execute()
                    written += 64
            finally:
                master.config_set("maxmemory", "0")
                for start in range(0, written, 512):
                    master.delete(*[f"{filler}{n}" for n in range(start, min(start + 512, written))])
                master.config_set("maxmemory-policy", "noeviction")
        return not master.exists(key)

    def _reapply_clock(self, index: int) -> None:
        control = self.cluster.clocks.get(index)
        if control is not None:
            control.reapply()

    # -- clocks --

    def clock_jump(self, index: int, seconds: float, *, cause: str = "") -> str:
        """Step master ``index``'s wall clock; :meth:`end` steps it back as far, keeping
        whatever rate another fault set meanwhile. ``cause`` heads the recorded detail (a
        reactive nemesis says why it fired)."""
        control = self.cluster.clocks[index]
        control.jump(seconds)
        detail = f"{cause}; {seconds:+g}s" if cause else f"{seconds:+g}s"
        return self._begin("clock-jump", self._label(index), detail, lambda: control.jump(-seconds))

    def clock_rate(self, index: int, factor: float) -> str:
        """Run master ``index``'s clock ``factor`` times as fast; :meth:`end` puts it back to
        the real rate from where it is. Neither end steps the clock: the lead or lag it
        gained stays, as after a real oscillator's fault (stepping it back to the real time
        at the end would be a clock jump the fault never named)."""
        control = self.cluster.clocks[index]
        control.rate(factor)
        return self._begin("clock-rate", self._label(index), f"x{factor:g}", lambda: control.rate(1.0))

    def clock_strobe(self, index: int, seconds: float, period: float) -> str:
        """Flip master ``index``'s wall clock between ``+seconds`` and where it was every
        ``period`` (at least 10 ms), from a thread; :meth:`end` stops it on the unstepped side."""
        if not (math.isfinite(period) and period >= 0.01):
            raise ValueError(f"period must be at least 0.01 s, not {period!r}")
        control = self.cluster.clocks[index]
        stop = threading.Event()
        control.jump(seconds)

        def flip() -> None:
            ahead = True
            while not stop.wait(period):
                control.jump(-seconds if ahead else seconds)
                ahead = not ahead
            if ahead:
                control.jump(-seconds)

        thread = threading.Thread(target=flip, name=f"strobe-{self._label(index)}", daemon=True)
        thread.start()

        def undo() -> None:
            stop.set()
            thread.join()

        detail = f"+{seconds:g}s on and off every {period * 1000:g} ms"
        return self._begin("clock-strobe", self._label(index), detail, undo)

    def clock_slew(self, index: int, factor: float, seconds: float, step: float) -> str:
        """Ramp master ``index``'s clock rate from 1 to ``factor`` over ``seconds``, a move
        every ``step`` (at least 10 ms), from a thread; :meth:`end` puts the rate back to 1
        from where the clock is (the lead gained stays, as :meth:`clock_rate`'s)."""
        if not (math.isfinite(step) and step >= 0.01):
            raise ValueError(f"step must be at least 0.01 s, not {step!r}")
        control = self.cluster.clocks[index]
        stop = threading.Event()
        moves = max(1, math.ceil(seconds / step))

        def ramp() -> None:
            for move in range(1, moves + 1):
                if stop.wait(step):
                    return
                control.rate(1.0 + (factor - 1.0) * move / moves)

        thread = threading.Thread(target=ramp, name=f"slew-{self._label(index)}", daemon=True)
        thread.start()

        def undo() -> None:
            stop.set()
            thread.join()
            control.rate(1.0)

        return self._begin("clock-slew", self._label(index), f"x1 to x{factor:g} over {seconds:g}s", undo)

    # -- network --

    def partition(self, client: str, reach: Sequence[int]) -> str:
        """Cut ``client`` off from every master not in ``reach``; :meth:`end` heals.

        On the proxy: blackholed links (connects succeed, nothing comes back), and the heal
        drops what they held. On the kernel network: packets dropped both ways (connects
        time out), and the heal lets TCP deliver what it still retransmits."""
        cut = [i for i in range(self.cluster.nodes) if i not in reach]
        detail = f"reaches {self.cluster.labels(reach)} only"
        if self.cluster.network is not None:
            return self._kernel("partition", client, cut, "blackhole", detail)
        links = [self.cluster.link(client, i) for i in cut]
        for link in links:
            link.blackhole()

        def heal() -> None:
            for link in links:
                link.heal(reset=True)

        return self._begin("partition", client, detail, heal)

    def views(self, reach: dict[str, Sequence[int]]) -> list[str]:
        """Partition every client of ``reach`` to its own view (:func:`chaos.netns.topology`
        makes Jepsen's); returns one fault per client that lost a master."""
        return [
            self.partition(client, masters)
            for client, masters in reach.items()
            if len(set(masters)) < self.cluster.nodes
        ]

    def blackhole(self, client: str, index: int) -> str:
        """Stop one link; :meth:`end` heals it and delivers what it held (late requests:
        the proxy's held bytes, or TCP's retransmissions on the kernel network)."""
        if self.cluster.network is not None:
            return self._kernel("blackhole", client, [index], "blackhole", "")
        link = self.cluster.link(client, index)
        link.blackhole()
        return self._begin("blackhole", link.name, "", link.heal)

    def link_fault(self, client: str, indexes: Sequence[int], kind: FaultKind, *, percent: float = 0.0) -> str:
        """A kernel network fault (:data:`chaos.netns.FAULT_KINDS`) on ``client``'s links to
        ``indexes``, as one fault; :meth:`end` removes it."""
        detail = f"{percent:g}% of packets" if kind == "loss" else ""
        return self._kernel(kind, client, indexes, kind, detail, percent=percent)

    def half_open(self, client: str, index: int) -> str:
        """Leave ``client``'s connections to master ``index`` half-open: drop the link,
        restart the master empty behind it; :meth:`end` heals, and the client's next write
        on an old connection is answered with RST (the master knows none of them)."""
        fault = self._kernel("half-open", client, [index], "blackhole", "drop, restart empty, heal")
        master = self.cluster.master(index)
        self._reapply_clock(index)
        master.restart(wipe=True)
        return fault

    def _kernel(
        self, kind: str, client: str, indexes: Sequence[int], rule: FaultKind, detail: str, *, percent: float = 0.0
    ) -> str:
        target = client if len(indexes) != 1 else f"{client}-{self._label(indexes[0])}"
        addresses = [self.cluster.address(index) for index in indexes]
        detail = detail or f"to {self.cluster.labels(indexes)}"
        return self._rules(kind, client, target, addresses, rule=rule, detail=detail, percent=percent)

    def _rules(
        self,
        kind: str,
        client: str,
        target: str,
        addresses: Sequence[tuple[str, int]],
        *,
        rule: FaultKind,
        detail: str,
        percent: float = 0.0,
    ) -> str:
        network = self.cluster.network
        if network is None:
            raise RuntimeError(f"a {kind} fault needs the kernel network: this scenario runs on the proxy")
        # The rules' id is the recorder's fault id, known only once it is begun.
        holder: list[str] = []

        def heal() -> None:
            network.remove(client, holder[0])

        fault = self._begin(kind, target, detail, heal)
        holder.append(fault)
        for address, port in addresses:
            network.apply(client, fault, rule, address, port, percent=percent)
        return fault

    def resource_cut(self, client: str) -> str:
        """Drop every packet between ``client`` and the resource server, both ways (K2: a
        write delayed in the network); :meth:`end` heals, and TCP's retransmission then
        delivers what ``client`` sent meanwhile, late. The kernel network only: the proxy
        does not stand between clients and the resource."""
        resource = self.cluster.resource[0]
        address = [(resource.host, resource.port)]
        return self._rules("resource-cut", client, f"{client}-resource", address, rule="blackhole", detail="both ways")

    def latency(self, client: str, index: int, to_server: float, to_client: float = 0.0) -> str:
        """Delay one link; :meth:`end` removes the delay."""
        link = self.cluster.link(client, index)
        link.set_latency(to_server=to_server, to_client=to_client)

        def heal() -> None:
            link.set_latency(0.0, 0.0)

        detail = f"+{to_server * 1000:.0f}ms out, +{to_client * 1000:.0f}ms back"
        return self._begin("latency", link.name, detail, heal)

    def slow_links(self, client: str, indexes: Sequence[int], to_server: float) -> str:
        """Delay ``client``'s requests to several masters by ``to_server`` seconds, as one
        fault; :meth:`end` removes the delay."""
        links = [self.cluster.link(client, i) for i in indexes]
        for link in links:
            link.set_latency(to_server=to_server)

        def heal() -> None:
            for link in links:
                link.set_latency(0.0, 0.0)

        detail = f"+{to_server * 1000:.0f}ms to {self.cluster.labels(indexes)}"
        return self._begin("latency", client, detail, heal)

    # -- clients --

    def client_clock(self, client: str, rate: float) -> str:
        """Record that ``client``'s clock runs at ``rate``: set when its process starts
        (:func:`chaos.clock.client_env`) and for its whole life, so :meth:`end` only
        closes the window."""
        return self._begin("client-clock", client, f"x{rate:g}", lambda: None)

    def pause_client(self, client: str, detail: str = "SIGSTOP") -> str:
        """SIGSTOP a client process; :meth:`end` continues it."""
        process = self.cluster.clients[client]
        process.pause()
        return self._begin("client-pause", client, detail, process.resume)

    def kill_client(self, client: str) -> None:
        """SIGKILL a client process (a crash): whatever it holds is left to expire."""
        process = self.cluster.clients[client]
        with self.recorder.fault("client-kill", client, "SIGKILL"):
            self._progress(f"fault: kill client {client}")
            process.kill()

    def kill_client_until(self, client: str, replace: Callable[[], None]) -> str:
        """SIGKILL a client process (a crash: its locks end by expiry); :meth:`end` calls
        ``replace``, which starts whatever takes its place."""
        self.cluster.clients[client].kill()
        return self._begin("client-kill", client, "SIGKILL", replace)

    def stop_client_on_send(
        self, client: str, marker: bytes, detail: str, *, reply_delay: float = 0.03
    ) -> threading.Event:
        """SIGSTOP ``client`` between sending its requests and reading the replies.

        A tap on each of the client's links watches for a request containing ``marker``;
        when it has passed *every* link (the client writes its requests to all masters
        before it reads any reply), the client is stopped. Its replies are held back by
        ``reply_delay`` on every link, so that none can reach it before the stop.

        Returns an event set once it has fired; the pause is recorded then (its id in
        :attr:`tap_faults`) and ends with :meth:`end`, which continues the client.
        """
        process = self.cluster.clients[client]
        pid = process.pid
        fired = threading.Event()
        links = [self.cluster.link(client, i) for i in range(self.cluster.nodes)]
        seen: set[str] = set()

        def tap_for(link: Link) -> Callable[[bool, bytes], None]:
            def tap(to_server: bool, data: bytes) -> None:
                # On the proxy's loop thread: quick, and only once.
                if not to_server or marker not in data or fired.is_set():
                    return
                seen.add(link.name)
                if len(seen) < len(links):
                    return
                os.kill(pid, signal.SIGSTOP)
                process.paused = True
                fired.set()
                self.tap_faults[client] = self._begin("client-pause", client, detail, process.resume)
                for each in links:
                    each.set_tap(None)

            return tap

        for link in links:
            link.set_latency(to_client=reply_delay)
            link.set_tap(tap_for(link))
        return fired

    # -- operators --

    def force_release(self, name: str) -> redlock.LockInfo:
        """Delete lock ``name`` on every master whatever token holds it, as an operator's
        ``redlock release NAME --force`` does (a Redlock of the harness's own, straight to
        the masters); returns what it removed.

        Recorded as a fault (the timeline shows it) and, for each token removed, as a
        :class:`~chaos.history.ForceReleased` stamped when the call began: the holder of
        that token may no longer rely on the lock from then on, although nobody tells it.
        """
        began = self.recorder.now()
        with (
            self.recorder.fault("force-release", name, "Redlock.force_release"),
            redlock.Redlock(self.cluster.masters.urls, node_timeout=_OPERATOR_NODE_TIMEOUT) as rl,
        ):
            self._progress(f"fault: an operator force-releases {name!r}")
            removed = rl.force_release(name)
        for token in sorted({master.token for master in removed.masters if master.token is not None}):
            self.recorder.record(ForceReleased(time=began, client=OPERATOR, name=name, token=token))
        return removed
