"""The connection layer on real masters: one multiplexed, ordered connection per master.

What production imposes and loopback happy paths hide: bursts of concurrent operations on one
client, file descriptors that must stay bounded, a master whose traffic is delayed, fork()
after the client was made, an interrupt at any line of the acquire's critical window,
credentials and permissions that are wrong, unix sockets, and bad input that must never
reach the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import linecache
import multiprocessing
import os
import sys
import threading
import time
import weakref
from types import FrameType
from typing import Any

import pytest
import redis

import redlock
import redlock.asyncio
from chaos.proxy import ProxyLoop
from redlock import MasterMisconfigured, NodeStatus, QuorumUnavailable, Redlock
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, in_threads, raw_clients, unique


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def keys_left(masters: LocalMasters, name: str) -> list[bytes | None]:
    values = []
    for url in masters.urls:
        with redis.Redis.from_url(url) as raw:
            values.append(raw.get(name))
    return values


# --- bursts of concurrency on one fresh client -------------------------------------------------


def test_a_thousand_concurrent_asyncio_acquires_on_a_fresh_client_all_succeed(matrix_cluster: LocalMasters) -> None:
    masters = matrix_cluster

    async def scenario() -> tuple[int, int, int]:
        before = open_fds()
        async with redlock.asyncio.Redlock(masters.urls) as rl:
            locks = [rl.lock(unique("burst"), ttl=10.0) for _ in range(1000)]
            acquired = await asyncio.gather(*(lock.acquire(blocking=False) for lock in locks))
            during = open_fds()
            await asyncio.gather(*(lock.release() for lock in locks))
        return sum(acquired), during - before, open_fds() - before

    held, during, after = asyncio.run(scenario())
    assert held == 1000
    assert during <= 2 * len(masters) + 4  # one command connection per master (+ a few)
    assert after <= 2


def test_sixty_four_threads_on_a_fresh_client_all_succeed(matrix_cluster: LocalMasters) -> None:
    masters = matrix_cluster
    before = open_fds()
    results: list[bool] = []
    errors: list[BaseException] = []
    start = threading.Barrier(64)
    # What this checks is the fresh client's connects and sockets under a burst, not its
    # speed: with 64 threads runnable, the thread reading the replies may wait ~64 switch
    # intervals (5 ms each) for the GIL, which the default 50 ms node_timeout does not
    # cover on a loaded 2-core machine.
    with Redlock(masters.urls, node_timeout=0.5) as rl:

        def work() -> None:
            try:
                start.wait()
                for _ in range(5):
                    lock = rl.lock(unique("threads"), ttl=10.0)
                    results.append(lock.acquire(blocking=False))
                    lock.release()
            except BaseException as error:
                errors.append(error)

        in_threads(lambda _: work(), 64, within=60)
        during = open_fds() - before
    assert errors == []
    assert results == [True] * 320
    assert during <= 2 * len(masters) + 4
    assert eventually(lambda: open_fds() - before <= 2)


def test_many_tasks_on_one_name_never_hold_it_together(matrix_cluster: LocalMasters) -> None:
    masters = matrix_cluster
    name = unique("contended")
    holders = 0
    most = 0
    acquisitions = 0

    async def contend(rl: redlock.asyncio.Redlock) -> None:
        nonlocal holders, most, acquisitions
        for _ in range(3):
            lock = rl.lock(name, ttl=10.0)
            if await lock.acquire(blocking=True, timeout=30):
                holders += 1
                most = max(most, holders)
                acquisitions += 1
                await asyncio.sleep(0)
                holders -= 1
                await lock.release()

    async def scenario() -> None:
        async with redlock.asyncio.Redlock(masters.urls) as rl:
            await asyncio.gather(*(contend(rl) for _ in range(50)))

    asyncio.run(scenario())
    assert most == 1
    assert acquisitions == 150
    assert keys_left(masters, name) == [None] * len(masters)


# --- per-master order: a release never overtakes the SET it undoes ----------------------------


def test_a_delayed_master_is_left_no_orphan_key(client: ClientFactory, matrix_masters: MastersFactory) -> None:
    """Every byte to master 4 is delayed 300 ms (its connect included): the acquire is decided
    by the other four and released at once, yet the late SET must not outlive the release."""
    masters = matrix_masters(5)
    with ProxyLoop() as proxies:
        slow = proxies.link(("127.0.0.1", masters[4].port), name="slow")
        slow.set_latency(to_server=0.3)
        urls = [*masters.urls[:4], slow.url]
        rl = client(urls, node_timeout=0.1, wake_on_release=False)
        names = []
        for _ in range(5):
            lock = rl.lock(unique("orphan"), ttl=30.0)
            assert lock.acquire(blocking=False)
            lock.release()
            names.append(lock.name)
        time.sleep(1.0)  # everything sent to master 4 has arrived, in order, by now
        with redis.Redis.from_url(masters.urls[4]) as raw:
            assert [raw.get(name) for name in names] == [None] * 5


# --- fork ----------------------------------------------------------------------------------------


#: What a forked pool worker inherits: the client made before the fork, and the resource.
_INHERITED: dict[str, Any] = {}


def _count_under_the_lock(cycles: int) -> int:
    """In a forked pool worker: a non-atomic read-modify-write under the shared client's lock."""
    shared: Redlock = _INHERITED["client"]
    with redis.Redis.from_url(_INHERITED["counter_url"]) as resource:
        for _ in range(cycles):
            with shared.lock("fork:counter", ttl=10.0, timeout=60):
                value = int(resource.get("fork:counter:value") or 0)
                resource.set("fork:counter:value", value + 1)
    return cycles


@pytest.mark.skipif(sys.platform != "linux", reason="fork is what gunicorn --preload and Celery prefork do on Linux")
def test_a_client_made_before_fork_serves_a_pool_of_forked_workers(matrix_masters: MastersFactory) -> None:
    masters = matrix_masters(5)
    counter_url = _INHERITED["counter_url"] = masters.urls[0]
    shared = _INHERITED["client"] = Redlock(masters.urls)
    try:
        # The parent uses it first, so there are sockets and threads to inherit.
        with shared.lock(unique("parent"), ttl=5.0):
            pass
        context = multiprocessing.get_context("fork")
        with context.Pool(4) as pool:
            done = pool.map(_count_under_the_lock, [50] * 4, chunksize=1)
        assert done == [50] * 4
        with redis.Redis.from_url(counter_url) as resource:
            assert int(resource.get("fork:counter:value") or 0) == 200  # no lost update
        with shared.lock(unique("parent-after"), ttl=5.0) as lock:  # the parent still works
            assert lock.locked()
    finally:
        shared.close()
        _INHERITED.clear()


@pytest.mark.skipif(sys.platform != "linux", reason="os.fork")
def test_a_forked_child_never_reads_the_parents_replies(matrix_cluster: LocalMasters) -> None:
    """Parent and child use the same client at the same time: each gets its own answers."""
    masters = matrix_cluster
    with Redlock(masters.urls) as rl:
        names = [unique("forked") for _ in range(200)]
        with rl.lock(unique("warm"), ttl=5.0):
            pass
        pid = os.fork()
        if pid == 0:  # the child: exit status says whether every grant was really ours
            status = 0
            try:
                for name in names[100:]:
                    lock = rl.lock(name, ttl=10.0)
                    if not lock.acquire(blocking=False):
                        status = 3
                    token = lock.token
                    # Each master that granted holds our token (one not awaited may not yet).
                    for url, outcome in zip(masters.urls, lock.outcomes, strict=True):
                        if outcome.status is NodeStatus.GRANTED:
                            with redis.Redis.from_url(url) as raw:
                                if raw.get(name) != (token or "").encode():
                                    status = 4  # a grant we never got
                    lock.release()
            except BaseException:
                status = 5
            os._exit(status)
        for name in names[:100]:
            lock = rl.lock(name, ttl=10.0)
            assert lock.acquire(blocking=False)
            lock.release()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_nothing_holds_a_weak_reference_to_a_driver(masters: LocalMasters) -> None:
    """The drivers derive from DriverBase, compiled and open to Python subclasses, and a
    compiled build's clear function released a driver's weak references as if it owned
    them: the weakref that the at-fork hook once held was freed while still in its set, and
    the next fork or collection crashed (seen in the compiled wheel's smoke test; a
    weakref's refcount fell by one when its driver was collected). The hook holds a small
    interpreted object of the driver's instead (redlock/_io/held_weakly.py)."""
    with Redlock(masters.urls) as rl, rl.lock(unique("weakly"), ttl=5.0):
        assert weakref.getweakrefcount(rl._driver) == 0

    async def scenario() -> int:
        async with redlock.asyncio.Redlock(masters.urls) as arl, arl.lock(unique("weakly"), ttl=5.0):
            return weakref.getweakrefcount(arl._driver)

    assert asyncio.run(scenario()) == 0


# --- an interrupt at any line of the acquire's critical window ----------------------------------


_PACKAGE = os.path.dirname(redlock.__file__)


class _InterruptAt:
    """A trace function that raises KeyboardInterrupt at the k-th line our package executes.

    Two kinds of line event are not counted, because no real signal can land there and any
    Python code (the threading module's own) would break if one did: lines outside our
    package, and the second visit of a ``with`` line, which CPython reports as the block
    exits. A signal handler runs only where the interpreter checks for one (function entry,
    backward jumps, after a call returns), never between a block's last line and the call to
    its ``__exit__``, which is what a trace-raised exception there would simulate.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.lines = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(_PACKAGE):
            return None
        last = [0]

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                revisit = frame.f_lineno < last[0]
                last[0] = frame.f_lineno
                if revisit and linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip().startswith("with "):
                    return local
                self.lines += 1
                if self.lines == self.k:
                    raise KeyboardInterrupt
            return local

        return local(frame, event, arg)


def _count_lines(lock: redlock.Lock) -> int:
    # Counted on a client already connected, as every acquire of the sweep runs: the first
    # one also connects and loads every script, many lines that no later acquire runs.
    warm_up = lock._cluster.lock(unique("warm-up"), ttl=10.0)
    assert warm_up.acquire(blocking=False)
    warm_up.release()
    counter = _InterruptAt(10**9)
    sys.settrace(counter)
    try:
        assert lock.acquire(blocking=False)
    finally:
        sys.settrace(None)
    lock.release()
    return counter.lines


@pytest.mark.slow
@pytest.mark.parametrize("alone", [True, False], ids=["alone", "beside-a-renewer"])
def test_an_interrupt_at_any_line_of_an_acquire_leaves_nothing_behind(
    matrix_cluster: LocalMasters, alone: bool
) -> None:
    """KeyboardInterrupt at each line the acquire runs, swept: either the acquire raised and
    no master keeps our key, or it returned and the Lock holds (and can release) the lock.

    Beside a renewer (another flow of the client under way), a round's bytes are sent
    without the lock, so that other threads' commands can join them: a second code path."""
    masters = matrix_cluster
    with contextlib.ExitStack() as stack:
        rl = stack.enter_context(Redlock(masters.urls, node_timeout=0.5, wake_on_release=False))
        if not alone:
            stack.enter_context(rl.lock(unique("renewed"), ttl=10.0, auto_extend=True))
        lines = _count_lines(rl.lock(unique("count"), ttl=10.0))
        assert lines > 20
        raised = 0
        for k in range(1, lines + 1):
            lock = rl.lock(unique("interrupt"), ttl=10.0)
            trace = _InterruptAt(k)
            sys.settrace(trace)
            try:
                acquired = lock.acquire(blocking=False)
            except KeyboardInterrupt:
                acquired = None
            finally:
                sys.settrace(None)
            if acquired is None and lock.token is None:
                raised += 1
                assert eventually(lambda name=lock.name: keys_left(masters, name) == [None] * 5), f"key at line {k}"
            else:
                # Returned, or interrupted after the lease was recorded (leaving run()): then
                # the Lock holds it and can release it; never a key that nobody knows of.
                assert lock.locked(), f"line {k}"
                lock.release()
                assert eventually(lambda name=lock.name: keys_left(masters, name) == [None] * 5), f"line {k}"
            # The client is still healthy after every interruption.
            probe = rl.lock(unique("probe"), ttl=10.0)
            assert probe.acquire(blocking=False), f"client broken after an interrupt at line {k}"
            probe.release()
        assert raised > lines // 2  # the trace did interrupt the acquire, nearly everywhere


def test_a_cancel_at_any_step_of_an_asyncio_acquire_leaves_nothing_behind(matrix_cluster: LocalMasters) -> None:
    """Cancelled after k turns of the event loop, k swept across the whole acquire."""
    masters = matrix_cluster

    async def scenario() -> int:
        cancelled = 0
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.5, wake_on_release=False) as rl:
            for k in range(0, 40):
                lock = rl.lock(unique("cancel"), ttl=10.0)
                task = asyncio.ensure_future(lock.acquire(blocking=False))
                for _ in range(k):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    acquired = await task
                except asyncio.CancelledError:
                    cancelled += 1
                    assert lock.token is None
                    assert eventually(lambda name=lock.name: keys_left(masters, name) == [None] * 5), f"step {k}"
                else:
                    assert acquired
                    assert lock.locked()
                    await lock.release()
        return cancelled

    assert asyncio.run(scenario()) > 0


# --- configuration errors are not outages -----------------------------------------------------------


def test_a_wrong_password_fails_at_once_even_when_blocking(client: ClientFactory, acl_masters: LocalMasters) -> None:
    rl = client([master.url_as(password="wrong") for master in acl_masters], unavailable_timeout=30.0)
    started = time.monotonic()
    with pytest.raises(MasterMisconfigured) as error:
        rl.lock(unique()).acquire(blocking=True)
    assert time.monotonic() - started < 10  # not the 30 s of an outage (generous: loaded CI)
    assert any("WRONGPASS" in outcome.detail for outcome in error.value.outcomes)


def test_no_password_where_one_is_required_is_misconfigured(client: ClientFactory, acl_masters: LocalMasters) -> None:
    rl = client([master.url_as() for master in acl_masters], unavailable_timeout=30.0)
    with pytest.raises(MasterMisconfigured, match="NOAUTH"):
        rl.lock(unique()).acquire(blocking=True)


def test_a_user_without_permission_to_run_scripts_is_misconfigured(
    client: ClientFactory, acl_masters: LocalMasters
) -> None:
    rl = client([master.user_url("no-scripts") for master in acl_masters], unavailable_timeout=30.0)
    with pytest.raises(MasterMisconfigured) as error:
        rl.lock(unique(), fencing=True).acquire(blocking=True)
    assert any("NOPERM" in outcome.detail for outcome in error.value.outcomes)


def test_the_right_credentials_work(client: ClientFactory, acl_masters: LocalMasters) -> None:
    for urls in ([master.url for master in acl_masters], [master.user_url("locker") for master in acl_masters]):
        rl = client(urls)
        with rl.lock(unique(), ttl=5.0, fencing=True) as lock:
            assert lock.locked()


def test_one_misconfigured_master_of_five_is_a_minority(client: ClientFactory, matrix_masters: MastersFactory) -> None:
    cluster = matrix_masters(5, owner_only=False)
    with redis.Redis.from_url(cluster.urls[0]) as admin:
        admin.config_set("requirepass", "s3cret")
    rl = client(cluster.urls)
    with rl.lock(unique(), ttl=5.0) as lock:
        assert lock.locked()


def test_a_master_that_needs_a_password_we_did_not_give_says_so(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    # NOAUTH answers every step of the handshake, the scripts' too: it was reported as a
    # master that allows us no Lua scripting.
    cluster = fresh_masters(3, password="s3cret")
    rl = client([master.url_as() for master in cluster])
    with pytest.raises(MasterMisconfigured) as refused:
        rl.lock(unique()).acquire(blocking=False)
    for outcome in refused.value.outcomes:
        assert outcome.status is NodeStatus.MISCONFIGURED
        assert "requires a password and none was given" in outcome.detail
        assert "redis://:PASSWORD@host:port" in outcome.detail
        assert "Lua" not in outcome.detail
    with client(cluster.urls).lock(unique(), ttl=5.0) as lock:  # (given, it works)
        assert lock.locked()


# --- unix sockets and TLS (on every server of the matrix that has them) ----------------------------


def test_unix_socket_masters(client: ClientFactory, unix_masters: LocalMasters) -> None:
    rl = client([master.url for master in unix_masters])
    with rl.lock(unique(), ttl=5.0) as lock:
        assert lock.token is not None
        # Each master that granted holds our token (a master slower than node_timeout under
        # a loaded machine may not have been awaited: the majority was enough).
        granted = [m for m, o in zip(unix_masters, lock.outcomes, strict=True) if o.status is NodeStatus.GRANTED]
        assert len(granted) >= lock.quorum
        for master in granted:
            with redis.Redis.from_url(master.url) as raw:
                assert raw.get(lock.name) == lock.token.encode()


def test_tls_masters_with_server_authentication(client: ClientFactory, tls_masters: LocalMasters) -> None:
    rl = client([master.url for master in tls_masters])
    with rl.lock(unique(), ttl=5.0, fencing=True) as lock:
        assert lock.locked()


def test_mutual_tls_masters(client: ClientFactory, mutual_tls_masters: LocalMasters) -> None:
    rl = client([master.url for master in mutual_tls_masters])
    with rl.lock(unique(), ttl=5.0) as lock:
        assert lock.locked()


def _woken_by_a_release_of_a_long_name(client: ClientFactory, masters: LocalMasters) -> None:
    # A name of 150 kB: the waiter's SUBSCRIBE reply and the release's message each outgrow
    # a connection's read buffer (16 KiB), so each arrives over several reads.
    name = unique("long") + "x" * 150_000
    holder = client(masters.urls).lock(name, ttl=10.0)
    assert holder.acquire(blocking=False)
    # Another client (no handover within one client), and a retry delay far beyond the
    # wait: only the release's message, read whole, can wake the waiter in time.
    waiter = client(masters.urls, retry_delay=10.0).lock(name, ttl=10.0)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=4.0)))
    thread.start()
    with raw_clients(masters.urls) as raw:
        # Released only once the waiter was refused and listens on every master: its
        # SUBSCRIBE reply was read whole, and only the message can let it in now.
        channel = f"redlock:released:{name}"
        assert eventually(lambda: all(master.pubsub_numsub(channel)[0][1] == 1 for master in raw))
        holder.release()
        thread.join()
        assert got == [True]
        waiter.release()
        assert [master.exists(name) for master in raw] == [0] * len(raw)


def test_replies_longer_than_one_read(client: ClientFactory, masters: LocalMasters) -> None:
    _woken_by_a_release_of_a_long_name(client, masters)


def test_replies_longer_than_one_read_over_unix_sockets(client: ClientFactory, unix_masters: LocalMasters) -> None:
    _woken_by_a_release_of_a_long_name(client, unix_masters)


def test_replies_longer_than_one_read_over_tls(client: ClientFactory, tls_masters: LocalMasters) -> None:
    """A TLS record holds at most 16 kB: a long reply is many records, some read in part."""
    _woken_by_a_release_of_a_long_name(client, tls_masters)


def test_an_untrusted_certificate_fails_at_once_as_misconfigured(
    client: ClientFactory, tls_masters: LocalMasters
) -> None:
    files = tls_masters[0].tls_files
    assert files is not None
    urls = [master.url.replace(str(files.ca_cert), str(files.untrusted_ca_cert)) for master in tls_masters]
    rl = client(urls, unavailable_timeout=30.0)
    started = time.monotonic()
    with pytest.raises(MasterMisconfigured, match="TLS"):
        rl.lock(unique()).acquire(blocking=True)
    assert time.monotonic() - started < 10


def test_optional_certificates_still_check_the_host_name(client: ClientFactory, tls_masters: LocalMasters) -> None:
    # 127.1 reaches the masters (127.0.0.1) under a name their certificate does not carry.
    urls = [master.url.replace("127.0.0.1", "127.1") + "&ssl_cert_reqs=optional" for master in tls_masters]
    rl = client(urls, unavailable_timeout=30.0)
    with pytest.raises(MasterMisconfigured, match=r"TLS: .*Hostname mismatch"):
        rl.lock(unique()).acquire(blocking=True)
    # Turned off by name, the same certificate (from the trusted CA) is accepted.
    with client([url + "&ssl_check_hostname=false" for url in urls]).lock(unique(), ttl=5.0) as lock:
        assert lock.locked()


def test_mutual_tls_without_a_client_certificate_is_not_held(
    client: ClientFactory, mutual_tls_masters: LocalMasters
) -> None:
    urls = [master.url.split("&ssl_certfile")[0] for master in mutual_tls_masters]
    rl = client(urls, unavailable_timeout=2.0)
    with pytest.raises((MasterMisconfigured, QuorumUnavailable)):
        rl.lock(unique()).acquire(blocking=True)


# --- bad input never reaches the network ------------------------------------------------------------


@pytest.mark.parametrize("api", ["sync", "asyncio"])
@pytest.mark.parametrize(
    ("name", "ttl", "match"),
    [("ok", 1e16, "ttl must be at most"), ("ok", 4e8, "ttl must be at most"), ("bad\udcff", 10.0, "UTF-8")],
)
def test_bad_input_is_refused_before_any_traffic(api: str, name: str, ttl: float, match: str) -> None:
    # Port 1 on loopback: any attempt to connect would show as a refused master, not this.
    urls = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"]
    rl: Any = Redlock(urls) if api == "sync" else redlock.asyncio.Redlock(urls)
    with pytest.raises(ValueError, match=match):
        rl.lock(name, ttl=ttl)


def test_bad_timeouts_are_refused(masters: LocalMasters) -> None:
    with Redlock(masters.urls) as rl:
        lock = rl.lock(unique())
        with pytest.raises(ValueError, match="timeout must be at most"):
            lock.acquire(timeout=1e12)


def test_localhost_and_127_0_0_1_are_the_same_master() -> None:
    with pytest.raises(ValueError, match="same server twice"):
        Redlock(["redis://localhost:7001", "redis://127.0.0.1:7001", "redis://127.0.0.1:7002"])


def test_unreadable_tls_files_are_refused_when_the_client_is_made(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="ssl_ca_certs"):
        Redlock([f"rediss://127.0.0.1:7001?ssl_ca_certs={tmp_path}/missing.pem"])


def test_a_down_quorum_is_still_an_outage_not_a_misconfiguration(
    client: ClientFactory, matrix_masters: MastersFactory
) -> None:
    cluster = matrix_masters(3)
    cluster[0].kill()
    cluster[1].kill()
    with pytest.raises(QuorumUnavailable) as error:
        client(cluster.urls).lock(unique()).acquire(blocking=False)
    assert not isinstance(error.value, MasterMisconfigured)


# --- a closed client ------------------------------------------------------------------------


def _ends_within(seconds: float, operation: Any) -> BaseException | None:
    """Run ``operation`` in a thread; what it raised, or a failure if it did not end in time
    (a generous bound: the point is that it ends, not how fast)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            operation()
        except BaseException as error:
            outcome.append(error)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds}s"
    return outcome[0]


def test_a_closed_client_refuses_at_once(masters: LocalMasters) -> None:
    """Every operation of a closed client raises ClientClosed; an acquire, whose rollback
    has no connection left to use, neither hangs nor spins."""
    rl = Redlock(masters.urls)
    held = rl.lock(unique("held"), ttl=10.0)
    assert held.acquire(blocking=False)
    rl.close()
    for operation in (rl.lock(unique("closed")).acquire, held.extend):
        assert isinstance(_ends_within(10, operation), redlock.ClientClosed)


def test_closing_a_client_ends_a_waiting_acquire(masters: LocalMasters) -> None:
    name = unique("waited")
    with Redlock(masters.urls) as other:
        holder = other.lock(name, ttl=10.0)
        assert holder.acquire(blocking=False)
        rl = Redlock(masters.urls)
        waiting = rl.lock(name, ttl=10.0)
        closer = threading.Timer(0.3, rl.close)
        closer.start()
        assert isinstance(_ends_within(10, lambda: waiting.acquire(timeout=30)), redlock.ClientClosed)
        closer.join()
        holder.release()


def test_a_closed_asyncio_client_refuses_at_once(masters: LocalMasters) -> None:
    async def scenario() -> None:
        rl = redlock.asyncio.Redlock(masters.urls)
        held = rl.lock(unique("held"), ttl=10.0)
        assert await held.acquire(blocking=False)
        await rl.aclose()
        for operation in (rl.lock(unique("closed")).acquire, held.extend):
            with pytest.raises(redlock.ClientClosed):
                await asyncio.wait_for(operation(), 10)

    asyncio.run(scenario())
