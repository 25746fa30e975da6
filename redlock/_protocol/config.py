"""Argument checking, master addresses and credentials, shared by the sync and asyncio clients.

Where it sits: above the protocol's vocabulary (:mod:`redlock._protocol.core`, whose
limits it checks against) and below the connection policy
(:mod:`redlock._protocol.connection`), which reads the addresses, credentials and
:class:`DriverSettings` made here. It opens no connection; the only files it reads are a
``rediss://`` master's CA and certificate files, when its SSL context is made.

Everything a caller passes is checked here, before any connection is made, and a bad
argument raises ``TypeError`` or ``ValueError`` naming it.
"""

from __future__ import annotations

import math
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlock._protocol.core import MAX_TTL, MIN_TTL, RESERVED_PREFIXES, semaphore_quorum, validity_left
from redlock._protocol.urls import parse_url, read_bool, redacted, redacted_error, scheme_of

#: What a caller's redis-py client may tell us beyond its address: who to be. Everything else
#: (timeouts, retries, health checks, handshake extras) is ours to set, so a caller's defaults
#: cannot turn a refused connection into seconds.
_IDENTITY_KEYS = frozenset({"host", "port", "path", "db", "username", "password", "client_name"})

#: TLS settings, named as redis-py names them (URL query parameters or client arguments).
_TLS_KEYS = frozenset({"ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname"})

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


@dataclass(frozen=True)
class Credentials:
    """Who a new connection says it is, and which database it selects.

    Its ``repr`` (and so the ``repr`` of every address, client and error that holds one)
    never shows the password: credentials travel in objects that get logged and printed.
    """

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int = 0
    client_name: str | None = None

    def __repr__(self) -> str:
        password = "" if self.password is None else ", password='***'"
        return f"Credentials(username={self.username!r}{password}, db={self.db}, client_name={self.client_name!r})"


@dataclass(frozen=True)
class MasterAddress:
    """One master: a readable name, where it listens, how to speak TLS to it, who we are."""

    name: str
    host: str | None
    port: int | None
    #: A unix socket's path (then host and port are None).
    path: str | None
    credentials: Credentials
    #: Built (and so checked) when the address is parsed, before any connection.
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    #: The name the server's certificate must carry, or None when not checked.
    server_hostname: str | None = None

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def unix_socket(self) -> bool:
        return self.path is not None

    @property
    def endpoint(self) -> tuple[str, object]:
        """What makes two addresses the same server (database numbers do not; nor does
        calling the loopback interface ``localhost`` rather than ``127.0.0.1``)."""
        if self.path is not None:
            return ("unix", os.path.realpath(self.path))
        host = str(self.host).lower()
        return ("loopback" if host in _LOOPBACK_NAMES else host, self.port)


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A duration in seconds: a finite real number, positive (or zero when allowed)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise ValueError(f"{name} must be {bound} seconds, got {value!r}")
    if seconds > MAX_TTL:
        raise ValueError(f"{name} must be at most {MAX_TTL:.0f} seconds (ten years), got {value!r}")
    return seconds


def check_count(name: str, value: object) -> int:
    """A number of times: an int of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


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
    if not name.isascii():  # (an ASCII name is UTF-8 as it is; isascii() reads a flag)
        try:
            name.encode()
        except UnicodeEncodeError as error:
            raise ValueError(
                f"name must be encodable as UTF-8 (Redis keys are bytes): {error.reason} in {name!r}"
            ) from None
    if name.startswith(RESERVED_PREFIXES):
        prefix = next(prefix for prefix in RESERVED_PREFIXES if name.startswith(prefix))
        raise ValueError(
            f"name must not start with {prefix!r}: that prefix is reserved for the keys "
            f"each lock keeps beside its own (got {name!r})"
        )
    return name


def check_lock_names(names: object) -> tuple[str, ...]:
    """The names of a multi-name lock, checked one by one, sorted and without duplicates.

    Sorted, so that every client takes overlapping sets in the same order on each master
    (each master sets all of them in one script anyway, but the order fixes which key the
    extend-order key is kept beside, and makes equal sets equal).
    """
    if not isinstance(names, list | tuple):
        raise TypeError(f"names must be a list or tuple of str, got {type(names).__name__}")
    if not names:
        raise ValueError("names must not be empty: give at least one lock name")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"names must all be str, got {type(name).__name__} ({name!r})")
        check_lock_name(name)
    return tuple(sorted(set(names)))


def check_limit(limit: object, node_count: int) -> int:
    """A semaphore's number of permits: an int of at least 1."""
    limit = check_count("limit", limit)
    try:
        semaphore_quorum(node_count, limit)
    except ValueError as error:
        raise ValueError(f"limit={limit} cannot be made safe on {node_count} masters: {error}") from None
    return limit


def check_ttl(ttl: object, *, node_timeout: float, clock_drift_factor: float) -> float:
    seconds = check_seconds("ttl", ttl)
    if seconds < MIN_TTL:
        raise ValueError(f"ttl must be at least {MIN_TTL} seconds, got {ttl!r}")
    if seconds > MAX_TTL:
        raise ValueError(f"ttl must be at most {MAX_TTL:.0f} seconds (ten years), got {ttl!r}")
    if validity_left(seconds, node_timeout, clock_drift_factor) <= 0:
        raise ValueError(
            f"ttl={ttl!r} leaves no validity once a round takes node_timeout={node_timeout!r} "
            f"and the clock drift allowance is subtracted: use a ttl well above node_timeout"
        )
    return seconds


def check_lock_delay(lock_delay: object, ttl: float) -> float:
    """``lock_delay`` is zero or more seconds, and the keys' life ``ttl + lock_delay`` fits MAX_TTL."""
    seconds = check_seconds("lock_delay", lock_delay, allow_zero=True)
    if ttl + seconds > MAX_TTL:
        raise ValueError(
            f"ttl + lock_delay must be at most {MAX_TTL:.0f} seconds (ten years), got {ttl!r} + {lock_delay!r}"
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


#: An election's identity travels inside the lock's token, which every master stores and
#: every inspect reads back: bounded so that a token stays a small value.
MAX_IDENTITY_BYTES = 256


def check_identity(identity: object) -> str:
    """An election identity: a non-empty printable str of at most MAX_IDENTITY_BYTES in UTF-8.

    Printable only (no control characters, no line breaks): others read it back from the
    masters and print it (``leader()``, the command line, logs), where such characters would
    garble the output or forge lines.
    """
    if not isinstance(identity, str):
        raise TypeError(f"identity must be a str, got {type(identity).__name__}")
    if not identity:
        raise ValueError("identity must not be empty")
    try:
        size = len(identity.encode())
    except UnicodeEncodeError as error:
        raise ValueError(f"identity must be encodable as UTF-8: {error.reason} in {identity!r}") from None
    if size > MAX_IDENTITY_BYTES:
        raise ValueError(f"identity must be at most {MAX_IDENTITY_BYTES} bytes in UTF-8, got {size}")
    if not identity.isprintable():
        raise ValueError(f"identity must be printable (no control characters or line breaks), got {identity!r}")
    return identity


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
    where = f"masters[{index}]"
    if isinstance(master, str):
        try:
            settings = parse_url(master)
        except ValueError as error:
            # The URL as typed, but never its password: this message is printed and logged.
            raise ValueError(
                f"{where} is not a valid Redis URL ({redacted(master)!r}): {redacted_error(error, master)}"
            ) from None
        scheme = scheme_of(master)
        unix = scheme == "unix"
        if not unix and not settings.get("host"):
            raise ValueError(f"{where} has no host: {redacted(master)!r}")
        unknown = set(settings) - _IDENTITY_KEYS - _TLS_KEYS
        if unknown:
            raise ValueError(f"{where} has URL parameters this client does not use: {', '.join(sorted(unknown))}")
        tls = scheme == "rediss"
        plain = sorted(key for key in settings if key in _TLS_KEYS)
        if plain and not tls:
            # Ignored, they would leave a user who meant TLS sending AUTH and tokens in clear.
            raise ValueError(
                f"{where} has TLS parameters ({', '.join(plain)}) on a {scheme}:// URL, which is never TLS:"
                " use rediss:// for TLS"
            )
        return _make_address(where, settings, tls=tls, unix=unix)
    if isinstance(master, tuple(client_types)):
        # connection_pool, its connection_kwargs and connection_class, with these key names,
        # are alike from redis-py 4.6 to 8.x, sync and asyncio: the range of the [redis] extra.
        pool = master.connection_pool  # type: ignore[attr-defined]
        kwargs: dict[str, Any] = pool.connection_kwargs
        if kwargs.get("credential_provider") is not None:
            raise ValueError(f"{where}: a credential_provider is not supported; give username and password")
        settings = {key: value for key, value in kwargs.items() if key in _IDENTITY_KEYS or key in _TLS_KEYS}
        class_name = pool.connection_class.__name__
        return _make_address(where, settings, tls="SSL" in class_name, unix="Unix" in class_name)
    raise TypeError(f"{where} must be a redis:// URL or a {client_kind}, got {type(master).__name__}")


def _make_address(where: str, settings: dict[str, Any], *, tls: bool, unix: bool) -> MasterAddress:
    db = settings.get("db") or 0
    if not isinstance(db, int) or db < 0:
        raise ValueError(f"{where}: db must be a whole number of zero or more, got {db!r}")
    credentials = Credentials(
        username=settings.get("username") or None,
        password=settings.get("password"),
        db=db,
        client_name=settings.get("client_name"),
    )
    if unix:
        path = str(settings["path"])
        return MasterAddress(f"unix:{path}", None, None, path, credentials)
    host = str(settings["host"])
    port = int(settings.get("port") or 6379)
    if not 0 < port < 65536:
        raise ValueError(f"{where}: port must be in 1..65535, got {port}")
    context, server_hostname = _tls_context(where, settings, host) if tls else (None, None)
    return MasterAddress(f"{host}:{port}", host, port, None, credentials, context, server_hostname)


def _tls_context(where: str, settings: dict[str, Any], host: str) -> tuple[ssl.SSLContext, str | None]:
    """An SSL context from redis-py's ssl_* settings; a missing or unreadable file is a
    ValueError naming the setting, here, rather than a failure at the first acquire."""
    reqs = settings.get("ssl_cert_reqs", "required")
    verify = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}.get(
        reqs.lower() if isinstance(reqs, str) else reqs, reqs
    )
    if verify not in (ssl.CERT_REQUIRED, ssl.CERT_OPTIONAL, ssl.CERT_NONE):
        raise ValueError(f"{where}: ssl_cert_reqs must be required, optional or none, got {reqs!r}")
    # The host name is checked whenever the certificate is (``optional`` too, as redis-py
    # does), unless the caller turns it off by name: a certificate for any other name would
    # otherwise do.
    check_hostname = settings.get("ssl_check_hostname", verify != ssl.CERT_NONE)
    if isinstance(check_hostname, str):
        check_hostname = read_bool(check_hostname)
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if settings.get("ssl_ca_certs"):
            context.load_verify_locations(cafile=settings["ssl_ca_certs"])
        if settings.get("ssl_certfile"):
            context.load_cert_chain(settings["ssl_certfile"], settings.get("ssl_keyfile"))
    except (OSError, ssl.SSLError) as error:
        raise ValueError(
            f"{where}: cannot load its TLS files (ssl_ca_certs, ssl_certfile, ssl_keyfile): {error}"
        ) from None
    context.check_hostname = bool(check_hostname) and verify != ssl.CERT_NONE
    context.verify_mode = verify
    return context, host if context.check_hostname or verify != ssl.CERT_NONE else None


#: The most bytes one reply may take (each string in it too): a lock's replies are a token,
#: a count or a short list; the longest a master sends us is its INFO at the handshake (a
#: few kB), or an inspect of a read-write lock's readers.
DEFAULT_MAX_REPLY_BYTES = 512 * 1024
#: The most array elements one reply may have, nested arrays included: an inspect of a
#: read-write lock lists two for each reader.
DEFAULT_MAX_REPLY_ELEMENTS = 4096


def check_reply_limit(name: str, value: object, least: int) -> int:
    """A size limit: an int of at least ``least``, and below 2**31 (hiredis's own bounds)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not least <= value < 2**31:
        raise ValueError(f"{name} must be in {least}..{2**31 - 1}, got {value}")
    return value


Clock = Callable[[], float]


@dataclass(frozen=True)
class DriverSettings:
    """What a driver and its connection policy need of a client's settings, checked."""

    masters: tuple[MasterAddress, ...]
    node_timeout: float
    connect_timeout: float
    clock: Clock
    wake_on_release: bool
    #: A connection idle this long is checked with a PING before it carries a command.
    health_check_interval: float = math.inf
    #: Every warning about a master is a refusal (see redlock._protocol.topology).
    strict: bool = False
    #: The most one reply may take (see redlock._protocol.connection.ReplyReader).
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    max_reply_elements: int = DEFAULT_MAX_REPLY_ELEMENTS
