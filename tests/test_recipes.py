"""The recipes of docs/recipes.md run, against real masters, in the processes their frameworks need.

Each ```python block of the page starts with ``# file: NAME``: it is written to that file in
a directory of the test's own, and run from there as the page says (Celery workers and the
script that queues tasks, ``redlock exec`` on three "hosts" at once, a FastAPI app driven
through httpx from two processes, a Django script). Nothing of the frameworks is imported
into the test process: every recipe runs in subprocesses, with ``REDLOCK_MASTERS`` naming
five masters and ``STORE_URL`` (and Celery's broker) a sixth server.

The frameworks come from the ``[recipes]`` extra, which .ci/run installs beside ``[dev]``:
without it these tests skip, and under CI they fail.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from redlock.cli import ENV_MASTERS
from redlock.servers import LocalMasters

from .conftest import _in_ci, eventually

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "recipes.md"
MASTERS = 5

_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_FILE = re.compile(r"^# file: (\S+)\n")


@dataclass(frozen=True)
class Recipes:
    """The page's blocks: files by name, and the shell commands."""

    files: dict[str, str]
    commands: list[str]
    text: list[str]


def read_page() -> Recipes:
    files: dict[str, str] = {}
    commands: list[str] = []
    text: list[str] = []
    for language, code in _BLOCK.findall(PAGE.read_text()):
        if language == "python":
            named = _FILE.match(code)
            assert named, f"a python block of recipes.md does not start with '# file: NAME':\n{code[:200]}"
            files[named.group(1)] = code
        elif language == "sh":
            commands += [line.split("  #")[0].strip() for line in code.splitlines() if line.strip()]
        else:
            text.append(code)
    return Recipes(files, commands, text)


RECIPES = read_page()
INSTALL = ".venv/bin/pip install -e '.[recipes]'"


def command(prefix: str) -> str:
    """The page's one shell command that starts with ``prefix``."""
    [found] = [c for c in RECIPES.commands if c.startswith(prefix)]
    return found


def argv(line: str) -> list[str]:
    """A ``.venv/bin/TOOL ARGS`` line of the page as this interpreter's ``-m TOOL ARGS``."""
    tool, *args = shlex.split(line)
    assert tool.startswith(".venv/bin/"), line
    return [sys.executable, "-m", tool.removeprefix(".venv/bin/"), *args]


def needs(*modules: str) -> None:
    """Skips a test whose framework (the [recipes] extra) is missing; under CI, fails it."""
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        message = f"{', '.join(missing)} not installed: install the [recipes] extra ({INSTALL})"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)


def test_every_block_of_the_page_is_run_here() -> None:
    assert set(RECIPES.files) == {
        "celery_tasks.py",
        "queue_reports.py",
        "service.py",
        "deposit_twenty.py",
        "bank.py",
    }
    assert RECIPES.commands == [
        INSTALL,
        command(".venv/bin/celery -A celery_tasks worker"),
        command(".venv/bin/redlock exec"),
    ]
    # The crontab line runs exactly the command the test runs.
    [crontab] = RECIPES.text
    assert command(".venv/bin/redlock exec") in crontab


# --- running them ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def servers() -> Iterator[list[str]]:
    """Five masters and the store (also Celery's broker, in database 1); open
    (owner_only=False): FLUSHALL empties them between recipes."""
    with LocalMasters(MASTERS + 1, owner_only=False) as started:
        yield started.urls


@dataclass
class Kitchen:
    """A directory with every file of the page, and the environment the recipes run in."""

    path: pathlib.Path
    env: dict[str, str]
    store: redis.Redis

    def run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=self.path, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def start(self, args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            args,
            cwd=self.path,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )


@pytest.fixture
def kitchen(servers: list[str], tmp_path: pathlib.Path) -> Iterator[Kitchen]:
    for name, code in RECIPES.files.items():
        (tmp_path / name).write_text(code)
    env = dict(os.environ)
    # The recipes' own modules, then this checkout's redlock, then whatever the tests had.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")) if p)
    env[ENV_MASTERS] = ",".join(servers[:MASTERS])
    env["STORE_URL"] = servers[MASTERS]
    env["CELERY_BROKER_URL"] = servers[MASTERS].rstrip("/") + "/1"
    store = redis.Redis.from_url(servers[MASTERS])
    try:
        yield Kitchen(tmp_path, env, store)
    finally:
        for url in servers:
            with redis.Redis.from_url(url) as client:
                client.flushall()
        store.close()


def stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM the process's group, then SIGKILL it if it lingers; its stderr."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    _, err = process.communicate()
    return err


@pytest.mark.slow
def test_a_celery_task_runs_once_at_a_time_across_workers(kitchen: Kitchen) -> None:
    needs("celery")
    worker = argv(command(".venv/bin/celery -A celery_tasks worker"))
    quiet = ["--without-mingle", "--without-gossip"]  # two workers on one host need not talk
    workers = [kitchen.start([*worker, "--hostname", f"w{i}@%h", *quiet]) for i in (1, 2)]
    try:
        queued = kitchen.run([sys.executable, "queue_reports.py"])
        assert queued.returncode == 0, queued.stderr
        # Six builds of 0.2 s each, one at a time, by four processes of two workers.
        done = eventually(lambda: kitchen.store.get("builds:2026-11-26") == b"6", within=90)
        time.sleep(0.5)  # nothing more comes: every task built once
        assert done, (kitchen.store.get("builds:2026-11-26"), [w.poll() for w in workers])
        assert kitchen.store.get("builds:2026-11-26") == b"6"
    finally:
        errors = [stop(w) for w in workers]
    assert not any("Traceback" in err for err in errors), errors


@pytest.mark.slow
def test_a_cron_job_on_three_hosts_runs_on_one(kitchen: Kitchen) -> None:
    report = kitchen.path / "make-report.sh"
    # Long enough that the three "hosts" surely try while the first one runs.
    report.write_text('#!/bin/sh\necho "$REDLOCK_TOKEN" >> runs.log\nsleep 4\n')
    report.chmod(0o755)
    hosts = [kitchen.start(argv(command(".venv/bin/redlock exec"))) for _ in range(3)]
    codes = sorted(host.wait(timeout=60) for host in hosts)
    for host in hosts:
        host.communicate()
    assert codes == [0, 75, 75]  # one ran it; the others found the lock held and moved on
    assert len((kitchen.path / "runs.log").read_text().split()) == 1
    assert kitchen.run(argv(command(".venv/bin/redlock exec"))).returncode == 0  # free again: the next run


@pytest.mark.slow
def test_a_fastapi_endpoint_never_interleaves_two_deposits(kitchen: Kitchen) -> None:
    needs("fastapi", "httpx")
    clients = [kitchen.start([sys.executable, "deposit_twenty.py"]) for _ in range(2)]
    statuses: collections.Counter[int] = collections.Counter()
    for client in clients:
        out, err = client.communicate(timeout=120)
        assert client.returncode == 0, err
        statuses.update(json.loads(out))
    assert set(statuses) <= {200, 409}, statuses  # 409: busy for two seconds (a loaded machine)
    assert statuses[200] > 0
    # Every deposit that succeeded is in the balance: none was lost to another's write.
    assert kitchen.store.get("balance:alice") == str(10 * statuses[200]).encode()


@pytest.mark.slow
def test_django_rows_each_have_a_lock_and_no_deposit_is_lost(kitchen: Kitchen) -> None:
    needs("django")
    done = kitchen.run([sys.executable, "bank.py"])
    assert done.returncode == 0, done.stderr
    assert "'alice': 200, 'bob': 200" in done.stdout
