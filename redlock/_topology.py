"""Whether the masters are what Redlock needs: the rules.

Where it sits: a pure module (no I/O, no clock) above what a master says about itself
(:mod:`redlock._facts`), below the connection policy (:mod:`redlock._connection`), which
applies :func:`master_findings` to every command connection's ``INFO`` at its handshake.

Theory of operation
-------------------
Redlock is safe only on *independent* masters that *keep* their keys. Each rule below reads
one master's :class:`~redlock._facts.MasterFacts` and says what it finds, with a severity:

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

from redlock._facts import MasterFacts


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
