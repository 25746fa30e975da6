"""Local turns: which user of this process (a thread, or an asyncio task) has a shared Lock
object, and how many holds it counts.

Where it sits: in :mod:`redlock._api`, beside :mod:`redlock._api.state`, whose ``LockState``
keeps one :class:`LocalTurns` per object; the two API shells take and end their turns on it,
each under its own gate (a thread lock, or the event loop's single thread).

Nothing here reaches the masters: ownership is local to the object, and the masters know only
the token.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from enum import Enum

from redlock.exceptions import LockAlreadyHeld, LockNotHeld


class Turn(Enum):
    """How a local acquire of a shared Lock object went, before any traffic."""

    #: The object was free (or freed while we waited): this acquire goes to the masters.
    AT_MASTERS = "at masters"
    #: Its owner re-acquired a reentrant Lock: counted, no traffic.
    NESTED = "nested"
    #: Another local user holds it, and we may wait no (longer): not acquired.
    REFUSED = "refused"


def time_left(clock: Callable[[], float], give_up_at: float | None) -> float | None:
    """Seconds until ``give_up_at`` on ``clock`` (never below 0), or None without a deadline."""
    return None if give_up_at is None else max(0.0, give_up_at - clock())


class LocalTurns:
    """The local users of one Lock object, as ``threading.Lock`` (``threading.RLock`` when
    ``reentrant``) would have them take turns.

    Waiting for a turn holds nothing across a network round: the caller's gate is taken and
    left in moments, and what it guards (``busy``, ``owner``, ``holds``) is plain state.
    """

    def __init__(self, name: str, reentrant: bool, clock: Callable[[], float], wake: Callable[[], None]) -> None:
        self._name = name
        self._reentrant = reentrant
        self._clock = clock
        #: Wakes the local users waiting for this object (each checks again).
        self._wake = wake
        #: A local user holds this object, or is acquiring it at the masters.
        self.busy = False
        #: That user: a thread (sync) or a task (asyncio).
        self.owner: object | None = None
        #: How many acquires it made that are not released yet (0 while it is acquiring).
        self.holds = 0

    def claim(self, me: object) -> bool:
        """Claim this object for ``me`` if no local user has it (the common case: an object
        used by one thread or task), with no wait to set up; False: :meth:`turn` decides.
        The caller holds its local gate, as for :meth:`turn`."""
        if self.busy:
            return False
        self.busy, self.owner = True, me
        return True

    def turn(
        self, me: object, blocking: bool, give_up_at: float | None, held: Callable[[], bool]
    ) -> Generator[float | None, None, Turn]:
        """Wait for this object to be free for ``me``: yields how long to wait for a release
        by another local user (None: unbounded), and returns how the wait ended. ``held``
        tells whether the object's lock is still valid (for an owner acquiring again).

        The caller runs it under its local gate and waits on it between steps, so that the
        check and the claim are one step for the other local users.
        """
        if self.busy and self.owner is me:
            if self._reentrant:
                self.holds += 1
                return Turn.NESTED
            if held():
                raise LockAlreadyHeld(
                    f"lock {self._name!r} is already held by this thread (task) through this Lock object, "
                    "which is not reentrant: release it first, or pass reentrant=True",
                    resource=self._name,
                )
            # Its own lock ran out (or was lost) without a release: trying again is fair.
            return Turn.AT_MASTERS
        while not self.claim(me):
            left = time_left(self._clock, give_up_at)
            if not blocking or left == 0.0:
                return Turn.REFUSED
            yield left
        return Turn.AT_MASTERS

    def end(self, me: object) -> None:
        """After an acquire by ``me``, however it ended (refused, failed, interrupted): if it
        claimed the object and holds nothing, hand the object to the next local user."""
        if self.busy and self.owner is me and self.holds == 0:
            self.leave()

    def leave(self) -> None:
        """Free the object, whoever had it, and wake the users waiting for it."""
        self.busy, self.owner, self.holds = False, None, 0
        self._wake()

    def counted_down(self, me: object) -> bool:
        """For a release by ``me``: True if it only counted down a nested hold, with no
        traffic; False if the masters are to be released now."""
        if self._reentrant and self.busy and self.owner is not me:
            raise LockNotHeld(
                f"cannot release {self._name!r}: it is reentrant and held by another thread (task); "
                "only its owner may release it",
                resource=self._name,
            )
        if self.holds > 1:
            self.holds -= 1
            return True
        return False
