"""Leader election on a Redlock lock, shared by the sync and asyncio clients.

An election is not a second mechanism beside the lock: a *leadership* is one holding of a
Lock on the election's name, made with ``fencing=True`` and ``auto_extend=True``.

* **At most one leader** is exactly the lock's mutual exclusion: a campaigner leads while
  its Lock is held and valid (:attr:`ElectionState.is_leader`), never past its validity.
* **The term** is the holding's fencing token: larger than every earlier leader's, so a
  resource that checks it rejects a deposed leader that acts late (a pause, a slow write).
* **Staying leader** is auto-extension; a leadership that cannot be extended in time is
  lost, and reported exactly as a lost lock is (``on_lost``, ``LockLost`` from ``resign()``
  or from leaving the ``with`` block, and in asyncio ``cancel_on_lost``).
* **Who leads** is readable by anyone: the Lock's tokens carry the campaigner's identity
  after their random part (:func:`redlock._lock.identity_token`), so ``leader()`` is an
  inspect of the masters and the identity of the token a majority holds.
* **Campaigning** is a blocking acquire with no give-up: a campaigner's job is to lead as
  soon as the cluster lets it, so it keeps trying through an outage of the masters (its
  Lock's ``unavailable_timeout`` is infinite) at one attempt per retry delay. Pass
  ``timeout`` to bound the wait; running out of it with a majority unreachable still raises
  ``QuorumUnavailable``, as a lock's acquire does.
* **Observing** is a loop of steps, each written once here as a flow (:class:`Observer`):
  wait for a release of the name to be announced (wake-on-release) or for the observe
  interval, whichever comes first, then inspect. An expiry is not announced, so the
  interval bounds how late an observer learns of a leader that died.

Nothing here is specific to threads or tasks: the two public ``Election`` classes only run
these flows and the Lock's methods, called or awaited.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
from collections.abc import Callable
from enum import Enum
from typing import Any, Generic, TypeVar

from redlock import _config
from redlock._core import WOKEN_MARGIN, Flow, Pause, Result
from redlock._flows import LockInfo, LockSpec, inspect_flow, lock_info
from redlock._lock import ClusterConfig, LockOptions, LockState, identity_of

#: How often, at most, an observer looks at the masters when no release is announced.
MAX_OBSERVE_INTERVAL = 1.0


def default_identity() -> str:
    """``host:pid``: tells an operator which process leads, and differs between processes."""
    return f"{socket.gethostname()}:{os.getpid()}"


def default_observe_interval(ttl: float) -> float:
    """A third of the ttl, at most a second: a leader that died unannounced (its keys
    expired) is seen gone at most this long after its keys are."""
    return min(MAX_OBSERVE_INTERVAL, ttl / 3)


def election_options(
    spec: LockSpec, identity: object, on_lost: object, cancel_on_lost: object = False
) -> tuple[LockOptions, list[Any]]:
    """The Lock options of an election, and a cell that will hold the election object.

    ``on_lost`` is called with the election rather than its Lock; the Lock calls the wrapper
    below, which finds the election in the cell (it is made after its Lock).
    """
    _config.check_callable("on_lost", on_lost)
    carried = default_identity() if identity is None else identity
    cell: list[Any] = []
    wrapper: Callable[[Any], None] | None = None
    if on_lost is not None:
        user: Callable[[Any], None] = on_lost  # type: ignore[assignment]

        def wrapper(_lock: Any) -> None:
            user(cell[0])

    options = LockOptions.checked(
        spec,
        timeout=None,
        auto_extend=True,
        on_lost=wrapper,
        cancel_on_lost=cancel_on_lost,
        identity=carried,
    )
    return options, cell


LockT = TypeVar("LockT", bound=LockState[Any])


ElectionT = TypeVar("ElectionT", bound="ElectionState[Any]")


class ElectionState(Generic[LockT]):
    """One campaigner in the election on one name: its Lock and its identity."""

    def __init__(self, lock: LockT, observe_interval: float) -> None:
        self._lock = lock
        self._observe_interval = observe_interval

    @classmethod
    def made(
        cls: type[ElectionT],
        cluster: ClusterConfig,
        lock_class: Callable[[Any, LockSpec, LockOptions], LockT],
        name: object,
        ttl: object,
        *,
        identity: object,
        on_lost: object,
        cancel_on_lost: object = False,
        observe_interval: object,
        lock_delay: object,
    ) -> ElectionT:
        """A campaigner of ``cluster`` (every argument checked before any traffic).

        Its Lock is fenced (the term) and never gives up on an outage of the masters: see
        the module's docstring.
        """
        # One name: an election is no semaphore and no multi-name lock.
        spec = cluster._lock_spec(_config.check_lock_name(name), ttl, fencing=True, lock_delay=lock_delay)
        spec = dataclasses.replace(spec, unavailable_timeout=math.inf)
        options, cell = election_options(spec, identity, on_lost, cancel_on_lost)
        interval = (
            default_observe_interval(spec.ttl)
            if observe_interval is None
            else _config.check_seconds("observe_interval", observe_interval)
        )
        election = cls(lock_class(cluster, spec, options), interval)
        cell.append(election)
        return election

    def __repr__(self) -> str:
        state = f"leader, term {self.term}" if self.is_leader else "not leader"
        return f"<{type(self).__name__} {self.name!r} identity={self.identity!r} {state}>"

    @property
    def name(self) -> str:
        """The name the campaigners stand for (their Lock's name)."""
        return self._lock.name

    @property
    def ttl(self) -> float:
        """How long a leader that stops extending (crashed, hung, cut off) keeps the others out."""
        return self._lock.ttl

    @property
    def identity(self) -> str:
        """Who this campaigner says it is: what ``leader()`` returns to others while it leads."""
        identity = self._lock._options.identity
        assert identity is not None
        return identity

    @property
    def lock(self) -> LockT:
        """The Lock a leadership is a holding of (``validity``, ``deadline``, ``token``...)."""
        return self._lock

    @property
    def is_leader(self) -> bool:
        """Whether this campaigner leads right now: its Lock is held and valid."""
        return self._lock.locked()

    @property
    def term(self) -> int | None:
        """The fencing token of this campaigner's leadership: larger than every earlier
        leader's term. None before the first win and after ``resign()``; after a loss it
        stays (the term that was lost) until ``resign()`` or the next win."""
        return self._lock.fencing_token

    @property
    def observe_interval(self) -> float:
        """The longest ``observe()`` goes without looking at the masters."""
        return self._observe_interval

    @staticmethod
    def _leader_from(info: LockInfo) -> str | None:
        return identity_of(info.holder)

    def _observer(self) -> Observer:
        return Observer(self._lock._spec, self._observe_interval)

    def _nothing_to_resign(self) -> bool:
        return self._lock.token is None


class Unchanged(Enum):
    """What an observe step reports when the leader did not change."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


class Observer:
    """The steps of ``observe()``: each one waits, then inspects; reports only changes.

    The first step inspects at once (the current leader is always reported first). Each
    later step waits for ``interval`` or until a release of the name is announced. After an
    announcement the next step comes sooner (after the retry delay): the release was sent to
    every master at once and a campaigner woken by it is about to take over, so the change
    after the change is near.
    """

    def __init__(self, spec: LockSpec, interval: float) -> None:
        self._spec = spec
        self._interval = interval
        self._pause = 0.0
        self._last: str | Unchanged | None = UNCHANGED

    def step(self, now: float) -> Flow:
        """Wait (unless this is the first step), then inspect every master."""
        woken = False
        if self._pause > 0:
            resume_at = now + self._pause
            now = yield Pause(self._pause, wake_on=self._spec.key)
            woken = now < resume_at - WOKEN_MARGIN
        self._pause = min(self._interval, self._spec.retry_delay) if woken else self._interval
        return (yield from inspect_flow(self._spec))

    def seen(self, result: Result) -> str | Unchanged | None:
        """The leader's identity (None: no leader) if it changed, else :data:`UNCHANGED`."""
        leader = identity_of(lock_info(self._spec, result).holder)
        if leader == self._last:
            return UNCHANGED
        self._last = leader
        return leader
