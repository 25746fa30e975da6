"""The synchronous client: ``Redlock`` and ``Lock``, over :class:`redlock._sync.Driver`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

import redis

from redlock._core import Lease, LockSpec, Result
from redlock._lock import (
    DEFAULT_TTL,
    ClusterConfig,
    LockOptions,
    LockState,
)
from redlock._sync import Driver
from redlock.exceptions import LockLost


class Redlock(ClusterConfig):
    """A Redlock client on N independent Redis masters; hands out :class:`Lock` objects.

    ``masters`` are ``redis://`` / ``rediss://`` / ``unix://`` URLs or configured
    ``redis.Redis`` clients (only their address and credentials are used: this client makes
    its own connections, with no retries and socket timeouts of ``node_timeout``).

    Defaults, and what each protects against:

    * ``node_timeout=0.05``: the most one master may take to answer one request. A hung or
      unreachable master costs at most this per round, never a hang. Keep it far below ttl.
    * ``clock_drift_factor=0.01``: the share of the ttl not counted on, for masters' and
      clients' clocks running at rates up to 1 % apart (plus 2 ms for expiry precision).
    * ``retry_delay=0.2``: mean delay between attempts of a blocking acquire, jittered
      uniformly over [0.1, 0.3] s so that clients that split a vote do not retry in lockstep.
    * ``unavailable_timeout=10.0``: a blocking acquire with no timeout gives up with
      :class:`~redlock.QuorumUnavailable` after this long without reaching a majority.
    * ``wake_on_release=True``: a waiting acquire listens (pub/sub, one connection per
      master per client) for the release of the lock it waits for and retries at once,
      so a handoff takes about a round trip instead of a retry delay.
    * ``meter_provider=None``, ``tracer_provider=None``: where the client's OpenTelemetry
      metrics and spans go (the ``[otel]`` extra; see docs/operations.md): by default the
      global providers, which do nothing until the application configures an SDK.
    """

    client_types = (redis.Redis,)
    client_kind = "redis.Redis client"
    driver_class = Driver
    _driver: Driver

    def lock(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        timeout: float | None = None,
        auto_extend: bool = False,
        on_lost: Callable[[Lock], None] | None = None,
        fencing: bool = False,
    ) -> Lock:
        """A Lock on ``name`` that expires after ``ttl`` seconds unless extended.

        ``timeout`` bounds the wait of a ``with`` block. ``auto_extend=True`` keeps the lock
        alive from a daemon thread while it is held (an extend about every ttl/3); if it
        cannot, the lock is marked lost: ``locked()`` turns False, ``on_lost(lock)`` is
        called from that thread, and leaving the ``with`` block raises LockLost.
        ``fencing=True`` gives each holder a ``fencing_token`` larger than every earlier
        holder's (see :mod:`redlock.fencing`).
        """
        spec = self.lock_spec(name, ttl, fencing=fencing)
        return Lock(self, spec, LockOptions.checked(spec, timeout=timeout, auto_extend=auto_extend, on_lost=on_lost))

    def release_token(self, name: str, token: str) -> None:
        """Release ``name`` held under ``token`` (acquired by another process, say).

        Only the holder of ``token`` can release: the compare-and-delete runs on every
        master. LockLost if a majority answered that the token was gone; ReleaseUnconfirmed
        if no majority answered in time (the lock may stay held until its ttl runs out).
        """
        lock = self.lock(name, DEFAULT_TTL)  # a release sets no ttl: any valid one will do
        lock._adopt(token)
        lock.release()

    def close(self) -> None:
        """Close every connection; Locks of this client cannot be used afterwards."""
        self._driver.close()

    def __enter__(self) -> Redlock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Redlock {len(self.masters)} masters: {', '.join(self.master_names)}>"


class Lock(LockState[Redlock]):
    """A lock on one name, held when a majority of masters carry our token.

    Use it like ``threading.Lock`` (``acquire``/``release`` or ``with``), with the
    difference that the lock expires: rely on it only while :meth:`locked` is true, and
    call :meth:`extend` (or pass ``auto_extend=True``) to keep it longer.
    """

    def __init__(self, cluster: Redlock, spec: LockSpec, options: LockOptions) -> None:
        super().__init__(cluster, spec, options)
        self._renewer: tuple[threading.Thread, threading.Event] | None = None

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Acquire the lock; True if held, False if others hold it (or timeout ran out).

        ``blocking=False`` makes exactly one attempt. ``timeout`` bounds the total wait of
        a blocking acquire; ``None`` waits until acquired. Raises
        :class:`~redlock.QuorumUnavailable` when a majority of masters cannot be reached
        (at once when not blocking; when the timeout, or ``unavailable_timeout``, runs out
        while blocking).
        """
        tokens, flow = self._acquire_flow(blocking, timeout)
        # Interrupted (Ctrl-C) anywhere before the lease is recorded, with SETs possibly
        # landed: ours are taken back before the interruption goes on.
        return self._cluster._driver.run(flow, self._commit_acquire, rollback=lambda: self._rollback_flow(tokens))

    def release(self) -> None:
        """Delete our token on every master; LockLost if a majority no longer held it.

        LockLost too when no majority answered at all (masters down or hung): the token is
        then kept, our keys may block others until they expire, and release() may be retried.
        """
        lease, flow = self._release_flow()
        self._stop_renewer()
        self._cluster._driver.run(flow, lambda result: self._released(lease, result))

    def extend(self, ttl: float | None = None) -> float:
        """Reset the lock's ttl (default: its own) on a majority; returns the new validity."""
        lease, flow = self._extend_flow(ttl)
        return self._cluster._driver.run(flow, lambda result: self._extended(lease, result))

    def _start_renewer(self, lease: Lease) -> None:
        stop = threading.Event()

        def renew() -> None:
            error: BaseException | None = None
            try:
                self._cluster._driver.run(self._renewal_flow(lease), _unchanged, interrupt=stop)
            except BaseException as unexpected:
                error = unexpected
            self._renewal_finished(lease, error)

        thread = threading.Thread(target=renew, name=f"redlock-renew:{self.name}", daemon=True)
        self._renewer = (thread, stop)
        thread.start()

    def _stop_renewer(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is None:
            return
        thread, stop = renewer
        stop.set()
        if thread is not threading.current_thread():  # on_lost may release from the renewer
            thread.join()

    def __enter__(self) -> Lock:
        if not self.acquire(blocking=True, timeout=self._options.timeout):
            raise self._not_acquired_in_with()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            self.release()
        except LockLost as lost:
            if exc is None:
                raise
            exc.add_note(f"redlock: {lost}")


def _unchanged(result: Result) -> Result:
    return result
