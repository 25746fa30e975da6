"""Argument checking and master addresses, shared by the sync and asyncio clients.

Everything a caller passes is checked here, before any connection is made, and a bad
argument raises ``TypeError`` or ``ValueError`` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.connection import parse_url

from redlock._core import MIN_TTL, RESERVED_PREFIXES, validity_left

#: Connection settings worth keeping from a client the caller configured: who to talk to and
#: how to authenticate. Everything else (timeouts, retries, health checks, handshake extras)
#: is ours to set, so a caller's defaults cannot turn a refused connection into seconds.
_IDENTITY_KEYS = frozenset({"host", "port", "path", "db", "username", "password", "credential_provider", "client_name"})


@dataclass(frozen=True)
class MasterAddress:
    """One master: a readable name and the keyword arguments that identify it to redis-py."""

    name: str
    identity: dict[str, Any]
    tls: bool
    unix_socket: bool

    @property
    def endpoint(self) -> tuple[str, object]:
        """What makes two addresses the same server (database numbers do not)."""
        if self.unix_socket:
            return ("unix", self.identity["path"])
        return (str(self.identity.get("host", "localhost")).lower(), int(self.identity.get("port", 6379)))


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A duration in seconds: a finite real number, positive (or zero when allowed)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise ValueError(f"{name} must be {bound} seconds, got {value!r}")
    return seconds


def check_drift_factor(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"clock_drift_factor must be a number, got {type(value).__name__}")
    if not 0 <= value < 1:
        raise ValueError(f"clock_drift_factor must be in [0, 1), got {value!r}")
    return float(value)


def check_lock_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("name must not be empty")
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix):
            raise ValueError(
                f"name must not start with {prefix!r}: that prefix is reserved for the keys "
                f"each lock keeps beside its own (got {name!r})"
            )
    return name


def check_ttl(ttl: object, *, node_timeout: float, clock_drift_factor: float) -> float:
    seconds = check_seconds("ttl", ttl)
    if seconds < MIN_TTL:
        raise ValueError(f"ttl must be at least {MIN_TTL} seconds, got {ttl!r}")
    if validity_left(seconds, node_timeout, clock_drift_factor) <= 0:
        raise ValueError(
            f"ttl={ttl!r} leaves no validity once a round takes node_timeout={node_timeout!r} "
            f"and the clock drift allowance is subtracted: use a ttl well above node_timeout"
        )
    return seconds


def check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_renewable_ttl(ttl: float, *, node_timeout: float, clock_drift_factor: float) -> None:
    """Auto-extension renews when two thirds of the ttl are left; three tries must fit in that."""
    if validity_left(2 * ttl / 3, 3 * node_timeout, clock_drift_factor) <= 0:
        raise ValueError(
            f"ttl={ttl!r} is too short to auto-extend in time with node_timeout={node_timeout!r}: "
            f"two thirds of the ttl must cover three extension rounds and the drift allowance"
        )


def check_callable(name: str, value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {type(value).__name__}")


def parse_masters(masters: object, client_types: Sequence[type], client_kind: str) -> list[MasterAddress]:
    """Turn URLs or configured redis-py clients into addresses, rejecting duplicates.

    ``client_types`` are the redis-py client classes this API accepts (sync or asyncio);
    passing the other kind is a TypeError rather than a silent re-creation.
    """
    if isinstance(masters, str | bytes) or not isinstance(masters, Sequence):
        raise TypeError("masters must be a list of redis:// URLs or redis clients, not a single value")
    if not masters:
        raise ValueError("masters must name at least one Redis master")
    addresses = [_address(i, master, client_types, client_kind) for i, master in enumerate(masters)]
    seen: dict[tuple[str, object], str] = {}
    for address in addresses:
        if address.endpoint in seen:
            raise ValueError(f"masters names the same server twice: {seen[address.endpoint]} and {address.name}")
        seen[address.endpoint] = address.name
    return addresses


def _address(index: int, master: object, client_types: Sequence[type], client_kind: str) -> MasterAddress:
    if isinstance(master, str):
        try:
            identity = dict(parse_url(master))  # type: ignore[no-untyped-call]
        except ValueError as error:
            raise ValueError(f"masters[{index}] is not a valid Redis URL ({master!r}): {error}") from None
        tls = master.startswith("rediss://")
        unix = master.startswith("unix://")
        if not unix and not identity.get("host"):
            raise ValueError(f"masters[{index}] has no host: {master!r}")
        return _make_address(identity, tls=tls, unix=unix)
    if isinstance(master, tuple(client_types)):
        pool = master.connection_pool  # type: ignore[attr-defined]
        kwargs: dict[str, Any] = pool.connection_kwargs
        identity = {key: value for key, value in kwargs.items() if key in _IDENTITY_KEYS or key.startswith("ssl")}
        connection_class_name = pool.connection_class.__name__
        return _make_address(identity, tls="SSL" in connection_class_name, unix="Unix" in connection_class_name)
    raise TypeError(f"masters[{index}] must be a redis:// URL or a {client_kind}, got {type(master).__name__}")


def _make_address(identity: dict[str, Any], *, tls: bool, unix: bool) -> MasterAddress:
    if unix:
        name = f"unix:{identity['path']}"
    else:
        identity.setdefault("port", 6379)
        name = f"{identity['host']}:{identity['port']}"
    return MasterAddress(name=name, identity=identity, tls=tls, unix_socket=unix)


def connection_kwargs(address: MasterAddress, node_timeout: float) -> dict[str, Any]:
    """redis-py connection arguments with every hidden delay switched off.

    No CLIENT SETINFO round trips on connect, no health checks, and socket timeouts equal to
    node_timeout so that no single call can outlast it. Each driver adds a no-retry policy of
    its own kind (redis-py 8 defaults to 10 retries with backoff).
    """
    return {
        **address.identity,
        "socket_timeout": node_timeout,
        "socket_connect_timeout": node_timeout,
        "health_check_interval": 0,
        "driver_info": None,
        # RESP2: no HELLO round trip on connect, and replies (pub/sub included) as plain lists.
        "protocol": 2,
    }


Clock = Callable[[], float]


class ConnectionKinds(NamedTuple):
    """redis-py's connection classes of one flavour (sync or asyncio), and a no-retry policy."""

    plain: type[Any]
    tls: type[Any]
    unix: type[Any]
    no_retry: object


def make_connection(address: MasterAddress, node_timeout: float, kinds: ConnectionKinds) -> Any:
    """A connection to one master of the flavour ``kinds`` describes, with our settings."""
    kwargs = connection_kwargs(address, node_timeout)
    kwargs["retry"] = kinds.no_retry
    kind = kinds.unix if address.unix_socket else kinds.tls if address.tls else kinds.plain
    return kind(**kwargs)
