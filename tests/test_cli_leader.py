"""``redlock leader NAME -- CMD`` and ``redlock exec --limit K``, on real masters.

As in tests/test_cli.py, most tests call ``main([...])`` in this process; waits are bounded
generously and never asserted on.
"""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import redis

from redlock import Redlock
from redlock.cli import ENV_MASTERS, ExitCode, main

from .cli_helpers import PATIENCE, unique, wait_until
from .conftest import raw_clients

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def urls(master_urls: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv(ENV_MASTERS, ",".join(master_urls))
    return master_urls


@pytest.fixture
def rl(urls: list[str]) -> Iterator[Redlock]:
    with Redlock(urls) as client:
        yield client


@pytest.fixture
def raw_at_urls(urls: list[str]) -> Iterator[list[redis.Redis]]:
    with raw_clients(urls, timeout=5) as clients:
        yield clients


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


# --- exec --limit -------------------------------------------------------------------------------


def test_exec_limit_runs_beside_other_holders_up_to_the_limit(
    rl: Redlock, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    seen = tmp_path / "token"
    child = f"import os; open({str(seen)!r}, 'w').write(os.environ['REDLOCK_TOKEN']); raise SystemExit(3)"
    with rl.semaphore(name, 2, ttl=30) as first:
        # One permit of two is taken: the command gets the other.
        code, _, err = run(capsys, "exec", "--limit", "2", name, "--timeout", "5", "--", *python(child))
        assert (code, err) == (3, "")
        assert seen.read_text() not in ("", first.permit)
        with rl.semaphore(name, 2, ttl=30):
            # Both taken: not acquired, and the command does not run.
            code, _, err = run(
                capsys, "exec", "--limit", "2", name, "--timeout", "0", "--", "touch", str(tmp_path / "x")
            )
            assert code == ExitCode.NOT_ACQUIRED
            assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["exec", "--limit", "0", "n", "--", "true"], "--limit"),
        (["exec", "--limit", "x", "n", "--", "true"], "--limit"),
        (["exec", "--limit", "2", "--fencing", "n", "--", "true"], "fencing"),
        (["leader", "n"], "no command"),
        (["leader", "--ttl", "0", "n", "--", "true"], "--ttl"),
        (["leader", "--identity", "a\nb", "n", "--", "true"], "identity"),
    ],
)
def test_usage_errors(argv: list[str], match: str, urls: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == ExitCode.USAGE
    assert match in err
    assert len(err.splitlines()) == 1


# --- leader ---------------------------------------------------------------------------------------


def test_leader_runs_the_command_while_leader_and_resigns(
    rl: Redlock, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    seen = tmp_path / "seen"
    child = f"""
import os
import redlock
with redlock.Redlock(os.environ["REDLOCK_MASTERS"].split(",")) as rl:
    leader = rl.election(os.environ["REDLOCK_NAME"]).leader()
open({str(seen)!r}, "w").write(f"{{leader}} {{os.environ['REDLOCK_FENCING_TOKEN']}}")
raise SystemExit(5)
"""
    code, _, err = run(capsys, "leader", "--pass-masters", "--identity", "node-1", name, "--", *python(child))
    assert (code, err) == (5, "")
    leader, term = seen.read_text().split()
    assert leader == "node-1"
    assert int(term) > 0
    assert rl.election(name).leader() is None  # resigned after the command ended


def test_leader_not_elected_within_the_timeout_exits_75(
    rl: Redlock, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    other = rl.election(name, ttl=30, identity="other")
    assert other.campaign()
    try:
        code, _, _ = run(capsys, "leader", name, "--timeout", "0.3", "--", "touch", str(tmp_path / "ran"))
    finally:
        other.resign()
    assert code == ExitCode.NOT_ACQUIRED
    assert not (tmp_path / "ran").exists()


def _losing(name: str, raw: list[redis.Redis], started: pathlib.Path, times: int) -> threading.Thread:
    """A thread that deletes ``name`` everywhere each time the command says it started."""

    def take_it_away() -> None:
        for run_number in range(1, times + 1):
            wait_until(
                lambda runs=run_number: started.exists() and len(started.read_text()) >= runs, "the command started"
            )
            for client in raw:
                client.delete(name)

    thief = threading.Thread(target=take_it_away, daemon=True)
    thief.start()
    return thief


def test_a_lost_leadership_stops_the_command_and_exits_76(
    raw_at_urls: list[redis.Redis], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique()
    started = tmp_path / "started"
    child = f"import time; open({str(started)!r}, 'a').write('x'); time.sleep({2 * PATIENCE})"
    thief = _losing(name, raw_at_urls, started, 1)
    code, _, err = run(capsys, "leader", name, "--ttl", "1", "--grace", "0.2", "--", *python(child))
    thief.join(PATIENCE)
    assert code == ExitCode.LOST
    assert "was lost" in err.splitlines()[-1]


def test_again_campaigns_again_after_a_loss_and_runs_the_command_anew(
    raw_at_urls: list[redis.Redis],
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = unique()
    started = tmp_path / "started"
    # The first run is stopped by the loss; the second ends on its own with 9.
    child = f"""
import pathlib, sys, time
path = pathlib.Path({str(started)!r})
runs = len(path.read_text()) if path.exists() else 0
path.write_text("x" * (runs + 1))
if runs:
    sys.exit(9)
time.sleep({2 * PATIENCE})
"""
    thief = _losing(name, raw_at_urls, started, 1)
    code, _, _ = run(capsys, "leader", "--again", name, "--ttl", "1", "--grace", "0.2", "--", *python(child))
    thief.join(PATIENCE)
    assert code == 9
    assert started.read_text() == "xx"
    assert "campaigning again" in caplog.text


def test_script_leader_forwards_sigterm_and_resigns(urls: list[str], rl: Redlock, tmp_path: pathlib.Path) -> None:
    name = unique()
    ready = tmp_path / "ready"
    child = f"""
import signal, sys, time
signal.signal(signal.SIGTERM, lambda n, f: sys.exit(100 + n))
open({str(ready)!r}, "w").close()
time.sleep({2 * PATIENCE})
"""
    # `python -m redlock` from this checkout: the same command as the installed script.
    proc = subprocess.Popen(
        [sys.executable, "-m", "redlock", "leader", name, "--identity", "script", "--", *python(child)],
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:
        wait_until(ready.exists, "the command is ready")
        assert rl.election(name).leader() == "script"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=PATIENCE) == 100 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert rl.election(name).leader() is None
