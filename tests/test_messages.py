"""What the library says, read as text: the words a person acts on."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import subprocess
import time

import pytest
import redis

import redlock
import redlock.asyncio
from redlock.cli import ENV_MASTERS, ExitCode
from redlock.servers import LocalMasters

from .cli_helpers import PATIENCE, shell
from .cli_helpers import script as installed
from .conftest import MastersFactory, unique


def test_a_sync_with_on_asyncio_objects_says_to_use_async_with(masters: LocalMasters) -> None:
    async def main() -> None:
        rl = redlock.asyncio.Redlock(masters.urls)
        try:
            for used in (rl, rl.lock(unique()), rl.semaphore(unique(), limit=2), rl.election(unique())):
                with pytest.raises(TypeError, match="'async with', not 'with'"), used:  # type: ignore[attr-defined]
                    pass
        finally:
            await rl.aclose()

    asyncio.run(main())


def test_fewer_than_three_masters_are_accepted_with_a_warning(
    masters: LocalMasters, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="redlock"), redlock.Redlock(masters.urls[:1]) as one:
        assert repr(one).startswith("<Redlock 1 master: ")
    with caplog.at_level(logging.WARNING, logger="redlock"), redlock.Redlock(masters.urls[:2]) as two:
        assert repr(two).startswith("<Redlock 2 masters: ")
    said = [record.getMessage() for record in caplog.records]
    assert any("1 master: a single point of failure" in line for line in said)
    assert any("2 masters: no master may fail" in line for line in said)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="redlock"), redlock.Redlock(masters.urls[:3]):
        pass
    assert not caplog.records


def test_a_hung_master_is_said_in_words_with_how_long_it_waited(
    fresh_masters: object, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = fresh_masters(3)  # type: ignore[operator]
    with redlock.Redlock(cluster.urls, node_timeout=0.05, wake_on_release=False) as rl:
        lock = rl.lock(unique(), ttl=10.0)
        assert lock.acquire(blocking=False)
        cluster[2].pause()
        try:
            with caplog.at_level(logging.WARNING, logger="redlock"):
                lock.release()  # the two others confirm it; C's reply is waited for, then not
                time.sleep(0.3)  # C owes it past four node_timeouts: it looks hung
                for _ in range(3):  # rounds that find C owing a reply for long: hung
                    other = rl.lock(unique(), ttl=10.0)
                    assert other.acquire(blocking=False)
                    other.release()
        finally:
            cluster[2].resume()
    said = "\n".join(record.getMessage() for record in caplog.records)
    assert f"master {cluster[2].host}:{cluster[2].port} does not answer in time: hung: no reply for" in said
    assert "is timeout" not in said
    assert "earlier replies unanswered" not in said


# --- the command line, run as a user runs it ------------------------------------------------------


def _redlock(masters: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ENV_MASTERS: ",".join(masters)}
    return subprocess.run(
        [str(installed("redlock")), *argv], env=env, capture_output=True, text=True, timeout=PATIENCE, check=False
    )


def _verdict_word(out: str) -> str:
    return out.splitlines()[-1].split(":")[0].split()[0]


def test_status_says_a_stopped_master_did_not_answer_in_time(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    stopped = cluster[2]
    stopped.pause()
    try:
        text = _redlock(cluster.urls, "status", unique())
        report = json.loads(_redlock(cluster.urls, "status", unique(), "--json").stdout)
    finally:
        stopped.resume()
    line = next(line for line in text.stdout.splitlines() if f"{stopped.host}:{stopped.port}" in line)
    assert line.split(maxsplit=1)[1] == "no answer in time (hung or slow): no reply within 0.50s"
    assert "not awaited" not in text.stdout + text.stderr
    assert text.returncode == ExitCode.NOT_HELD
    assert _verdict_word(text.stdout) == report["verdict"] == "free"
    assert report["masters"][2] | {"master": None} == {
        "master": None,
        "reachable": False,
        "answered": False,
        "status": "timeout",
        "token": None,
        "pttl_ms": None,
        "error": "no reply within 0.50s",
        "readers": [],
        "intent": None,
        "intent_pttl_ms": None,
    }


def test_status_counts_masters_refusing_our_password_as_answering_and_misconfigured(
    fresh_masters: MastersFactory,
) -> None:
    cluster = fresh_masters(3, password="right")
    wrong = [master.url_as(password="wrong") for master in cluster]
    text = _redlock(wrong, "status", "x")
    report = json.loads(_redlock(wrong, "status", "x", "--json").stdout)
    assert text.returncode == ExitCode.UNAVAILABLE
    # The table says each master's trouble: no warning says it again on stderr.
    assert text.stderr == ""
    rows = text.stdout.splitlines()[1:-1]
    assert len(rows) == 3
    assert all(row.split(maxsplit=1)[1].startswith("misconfigured, refuses us: WRONGPASS") for row in rows)
    assert text.stdout.splitlines()[-1] == (
        "unavailable: 0 of 3 masters read (3 answered), a quorum needs 2; 3 misconfigured: refused our "
        "credentials, permissions, TLS or scripts (fix that: waiting will not help)"
    )
    assert "unreachable" not in text.stdout
    assert "unknown" not in text.stdout
    # One word for one thing: the text's verdict is --json's.
    assert _verdict_word(text.stdout) == report["verdict"] == "unavailable"
    assert (report["reachable"], report["answered"]) == (0, 3)
    assert [master["status"] for master in report["masters"]] == ["misconfigured"] * 3


def test_acquire_with_a_wrong_password_says_each_masters_refusal_once(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3, password="right")
    done = _redlock([master.url_as(password="wrong") for master in cluster], "acquire", unique(), "--timeout", "0")
    assert done.returncode == ExitCode.UNAVAILABLE
    lines = done.stderr.splitlines()
    for master in cluster:
        address = f"{master.host}:{master.port}"
        said = [line for line in lines if address in line]
        assert len(said) == 1, done.stderr
        assert said[0] == f"redlock: warning: master {address} is misconfigured: {said[0].split(': ', 3)[3]}"
        assert "WRONGPASS" in said[0]
    assert lines[-1].startswith("redlock: no majority is possible for ")
    assert "WRONGPASS" not in lines[-1]


def test_a_forced_release_answered_no_says_it_was_aborted(master_urls: list[str], tmp_path: pathlib.Path) -> None:
    env = {**os.environ, ENV_MASTERS: ",".join(master_urls)}
    name = unique()
    with redlock.Redlock(master_urls) as rl, rl.lock(name, ttl=30) as lock:
        for terminal in shell(tmp_path, env):
            terminal.run(f"{installed('redlock')} release {name} --force")
            terminal.expect(r"\[y/N\] ")
            terminal.send("n\n")
            assert terminal.exit_code() == ExitCode.USAGE
            said = terminal.text()
            assert (
                f"redlock: aborted: the forced release of {name!r} was not confirmed (answered 'n'); nothing removed"
                in said
            )
            assert "needs confirmation" not in said
        assert lock.locked()
    # Without a terminal nobody can answer: it says what to give instead.
    done = _redlock(master_urls, "release", name, "--force")
    assert done.returncode == ExitCode.USAGE
    assert done.stderr == (
        f"redlock: not released: --force {name!r} asks for confirmation on a terminal; give --yes without one\n"
    )


def test_doctor_says_a_finding_of_every_master_once_and_a_refusal_as_an_answer(
    fresh_masters: MastersFactory,
) -> None:
    cluster = fresh_masters(3, password="right")
    fit = _redlock(cluster.urls, "doctor")
    assert fit.stdout.count("no-persistence:") == 1, fit.stdout
    rows = fit.stdout.splitlines()
    assert rows[-3:-1] == ["  every master:", rows[-2]]
    assert "info     no-persistence:" in rows[-2]
    refused = _redlock([master.url_as(password="wrong") for master in cluster], "doctor")
    assert refused.returncode == ExitCode.UNFIT
    described = [line for line in refused.stdout.splitlines() if line.startswith("  127.0.0.1:")]
    assert len(described) == 3
    assert all(line.split(maxsplit=1)[1].startswith("answered, refused: WRONGPASS") for line in described)
    assert "not reached" not in refused.stdout


def test_exec_and_leader_say_a_warning_of_every_master_once_naming_them(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)  # no append-only file: fencing tokens warn
    addresses = ", ".join(f"{master.host}:{master.port}" for master in cluster)
    for argv in (("exec", "--fencing", unique(), "--", "true"), ("leader", unique(), "--", "true")):
        done = _redlock(cluster.urls, *argv)
        assert done.returncode == 0, done.stderr
        warned = [line for line in done.stderr.splitlines() if "fencing tokens are in use" in line]
        assert warned == [f"redlock: warning: masters {addresses}, each: {warned[0].split(', each: ', 1)[1]}"]


def test_exec_on_masters_doctor_calls_unfit_warns_once_with_its_reason_and_goes_ahead(
    fresh_masters: MastersFactory,
) -> None:
    cluster = fresh_masters(3, owner_only=False)
    with redis.Redis.from_url(cluster[2].url) as replica:
        replica.replicaof(cluster[0].host, cluster[0].port)
    done = _redlock(cluster.urls, "exec", unique(), "--", "true")
    assert done.returncode == 0, done.stderr  # two of three masters are a quorum
    lines = done.stderr.splitlines()
    assert sum("it is a replica of" in line for line in lines) == 1, done.stderr
    assert lines[-1] == (
        "redlock: warning: `redlock doctor` calls these masters unfit (unfit: 1 master(s) refused; "
        "2 of 3 masters usable, quorum 2); going ahead"
    )
