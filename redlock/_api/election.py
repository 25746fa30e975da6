"""Leader election on a Redlock lock, shared by the sync and asyncio clients.

An election is not a second mechanism beside the lock: a *leadership* is one holding of a
Lock on the election's name, made with ``fencing=True`` and ``auto_extend=True``.

* **At most one leader** is exactly the lock's mutual exclusion: a campaigner leads while
  its Lock is held and valid (:attr:`ElectionState.is_leader`), never past its validity.
* **The term** is the holding's fencing token: larger than every earlier leader's, so a
  resource that checks it rejects a deposed leader that acts late (a pause, a slow write).
* **Staying leader** is auto-extension; a leadership that cannot be extended in time is
  lost, and reported exactly as a lost lock is (``on_lost``, ``LockLost`` from ``resign()``
  or from leaving the ``with`` block, and in asyncio ``cancel_on_lost``).
* **Who leads** is readable by anyone: the Lock's tokens carry the campaigner's identity
  after their random part (:func:`redlock._api.state.identity_token`), so ``leader()`` is an
  inspect of the masters and the identity of the token a majority holds.
* **Campaigning** is a blocking acquire with no give-up: a campaigner's job is to lead as
  soon as the cluster lets it, so it keeps trying through an outage of the masters (its
  Lock's ``unavailable_timeout`` is infinite) at one attempt per retry delay. Pass
  ``timeout`` to bound the wait; running out of it with a majority unreachable still raises
  ``QuorumUnavailable``, as a lock's acquire does.
* **Observing** is a loop of steps, each written once here as a flow (:class:`Observer`):
  wait for a release of the name to be announced (wake-on-release) or for the observe
  interval, whichever comes first, then inspect. An expiry is not announced, so the
  interval bounds how late an observer learns of a leader that died.
* **Running** (``run()``) is the loop a service wants around all of that, written once here
  as steps (:class:`Runner`): campaign, tell ``on_elected``, hold while the Lock is held
  and valid (woken by the Lock's own loss report, or at the deadline at the latest), tell
  ``on_lost``, clean up, back off, campaign again; on the way out (``stop()``, SIGTERM,
  cancellation, an error) tell ``on_lost`` and resign. The two clients only perform the
  steps: call or await, wait on a thread's Event or an asyncio Event.

Nothing here is specific to threads or tasks: the two public ``Election`` classes only run
these flows and the Lock's methods, called or awaited.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import signal
import socket
import threading
from collections.abc import Callable, Generator, Iterator
from enum import Enum
from types import FrameType
from typing import Any, Generic, TypeVar

from redlock._api.state import ClusterConfig, LockOptions, LockState, identity_of, logger
from redlock._protocol import config as _config
from redlock._protocol.core import WOKEN_MARGIN, Flow, Pause, Result
from redlock._protocol.flows import LockInfo, LockSpec, inspect_flow, lock_info
from redlock.exceptions import QuorumUnavailable, RedlockError, ReleaseUnconfirmed

#: How often, at most, an observer looks at the masters when no release is announced.
MAX_OBSERVE_INTERVAL = 1.0


def default_identity() -> str:
    """``host:pid``: tells an operator which process leads, and differs between processes."""
    return f"{socket.gethostname()}:{os.getpid()}"


def default_observe_interval(ttl: float) -> float:
    """A third of the ttl, at most a second: a leader that died unannounced (its keys
    expired) is seen gone at most this long after its keys are."""
    return min(MAX_OBSERVE_INTERVAL, ttl / 3)


def election_options(
    spec: LockSpec, identity: object, on_lost: object, cancel_on_lost: object = False
) -> tuple[LockOptions, list[Any]]:
    """The Lock options of an election, and a cell that will hold the election object.

    ``on_lost`` is called with the election rather than its Lock; the Lock calls the wrapper
    below, which finds the election in the cell (it is made after its Lock).
    """
    _config.check_callable("on_lost", on_lost)
    carried = default_identity() if identity is None else identity
    cell: list[ElectionState[Any]] = []
    user: Callable[[Any], None] | None = on_lost  # type: ignore[assignment]

    def wrapper(_lock: Any) -> None:
        # A run() in progress learns of the loss at once, not at the deadline it waits for.
        election = cell[0]
        runner = election._runner
        if runner is not None:
            runner.wake()
        if user is not None:
            user(election)

    options = LockOptions.checked(
        spec,
        timeout=None,
        auto_extend=True,
        on_lost=wrapper,
        cancel_on_lost=cancel_on_lost,
        identity=carried,
    )
    return options, cell


LockT = TypeVar("LockT", bound=LockState[Any])


ElectionT = TypeVar("ElectionT", bound="ElectionState[Any]")


class ElectionState(Generic[LockT]):
    """One campaigner in the election on one name: its Lock and its identity."""

    def __init__(self, lock: LockT, observe_interval: float) -> None:
        self._lock = lock
        self._observe_interval = observe_interval
        #: The run() in progress, if any.
        self._runner: Runner | None = None
        #: Set by stop(), cleared when the run() it ends returns.
        self._stop_asked = False

    @classmethod
    def made(
        cls: type[ElectionT],
        cluster: ClusterConfig,
        lock_class: Callable[[Any, LockSpec, LockOptions], LockT],
        name: object,
        ttl: object,
        *,
        identity: object,
        on_lost: object,
        cancel_on_lost: object = False,
        observe_interval: object,
        lock_delay: object,
    ) -> ElectionT:
        """A campaigner of ``cluster`` (every argument checked before any traffic).

        Its Lock is fenced (the term) and never gives up on an outage of the masters: see
        the module's docstring.
        """
        # One name: an election is no semaphore and no multi-name lock.
        spec = cluster._lock_spec(_config.check_lock_name(name), ttl, fencing=True, lock_delay=lock_delay)
        spec = dataclasses.replace(spec, unavailable_timeout=math.inf)
        options, cell = election_options(spec, identity, on_lost, cancel_on_lost)
        interval = (
            default_observe_interval(spec.ttl)
            if observe_interval is None
            else _config.check_seconds("observe_interval", observe_interval)
        )
        election = cls(lock_class(cluster, spec, options), interval)
        cell.append(election)
        return election

    def __repr__(self) -> str:
        state = f"leader, term {self.term}" if self.is_leader else "not leader"
        return f"<{type(self).__name__} {self.name!r} identity={self.identity!r} {state}>"

    @property
    def name(self) -> str:
        """The name the campaigners stand for (their Lock's name)."""
        return self._lock.name

    @property
    def ttl(self) -> float:
        """How long a leader that stops extending (crashed, hung, cut off) keeps the others out."""
        return self._lock.ttl

    @property
    def identity(self) -> str:
        """Who this campaigner says it is: what ``leader()`` returns to others while it leads."""
        identity = self._lock._options.identity
        assert identity is not None
        return identity

    @property
    def lock(self) -> LockT:
        """The Lock a leadership is a holding of (``validity``, ``deadline``, ``token``...)."""
        return self._lock

    @property
    def is_leader(self) -> bool:
        """Whether this campaigner leads right now: its Lock is held and valid."""
        return self._lock.locked()

    @property
    def term(self) -> int | None:
        """The fencing token of this campaigner's leadership: larger than every earlier
        leader's term. None before the first win and after ``resign()``; after a loss it
        stays (the term that was lost) until ``resign()`` or the next win."""
        return self._lock.fencing_token

    @property
    def observe_interval(self) -> float:
        """The longest ``observe()`` goes without looking at the masters."""
        return self._observe_interval

    @staticmethod
    def _leader_from(info: LockInfo) -> str | None:
        return identity_of(info.holder)

    def _observer(self) -> Observer:
        return Observer(self._lock._spec, self._observe_interval)

    def _nothing_to_resign(self) -> bool:
        return self._lock.token is None

    def stop(self) -> None:
        """Make :meth:`run` resign and return (the next run() at once, if none is running).

        Safe to call from any thread, and from a signal handler: it only sets a flag and
        wakes the run.
        """
        self._stop_asked = True
        runner = self._runner
        if runner is not None:
            runner.wake()

    def _start_run(self, on_elected: object, on_lost: object, on_new_leader: object) -> Runner:
        """A Runner for a run() beginning now (the callbacks checked before any traffic)."""
        for name, callback in (("on_elected", on_elected), ("on_lost", on_lost), ("on_new_leader", on_new_leader)):
            _config.check_callable(name, callback)
        if self._runner is not None:
            raise RuntimeError(f"election {self.name!r} is running already: one run() at a time")
        runner = self._runner = Runner(self)
        return runner

    def _end_run(self, runner: Runner) -> None:
        runner.over = True
        self._runner = None
        self._stop_asked = False


class Unchanged(Enum):
    """What an observe step reports when the leader did not change."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


class Observer:
    """The steps of ``observe()``: each one waits, then inspects; reports only changes.

    The first step inspects at once (the current leader is always reported first). Each
    later step waits for ``interval`` or until a release of the name is announced. After an
    announcement the next step comes sooner (after the retry delay): the release was sent to
    every master at once and a campaigner woken by it is about to take over, so the change
    after the change is near.
    """

    def __init__(self, spec: LockSpec, interval: float) -> None:
        self._spec = spec
        self._interval = interval
        self._pause = 0.0
        self._last: str | Unchanged | None = UNCHANGED

    def step(self, now: float) -> Flow:
        """Wait (unless this is the first step), then inspect every master."""
        woken = False
        if self._pause > 0:
            resume_at = now + self._pause
            now = yield Pause(self._pause, wake_on=self._spec.key)
            woken = now < resume_at - WOKEN_MARGIN
        self._pause = min(self._interval, self._spec.retry_delay) if woken else self._interval
        return (yield from inspect_flow(self._spec))

    def seen(self, result: Result) -> str | Unchanged | None:
        """The leader's identity (None: no leader) if it changed, else :data:`UNCHANGED`."""
        leader = identity_of(lock_info(self._spec, result).holder)
        if leader == self._last:
            return UNCHANGED
        self._last = leader
        return leader


# --- run(): the campaign loop -------------------------------------------------------------

#: How long one campaign step of run() lasts at most: stop() and SIGTERM are seen between
#: steps (an acquire in progress is not cut short, so that it never leaves keys behind).
CAMPAIGN_STEP = 0.5


def backoff_after_loss(losses: int, retry_delay: float, ttl: float, rng: random.Random) -> float:
    """How long run() waits after the ``losses``-th lost leadership in a row before it
    campaigns again: the retry delay doubled per loss, at most the ttl, and drawn from its
    upper half ("equal jitter").

    A leadership that was just lost was lost for a reason that may still hold (cut off from
    the masters, a pause, an overloaded host): the others, who lost nothing, get the first
    go, and a campaigner that keeps losing does not keep the masters busy. The jitter keeps
    campaigners deposed together (a partition heals) from campaigning in lockstep; the ttl
    bounds the wait, since another leader takes over at most a ttl after a loss anyway.
    """
    ceiling = min(ttl, retry_delay * 2 ** min(max(losses, 1) - 1, 32))
    return rng.uniform(ceiling / 2, ceiling)


@dataclasses.dataclass(frozen=True)
class Campaign:
    """Campaign for at most ``timeout`` seconds; the outcome sent back: whether it leads."""

    timeout: float


@dataclasses.dataclass(frozen=True)
class Elected:
    """Tell ``on_elected(term)``."""

    term: int


@dataclasses.dataclass(frozen=True)
class Wait:
    """Wait ``seconds``, or until woken (a loss reported, stop(), a failure)."""

    seconds: float


class Ended(Enum):
    """The leadership ended (lost, or left): tell ``on_lost()``, before anything else."""

    ENDED = "ended"


class Resign(Enum):
    """Release the election's Lock (resign)."""

    RESIGN = "resign"


Step = Campaign | Elected | Wait | Ended | Resign


class Runner:
    """The steps of one ``run()``: what to do next, decided here once for both clients.

    A client performs each step (calling or awaiting) and passes back its outcome, or the
    exception it raised, with :meth:`advance`. The loop's own state is read from the
    election itself (``is_leader`` and the Lock's deadline), so that leadership is never
    believed past the validity: the holding step waits until the deadline at the latest,
    and there asks ``is_leader`` again, which finds a validity run out as a loss.
    """

    def __init__(self, election: ElectionState[Any]) -> None:
        self._election = election
        #: Wakes the client's wait; replaced by the client before its first step.
        self.wake: Callable[[], None] = lambda: None
        #: The error that ends the run (from ``on_new_leader``, or the leader's work).
        self.failure: BaseException | None = None
        #: Set when run() has returned: a watcher still going stops.
        self.over = False
        self._leading = False
        self._steps = self._run()

    def fail(self, error: BaseException) -> None:
        """End the run with ``error`` (raised by run() after it resigned)."""
        if self.failure is None and not self.over:
            self.failure = error
        self.wake()

    @property
    def done(self) -> bool:
        """Whether the run is to end: stop() was called, or something failed."""
        return self._election._stop_asked or self.failure is not None or self.over

    def advance(self, outcome: object = None, error: BaseException | None = None) -> Step | None:
        """The next step, given the last one's ``outcome`` (or the ``error`` it raised);
        None when run() is over. Raises what run() raises."""
        try:
            return self._steps.throw(error) if error is not None else self._steps.send(outcome)
        except StopIteration:
            return None

    def _run(self) -> Generator[Step, Any, None]:
        try:
            yield from self._campaigns()
        except BaseException:
            # Interrupted (cancelled, Ctrl-C) or failed: leave as from stop(), then go on.
            yield from self._leave()
            raise
        yield from self._leave()
        if self.failure is not None:
            raise self.failure

    def _campaigns(self) -> Generator[Step, Any, None]:
        election = self._election
        lock = election._lock
        clock = lock._cluster._clock
        losses = 0
        while not self.done:
            try:
                leads = yield Campaign(CAMPAIGN_STEP)
            except QuorumUnavailable:
                continue  # a campaigner stands by through an outage: the next step tries again
            if not leads or self.done:
                continue
            self._leading = True
            since = clock()
            term = election.term
            assert term is not None
            yield Elected(term)
            while not self.done:
                deadline = lock.deadline
                if deadline is None or not election.is_leader:
                    break
                yield Wait(max(0.0, deadline - clock()))
            if self.done:
                return  # leaving tells on_lost and resigns
            # Lost: on_lost first (the work stops), then the keys that may be left go.
            self._leading = False
            yield Ended.ENDED
            yield from self._resign()
            losses = 1 if clock() - since >= lock.ttl else losses + 1
            yield Wait(backoff_after_loss(losses, lock._spec.retry_delay, lock.ttl, lock._cluster._rng))

    def _leave(self) -> Generator[Step, Any, None]:
        """End the leadership held, if any (on_lost, then resign), however run() ends."""
        failed: BaseException | None = None
        if self._leading:
            self._leading = False
            try:
                yield Ended.ENDED
            except BaseException as error:  # on_lost failed: resign all the same, then raise
                failed = error
        yield from self._resign()
        if failed is not None:
            raise failed

    def _resign(self) -> Generator[Step, Any, None]:
        if self._election._nothing_to_resign():
            return
        try:
            yield Resign.RESIGN
        except ReleaseUnconfirmed as error:
            # Our keys may keep the others out until they expire: worth a warning, not a crash.
            logger.warning("election %r: resign was not confirmed: %s", self._election.name, error)
        except RedlockError as error:
            # Lost before the resign: on_lost has been told already.
            logger.info("election %r: resign after the leadership ended: %s", self._election.name, error)


@contextlib.contextmanager
def stopped_by_sigterm(stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs, SIGTERM calls ``stop`` (the sync ``run()``'s graceful shutdown).

    Only in the main thread (the only one Python lets set a handler) and only if SIGTERM is
    not ignored (whoever ignored it meant it); the previous handler is put back after.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) in (
        signal.SIG_IGN,
        None,
    ):
        yield
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
