"""What a Lock is and means, shared by the sync and asyncio clients.

Where it sits: above the drivers (:mod:`redlock._io`), whose shared state it owns (one per
client, :class:`ClusterConfig`), and below the two API shells (:mod:`redlock._api.sync`,
:mod:`redlock.asyncio`), which run the flows made here on their driver.

The two public ``Lock`` classes differ only in how they run a flow (calling a driver, or
awaiting one). Everything else, the state of the lock, argument checks, and the mapping of a
flow's result to a return value or an exception, is written once here.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import random
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from redlock._api import adoption, verdicts
from redlock._api import telemetry as _telemetry
from redlock._api.turns import LocalTurns, time_left
from redlock._extras import loaded_class
from redlock._io.driver import DriverBase
from redlock._protocol import config as _config
from redlock._protocol.core import Flow, Request, Result
from redlock._protocol.flows import (
    Lease,
    LockSpec,
    Tokens,
    acquire_flow,
    added_ttl,
    bounded_extend_flow,
    committed_acquire,
    hold_start,
    release_flow,
    release_timeout,
    renewal_flow,
    rolled_back,
)
from redlock._protocol.kinds import kind_of
from redlock._protocol.topology import TopologyReport, check_flow, topology_report
from redlock._version import __version__
from redlock.exceptions import (
    ClientClosed,
    LockAlreadyHeld,
    LockLost,
    LockNotHeld,
    NodeOutcome,
    RedlockError,
)

if TYPE_CHECKING:  # the [otel] extra: optional, and only ever passed through
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

logger = logging.getLogger("redlock")
# A library's logs go where the application sends them, and nowhere (not even to stderr, as
# Python's last-resort handler would) when it configures no logging.
logger.addHandler(logging.NullHandler())

#: 160 random bits: far beyond guessing, and unique across every client that ever runs.
TOKEN_BYTES = 20

DEFAULT_TTL = 10.0
DEFAULT_NODE_TIMEOUT = 0.05
DEFAULT_CLOCK_DRIFT_FACTOR = 0.01
DEFAULT_RETRY_DELAY = 0.2
DEFAULT_UNAVAILABLE_TIMEOUT = 10.0
#: TCP connect, TLS handshake and AUTH of a new connection: generous enough for TLS across a
#: WAN; it runs beside the rounds, which count a master still connecting as not answering.
DEFAULT_CONNECT_TIMEOUT = 1.0
#: A connection idle longer than this gets a PING before its next command (redis-py's
#: ``health_check_interval``, as commonly set): a load balancer or NAT that forgot it
#: without a word would swallow the command.
DEFAULT_HEALTH_CHECK_INTERVAL = 30.0


def new_token() -> str:
    # (secrets.token_hex, without its two calls on the way to os.urandom: one per attempt)
    return os.urandom(TOKEN_BYTES).hex()


#: Between the random part of a token and the identity it carries (an election's).
IDENTITY_SEPARATOR = "@"


def identity_token(identity: str) -> str:
    """A token that carries ``identity``: the random part (as :func:`new_token`), then
    ``@`` and the identity. The random part keeps it unique and unguessable; its fixed
    length lets anyone read the identity back (:func:`identity_of`) whatever it contains."""
    return f"{new_token()}{IDENTITY_SEPARATOR}{identity}"


def identity_of(token: str | None) -> str | None:
    """The identity carried by a token of :func:`identity_token`; None for any other token
    (a plain Lock's, or none)."""
    random_part = 2 * TOKEN_BYTES
    if token is None or len(token) <= random_part + 1 or token[random_part] != IDENTITY_SEPARATOR:
        return None
    if any(char not in "0123456789abcdef" for char in token[:random_part]):
        return None
    return token[random_part + 1 :]


#: How many checked specs a client keeps (distinct ttl, lock_delay, retry_delay, limit and
#: mode together): a few in any real program; the bound is for one that makes up a new ttl
#: per lock, whose cache is emptied and refilled rather than left to grow.
SPECS_KEPT = 64


def _settings_key(
    ttl: object, *, fencing: object, lock_delay: object, limit: object, retry_delay: object, mode: str
) -> tuple[object, ...] | None:
    """What a lock's spec is cached under (every argument but its name), or None when it
    is not cached: only exact ints and floats are, and only without fencing (a fenced lock
    also tells the driver, each time). Equal values of those types check alike (10 and
    10.0 make the same spec), whereas True == 1 hashes as 1 and is still not a ttl, and a
    subclass may define == as it likes: any other type goes through every check each time."""
    if (
        fencing is False
        and (type(ttl) is float or type(ttl) is int)
        and (type(lock_delay) is float or type(lock_delay) is int)
        and (retry_delay is None or type(retry_delay) is float or type(retry_delay) is int)
        and (limit is None or type(limit) is int)
    ):
        return (ttl, lock_delay, limit, retry_delay, mode)
    return None


def _masters_text(masters: Sequence[object]) -> str:
    return f"{len(masters)} master{'' if len(masters) == 1 else 's'}"


class ClusterConfig:
    """A Redlock client's checked settings; the base of both public Redlock classes."""

    #: The redis-py client class accepted in ``masters`` (sync or asyncio), by its dotted name:
    #: redis-py is optional (the [redis] extra), so the class is looked up, never imported.
    _client_class = ""
    _client_kind = ""
    #: The I/O driver: the one thing the sync and asyncio clients do differently.
    _driver_class: type[DriverBase[Any]]
    _driver: DriverBase[Any]

    def __init__(
        self,
        masters: Sequence[Any],
        *,
        node_timeout: float = DEFAULT_NODE_TIMEOUT,
        clock_drift_factor: float = DEFAULT_CLOCK_DRIFT_FACTOR,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        unavailable_timeout: float = DEFAULT_UNAVAILABLE_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        health_check_interval: float | None = DEFAULT_HEALTH_CHECK_INTERVAL,
        wake_on_release: bool = True,
        clock: _config.Clock = time.monotonic,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        strict: bool = False,
        max_reply_bytes: int = _config.DEFAULT_MAX_REPLY_BYTES,
        max_reply_elements: int = _config.DEFAULT_MAX_REPLY_ELEMENTS,
    ) -> None:
        self.node_timeout = _config.check_seconds("node_timeout", node_timeout)
        self.clock_drift_factor = _config.check_drift_factor(clock_drift_factor)
        self.retry_delay = _config.check_seconds("retry_delay", retry_delay)
        self.unavailable_timeout = _config.check_seconds("unavailable_timeout", unavailable_timeout, allow_zero=True)
        self.connect_timeout = _config.check_seconds("connect_timeout", connect_timeout)
        self.health_check_interval = (
            math.inf
            if health_check_interval is None
            else _config.check_seconds("health_check_interval", health_check_interval, allow_zero=True)
        )
        self.wake_on_release = _config.check_flag("wake_on_release", wake_on_release)
        self.strict = _config.check_flag("strict", strict)
        # (At least what a master's INFO and the largest of our own replies take.)
        self.max_reply_bytes = _config.check_reply_limit("max_reply_bytes", max_reply_bytes, 64 * 1024)
        self.max_reply_elements = _config.check_reply_limit("max_reply_elements", max_reply_elements, 256)
        _config.check_callable("clock", clock)
        accepted = loaded_class(self._client_class)
        self.masters = _config.parse_masters(masters, () if accepted is None else (accepted,), self._client_kind)
        self._master_names = tuple(master.name for master in self.masters)  # (every new Lock asks)
        #: The checked specs of the settings lock() was last given (see _settings_key).
        self._specs: dict[tuple[object, ...], LockSpec] = {}
        if len(self.masters) < 3:
            # Legal (a single master is the classic single-node lock), but rarely meant: with
            # two, the quorum is both, so either master down stops every lock.
            logger.warning(
                "Redlock on %s: %s; Redlock tolerates masters down only from three on (N//2 of N)",
                _masters_text(self.masters),
                "no master may fail" if len(self.masters) == 2 else "a single point of failure",
            )
        self._clock = clock
        self._rng = random.Random()
        _telemetry.check_providers(meter_provider, tracer_provider)
        self._start_driver()
        self._telemetry = _telemetry.for_client(
            self.masters,
            self._driver.connection_states,
            clock,
            __version__,
            meter_provider=meter_provider,
            tracer_provider=tracer_provider,
        )
        if self._telemetry is not None:
            self._driver.report_findings(self._telemetry.master_finding)

    def _start_driver(self) -> None:
        self._driver = self._driver_class(
            _config.DriverSettings(
                tuple(self.masters),
                self.node_timeout,
                self.connect_timeout,
                self._clock,
                self.wake_on_release,
                self.health_check_interval,
                self.strict,
                self.max_reply_bytes,
                self.max_reply_elements,
            )
        )

    def _check(self, fencing: object) -> tuple[Flow, Callable[[Result], TopologyReport]]:
        """The flow of ``check()`` and what turns its result into the report, for both clients."""
        fenced = _config.check_flag("fencing", fencing)
        # Fresh answers: the masters connected already say again what they are, judged
        # before the first PING's replies.
        self._driver.rejudge()
        # A diagnostic: a slow answer is worth more than a false "unreachable", so each round
        # waits for a connect and a reply.
        flow = check_flow(self.master_names, self.connect_timeout + self.node_timeout)

        def report(result: Result) -> TopologyReport:
            facts, same_as, in_use = self._driver.topology()
            return topology_report(result, self.masters, facts, same_as, fencing=fenced or in_use, strict=self.strict)

        return flow, report

    @property
    def master_names(self) -> tuple[str, ...]:
        return self._master_names

    def _lock_spec(
        self,
        name: object,
        ttl: object,
        *,
        fencing: object = False,
        lock_delay: object = 0.0,
        limit: object = None,
        retry_delay: object = None,
        mode: str = "",
    ) -> LockSpec:
        """The spec of a lock on ``name`` (a str), on several names (a list or tuple of
        str), with ``limit``, of a semaphore of that many permits on ``name``, or with
        ``mode`` ("read" or "write"), of one side of the read-write lock on ``name``.
        ``retry_delay`` replaces the client's for this lock (None: the client's)."""
        settings = (
            _settings_key(ttl, fencing=fencing, lock_delay=lock_delay, limit=limit, retry_delay=retry_delay, mode=mode)
            if isinstance(name, str)
            else None
        )
        if settings is not None:
            checked = self._specs.get(settings)
            if checked is not None:
                # Only the name is new: it gets every check an uncached lock's name gets.
                return checked.named(_config.check_lock_name(name))
        spec = self._checked_spec(
            name, ttl, fencing=fencing, lock_delay=lock_delay, limit=limit, retry_delay=retry_delay, mode=mode
        )
        if settings is not None:
            if len(self._specs) >= SPECS_KEPT:
                self._specs.clear()
            self._specs[settings] = spec
        return spec

    def _checked_spec(
        self,
        name: object,
        ttl: object,
        *,
        fencing: object,
        lock_delay: object,
        limit: object,
        retry_delay: object,
        mode: str,
    ) -> LockSpec:
        """:meth:`_lock_spec` with every argument checked (none served from the cache)."""
        names: tuple[str, ...] = ()
        if mode:
            key, permits = _config.check_lock_name(name), 0
        elif limit is not None:
            key = _config.check_lock_name(name)
            permits = _config.check_limit(limit, len(self.masters))
        elif isinstance(name, list | tuple):
            names = _config.check_lock_names(name)
            key, permits = names[0], 0
        else:
            key, permits = _config.check_lock_name(name), 0
        seconds = _config.check_ttl(ttl, node_timeout=self.node_timeout, clock_drift_factor=self.clock_drift_factor)
        delay = _config.check_lock_delay(lock_delay, seconds)
        retry = self.retry_delay if retry_delay is None else _config.check_seconds("retry_delay", retry_delay)
        fenced = _config.check_flag("fencing", fencing)
        if fenced and (names or permits):
            raise ValueError("fencing is for a lock on one name: a semaphore or a multi-name lock has no fencing token")
        if fenced:
            # Fencing tokens need counters that survive a restart: masters without an
            # append-only file are warned about from now on.
            self._driver.note_fencing()
        return LockSpec(
            key=key,
            ttl=seconds,
            node_names=self.master_names,
            node_timeout=self.node_timeout,
            clock_drift_factor=self.clock_drift_factor,
            retry_delay=retry,
            unavailable_timeout=self.unavailable_timeout,
            kind=kind_of(fencing=fenced, names=names, limit=permits, mode=mode),
            lock_delay=delay,
        )

    def _lock_parts(
        self, name: object, ttl: object, options: Mapping[str, object], mode: str = ""
    ) -> tuple[LockSpec, LockOptions]:
        """The checked spec and options of ``lock()``, for both clients (see
        :meth:`redlock.Redlock.lock` for each argument; ``options`` has every option, see
        :func:`redlock._api.options.given`); with ``mode``, of that side of a read-write lock
        (``rwlock()``)."""
        spec = self._lock_spec(
            name,
            ttl,
            fencing=options["fencing"],
            lock_delay=options["lock_delay"],
            retry_delay=options["retry_delay"],
            mode=mode,
        )
        return spec, LockOptions.of(spec, options)


@dataclass(frozen=True)
class LockOptions:
    """How one Lock behaves beyond the lock spec: its ``with`` timeout and auto-extension."""

    timeout: float | None = None
    auto_extend: bool = False
    on_lost: Callable[[Any], None] | None = None
    cancel_on_lost: bool = False
    reentrant: bool = False
    #: Carried in every token of this Lock (an election's leader identity), or None.
    identity: str | None = None
    #: The longest a holding may last, auto-extension included (seconds), or None.
    max_hold: float | None = None
    #: The most attempts a blocking acquire makes (at the masters), or None: no bound.
    max_attempts: int | None = None

    def new_token(self) -> str:
        """A fresh token for one acquire attempt (with the identity, if any)."""
        return new_token() if self.identity is None else identity_token(self.identity)

    @classmethod
    def of(cls, spec: LockSpec, options: Mapping[str, object]) -> LockOptions:
        """The checked options of a Lock of ``spec`` from a factory's ``options`` (every
        option, see :func:`redlock._api.options.given`)."""
        return cls.checked(
            spec,
            timeout=options["timeout"],
            auto_extend=options["auto_extend"],
            on_lost=options["on_lost"],
            cancel_on_lost=options["cancel_on_lost"],
            reentrant=options["reentrant"],
            max_hold=options["max_hold"],
            max_attempts=options["max_attempts"],
        )

    @classmethod
    def checked(
        cls,
        spec: LockSpec,
        *,
        timeout: object,
        auto_extend: object,
        on_lost: object,
        cancel_on_lost: object = False,
        reentrant: object = False,
        identity: object = None,
        max_hold: object = None,
        max_attempts: object = None,
    ) -> LockOptions:
        if (
            timeout is None
            and auto_extend is False
            and on_lost is None
            and cancel_on_lost is False
            and reentrant is False
            and identity is None
            and max_hold is None
            and max_attempts is None
        ):
            # lock()'s defaults (each compared by identity: 0 is not False): valid for any spec.
            return _DEFAULT_OPTIONS
        # As for specs (see _settings_key): only exact ints, floats and bools are cached,
        # with the spec's values that the checks read; a callback or an identity never is.
        key: tuple[object, ...] | None = None
        if (
            on_lost is None
            and identity is None
            and (timeout is None or type(timeout) is float or type(timeout) is int)
            and type(auto_extend) is bool
            and type(cancel_on_lost) is bool
            and type(reentrant) is bool
            and (max_hold is None or type(max_hold) is float or type(max_hold) is int)
            and (max_attempts is None or type(max_attempts) is int)
        ):
            key = (spec.ttl, spec.node_timeout, spec.clock_drift_factor, timeout, auto_extend)
            key += (cancel_on_lost, reentrant, max_hold, max_attempts)
            options = _OPTIONS.get(key)
            if options is not None:
                return options
        options = cls._checked_anew(
            spec,
            timeout=timeout,
            auto_extend=auto_extend,
            on_lost=on_lost,
            cancel_on_lost=cancel_on_lost,
            reentrant=reentrant,
            identity=identity,
            max_hold=max_hold,
            max_attempts=max_attempts,
        )
        if key is not None:
            if len(_OPTIONS) >= OPTIONS_KEPT:
                _OPTIONS.clear()
            _OPTIONS[key] = options
        return options

    @classmethod
    def _checked_anew(
        cls,
        spec: LockSpec,
        *,
        timeout: object,
        auto_extend: object,
        on_lost: object,
        cancel_on_lost: object,
        reentrant: object,
        identity: object,
        max_hold: object,
        max_attempts: object,
    ) -> LockOptions:
        """:meth:`checked` with every argument checked (none served from a cache)."""
        seconds = None if timeout is None else _config.check_seconds("timeout", timeout, allow_zero=True)
        extend = _config.check_flag("auto_extend", auto_extend)
        cancel = _config.check_flag("cancel_on_lost", cancel_on_lost)
        nested = _config.check_flag("reentrant", reentrant)
        _config.check_callable("on_lost", on_lost)
        if (on_lost is not None or cancel) and not extend:
            raise ValueError("on_lost and cancel_on_lost report a loss found by auto-extension: pass auto_extend=True")
        if extend:
            _config.check_renewable_ttl(
                spec.ttl, node_timeout=spec.node_timeout, clock_drift_factor=spec.clock_drift_factor
            )
        carried = None if identity is None else _config.check_identity(identity)
        hold = None if max_hold is None else _config.check_seconds("max_hold", max_hold)
        if hold is not None and not extend:
            raise ValueError(
                "max_hold bounds how long auto-extension may keep the lock: pass auto_extend=True "
                "(without it, a holding lasts its ttl and whatever your own extend() calls add)"
            )
        if hold is not None and hold < spec.ttl:
            raise ValueError(
                f"max_hold must be at least the ttl ({spec.ttl!r} s): the acquire alone holds it that long"
            )
        attempts = None if max_attempts is None else _config.check_count("max_attempts", max_attempts)
        return cls(seconds, extend, on_lost, cancel, nested, carried, hold, attempts)  # type: ignore[arg-type]


#: The options of every Lock made with the defaults: one object (they are immutable).
_DEFAULT_OPTIONS = LockOptions()
#: Other options checked, by their arguments and the spec values the checks read (see
#: LockOptions.checked): a Lock made with ``timeout=5``, or by ``@rl.locked`` (which
#: passes ``timeout=0.0`` to try once), checks nothing anew. At most OPTIONS_KEPT.
_OPTIONS: dict[tuple[object, ...], LockOptions] = {}
OPTIONS_KEPT = 64

ClusterT = TypeVar("ClusterT", bound=ClusterConfig)


def semaphore_options(
    cluster: ClusterConfig, name: object, limit: object, ttl: object, options: Mapping[str, object]
) -> tuple[LockSpec, LockOptions]:
    """The checked spec and options of a semaphore, for both clients' ``semaphore()``
    (``options`` has every option, see :func:`redlock._api.options.given`)."""
    if limit is None:  # (_lock_spec reads None as "not a semaphore")
        raise TypeError("limit must be an int, got NoneType")
    spec = cluster._lock_spec(name, ttl, limit=limit, retry_delay=options["retry_delay"])
    return spec, LockOptions.of(spec, options)


class PermitView:
    """What a semaphore shows beyond a lock: its limit and the permit it holds."""

    _spec: LockSpec
    _lease: Lease | None

    @property
    def limit(self) -> int:
        """How many holders the semaphore admits at once."""
        return self._spec.limit

    @property
    def permit(self) -> str | None:
        """The token of the permit held (as :attr:`token`), or None when none is held."""
        return None if self._lease is None else self._lease.token


class LockState(Generic[ClusterT]):
    """One lock name on one cluster, and whether this object holds it right now.

    A Lock object may be shared by the threads (asyncio: the tasks) of a process, as a
    ``threading.Lock`` (``asyncio.Lock``) is: while one of them holds it, or is acquiring it,
    the others' acquires wait here, without traffic, bounded by their own timeout
    (``blocking=False`` returns False at once); then one of them competes on the masters.
    The *owner* is the thread (task) whose acquire succeeded; ownership is local to the
    object and never reaches the masters, which know only the token.

    * Not reentrant (the default): the owner acquiring again while the lock is valid raises
      LockAlreadyHeld (a ``threading.Lock`` would deadlock; an error says why). Any thread
      or task may release it, as with ``threading.Lock``.
    * ``reentrant=True``: the owner may acquire again, counted here with no round trip
      (:attr:`hold_count`); each release counts down, and the masters are released when the
      count returns to zero. Only the owner may release, as with ``threading.RLock``.

    The local turns are :class:`~redlock._api.turns.LocalTurns`' (taken under the shell's
    gate), adoption's checks :mod:`~redlock._api.adoption`'s, and the words of each failure
    :mod:`~redlock._api.verdicts`'; this class holds what a user sees and records what each
    flow's result changes.
    """

    def __init__(self, cluster: ClusterT, spec: LockSpec, options: LockOptions) -> None:
        self._cluster = cluster
        self._spec = spec
        self._options = options
        self._lease: Lease | None = None
        #: Which local user has this object, and how many holds it counts.
        self._turns = LocalTurns(spec.resource, options.reentrant, cluster._clock, self._wake_local)
        #: How the last acquire at the masters was refused (None: it was not), for the
        #: error a ``with`` block raises.
        self._refusal: Result | None = None
        self._outcomes: tuple[NodeOutcome, ...] = ()

    def __repr__(self) -> str:
        state = f"held, {self.validity:.3f}s left" if self.locked() else "not held"
        mode = f" ({self.mode})" if self.mode else ""
        return f"<{type(self).__name__} {self.name!r}{mode} ttl={self._spec.ttl} {state}>"

    @property
    def mode(self) -> str:
        """For a side of a read-write lock (``rwlock(...).read()`` or ``.write()``): "read"
        or "write"; "" for any other lock."""
        return self._spec.kind.mode

    @property
    def name(self) -> str:
        """The lock's name; for a lock on several names, them all joined by ", "."""
        return self._spec.resource

    @property
    def names(self) -> tuple[str, ...]:
        """Every name this lock holds, sorted and unique (one for a lock on one name)."""
        return self._spec.keys

    @property
    def quorum(self) -> int:
        """How many masters must grant it: a majority, or more for a semaphore."""
        return self._spec.quorum

    @property
    def ttl(self) -> float:
        return self._spec.ttl

    @property
    def token(self) -> str | None:
        """Our random token from acquire until a majority confirms or refuses its release
        (None otherwise): after a release that reached no majority it stays, for a retry."""
        return None if self._lease is None else self._lease.token

    @property
    def fencing_token(self) -> int | None:
        """With ``fencing=True``: a number larger than every earlier holder's; else None."""
        return None if self._lease is None else self._lease.fencing_token

    @property
    def outcomes(self) -> tuple[NodeOutcome, ...]:
        """Each master's part in the last acquire or ``extend()`` that succeeded, in master
        order (empty before the first): which masters granted it, which refused or failed,
        and which were ``NOT_AWAITED`` because a majority had already granted. A failure's
        outcomes are on the error it raises."""
        return self._outcomes

    @property
    def validity(self) -> float:
        """Seconds this holder may still rely on the lock; 0.0 when not held, lost or released."""
        deadline = self.deadline
        return 0.0 if deadline is None else max(0.0, deadline - self._cluster._clock())

    @property
    def deadline(self) -> float | None:
        """The ``time.monotonic()`` time until which this holder may rely on the lock
        (moved by each extend); None when not held, lost or released."""
        lease = self._lease
        return None if lease is None or lease.lost or lease.ended else lease.deadline

    def locked(self) -> bool:
        """Whether this object holds the lock and its validity has not run out.

        Finding it run out (before any release) is finding the lock lost, as auto-extension
        or an extend would: :attr:`lost` turns True, and ``on_lost`` is called, once.
        """
        lease = self._lease
        if lease is None or lease.lost or lease.ended:
            return False
        if lease.deadline > self._cluster._clock():
            return True
        if not self._cluster._driver.closed:  # (closed: nobody was to extend it any more)
            why = "its validity ran out while it was held"
            self._notice_loss(lease, *self._expiry_cause(lease, "expired", why), told=False)
        return False

    def _expiry_cause(self, lease: Lease, cause: str, why: str) -> tuple[str, str]:
        """The telemetry cause and the words for a lease that ran out: a bounded hold's end
        (``max_hold``) is told apart from a renewal that failed (``cause``, ``why``)."""
        if lease.held_out:
            return "max_hold", f"it was held for max_hold={self._options.max_hold!r} s, the longest it may be"
        return cause, why

    def check(self) -> float:
        """The validity left, if this object holds the lock; else raise at once.

        LockLost once the lock is lost (auto-extension, an extend, or this very check found
        its validity run out), LockNotHeld if it is not held (never acquired, or released).
        For work in steps: ``lock.check()`` between two steps stops the work at the first
        step after a loss, where :attr:`lost` would have to be polled.
        """
        lease = self._lease
        if lease is not None and not lease.ended and self.locked():
            return self.validity
        if lease is not None and lease.lost:
            raise LockLost(
                f"lock {self.name!r} was lost while held ({lease.loss_why or 'its validity ran out'})",
                resource=self.name,
                quorum=self._spec.quorum,
            )
        raise LockNotHeld(
            f"lock {self.name!r} is not held by this Lock (never acquired, released, or its client closed)",
            resource=self.name,
        )

    def _loss_wait(self, give_up_at: float | None) -> Generator[float, None, bool]:
        """For ``wait_lost``: yields how long to wait for a change (a loss, a release), and
        returns True once the holding is lost, False when it ends otherwise (released, the
        client closed) or ``give_up_at`` passes. The caller waits between steps on what
        ``_wake_local`` wakes (every loss and every release wakes it), so a loss is seen
        at once; the wait never goes past the deadline either, where a holding nobody
        extended is found run out (and so lost) by :meth:`locked`.
        """
        lease = self._lease
        if lease is None or lease.ended:
            raise LockNotHeld(
                f"cannot wait for the loss of {self.name!r}: this Lock does not hold it "
                "(never acquired, or already released)",
                resource=self.name,
            )
        while True:
            if self._lease is not lease or lease.ended or not self.locked():
                return lease.lost
            wait = lease.deadline - self._cluster._clock()
            left = self._time_left(give_up_at)
            if left is not None:
                if left <= 0:
                    return False
                wait = min(wait, left)
            yield max(0.0, wait)

    @property
    def reentrant(self) -> bool:
        """Whether the owner may acquire again (``reentrant=True``): then only the owner may
        release, so an ``on_lost`` callback (run by the renewer) cannot release it."""
        return self._options.reentrant

    @property
    def hold_count(self) -> int:
        """How many acquires of this object's owner are not released yet (0: not held).

        At most 1 unless ``reentrant=True``. It counts local acquires: whether the lock is
        still valid is :meth:`locked`'s answer.
        """
        return self._turns.holds

    # --- sharing the object between local users ---------------------------------------------

    def _acquire_deadline(self, blocking: object, timeout: object) -> float | None:
        """Check acquire's arguments; the time (cluster clock) it gives up at, if any."""
        if not isinstance(blocking, bool):
            raise TypeError(f"blocking must be a bool, got {type(blocking).__name__}")
        give_up_at = self._give_up_at(timeout)
        if not blocking and give_up_at is not None:
            raise ValueError("timeout cannot be given for a non-blocking acquire (blocking=False)")
        return give_up_at

    def _give_up_at(self, timeout: object) -> float | None:
        """Check a ``timeout``; the time (cluster clock) a wait bounded by it gives up at, if any."""
        seconds = None if timeout is None else _config.check_seconds("timeout", timeout, allow_zero=True)
        return None if seconds is None else self._cluster._clock() + seconds

    def _time_left(self, give_up_at: float | None) -> float | None:
        return time_left(self._cluster._clock, give_up_at)

    def _wake_local(self) -> None:
        """Wake the local users waiting for this object (each checks again)."""
        raise NotImplementedError

    @property
    def lost(self) -> bool:
        """Whether auto-extension (or an extend) found the lock lost while it was held."""
        return self._lease is not None and self._lease.lost

    # --- flows and their results ----------------------------------------------------------

    def _acquire_flow(self, blocking: bool, give_up_at: float | None) -> tuple[Tokens, Generator[Request, float, bool]]:
        """The tokens of an acquire and its flow, which ends committed (True: this object
        holds the lock) or, interrupted anywhere, rolled back (see committed_acquire)."""
        options = self._options
        tokens = Tokens(new_token if options.identity is None else options.new_token)
        flow = acquire_flow(
            self._spec,
            tokens,
            self._cluster._clock(),
            blocking=blocking,
            timeout=self._time_left(give_up_at),
            rng=self._cluster._rng,
            max_attempts=self._options.max_attempts,
        )
        observed = self._observed("acquire", flow)
        return tokens, committed_acquire(self._spec, tokens, observed, self._commit_acquire, self._forget_acquire)

    def _observed(self, operation: str, flow: Flow) -> Flow:
        return _telemetry.observe(self._cluster._telemetry, operation, self, flow)

    def _acquired(self, result: Result) -> Lease | None:
        """The new lease if the acquire held the lock; None if others hold it."""
        self._refusal = None if result.ok else result
        if result.ok:
            assert result.token is not None
            self._lease = Lease(result.token, result.deadline, result.fencing_token)
            self._outcomes = result.outcomes
            if self._options.max_hold is not None:
                self._lease.hold_until = hold_start(self._spec, result.deadline) + self._options.max_hold
            return self._lease
        refused = verdicts.acquire_refused(self._spec, result)
        if refused is not None:
            raise refused
        return None

    def _adopt(self, token: object) -> None:
        """Take over a holding known only by its token (acquired by another process), to
        release it (see :func:`~redlock._api.adoption.lease_to_release`)."""
        self._lease = adoption.lease_to_release(token, self._cluster._clock())

    def _adopt_flow(self, token: object, fencing_token: object) -> tuple[Lease, Flow]:
        """Check ``adopt``'s arguments; the new lease and the flow that verifies it."""
        lease, flow = adoption.adoption(
            self._spec, self._options.max_hold, token, fencing_token, self._cluster._clock()
        )
        return lease, self._observed("extend", flow)

    def _handing_over(self) -> Lease:
        """For ``hand_over``: the holding to give away, forgotten here; its renewer stops at
        its next step (the caller stops it now). LockLost if it is lost or ran out."""
        lease = self._held_lease("hand over")
        if lease.lost or lease.ended or not self.locked():
            raise LockLost(
                f"cannot hand {self.name!r} over: the lock was lost while held ({lease.loss_why or 'it ran out'})",
                resource=self.name,
                quorum=self._spec.quorum,
            )
        lease.ended = True  # not lost: the holding goes on, elsewhere
        self._lease = None
        return lease

    def _claim_for_adoption(self, me: object) -> None:
        """Under the local gate: make ``me`` the user of this object for an adoption, which
        needs an object that holds nothing and is not being acquired."""
        if not self._turns.claim(me):
            raise LockAlreadyHeld(
                f"cannot adopt {self.name!r} through this Lock object: it holds the lock or is acquiring it; "
                "adopt with a Lock object of its own",
                resource=self.name,
            )

    def _adopted(self, lease: Lease, result: Result) -> float:
        """Record an adoption that a majority confirmed; its validity. Raise otherwise."""
        if result.ok:
            self._lease, self._turns.holds = lease, 1
            if self._options.auto_extend:
                self._start_renewer(lease)
            return self.validity
        raise verdicts.adoption_failed(self._spec, result)

    def _commit_acquire(self, result: Result) -> bool:
        """Record what an acquire flow found; True if the lock is now held by this object."""
        lease = self._acquired(result)
        if lease is None:
            return False
        self._turns.holds = 1
        if self._options.auto_extend:
            self._start_renewer(lease)
        return True

    def _start_renewer(self, lease: Lease) -> None:
        raise NotImplementedError

    def _forget_acquire(self, tokens: Tokens) -> None:
        """Drop a lease of ``tokens`` that an interrupted acquire's commit recorded (its
        renewer stops): the caller gets no True, and the rollback takes the keys back."""
        lease = self._lease
        if lease is not None and lease.token in tokens.outstanding:
            lease.ended = True
            self._lease, self._turns.holds = None, 0

    def _undo_flow(self, tokens: Tokens | None, interruption: BaseException) -> Flow | None:
        """For an acquire interrupted after its flow ended committed (in the driver's clean-up
        after it, or while handing the object back), which its caller will take for one that
        holds nothing: the lease dropped, then the rollback, which notes on ``interruption``
        what it could not confirm. None when no lease of this acquire is recorded:
        interrupted earlier, its flow has rolled back already."""
        lease = self._lease
        if tokens is None or lease is None or lease.token not in tokens.outstanding:
            return None
        self._forget_acquire(tokens)
        return rolled_back(self._spec, tokens, interruption)

    def _release_flow(self) -> tuple[Lease, Flow]:
        lease = self._held_lease("release")
        now = self._cluster._clock()
        validity = 0.0 if lease.lost or lease.ended else lease.deadline - now
        lease.ended = True  # stops auto-extension; the token stays ours until confirmed
        timeout = release_timeout(self._spec, validity)
        if validity > 0 and not lease.release_rounds and self._spec.kind.hands_over:
            # A waiter of this client takes it over in this round, if one waits (the first
            # try only: a retry cannot know what its earlier try left on each master).
            expires_at = now + timeout + self._spec.node_timeout
            lease.handoff, lease.release_to_all = self._cluster._driver.claim_handoff(self._spec.key, expires_at)
        flow = release_flow(
            self._spec, lease.token, now, earlier=lease.release_rounds, timeout=timeout, handoff=lease.handoff
        )
        return lease, self._observed("release", flow)

    def _release_to_finish(self, lease: Lease, interruption: BaseException) -> bool:
        """Whether a release of ``lease`` was interrupted (Ctrl-C, a signal handler's
        exception) before the masters' answers were accounted for, and is to be finished
        before the interruption goes on: its caller would otherwise find the Lock released
        (``locked()`` is False from the release's start) while the keys stay. Not when the
        release gave its own verdict (a RedlockError), nor when it was handing the lock
        over to a waiter here: that claim settles when it expires."""
        return self._lease is lease and lease.handoff is None and not isinstance(interruption, RedlockError)

    def _released(self, lease: Lease, result: Result) -> None:
        handoff, lease.handoff = lease.handoff, None
        if handoff is not None:
            self._cluster._driver.handed_over(handoff)
        lease.release_rounds += result.rounds
        # Neither confirmed nor refused by a majority (masters down, hung or slow): our keys
        # may still be there, blocking everyone until they expire. Forgetting the token
        # would leave the caller no way to try again.
        unconfirmed = not result.ok and not result.token_gone
        lease.release_unconfirmed = unconfirmed
        if result.ok and self._spec.kind.waits_in_line and handoff is None:
            self._cluster._driver.released_here(self._spec.key, lease.token, to_all=lease.release_to_all)
        if not unconfirmed and self._lease is lease:
            self._lease = None
        lost_while_held = lease.lost
        if not result.ok and not unconfirmed and not lost_while_held:
            self._notice_loss(lease, "release_refused", "its release found our token gone from a majority")
        loss_to_report = None
        if lost_while_held and not lease.loss_reported:
            lease.loss_reported = True
            loss_to_report = lease.loss_why or "auto-extension could not renew it in time"
        failure = verdicts.release_failed(
            self._spec,
            result,
            unconfirmed=unconfirmed,
            loss_to_report=loss_to_report,
            # (An election's Lock carries its identity; its user calls resign(), not release().)
            election=bool(self._options.identity),
        )
        if failure is not None:
            raise failure

    def _notice_lapse(self, lease: Lease, now: float) -> None:
        """An extend about to begin at ``now`` after the validity ran out: the lock is lost,
        as locked() and auto-extension find it. The extend could still find our token where
        the keys outlive the validity (drift allowance, lock_delay), and the holder would go
        on as if it had never lapsed. (The self-test's ``extend-recreates`` client, modelled
        on a library without this check, goes to the masters anyway.)"""
        if not lease.lost and lease.deadline <= now:
            why = "its validity ran out before this extend began"
            self._notice_loss(lease, *self._expiry_cause(lease, "expired", why))

    def _extend_flow(self, ttl: object, add: object = None) -> tuple[Lease, Flow]:
        if ttl is not None and add is not None:
            raise ValueError("give ttl (reset the ttl) or add (move the deadline later), not both")
        check_ttl = functools.partial(
            _config.check_ttl, node_timeout=self._spec.node_timeout, clock_drift_factor=self._spec.clock_drift_factor
        )
        seconds = self._spec.ttl if ttl is None else check_ttl(ttl)
        extra = None if add is None else _config.check_seconds("add", add)
        _config.check_lock_delay(self._spec.lock_delay, seconds)
        lease = self._held_lease("extend")
        now = self._cluster._clock()
        self._notice_lapse(lease, now)
        if lease.lost:
            raise LockLost(
                f"cannot extend {self.name!r}: the lock was lost while held ({lease.loss_why or 'it ran out'})",
                resource=self.name,
                quorum=self._spec.quorum,
            )
        if extra is not None:
            try:
                seconds = check_ttl(added_ttl(self._spec, lease, extra, now))
                _config.check_lock_delay(self._spec.lock_delay, seconds)
            except ValueError as error:
                raise ValueError(f"add={add!r} gives no valid ttl: {error}") from None
        return lease, self._observed("extend", bounded_extend_flow(self._spec, lease, seconds, now))

    def _extended(self, lease: Lease, result: Result) -> float:
        if self._lease is not lease or lease.ended:
            raise LockNotHeld(f"lock {self.name!r} was released while it was being extended", resource=self.name)
        if result.ok and not lease.lost:
            self._outcomes = result.outcomes
            return self.validity
        failure, why = verdicts.extend_failed(self._spec, result, left=self.validity, lost=lease.lost)
        if why is not None:
            lease.lost = True
            self._notice_loss(lease, "extend_failed", why)
        raise failure

    def _renewal_flow(self, lease: Lease) -> Flow:
        return self._observed("renewal", renewal_flow(self._spec, lease, self._cluster._clock()))

    def _renewal_finished(self, lease: Lease, error: BaseException | None = None) -> None:
        """Called by the renewer when it stops: report a loss, loudly, to whoever listens."""
        if isinstance(error, ClientClosed):
            # Not lost: the validity already earned stands; nobody will extend it now.
            logger.info("auto-extension of %r stopped: the client was closed", self.name)
            return
        if error is not None:
            # A renewer that cannot go on must not die silently: the lock is as good as lost.
            lease.lost = True
            logger.error("auto-extension of %r stopped by an unexpected error", self.name, exc_info=error)
        if not lease.lost or lease.ended:
            return
        why = "auto-extension could not renew it in time"
        self._notice_loss(lease, *self._expiry_cause(lease, "extend_failed", why), told=False)

    def _notice_loss(self, lease: Lease, cause: str, why: str, *, told: bool = True) -> None:
        """Mark the lease lost, and log, count and report the loss once per lease, whichever
        path finds it first (the renewer, ``locked()``, an extend, a release).

        A WARNING when nobody was ``told`` (auto-extension or ``locked()`` found it); INFO
        when the caller gets LockLost for it right now, which a warning would only report
        twice. ``on_lost`` is called for a loss found while the lock is held, not for one a
        release finds (the release's LockLost tells the caller, who is done with it).
        """
        if not lease.notice_loss():
            return
        lease.loss_why = why
        logger.log(logging.INFO if told else logging.WARNING, "lock %r was lost: %s", self.name, why)
        if self._cluster._telemetry is not None:
            self._cluster._telemetry.lock_lost(cause)
        if not lease.ended:
            self._loss_found(lease)
        self._wake_local()  # wait_lost() waiters

    def _loss_found(self, lease: Lease) -> None:
        """A loss of the lock this object holds was just found: tell ``on_lost``, once."""
        if self._options.on_lost is not None:
            try:
                self._options.on_lost(self)
            except Exception:
                logger.exception("on_lost callback of lock %r failed", self.name)

    def _held_lease(self, action: str) -> Lease:
        if self._lease is None:
            raise LockNotHeld(
                f"cannot {action} {self.name!r}: this Lock does not hold it (never acquired, or already released)",
                resource=self.name,
            )
        return self._lease

    def _not_acquired_in_with(self) -> RedlockError:
        return verdicts.not_acquired_in_with(
            self._spec, self._refusal, self._options.timeout, self._options.max_attempts
        )
