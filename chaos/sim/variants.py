"""The broken clients of :mod:`chaos.variants`, applied in-process and taken back again.

Only the protocol's mistakes apply here: the simulator drives the flows as the ``Lock``
does, but not the ``Lock`` object itself, so the two variants that break how one ``Lock``
is shared by threads (``shared-joins-holding``, ``nested-release-lets-go``) are left to
the real self-test, as is the broken read-write lock (``reader-ignores-writer``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redlock
from redlock import _compiled
from redlock._api import state as _lock
from redlock._api import turns as _turns
from redlock._protocol import core as _core
from redlock._protocol import flows as _flows
from redlock._protocol import kinds as _kinds
from redlock._protocol import scripts as _scripts

from .. import variants as real
from .model import MODELLED, _release

__all__ = ["SIM_VARIANTS", "applied"]


def _extend_recreates(ks: Any, keys: list[str], argv: list[str], now: float) -> object:
    current = ks.holder(keys[0], now)
    if current is not None and current != argv[0]:
        return 0
    ks.set(keys[0], argv[0], now, int(argv[1]))
    return 1


def _delete_blindly(ks: Any, keys: list[str], argv: list[str], now: float) -> object:
    for key in keys:
        ks.delete(key)
    return 1


# The broken clients' scripts, modelled as the masters would run them.
MODELLED[real._EXTEND_RECREATES.sha] = _extend_recreates
MODELLED[real._DELETE_BLINDLY.sha] = _delete_blindly
assert MODELLED[_scripts.RELEASE.sha] is _release


#: Everything a variant may patch, saved before and put back after.
_PATCHED: tuple[tuple[Any, str], ...] = (
    (_lock, "acquire_flow"),
    (_kinds.LockKind, "quorum"),
    (_flows.LockSpec, "deadline_after"),
    (_scripts, "EXTEND"),
    (_scripts, "RELEASE"),
    (_scripts, "RELEASE_AND_NOTIFY"),
    (_core.Round, "record"),
    (_turns.LocalTurns, "turn"),
    (_turns.LocalTurns, "counted_down"),
)

#: Left to the real self-test: the simulator's clients share no Lock object, and take no
#: read-write lock.
_LOCK_OBJECT_ONLY = ("shared-joins-holding", "nested-release-lets-go", "reader-ignores-writer")


@dataclass(frozen=True)
class SimVariant:
    name: str
    mistake: str
    patch: Any


SIM_VARIANTS: tuple[SimVariant, ...] = tuple(
    SimVariant(v.name, v.mistake, v.patch) for v in real.VARIANTS if v.name not in _LOCK_OBJECT_ONLY
)


@contextlib.contextmanager
def applied(variant: SimVariant) -> Iterator[None]:
    if redlock.compiled:
        # Compiled classes cannot be patched: the broken client would silently be the right one.
        raise RuntimeError(
            f"the broken client {variant.name!r} patches the library's core, which runs compiled "
            f"here: run with {_compiled.PURE}=1 (the default for python -m chaos)"
        )
    saved = [(owner, name, owner.__dict__[name]) for owner, name in _PATCHED]
    variant.patch()
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
