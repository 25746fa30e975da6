"""The ``redlock`` command line, on real masters.

Most tests call ``main([...])`` in this process; a few run the installed console script in
a subprocess, for what only a real process shows: its exit status, its stderr, and how it
handles signals. Waits are bounded generously and never asserted on: a loaded machine may
make a test slower, not make it fail.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import pty
import select
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from redlock import Redlock
from redlock.cli import ENV_MASTERS, EXIT_CODES, ExitCode, main

#: Generous bound on every wait: these tests check outcomes, not speed.
PATIENCE = 30.0


def unique(prefix: str = "cli") -> str:
    return f"{prefix}:{uuid.uuid4().hex}"


def closed_ports(n: int) -> list[str]:
    """URLs of loopback ports nothing listens on (bound, then released): connection refused."""
    probes = [socket.socket() for _ in range(n)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [f"redis://127.0.0.1:{probe.getsockname()[1]}" for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {PATIENCE}s waiting until {what}")
        time.sleep(0.01)


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler installed for ``signum`` (SigCgt in /proc)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts: it runs no more code)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


@pytest.fixture
def urls(master_urls: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shared masters, also exported as $REDLOCK_MASTERS for main() and subprocesses."""
    monkeypatch.setenv(ENV_MASTERS, ",".join(master_urls))
    return master_urls


@pytest.fixture
def raw(urls: list[str]) -> Iterator[list[redis.Redis]]:
    clients = [redis.Redis.from_url(url, socket_timeout=5) for url in urls]
    yield clients
    for client in clients:
        client.close()


@pytest.fixture
def rl(urls: list[str]) -> Iterator[Redlock]:
    with Redlock(urls) as client:
        yield client


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("redlock: ")
    assert "Traceback" not in err
    return lines[0]


# --- help and usage errors --------------------------------------------------------------------


def test_help_lists_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "exit codes:" in out
    for exit_code, meaning in EXIT_CODES:
        assert f"{exit_code}  {meaning.replace('`', '')[:30]}" in out


def test_exit_codes_table_matches_the_enum() -> None:
    listed = {code for code, _ in EXIT_CODES if code.isdigit()}
    assert listed == {str(int(code)) for code in ExitCode if code != ExitCode.SIGNALLED}


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["acquire", "x", "--ttl", "ten"], id="duration-not-a-number"),
        pytest.param(["acquire", "x", "--ttl", "0"], id="zero-ttl"),
        pytest.param(["acquire", "x", "--timeout", "-1"], id="negative-timeout"),
        pytest.param(["acquire", "x", "--ttl", "nan"], id="nan-ttl"),
        pytest.param(["acquire", "x", "--ttl", "0.01"], id="ttl-below-node-timeout"),
        pytest.param(["acquire", "x", "--masters", "http://127.0.0.1:1"], id="bad-url-scheme"),
        pytest.param(["acquire", "x", "--masters", "redis://127.0.0.1:1,,redis://127.0.0.1:2"], id="empty-url"),
        pytest.param(["status", "x", "--masters", "redis://127.0.0.1:1,redis://127.0.0.1:1"], id="duplicate-url"),
        pytest.param(["release", "x", ""], id="empty-token"),
        pytest.param(["acquire", ""], id="empty-name"),
        pytest.param(["exec", "x"], id="exec-without-command"),
        pytest.param(["exec", "x", "--ttl", "0.1", "--", "true"], id="exec-ttl-too-short-to-extend"),
        pytest.param(["servers", "-n", "0"], id="zero-servers"),
        pytest.param(["frobnicate"], id="unknown-command"),
        pytest.param([], id="no-command"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], urls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == ExitCode.USAGE
    assert out == ""
    one_line_error(err)


def test_no_masters_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(ENV_MASTERS, raising=False)
    code, _, err = run(capsys, "status", "x")
    assert code == ExitCode.USAGE
    assert ENV_MASTERS in one_line_error(err)


# --- acquire, release, status -------------------------------------------------------------------


def test_acquire_status_release_round_trip(urls: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    name = unique()
    code, out, _ = run(capsys, "acquire", name, "--ttl", "30")
    assert code == ExitCode.OK
    token, validity = out.split()
    assert 0 < float(validity) <= 30

    code, out, _ = run(capsys, "status", name, "--json")
    report = json.loads(out)
    assert code == ExitCode.OK
    assert report["verdict"] == "held"
    assert report["holder"] == token
    # A majority at least: an acquire returns once a majority granted it, and a master that
    # was slow to connect may not have the token.
    assert report["votes"] > len(urls) // 2
    holding = [m for m in report["masters"] if m["token"] == token]
    assert len(holding) == report["votes"]
    assert all(0 < m["pttl_ms"] <= 30_000 for m in holding)

    assert run(capsys, "release", name, token)[0] == ExitCode.OK
    code, out, _ = run(capsys, "status", name, "--json")
    assert code == ExitCode.NOT_HELD
    assert json.loads(out)["verdict"] == "free"


def test_acquire_json_and_masters_flag_over_env(
    urls: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A wrong environment must not matter when --masters is given.
    monkeypatch.setenv(ENV_MASTERS, ",".join(closed_ports(3)))
    name = unique()
    code, out, _ = run(capsys, "acquire", name, "--json", "--masters", ",".join(urls))
    assert code == ExitCode.OK
    acquired = json.loads(out)
    assert acquired["name"] == name
    assert acquired["ttl"] == 10.0
    assert run(capsys, "release", name, acquired["token"], "--masters", ",".join(urls))[0] == ExitCode.OK


def test_acquire_of_a_held_lock_exits_75(rl: Redlock, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique()
    with rl.lock(name, ttl=30):
        for timeout in ("0", "0.2"):
            code, out, err = run(capsys, "acquire", name, "--timeout", timeout)
            assert code == ExitCode.NOT_ACQUIRED
            assert out == ""
            assert name in one_line_error(err)


def test_release_with_a_wrong_token_exits_76_and_keeps_the_holder(
    rl: Redlock, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    with rl.lock(name, ttl=30) as lock:
        code, _, err = run(capsys, "release", name, "0" * 40)
        assert code == ExitCode.LOST
        one_line_error(err)
        assert lock.locked()
        code, out, _ = run(capsys, "status", name, "--json")
        assert json.loads(out)["holder"] == lock.token


def test_release_without_a_majority_exits_69(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "release", unique(), "f" * 40, "--masters", ",".join(closed_ports(3)))
    assert code == ExitCode.UNAVAILABLE
    one_line_error(err)


def test_unreachable_quorum_exits_69_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    dead = ",".join(closed_ports(3))
    for argv in (["acquire", unique()], ["exec", unique(), "--", "true"]):
        code, out, err = run(capsys, *argv[:2], "--timeout", "0", "--masters", dead, *argv[2:])
        assert code == ExitCode.UNAVAILABLE
        assert out == ""
        assert "unreachable" in one_line_error(err)


def test_status_sees_a_holder_past_an_unreachable_minority(
    urls: list[str], rl: Redlock, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    masters = [*urls[:3], *closed_ports(2)]
    with Redlock(masters) as partial, partial.lock(name, ttl=30) as lock:
        code, out, _ = run(capsys, "status", name, "--json", "--masters", ",".join(masters))
        report = json.loads(out)
        assert code == ExitCode.OK
        assert (report["verdict"], report["holder"], report["votes"], report["reachable"]) == ("held", lock.token, 3, 3)
        assert [m["reachable"] for m in report["masters"]] == [True, True, True, False, False]
        assert all(m["error"] for m in report["masters"][3:])

        code, out, _ = run(capsys, "status", name, "--masters", ",".join(masters))
        assert code == ExitCode.OK
        assert out.count("unreachable") == 2
        assert f"held by {lock.token} on 3 of 5 masters" in out


def test_status_without_a_quorum_of_answers_exits_69(urls: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    masters = [urls[0], *closed_ports(2)]
    code, out, err = run(capsys, "status", unique(), "--json", "--masters", ",".join(masters))
    assert code == ExitCode.UNAVAILABLE
    assert err == ""
    assert json.loads(out)["verdict"] == "unavailable"


def test_status_reports_a_split_vote(raw: list[redis.Redis], capsys: pytest.CaptureFixture[str]) -> None:
    name = unique()
    # Two tokens on two masters each, one master free: nobody holds a majority.
    for client, token in zip(raw, ["a" * 40, "a" * 40, "b" * 40, "b" * 40], strict=False):
        client.set(name, token, px=30_000)
    try:
        code, out, _ = run(capsys, "status", name, "--json")
        report = json.loads(out)
        assert code == ExitCode.NOT_HELD
        assert (report["verdict"], report["holder"], report["votes"]) == ("split", None, 2)
    finally:
        for client in raw:
            client.delete(name)


# --- exec ------------------------------------------------------------------------------------------


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_exec_runs_the_command_under_the_lock_and_passes_its_exit_code(
    urls: list[str], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    seen = tmp_path / "seen.json"
    # The command looks at the masters itself: the lock must be held while it runs.
    child = f"""
import json, os, redis
held = [redis.Redis.from_url(u).get(os.environ["REDLOCK_LOCK_NAME"]) for u in {urls!r}]
report = {{"token": os.environ["REDLOCK_LOCK_TOKEN"], "held": [h.decode() for h in held if h]}}
json.dump(report, open({str(seen)!r}, "w"))
raise SystemExit(7)
"""
    code, _, err = run(capsys, "exec", name, "--", *python(child))
    assert code == 7
    assert err == ""
    report = json.loads(seen.read_text())
    # A majority at least: the acquire returns as soon as one has granted it.
    assert report["held"].count(report["token"]) > len(urls) // 2
    assert run(capsys, "status", name)[0] == ExitCode.NOT_HELD  # released afterwards


def test_exec_of_a_held_lock_exits_75_without_running_the_command(
    rl: Redlock, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    marker = tmp_path / "ran"
    with rl.lock(name, ttl=30):
        code, _, err = run(capsys, "exec", name, "--timeout", "0", "--", "touch", str(marker))
    assert code == ExitCode.NOT_ACQUIRED
    one_line_error(err)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        pytest.param(["/nonexistent/command"], ExitCode.NOT_FOUND, id="not-found"),
        pytest.param([os.devnull], ExitCode.CANNOT_EXECUTE, id="not-executable"),
        pytest.param(python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"), 128 + 15, id="killed"),
    ],
)
def test_exec_failures_release_the_lock(
    command: list[str], expected: int, urls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    code, _, _ = run(capsys, "exec", name, "--", *command)
    assert code == expected
    assert run(capsys, "status", name)[0] == ExitCode.NOT_HELD


def test_exec_options_after_the_name_and_command_options_after_dashes(
    urls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # `--ttl` after `--` belongs to the command, not to exec.
    command = python("import sys; sys.exit(len(sys.argv))")
    code, _, _ = run(capsys, "exec", unique(), "--ttl", "5", "--", *command, "--ttl", "1")
    assert code == 3


@pytest.mark.parametrize("stubborn", ["command", "its-child"])
def test_exec_stops_the_whole_command_when_the_lock_is_lost(
    stubborn: str, raw: list[redis.Redis], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    pids = tmp_path / "pids"
    ready = tmp_path / "grandchild-ready"
    # The command starts a child of its own, and one of the two ignores SIGTERM: only the
    # SIGKILL to the whole process group, after the grace, stops it.
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
    grandchild = "\n".join(
        [
            "import pathlib, signal, time",
            ignore if stubborn == "its-child" else "",
            f"pathlib.Path({str(ready)!r}).touch()",
            f"time.sleep({2 * PATIENCE})",
        ]
    )
    # Every wait in the command is bounded, so that a broken test fails instead of hanging.
    child = f"""
import os, pathlib, signal, subprocess, sys, time
{ignore if stubborn == "command" else ""}
grandchild = subprocess.Popen([sys.executable, "-c", {grandchild!r}])
deadline = time.monotonic() + {PATIENCE}
while not pathlib.Path({str(ready)!r}).exists():
    if time.monotonic() > deadline or grandchild.poll() is not None:
        sys.exit("the grandchild did not start")
    time.sleep(0.01)
pathlib.Path({str(pids)!r} + ".tmp").write_text(f"{{os.getpid()}} {{grandchild.pid}}")
os.rename({str(pids)!r} + ".tmp", {str(pids)!r})
time.sleep({2 * PATIENCE})
"""

    def take_the_lock_away() -> None:
        wait_until(pids.exists, "the command started")
        for client in raw:
            client.delete(name)

    thief = threading.Thread(target=take_the_lock_away)
    thief.start()
    try:
        code, _, err = run(capsys, "exec", name, "--ttl", "1", "--grace", "0.2", "--", *python(child))
    finally:
        thief.join()
    assert code == ExitCode.LOST
    assert "was lost while the command ran" in err.splitlines()[-1]
    for pid in map(int, pids.read_text().split()):
        wait_until(functools.partial(gone, pid), f"process {pid} of the command is gone")


# --- the installed script, in a subprocess -------------------------------------------------------


@pytest.fixture(scope="module")
def script() -> pathlib.Path:
    path = pathlib.Path(sysconfig.get_path("scripts")) / "redlock"
    if not path.exists():
        pytest.fail(f"no console script at {path}: install the project (pip install -e .)")
    return path


def test_script_exec_passes_the_exit_code_through(script: pathlib.Path, urls: list[str]) -> None:
    done = subprocess.run([script, "exec", unique(), "--", "sh", "-c", "exit 42"], timeout=PATIENCE, check=False)
    assert done.returncode == 42


def test_script_exec_of_a_held_lock_exits_75(script: pathlib.Path, rl: Redlock) -> None:
    name = unique()
    with rl.lock(name, ttl=30):
        done = subprocess.run(
            [script, "exec", name, "--timeout", "0.1", "--", "true"],
            capture_output=True,
            text=True,
            timeout=PATIENCE,
            check=False,
        )
    assert done.returncode == ExitCode.NOT_ACQUIRED
    one_line_error(done.stderr)


def test_script_acquire_release_and_status_json(script: pathlib.Path, urls: list[str]) -> None:
    name = unique()

    def redlock(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *argv], capture_output=True, text=True, timeout=PATIENCE, check=False)

    acquired = redlock("acquire", name, "--ttl", "30")
    assert acquired.returncode == 0, acquired.stderr
    token, _ = acquired.stdout.split()
    status = redlock("status", name, "--json")
    assert status.returncode == 0
    assert json.loads(status.stdout)["holder"] == token
    released = redlock("release", name, token)
    assert (released.returncode, released.stdout, released.stderr) == (0, "", "")
    again = redlock("release", name, token)
    assert again.returncode == ExitCode.LOST
    one_line_error(again.stderr)


def test_script_bad_url_is_one_line_and_exit_2(script: pathlib.Path) -> None:
    done = subprocess.run(
        [script, "status", "x", "--masters", "redis://127.0.0.1:notaport"],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert done.returncode == ExitCode.USAGE
    assert "masters[0]" in one_line_error(done.stderr)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_script_exec_forwards_signals_and_releases(
    signum: signal.Signals, script: pathlib.Path, urls: list[str], tmp_path: pathlib.Path
) -> None:
    name = unique()
    ready = tmp_path / "ready"
    child = f"""
import os, signal, sys, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, lambda n, f: sys.exit(100 + n))
open({str(ready)!r}, "w").close()
time.sleep({2 * PATIENCE})
"""
    proc = subprocess.Popen([script, "exec", name, "--", *python(child)])
    try:
        wait_until(ready.exists, "the command is ready")
        proc.send_signal(signum)
        assert proc.wait(timeout=PATIENCE) == 100 + signum
    finally:
        proc.kill()
        proc.wait()
    assert main(["status", name]) == ExitCode.NOT_HELD


def test_script_exec_interrupted_while_waiting_for_the_lock(
    script: pathlib.Path, rl: Redlock, tmp_path: pathlib.Path
) -> None:
    name = unique()
    marker = tmp_path / "ran"
    with rl.lock(name, ttl=30) as lock:
        proc = subprocess.Popen([script, "exec", name, "--", "touch", str(marker)], stderr=subprocess.PIPE, text=True)
        try:
            # Its handlers go in before it asks for the lock, which the test holds: from
            # then on it is waiting.
            wait_until(lambda: catches(proc.pid, signal.SIGTERM), "redlock handles SIGTERM")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=PATIENCE)
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == 128 + signal.SIGTERM
        assert "SIGTERM" in one_line_error(err)
        assert lock.locked()
    assert not marker.exists()


def test_script_servers_runs_masters_until_sigint(script: pathlib.Path) -> None:
    proc = subprocess.Popen([script, "servers", "-n", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once every master answers PING
        prefix = f"export {ENV_MASTERS}="
        assert line.startswith(prefix), line
        started = line[len(prefix) :].strip().split(",")
        assert len(started) == 3
        for url in started:
            with redis.Redis.from_url(url, socket_timeout=5) as client:
                assert client.ping()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=PATIENCE) == 0
    finally:
        proc.kill()
        proc.communicate()
    for url in started:
        with redis.Redis.from_url(url, socket_timeout=5) as client, pytest.raises(redis.ConnectionError):
            client.ping()


def test_python_dash_m_redlock_is_the_same_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redlock", "--help"], capture_output=True, text=True, timeout=PATIENCE, check=False
    )
    assert done.returncode == 0
    assert "exit codes:" in done.stdout


def in_a_terminal(argv: list[str], ready: bytes, keys: bytes) -> tuple[bytes, int]:
    """Run ``argv`` as the session leader of a new pseudo-terminal; type ``keys`` once it prints ``ready``."""
    pid, terminal = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)  # never run the rest of pytest in a forked child
    output = b""
    typed = False
    deadline = time.monotonic() + PATIENCE
    try:
        while time.monotonic() < deadline:
            if select.select([terminal], [], [], 0.1)[0]:
                try:
                    chunk = os.read(terminal, 1024)
                except OSError:  # EIO: every process holding the terminal has exited
                    break
                if not chunk:
                    break
                output += chunk
            if not typed and ready in output:
                os.write(terminal, keys)
                typed = True
    finally:
        os.close(terminal)
    _, status = os.waitpid(pid, 0)
    return output, os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize(
    ("keys", "expected_output", "expected_code"),
    [
        pytest.param(b"hello\n", b"got hello", 0, id="reads-the-terminal"),
        pytest.param(b"\x03", b"", 128 + signal.SIGINT, id="ctrl-c"),
    ],
)
def test_script_exec_hands_the_terminal_to_the_command(
    keys: bytes, expected_output: bytes, expected_code: int, script: pathlib.Path, urls: list[str]
) -> None:
    name = unique()
    # The command runs in a process group of its own; in a terminal it must still be able
    # to read it, and Ctrl-C must reach it.
    command = ["/bin/sh", "-c", "echo ready; read line; echo got $line"]
    output, code = in_a_terminal([str(script), "exec", name, "--", *command], b"ready", keys)
    assert code == expected_code, output
    assert expected_output in output
    assert main(["status", name]) == ExitCode.NOT_HELD
