"""Whether the masters are what Redlock needs: the rules, and the report of ``check()``.

Where it sits: a pure module (no I/O, no clock) above what a master says about itself
(:mod:`redlock._protocol.facts`) and the addresses (:mod:`redlock._protocol.config`), below the connection
policy (:mod:`redlock._protocol.connection`), which applies :func:`master_findings` to every command
connection's ``INFO`` at its handshake, and below the clients, whose ``check()`` runs
:func:`check_flow` and turns what it found into a :class:`TopologyReport`.

Theory of operation
-------------------
Redlock is safe only on *independent* masters that *keep* their keys. Each rule below reads
one master's :class:`~redlock._protocol.facts.MasterFacts` and says what it finds, with a severity:

* ``refusal``: the master cannot take part in Redlock as configured. The policy makes it
  :attr:`~redlock.NodeStatus.MISCONFIGURED` (rounds are told so without sending to it), so
  that an acquire that cannot get a majority without it raises ``MasterMisconfigured`` at
  once. A node in cluster mode or of Sentinel, a replica, and the same server reached under
  a second address (its ``run_id`` is another master's).
* ``warning``: the lock works, with a risk the operator should weigh: replicas attached (a
  failover set-up, whose promoted replica may lack our key), an eviction policy that may
  drop a lock key before its ttl, fencing on a master without an append-only file.
  Logged once per connection; ``strict=True`` turns each into a refusal.
* ``info``: worth knowing, no risk to the lock by itself (no persistence without fencing,
  ``-OOM`` when full, a master that would not say what it is).

What a master does not say stays unknown: no rule fires on a ``None`` fact.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from redlock._protocol.config import MasterAddress
from redlock._protocol.core import Command, Flow, Result, Round, quorum_size
from redlock._protocol.facts import MasterFacts
from redlock.exceptions import NodeStatus


class Severity(enum.Enum):
    """How much a finding matters to Redlock."""

    #: Worth knowing; no risk to the lock by itself.
    INFO = "info"
    #: The lock works, with a risk to weigh (``strict=True`` refuses it).
    WARNING = "warning"
    #: The master is refused (MISCONFIGURED): it cannot take part as configured.
    REFUSAL = "refusal"


@dataclass(frozen=True)
class Finding:
    """One thing found about one master: a stable ``code``, its severity, and what to know."""

    code: str
    severity: Severity
    message: str

    def __str__(self) -> str:
        return f"{self.severity.value}: {self.message}"


#: Every ``code`` a finding may have (docs/operations.md says what to do about each).
CLUSTER_MODE = "cluster-mode"
SENTINEL = "sentinel"
REPLICA = "replica"
SAME_SERVER = "same-server"
HAS_REPLICAS = "has-replicas"
EVICTS_KEYS = "evicts-keys"
FENCING_WITHOUT_AOF = "fencing-without-aof"
APPENDFSYNC_UNKNOWN = "appendfsync-unknown"
NO_PERSISTENCE = "no-persistence"
OOM_WHEN_FULL = "oom-when-full"
FACTS_UNKNOWN = "facts-unknown"
UNREACHABLE = "unreachable"
REFUSED = "refused"

#: The policies that evict keys with a ttl once ``maxmemory`` is reached: every lock key has
#: one, so the ``volatile-*`` policies pick among exactly our keys.
_EVICTING_PREFIXES = ("volatile-", "allkeys-")


def master_findings(
    facts: MasterFacts, *, fencing: bool = False, strict: bool = False, same_as: str | None = None
) -> tuple[Finding, ...]:
    """What Redlock finds about one master from what it said (``facts``).

    ``fencing``: fencing tokens are in use on this client (they need a persistent counter).
    ``strict``: every warning is a refusal. ``same_as``: the master answered with the
    ``run_id`` of that other master: it is the same server under a second address.
    """
    if not facts.answered:
        return (
            Finding(
                FACTS_UNKNOWN,
                Severity.INFO,
                "it would not say what it is (INFO denied to this user, or not understood): whether it is a "
                "standalone master, has replicas or evicts keys is unknown",
            ),
        )
    found: list[Finding] = []
    found += _refusals(facts, same_as)
    found += _warnings(facts, fencing)
    found += _notes(facts, fencing)
    if strict:
        found = [
            Finding(f.code, Severity.REFUSAL, f"{f.message} (strict mode refuses it)")
            if f.severity is Severity.WARNING
            else f
            for f in found
        ]
    return tuple(found)


def _refusals(facts: MasterFacts, same_as: str | None) -> list[Finding]:
    found = []
    if facts.mode == "cluster":
        found.append(
            Finding(
                CLUSTER_MODE,
                Severity.REFUSAL,
                "it is a Redis Cluster node (cluster_enabled:1): a cluster moves keys between its nodes by hash "
                "slot (MOVED, ASK, CROSSSLOT) and fails over to replicas, so it is not one independent master; "
                "Redlock needs standalone masters",
            )
        )
    elif facts.mode == "sentinel":
        found.append(
            Finding(
                SENTINEL,
                Severity.REFUSAL,
                "it is a Sentinel, which watches masters and keeps no keys; give Redlock the masters themselves, "
                "standalone and without failover",
            )
        )
    if facts.role == "slave":
        host, port = facts.raw.get("master_host"), facts.raw.get("master_port")
        of = f" of {host}:{port}" if host and port else ""
        found.append(
            Finding(
                REPLICA,
                Severity.REFUSAL,
                f"it is a replica{of} (role:slave): it refuses writes (READONLY) and holds another master's "
                "data; Redlock needs independent standalone masters",
            )
        )
    if same_as is not None:
        found.append(
            Finding(
                SAME_SERVER,
                Severity.REFUSAL,
                f"it is the same server as {same_as} (run_id {facts.run_id}): one server under two addresses "
                "counts once, so these masters tolerate fewer failures than their number says",
            )
        )
    return found


def _warnings(facts: MasterFacts, fencing: bool) -> list[Finding]:
    found = []
    if facts.connected_replicas:
        found.append(
            Finding(
                HAS_REPLICAS,
                Severity.WARNING,
                f"it has {facts.connected_replicas} replica(s) (connected_slaves:{facts.connected_replicas}): "
                "in a failover set-up replication is asynchronous, and a promoted replica may lack a lock key "
                "this master granted, letting a second holder in",
            )
        )
    policy = facts.maxmemory_policy
    if facts.maxmemory and policy is not None and policy.startswith(_EVICTING_PREFIXES):
        found.append(
            Finding(
                EVICTS_KEYS,
                Severity.WARNING,
                f"maxmemory {facts.maxmemory} with maxmemory-policy {policy}: once full it may evict a lock key "
                "before its ttl (every lock key has a ttl), letting a second holder in; use noeviction",
            )
        )
    if fencing and facts.aof_enabled is False:
        found.append(
            Finding(
                FENCING_WITHOUT_AOF,
                Severity.WARNING,
                "fencing tokens are in use but it has no append-only file (aof_enabled:0): after a restart its "
                "fencing counter starts again from zero, and a later holder may get a smaller token than an "
                "earlier one; use appendonly yes with appendfsync always",
            )
        )
    return found


def _notes(facts: MasterFacts, fencing: bool) -> list[Finding]:
    found = []
    if fencing and facts.aof_enabled:
        found.append(
            Finding(
                APPENDFSYNC_UNKNOWN,
                Severity.INFO,
                "it keeps an append-only file; whether it is fsynced on every write (appendfsync always) is "
                "unknown (only CONFIG GET tells): with everysec a power loss can take the last second of "
                "fencing counters back",
            )
        )
    if not fencing and facts.aof_enabled is False:
        found.append(
            Finding(
                NO_PERSISTENCE,
                Severity.INFO,
                "no append-only file (aof_enabled:0): a restart forgets the locks it granted, so restart it "
                "only after the longest ttl in use has passed (a delayed restart)",
            )
        )
    if facts.maxmemory and facts.maxmemory_policy == "noeviction":
        found.append(
            Finding(
                OOM_WHEN_FULL,
                Severity.INFO,
                f"maxmemory {facts.maxmemory} with noeviction: once full it refuses new locks (OOM) rather than "
                "dropping held ones, which is safe",
            )
        )
    return found


def judged_at_handshake(findings: Sequence[Finding]) -> list[Finding]:
    """What the connection policy acts on at each handshake: warnings and refusals."""
    return [finding for finding in findings if finding.severity is not Severity.INFO]


def refusal_detail(findings: Sequence[Finding]) -> str | None:
    """The MISCONFIGURED detail of a master with refusals among ``findings``; None without."""
    refusals = [finding.message for finding in findings if finding.severity is Severity.REFUSAL]
    return "; ".join(refusals) if refusals else None


# --- the report of check() ----------------------------------------------------------------


class Verdict(enum.Enum):
    """Whether the masters are fit for Redlock, all things found considered."""

    #: Nothing but information: fit as configured.
    FIT = "fit"
    #: Fit, with risks to weigh (or masters that could not be reached to be judged).
    WARNINGS = "warnings"
    #: Some master is refused, or fewer than a quorum can be used.
    UNFIT = "unfit"


@dataclass(frozen=True)
class MasterReport:
    """What :meth:`Redlock.check <redlock.Redlock.check>` found about one master.

    A fact the master did not say (an ACL user denied ``INFO``), or could not say because it
    was not reached, is None: unknown.
    """

    #: The master's name (host:port, or ``unix:`` and the socket path).
    address: str
    #: Whether it answered this check's PING (a master refused for what it said answers it).
    reachable: bool
    #: Why it failed or was refused; "" when neither (a refused master, a replica say, may have
    #: answered the PING and still has its refusal here).
    error: str
    #: "redis" or "valkey".
    server: str | None
    version: str | None
    #: "master" or "slave" (a replica).
    role: str | None
    #: "standalone", "cluster" or "sentinel".
    mode: str | None
    run_id: str | None
    connected_replicas: int | None
    #: Bytes; 0: no limit.
    maxmemory: int | None
    maxmemory_policy: str | None
    #: Whether it keeps an append-only file (its fsync policy is not in INFO: unknown).
    aof_enabled: bool | None
    tls: bool
    unix_socket: bool
    #: Seconds a PING took on our connection, or None when it answered none.
    latency: float | None
    findings: tuple[Finding, ...]

    @property
    def refused(self) -> bool:
        """Whether it cannot take part in Redlock as configured."""
        return any(finding.severity is Severity.REFUSAL for finding in self.findings)

    @property
    def usable(self) -> bool:
        """Whether a lock can count its vote: it answered and is not refused."""
        return self.reachable and not self.refused and not self.error


@dataclass(frozen=True)
class TopologyReport:
    """What :meth:`Redlock.check <redlock.Redlock.check>` found: one report per master, in
    the client's order, and the verdict on them all."""

    masters: tuple[MasterReport, ...]
    #: How many masters a lock needs.
    quorum: int
    verdict: Verdict
    #: Whether the client refuses every warning (``strict=True``).
    strict: bool = False

    @property
    def usable(self) -> int:
        """How many masters answered and are not refused."""
        return sum(master.usable for master in self.masters)

    @property
    def fit(self) -> bool:
        """Whether the verdict is not :attr:`Verdict.UNFIT` (warnings leave it fit)."""
        return self.verdict is not Verdict.UNFIT

    def findings(self, severity: Severity | None = None) -> list[tuple[str, Finding]]:
        """Every finding (of ``severity``, if given), with the address of its master."""
        return [
            (master.address, finding)
            for master in self.masters
            for finding in master.findings
            if severity is None or finding.severity is severity
        ]


def verdict_of(masters: Sequence[MasterReport], quorum: int) -> Verdict:
    if any(master.refused for master in masters) or sum(master.usable for master in masters) < quorum:
        return Verdict.UNFIT
    if any(finding.severity is Severity.WARNING for master in masters for finding in master.findings):
        return Verdict.WARNINGS
    return Verdict.FIT


def check_flow(node_names: Sequence[str], timeout: float) -> Flow:
    """Two PING rounds to every master, each waiting for all of them up to ``timeout``.

    The first connects whoever is not connected, or is waiting to reconnect after a failure
    (a diagnostic looks now), so that each handshake is judged afresh; the second, on
    connections already up, is the latency reported. Each round's ``latencies`` get every
    master's time from sending to its reply.
    """
    targets = tuple(range(len(node_names)))
    rounds = []
    for cleanup in (True, False):
        # cleanup: tried at once even while backing off; the second round does not retry a
        # master the first found failing, and reports that failure instead.
        round_ = Round(
            command=Command(("PING",)),
            targets=targets,
            node_names=tuple(node_names),
            quorum=quorum_size(len(node_names)),
            timeout=timeout,
            wait_for_all=True,
            cleanup=cleanup,
            latencies={},
        )
        yield round_
        rounds.append(round_)
    return Result(True, rounds[-1].ordered_outcomes(), 0, rounds=tuple(rounds))


def _ponged(round_: Round, node: int) -> bool:
    return round_.replies.get(node) == b"PONG"


def _latency(round_: Round, node: int) -> float | None:
    latencies = round_.latencies
    return latencies.get(node) if isinstance(latencies, dict) else None


def topology_report(
    result: Result,
    masters: Sequence[MasterAddress],
    facts: Sequence[MasterFacts],
    same_as: Sequence[str | None],
    *,
    fencing: bool,
    strict: bool,
) -> TopologyReport:
    """The report of :func:`check_flow`'s ``result``, with what each master said at its
    handshake (``facts``) and which earlier master each one duplicates (``same_as``)."""
    reports = [
        _master_report(
            node, master, facts[node], rounds=result.rounds, same_as=same_as[node], fencing=fencing, strict=strict
        )
        for node, master in enumerate(masters)
    ]
    quorum = quorum_size(len(masters))
    return TopologyReport(tuple(reports), quorum, verdict_of(reports, quorum), strict)


def _master_report(
    node: int,
    master: MasterAddress,
    facts: MasterFacts,
    *,
    rounds: Sequence[Round],
    same_as: str | None,
    fencing: bool,
    strict: bool,
) -> MasterReport:
    # Every master that answers is asked PING, refused ones too (a PING is sent like a
    # clean-up), so one that did not answer it is down, or refuses us (password, ACL, TLS).
    reachable = any(_ponged(round_, node) for round_ in rounds)
    failure = next(
        (round_.outcomes[node] for round_ in rounds if node in round_.outcomes and not _ponged(round_, node)), None
    )
    error = "" if failure is None else failure.detail or failure.status.value
    findings = list(master_findings(facts, fencing=fencing, strict=strict, same_as=same_as)) if reachable else []
    if not reachable and failure is not None and failure.status is NodeStatus.MISCONFIGURED:
        findings.append(Finding(REFUSED, Severity.REFUSAL, f"it refuses us: {error}"))
    elif not reachable:
        why = error or "no answer"
        findings.append(
            Finding(UNREACHABLE, Severity.WARNING, f"it could not be reached ({why}), so it was not judged")
        )
    shown = facts if reachable else MasterFacts()
    # The second round's, on a connection up already; a master it did not ask (refused) has
    # the first round's, which for a new connection also counts its handshake.
    latency = next((_latency(round_, node) for round_ in reversed(rounds) if _ponged(round_, node)), None)
    return MasterReport(
        address=master.name,
        reachable=reachable,
        error=error,
        server=shown.server,
        version=shown.version_text,
        role=shown.role,
        mode=shown.mode,
        run_id=shown.run_id,
        connected_replicas=shown.connected_replicas,
        maxmemory=shown.maxmemory,
        maxmemory_policy=shown.maxmemory_policy,
        aof_enabled=shown.aof_enabled,
        tls=master.tls,
        unix_socket=master.unix_socket,
        latency=latency,
        findings=tuple(findings),
    )
