"""What a round's result means to the caller: the exception, with its words, for each way an
acquire, an extend, an adoption or a release can fail.

Where it sits: in :mod:`redlock._api`, below :mod:`redlock._api.state`, whose ``LockState``
records what a result changes and then raises what these functions make. They read only the
lock's spec and the result (no clock, no state), so each message is written once for both APIs.
"""

from __future__ import annotations

from redlock._protocol.core import Result
from redlock._protocol.flows import LockSpec
from redlock._protocol.scripts import FOREIGN_KEY
from redlock.exceptions import (
    AcquireTimeout,
    ExtendUnconfirmed,
    KeyConflict,
    LockLost,
    LockNotAcquired,
    MasterMisconfigured,
    QuorumUnavailable,
    RedlockError,
    ReleaseUnconfirmed,
)


def error(kind: type[RedlockError], message: str, spec: LockSpec, result: Result) -> RedlockError:
    """A ``kind`` of error on the lock of ``spec``, carrying the votes and outcomes of ``result``."""
    return kind(message, resource=spec.resource, quorum=spec.quorum, granted=result.granted, outcomes=result.outcomes)


def needed(spec: LockSpec) -> str:
    """How many masters a round of this lock needs, in words: a majority, or the larger
    quorum of a semaphore (4 of 5 for a limit of 3)."""
    masters = len(spec.node_names)
    if spec.quorum == masters // 2 + 1:
        return "a majority of masters"
    return f"{spec.quorum} of {masters} masters (the semaphore's quorum)"


def acquire_refused(spec: LockSpec, result: Result) -> RedlockError | None:
    """The error of an acquire that did not get the lock and is not to return False: no
    majority is possible (masters unfit, keys of another program) or none was reachable.
    None when others hold the lock (a plain refusal)."""
    name = spec.resource
    if result.misconfigured:
        return error(
            MasterMisconfigured,
            f"no majority is possible for {name!r}: too many masters refuse our credentials, "
            "permissions or TLS, or are unfit for Redlock (see each master's reason)",
            spec,
            result,
        )
    if result.quorum_unreachable and any(
        outcome.detail.startswith(FOREIGN_KEY) for outcome in result.outcomes if outcome.detail
    ):
        return error(
            KeyConflict,
            f"{name!r} cannot be granted here: masters hold keys this library did not write where "
            "this lock keeps its own (another kind of lock on this name, or another program's keys; "
            "each master's reply names the key)",
            spec,
            result,
        )
    if result.quorum_unreachable:
        return error(
            QuorumUnavailable,
            f"could not reach a majority of masters for {name!r} after {result.attempts} attempt(s)",
            spec,
            result,
        )
    return None


def not_acquired_in_with(
    spec: LockSpec, refusal: Result | None, timeout: float | None, max_attempts: int | None
) -> RedlockError:
    """What a ``with`` block raises when its acquire returned False; ``refusal`` is how the
    last acquire at the masters was refused (None: it never got there)."""
    name = spec.resource
    if refusal is not None and not refusal.timed_out and max_attempts is not None:
        # The attempts ran out before any timeout did: not a TimeoutError.
        return error(LockNotAcquired, f"could not acquire {name!r} in {refusal.attempts} attempt(s)", spec, refusal)
    if timeout is None:
        return LockNotAcquired(f"could not acquire {name!r}", resource=name, quorum=spec.quorum)
    return AcquireTimeout(f"could not acquire {name!r} within {timeout} s", resource=name, quorum=spec.quorum)


def adoption_failed(spec: LockSpec, result: Result) -> RedlockError:
    """The error of an adoption that a majority did not confirm."""
    name = spec.resource
    if result.token_gone:
        return error(
            LockLost,
            f"cannot adopt {name!r}: a majority of masters answered that the token does not hold it "
            "(it expired, was released, or was never acquired)",
            spec,
            result,
        )
    return error(
        ExtendUnconfirmed,
        f"adoption of {name!r} was not confirmed by a majority of masters in time; adopt() may be retried",
        spec,
        result,
    )


def extend_failed(spec: LockSpec, result: Result, *, left: float, lost: bool) -> tuple[RedlockError, str | None]:
    """The error of an extend that did not succeed, with ``left`` seconds of validity and the
    lease ``lost`` already or not; and why the lock is lost now (None: it is not, and the
    extend may be retried)."""
    name = spec.resource
    if not result.token_gone and not lost and left > 0:
        unconfirmed = error(
            ExtendUnconfirmed,
            f"extend of {name!r} was not confirmed by a majority of masters in time; the lock keeps "
            f"its old deadline ({left:.3f}s of validity left) and extend() may be retried",
            spec,
            result,
        )
        return unconfirmed, None
    why = (
        "an extend found our token gone from a majority"
        if result.token_gone
        else "its validity ran out before an extend reached a majority"
    )
    return error(LockLost, f"lock {name!r} was lost: {why}", spec, result), why


def release_failed(
    spec: LockSpec, result: Result, *, unconfirmed: bool, loss_to_report: str | None, election: bool
) -> RedlockError | None:
    """The error of a release, None when it succeeded. ``unconfirmed``: no majority answered
    either way; ``loss_to_report``: why the lock was lost while held, when that loss is yet to
    be reported to the caller (None otherwise); ``election``: the Lock is an election's, whose
    user calls resign(), not release()."""
    name = spec.resource
    retry_call = "the election keeps the token, so resign()" if election else "this Lock keeps the token, so release()"
    retry = f"; {retry_call} can be retried" if unconfirmed else ""
    if loss_to_report is not None:
        return error(
            LockLost,
            f"lock {name!r} was lost while held ({loss_to_report})"
            + (f"; its release was not confirmed by {needed(spec)} either" if unconfirmed else "")
            + retry,
            spec,
            result,
        )
    if unconfirmed:
        return error(
            ReleaseUnconfirmed,
            f"release of {name!r} was not confirmed by {needed(spec)} in time: our token "
            f"may still hold the lock on some of them until it expires{retry}",
            spec,
            result,
        )
    if not result.ok:
        return error(
            LockLost,
            f"release of {name!r} found our token gone from {needed(spec)}: "
            "the lock expired or was taken, so the work under it may have run unprotected",
            spec,
            result,
        )
    return None
