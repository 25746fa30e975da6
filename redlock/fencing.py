"""The resource side of fencing: a store that rejects writes from stale lock holders.

A lock with ``fencing=True`` hands each holder a ``fencing_token`` larger than every
earlier holder's (as long as a majority of masters keep their data: see below). A lock
alone cannot stop a holder that paused past its validity (GC, swap, SIGSTOP) from
writing after a newer holder did; the resource can, by refusing tokens lower than one it
has already accepted::

    store = FencedStore(redis.Redis.from_url("redis://resource-host"), "orders:42:state")
    with rl.lock("orders:42", ttl=10.0, fencing=True) as lock:
        if not store.write(b"new state", lock.fencing_token):
            raise RuntimeError("a newer holder has written: our lock expired while we worked")

Why the tokens only grow: each master keeps a counter per lock name. An acquire reads the
counters of the majority that granted it, takes their maximum + 1, and raises the counter
to that value on a majority before it returns. Any two majorities share a master, so the
next holder reads a counter at least this high and takes a larger token. It breaks
exactly where Redlock breaks: when a master loses its data (a restart without fsync'd
persistence) or when holders overlap in time because clocks jumped.

The store speaks to its Redis server through a caller's redis-py client: redis-py comes with
the ``[redis]`` extra (the lock itself does not need it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from redlock._extras import can_import, install_hint, loaded_class
from redlock._protocol import scripts as _scripts
from redlock._protocol.core import fence_key

if TYPE_CHECKING:
    import redis


def counter_key(name: str) -> str:
    """The key in which each master keeps the highest fencing token handed out for ``name``."""
    return fence_key(name)


class FencedStore:
    """One value in a Redis server (the protected resource, not a lock master) that
    accepts a write only with a fencing token at least as high as any it accepted."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        redis_class = loaded_class("redis.Redis")
        if redis_class is None or not isinstance(client, redis_class):
            missing = "" if can_import("redis") else f" (redis-py is not installed: {install_hint('redis')})"
            raise TypeError(f"client must be a redis.Redis, got {type(client).__name__}{missing}")
        if not isinstance(key, str) or not key:
            raise ValueError("key must be a non-empty str")
        self._client = client
        self.key = key
        self.token_key = f"{key}:fencing-token"
        self._write = client.register_script(_scripts.FENCED_WRITE.source)

    def write(self, value: bytes | str | int, fencing_token: int | None) -> bool:
        """Write ``value`` if ``fencing_token`` is not older than the newest accepted one."""
        if isinstance(fencing_token, bool) or not isinstance(fencing_token, int):
            raise TypeError("fencing_token must be an int (take it from a lock acquired with fencing=True)")
        return bool(self._write(keys=[self.key, self.token_key], args=[fencing_token, value]))

    def read(self) -> bytes | None:
        return cast(bytes | None, self._client.get(self.key))

    @property
    def highest_token(self) -> int | None:
        """The newest fencing token this store accepted, if any."""
        raw = cast(bytes | None, self._client.get(self.token_key))
        return None if raw is None else int(raw)
