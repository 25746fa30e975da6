"""Every bad argument is a TypeError or ValueError naming it, raised before any traffic.

The masters named here do not exist (port 1 on loopback refuses at once, and no test here
would get far enough to connect): an error raised by validation is the only way to pass.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

import redlock
import redlock.asyncio

NOWHERE = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"]
CLIENTS = [redlock.Redlock, redlock.asyncio.Redlock]


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(
    ("masters", "kwargs", "error", "named"),
    [
        ([], {}, ValueError, "masters"),
        ("redis://127.0.0.1:1", {}, TypeError, "masters"),
        (None, {}, TypeError, "masters"),
        ([42], {}, TypeError, r"masters\[0\]"),
        (["http://127.0.0.1:1"], {}, ValueError, r"masters\[0\]"),
        (["redis://"], {}, ValueError, r"masters\[0\]"),
        (["redis://127.0.0.1:1", "redis://127.0.0.1:1/3"], {}, ValueError, "same server twice"),
        (NOWHERE, {"node_timeout": 0}, ValueError, "node_timeout"),
        (NOWHERE, {"node_timeout": -1}, ValueError, "node_timeout"),
        (NOWHERE, {"node_timeout": float("nan")}, ValueError, "node_timeout"),
        (NOWHERE, {"node_timeout": "50ms"}, TypeError, "node_timeout"),
        (NOWHERE, {"node_timeout": True}, TypeError, "node_timeout"),
        (NOWHERE, {"clock_drift_factor": 1.0}, ValueError, "clock_drift_factor"),
        (NOWHERE, {"clock_drift_factor": -0.1}, ValueError, "clock_drift_factor"),
        (NOWHERE, {"clock_drift_factor": "1%"}, TypeError, "clock_drift_factor"),
        (NOWHERE, {"retry_delay": 0}, ValueError, "retry_delay"),
        (NOWHERE, {"unavailable_timeout": -1}, ValueError, "unavailable_timeout"),
        (NOWHERE, {"wake_on_release": "yes"}, TypeError, "wake_on_release"),
        (NOWHERE, {"clock": 3}, TypeError, "clock"),
        (NOWHERE, {"health_check_interval": -1}, ValueError, "health_check_interval"),
        (NOWHERE, {"health_check_interval": "30s"}, TypeError, "health_check_interval"),
    ],
)
def test_bad_client_arguments(
    make: Any, masters: Any, kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        make(masters, **kwargs)


def test_each_api_takes_only_its_own_kind_of_redis_client() -> None:
    sync_client, async_client = redis.Redis(port=1), redis.asyncio.Redis(port=1)
    with pytest.raises(TypeError, match=r"masters\[0\].*redis.Redis client"):
        redlock.Redlock([async_client])
    with pytest.raises(TypeError, match=r"masters\[0\].*redis.asyncio.Redis client"):
        redlock.asyncio.Redlock([sync_client])
    sync_client.close()


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "named"),
    [
        ((42,), {}, TypeError, "name"),
        (("",), {}, ValueError, "name"),
        (("redlock:order:jobs",), {}, ValueError, "name must not start with 'redlock:order:'"),
        (("redlock:fence:jobs",), {}, ValueError, "name must not start with 'redlock:fence:'"),
        (("x",), {"ttl": 0}, ValueError, "ttl"),
        (("x",), {"ttl": -5}, ValueError, "ttl"),
        (("x",), {"ttl": "10s"}, TypeError, "ttl"),
        (("x",), {"ttl": 0.005}, ValueError, "ttl"),
        (("x",), {"ttl": 0.052}, ValueError, "ttl.*node_timeout"),  # no validity after one round
        (("x",), {"timeout": -1}, ValueError, "timeout"),
        (("x",), {"ttl": 0.2, "auto_extend": True}, ValueError, "too short to auto-extend"),
        (("x",), {"auto_extend": "yes"}, TypeError, "auto_extend"),
        (("x",), {"auto_extend": True, "on_lost": 42}, TypeError, "on_lost"),
        (("x",), {"on_lost": print}, ValueError, "auto_extend=True"),
        (("x",), {"fencing": 1}, TypeError, "fencing"),
    ],
)
def test_bad_lock_arguments(
    make: Any, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    rl = make(NOWHERE, node_timeout=0.05)
    with pytest.raises(error, match=named):
        rl.lock(*args, **kwargs)


def test_cancel_on_lost_needs_auto_extension() -> None:
    with pytest.raises(ValueError, match="auto_extend=True"):
        redlock.asyncio.Redlock(NOWHERE).lock("x", cancel_on_lost=True)
    with pytest.raises(TypeError, match="cancel_on_lost"):
        redlock.asyncio.Redlock(NOWHERE).lock("x", auto_extend=True, cancel_on_lost="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"blocking": "no"}, TypeError, "blocking"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": "1s"}, TypeError, "timeout"),
        ({"blocking": False, "timeout": 1.0}, ValueError, "non-blocking"),
    ],
)
def test_bad_acquire_arguments_fail_before_any_traffic(
    kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    lock = redlock.Redlock(NOWHERE).lock("x")
    with pytest.raises(error, match=named):
        lock.acquire(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [({"blocking": "no"}, TypeError, "blocking"), ({"blocking": False, "timeout": 1.0}, ValueError, "non-blocking")],
)
def test_bad_async_acquire_arguments_fail_before_any_traffic(
    kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    lock = redlock.asyncio.Redlock(NOWHERE).lock("x")
    with pytest.raises(error, match=named):
        asyncio.run(lock.acquire(**kwargs))


def test_extend_with_a_bad_ttl_is_refused_before_traffic() -> None:
    lock = redlock.Redlock(NOWHERE).lock("x")
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(ttl=-1)


@pytest.mark.parametrize("make", CLIENTS)
@pytest.mark.parametrize(("limit", "error"), [(None, TypeError), (0, ValueError), ("3", TypeError), (True, TypeError)])
def test_a_semaphore_needs_a_limit_before_any_traffic(make: Any, limit: Any, error: type[Exception]) -> None:
    rl = make(NOWHERE)
    with pytest.raises(error, match="limit"):
        rl.semaphore("x", limit=limit)
