"""The options of the lock factories (``lock()``, ``semaphore()``, ``rwlock()``), written once
for both clients.

Each option is declared once, with its type, in the piece below shared by the factories
that take it; a factory's keywords are its pieces put together, in the order its signature
shows. Type checkers read them through ``**options: Unpack[...]``; help() and docs/api.md
show the factories' signatures written out (:func:`takes`). Each default is in
:data:`DEFAULTS`, the checks are ``redlock._api.state``'s (``ClusterConfig._lock_spec`` and
``LockOptions.checked``, for both clients), and what each option means is said once, in
:meth:`redlock.Redlock.lock` (``cancel_on_lost``: :meth:`redlock.asyncio.Redlock.lock`),
which the other factories refer to (docs/gen_api.py checks that every option is there).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypedDict, TypeVar

#: What ``on_lost`` is called with: the Lock, or the Semaphore, that was lost.
HolderT = TypeVar("HolderT")
F = TypeVar("F", bound=Callable[..., Any])


class Waiting(TypedDict, Generic[HolderT], total=False):
    """How long a ``with`` block waits, and auto-extension (every factory)."""

    timeout: float | None
    auto_extend: bool
    on_lost: Callable[[HolderT], None] | None


class Cancelling(TypedDict, total=False):
    """A loss cancels the task in the ``async with`` body (the asyncio client's)."""

    cancel_on_lost: bool


class OneHolder(TypedDict, total=False):
    """A lock's own: fencing tokens, reentrancy (no semaphore, no read-write lock)."""

    fencing: bool
    reentrant: bool


class Delayed(TypedDict, total=False):
    """Chubby's lock-delay (no semaphore)."""

    lock_delay: float


class Bounded(TypedDict, total=False):
    """The bounds of a holding and of a blocking acquire (every factory)."""

    max_hold: float | None
    retry_delay: float | None
    max_attempts: int | None


class LockKeywords(Waiting[HolderT], OneHolder, Delayed, Bounded, total=False):
    """``redlock.Redlock.lock()``'s."""


class AsyncLockKeywords(Waiting[HolderT], Cancelling, OneHolder, Delayed, Bounded, total=False):
    """``redlock.asyncio.Redlock.lock()``'s."""


class SemaphoreKeywords(Waiting[HolderT], Bounded, total=False):
    """``redlock.Redlock.semaphore()``'s."""


class AsyncSemaphoreKeywords(Waiting[HolderT], Cancelling, Bounded, total=False):
    """``redlock.asyncio.Redlock.semaphore()``'s."""


class ReadWriteKeywords(Waiting[HolderT], Delayed, Bounded, total=False):
    """``redlock.Redlock.rwlock()``'s."""


class AsyncReadWriteKeywords(Waiting[HolderT], Cancelling, Delayed, Bounded, total=False):
    """``redlock.asyncio.Redlock.rwlock()``'s."""


#: Every option's default: what a factory that does not take an option uses for it too.
DEFAULTS: Final[AsyncLockKeywords[Any]] = {
    "timeout": None,
    "auto_extend": False,
    "on_lost": None,
    "cancel_on_lost": False,
    "fencing": False,
    "reentrant": False,
    "lock_delay": 0.0,
    "max_hold": None,
    "retry_delay": None,
    "max_attempts": None,
}

#: The factory of each class of keywords above, by the name Python's own errors give it
#: (``Redlock.lock``): filled in by :func:`takes`.
_FACTORY_NAMES: dict[type, str] = {}


def keywords_of(keywords: type) -> tuple[str, ...]:
    """The options of a factory's keywords (a class above), in its signature's order."""
    return tuple(keywords.__annotations__)


def given(options: Mapping[str, object], keywords: type) -> Mapping[str, object]:
    """Every option, as the factory of ``keywords`` was given it or else at its default (so
    are those it does not take); a TypeError, worded as Python's own, for a keyword it does
    not take."""
    if not options:
        return DEFAULTS
    taken: frozenset[str] = keywords.__optional_keys__  # type: ignore[attr-defined]
    if not taken.issuperset(options):
        unexpected = next(name for name in options if name not in taken)
        raise TypeError(f"{_FACTORY_NAMES[keywords]}() got an unexpected keyword argument {unexpected!r}")
    return {**DEFAULTS, **options}


def takes(keywords: type, holder: str) -> Callable[[F], F]:
    """A factory's signature as help() and docs/api.md show it: ``**options`` written out
    as the keyword-only parameters of ``keywords``, each with its default, ``on_lost``
    taking ``holder`` (the class the factory's ``**options`` annotation names)."""

    def sign(factory: F) -> F:
        signature = inspect.signature(factory)
        *fixed, options = signature.parameters.values()
        expected = f"Unpack[{keywords.__name__}[{holder}]]"
        if options.kind is not inspect.Parameter.VAR_KEYWORD or options.annotation != expected:
            raise TypeError(f"{factory.__qualname__}: its last parameter must be **{options.name}: {expected}")
        written_out = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=DEFAULTS[name],  # type: ignore[literal-required]
                annotation=re.sub(r"\bHolderT\b", holder, _annotation_text(annotation)),
            )
            for name, annotation in keywords.__annotations__.items()
        ]
        factory.__signature__ = signature.replace(parameters=[*fixed, *written_out])  # type: ignore[attr-defined]
        _FACTORY_NAMES[keywords] = factory.__qualname__
        return factory

    return sign


def _annotation_text(annotation: object) -> str:
    """An option's type as its source says it (a TypedDict keeps it as a ForwardRef)."""
    return annotation if isinstance(annotation, str) else str(getattr(annotation, "__forward_arg__", annotation))
