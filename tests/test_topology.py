"""What the client makes of the masters it is given: replicas, cluster nodes, one server
under two addresses, eviction, persistence; the handshake's judgement and ``check()``.

The rules themselves (redlock._topology) are pure and tested without servers first; the
rest runs on real masters (replicas made with REPLICAOF, a node started in cluster mode),
once per public API where the API is involved.
"""

from __future__ import annotations

import time

import pytest
import redis

from redlock.exceptions import MasterMisconfigured, NodeStatus
from redlock.servers import AclUser, LocalMaster

from .conftest import ClientFactory, MastersFactory, unique

#: The default user's password on the masters with ACL users here.
PASSWORD = "topology-secret"
#: May do everything the library does, except INFO: what it learns at the handshake stays unknown.
NO_INFO = AclUser("no-info", "no-info-secret", rules=("~*", "&*", "+@all", "-info"))


def make_replica(replica: LocalMaster, primary: LocalMaster) -> None:
    """REPLICAOF: ``replica`` turns read-only at once, whether or not it can sync (it cannot
    when ``primary`` wants a password it was not given: role and READONLY hold all the same)."""
    with redis.Redis.from_url(replica.tcp_url) as admin:
        admin.replicaof(primary.host, primary.port)


# --- configuration errors in replies ---------------------------------------------------------


def test_a_replica_answering_readonly_is_misconfigured_at_once_not_retried(
    fresh_masters: MastersFactory, client: ClientFactory
) -> None:
    """A user who may not run INFO cannot see the replicas at the handshake: their READONLY
    answer to SET is configuration, not weather, so a blocking acquire stops at once."""
    masters = fresh_masters(3, password=PASSWORD, acl_users=(NO_INFO,))
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
