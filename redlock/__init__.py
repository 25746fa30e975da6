"""Redlock: a lock held on a majority of independent Redis masters.

    >>> from redlock import Redlock
    >>> rl = Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    >>> with rl.lock("orders:42", ttl=10.0) as lock:  # doctest: +SKIP
    ...     do_work(lock.validity)

The asyncio client, with the same names, is :mod:`redlock.asyncio`.
"""

from redlock._client import Election, Lock, ReadWriteLock, Redlock, Semaphore
from redlock._core import quorum_size, semaphore_quorum, validity_left
from redlock._flows import LockInfo, MasterInfo
from redlock._topology import Finding, MasterReport, Severity, TopologyReport, Verdict
from redlock._version import __version__ as __version__
from redlock.exceptions import (
    AcquireTimeout,
    ClientClosed,
    ExtendUnconfirmed,
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

__all__ = [
    "AcquireTimeout",
    "ClientClosed",
    "Election",
    "ExtendUnconfirmed",
    "Finding",
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
    "quorum_size",
    "semaphore_quorum",
    "validity_left",
]
