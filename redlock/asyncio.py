"""The asyncio client: ``Redlock`` and ``Lock`` with the same names and meaning as the sync ones.

    >>> from redlock.asyncio import Redlock
    >>> rl = Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    >>> async with rl.lock("orders:42", ttl=10.0) as lock:  # doctest: +SKIP
    ...     await do_work(lock.validity)

It runs the same pure flows as the sync client over one connection per master shared by
every task of the client (the driver is :mod:`redlock._io.aio`). A cancelled acquire rolls back
and a cancelled release completes, shielded, before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, Unpack

from redlock._api import exports as _exports
from redlock._api import verdicts
from redlock._api.election import UNCHANGED, Campaign, Elected, ElectionState, Resign, Runner, Step, Wait
from redlock._api.exports import *  # noqa: F403 (the names both clients export: listed there, once)
from redlock._api.locked import NO_DEFAULT, LockedCall
from redlock._api.options import AsyncLockKeywords, AsyncReadWriteKeywords, AsyncSemaphoreKeywords, given, takes
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
from redlock._io.aio import Driver
from redlock._protocol.core import Result
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

__all__ = ["Election", "Lock", "ReadWriteLock", "Redlock", "Semaphore"]
__all__ += _exports.__all__


class Redlock(ClusterConfig):
    """The asyncio Redlock client; see :class:`redlock.Redlock` for the arguments and defaults.

    ``masters`` are URLs or ``redis.asyncio.Redis`` clients. Use one client per event loop.
    """

    _client_class = "redis.asyncio.Redis"
    _client_kind = "redis.asyncio.Redis client"
    _driver_class = Driver
    _driver: Driver

    @takes(AsyncLockKeywords, "Lock")
    def lock(
        self,
        name: str | list[str] | tuple[str, ...],
        ttl: float = DEFAULT_TTL,
        **options: Unpack[AsyncLockKeywords[Lock]],
    ) -> Lock:
        """A Lock on ``name``; see :meth:`redlock.Redlock.lock` for the arguments.

        Here the renewer is a task, ``on_lost(lock)`` is called in the event loop, and
        ``cancel_on_lost=True`` makes a loss cancel the task running the ``async with``
        body, so that protected work stops instead of running on unprotected; the block
        then raises LockLost rather than CancelledError. Tasks share a Lock object as they
        share an ``asyncio.Lock``; with ``reentrant=True`` the owning task may acquire again.
        A list or tuple of names makes a lock on all of them at once, as with the sync client.
        """
        return Lock(self, *self._lock_parts(name, ttl, given(options, AsyncLockKeywords)))

    def locked(
        self,
        name: str | list[str] | tuple[str, ...],
        *,
        on_busy: str = "wait",
        default: Any = NO_DEFAULT,
        **lock_options: Any,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
        """A decorator for async functions: each call runs holding ``rl.lock(name, ...)``;
        see :meth:`redlock.Redlock.locked`. ``cancel_on_lost=True`` (with ``auto_extend``)
        cancels a call whose lock is lost, which then raises LockLost."""
        plan = LockedCall.planned(self, name, on_busy, default, lock_options, asynchronous=True)

        def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
            call = plan.bound_to(function)

            @functools.wraps(function)
            async def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
                with call.running(args, kwargs, asyncio.current_task()) as lock:
                    if lock is None:  # nested, reentrant: the outer call holds it
                        return await function(*args, **kwargs)
                    async with contextlib.AsyncExitStack() as stack:
                        try:
                            await stack.enter_async_context(lock)
                        except LockNotAcquired as refused:
                            return call.refused(refused)  # type: ignore[no-any-return]
                        return await function(*args, **kwargs)

            return locked_call

        return decorate

    def election(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        *,
        identity: str | None = None,
        on_lost: Callable[[Election], None] | None = None,
        cancel_on_lost: bool = False,
        observe_interval: float | None = None,
        lock_delay: float = 0.0,
    ) -> Election:
        """The election on ``name``; see :meth:`redlock.Redlock.election` for the arguments.

        Here ``on_lost(election)`` is called in the event loop, and ``cancel_on_lost=True``
        makes a lost leadership cancel the task running the ``async with election:`` body
        (which then raises LockLost), as for a Lock.
        """
        return Election.made(
            self,
            Lock,
            name,
            ttl,
            identity=identity,
            on_lost=on_lost,
            cancel_on_lost=cancel_on_lost,
            observe_interval=observe_interval,
            lock_delay=lock_delay,
        )

    async def inspect(self, name: str) -> LockInfo:
        """See :meth:`redlock.Redlock.inspect`."""
        spec = self._lock_spec(name, DEFAULT_TTL)
        return await self._driver.run(inspect_flow(spec), lambda result: lock_info(spec, result))

    async def force_release(self, name: str) -> LockInfo:
        """See :meth:`redlock.Redlock.force_release` (and its warning)."""
        spec = self._lock_spec(name, DEFAULT_TTL)
        return await self._driver.run(force_release_flow(spec), lambda result: lock_info(spec, result))

    @takes(AsyncSemaphoreKeywords, "Semaphore")
    def semaphore(
        self, name: str, limit: int, ttl: float = DEFAULT_TTL, **options: Unpack[AsyncSemaphoreKeywords[Semaphore]]
    ) -> Semaphore:
        """A counting Semaphore; see :meth:`redlock.Redlock.semaphore` and :meth:`lock`."""
        return Semaphore(self, *semaphore_options(self, name, limit, ttl, given(options, AsyncSemaphoreKeywords)))

    @takes(AsyncReadWriteKeywords, "Lock")
    def rwlock(
        self, name: str, ttl: float = DEFAULT_TTL, **options: Unpack[AsyncReadWriteKeywords[Lock]]
    ) -> ReadWriteLock:
        """A read-write lock; see :meth:`redlock.Redlock.rwlock` and :meth:`lock`."""
        return ReadWriteLock(self, Lock, name, ttl, given(options, AsyncReadWriteKeywords))

    async def release_token(self, name: str, token: str) -> None:
        """Release ``name`` held under ``token`` (acquired by another process, say).

        Only the holder of ``token`` can release: the compare-and-delete runs on every
        master. LockLost if a majority answered that the token was gone; ReleaseUnconfirmed
        if no majority answered in time (the lock may stay held until its ttl runs out).
        """
        lock = self.lock(name, DEFAULT_TTL)  # a release sets no ttl: any valid one will do
        lock._adopt(token)
        await lock.release()

    async def check(self, *, fencing: bool = False) -> TopologyReport:
        """See :meth:`redlock.Redlock.check`."""
        flow, report = self._check(fencing)
        return await self._driver.run(flow, report)

    async def aclose(self) -> None:
        """Close every connection; Locks of this client cannot be used afterwards."""
        await self._driver.close()

    def __enter__(self) -> None:
        _use_async_with(self)

    def __exit__(self, *exc_info: object) -> None:  # (never reached: __enter__ refuses)
        _use_async_with(self)

    async def __aenter__(self) -> Redlock:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<redlock.asyncio.Redlock {_masters_text(self.masters)}: {', '.join(self.master_names)}>"


class Lock(LockState[Redlock]):
    """The asyncio twin of :class:`redlock.Lock`: the same methods, awaited.

    Tasks share it as threads share the sync Lock: the owner is the task whose acquire
    succeeded, and the others' acquires wait for its release.
    """

    def __init__(self, cluster: Redlock, spec: LockSpec, options: LockOptions) -> None:
        super().__init__(cluster, spec, options)
        self._renewer: asyncio.Task[None] | None = None
        self._body: asyncio.Task[Any] | None = None
        self._cancelled_body = False
        #: Set (and dropped) each time the object is freed: the waiting tasks check again.
        #: Made by the first task that waits: most Locks are never waited for.
        self._freed: asyncio.Event | None = None

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """See :meth:`redlock.Lock.acquire`. If cancelled, rolls back before re-raising."""
        give_up_at = self._acquire_deadline(blocking, timeout)
        me = asyncio.current_task()
        tokens: Tokens | None = None
        try:
            try:
                if not self._turns.claim(me):
                    turn = await self._waited(self._turns.turn(me, blocking, give_up_at, self.locked))
                    if turn is not Turn.AT_MASTERS:
                        return turn is Turn.NESTED
                # Interrupted (cancelled) before its end, the flow takes its keys back itself.
                tokens, flow = self._acquire_flow(blocking, give_up_at)
                return await self._cluster._driver.run(flow, _unchanged)
            finally:
                self._turns.end(me)
        except BaseException as interruption:
            # Interrupted after the flow's end (a signal handler's exception, which, unlike a
            # cancellation, needs no await to arrive): as the sync Lock does.
            undo = self._undo_flow(tokens, interruption)
            if undo is not None:
                try:
                    await self._cluster._driver.run(undo, _unchanged, shielded=True)
                finally:
                    self._turns.end(me)
            raise

    def _wake_local(self) -> None:
        freed, self._freed = self._freed, None
        if freed is not None:
            freed.set()

    async def _waited(self, steps: Generator[float | None, None, T]) -> T:
        """Run ``steps``, waiting between them (woken by releases and losses) as long as
        each says; what the steps return."""
        try:
            while True:
                # Nothing else runs between the check and the wait: no wake-up is missed.
                wait, freed = next(steps), self._freed
                if freed is None:
                    freed = self._freed = asyncio.Event()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await freed.wait()
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _start_renewer(self, lease: Lease) -> None:
        renewer = self._renewer = asyncio.ensure_future(self._renew(lease))
        renewers = self._cluster._driver.renewers
        renewers.add(renewer)
        renewer.add_done_callback(renewers.discard)

    async def release(self) -> None:
        """See :meth:`redlock.Lock.release`. A cancelled release still completes first."""
        if self._turns.counted_down(asyncio.current_task()):
            return
        held = self._lease
        try:
            lease, flow = self._release_flow()
        except BaseException as interruption:
            if held is not None and await self._finish_release(held, interruption):
                self._turns.leave()
            raise
        # Shielded: a cancelled caller still ends up with the token forgotten exactly when
        # the release is done, not before.
        try:
            renewer, self._renewer = self._renewer, None
            if renewer is not None and renewer is not asyncio.current_task():
                renewer.cancel()
            await self._cluster._driver.run(flow, lambda result: self._released(lease, result), shielded=True)
        except BaseException as interruption:
            await self._finish_release(lease, interruption)
            raise
        finally:
            self._turns.leave()

    async def _finish_release(self, lease: Lease, interruption: BaseException) -> bool:
        """See :meth:`redlock.Lock._finish_release`: for what a cancellation does not cover
        (a signal handler's exception raised in the release's own code)."""
        if isinstance(interruption, asyncio.CancelledError) or not self._release_to_finish(lease, interruption):
            return False  # (a cancellation: the shielded release ran to its end and was accounted for)
        try:
            again, flow = self._release_flow()
            await self._cluster._driver.run(flow, lambda result: self._released(again, result), shielded=True)
        except Exception as failure:
            interruption.add_note(f"redlock: finishing the interrupted release failed: {failure!r}")
        return True

    async def extend(self, ttl: float | None = None, *, add: float | None = None) -> float:
        """See :meth:`redlock.Lock.extend`."""
        lease, flow = self._extend_flow(ttl, add)
        return await self._cluster._driver.run(flow, lambda result: self._extended(lease, result))

    async def adopt(self, token: str, *, fencing_token: int | None = None) -> float:
        """See :meth:`redlock.Lock.adopt`. The adopting task owns the Lock afterwards."""
        lease, flow = self._adopt_flow(token, fencing_token)
        me = asyncio.current_task()
        self._claim_for_adoption(me)
        try:
            return await self._cluster._driver.run(flow, lambda result: self._adopted(lease, result))
        finally:
            self._turns.end(me)

    async def hand_over(self) -> str:
        """See :meth:`redlock.Lock.hand_over`. Awaits the end of the renewer task."""
        lease = self._handing_over()
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not asyncio.current_task():
            renewer.cancel()
            await asyncio.wait({renewer})  # (raises only if this task is cancelled meanwhile)
        self._turns.leave()
        return lease.token

    async def wait_lost(self, timeout: float | None = None) -> bool:
        """See :meth:`redlock.Lock.wait_lost`: True once the lock is lost, False when the
        timeout runs out or the lock is released first."""
        return await self._waited(self._loss_wait(self._give_up_at(timeout)))

    async def _renew(self, lease: Lease) -> None:
        error: BaseException | None = None
        try:
            await self._cluster._driver.run(self._renewal_flow(lease), _unchanged)
        except asyncio.CancelledError:
            return  # released, or the client closed
        except Exception as unexpected:
            error = unexpected
        self._renewal_finished(lease, error)

    def _loss_found(self, lease: Lease) -> None:
        super()._loss_found(lease)
        if self._options.cancel_on_lost and self._body is not None:
            self._cancelled_body = True
            self._body.cancel(f"redlock: lock {self.name!r} was lost")

    def __enter__(self) -> None:
        _use_async_with(self)

    def __exit__(self, *exc_info: object) -> None:  # (never reached: __enter__ refuses)
        _use_async_with(self)

    async def __aenter__(self) -> Lock:
        if not await self.acquire(blocking=True, timeout=self._options.timeout):
            raise self._not_acquired_in_with()
        self._entered()
        return self

    def _entered(self) -> None:
        """After an acquire that opens an ``async with`` block: its task is the body that
        ``cancel_on_lost`` cancels."""
        if self._turns.holds > 1:
            return  # nested: the outermost block's task is the body a loss cancels
        self._body = asyncio.current_task()
        self._cancelled_body = False

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._turns.holds > 1:
            await self.release()  # nested: only counted down; the outermost block reports a loss
            return
        body, self._body = self._body, None
        if self._cancelled_body and isinstance(exc, asyncio.CancelledError) and body is not None:
            # The cancellation was ours, not the caller's: report it as the loss it is.
            body.uncancel()
            self._cancelled_body = False
            try:
                await self.release()
            except LockLost as lost:
                raise lost from exc
            lost_here = f"lock {self.name!r} was lost while held"
            raise verdicts.error(LockLost, lost_here, self._spec, Result(False, (), 0)) from exc
        try:
            await self.release()
        except LockLost as lost:
            if exc is None:
                raise
            exc.add_note(f"redlock: {lost}")


class Semaphore(PermitView, Lock):
    """The asyncio twin of :class:`redlock.Semaphore`: the same methods, awaited."""

    async def __aenter__(self) -> Semaphore:
        await super().__aenter__()
        return self


def _use_async_with(used: object) -> None:
    raise TypeError(f"a redlock.asyncio {type(used).__name__} is used with 'async with', not 'with'")


class ReadWriteLock(ReadWriteState[Lock]):
    """A read-write lock on one name; see :class:`redlock.ReadWriteLock`::

    rw = rl.rwlock("config")
    async with rw.read() as reader:
        settings = await load(reader.validity)
    """

    def read(self) -> Lock:
        """A new reader; see :meth:`redlock.ReadWriteLock.read` (tasks take one each)."""
        return super().read()

    def write(self) -> Lock:
        """A new writer; see :meth:`redlock.ReadWriteLock.write`."""
        return super().write()


class Election(ElectionState[Lock]):
    """The asyncio twin of :class:`redlock.Election`: the same methods, awaited.

    ::

        election = rl.election("scheduler", ttl=10.0, identity="host-a:1234", cancel_on_lost=True)
        async with election:           # campaign() until leader, resign() on the way out
            await schedule(term=election.term)   # cancelled if leadership is lost

    ``observe()`` is an async generator: ``async for leader in election.observe(): ...``.
    """

    async def campaign(self, timeout: float | None = None) -> bool:
        """See :meth:`redlock.Election.campaign`. If cancelled, takes back what it set."""
        if self.is_leader:
            return True
        return await self._lock.acquire(blocking=True, timeout=timeout)

    async def resign(self) -> None:
        """See :meth:`redlock.Election.resign`. A cancelled resign still completes first."""
        if self._nothing_to_resign():
            return
        await self._lock.release()

    async def leader(self) -> str | None:
        """See :meth:`redlock.Election.leader`."""
        return self._leader_from(await self._lock._cluster.inspect(self.name))

    def observe(self) -> AsyncIterator[str | None]:
        """See :meth:`redlock.Election.observe`."""
        return self._changes(lambda: False)

    async def _changes(self, stopped: Callable[[], bool]) -> AsyncIterator[str | None]:
        observer = self._observer()
        driver = self._lock._cluster._driver
        while not stopped():
            leader = await driver.run(observer.step(self._lock._cluster._clock()), observer.seen)
            if leader is not UNCHANGED:
                yield leader

    async def run(
        self,
        *,
        on_elected: Callable[[int], object] | None = None,
        on_lost: Callable[[], object] | None = None,
        on_new_leader: Callable[[str | None], object] | None = None,
    ) -> None:
        """See :meth:`redlock.Election.run`; here it ends on :meth:`stop` or cancellation.

        Cancelled, it tells ``on_lost``, resigns (shielded, as a release is) and re-raises:
        leadership is handed over at once rather than after the ttl (client-go's
        ReleaseOnCancel). Callbacks run in the event loop; each may be a plain function or
        return an awaitable. An awaitable from ``on_elected(term)`` is the leader's work: it
        runs as a task of its own, cancelled (and awaited) when the leadership ends, before
        ``on_lost``; if it fails, run() leaves and raises its error. ``on_lost`` and
        ``on_new_leader`` are awaited in turn. ``stop()`` may be called from any thread.
        """
        runner = self._start_run(on_elected, on_lost, on_new_leader)
        running = _Running(self, runner, on_elected, on_lost)
        watcher = None if on_new_leader is None else asyncio.ensure_future(self._watch(runner, on_new_leader))
        try:
            outcome: object = None
            error: BaseException | None = None
            while (step := runner.advance(outcome, error)) is not None:
                try:
                    outcome, error = await running.perform(step), None
                except BaseException as failure:
                    outcome, error = None, failure
        finally:
            self._end_run(runner)
            if watcher is not None:
                watcher.cancel()
                await asyncio.wait([watcher])

    async def _watch(self, runner: Runner, on_new_leader: Callable[[str | None], object]) -> None:
        try:
            async for leader in self._changes(lambda: runner.done):
                await _outcome(on_new_leader(leader))
        except Exception as error:
            runner.fail(error)

    def __enter__(self) -> None:
        _use_async_with(self)

    def __exit__(self, *exc_info: object) -> None:  # (never reached: __enter__ refuses)
        _use_async_with(self)

    async def __aenter__(self) -> Election:
        await self.campaign()
        self._lock._entered()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self._lock.__aexit__(exc_type, exc, traceback)


class _Running:
    """How an asyncio run() performs the steps of its Runner: awaiting, and the leader's work."""

    def __init__(
        self,
        election: Election,
        runner: Runner,
        on_elected: Callable[[int], object] | None,
        on_lost: Callable[[], object] | None,
    ) -> None:
        self._election = election
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._woken = asyncio.Event()
        self._work: asyncio.Future[Any] | None = None
        loop = asyncio.get_running_loop()

        def wake() -> None:
            # stop() may come from another thread; a closed loop has nobody left to wake.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._woken.set)

        runner.wake = self._wake = wake

    async def perform(self, step: Step) -> object:
        election = self._election
        if isinstance(step, Campaign):
            return await election.campaign(timeout=step.timeout)
        if isinstance(step, Wait):
            self._check_work()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(step.seconds):
                    await self._woken.wait()
            self._woken.clear()  # (what woke it is state the runner reads again: nothing is missed)
            self._check_work()
        elif step is Resign.RESIGN:
            await election.resign()
        elif isinstance(step, Elected):
            started = None if self._on_elected is None else self._on_elected(step.term)
            if inspect.isawaitable(started):
                self._work = asyncio.ensure_future(started)
                self._work.add_done_callback(lambda _: self._wake())
        else:
            failed = await self._stop_work()
            if self._on_lost is not None:
                await _outcome(self._on_lost())
            if failed is not None:
                raise failed
        return None

    def _check_work(self) -> None:
        """The leader's work failed: run() leaves with its error."""
        work = self._work
        if work is not None and work.done() and not work.cancelled() and work.exception() is not None:
            self._work = None
            raise work.exception()  # type: ignore[misc]

    async def _stop_work(self) -> BaseException | None:
        """Cancel the leader's work and wait for it to end; the error it failed with, if any."""
        work, self._work = self._work, None
        if work is None:
            return None
        work.cancel()
        await asyncio.wait([work])
        return None if work.cancelled() else work.exception()


async def _outcome(result: object) -> None:
    """Await what a callback returned, if it is awaitable (callbacks may be async)."""
    if inspect.isawaitable(result):
        await result


def _unchanged(result: T) -> T:
    return result
