"""Power loss for a redis-server: it dies, and its files keep only what it had fsynced.

A process crash (SIGKILL) loses nothing that Redis wrote: the kernel keeps the written
pages and writes them back later, so a master restarted after a crash finds every write it
acknowledged, whatever its ``appendfsync``. A power cut also loses the page cache: only
what was fsynced is on the disk. That difference is what ``appendfsync always`` buys over
``everysec``, and the harness models it the way Jepsen's LazyFS does: file data becomes
durable when the process fsyncs it; namespace operations (create, rename, unlink,
truncate) are durable at once.

How it is wired
    ``powerloss.c`` (next to this module) is an ``LD_PRELOAD`` shim: the master's
    ``open``/``fopen`` with ``O_CREAT``/``O_TRUNC``, ``fsync``/``fdatasync`` and
    ``ftruncate``/``truncate`` append one line each to a log in the master's dir (its
    header comment has the format and the model). :class:`Disk` replays that log: per
    file (inode), the size it had when its last fsync began, 0 if the master created it
    and never synced it, lowered by truncations. :meth:`Disk.cut` is the power cut: SIGKILL
    the master's process group (a rewrite child dies with it), then truncate each of its
    data files to that durable size. Redis appends only (to ``appendonly.aof``, to 7.x's
    ``appendonlydir/`` files), so the truncated file is exactly what the disk held; it
    loads a torn last command as ``aof-load-truncated`` allows (the default).

    The shim is compiled on first use (:func:`chaos.shims.build`), and rebuilt after any
    edit of its source.
    libfaketime (:mod:`chaos.clock`) may be preloaded too: the two libraries wrap
    different functions.

Limits (what is not modelled)
    * Namespace operations are durable at once; a real file system may lose a create or
      rename whose directory was never fsynced. Redis 7's manifest is written with fsync
      and a directory fsync, and 6.2's rewrite renames a file it fsynced, so they meet the
      stricter rule anyway; the harness does not test it.
    * Lost data is cut at the durable length, not torn within pages or reordered (LazyFS
      can inject those faults too; this harness does not).
    * Programs that overwrite data in place, open with ``O_SYNC``/``O_DSYNC`` or call
      ``sync``/``syncfs`` are outside the model: the last two are logged, and :meth:`Disk.cut`
      refuses to guess.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import signal

from redlock.servers import LocalMaster

from .shims import CompilerNotFound, build

__all__ = ["LOG_ENV", "CompilerNotFound", "Disk", "FileLoss", "shim_path"]

SOURCE = pathlib.Path(__file__).with_name("powerloss.c")
#: Where the shim appends its records (the variable it reads).
LOG_ENV = "REDLOCK_POWERLOSS_LOG"
#: The log's name in the master's dir (no data-file pattern of redlock.servers matches it).
LOG_NAME = "powerloss.log"


def shim_path() -> str:
    """The compiled shim, built on first use (and after any edit of its source)."""
    return build(SOURCE.name, "the power-loss fault")


@dataclasses.dataclass(frozen=True)
class FileLoss:
    """What a power cut did to one data file: ``size`` bytes before, ``kept`` after."""

    path: pathlib.Path
    size: int
    kept: int

    @property
    def lost(self) -> int:
        return self.size - self.kept

    def __str__(self) -> str:
        return f"{self.path.name}: {self.lost} of {self.size} bytes unsynced, lost"


class Disk:
    """The disk under one master: what it has made durable, and the cut that keeps only that.

    Create it before the master's first start and call :meth:`install` to have the master
    start with the shim; :meth:`cut` is the power loss (the master is down afterwards;
    ``master.start()`` brings it back from what the disk kept).
    """

    def __init__(self, master: LocalMaster) -> None:
        self.master = master
        self.log = master.dir / LOG_NAME
        # Whatever is there now counts as on the disk: the master never ran, or a cut just
        # left exactly the durable state.
        self._mark_durable()

    def install(self) -> None:
        """Add the shim to the master's environment (after any other preload, e.g. the
        clock's, which it keeps); applies from its next start."""
        env = self.master.env
        preload = env.get("LD_PRELOAD", os.environ.get("LD_PRELOAD", ""))
        env["LD_PRELOAD"] = f"{shim_path()}:{preload}" if preload else shim_path()
        env[LOG_ENV] = str(self.log.resolve())

    def durable(self) -> dict[tuple[int, int], int]:
        """The durable size of each file the log knows, by (device, inode)."""
        sizes: dict[tuple[int, int], int] = {}
        unsupported: list[str] = []
        text = self.log.read_text(encoding="ascii", errors="replace") if self.log.exists() else ""
        for line in text.splitlines():
            op, _, rest = line.partition(" ")
            if op == "X":
                unsupported.append(rest)
                continue
            fields = rest.split()
            # A line cut short by the SIGKILL (it never is: one write per line) is skipped.
            if op not in ("S", "T") or len(fields) != 3:
                continue
            key, size = (int(fields[0]), int(fields[1])), int(fields[2])
            sizes[key] = size if op == "S" else min(sizes.get(key, size), size)
        if unsupported:
            raise RuntimeError(
                f"master {self.master.index} did what the power-loss model cannot follow: "
                f"{'; '.join(sorted(set(unsupported)))}"
            )
        return sizes

    def cut(self) -> list[FileLoss]:
        """Power loss: SIGKILL the master and everything it forked, then truncate each of its
        data files to what was durable. Returns what each file lost."""
        pid = self.master.pid
        # Started in a session of its own, its group is it and its fork children (a rewrite).
        with contextlib.suppress(ProcessLookupError):
            if pid is not None and os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
        self.master.kill()
        durable = self.durable()
        losses = []
        for path in self._data_files():
            stat = path.stat()
            kept = durable.get((stat.st_dev, stat.st_ino))
            if kept is None:
                raise RuntimeError(
                    f"{path} is not in {self.log}: the shim did not see it created, so what "
                    "a power cut would keep of it is unknown"
                )
            kept = min(kept, stat.st_size)
            if kept < stat.st_size:
                os.truncate(path, kept)
            losses.append(FileLoss(path, stat.st_size, kept))
        self._mark_durable()
        return losses

    def _data_files(self) -> list[pathlib.Path]:
        found = []
        for top in self.master.data_files():
            found += sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else [top]
        return found

    def _mark_durable(self) -> None:
        """Start a new log in which every data file is durable at its current size."""
        self.master.dir.mkdir(parents=True, exist_ok=True)
        lines = []
        for path in self._data_files():
            stat = path.stat()
            lines.append(f"S {stat.st_dev} {stat.st_ino} {stat.st_size}\n")
        staging = self.log.with_name(f".{LOG_NAME}.tmp")
        staging.write_text("".join(lines), encoding="ascii")
        os.replace(staging, self.log)
