"""Mixed clients: this library and each peer (pottery, redlock-py, aioredlock, redlock-ng,
node-redlock 1.x and 4.x, redis-semaphore) take the same names on the same five masters,
both ways.

Every client runs as a worker process of the protocol of docs/peers.md (peers/), this
library too, so each check drives both sides alike:
(a) each refuses while the other holds; (a') each refuses while the other holds the name
on a bare majority (a minority forgot it), and its rollback leaves that majority's keys;
(b) a blocking acquire wins only after the other's release; (c) a lapsed holder's extend
and release leave the next holder's key alone on every master; (c') a lapsed holder cannot
extend after another's whole tenure; (d) workers of both incrementing one counter under the
lock lose no update.
The masters are read directly (redis-py) for what the clients say. A peer is skipped only
where it cannot be installed (the skip says why); ``python -m peers install`` installs them
all into a cache outside the venv once, and the tests install lazily into the same cache.

The default run has one round of each check on the session's masters; the slow tier runs
more rounds, three workers a side, and Valkey's server too where it is installed.

A broken adapter (``peers.install.BROKEN``: a real client with its quorum lowered to one
master, the trials' self-test) is a peer like the others: it passes the checks whose outcome
does not hang on timing, and ``test_a_broken_adapter_fails_what_its_client_passes`` shows,
in the same run, that (a') catches it where the client it wraps passes.
"""

from __future__ import annotations

import contextlib
import itertools
import pathlib
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from peers import install, workers
from redlock.servers import LocalMasters, RedisServerNotFound, find_server

from .conftest import _in_ci, eventually, raw_clients

OURS = install.OWN
PEERS = install.PEERS
BROKEN = install.BROKEN

# Every test here runs peers against masters of its own (see open_masters).
pytestmark = pytest.mark.servers
#: Both ways: which of the two holds first.
DIRECTIONS = ("ours-holds", "peer-holds")

#: Long enough that no holder of a check lapses unless the check means it to.
LONG_MS = 30_000
#: An extend by a lapsed holder asks for more than the new holder's ttl: a touch shows in PTTL.
EXTEND_MS = 120_000


def name_for(*clients: object) -> str:
    """A new lock name that each of ``clients`` (workers) can take: under the prefix a client
    puts before every key it writes, where one does (the ``key_prefix`` of its greeting:
    pottery's ``redlock:``, redis-semaphore's ``mutex:``)."""
    prefixes = {getattr(client, "greeting", {}).get("key_prefix", "") for client in clients}
    prefixes.discard("")
    if len(prefixes) > 1:
        raise ValueError(f"clients {clients} have no name in common: their key prefixes are {sorted(prefixes)}")
    return f"{''.join(prefixes)}peers-{uuid.uuid4().hex}"


class Pool:
    """The workers of one module run: started on first use, reused by later tests of the
    same process (each test takes names of its own), stopped at the end."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.started: dict[tuple[str, int], workers.Worker] = {}
        self.unavailable: dict[str, str] = {}

    def get(self, client: str, index: int = 0) -> workers.Worker:
        if client in self.unavailable:
            pytest.skip(self.unavailable[client])
        if (client, index) not in self.started:
            try:
                self.started[(client, index)] = workers.start(client, self.addresses)
            except install.InstallFailed as exc:
                reason = f"peer {client} cannot be installed here: {exc}"
                if _in_ci():
                    # CI installs every peer first (.ci/run): it must not pass by skipping one.
                    pytest.fail(f"{reason} (and CI is set)")
                self.unavailable[client] = reason
                pytest.skip(reason)
        return self.started[(client, index)]

    def settle(self) -> None:
        """Stop the workers a test left with answers due (it failed midway): a later test
        would read them as its own."""
        for key, worker in list(self.started.items()):
            if worker.outstanding or worker.process.poll() is not None:
                worker.close()
                del self.started[key]

    def close(self) -> None:
        for worker in self.started.values():
            worker.close()


@contextlib.contextmanager
def pool_on(cluster: LocalMasters) -> Iterator[Pool]:
    pool = Pool([f"{master.host}:{master.port}" for master in cluster])
    try:
        yield pool
    finally:
        pool.close()


# Open masters (no password, as before LocalMasters became owner-only): the protocol gives a
# worker its masters as HOST:PORT, and the adapters connect without credentials.
@pytest.fixture(scope="module")
def open_masters() -> Iterator[LocalMasters]:
    with LocalMasters(5, owner_only=False) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def module_pool(open_masters: LocalMasters) -> Iterator[Pool]:
    with pool_on(open_masters) as started:
        yield started


@pytest.fixture
def raw(open_masters: LocalMasters) -> Iterator[list[redis.Redis]]:
    """The masters read directly: this module's open ones, not the session's."""
    with raw_clients(open_masters.urls) as clients:
        yield clients


@pytest.fixture
def pool(module_pool: Pool) -> Iterator[Pool]:
    yield module_pool
    module_pool.settle()


def on_masters(raw: list[redis.Redis], key: str) -> list[bytes | None]:
    return [client.get(key) for client in raw]


def ok(answer: dict[str, object], what: str) -> dict[str, object]:
    assert answer.get("ok") is True, f"{what}: {answer}"
    return answer


def pair(pool: Pool, peer: str, direction: str) -> tuple[workers.Worker, workers.Worker]:
    """(holder, contender) for ``direction``."""
    ours, theirs = pool.get(OURS), pool.get(peer)
    return (ours, theirs) if direction == "ours-holds" else (theirs, ours)


# --- the checks, each given a holder and a contender (used by both tiers) -------------------


def check_refuses_while_held(holder: workers.Worker, contender: workers.Worker, raw: list[redis.Redis]) -> None:
    name = name_for(holder, contender)
    held = ok(holder.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False}), "holder's acquire")
    token = str(held["token"]).encode()
    assert eventually(lambda: on_masters(raw, name) == [token] * len(raw)), on_masters(raw, name)
    refused = contender.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False})
    assert refused["ok"] is False, f"{contender.client} was granted {name} while {holder.client} held it: {refused}"
    # The refused attempt's rollback must not have taken the holder's keys with it.
    assert on_masters(raw, name) == [token] * len(raw)
    ok(holder.call({"op": "release", "name": name}), "holder's release")
    assert eventually(lambda: on_masters(raw, name) == [None] * len(raw))
    # Free again, the contender gets it: its refusal above was the hold, not a broken client.
    ok(contender.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False}), "contender's acquire")
    ok(contender.call({"op": "release", "name": name}), "contender's release")


def check_refuses_while_a_majority_holds(
    holder: workers.Worker, contender: workers.Worker, raw: list[redis.Redis]
) -> None:
    """The holder's key is gone from a minority of the masters (restarted without their data,
    or evicted): it still holds the name on a majority, so the contender, granted by that
    minority alone, must be refused, and its rollback must leave the majority's keys and take
    back its own. A client that counts fewer than a majority as a grant is caught here."""
    name = name_for(holder, contender)
    quorum = len(raw) // 2 + 1
    held = ok(holder.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False}), "holder's acquire")
    token = str(held["token"]).encode()
    assert eventually(lambda: on_masters(raw, name) == [token] * len(raw)), on_masters(raw, name)
    for client in raw[quorum:]:
        client.delete(name)
    refused = contender.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False})
    remaining = [token] * quorum + [None] * (len(raw) - quorum)
    try:
        assert refused["ok"] is False, (
            f"{contender.client} was granted {name} by {len(raw) - quorum} of {len(raw)} masters"
            f" while {holder.client} held it on the other {quorum}: {refused}"
        )
        assert eventually(lambda: on_masters(raw, name) == remaining), (
            f"{contender.client}'s refused attempt left {on_masters(raw, name)}"
        )
    finally:
        if refused.get("ok") is True:
            contender.call({"op": "release", "name": name})
        ok(holder.call({"op": "release", "name": name}), "holder's release")
    assert eventually(lambda: on_masters(raw, name) == [None] * len(raw))


#: How long the contender's blocking acquire is left waiting before the release: time for a
#: few refused attempts (every client retries within 300 ms). Nothing is measured by it.
WAIT_BEFORE_RELEASE = 0.6


def check_blocking_waits_for_release(holder: workers.Worker, contender: workers.Worker, raw: list[redis.Redis]) -> None:
    name = name_for(holder, contender)
    ok(holder.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False}), "holder's acquire")
    contender.send({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": True, "timeout_s": 60})
    early = contender.ready(WAIT_BEFORE_RELEASE)
    release = ok(holder.call({"op": "release", "name": name}), "holder's release")
    won = contender.receive()
    assert not early, f"{contender.client} answered while {holder.client} held {name}: {won}"
    ok(won, f"{contender.client}'s blocking acquire after the release")
    # Both clocks are this machine's CLOCK_MONOTONIC: the grant came after the release began.
    assert int(won["t1"]) > int(release["t0"]), (won, release)  # type: ignore[call-overload]
    token = str(won["token"]).encode()
    assert eventually(lambda: on_masters(raw, name).count(token) >= len(raw) // 2 + 1), on_masters(raw, name)
    ok(contender.call({"op": "release", "name": name}), "contender's release")


#: The lapsing holder's ttl: short, and waited out on the masters (not on a clock).
LAPSE_MS = 300


def check_lapsed_holder_leaves_next_key(
    holder: workers.Worker, contender: workers.Worker, raw: list[redis.Redis]
) -> None:
    name = name_for(holder, contender)
    ok(holder.call({"op": "acquire", "name": name, "ttl_ms": LAPSE_MS, "blocking": False}), "holder's acquire")
    assert eventually(lambda: on_masters(raw, name) == [None] * len(raw)), "the holder's keys never expired"
    got = ok(contender.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False}), "next acquire")
    token = str(got["token"]).encode()
    assert eventually(lambda: on_masters(raw, name) == [token] * len(raw)), on_masters(raw, name)
    before = [client.pttl(name) for client in raw]
    extended = holder.call({"op": "extend", "name": name, "ttl_ms": EXTEND_MS})
    # An extend a client does not have (redlock-py) cannot touch anything; any other must fail.
    assert extended["ok"] is False, f"{holder.client}'s lapsed extend succeeded over {contender.client}'s key"
    holder.call({"op": "release", "name": name})  # redlock-py's says ok whatever it deleted
    assert on_masters(raw, name) == [token] * len(raw), f"{holder.client} touched {contender.client}'s key"
    after = [client.pttl(name) for client in raw]
    assert all(0 < late <= early for early, late in zip(before, after, strict=True)), (before, after)
    ok(contender.call({"op": "release", "name": name}), "the next holder's release")


def check_lapsed_holder_cannot_extend_after_another(
    holder: workers.Worker, contender: workers.Worker, raw: list[redis.Redis]
) -> None:
    """The holder's lock lapses, the other acquires the name and releases it: the first
    holder's extend must fail and write nothing. Granted, it would tell its holder the lock
    was held all along, across another holder's whole tenure."""
    name = name_for(holder, contender)
    held = ok(holder.call({"op": "acquire", "name": name, "ttl_ms": LAPSE_MS, "blocking": False}), "holder's acquire")
    assert eventually(lambda: on_masters(raw, name) == [None] * len(raw)), "the holder's keys never expired"
    ok(contender.call({"op": "acquire", "name": name, "ttl_ms": LONG_MS, "blocking": False}), "the other's acquire")
    ok(contender.call({"op": "release", "name": name}), "the other's release")
    assert eventually(lambda: on_masters(raw, name) == [None] * len(raw))
    extended = holder.call({"op": "extend", "name": name, "ttl_ms": EXTEND_MS})
    revived = on_masters(raw, name).count(str(held["token"]).encode())
    holder.call({"op": "release", "name": name})
    assert extended["ok"] is False, f"{holder.client}'s extend after another's tenure succeeded ({revived} keys)"
    assert revived == 0, f"{holder.client}'s refused extend re-created its key on {revived} masters"


def check_counter(pool: Pool, peer: str, each: int, increments: int, raw: list[redis.Redis]) -> None:
    """``each`` workers of ours and of ``peer``, ``increments`` each, on one counter."""
    name, counter = name_for(pool.get(peer)), f"counter-{uuid.uuid4().hex}"
    crew = [pool.get(client, index) for client in (OURS, peer) for index in range(each)]
    request = {
        "op": "incr",
        "name": name,
        "ttl_ms": LONG_MS,
        "timeout_s": 120,
        "resource": pool.addresses[0],
        "counter": counter,
        "hold_ms": 2,
    }
    # Every request is written at once: each worker runs its own in turn, all workers at once.
    for worker in crew:
        for _ in range(increments):
            worker.send(request)
    answers = [(worker.client, worker.receive(180)) for worker in crew for _ in range(increments)]
    failed = [(client, answer) for client, answer in answers if answer.get("ok") is not True]
    assert not failed, failed
    total = len(crew) * increments
    final = int(raw[0].get(counter) or 0)
    assert final == total, f"{total - final} of {total} increments lost"
    assert sorted(int(answer["value"]) for _, answer in answers) == list(range(1, total + 1))  # type: ignore[call-overload]
    # The holds themselves, on the one clock every worker reads: none overlaps another.
    holds = sorted((int(a["acquired_ns"]), int(a["releasing_ns"]), client) for client, a in answers)  # type: ignore[call-overload]
    for (_, end, first), (start, _, second) in itertools.pairwise(holds):
        assert end < start, f"{first} and {second} held {name} at once"
    assert {client for client, _ in answers} == {OURS, peer}
    raw[0].delete(counter)


CHECKS: dict[str, Callable[[workers.Worker, workers.Worker, list[redis.Redis]], None]] = {
    "refuses-while-held": check_refuses_while_held,
    "refuses-while-a-majority-holds": check_refuses_while_a_majority_holds,
    "blocking-waits-for-release": check_blocking_waits_for_release,
    "lapsed-holder-leaves-next-key": check_lapsed_holder_leaves_next_key,
    "lapsed-holder-cannot-extend-after-another": check_lapsed_holder_cannot_extend_after_another,
}

#: What a peer is known to get wrong, from its source; each is an expected failure (strict:
#: a release that fixes it shows), in the default run only.
KNOWN: dict[tuple[str, str, str], str] = {
    ("aioredlock", "lapsed-holder-cannot-extend-after-another", "peer-holds"): (
        "aioredlock 0.7.3's extend is its acquire script, SET if absent or ours (aioredlock/redis.py,"
        " SET_LOCK_SCRIPT): it re-creates an expired key and reports the extend done"
    ),
    # redlock-py has no extend: its answer is a refusal, which the check counts as right.
}


#: Where the matrix does not run a broken adapter (BROKEN), and why: the check it fails by
#: design (test_a_broken_adapter_fails_what_its_client_passes shows that, beside the client
#: it wraps), and where a grant by one master comes or not as the requests interleave.
TIMING = "a grant by ONE master comes or not as its requests and ours interleave: the outcome is timing's"
BROKEN_SKIPS: dict[tuple[str, str], str] = {
    ("refuses-while-a-majority-holds", "ours-holds"): (
        "fails by design (one master grants); test_a_broken_adapter_fails_what_its_client_passes shows it"
    ),
    ("blocking-waits-for-release", "ours-holds"): TIMING,
}
#: The peers that are real clients: the slow tier's rounds are theirs.
REAL_PEERS = tuple(peer for peer in PEERS if peer not in BROKEN)


def mixed_params() -> list[object]:
    params: list[object] = []
    for peer, check, direction in itertools.product(PEERS, CHECKS, DIRECTIONS):
        marks: list[pytest.MarkDecorator] = []
        if (peer, check, direction) in KNOWN:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[peer, check, direction]))
        if peer in BROKEN and (check, direction) in BROKEN_SKIPS:
            marks.append(pytest.mark.skip(reason=f"{peer}: {BROKEN_SKIPS[check, direction]}"))
        params.append(pytest.param(peer, check, direction, marks=marks))
    return params


# --- the default run: one round each, on the session's masters ------------------------------


@pytest.mark.parametrize(("peer", "check", "direction"), mixed_params())
def test_mixed(pool: Pool, raw: list[redis.Redis], peer: str, check: str, direction: str) -> None:
    holder, contender = pair(pool, peer, direction)
    CHECKS[check](holder, contender, raw)


@pytest.mark.parametrize(
    "peer",
    [
        pytest.param(peer, marks=pytest.mark.skip(reason=f"{peer}: {TIMING}")) if peer in BROKEN else peer
        for peer in PEERS
    ],
)
def test_counter_loses_no_update(pool: Pool, raw: list[redis.Redis], peer: str) -> None:
    check_counter(pool, peer, each=2, increments=5, raw=raw)


@pytest.mark.parametrize("broken", BROKEN)
def test_a_broken_adapter_fails_what_its_client_passes(pool: Pool, raw: list[redis.Redis], broken: str) -> None:
    """The trials' self-test in small: with this library holding the name on a bare majority,
    the client that a broken adapter wraps is refused, and the broken adapter, which counts
    one master as a grant, is not. One check tells them apart, in one run."""
    ours = pool.get(OURS)
    check_refuses_while_a_majority_holds(ours, pool.get(BROKEN[broken]), raw)
    with pytest.raises(AssertionError, match="was granted"):
        check_refuses_while_a_majority_holds(ours, pool.get(broken), raw)


@pytest.mark.parametrize("prefix", ["order", "fence", "readers", "intent"])
def test_our_lock_leaves_potterys_lock_on_its_aux_key_alone(pool: Pool, raw: list[redis.Redis], prefix: str) -> None:
    """Our lock "X" keeps keys of its own beside it; 0.1.0 kept them where pottery's
    Redlock(key="order:X") lives, redlock:order:X, and deleted pottery's held lock there on
    5 of 5 masters. Our acquire, extend and release of X leave pottery's key alone."""
    ours, theirs = pool.get(OURS), pool.get("pottery")
    plain = f"peers-{uuid.uuid4().hex}"
    potterys = f"redlock:{prefix}:{plain}"
    held = ok(theirs.call({"op": "acquire", "name": potterys, "ttl_ms": LONG_MS, "blocking": False}), "pottery")
    token = str(held["token"]).encode()
    assert eventually(lambda: on_masters(raw, potterys) == [token] * len(raw))
    try:
        ok(ours.call({"op": "acquire", "name": plain, "ttl_ms": LONG_MS, "blocking": False}), "our acquire")
        ok(ours.call({"op": "extend", "name": plain, "ttl_ms": LONG_MS}), "our extend")
        ok(ours.call({"op": "release", "name": plain}), "our release")
        assert on_masters(raw, potterys) == [token] * len(raw), "our lock changed pottery's held lock"
        ok(theirs.call({"op": "release", "name": potterys}), "pottery's release of its own lock")
    finally:
        for client in raw:
            client.delete(potterys)


def test_peers_install_outside_the_project_environment() -> None:
    """The cache is not in the venv, and each Python peer is pinned whole (its closure)."""
    assert not install.cache_dir().resolve().is_relative_to(pathlib.Path(sys.prefix).resolve())
    for client, requirements in install.PYTHON_PEERS.items():
        assert all("==" in requirement for requirement in requirements), client


class Careless:
    """A Redlock client that never compares, in this process, for the checks' own test: its
    acquire overwrites (no NX) and its release and extend are a plain DEL and PEXPIRE. It
    answers as a worker does, so the checks above run on it unchanged."""

    client = "careless"

    def __init__(self, raw: list[redis.Redis]) -> None:
        self.raw = raw

    def call(self, request: dict[str, object]) -> dict[str, object]:
        key, quorum = str(request["name"]), len(self.raw) // 2 + 1
        if request["op"] == "acquire":
            token = uuid.uuid4().hex
            granted = sum(bool(client.set(key, token, px=int(request["ttl_ms"]))) for client in self.raw)  # type: ignore[call-overload]
            return {"ok": granted >= quorum, "token": token}
        if request["op"] == "extend":
            return {"ok": sum(bool(client.pexpire(key, int(request["ttl_ms"]))) for client in self.raw) >= quorum}  # type: ignore[call-overload]
        return {"ok": sum(int(client.delete(key)) for client in self.raw) >= quorum}


@pytest.mark.parametrize("check", ["refuses-while-held", "lapsed-holder-leaves-next-key"])
def test_the_checks_catch_a_client_that_never_compares(pool: Pool, raw: list[redis.Redis], check: str) -> None:
    """The checks can fail: against a client that overwrites a held key (a), or extends and
    deletes the next holder's key after its own lapsed (c), each fails."""
    careless = Careless(raw)
    holder, contender = (pool.get(OURS), careless) if check == "refuses-while-held" else (careless, pool.get(OURS))
    with pytest.raises(AssertionError, match=r"was granted|lapsed extend succeeded"):
        CHECKS[check](holder, contender, raw)  # type: ignore[arg-type]


# --- settings given to every client (chaos trial --request-timeout, --retry-delay) ------------

#: Given to every client: each takes what it has a setting for.
GIVEN = workers.Settings(request_timeout=0.25, retry_delay=0.15)


#: Clients whose acquire, granted by a majority in time, raises when another master failed,
#: with the lock held on that majority and never returned: nobody holds it until its ttl ends.
RAISES_ON_A_MASTERS_ERROR = {
    # redlock/__init__.py:110-112: `if redis_errors: raise MultipleRedlockException(...)`
    # after the majority and validity checks, before the Lock is made; no rollback.
    "redlock-py": "MultipleRedlockException",
}


@pytest.fixture(scope="module")
def three_masters() -> Iterator[LocalMasters]:
    with LocalMasters(3, owner_only=False) as cluster:
        yield cluster


@pytest.mark.parametrize("client", [OURS, *REAL_PEERS])
def test_a_given_request_timeout_bounds_every_client_that_has_a_setting_for_it(
    client: str, three_masters: LocalMasters
) -> None:
    """With one master of three hung (SIGSTOP: the kernel still takes its connections, nothing
    answers), a client given a request timeout answers a non-blocking acquire, granted by the
    two others; one whose greeting says it has no such setting waits for the hung master.
    Each setting the greeting reports is the one given, or says it cannot be given."""
    addresses = [f"{master.host}:{master.port}" for master in three_masters]
    try:
        worker = workers.start(client, addresses, settings=GIVEN)
    except install.InstallFailed as exc:
        if _in_ci():
            pytest.fail(f"peer {client} cannot be installed here: {exc} (and CI is set)")
        pytest.skip(f"peer {client} cannot be installed here: {exc}")
    with worker:
        taken = worker.greeting["settings"]
        for setting in ("request_timeout", "retry_delay"):
            # Taken, or not settable: never the client's default when a value was given.
            assert "its default" not in taken[setting], (client, setting, taken)
        hung = three_masters[2]
        hung.pause()
        try:
            worker.send({"op": "acquire", "name": name_for(worker), "ttl_ms": LONG_MS, "blocking": False})
            if "not settable" in taken["request_timeout"]:
                # (Not a measure of speed: without a bound it never answers while the master hangs.)
                assert not worker.ready(2.0), f"{client} answered with a master hung and no request timeout"
            else:
                assert worker.ready(15.0), f"{client}, given a request timeout, hung with its master"
                answer = worker.receive()
                if client in RAISES_ON_A_MASTERS_ERROR:
                    assert RAISES_ON_A_MASTERS_ERROR[client] in answer.get("error", ""), (client, answer)
                else:
                    assert answer.get("ok") is True, (client, answer)
        finally:
            hung.resume()


# --- the slow tier: rounds, three workers a side, and Valkey ---------------------------------

ROUNDS = 3


def _cluster_of(server: str) -> LocalMasters:
    if server == "valkey":
        try:
            return LocalMasters(5, binary=find_server("valkey"), owner_only=False)
        except RedisServerNotFound as exc:
            pytest.skip(f"valkey-server is not installed: {exc}")
    return LocalMasters(5, owner_only=False)


@pytest.fixture(scope="module", params=["redis", "valkey"])
def server_cluster(request: pytest.FixtureRequest) -> Iterator[tuple[Pool, list[redis.Redis]]]:
    with _cluster_of(request.param) as cluster, pool_on(cluster) as started, raw_clients(cluster.urls) as clients:
        yield started, clients


@pytest.fixture
def server_pool(server_cluster: tuple[Pool, list[redis.Redis]]) -> Iterator[tuple[Pool, list[redis.Redis]]]:
    yield server_cluster
    server_cluster[0].settle()


@pytest.mark.slow
@pytest.mark.servers
@pytest.mark.parametrize("peer", REAL_PEERS)
def test_mixed_rounds(server_pool: tuple[Pool, list[redis.Redis]], peer: str) -> None:
    pool, raw = server_pool
    for _, (check, direction) in itertools.product(range(ROUNDS), itertools.product(CHECKS, DIRECTIONS)):
        if (peer, check, direction) in KNOWN:
            continue  # (the default run shows it, as an expected failure)
        holder, contender = pair(pool, peer, direction)
        CHECKS[check](holder, contender, raw)


@pytest.mark.slow
@pytest.mark.servers
@pytest.mark.parametrize("peer", REAL_PEERS)
def test_counter_many_workers(server_pool: tuple[Pool, list[redis.Redis]], peer: str) -> None:
    pool, raw = server_pool
    check_counter(pool, peer, each=3, increments=10, raw=raw)
