"""``redlock exec --read/--write``: a command run as a reader or the writer of a read-write
lock, on real masters (the rest of exec, its guardian and exit codes, is tests/test_cli.py's)."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

from redlock import Redlock
from redlock._core import readers_key
from redlock.cli import ENV_MASTERS, ExitCode

from .cli_helpers import unique
from .test_cli import one_line_error, run


@pytest.fixture
def rl(master_urls: list[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Redlock]:
    monkeypatch.setenv(ENV_MASTERS, ",".join(master_urls))
    with Redlock(master_urls) as client:
        yield client


def test_exec_read_runs_beside_readers_and_write_waits_for_them(
    rl: Redlock, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique("rw")
    rw = rl.rwlock(name, ttl=30.0)
    # The command checks that it is a reader on the masters beside the one held here.
    child = f"""
import os, sys, redis
urls = os.environ["REDLOCK_MASTERS"].split(",")
readers = [redis.Redis.from_url(u).zcard({readers_key(name)!r}) for u in urls]
sys.exit(0 if sum(n == 2 for n in readers) > len(urls) // 2 else 1)
"""
    with rw.read():
        assert run(capsys, "exec", "--read", name, "--timeout", "0", "--", sys.executable, "-c", child)[0] == 0
        marker = tmp_path / "ran"
        code, _, err = run(capsys, "exec", "--write", name, "--timeout", "0", "--", "touch", str(marker))
        assert code == ExitCode.NOT_ACQUIRED
        one_line_error(err)
        assert not marker.exists()
    assert run(capsys, "exec", name, "--write", "--", "touch", str(marker))[0] == 0
    assert marker.exists()
    with rw.write():
        code, _, _ = run(capsys, "exec", "--read", name, "--timeout", "0", "--", "true")
        assert code == ExitCode.NOT_ACQUIRED
    writer = rw.write()
    assert writer.acquire(blocking=False)  # both released: nothing of theirs is left
    writer.release()


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["exec", "--read", "--write", "x", "true"], id="both-sides"),
        pytest.param(["exec", "--write", "--fencing", "x", "true"], id="fencing"),
        pytest.param(["exec", "--read", "--limit", "2", "x", "true"], id="semaphore"),
    ],
)
def test_exec_read_write_usage_errors(argv: list[str], rl: Redlock, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == ExitCode.USAGE
    assert out == ""
    one_line_error(err)
