"""The public names that ``redlock`` and ``redlock.asyncio`` export alike, listed once.

Both clients raise the same errors and return the same reports (of ``inspect()`` and
``check()``): one object each, whichever client it comes from. Each public module imports
them from here and adds its own names to ``__all__`` (the classes of its client:
``Redlock``, ``Lock``, ...; ``redlock`` also the arithmetic and ``compiled``), so an export
added here reaches both, and tests/test_api_parity.py holds the two to that.
"""

from redlock._protocol.flows import LockInfo, MasterInfo
from redlock._protocol.topology import Finding, MasterReport, Severity, TopologyReport, Verdict
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

__all__ = [
    "AcquireTimeout",
    "ClientClosed",
    "ExtendUnconfirmed",
    "Finding",
    "KeyConflict",
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
    "RedlockError",
    "ReleaseUnconfirmed",
    "Severity",
    "TopologyReport",
    "Verdict",
]
