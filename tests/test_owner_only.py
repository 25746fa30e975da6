"""Local masters only their owner can use.

The attacker is another user of the machine: the masters' TCP port is on loopback, where
every local process can connect, and their command lines and temp dirs are on view. These
tests connect as that user would (a raw socket, no password), send the commands that would
turn a master into a file writer (CONFIG SET dir + SAVE, DEBUG, MODULE LOAD, REPLICAOF), and
look for the secret wherever a local user can read: ``/proc/PID/cmdline``, ``ps``, the files
the masters write.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import signal
import socket
import stat
import subprocess
import sys

import pytest
import redis

import redlock
import redlock.asyncio
from redlock._process import proc as _proc
from redlock.servers import LocalMasters

from .cli_helpers import PATIENCE, gone, wait_until
from .cli_helpers import script as installed
from .conftest import MastersFactory, unique

#: What a master says to a command it will not run: renamed away, it is unknown.
UNKNOWN = "unknown command"


def raw_reply(connect: tuple[str, int] | str, *commands: bytes) -> list[bytes]:
    """The first line of the reply to each of ``commands`` (inline commands), as a local user
    without the password gets them, over TCP (host, port) or a unix socket (a path)."""
    family = socket.AF_UNIX if isinstance(connect, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(PATIENCE)
        sock.connect(connect)
        sock.sendall(b"".join(command + b"\r\n" for command in commands))
        with sock.makefile("rb") as reader:
            return [reader.readline().rstrip(b"\r\n") for _ in commands]


def test_a_connection_without_the_password_is_refused(server_kind: str, matrix_masters: MastersFactory) -> None:
    masters = matrix_masters(2, unix_socket=True)
    for master in masters:
        assert master.password is not None
        assert master.password in master.url  # the URL, the only place it is given
        for way in ((master.host, master.port), str(master.unix_socket_path)):
            replies = raw_reply(way, b"PING", b"GET k", b"SET k v", b'EVAL "return 1" 0')
            assert all(reply.startswith(b"-NOAUTH") for reply in replies), (way, replies)
            assert raw_reply(way, b"AUTH not-the-password")[0].startswith((b"-WRONGPASS", b"-ERR invalid password"))
    # Two masters of one set: two passwords, so that one URL opens one master only.
    assert masters[0].password != masters[1].password


def test_administrative_commands_are_gone_even_with_the_password(
    server_kind: str, matrix_masters: MastersFactory, tmp_path: pathlib.Path
) -> None:
    master = matrix_masters(1)[0]
    target = tmp_path / "written-by-the-attacker"
    attempts: list[tuple[str, ...]] = [
        ("CONFIG", "SET", "dir", str(tmp_path)),
        ("CONFIG", "SET", "dbfilename", target.name),
        ("CONFIG", "GET", "*"),
        ("SAVE",),
        ("BGSAVE",),
        ("BGREWRITEAOF",),
        ("DEBUG", "SLEEP", "0"),
        ("MODULE", "LOAD", str(tmp_path / "evil.so")),
        ("REPLICAOF", "127.0.0.1", "1"),
        ("SLAVEOF", "127.0.0.1", "1"),
        ("FLUSHALL",),
        ("MONITOR",),
        ("SHUTDOWN", "NOSAVE"),
    ]
    # ACL stays (ACL users, WHOAMI), and writes no file: the masters have no aclfile.
    with redis.Redis.from_url(master.url, socket_timeout=PATIENCE) as client, pytest.raises(redis.ResponseError):
        client.execute_command("ACL", "SAVE")
    with redis.Redis.from_url(master.url, socket_timeout=PATIENCE) as client:
        client.set("kept", "1")
        for attempt in attempts:
            with pytest.raises(redis.ResponseError, match=f"(?i){UNKNOWN}"):
                client.execute_command(*attempt)
        # Nor from a script: a renamed command is not in the table Lua calls into either.
        with pytest.raises(redis.ResponseError, match=r"(?i)unknown"):
            client.eval("return redis.call('config', 'set', 'dir', ARGV[1])", 0, str(tmp_path))
        assert client.get("kept") == b"1"  # FLUSHALL did nothing
        assert client.ping()  # SHUTDOWN did nothing
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_password_is_on_no_command_line_and_in_no_file(server_kind: str, matrix_masters: MastersFactory) -> None:
    masters = matrix_masters(2, unix_socket=True)
    for master in masters:
        assert master.pid is not None
        assert master.password is not None
        secret = master.password.encode()
        assert secret not in pathlib.Path(f"/proc/{master.pid}/cmdline").read_bytes()
        # As another user sees it: ps shows every process's arguments.
        shown = subprocess.run(["ps", "-o", "args=", "-p", str(master.pid)], capture_output=True, check=True).stdout
        assert shown.strip()
        assert secret not in shown
        assert secret not in pathlib.Path(f"/proc/{master.pid}/environ").read_bytes()
        for path in masters.dir.rglob("*"):
            if path.is_file():
                assert secret not in path.read_bytes(), path
    # Their dirs, and the sockets in them, are the owner's alone.
    assert stat.S_IMODE(masters.dir.stat().st_mode) == 0o700
    for master in masters:
        assert stat.S_IMODE(master.dir.stat().st_mode) == 0o700
        socket_path = master.unix_socket_path
        assert socket_path is not None
        assert stat.S_IMODE(socket_path.stat().st_mode) & 0o077 == 0


def test_the_urls_work_wherever_urls_are_taken(fresh_masters: MastersFactory, tmp_path: pathlib.Path) -> None:
    masters = fresh_masters(3)
    name = unique()
    with redlock.Redlock(masters.urls) as rl, rl.lock(name, ttl=10.0) as lock:
        assert lock.token is not None

    async def through_asyncio() -> str | None:
        async with redlock.asyncio.Redlock(masters.urls) as arl, arl.lock(name, ttl=10.0) as alock:
            return alock.token

    assert asyncio.run(through_asyncio()) is not None
    joined = ",".join(masters.urls)
    urls_file = tmp_path / "masters"
    urls_file.write_text("\n".join(masters.urls) + "\n")
    urls_file.chmod(0o600)
    redlock_command = str(installed("redlock"))
    env_without = {key: value for key, value in os.environ.items() if key != "REDLOCK_MASTERS"}
    for argv, env in (
        ([redlock_command, "doctor", "--masters", joined], env_without),
        ([redlock_command, "doctor"], {**env_without, "REDLOCK_MASTERS": joined}),
        ([redlock_command, "doctor", "--masters-file", str(urls_file)], env_without),
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=PATIENCE, check=False)
        assert done.returncode == 0, (argv[1:], done.stdout, done.stderr)
        assert "3 of 3 masters usable" in done.stdout


@pytest.mark.parametrize("password", ["-like-an-option", 'with "quotes", spaces and \\ a backslash', "new\nline"])
def test_any_password_reaches_the_server_whole(password: str, fresh_masters: MastersFactory) -> None:
    master = fresh_masters(1, password=password)[0]
    with redis.Redis.from_url(master.url) as client:
        assert client.ping()
    assert raw_reply((master.host, master.port), b"PING")[0].startswith(b"-NOAUTH")


def test_repr_shows_no_password(fresh_masters: MastersFactory) -> None:
    masters = fresh_masters(2, unix_socket=True)
    for shown in (repr(masters), *map(repr, masters)):
        assert ":***@" in shown
        assert all(master.password is not None and master.password not in shown for master in masters)


def test_owner_only_false_keeps_every_command_and_no_password(fresh_masters: MastersFactory) -> None:
    master = fresh_masters(1, owner_only=False)[0]
    assert master.password is None
    assert raw_reply((master.host, master.port), b"PING") == [b"+PONG"]
    with redis.Redis.from_url(master.url) as client:
        assert client.config_get("appendonly") == {"appendonly": "no"}


# --- section 6: the dirs a killed set leaves behind ------------------------------------------


@pytest.mark.servers
def test_a_sigkilled_servers_dir_is_removed_by_the_next_start(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = subprocess.Popen(
        [sys.executable, "-m", "redlock", "servers", "-n", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert command.stdout is not None
        assert command.stdout.readline().startswith("export REDLOCK_MASTERS=")
        (left,) = tmp_path.glob("redlock-masters-*")
        command.send_signal(signal.SIGKILL)
        command.wait()
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
        if command.stdout is not None:
            command.stdout.close()
    assert left.is_dir()  # SIGKILL runs no clean-up
    # Its masters die with it (PR_SET_PDEATHSIG): nothing runs in the dir any more.
    wait_until(lambda: not any(_serves_from(pid, left) for pid in _proc.pids()), "the killed set's masters are gone")
    # A dir of a set that runs is kept, whoever starts next.
    with LocalMasters(1, base_dir=tmp_path) as running, LocalMasters(1, base_dir=tmp_path) as later:
        assert not left.exists()
        assert running.dir.is_dir()
        assert later.dir.is_dir()


def _serves_from(pid: int, path: pathlib.Path) -> bool:
    try:
        return str(path).encode() in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes() and not gone(pid)
    except OSError:
        return False


@pytest.mark.servers
def test_a_dir_whose_pid_was_reused_is_stale_and_others_are_kept(tmp_path: pathlib.Path) -> None:
    me = _proc.stat(os.getpid())
    assert me is not None
    namespace = os.stat("/proc/self/ns/pid").st_ino
    marks = {
        "reused": f"{os.getpid()} {me.starttime + 1} {namespace}",  # our pid, another process's start
        "ours": f"{os.getpid()} {me.starttime} {namespace}",  # this very process: alive
        "elsewhere": f"1 0 {namespace + 1}",  # another pid namespace: nothing certain
        "garbled": "not a mark",
    }
    for name, mark in marks.items():
        path = tmp_path / f"redlock-masters-{name}"
        path.mkdir(mode=0o700)
        (path / "owner").write_text(mark + "\n")
    (tmp_path / "redlock-masters-unmarked").mkdir(mode=0o700)  # being made, or older than marks
    with LocalMasters(1, base_dir=tmp_path) as masters:
        kept = sorted(path.name for path in tmp_path.iterdir() if path != masters.dir)
    assert kept == [f"redlock-masters-{name}" for name in ("elsewhere", "garbled", "ours", "unmarked")]
    shutil.rmtree(tmp_path / "redlock-masters-ours")
