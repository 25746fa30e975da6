"""What a Lock is and means, shared by the sync and asyncio clients.

The two public ``Lock`` classes differ only in how they run a flow (calling a driver, or
awaiting one). Everything else, the state of the lock, argument checks, and the mapping of a
flow's result to a return value or an exception, is written once here.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Sequence
from typing import Generic, TypeVar

from redlock import _config
from redlock._core import Flow, LockSpec, Result, acquire_flow, extend_flow, release_flow
from redlock.exceptions import (
    AcquireTimeout,
    LockLost,
    LockNotAcquired,
    LockNotHeld,
    QuorumUnavailable,
    RedlockError,
)

#: 160 random bits: far beyond guessing, and unique across every client that ever runs.
TOKEN_BYTES = 20

DEFAULT_TTL = 10.0
DEFAULT_NODE_TIMEOUT = 0.05
DEFAULT_CLOCK_DRIFT_FACTOR = 0.01
DEFAULT_RETRY_DELAY = 0.2
DEFAULT_UNAVAILABLE_TIMEOUT = 10.0


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


class ClusterConfig:
    """A Redlock client's checked settings; the base of both public Redlock classes."""

    def __init__(
        self,
        masters: object,
        client_types: Sequence[type],
        client_kind: str,
        *,
        node_timeout: float,
        clock_drift_factor: float,
        retry_delay: float,
        unavailable_timeout: float,
        clock: _config.Clock,
    ) -> None:
        self.node_timeout = _config.check_seconds("node_timeout", node_timeout)
        self.clock_drift_factor = _config.check_drift_factor(clock_drift_factor)
        self.retry_delay = _config.check_seconds("retry_delay", retry_delay)
        self.unavailable_timeout = _config.check_seconds("unavailable_timeout", unavailable_timeout, allow_zero=True)
        _config.check_callable("clock", clock)
        self.masters = _config.parse_masters(masters, client_types, client_kind)
        self.clock = clock
        self.rng = random.Random()

    @property
    def master_names(self) -> tuple[str, ...]:
        return tuple(master.name for master in self.masters)

    def lock_spec(self, name: object, ttl: object) -> LockSpec:
        key = _config.check_lock_name(name)
        seconds = _config.check_ttl(ttl, node_timeout=self.node_timeout, clock_drift_factor=self.clock_drift_factor)
        return LockSpec(
            key=key,
            ttl=seconds,
            node_names=self.master_names,
            node_timeout=self.node_timeout,
            clock_drift_factor=self.clock_drift_factor,
            retry_delay=self.retry_delay,
            unavailable_timeout=self.unavailable_timeout,
        )


ClusterT = TypeVar("ClusterT", bound=ClusterConfig)


class LockState(Generic[ClusterT]):
    """One lock name on one cluster, and whether this object holds it right now.

    The state belongs to the object, not to a thread: a lock acquired in one thread (or
    task) may be released in another.
    """

    def __init__(self, cluster: ClusterT, spec: LockSpec, timeout: float | None) -> None:
        self._cluster = cluster
        self._spec = spec
        self._with_timeout = timeout
        self._token: str | None = None
        self._deadline = 0.0

    def __repr__(self) -> str:
        state = f"held, {self.validity:.3f}s left" if self.locked() else "not held"
        return f"<{type(self).__name__} {self._spec.key!r} ttl={self._spec.ttl} {state}>"

    @property
    def name(self) -> str:
        return self._spec.key

    @property
    def ttl(self) -> float:
        return self._spec.ttl

    @property
    def token(self) -> str | None:
        """Our random token while this object holds (or last held and did not release) the lock."""
        return self._token

    @property
    def validity(self) -> float:
        """Seconds this holder may still rely on the lock; 0.0 when not held."""
        if self._token is None:
            return 0.0
        return max(0.0, self._deadline - self._cluster.clock())

    def locked(self) -> bool:
        """Whether this object holds the lock and its validity has not run out."""
        return self.validity > 0

    # --- flows and their results ----------------------------------------------------------

    def _acquire_flow(self, blocking: object, timeout: object) -> tuple[str, Flow]:
        if not isinstance(blocking, bool):
            raise TypeError(f"blocking must be a bool, got {type(blocking).__name__}")
        seconds = None if timeout is None else _config.check_seconds("timeout", timeout, allow_zero=True)
        if not blocking and seconds is not None:
            raise ValueError("timeout cannot be given for a non-blocking acquire (blocking=False)")
        if self._token is not None and self.locked():
            raise RuntimeError(
                f"lock {self.name!r} is already held by this Lock object; Redlock locks are not reentrant"
            )
        token = new_token()
        flow = acquire_flow(
            self._spec, token, self._cluster.clock(), blocking=blocking, timeout=seconds, rng=self._cluster.rng
        )
        return token, flow

    def _acquired(self, token: str, result: Result) -> bool:
        if result.ok:
            self._token = token
            self._deadline = result.deadline
            return True
        if result.quorum_unreachable:
            raise self._error(
                QuorumUnavailable,
                f"could not reach a majority of masters for {self.name!r} after {result.attempts} attempt(s)",
                result,
            )
        return False

    def _rollback_flow(self, token: str) -> Flow:
        """Delete ``token`` everywhere, for an acquire that was interrupted mid-flight."""
        return release_flow(self._spec, token, self._cluster.clock())

    def _release_flow(self) -> tuple[str, Flow]:
        token = self._held_token("release")
        return token, release_flow(self._spec, token, self._cluster.clock())

    def _released(self, token: str, result: Result) -> None:
        if self._token == token:
            self._token = None
            self._deadline = 0.0
        if not result.ok:
            raise self._error(
                LockLost,
                f"release of {self.name!r} could not confirm that a majority still held our token: "
                "the lock expired or was taken, so the work under it may have run unprotected",
                result,
            )

    def _extend_flow(self, ttl: object) -> tuple[str, float, Flow]:
        seconds = (
            self._spec.ttl
            if ttl is None
            else _config.check_ttl(
                ttl, node_timeout=self._spec.node_timeout, clock_drift_factor=self._spec.clock_drift_factor
            )
        )
        token = self._held_token("extend")
        return token, seconds, extend_flow(self._spec, token, seconds, self._cluster.clock())

    def _extended(self, token: str, result: Result) -> float:
        if self._token != token:
            raise LockNotHeld(f"lock {self.name!r} was released while it was being extended", resource=self.name)
        if result.ok:
            self._deadline = result.deadline
            return self.validity
        if result.token_gone:
            self._deadline = 0.0
        gone = (
            "; our token is gone from a majority"
            if result.token_gone
            else f"; {self.validity:.3f}s of the old validity remain"
        )
        raise self._error(
            LockLost, f"extend of {self.name!r} did not reach a majority with validity left{gone}", result
        )

    def _held_token(self, action: str) -> str:
        if self._token is None:
            raise LockNotHeld(
                f"cannot {action} {self.name!r}: this Lock does not hold it (never acquired, or already released)",
                resource=self.name,
            )
        return self._token

    def _not_acquired_in_with(self) -> RedlockError:
        if self._with_timeout is None:
            return LockNotAcquired(f"could not acquire {self.name!r}", resource=self.name, quorum=self._spec.quorum)
        return AcquireTimeout(
            f"could not acquire {self.name!r} within {self._with_timeout} s",
            resource=self.name,
            quorum=self._spec.quorum,
        )

    def _error(self, kind: type[RedlockError], message: str, result: Result) -> RedlockError:
        return kind(
            message, resource=self.name, quorum=self._spec.quorum, granted=result.granted, outcomes=result.outcomes
        )
