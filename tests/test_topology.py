"""What the client makes of the masters it is given: replicas, cluster nodes, one server
under two addresses, eviction, persistence; the handshake's judgement and ``check()``.

The rules themselves (redlock._protocol.topology) are pure and tested without servers first, then
the connection policy that applies them at each handshake; the rest runs on real masters
(replicas made with REPLICAOF, a node started in cluster mode), once per public API where
the API is involved.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

import redlock
from redlock._protocol import scripts as _scripts
from redlock._protocol.config import Credentials
from redlock._protocol.connection import RECONNECT_BACKOFF_MAX, Connect, Connections, Write, reply_parser
from redlock._protocol.core import Command, Round
from redlock._protocol.facts import MasterFacts, facts_from_info
from redlock._protocol.topology import (
    CLUSTER_MODE,
    EVICTS_KEYS,
    FACTS_UNKNOWN,
    FENCING_WITHOUT_AOF,
    HAS_REPLICAS,
    NO_PERSISTENCE,
    REPLICA,
    SAME_SERVER,
    SENTINEL,
    Finding,
    MasterReport,
    Severity,
    Verdict,
    master_findings,
    verdict_of,
)
from redlock.exceptions import ClientClosed, MasterMisconfigured, NodeStatus
from redlock.servers import AclUser, LocalMaster, server_version

from .conftest import ClientFactory, MastersFactory, eventually, unique

#: The default user's password on the masters with ACL users here.
PASSWORD = "topology-secret"
#: May do everything the library does, except INFO: what it learns at the handshake stays unknown.
NO_INFO = AclUser("no-info", "no-info-secret", rules=("~*", "&*", "+@all", "-info"))
CLUSTER_MODE_ARGS = ("--cluster-enabled", "yes")
VOLATILE_LRU_ARGS = ("--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")


def make_replica(replica: LocalMaster, primary: LocalMaster) -> None:
    """REPLICAOF: ``replica`` turns read-only at once, whether or not it can sync (it cannot
    when ``primary`` wants a password it was not given: role and READONLY hold all the same).
    ``replica`` must have been started with owner_only=False: REPLICAOF is renamed away otherwise."""
    with redis.Redis.from_url(replica.tcp_url) as admin:
        admin.replicaof(primary.host, primary.port)


def codes(findings: Any) -> set[str]:
    return {finding.code for finding in findings}


# --- the rules, from what a master says ------------------------------------------------------

_POLICIES = (
    "noeviction",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
)

facts_said = st.builds(
    MasterFacts,
    server=st.sampled_from([None, "redis", "valkey"]),
    run_id=st.one_of(st.none(), st.sampled_from(["a" * 40, "b" * 40])),
    mode=st.sampled_from([None, "standalone", "cluster", "sentinel"]),
    role=st.sampled_from([None, "master", "slave"]),
    connected_replicas=st.one_of(st.none(), st.integers(0, 3)),
    maxmemory=st.one_of(st.none(), st.sampled_from([0, 1 << 20])),
    maxmemory_policy=st.one_of(st.none(), st.sampled_from(_POLICIES)),
    aof_enabled=st.one_of(st.none(), st.booleans()),
    answered=st.just(True),
)


@given(facts_said, st.booleans(), st.one_of(st.none(), st.just("other:6379")))
def test_each_rule_fires_exactly_on_what_it_reads_and_never_on_an_unknown(
    facts: MasterFacts, fencing: bool, same_as: str | None
) -> None:
    found = codes(master_findings(facts, fencing=fencing, same_as=same_as))
    assert (CLUSTER_MODE in found) == (facts.mode == "cluster")
    assert (SENTINEL in found) == (facts.mode == "sentinel")
    assert (REPLICA in found) == (facts.role == "slave")
    assert (SAME_SERVER in found) == (same_as is not None)
    assert (HAS_REPLICAS in found) == bool(facts.connected_replicas)
    evicting = facts.maxmemory_policy is not None and facts.maxmemory_policy != "noeviction"
    assert (EVICTS_KEYS in found) == (bool(facts.maxmemory) and evicting)
    assert (FENCING_WITHOUT_AOF in found) == (fencing and facts.aof_enabled is False)
    assert (NO_PERSISTENCE in found) == (not fencing and facts.aof_enabled is False)


@given(facts_said, st.booleans(), st.one_of(st.none(), st.just("other:6379")))
def test_strict_refuses_every_warning_and_changes_nothing_else(
    facts: MasterFacts, fencing: bool, same_as: str | None
) -> None:
    lenient = master_findings(facts, fencing=fencing, same_as=same_as)
    strict = master_findings(facts, fencing=fencing, strict=True, same_as=same_as)
    assert [f.code for f in lenient] == [f.code for f in strict]
    for before, after in zip(lenient, strict, strict=True):
        expected = Severity.REFUSAL if before.severity is Severity.WARNING else before.severity
        assert after.severity is expected
    assert all(finding.severity is not Severity.WARNING for finding in strict)


@given(facts_said)
def test_the_rules_read_what_info_says(facts: MasterFacts) -> None:
    """The same findings from MasterFacts as from the INFO text that says them."""
    lines = ["# Server", "uptime_in_seconds:5"]
    if facts.server == "valkey":
        lines += ["server_name:valkey", "valkey_version:9.0.1"]
    if facts.server == "redis":
        lines.append("redis_version:7.0.15")
    fields = {
        "run_id": facts.run_id,
        "redis_mode": facts.mode if facts.mode != "cluster" else "standalone",
        "role": facts.role,
        "connected_slaves": facts.connected_replicas,
        "maxmemory": facts.maxmemory,
        "maxmemory_policy": facts.maxmemory_policy,
        "aof_enabled": None if facts.aof_enabled is None else int(facts.aof_enabled),
    }
    lines += [f"{key}:{value}" for key, value in fields.items() if value is not None]
    if facts.mode == "cluster":
        lines += ["# Cluster", "cluster_enabled:1"]
    parsed = facts_from_info("\r\n".join(lines).encode())
    assert codes(master_findings(parsed)) == codes(master_findings(facts))


def test_a_master_that_would_not_say_is_unknown_and_nothing_is_held_against_it() -> None:
    (finding,) = master_findings(MasterFacts(), fencing=True, strict=True)
    assert (finding.code, finding.severity) == (FACTS_UNKNOWN, Severity.INFO)


def _report(*findings: Severity, error: str = "") -> MasterReport:
    return MasterReport(
        "m", True, error, None, None, None, None, None, None, None, None, None, False, False, 0.001,
        tuple(Finding(str(index), severity, "") for index, severity in enumerate(findings)),
    )  # fmt: skip


@given(st.lists(st.lists(st.sampled_from(list(Severity)), max_size=3), min_size=1, max_size=5), st.data())
def test_the_verdict_is_unfit_on_any_refusal_or_too_few_usable_masters(
    severities: list[list[Severity]], data: st.DataObject
) -> None:
    down = data.draw(st.lists(st.booleans(), min_size=len(severities), max_size=len(severities)))
    masters = [_report(*found, error="refused" if off else "") for found, off in zip(severities, down, strict=True)]
    quorum = len(masters) // 2 + 1
    verdict = verdict_of(masters, quorum)
    refused = any(Severity.REFUSAL in found for found in severities)
    usable = sum(1 for found, off in zip(severities, down, strict=True) if not off and Severity.REFUSAL not in found)
    if refused or usable < quorum:
        assert verdict is Verdict.UNFIT
    elif any(Severity.WARNING in found for found in severities):
        assert verdict is Verdict.WARNINGS
    else:
        assert verdict is Verdict.FIT


# --- the connection policy applies them at each handshake -------------------------------------

NAMES = ("m0", "m1", "m2")


def _info(**fields: object) -> bytes:
    said = {"redis_version": "7.0.15", "redis_mode": "standalone", "role": "master", "connected_slaves": 0}
    said.update(fields)
    text = "\r\n".join(f"{key}:{value}" for key, value in said.items()).encode()
    return b"$%d\r\n%s\r\n" % (len(text), text)


def _set(tag: int = 0, *, cleanup: bool = False) -> Round:
    return Round(
        Command(("SET", f"k{tag}", "t", "NX", "PX", 1000)),
        (0, 1, 2),
        NAMES,
        2,
        0.05,
        wait_for_all=cleanup,
        cleanup=cleanup,
    )


class Handshakes:
    """A policy on three masters, and what each master says when its connection opens."""

    def __init__(self, *, strict: bool = False) -> None:
        self.policy = Connections(NAMES, [Credentials()] * 3, node_timeout=0.05, connect_timeout=1.0, strict=strict)
        self.found: list[tuple[int, str, Severity]] = []
        self.policy.on_finding = lambda node, finding: self.found.append((node, finding.code, finding.severity))
        self.parsers = [reply_parser() for _ in NAMES]

    def connect(self, node: int, round_: Round, info: bytes, now: float = 0.0) -> None:
        """``round_`` opens master ``node``'s connection; the master answers the handshake
        with ``info``, then ``+OK`` to the scripts (the round's own reply is left unsaid)."""
        connect = self.policy.submit(round_, node, now)
        assert isinstance(connect, Connect)
        assert self.policy.connected(connect, None, now) is not None
        self.answer(
            node, info + b"*2\r\n*-1\r\n*-1\r\n" + b"+OK\r\n" * len(_scripts.ALL), now
        )  # (COMMAND INFO: no native)

    def answer(self, node: int, data: bytes, now: float) -> None:
        self.parsers[node].feed(data)
        outcome = self.policy.received("command", node, self.parsers[node], now)
        assert not outcome.hang_up
        assert outcome.failure is None


def test_a_replica_is_refused_at_its_handshake_and_asked_again_once_a_second() -> None:
    masters = Handshakes()
    first = _set(1)
    masters.connect(0, first, _info(role="slave", master_host="10.0.0.9", master_port=6379))
    outcome = first.outcomes[0]
    assert outcome.status is NodeStatus.MISCONFIGURED
    assert "replica of 10.0.0.9:6379" in outcome.detail
    assert masters.found == [(0, REPLICA, Severity.REFUSAL)]
    masters.answer(0, b"-READONLY You can't write against a read only replica.\r\n", 0.0)  # dropped: decided

    # Refused on a connection that stays up: told at once, nothing sent; a clean-up still goes.
    later = _set(2)
    assert masters.policy.submit(later, 0, 0.5) is None
    assert later.outcomes[0].status is NodeStatus.MISCONFIGURED
    cleanup = _set(3, cleanup=True)
    assert isinstance(masters.policy.submit(cleanup, 0, 0.5), Write)
    masters.answer(0, b":0\r\n", 0.5)
    assert cleanup.outcomes[0].status is NodeStatus.DENIED

    # A second on, a refused round asks INFO again; promoted meanwhile, it is back.
    again = _set(4)
    write = masters.policy.submit(again, 0, 0.5 + RECONNECT_BACKOFF_MAX)
    assert isinstance(write, Write)
    assert b"INFO" in write.data
    assert again.outcomes[0].status is NodeStatus.MISCONFIGURED
    masters.answer(0, _info(role="master"), 1.6)
    assert isinstance(masters.policy.submit(_set(5), 0, 1.7), Write)
    assert masters.found == [(0, REPLICA, Severity.REFUSAL)]  # told once for the connection


def test_one_server_under_two_addresses_counts_once_and_its_second_address_is_refused() -> None:
    masters = Handshakes()
    round_ = _set()
    masters.connect(0, round_, _info(run_id="f" * 40))
    masters.connect(1, round_, _info(run_id="f" * 40))
    masters.connect(2, round_, _info(run_id="e" * 40))
    masters.answer(0, b"+OK\r\n", 0.0)
    masters.answer(2, b"+OK\r\n", 0.0)
    assert [round_.outcomes[node].status for node in range(3)] == [
        NodeStatus.GRANTED,
        NodeStatus.MISCONFIGURED,
        NodeStatus.GRANTED,
    ]
    assert str(round_.outcomes[1]).startswith("m1: misconfigured (it is the same server as m0 (run_id ffff")
    assert masters.policy.same_servers() == [None, "m0", None]
    # The first address keeps the server when it is asked again.
    masters.policy.links[0].recheck(0.1)
    masters.answer(0, _info(run_id="f" * 40), 0.1)
    assert masters.policy.same_servers() == [None, "m0", None]


def test_risks_are_logged_once_per_connection_and_refused_when_strict(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="redlock")
    risky = _info(connected_slaves=1, maxmemory=1 << 20, maxmemory_policy="allkeys-lru")
    lenient = Handshakes()
    round_ = _set()
    lenient.connect(0, round_, risky)
    lenient.policy.links[0].recheck(0.1)
    lenient.answer(0, b"+OK\r\n" + risky, 0.1)  # asked again on the same connection: not told again
    assert round_.outcomes[0].status is NodeStatus.GRANTED
    assert lenient.found == [(0, HAS_REPLICAS, Severity.WARNING), (0, EVICTS_KEYS, Severity.WARNING)]
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("master m0: it has 1 replica(s)")
    assert "allkeys-lru" in messages[1]

    strict = Handshakes(strict=True)
    round_ = _set()
    strict.connect(0, round_, risky)
    assert round_.outcomes[0].status is NodeStatus.MISCONFIGURED
    assert "strict mode refuses it" in round_.outcomes[0].detail
    assert strict.found == [(0, HAS_REPLICAS, Severity.REFUSAL), (0, EVICTS_KEYS, Severity.REFUSAL)]


def test_fencing_judges_the_masters_connected_already_for_persistence(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="redlock")
    for strict in (False, True):
        masters = Handshakes(strict=strict)
        masters.connect(0, _set(), _info(aof_enabled=0))
        masters.connect(1, _set(), _info(aof_enabled=1))
        masters.answer(0, b"+OK\r\n", 0.0)
        masters.answer(1, b"+OK\r\n", 0.0)
        assert masters.found == []  # no fencing in use: no AOF is only worth knowing
        masters.policy.use_fencing(1.0)
        masters.policy.use_fencing(2.0)  # (once is enough)
        severity = Severity.REFUSAL if strict else Severity.WARNING
        assert masters.found == [(0, FENCING_WITHOUT_AOF, severity)]
        round_ = _set()
        assert (masters.policy.submit(round_, 0, 1.5) is None) == strict  # strict: refused, not sent
        if strict:
            assert "fencing" in round_.outcomes[0].detail
    assert sum("fencing tokens are in use" in record.getMessage() for record in caplog.records) == 2


def test_a_clean_up_written_behind_a_refused_handshake_keeps_its_reply() -> None:
    """Which of two addresses of one server deleted our key is what happened: a release
    counts it, though the address it came by is refused."""
    masters = Handshakes()
    cleanup = _set(cleanup=True)
    masters.connect(0, cleanup, _info(role="slave"))
    assert cleanup.pending == (0, 1, 2)
    masters.answer(0, b":1\r\n", 0.0)
    assert cleanup.outcomes[0].status is NodeStatus.GRANTED


# --- configuration errors in replies ---------------------------------------------------------


def test_a_replica_answering_readonly_is_misconfigured_at_once_not_retried(
    fresh_masters: MastersFactory, client: ClientFactory
) -> None:
    """A user who may not run INFO cannot see the replicas at the handshake: their READONLY
    answer to SET is configuration, not weather, so a blocking acquire stops at once."""
    masters = fresh_masters(3, password=PASSWORD, acl_users=(NO_INFO,), owner_only=False)
    make_replica(masters[1], masters[0])
    make_replica(masters[2], masters[0])
    rl = client([master.user_url(NO_INFO.name) for master in masters])
    started = time.monotonic()
    with pytest.raises(MasterMisconfigured) as raised:
        rl.lock(unique()).acquire(timeout=3)
    # Retrying would have run out the 3 s; generous, for a busy machine.
    assert time.monotonic() - started < 2.0
    refused = [outcome.status is NodeStatus.MISCONFIGURED for outcome in raised.value.outcomes]
    assert refused == [False, True, True]
    assert all("READONLY" in outcome.detail for outcome in raised.value.outcomes[1:])


# --- on real masters ----------------------------------------------------------------------------


def test_a_replica_among_the_masters_is_refused_and_its_primary_warned_about(
    fresh_masters: MastersFactory, client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redlock")
    masters = fresh_masters(3, owner_only=False)
    make_replica(masters[1], masters[0])
    with redis.Redis.from_url(masters[0].url) as primary:
        assert eventually(lambda: primary.info("replication")["connected_slaves"] == 1)
    rl = client(masters.urls)
    with rl.lock(unique(), timeout=3):  # the two others grant it
        pass
    report = rl.check()
    assert report.verdict is Verdict.UNFIT
    primary_report, replica_report, plain = report.masters
    assert (replica_report.role, replica_report.reachable, replica_report.usable) == ("slave", True, False)
    assert codes(replica_report.findings) >= {REPLICA}
    assert "it is a replica" in replica_report.error  # (refused: not asked the second PING)
    assert replica_report.latency is not None
    assert HAS_REPLICAS in codes(primary_report.findings)
    assert plain.usable
    assert primary_report.usable
    logged = [record.getMessage() for record in caplog.records]
    assert any(
        message.startswith(f"master {masters.urls[1].removeprefix('redis://')} is misconfigured: it is a replica")
        for message in logged
    )
    assert any("it has 1 replica(s)" in message for message in logged)


def test_replicas_and_cluster_nodes_leaving_no_majority_raise_master_misconfigured_at_once(
    fresh_masters: MastersFactory, client: ClientFactory
) -> None:
    masters = fresh_masters(2, owner_only=False)
    cluster_node = fresh_masters(1, extra_args=CLUSTER_MODE_ARGS)
    make_replica(masters[1], masters[0])
    rl = client([*masters.urls, *cluster_node.urls])
    started = time.monotonic()
    with pytest.raises(MasterMisconfigured) as raised:
        rl.lock(unique()).acquire(timeout=3)
    assert time.monotonic() - started < 2.0  # not retried for its timeout (generous: a busy machine)
    _, replica, node = raised.value.outcomes
    assert (replica.status, node.status) == (NodeStatus.MISCONFIGURED, NodeStatus.MISCONFIGURED)
    assert "it is a replica" in replica.detail
    assert "Redis Cluster node (cluster_enabled:1)" in node.detail
    assert "Redlock needs standalone masters" in node.detail
    report = rl.check()
    assert [codes(master.findings) & {REPLICA, CLUSTER_MODE} for master in report.masters] == [
        set(),
        {REPLICA},
        {CLUSTER_MODE},
    ]
    assert report.masters[2].mode == "cluster"


def test_one_server_under_its_tcp_port_and_its_unix_socket_is_one_master(
    fresh_masters: MastersFactory, client: ClientFactory
) -> None:
    masters = fresh_masters(3, unix_socket=True)
    twice = [masters[0].tcp_url, masters[0].url, masters[1].url, masters[2].url]
    rl = client(twice)
    with rl.lock(unique(), timeout=3):  # three servers of four masters: still a majority
        pass
    report = rl.check()
    assert report.verdict is Verdict.UNFIT
    same = [master for master in report.masters if SAME_SERVER in codes(master.findings)]
    assert len(same) == 1
    (finding,) = [f for f in same[0].findings if f.code == SAME_SERVER]
    other = next(m.address for m in report.masters[:2] if m is not same[0])
    assert f"the same server as {other}" in finding.message
    assert report.masters[0].run_id == report.masters[1].run_id
    assert report.masters[1].unix_socket
    assert report.usable == 3


def test_an_evicting_memory_policy_is_a_warning_and_strict_refuses_it(
    fresh_masters: MastersFactory, client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redlock")
    masters = fresh_masters(3, extra_args=VOLATILE_LRU_ARGS)
    rl = client(masters.urls)
    with rl.lock(unique(), timeout=3):
        pass
    evictions = [record.getMessage() for record in caplog.records if "volatile-lru" in record.getMessage()]
    assert len(evictions) == 3  # once per master (per connection)
    assert all("evict a lock key before its ttl" in message for message in evictions)
    report = rl.check()
    assert report.verdict is Verdict.WARNINGS
    assert report.fit
    assert all(
        (master.maxmemory, master.maxmemory_policy) == (100 * 1024 * 1024, "volatile-lru") for master in report.masters
    )
    assert len(caplog.records) == 3  # check() asked them again: nothing new to say

    strict = client(masters.urls, strict=True)
    started = time.monotonic()
    with pytest.raises(MasterMisconfigured, match="strict mode refuses it"):
        strict.lock(unique()).acquire(timeout=3)
    assert time.monotonic() - started < 2.0
    assert strict.check().verdict is Verdict.UNFIT


def test_a_user_denied_info_still_locks_and_its_masters_are_unknown(
    fresh_masters: MastersFactory, client: ClientFactory
) -> None:
    masters = fresh_masters(3, password=PASSWORD, acl_users=(NO_INFO,), extra_args=VOLATILE_LRU_ARGS)
    rl = client([master.user_url(NO_INFO.name) for master in masters], strict=True)
    with rl.lock(unique(), timeout=3) as lock:
        assert lock.validity > 0
    report = rl.check()
    assert report.verdict is Verdict.FIT
    for master in report.masters:
        assert master.reachable
        assert (master.server, master.role, master.maxmemory_policy) == (None, None, None)
        assert codes(master.findings) == {FACTS_UNKNOWN}


def test_fencing_on_masters_without_an_append_only_file_is_warned_about_once(
    fresh_masters: MastersFactory, client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redlock")
    masters = fresh_masters(3)
    rl = client(masters.urls)
    with rl.lock(unique(), timeout=3):  # connected before any fencing is asked for
        pass
    assert not caplog.records
    for _ in range(2):
        with rl.lock(unique(), timeout=3, fencing=True) as lock:
            assert lock.fencing_token is not None
    warned = [record.getMessage() for record in caplog.records]
    assert len(warned) == 3
    assert all("fencing tokens are in use but it has no append-only file" in message for message in warned)
    assert rl.check().verdict is Verdict.WARNINGS


def test_check_on_masters_fit_for_redlock(fresh_masters: MastersFactory, client: ClientFactory) -> None:
    masters = fresh_masters(3, persistence="aof-always")
    rl = client(masters.urls)
    report = rl.check()
    assert (report.verdict, report.quorum, report.usable, report.strict) == (Verdict.FIT, 2, 3, False)
    for master, url in zip(report.masters, masters.urls, strict=True):
        assert url.endswith(master.address)
        assert (master.reachable, master.error, master.role, master.mode) == (True, "", "master", "standalone")
        assert master.server in ("redis", "valkey")
        assert master.version
        assert master.run_id
        assert (master.aof_enabled, master.tls, master.unix_socket) == (True, False, False)
        assert master.latency is not None
        assert 0 < master.latency < 1.0
        assert master.findings == ()
    fenced = rl.check(fencing=True)
    assert fenced.verdict is Verdict.FIT  # AOF on; its fsync policy is unknown: information only
    assert all(codes(master.findings) == {"appendfsync-unknown"} for master in fenced.masters)
    with pytest.raises(TypeError, match="fencing must be a bool"):
        rl.check(fencing="yes")


def test_check_reports_a_master_it_cannot_reach_and_one_that_refuses_us(
    fresh_masters: MastersFactory, client: ClientFactory
) -> None:
    masters = fresh_masters(3, password=PASSWORD)
    masters[2].stop()
    rl = client([masters[0].url, masters[1].url_as(password="wrong"), masters[2].url])
    report = rl.check()
    assert report.verdict is Verdict.UNFIT  # one refused, one down: one usable of three
    ok, refused, down = report.masters
    assert ok.usable
    assert (refused.reachable, codes(refused.findings)) == (False, {"refused"})
    assert "WRONGPASS" in refused.error
    assert (down.reachable, codes(down.findings), down.latency, down.role) == (False, {"unreachable"}, None, None)


def test_strict_must_be_a_bool_and_a_closed_client_checks_nothing(
    fresh_masters: MastersFactory, client: ClientFactory
) -> None:
    with pytest.raises(TypeError, match="strict must be a bool"):
        redlock.Redlock(["redis://127.0.0.1:1"], strict=1)
    rl = client(fresh_masters(1).urls)
    rl.close()
    with pytest.raises(ClientClosed):
        rl.check()


def test_every_server_kind_says_what_it_is(server_binary: str, matrix_masters: MastersFactory) -> None:
    """Redis 6.2 and 7 say ``redis_mode``, Valkey ``server_mode`` and its own version; a
    cluster node says ``cluster_enabled:1`` on all of them."""
    expected = server_version(server_binary)
    masters = matrix_masters(3, owner_only=False)
    node = matrix_masters(1, extra_args=CLUSTER_MODE_ARGS)
    make_replica(masters[2], masters[0])
    with redlock.Redlock([*masters.urls, *node.urls]) as rl:
        report = rl.check()
    assert [codes(master.findings) & {REPLICA, CLUSTER_MODE} for master in report.masters] == [
        set(),
        set(),
        {REPLICA},
        {CLUSTER_MODE},
    ]
    for master in report.masters:
        assert master.server == expected.product.lower()
        assert master.version == f"{expected.major}.{expected.minor}.{expected.patch}"
    assert [master.mode for master in report.masters] == ["standalone"] * 3 + ["cluster"]
