"""Nemeses: the faults a scenario injects, each recorded as a window in the history.

Every method acts on the real processes or links of a :class:`~chaos.cluster.Cluster` and
records a :class:`~chaos.history.FaultBegin` / :class:`~chaos.history.FaultEnd` pair with
the harness's :class:`~chaos.history.Recorder`, so the checkers can name the faults around
a violation and the timeline can shade them. Faults that last (a killed master, a paused
one, a clock off, a partition) return their fault id, to be passed to the method that
ends them; :meth:`Nemesis.end_all` ends whatever is still open at the end of a run.

Masters are named by index (0 is A); clients by name ("c1").
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .cluster import Cluster
from .history import Recorder
from .proxy import Link

__all__ = ["AofSnapshot", "Nemesis"]

#: What a master keeps its append-only file in: 6.2's appendonly.aof, 7.x's appendonlydir/.
_AOF_PATTERNS = ("appendonly*",)


@dataclass(frozen=True)
class AofSnapshot:
    """A copy of a master's append-only file(s) as they were at ``time``."""

    master: int
    path: pathlib.Path
    time: float
    size: int


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
        self._snapshots = pathlib.Path(tempfile.mkdtemp(prefix="aof-", dir=cluster.workdir))

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

        return self._begin("kill", self._label(index), "SIGKILL", restart)

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

    def snapshot_aof(self, index: int) -> AofSnapshot:
        """Copy master ``index``'s append-only file(s) now, for a later :meth:`power_loss`."""
        master = self.cluster.master(index)
        target = self._snapshots / f"{self._label(index)}-{time.monotonic_ns()}"
        target.mkdir()
        size = 0
        for pattern in _AOF_PATTERNS:
            for path in master.dir.glob(pattern):
                if path.is_dir():
                    shutil.copytree(path, target / path.name)
                    size += sum(p.stat().st_size for p in (target / path.name).rglob("*") if p.is_file())
                else:
                    shutil.copy2(path, target / path.name)
                    size += path.stat().st_size
        return AofSnapshot(index, target, time.monotonic(), size)

    def power_loss(self, snapshot: AofSnapshot) -> None:
        """A power cut on master ``snapshot.master``: it dies (SIGKILL) and comes back with
        its append-only file as it was at the snapshot, losing every write since, which is
        what ``appendfsync everysec`` risks (up to about a second); a plain SIGKILL cannot
        show it, since Redis writes to the OS before it replies."""
        index = snapshot.master
        master = self.cluster.master(index)
        lost = time.monotonic() - snapshot.time
        detail = f"SIGKILL, restart from the AOF as of {lost:.2f}s earlier"
        with self.recorder.fault("power-loss", self._label(index), detail):
            self._progress(f"fault: power loss on {self._label(index)} ({detail})")
            master.kill()
            for pattern in _AOF_PATTERNS:
                for path in master.dir.glob(pattern):
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
            for path in snapshot.path.iterdir():
                if path.is_dir():
                    shutil.copytree(path, master.dir / path.name)
                else:
                    shutil.copy2(path, master.dir / path.name)
            self._reapply_clock(index)
            master.start()

    def pause_master(self, index: int) -> str:
        """SIGSTOP master ``index`` (its connections stay open); :meth:`end` resumes it."""
        master = self.cluster.master(index)
        master.pause()
        return self._begin("pause", self._label(index), "SIGSTOP", master.resume)

    def _reapply_clock(self, index: int) -> None:
        control = self.cluster.clocks.get(index)
        if control is not None:
            control.reapply()

    # -- clocks --

    def clock_jump(self, index: int, seconds: float) -> str:
        """Step master ``index``'s wall clock; :meth:`end` puts it back to real time."""
        control = self.cluster.clocks[index]
        control.jump(seconds)
        return self._begin("clock-jump", self._label(index), f"{seconds:+g}s", control.reset)

    def clock_rate(self, index: int, factor: float) -> str:
        """Run master ``index``'s clock ``factor`` times as fast; :meth:`end` resets it."""
        control = self.cluster.clocks[index]
        control.rate(factor)
        return self._begin("clock-rate", self._label(index), f"x{factor:g}", control.reset)

    # -- network --

    def partition(self, client: str, reach: Sequence[int]) -> str:
        """Cut ``client`` off from every master not in ``reach`` (blackholed links: its
        connects succeed, nothing comes back); :meth:`end` heals, dropping held bytes."""
        cut = [i for i in range(self.cluster.nodes) if i not in reach]
        links = [self.cluster.link(client, i) for i in cut]
        for link in links:
            link.blackhole()

        def heal() -> None:
            for link in links:
                link.heal(reset=True)

        return self._begin("partition", client, f"reaches {self.cluster.labels(reach)} only", heal)

    def blackhole(self, client: str, index: int) -> str:
        """Stop one link; :meth:`end` heals it and delivers what it held (late requests)."""
        link = self.cluster.link(client, index)
        link.blackhole()
        return self._begin("blackhole", link.name, "", link.heal)

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

    def pause_client(self, client: str, detail: str = "SIGSTOP") -> str:
        """SIGSTOP a client process; :meth:`end` continues it."""
        process = self.cluster.clients[client]
        process.pause()
        return self._begin("client-pause", client, detail, process.resume)

    def kill_client(self, client: str, replace: Callable[[], None]) -> str:
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
