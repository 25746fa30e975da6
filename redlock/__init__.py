"""Redlock: a lock held on a majority of independent Redis masters.

    >>> from redlock import Redlock
    >>> rl = Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    >>> with rl.lock("orders:42", ttl=10.0) as lock:  # doctest: +SKIP
    ...     do_work(lock.validity)

The asyncio client, with the same names, is :mod:`redlock.asyncio`.
"""

from redlock import _compiled

_compiled.prefer_sources_if_asked()  # (first: before anything imports the core)

from redlock._api.sync import Election, Lock, ReadWriteLock, Redlock, Semaphore
from redlock._protocol import core as _core
from redlock._protocol.core import quorum_size, semaphore_quorum, validity_left
from redlock._protocol.flows import LockInfo, MasterInfo
from redlock._protocol.topology import Finding, MasterReport, Severity, TopologyReport, Verdict
from redlock._version import __version__ as __version__
from redlock.exceptions import (
    AcquireTimeout,
    ClientClosed,
    ExtendUnconfirmed,
    KeyConflict,
    LockAlreadyHeld,
    LockLost,
    LockNotAcquired,
    LockNotHeld,
    MasterMisconfigured,
    NodeOutcome,
    NodeStatus,
    QuorumUnavailable,
    RedlockError,
    ReleaseUnconfirmed,
)

#: True when the sans-I/O core (lock arithmetic, flows, connection policy) runs compiled by
#: mypyc, as in a wheel built with ``REDLOCK_COMPILE=1`` (setup.py); False for the pure
#: Python package, which behaves the same, with more CPU per operation.
compiled: bool = not _core.__file__.endswith(".py")

__all__ = [
    "AcquireTimeout",
    "ClientClosed",
    "Election",
    "ExtendUnconfirmed",
    "Finding",
    "KeyConflict",
    "Lock",
    "LockAlreadyHeld",
    "LockInfo",
    "LockLost",
    "LockNotAcquired",
    "LockNotHeld",
    "MasterInfo",
    "MasterMisconfigured",
    "MasterReport",
    "NodeOutcome",
    "NodeStatus",
    "QuorumUnavailable",
    "ReadWriteLock",
    "Redlock",
    "RedlockError",
    "ReleaseUnconfirmed",
    "Semaphore",
    "Severity",
    "TopologyReport",
    "Verdict",
    "compiled",
    "quorum_size",
    "semaphore_quorum",
    "validity_left",
]
