"""Every exception the public API raises, in one tree.

::

    RedlockError                      base of everything below
    ├── LockNotAcquired               acquire could not get a majority in time
    │   ├── QuorumUnavailable         fewer than a majority of masters could be reached at all
    │   └── AcquireTimeout            also a TimeoutError: a blocking acquire ran out of time
    ├── LockLost                      release/extend could not confirm a majority still held
    │                                 our token: the protected work may have run unprotected
    └── LockNotHeld                   also a RuntimeError: release/extend of a lock this
                                      Lock object does not hold (never acquired, or released)

Bad arguments are plain ``ValueError`` / ``TypeError`` raised before any network traffic;
they are not part of this tree because they are the caller's bug, not the cluster's state.

The errors that concern the cluster carry what happened: the resource name, the quorum
needed, the votes granted and one :class:`NodeOutcome` per master. redis-py's exceptions
never leave the public API raw; they are mapped to a :class:`NodeStatus` per node in
``redlock._core.failure_status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class NodeStatus(Enum):
    """What one master answered to one request."""

    GRANTED = "granted"  # SET NX succeeded / the script found our token
    DENIED = "denied"  # the master answered no: another token holds the key, or ours is gone
    UNREACHABLE = "unreachable"  # connection refused, reset or closed
    TIMEOUT = "timeout"  # no answer within node_timeout (a hung or slow master)
    ERROR = "error"  # the master answered with an error reply (OOM, READONLY, ...)
    NOT_AWAITED = "not awaited"  # the round was decided before this master's reply was needed

    @property
    def answered(self) -> bool:
        """Whether the master was reached and said yes or no."""
        return self in (NodeStatus.GRANTED, NodeStatus.DENIED)


@dataclass(frozen=True)
class NodeOutcome:
    """One master's part in one round: which master, what happened, and details if it failed."""

    node: str
    status: NodeStatus
    detail: str = ""

    def __str__(self) -> str:
        suffix = f" ({self.detail})" if self.detail else ""
        return f"{self.node}: {self.status.value}{suffix}"


class RedlockError(Exception):
    """Base class of every error raised about the state of a lock or of the masters."""

    def __init__(
        self,
        message: str,
        *,
        resource: str,
        quorum: int = 0,
        granted: int = 0,
        outcomes: Sequence[NodeOutcome] = (),
    ) -> None:
        self.resource = resource
        self.quorum = quorum
        self.granted = granted
        self.outcomes: tuple[NodeOutcome, ...] = tuple(outcomes)
        detail = "; ".join(str(outcome) for outcome in self.outcomes)
        full = message if not detail else f"{message} [{detail}]"
        super().__init__(full)


class LockNotAcquired(RedlockError):
    """The lock could not be acquired: other holders had it, or time ran out."""


class QuorumUnavailable(LockNotAcquired):
    """Fewer than a majority of masters could be reached, so no one can hold the lock."""


class AcquireTimeout(LockNotAcquired, TimeoutError):
    """A blocking acquire in a ``with`` block did not get the lock within its timeout."""


class LockLost(RedlockError):
    """A majority no longer confirms our token: it expired, or a master lost it.

    Raised by ``release`` (the work under the lock may have run unprotected), by
    ``extend``, and when leaving a ``with`` block whose lock was lost meanwhile.
    """


class LockNotHeld(RedlockError, RuntimeError):
    """``release``/``extend`` called on a Lock that does not hold the lock."""
