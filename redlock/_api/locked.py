"""``@rl.locked(...)``: a function whose every call runs holding a lock, for both clients.

The two decorators (:meth:`redlock.Redlock.locked`, :meth:`redlock.asyncio.Redlock.locked`)
differ only in calling or awaiting; what they decide is written once here:

* **The name.** A template such as ``"report:{user_id}"`` is checked when the function is
  decorated: each field must name one of its parameters (``{order.id}`` and ``{ids[0]}``
  reach into one), so a typo fails at import, not at the first call. Each call binds its
  arguments to the signature, with the defaults applied, and formats the template with
  them.
* **The options.** Whatever ``rl.lock`` takes; checked at decoration by making a Lock
  (which sends nothing), so a bad ttl fails at import too.
* **A refused call** (others hold the lock): ``on_busy="wait"`` waits as ``with
  rl.lock(...)`` does (bounded by ``timeout`` and ``max_attempts``, then the ``with``
  block's AcquireTimeout or LockNotAcquired); ``"raise"`` makes one attempt and raises
  LockNotAcquired; ``"skip"`` makes one attempt and returns ``default`` without calling the
  function (a cron job on several hosts: one runs, the others skip). Only "others hold it"
  is skipped: a quorum that cannot be reached raises QuorumUnavailable whatever
  ``on_busy`` says, since skipping would hide an outage.
* **A call inside a call** on the same name, in the same thread (task): each call makes a
  Lock of its own, so the inner one would wait for the outer, which waits for it. It raises
  LockAlreadyHeld instead, as a Lock that is not reentrant does; with ``reentrant=True``
  it runs under the outer call's hold.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redlock._api.state import ClusterConfig
from redlock.exceptions import LockAlreadyHeld, LockNotAcquired, QuorumUnavailable

ON_BUSY = ("wait", "raise", "skip")


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


#: ``default`` not given (None is a value a skipped call may well return).
NO_DEFAULT: Any = _NoDefault()

#: The names held by decorated calls under way in this context, with the thread (task) of
#: each: a call nested in another on the same name is told apart from a call in a thread
#: or task the outer one started (which inherits the context, and must wait as any other).
_HELD: contextvars.ContextVar[tuple[tuple[int, tuple[str, ...], object], ...]] = contextvars.ContextVar(
    "redlock_locked_calls", default=()
)


def _fields(template: str) -> list[str]:
    """The parameter each ``{field}`` of ``template`` names (the part before ``.`` or ``[``)."""
    roots = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        root = field.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise ValueError(
                f"name template {template!r}: name a parameter in each field ({{user_id}}), not {{{field}}}"
            )
        roots.append(root)
    return roots


@dataclass(frozen=True)
class _PlainParameters:
    """The parameters of a function whose every parameter is positional-or-keyword (no
    ``*args``, ``**kwargs``, keyword-only or positional-only ones), the usual kind: a call's
    arguments are bound to them here, where ``inspect.Signature.bind`` and
    ``apply_defaults`` cost 38,000 instructions per call (about 5 % of a lock+unlock)."""

    names: tuple[str, ...]
    accepted: frozenset[str]
    defaults: Mapping[str, Any]

    @classmethod
    def of(cls, signature: inspect.Signature) -> _PlainParameters | None:
        parameters = signature.parameters.values()
        if any(parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for parameter in parameters):
            return None
        defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
        return cls(tuple(signature.parameters), frozenset(signature.parameters), defaults)

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """Each parameter's argument, defaults applied, as ``Signature.bind`` gives them;
        None when the arguments do not fit (``Signature.bind`` then says how)."""
        names = self.names
        if len(args) > len(names):
            return None
        arguments = dict(zip(names, args, strict=False))
        for name, value in kwargs.items():
            if name in arguments or name not in self.accepted:
                return None
            arguments[name] = value
        if len(arguments) < len(names):
            for name in names:
                if name not in arguments:
                    if name not in self.defaults:
                        return None
                    arguments[name] = self.defaults[name]
        return arguments


@dataclass(frozen=True)
class LockedCall:
    """A decorator's checked settings; :meth:`bound_to` a function, how each call runs."""

    cluster: ClusterConfig
    templates: tuple[str, ...]
    #: Several templates make a lock on several names (a list), one a lock on one name.
    several: bool
    on_busy: str
    default: Any
    options: Mapping[str, Any]
    #: For the asyncio client: it decorates coroutine functions, the sync one the others.
    asynchronous: bool
    function: Callable[..., Any] | None = None
    signature: inspect.Signature | None = None
    #: The function's parameters, when all are plain (see _PlainParameters), else None.
    plain: _PlainParameters | None = None

    @classmethod
    def planned(
        cls,
        cluster: ClusterConfig,
        name: object,
        on_busy: object,
        default: object,
        options: dict[str, Any],
        *,
        asynchronous: bool,
    ) -> LockedCall:
        """Check the decorator's arguments, before any function is decorated."""
        if isinstance(name, str):
            templates, several = (name,), False
        elif isinstance(name, list | tuple) and name and all(isinstance(item, str) for item in name):
            templates, several = tuple(name), True
        else:
            raise TypeError(f"name must be a str or a non-empty list of str (templates), got {name!r}")
        if on_busy not in ON_BUSY:
            raise ValueError(f"on_busy must be one of {', '.join(map(repr, ON_BUSY))}, got {on_busy!r}")
        if default is not NO_DEFAULT and on_busy != "skip":
            raise ValueError("default is what a skipped call returns: it goes with on_busy='skip'")
        if on_busy != "wait":
            for waiting in ("timeout", "max_attempts"):
                if options.get(waiting) is not None:
                    raise ValueError(f"{waiting} bounds a wait: it goes with on_busy='wait' ({on_busy!r} tries once)")
            # One attempt: a blocking acquire with no time to wait is exactly that.
            options = {**options, "timeout": 0.0}
        skipped = None if default is NO_DEFAULT else default
        plan = cls(cluster, templates, several, on_busy, skipped, options, asynchronous)
        # Every option checked now, on a Lock that sends nothing: a bad one fails at import.
        probe = [template if not _fields(template) else "probe" for template in templates]
        cluster.lock(probe if several else probe[0], **options)  # type: ignore[attr-defined]
        return plan

    def bound_to(self, function: Callable[..., Any]) -> LockedCall:
        """The plan for ``function``: each template field must name one of its parameters."""
        if inspect.iscoroutinefunction(function) != self.asynchronous:
            raise TypeError(
                f"{getattr(function, '__qualname__', function)!r}: redlock.asyncio.Redlock.locked decorates "
                "async functions, redlock.Redlock.locked the others"
            )
        signature = inspect.signature(function)
        for template in self.templates:
            for root in _fields(template):
                if root not in signature.parameters:
                    raise ValueError(
                        f"name template {template!r}: {{{root}}} is not a parameter of "
                        f"{getattr(function, '__qualname__', function)!r} "
                        f"(its parameters: {', '.join(signature.parameters) or 'none'})"
                    )
        plain = _PlainParameters.of(signature)
        return dataclasses.replace(self, function=function, signature=signature, plain=plain)

    def names(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
        """The lock names of one call (TypeError, as the call itself would raise, if the
        arguments do not fit the signature)."""
        assert self.signature is not None
        arguments = None if self.plain is None else self.plain.bind(args, kwargs)
        if arguments is None:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = bound.arguments
        names = []
        for template in self.templates:
            try:
                names.append(template.format_map(arguments))
            except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
                raise ValueError(f"cannot build the lock name from {template!r}: {error!r}") from None
        return tuple(names)

    @contextlib.contextmanager
    def running(self, args: Sequence[Any], kwargs: Mapping[str, Any], me: object) -> Iterator[Any]:
        """One call: its Lock, not acquired yet (None: it is nested in a call of the same
        thread or task on the same names, and reentrant, so the outer hold covers it)."""
        names = self.names(args, kwargs)
        mark = (id(self.cluster), tuple(sorted(names)), me)
        held = _HELD.get()
        if mark in held:
            if self.options.get("reentrant"):
                yield None
                return
            raise LockAlreadyHeld(
                f"{self._called()} called itself (or another function locked on {', '.join(names)!r}) while "
                "holding the lock, in the same thread (task): it would wait for itself; pass reentrant=True "
                "to run nested calls under the outer hold",
                resource=", ".join(names),
            )
        lock = self.cluster.lock(list(names) if self.several else names[0], **self.options)  # type: ignore[attr-defined]
        reset = _HELD.set((*held, mark))
        try:
            yield lock
        finally:
            _HELD.reset(reset)

    def refused(self, refusal: LockNotAcquired) -> Any:
        """What a call others held the lock against does: ``default`` (skip), or raise."""
        if isinstance(refusal, QuorumUnavailable):
            raise refusal  # an outage, not a busy lock: never skipped
        if self.on_busy == "skip":
            return self.default
        if self.on_busy == "raise":
            raise LockNotAcquired(
                f"{self._called()} was not run: others hold {refusal.resource!r} (on_busy='raise')",
                resource=refusal.resource,
                quorum=refusal.quorum,
                granted=refusal.granted,
                outcomes=refusal.outcomes,
            ) from None
        raise refusal

    def _called(self) -> str:
        return f"{getattr(self.function, '__qualname__', self.function)}()"
