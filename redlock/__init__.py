"""Redlock: a lock held on a majority of independent Redis masters.

    >>> from redlock import Redlock
    >>> rl = Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    >>> with rl.lock("orders:42", ttl=10.0) as lock:  # doctest: +SKIP
    ...     do_work(lock.validity)

The asyncio client, with the same names, is :mod:`redlock.asyncio`.
"""

from redlock import _compiled

_compiled.prefer_sources_if_asked()  # (first: before anything imports the core)

from redlock._api import exports as _exports
from redlock._api.exports import *  # noqa: F403 (the names both clients export: listed there, once)
from redlock._api.sync import Election, Lock, ReadWriteLock, Redlock, Semaphore
from redlock._protocol import core as _core
from redlock._protocol.core import quorum_size, semaphore_quorum, validity_left
from redlock._version import __version__ as __version__

#: True when the sans-I/O core (lock arithmetic, flows, connection policy) runs compiled by
#: mypyc, as in a wheel built with ``REDLOCK_COMPILE=1`` (setup.py); False for the pure
#: Python package, which behaves the same, with more CPU per operation.
compiled: bool = not _core.__file__.endswith(".py")

__all__ = [
    "Election",
    "Lock",
    "ReadWriteLock",
    "Redlock",
    "Semaphore",
    "compiled",
    "quorum_size",
    "semaphore_quorum",
    "validity_left",
]
__all__ += _exports.__all__
