"""``redlock exec --read/--write``: a command run as a reader or the writer of a read-write
lock, on real masters (the rest of exec, its guardian and exit codes, is tests/test_cli.py's)."""

from __future__ import annotations

import json
import pathlib
import re
import sys
import threading
from collections.abc import Iterator

import pytest

from redlock import Redlock
from redlock._protocol.core import readers_key
from redlock.cli import ENV_MASTERS, ExitCode

from .cli_helpers import unique
from .conftest import eventually
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
        argv = ["exec", "--read", "--pass-masters", name, "--timeout", "0", "--", sys.executable, "-c", child]
        assert run(capsys, *argv)[0] == 0
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


def test_status_and_force_release_show_readers_and_a_waiting_writer(
    rl: Redlock, master_urls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique("rw")
    rw = rl.rwlock(name, ttl=30.0)
    readers = [rw.read(), rw.read()]
    assert all(reader.acquire(blocking=False) for reader in readers)
    tokens = sorted(str(reader.token) for reader in readers)
    code, out, _ = run(capsys, "status", name)
    assert code == ExitCode.OK
    assert out.count("no writer; 2 readers (") == len(master_urls)
    assert out.splitlines()[-1] == f"read-held by 2 reader(s) on a quorum: {', '.join(tokens)}"
    code, out, _ = run(capsys, "status", name, "--json")
    report = json.loads(out)
    assert (report["verdict"], report["readers"], report["intent"], report["holder"]) == ("read", tokens, None, None)
    assert all(0 < r["pttl_ms"] <= 30_000 for m in report["masters"] for r in m["readers"])
    with Redlock(master_urls, retry_delay=20.0) as other:
        writer = other.rwlock(name, ttl=30.0).write()
        got: list[bool] = []
        waiting = threading.Thread(target=lambda: got.append(writer.acquire(timeout=30.0)))
        waiting.start()
        assert eventually(lambda: rl.inspect(name).intent is not None)
        intent = rl.inspect(name).intent
        code, out, _ = run(capsys, "status", name)
        assert f"writer waiting: {intent}" in out
        assert out.splitlines()[-1] == f"a writer waits for the readers to leave: {intent}"
        code, out, _ = run(capsys, "release", name, "--force", "--yes")
        assert code == ExitCode.OK
        assert f"reader {tokens[0]}, reader {tokens[1]}" in out or f"reader {tokens[1]}, reader {tokens[0]}" in out
        # The intent of the writer's latest attempt: each attempt marks a fresh token, and
        # under load one more may come between the status above and this release.
        assert re.search(r"writer's intent [0-9a-f]{40}\n", out), out
        waiting.join(30)
        assert got == [True]  # the readers and the intent are gone: the writer got in
        writer.release()
