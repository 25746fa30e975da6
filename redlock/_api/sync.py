"""The sync API's shell: :mod:`redlock`'s ``Redlock``, ``Lock`` and the other primitives.

Each class calls the sync driver (:class:`redlock._io.sync.Driver`) with the flows and the
state written once for both APIs (:mod:`redlock._api.state` and its neighbours); the
asyncio API's shell, :mod:`redlock.asyncio`, awaits the asyncio driver instead.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Generator, Iterator
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, Unpack

from redlock._api.election import (
    UNCHANGED,
    Campaign,
    Elected,
    ElectionState,
    Resign,
    Runner,
    Step,
    Wait,
    stopped_by_sigterm,
)
from redlock._api.locked import NO_DEFAULT, LockedCall
from redlock._api.options import LockKeywords, ReadWriteKeywords, SemaphoreKeywords, given, takes
from redlock._api.rwlock import ReadWriteState
from redlock._api.state import (
    DEFAULT_TTL,
    ClusterConfig,
    LockOptions,
    LockState,
    PermitView,
    _masters_text,
    semaphore_options,
)
from redlock._api.turns import Turn
from redlock._io.sync import Driver
from redlock._protocol.flows import (
    Lease,
    LockInfo,
    LockSpec,
    Tokens,
    force_release_flow,
    inspect_flow,
    lock_info,
)
from redlock._protocol.topology import TopologyReport
from redlock.exceptions import LockLost, LockNotAcquired

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Redlock(ClusterConfig):
    """A Redlock client on N independent Redis masters; hands out :class:`Lock` objects.

    ``masters`` are ``redis://`` / ``rediss://`` / ``unix://`` URLs or configured
    ``redis.Redis`` clients of redis-py 4.6 or later (the ``[redis]`` extra; only their address
    and credentials are used: this client makes its own connections, one per master, and
    bounds every request by ``node_timeout``).

    A URL is read as redis-py 8.2's ``from_url`` reads it, the parts split as RFC 3986 and
    Python's ``urllib.parse`` split them; this grammar is the library's reading, and
    tests/test_urls.py holds both this parser and the installed redis-py to it:

    * scheme: ``redis`` (TCP), ``rediss`` (TLS) or ``unix`` (a socket), in any case
      (RFC 3986 §3.1: ``REDISS://`` is ``rediss://``), then ``://``;
    * ``user:password@``, each percent-decoded once; an empty user is the server's default;
    * the host and a port in 1..65535 (6379 if none; port 0 is refused, where redis-py takes
      it for 6379), or, after ``unix://``, the socket's path (required);
    * the database: ``/N``, or ``?db=N``, which wins over the path; a path that is not a
      number is refused (redis-py drops it and uses database 0: two clients that meant one
      database would use two, and exclude nobody);
    * query parameters, each value percent-decoded once, the first of a repeated name kept,
      an empty value dropped: ``db``, ``username``, ``password``, ``client_name``,
      ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_cert_reqs`` and
      ``ssl_check_hostname``; any other is refused, since this client would not use it, and
      so are the five ``ssl_*`` on a ``redis://`` or ``unix://`` URL, which is never TLS
      (use ``rediss://``): ignored, they would send the password and tokens in clear;
    * ``ssl_check_hostname`` is false for ``0``, ``f``, ``false``, ``n``, ``no``, ``off``
      in any case, and true for any other text.

    TLS checks the server's certificate (``?ssl_cert_reqs=required``, the default) and the
    host name in it. ``?ssl_cert_reqs=optional`` checks as much (Python's ``ssl`` reads it
    as ``required`` for a client), the host name included, as redis-py does: only
    ``?ssl_check_hostname=false`` turns the host name check off, and
    ``?ssl_cert_reqs=none`` every check.

    Where redis-py versions disagree, the newest reading is taken: redis-py up to 8.1 refused
    ``REDIS://`` and read ``?ssl_check_hostname=off`` as true; 8.2 follows the RFC and the word.

    Defaults, and what each protects against:

    * ``node_timeout=0.05``: the most one master may take to answer one request. A hung or
      unreachable master costs at most this per round, never a hang. Keep it far below ttl.
    * ``clock_drift_factor=0.01``: the share of the ttl not counted on, for masters' and
      clients' clocks running at rates up to 1 % apart (plus 2 ms for expiry precision).
    * ``retry_delay=0.2``: mean delay between attempts of a blocking acquire, jittered
      uniformly over [0.1, 0.3] s so that clients that split a vote do not retry in lockstep.
    * ``unavailable_timeout=10.0``: a blocking acquire with no timeout gives up with
      :class:`~redlock.QuorumUnavailable` after this long without reaching a majority.
    * ``connect_timeout=1.0``: TCP connect, TLS handshake and AUTH of a new connection; it
      runs beside the rounds, which count a master still connecting as not answering.
    * ``health_check_interval=30.0``: a connection idle longer than this is checked with a
      PING before its next command, which waits for the answer (or goes on a new connection
      if none comes within ``node_timeout``); ``None``: never. Every connection also has TCP
      keepalive (first probe after 60 s idle, every 10 s, dead after 3 missed).
    * ``wake_on_release=True``: a waiting acquire listens (pub/sub, one connection per
      master per client) for the release of the lock it waits for and retries at once,
      so a handoff takes about a round trip instead of a retry delay.
    * ``clock=time.monotonic``: where every interval and deadline is read, never a wall
      clock (each request's ``node_timeout`` too, on both clients); a test may pass its own
      (seconds, never going back).
    * ``meter_provider=None``, ``tracer_provider=None``: where the client's OpenTelemetry
      metrics and spans go (the ``[otel]`` extra; see docs/operations.md): by default the
      global providers, which do nothing until the application configures an SDK.
    * ``strict=False``: at each connection's handshake the client reads what the master says
      about itself (``INFO``) and refuses (status ``MISCONFIGURED``) a cluster node, a
      replica, or the same server under a second address; risks (replicas attached, an
      evicting ``maxmemory-policy``, fencing without an append-only file) are logged as
      warnings. ``strict=True`` refuses those too. See :meth:`check`.
    * ``max_reply_bytes=524288`` (512 KiB), ``max_reply_elements=4096``: the most one reply
      of a master may take on the wire, and in array elements at every level of nesting. A
      lock's replies are a token, a count or a short list; the longest are a master's
      ``INFO`` at the handshake (a few kB) and :meth:`inspect` of a read-write lock (two
      elements per reader). A reply past either limit (a broken or hostile server streaming
      an endless string, or announcing an array of 2**31 elements) is never read whole:
      that master's connection is closed and it counts as an error (``NodeStatus.ERROR``,
      the outcome naming the limit) for the calls waiting on it, which still succeed on the
      other masters; the next call connects again. So memory stays bounded, whatever a
      master sends. At least 65536 and 256 (a ``ValueError`` below, a ``TypeError`` for
      anything but an int).
    """

    _client_class = "redis.Redis"
    _client_kind = "redis.Redis client"
    _driver_class = Driver
    _driver: Driver

    @takes(LockKeywords, "Lock")
    def lock(
        self, name: str | list[str] | tuple[str, ...], ttl: float = DEFAULT_TTL, **options: Unpack[LockKeywords[Lock]]
    ) -> Lock:
        """A Lock on ``name`` that expires after ``ttl`` seconds unless extended.

        ``timeout`` bounds the wait of a ``with`` block. ``auto_extend=True`` keeps the lock
        alive from a daemon thread while it is held (an extend about every ttl/3); if it
        cannot, the lock is marked lost: ``locked()`` turns False, ``on_lost(lock)`` is
        called from that thread, and leaving the ``with`` block raises LockLost.
        ``fencing=True`` gives each holder a ``fencing_token`` larger than every earlier
        holder's (see :mod:`redlock.fencing`).

        The Lock may be shared by threads like a ``threading.Lock``: while one holds it, the
        others' acquires wait for its release. ``reentrant=True`` lets the owning thread
        acquire it again, counted locally (see :class:`Lock`).

        ``lock_delay`` (seconds, Chubby's lock-delay) keeps the keys on the masters
        ``ttl + lock_delay`` while the holder counts only ``ttl`` of validity: a holder that
        crashed, hung or was cut off keeps others out that much longer after its validity
        ends, so that its late writes land before the next holder's. A release deletes the
        keys at once: only a holder that fails to release costs the delay.

        Given a list or tuple of names, the Lock holds all of them or none: each master sets
        every name in one script or none of them, and votes yes only if it set them all. The
        names are sorted and de-duplicated (``lock.names``), so clients asking for
        overlapping sets never deadlock; release and extend cover every name. An empty list
        is a ValueError, a name that is not a str a TypeError.

        ``max_hold`` (seconds, at least ``ttl``; needs ``auto_extend=True``) bounds the whole
        holding: auto-extension never moves the deadline past ``max_hold`` after the acquire
        began (its last extend sets a shorter ttl, so the keys expire then too), and the lock
        is then lost like any lock that could not be renewed (``on_lost``, :attr:`Lock.lost`,
        LockLost on leaving the block; the cause is ``max_hold``). ``retry_delay`` replaces
        the client's for this lock (the mean pause between attempts of a blocking acquire).
        ``max_attempts`` bounds how many attempts a blocking acquire makes at the masters
        (node-redlock's ``retryCount`` + 1), beside ``timeout``: whichever runs out first
        ends it (False from ``acquire``; LockNotAcquired, or AcquireTimeout, from ``with``).
        """
        return Lock(self, *self._lock_parts(name, ttl, given(options, LockKeywords)))

    def locked(
        self,
        name: str | list[str] | tuple[str, ...],
        *,
        on_busy: str = "wait",
        default: Any = NO_DEFAULT,
        **lock_options: Any,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """A decorator: each call of the function runs holding ``rl.lock(name, **lock_options)``.

        ``name`` may be a template with ``{fields}`` naming the function's parameters
        (``"report:{user_id}"``, ``"{order.id}"``): each call's arguments, defaults
        applied, build its lock's name. A list or tuple of them locks several names at once.
        ``lock_options`` are :meth:`lock`'s (``ttl``, ``timeout``, ``auto_extend``, ...),
        checked here, when decorating. ``on_busy`` says what a call does when others hold
        the lock: ``"wait"`` (the default) waits as ``with rl.lock(...)`` does, bounded by
        ``timeout`` / ``max_attempts`` (then AcquireTimeout / LockNotAcquired); ``"raise"``
        tries once and raises LockNotAcquired; ``"skip"`` tries once and returns
        ``default`` (None unless given) without calling the function. A call made while the
        same thread already runs a call holding the same name raises LockAlreadyHeld
        (``reentrant=True``: it runs under the outer hold) instead of waiting for itself.
        """
        plan = LockedCall.planned(self, name, on_busy, default, lock_options, asynchronous=False)

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            call = plan.bound_to(function)

            @functools.wraps(function)
            def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
                with call.running(args, kwargs, threading.current_thread()) as lock:
                    if lock is None:  # nested, reentrant: the outer call holds it
                        return function(*args, **kwargs)
                    with contextlib.ExitStack() as stack:
                        try:
                            stack.enter_context(lock)
                        except LockNotAcquired as refused:
                            return call.refused(refused)  # type: ignore[no-any-return]
                        return function(*args, **kwargs)

            return locked_call

        return decorate

    def election(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        identity: str | None = None,
        on_lost: Callable[[Election], None] | None = None,
        observe_interval: float | None = None,
        lock_delay: float = 0.0,
    ) -> Election:
        """The election on ``name``, as a campaigner known to others as ``identity``.

        A leadership is a Lock on ``name`` held with ``fencing=True`` (its fencing token is
        the :attr:`~Election.term`) and ``auto_extend=True`` (every ttl/3 or so); see
        :class:`Election`. ``identity`` (default ``host:pid``) is what :meth:`Election.leader`
        tells everyone while this campaigner leads: a printable str of at most 256 bytes in
        UTF-8. ``on_lost(election)`` is called from the renewer's thread if a leadership
        cannot be extended in time. ``observe_interval`` (default ttl/3, at most 1 s) bounds
        how late :meth:`Election.observe` sees a change that no release announced.
        ``lock_delay`` is as for :meth:`lock`.
        """
        return Election.made(
            self,
            Lock,
            name,
            ttl,
            identity=identity,
            on_lost=on_lost,
            observe_interval=observe_interval,
            lock_delay=lock_delay,
        )

    def inspect(self, name: str) -> LockInfo:
        """Who holds ``name`` on each master, and the holder a quorum agrees on, if any.

        One read of every master (the token and the ttl left, in one step each), waiting for
        each up to ``node_timeout``; a master that does not answer is reported unreachable.
        It changes nothing and holds nothing: the answer may be stale when it returns.
        For a read-write lock (:meth:`rwlock`) it shows the readers and a waiting writer's
        intent too (:attr:`LockInfo.readers`, :attr:`LockInfo.intent`, per master in
        :attr:`MasterInfo.readers`): ``holder`` is then the writer.
        """
        spec = self._lock_spec(name, DEFAULT_TTL)
        return self._driver.run(inspect_flow(spec), lambda result: lock_info(spec, result))

    def force_release(self, name: str) -> LockInfo:
        """Delete ``name`` on every master whatever token holds it; returns what it removed.

        For operators clearing a lock whose holder is gone. A holder still at work is NOT
        told: it goes on as if it held the lock while the next one acquires it, exactly as
        if its lock had expired under it (fencing tokens still protect a fenced resource:
        the counters are kept). Its later release or extend reports the lock lost. For a
        read-write lock it removes the writer, every reader and a waiting writer's intent.
        """
        spec = self._lock_spec(name, DEFAULT_TTL)
        return self._driver.run(force_release_flow(spec), lambda result: lock_info(spec, result))

    @takes(SemaphoreKeywords, "Semaphore")
    def semaphore(
        self, name: str, limit: int, ttl: float = DEFAULT_TTL, **options: Unpack[SemaphoreKeywords[Semaphore]]
    ) -> Semaphore:
        """A counting Semaphore on ``name``: at most ``limit`` holders at once, each permit
        expiring after ``ttl`` seconds unless extended; the other options as for :meth:`lock`.

        A permit needs ``floor(limit * N / (limit + 1)) + 1`` of the N masters, not a plain
        majority (see docs/algorithm.md): with fewer, ``limit + 1`` holders could each find
        enough masters with a free place. So a semaphore tolerates fewer masters down than a
        lock: ``sem.quorum`` tells how many it needs. Every client must use the same limit.
        ``max_hold``, ``retry_delay`` and ``max_attempts`` are as for :meth:`lock`.
        """
        return Semaphore(self, *semaphore_options(self, name, limit, ttl, given(options, SemaphoreKeywords)))

    @takes(ReadWriteKeywords, "Lock")
    def rwlock(self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[ReadWriteKeywords[Lock]]) -> ReadWriteLock:
        """A read-write lock on ``name``: many readers at once, or one writer.

        ``rw.read()`` and ``rw.write()`` each return a new :class:`Lock` (acquire, release,
        extend, ``with``, validity) whose holders follow the rule; the options are those of
        :meth:`lock` (no fencing, no reentrancy), for every reader and writer of this object. Both sides need a majority
        of masters; each reader's lease expires on its own. A writer held back by readers
        keeps new readers out while it waits (for at most ``ttl`` after its last attempt if
        it dies waiting), so a steady stream of readers cannot starve it (docs/algorithm.md,
        "Read-write lock").
        """
        return ReadWriteLock(self, Lock, name, ttl, given(options, ReadWriteKeywords))

    def release_token(self, name: str, token: str) -> None:
        """Release ``name`` held under ``token`` (acquired by another process, say).

        Only the holder of ``token`` can release: the compare-and-delete runs on every
        master. LockLost if a majority answered that the token was gone; ReleaseUnconfirmed
        if no majority answered in time (the lock may stay held until its ttl runs out).
        """
        lock = self.lock(name, DEFAULT_TTL)  # a release sets no ttl: any valid one will do
        lock._adopt(token)
        lock.release()

    def check(self, *, fencing: bool = False) -> TopologyReport:
        """Whether the masters are fit for Redlock: a report per master, and a verdict.

        Asks every master what it is (``INFO``, on its connection, or in the handshake of a
        new one: a master waiting to reconnect is tried now), judges what it says as every
        handshake is judged, and times a PING on each. Each
        :class:`MasterReport` has the address, whether it answered (or why not), the server and
        its version, role, mode, run_id, replicas, ``maxmemory`` and its policy, whether it
        keeps an append-only file, TLS, unix socket, the PING's latency and the
        :class:`Finding` list. The verdict (:class:`Verdict`) is ``fit``, ``warnings`` or
        ``unfit`` (a master refused, or fewer than a quorum usable). ``fencing=True`` judges
        the masters for fencing tokens (persistence), as a fenced lock of this client does.
        A master that may not run ``INFO`` (an ACL user) is reported with its facts unknown.
        Each round waits up to ``connect_timeout + node_timeout`` per master.
        """
        flow, report = self._check(fencing)
        return self._driver.run(flow, report)

    def close(self) -> None:
        """Close every connection; Locks of this client cannot be used afterwards."""
        self._driver.close()

    def __enter__(self) -> Redlock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Redlock {_masters_text(self.masters)}: {', '.join(self.master_names)}>"


class Lock(LockState[Redlock]):
    """A lock on one name, held when a majority of masters carry our token.

    Use it like ``threading.Lock`` (``acquire``/``release`` or ``with``), with the
    difference that the lock expires: rely on it only while :meth:`locked` is true, and
    call :meth:`extend` (or pass ``auto_extend=True``) to keep it longer.

    Threads may share one Lock object. While one thread holds it (or is acquiring it), the
    others' acquires wait for its release, each bounded by its own ``timeout``, and then
    compete on the masters; ``blocking=False`` returns False at once, with no traffic. The
    owner is the thread whose acquire succeeded. Not reentrant (the default): the owner
    acquiring again while the lock is valid raises LockAlreadyHeld instead of deadlocking,
    and any thread may release, as with ``threading.Lock``. With ``reentrant=True`` the
    owner may acquire again, counted locally (:attr:`hold_count`) with no round trip; the
    masters are released when the count returns to zero, and only the owner may release,
    as with ``threading.RLock``. The token is the object's, never thread-local: any thread
    sees the holding's ``token`` (unlike redis-py's thread-local tokens, redis-py #656).
    """

    def __init__(self, cluster: Redlock, spec: LockSpec, options: LockOptions) -> None:
        super().__init__(cluster, spec, options)
        self._renewer: tuple[threading.Thread, threading.Event] | None = None
        #: Guards the sharing state of LockState among this process's threads.
        self._gate = threading.RLock()
        #: Waited on under the gate, by threads waiting for another's release or a loss;
        #: made by the first of them (most Locks are never waited for, and a Condition
        #: costs more to make, enter and notify than the whole gate).
        self._waiting: threading.Condition | None = None

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Acquire the lock; True if held, False if others hold it (or timeout ran out).

        ``blocking=False`` makes exactly one attempt. ``timeout`` bounds the total wait of
        a blocking acquire; ``None`` waits until acquired. Raises
        :class:`~redlock.QuorumUnavailable` when a majority of masters cannot be reached
        (at once when not blocking; when the timeout, or ``unavailable_timeout``, runs out
        while blocking).
        """
        give_up_at = self._acquire_deadline(blocking, timeout)
        me = threading.current_thread()
        tokens: Tokens | None = None
        try:
            try:
                with self._gate:
                    free = self._turns.claim(me)
                if not free:
                    turn = self._waited(self._turns.turn(me, blocking, give_up_at, self.locked))
                    if turn is not Turn.AT_MASTERS:
                        return turn is Turn.NESTED
                # Interrupted (Ctrl-C) before its end, the flow takes its keys back itself.
                tokens, flow = self._acquire_flow(blocking, give_up_at)
                return self._cluster._driver.run(flow, _unchanged, cleans_up=True)
            finally:
                self._turns.end(me)
        except BaseException as interruption:
            # Interrupted after the flow's end: the caller, who gets no True, must not be
            # left holding the lock, nor the masters its keys.
            undo = self._undo_flow(tokens, interruption)
            if undo is not None:
                try:
                    self._cluster._driver.run(undo, _unchanged)
                finally:
                    self._turns.end(me)
            raise

    def release(self) -> None:
        """Delete our token on every master; LockLost if a majority answered it was gone.

        ReleaseUnconfirmed when no majority answered in time (masters down, hung or slow):
        the token is then kept, our keys may block others until they expire, and release()
        may be retried. A nested hold of a reentrant Lock is only counted down, with no traffic.
        Where another blocking acquire of this client waits for a plain lock's name, the same
        round hands the lock over to it instead of deleting it (docs/algorithm.md, "Handing
        a lock over to the next waiter").
        """
        with self._gate:
            if self._turns.counted_down(threading.current_thread()):
                return
        held = self._lease
        try:
            lease, flow = self._release_flow()
        except BaseException as interruption:
            if held is not None and self._finish_release(held, interruption):
                self._turns.leave()
            raise
        try:
            self._stop_renewer()
            self._cluster._driver.run(flow, lambda result: self._released(lease, result))
        except BaseException as interruption:
            self._finish_release(lease, interruption)
            raise
        finally:
            self._turns.leave()

    def _finish_release(self, lease: Lease, interruption: BaseException) -> bool:
        """After ``interruption`` of a release of ``lease``: the deletes finished before it
        goes on, as an interrupted acquire's rollback is, where that is due; whether they were."""
        if not self._release_to_finish(lease, interruption):
            return False
        try:
            again, flow = self._release_flow()
            self._cluster._driver.run(flow, lambda result: self._released(again, result))
        except Exception as failure:
            interruption.add_note(f"redlock: finishing the interrupted release failed: {failure!r}")
        return True

    def _wake_local(self) -> None:
        with self._gate:
            if self._waiting is not None:
                self._waiting.notify_all()

    def _waited(self, steps: Generator[float | None, None, T]) -> T:
        """Run ``steps`` under the local gate, waiting on it (woken by releases and losses)
        as long as each step says; what the steps return."""
        with self._gate:
            try:
                while True:
                    wait = next(steps)
                    if self._waiting is None:
                        self._waiting = threading.Condition(self._gate)
                    self._waiting.wait(wait)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]

    def extend(self, ttl: float | None = None, *, add: float | None = None) -> float:
        """Reset the lock's ttl (default: its own) on a majority; returns the new validity.

        ``add=seconds`` instead moves the deadline that much later than it is now (the keys
        get the validity left plus ``add``, drift included). Unlike redis-py, whose
        ``extend(t)`` adds ``t`` unless ``replace_ttl=True``, ``extend()`` and
        ``extend(ttl)`` reset: the lock then lasts ``ttl`` from the start of the extend.
        With ``max_hold``, neither moves the deadline past the bound. A lock whose validity
        ran out before the extend began is lost (LockLost, as ``locked()`` finds it), even
        where its keys still carry our token: an extend does not revive a lapsed holding.
        """
        lease, flow = self._extend_flow(ttl, add)
        return self._cluster._driver.run(flow, lambda result: self._extended(lease, result))

    def adopt(self, token: str, *, fencing_token: int | None = None) -> float:
        """Take over the holding of this Lock's name under ``token`` (acquired by another
        process or request, which hands over its ``lock.token``); returns the validity.

        A compare-and-pexpire with ``token`` resets the ttl to this Lock's on every master;
        it counts with a majority, as an extend does, and never re-creates a key that is
        gone. Then this Lock extends, releases, auto-extends (``auto_extend=True``) and
        reports a loss as if it had acquired. LockLost when a majority answered that the
        token does not hold the name; ExtendUnconfirmed (retryable) when no majority
        answered in time; LockAlreadyHeld if this object holds or is acquiring the lock.
        The giver must stop using the token (:meth:`hand_over` stops its auto-extension):
        two users of one holding cannot know each other's deadlines. ``fencing_token`` (with ``fencing=True``)
        is the giver's ``lock.fencing_token``, handed over with the token.
        """
        lease, flow = self._adopt_flow(token, fencing_token)
        me = threading.current_thread()
        with self._gate:
            self._claim_for_adoption(me)
        try:
            return self._cluster._driver.run(flow, lambda result: self._adopted(lease, result))
        finally:
            self._turns.end(me)

    def hand_over(self) -> str:
        """Stop holding the lock here without releasing it; returns the token for another
        Lock (another process) to :meth:`adopt`.

        Auto-extension stops (its extend under way, if any, is waited for), and this object
        holds nothing afterwards: the holding lives on in the masters until it is adopted,
        or until it expires. LockLost if the lock was lost (or its validity ran out).
        """
        lease = self._handing_over()
        self._stop_renewer()
        self._turns.leave()
        return lease.token

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the lock is lost (True) or ``timeout`` runs out (False).

        For a watchdog thread that must stop a worker when the lock is lost: True as soon
        as auto-extension, an extend or a release finds the loss (at once if it is lost
        already), and at the deadline if nothing extended the lock. False when ``timeout``
        runs out, or when the lock is released meanwhile (nothing was lost).
        LockNotHeld if this Lock does not hold it when called.
        """
        give_up_at = self._give_up_at(timeout)
        return self._waited(self._loss_wait(give_up_at))

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


class Semaphore(PermitView, Lock):
    """A counting semaphore: up to ``limit`` holders at once, each with a permit that
    expires like a lock. The same methods as :class:`Lock`; ``permit`` is the held token.

        with rl.semaphore("gpu-pool", limit=3) as sem:
            run_on_gpu(sem.validity)
    """

    def __enter__(self) -> Semaphore:
        super().__enter__()
        return self


class ReadWriteLock(ReadWriteState[Lock]):
    """A read-write lock on one name, made by :meth:`Redlock.rwlock`: many readers at once,
    or one writer::

        rw = rl.rwlock("config", ttl=10.0)
        with rw.read() as reader:      # beside other readers, never beside the writer
            settings = load(reader.validity)
        with rw.write():               # alone: no reader, no other writer
            store(new_settings)

    :meth:`read` and :meth:`write` make a new Lock each call (each is one holder).
    """

    def read(self) -> Lock:
        """A new reader: a Lock that, held, shares the name with other readers and no writer.

        Each call makes a new Lock object, one holder: threads that read at once take one
        each (a single Lock object shared by them would take turns, as a Lock does).
        """
        return super().read()

    def write(self) -> Lock:
        """A new writer: a Lock that, held, excludes every reader and every other writer.

        A writer held back by readers keeps new readers out while it waits (docs/algorithm.md,
        "Read-write lock": no writer starves under a steady stream of readers).
        """
        return super().write()


class Election(ElectionState[Lock]):
    """One campaigner in the leader election on one name.

    ::

        election = rl.election("scheduler", ttl=10.0, identity="host-a:1234")
        with election:                 # campaign() until leader, resign() on the way out
            while election.is_leader:
                schedule(term=election.term)

    At most one campaigner leads at any moment (by validity, as a lock is held): rely on
    leadership only while :attr:`is_leader` is true, and pass :attr:`term` to whatever you
    write, so that a deposed leader acting late is refused there (see
    :mod:`redlock.fencing`). A lost leadership is reported as a lost lock is: ``on_lost``,
    and LockLost from :meth:`resign` or from leaving the ``with`` block.

    A service that should lead whenever it can runs :meth:`run` instead: it campaigns,
    tells ``on_elected(term)`` and ``on_lost()``, campaigns again after a loss, and resigns
    on :meth:`stop` or SIGTERM.
    """

    def campaign(self, timeout: float | None = None) -> bool:
        """Block until this campaigner leads; True then (at once if it leads already).

        ``timeout=None`` waits as long as it takes, through outages of the masters too (a
        campaigner stands by until the cluster is back). With a timeout: False if another
        leads until it runs out, QuorumUnavailable if a majority of masters could not be
        reached. MasterMisconfigured at once when so many masters refuse our credentials,
        permissions or TLS, or are unfit for Redlock, that no majority is possible (waiting
        would not help). Nothing
        of a failed campaign is left on the masters.
        """
        if self.is_leader:
            return True
        return self._lock.acquire(blocking=True, timeout=timeout)

    def resign(self) -> None:
        """Give up leadership (release the lock), so that another campaigner takes over at once.

        Does nothing if this campaigner does not lead. LockLost if the leadership was lost
        while held (the work done as leader may have overlapped the next leader's: fence it
        by :attr:`term`); ReleaseUnconfirmed if no majority answered (retry resign()).
        """
        if self._nothing_to_resign():
            return
        self._lock.release()

    def leader(self) -> str | None:
        """The identity of the leader a majority of masters agrees on; None if there is none.

        One read of every master, campaigning for nothing. The answer may be stale when it
        returns; a campaigner between setting its keys and taking them back (a split vote)
        may show for a moment. Only a leader's own :attr:`is_leader` is authoritative.
        """
        return self._leader_from(self._lock._cluster.inspect(self.name))

    def observe(self) -> Iterator[str | None]:
        """Yield the leader's identity (None: no leader) now, and again at each change.

        Runs until the loop stops iterating (or the client closes: ClientClosed). A release
        is seen at once (wake-on-release); an expiry, within ``observe_interval``. Changes
        faster than that may be seen merged; each value yielded differs from the one before.
        Observing campaigns for nothing; it takes one read of every master per step.
        """
        return self._changes(lambda: False)

    def _changes(self, stopped: Callable[[], bool]) -> Iterator[str | None]:
        observer = self._observer()
        driver = self._lock._cluster._driver
        while not stopped():
            leader = driver.run(observer.step(self._lock._cluster._clock()), observer.seen)
            if leader is not UNCHANGED:
                yield leader

    def run(
        self,
        *,
        on_elected: Callable[[int], object] | None = None,
        on_lost: Callable[[], object] | None = None,
        on_new_leader: Callable[[str | None], object] | None = None,
    ) -> None:
        """Campaign, lead, and campaign again after a loss, until :meth:`stop` or SIGTERM.

        ``on_elected(term)`` is called when this campaigner becomes leader, ``on_lost()``
        when its leadership ends: lost (not extended in time, or its validity ran out), or
        left because run() is ending. Both run in run()'s thread and should return soon:
        start the leader's work in a thread of yours in ``on_elected`` and stop it in
        ``on_lost``, which is called before anything else happens (before the next
        campaign, before the resign), so that the work stops before another leader can be
        elected. ``on_new_leader(identity)`` (None: no leader) is called from a thread of
        its own with every change ``observe()`` sees, this campaigner's own leadership too.

        Leadership is never believed past its validity: run() waits for the Lock's own
        loss report and at the latest for its deadline, and there finds a validity run out
        as a loss. After a loss it campaigns again, after a backoff that doubles with each
        loss in a row (from ``retry_delay``, at most the ttl, jittered). Through an outage of
        the masters it keeps campaigning; MasterMisconfigured (no majority possible) is
        raised.

        :meth:`stop` (from any thread or a signal handler) makes run() tell ``on_lost``,
        resign and return, within about half a second. Called in the main thread, run()
        also stops on SIGTERM (its handler is installed for the run and the previous one put
        back after; a SIGTERM that is ignored stays ignored). Ctrl-C, or an exception from
        a callback, leaves the same way (``on_lost``, resign) and is raised. One run() at a
        time per Election (RuntimeError otherwise).
        """
        runner = self._start_run(on_elected, on_lost, on_new_leader)
        woken = threading.Event()
        runner.wake = woken.set
        watcher: threading.Thread | None = None
        try:
            with stopped_by_sigterm(self.stop):
                if on_new_leader is not None:
                    watcher = threading.Thread(
                        target=self._watch,
                        args=(runner, on_new_leader),
                        name=f"redlock-observe:{self.name}",
                        daemon=True,
                    )
                    watcher.start()
                outcome: object = None
                error: BaseException | None = None
                while (step := runner.advance(outcome, error)) is not None:
                    try:
                        outcome, error = self._perform(step, woken, on_elected, on_lost), None
                    except BaseException as failure:
                        outcome, error = None, failure
        finally:
            self._end_run(runner)
            if watcher is not None:
                watcher.join()

    def _perform(
        self,
        step: Step,
        woken: threading.Event,
        on_elected: Callable[[int], object] | None,
        on_lost: Callable[[], object] | None,
    ) -> object:
        if isinstance(step, Campaign):
            return self.campaign(timeout=step.timeout)
        if isinstance(step, Wait):
            woken.wait(step.seconds)
            woken.clear()  # (what woke it is state the runner reads again: nothing is missed)
        elif step is Resign.RESIGN:
            self.resign()
        elif isinstance(step, Elected):
            if on_elected is not None:
                on_elected(step.term)
        elif on_lost is not None:
            on_lost()
        return None

    def _watch(self, runner: Runner, on_new_leader: Callable[[str | None], object]) -> None:
        try:
            for leader in self._changes(lambda: runner.done):
                on_new_leader(leader)
        except BaseException as error:
            runner.fail(error)

    def __enter__(self) -> Election:
        self.campaign()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._lock.__exit__(exc_type, exc, traceback)


def _unchanged(result: T) -> T:
    return result
