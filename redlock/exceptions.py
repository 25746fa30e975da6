"""Every exception the public API raises, in one tree.

::

    RedlockError                      base of everything below
    ├── LockNotAcquired               acquire could not get a majority in time
    │   ├── QuorumUnavailable         fewer than a majority of masters could be reached at all
    │   ├── KeyConflict               a key where this lock keeps its own holds what this
    │                                 library did not write there (another kind of lock on
    │                                 the name, another program's key): left as it is
    │   └── AcquireTimeout            also a TimeoutError: a blocking acquire ran out of time
    ├── MasterMisconfigured           so many masters refuse us (credentials, ACL permissions,
    │                                 TLS) or are unfit for Redlock (a replica, a cluster
    │                                 node, one server twice) that no majority is possible:
    │                                 raised at once, even by a blocking acquire
    ├── LockLost                      a majority answered that our token is gone, or the
    │                                 validity ran out: the lock expired or was taken, the
    │                                 work may have run unprotected; locked() is False after
    ├── ExtendUnconfirmed             an extend that no majority answered while validity
    │                                 remains: the lock keeps its old deadline; retryable
    ├── ReleaseUnconfirmed            a release that no majority answered in time: our keys may
    │                                 still block others until they expire; release() may be
    │                                 retried, and a retry never reports a loss it cannot prove
    ├── LockNotHeld                   also a RuntimeError: release/extend/check of a lock this
    │                                 Lock object does not hold (never acquired, or released)
    ├── LockAlreadyHeld               also a RuntimeError: the thread (task) holding a Lock
    │                                 object that is not reentrant acquired it again (or a
    │                                 decorated call nested in one on the same name); adopt()
    │                                 on a Lock object that holds the lock
    └── ClientClosed                  also a RuntimeError: the Redlock client was closed

Bad arguments are plain ``ValueError`` / ``TypeError`` raised before any network traffic;
they are not part of this tree because they are the caller's bug, not the cluster's state.

The errors that concern the cluster carry what happened: the resource name, the quorum
needed, the votes granted and one :class:`NodeOutcome` per master. redis-py's exceptions
never leave the public API raw; they are mapped to a :class:`NodeStatus` per node in
``redlock._protocol.connection.failure_status``.
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
    ERROR = "error"  # the master answered with an error reply (OOM, LOADING, BUSY, ...)
    #: the master refuses us for a reason waiting will not fix: wrong password (WRONGPASS,
    #: NOAUTH), a missing ACL permission (NOPERM), an untrusted TLS certificate, not RESP;
    #: or it is no standalone master: a replica (READONLY), a cluster node (MOVED, ASK,
    #: CROSSSLOT, CLUSTERDOWN), or so it said at connect (INFO: a replica, a cluster node,
    #: the same server as another master; with strict=True, any risk found)
    MISCONFIGURED = "misconfigured"
    NOT_AWAITED = "not awaited"  # the round was decided before this master's reply was needed

    #: By identity, in C: Enum's own hash (of the member's name) is a Python function, and
    #: every reply of every round looks an outcome up by its status (members are singletons,
    #: and equal only to themselves, so identity agrees with equality).
    __hash__ = object.__hash__

    @property
    def answered(self) -> bool:
        """Whether the master was reached and said yes or no."""
        return self in (NodeStatus.GRANTED, NodeStatus.DENIED)


@dataclass(frozen=True, slots=True)
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
        resource: str = "",
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


class KeyConflict(LockNotAcquired):
    """So many masters hold, where this lock keeps a key, something this library did not
    write there that no majority could grant it: another kind of lock on the same name (a
    semaphore where a lock was asked for, or the other way round), or another program's
    key. Nothing of it was touched; each master's reply in :attr:`outcomes` names the key
    and what it holds (``FOREIGNKEY <key> holds ...``)."""


class AcquireTimeout(LockNotAcquired, TimeoutError):
    """A blocking acquire in a ``with`` block did not get the lock within its timeout."""


class LockLost(RedlockError):
    """A majority answered that our token is gone (it expired, or a master lost it), or the
    validity ran out before an extend reached a majority.

    Raised by ``release`` (the work under the lock may have run unprotected), by
    ``extend`` and ``check``, by ``adopt`` when the token does not hold the name, and when
    leaving a ``with`` block whose lock was lost meanwhile (a bounded hold's end included:
    ``max_hold``). After it, the Lock's ``locked()`` is False and its ``lost`` True.
    """


class ExtendUnconfirmed(RedlockError):
    """An extend that no majority answered (masters down, hung, slow or reset) while the
    lock still had validity: not a loss.

    The lock keeps the deadline it had (``validity`` says how long is left; an extend that
    may have landed on some masters can only have shortened it), and ``extend()`` may be
    retried. Auto-extension retries by itself.
    """


class LockNotHeld(RedlockError, RuntimeError):
    """``release``/``extend``/``check``/``wait_lost`` called on a Lock that does not hold the
    lock, or a release of a reentrant Lock by a thread (task) that is not its owner."""


class MasterMisconfigured(RedlockError):
    """So many masters refuse us, or are unfit for Redlock, that no majority is possible.

    Each master's refusal is in :attr:`outcomes` (status ``MISCONFIGURED``, with the master's
    own reply, e.g. ``WRONGPASS ...``, ``NOPERM ...``, a replica's ``READONLY ...`` or a
    cluster node's ``MOVED ...``, or the TLS error), or what the master said about itself
    at connect that makes it unfit (e.g. "it is a replica of 10.0.0.1:6379 (role:slave)
    ...", "it is the same server as 10.0.0.2:6379 (run_id ...) ..."). Where a master
    runs no Lua for us (an ACL without ``@scripting``), what needs it (a multi-name lock, a
    semaphore, fencing, inspect) is refused so, and the reply says that it needs scripting.
    """


class ReleaseUnconfirmed(RedlockError):
    """No majority answered a release in time (masters down, hung, or slow).

    Our token may still hold the lock on some masters until it expires, blocking others.
    The Lock keeps the token: ``release()`` may be retried, and asks only the masters that
    have not confirmed yet.
    """


class LockAlreadyHeld(RedlockError, RuntimeError):
    """The owner of a Lock that is not reentrant acquired it again while it is valid.

    ``threading.Lock`` would deadlock there; this says why instead. Other threads (tasks)
    acquiring a held Lock object wait for it; ``reentrant=True`` lets the owner nest.
    """


class ClientClosed(RedlockError, RuntimeError):
    """The Redlock client was closed: its operations under way stop at their next step."""
