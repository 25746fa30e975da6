"""The command line's secrets and what it prints.

Passwords and tokens given on the command line are in the process list for every local user
to read: there are ways to keep them off it (a private file, the environment), a warning
when they are on it, and a command run by ``exec`` does not inherit them unasked. What the
masters hold is whoever wrote it's choice: ``status`` and ``release --force`` show it escaped,
so that a value holding terminal escapes cannot drive the operator's terminal.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from redlock import Redlock
from redlock._cli.console import printable
from redlock._protocol.urls import redacted
from redlock.cli import ENV_MASTERS, ExitCode, main

from .cli_helpers import PATIENCE, gone, unique, wait_until
from .cli_helpers import script as installed
from .conftest import eventually, raw_clients

PASSWORD = "hunter2-secret"
#: A value that, printed raw, clears the screen, retitles the window, rings the bell and
#: hides the rest of its line (a carriage return, then a right-to-left override).
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\rok\u202eevil\x9b31m"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def urls(master_urls: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv(ENV_MASTERS, ",".join(master_urls))
    return master_urls


def private(path: pathlib.Path, text: str, mode: int = 0o600) -> pathlib.Path:
    path.write_text(text)
    path.chmod(mode)
    return path


# --- section 4: secrets on the command line, in errors and in children -------------------------


@pytest.mark.parametrize(
    "url", [f"redis://:{PASSWORD}@127.0.0.1:notaport", f"redis://:{PASSWORD}#x@127.0.0.1:6379", "h:6379"]
)
def test_a_malformed_url_is_refused_without_showing_its_password(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(ENV_MASTERS, raising=False)
    code, out, err = run(capsys, "status", "x", "--masters", f"redis://:{PASSWORD}@127.0.0.1:1,{url}")
    assert code == ExitCode.USAGE
    assert PASSWORD not in out + err
    assert "masters[1]" in err
    # An empty URL among them: named as the list, each URL's password hidden.
    code, _, err = run(capsys, "status", "x", "--masters", f"redis://:{PASSWORD}@127.0.0.1:1,,{url}")
    assert code == ExitCode.USAGE
    assert "empty master URL" in err
    assert PASSWORD not in err


def test_a_password_on_the_command_line_is_warned_about_once(
    urls: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    code, _, err = run(capsys, "status", name, "--masters", ",".join(urls))
    assert code == ExitCode.NOT_HELD
    # The shared masters are local ones with passwords, or containers without.
    with_password = any(redacted(url) != url for url in urls)
    assert err.count("--masters gives a password on the command line") == (1 if with_password else 0), err
    # The same URLs from the environment, or from a file of the user's own: no warning.
    code, _, err = run(capsys, "status", name)
    assert (code, err) == (ExitCode.NOT_HELD, "")
    masters_file = private(tmp_path / "masters", "# the masters\n" + "\n".join(urls) + "\n")
    code, _, err = run(capsys, "status", name, "--masters-file", str(masters_file))
    assert (code, err) == (ExitCode.NOT_HELD, "")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_a_masters_or_token_file_others_may_read_or_write_is_refused(
    mode: int, urls: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    masters_file = private(tmp_path / "masters", ",".join(urls), mode)
    code, out, err = run(capsys, "status", unique(), "--masters-file", str(masters_file))
    assert (code, out) == (ExitCode.USAGE, "")
    assert f"mode {mode:03o}" in err
    assert "chmod 600" in err
    token_file = private(tmp_path / "token", "a" * 40, mode)
    code, _, err = run(capsys, "release", unique(), "--token-file", str(token_file))
    assert code == ExitCode.USAGE
    assert "chmod 600" in err


def test_release_and_extend_read_the_token_from_a_file_or_stdin(
    urls: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    with Redlock(urls) as rl:
        lock = rl.lock(name, ttl=30.0)
        assert lock.acquire()
        token_file = private(tmp_path / "token", f"{lock.token}\n")
        code, out, _ = run(capsys, "extend", name, "--token-file", str(token_file), "--ttl", "20")
        assert code == ExitCode.OK
        assert 0 < float(out) <= 20
        assert run(capsys, "release", name, "TOKEN", "--token-file", str(token_file))[0] == ExitCode.USAGE
        released = subprocess.run(
            [str(installed("redlock")), "release", name, "--token-file", "-"],
            input=f"{lock.token}\n",
            capture_output=True,
            text=True,
            timeout=PATIENCE,
            check=False,
        )
        assert released.returncode == ExitCode.OK, released.stderr
        assert rl.inspect(name).holder is None
        # Released by the token read: a second release finds it gone.
        assert run(capsys, "release", name, "--token-file", str(token_file))[0] == ExitCode.LOST


@pytest.mark.parametrize("asked", [False, True])
def test_exec_hands_the_command_the_masters_only_when_asked(
    asked: bool, urls: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = tmp_path / "env.json"
    child = f"import json, os; json.dump(dict(os.environ), open({str(seen)!r}, 'w'))"
    flags = ["--pass-masters"] if asked else []
    code, _, _ = run(capsys, "exec", *flags, unique(), "--", sys.executable, "-c", child)
    assert code == 0
    environment = json.loads(seen.read_text())
    assert environment.get(ENV_MASTERS) == (",".join(urls) if asked else None)
    assert "REDLOCK_TOKEN" in environment  # what it is told about its lock stays


# --- section 5: bytes from masters shown escaped -----------------------------------------------


@pytest.fixture
def hostile_holder(urls: list[str]) -> Iterator[str]:
    """A lock name whose value on every master holds terminal escapes."""
    name = unique()
    with raw_clients(urls, timeout=5) as clients:
        for client in clients:
            client.set(name, HOSTILE, px=60_000)
        try:
            yield name
        finally:
            for client in clients:
                client.delete(name)


def test_status_shows_a_hostile_value_escaped(hostile_holder: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "status", hostile_holder)
    assert code == ExitCode.OK
    assert printable(HOSTILE) in out
    assert not any(char in out for char in "\x1b\x07\r\u202e\x9b")
    code, out, _ = run(capsys, "status", hostile_holder, "--json")
    report = json.loads(out)
    assert code == ExitCode.OK
    # Decoded, the JSON holds the escaped text too: `jq -r .holder` prints no ESC.
    assert report["holder"] == printable(HOSTILE)
    assert {master["token"] for master in report["masters"] if master["reachable"]} == {printable(HOSTILE)}
    assert "\x1b" not in json.dumps(report, ensure_ascii=False)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_forced_release_shows_a_hostile_value_escaped(
    as_json: bool, hostile_holder: str, urls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "release", hostile_holder, "--force", "--yes", *(["--json"] if as_json else []))
    assert code == ExitCode.OK
    if as_json:
        report = json.loads(out)
        # (A master slower than the node timeout under load is not read: no token from it.)
        tokens = {master["token"] for master in report["masters"] if master["reachable"]}
        assert {report["holder"], *tokens} == {printable(HOSTILE)}
        out = json.dumps(report, ensure_ascii=False)  # what `jq -r` would print, unescaped
    else:
        assert printable(HOSTILE) in out
    assert not any(char in out for char in "\x1b\x07\r\u202e\x9b")
    with raw_clients(urls) as clients:
        # (A master past the node timeout still runs the delete it was sent.)
        assert eventually(lambda: not any(client.exists(hostile_holder) for client in clients))


# --- section 6: --log ----------------------------------------------------------------------------


@pytest.mark.servers
def test_servers_log_is_private_and_a_symlink_there_is_refused(tmp_path: pathlib.Path) -> None:
    precious = private(tmp_path / "precious", "keep me\n")
    link = tmp_path / "servers.log"
    link.symlink_to(precious)
    command = [str(installed("redlock")), "servers", "-n", "1", "--detach", "--log", str(link)]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=PATIENCE, check=False)
    if "REDLOCK_SERVERS_PID=" in refused.stdout:  # not refused: its servers must not outlive the test
        leaked = int(refused.stdout.split("REDLOCK_SERVERS_PID=")[1].split()[0])
        os.kill(leaked, signal.SIGTERM)
        wait_until(lambda: gone(leaked), "the background servers stopped")
    assert refused.returncode == ExitCode.USAGE, refused.stderr
    assert "symlink" in refused.stderr
    assert refused.stdout == ""
    assert precious.read_text() == "keep me\n"
    link.unlink()
    started = subprocess.run(command, capture_output=True, text=True, timeout=PATIENCE, check=True)
    pid = int(started.stdout.split("REDLOCK_SERVERS_PID=")[1].split()[0])
    try:
        assert (link.stat().st_mode & 0o777) == 0o600
        urls = started.stdout.split(f"{ENV_MASTERS}=")[1].split()[0]
        with redis.Redis.from_url(urls.split(",")[0]) as client:
            assert client.ping()
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: gone(pid), "the background servers stopped")
