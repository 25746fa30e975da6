"""The read-write lock, shared by the sync and asyncio clients.

A read-write lock on a name is not a new mechanism beside the lock: each side is a Lock of
its own kind (:class:`redlock._protocol.kinds.ReadLock`, :class:`redlock._protocol.kinds.WriteLock`) on the
same name, run by the same flows and the same Lock classes as every other lock. What makes
them one read-write lock is on the masters: each master grants a reader only where no writer
holds the name and none waits, and a writer only where no writer and no unexpired reader
does, so a reader and a writer never both have one master's vote, and the quorum (a
majority for both) does the rest. docs/algorithm.md, "Read-write lock", derives it.

:class:`ReadWriteState` holds the checked settings and hands out the two sides; the public
``ReadWriteLock`` classes only say which Lock class (called, or awaited) they are made of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from redlock._api.state import ClusterConfig, LockOptions, LockState
from redlock._protocol import config as _config
from redlock._protocol.flows import LockSpec

LockT = TypeVar("LockT", bound=LockState[Any])


class ReadWriteState(Generic[LockT]):
    """A read-write lock on one name: its two specs (every argument checked before any
    traffic), the options of its holders, and the Lock class that makes them."""

    def __init__(
        self,
        cluster: ClusterConfig,
        lock_class: Callable[[Any, LockSpec, LockOptions], LockT],
        name: object,
        ttl: object,
        options: Mapping[str, object],
    ) -> None:
        # (``options`` has every option, see redlock._api.options.given: rwlock() takes neither
        # fencing nor reentrant, which stay at their defaults.)
        key = _config.check_lock_name(name)  # one name: no semaphore, no multi-name lock
        self._cluster = cluster
        self._lock_class = lock_class
        (self._read, self._options), (self._write, _) = (
            cluster._lock_parts(key, ttl, options, mode=mode) for mode in ("read", "write")
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl}>"

    @property
    def name(self) -> str:
        """The name its readers and writers hold."""
        return self._read.key

    @property
    def ttl(self) -> float:
        """Each reader's and writer's time to live, in seconds (as a Lock's ``ttl``)."""
        return self._read.ttl

    @property
    def quorum(self) -> int:
        """How many masters must grant a reader, or the writer: a majority for both."""
        return self._read.quorum

    def read(self) -> LockT:
        """A new reader (the public classes' :meth:`read` says what it is)."""
        return self._lock_class(self._cluster, self._read, self._options)

    def write(self) -> LockT:
        """A new writer (the public classes' :meth:`write` says what it is)."""
        return self._lock_class(self._cluster, self._write, self._options)
