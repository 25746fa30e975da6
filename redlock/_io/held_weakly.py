"""Objects the sync driver holds weakly: interpreted always, because the driver may not be.

An instance of a class that mypyc compiles takes no weak reference, and a compiled class
that Python may subclass mishandles its weak-reference list when a cycle is collected (its
clear function releases the list as if it owned it: a segfault at the next fork or garbage
collection, in the compiled wheel's smoke test). setup.py never compiles this module.
"""

from __future__ import annotations

from collections.abc import Callable


class Ticket:
    """A flow under way: only its identity and its lifetime count."""

    __slots__ = ("__weakref__",)


class ForkHook:
    """What the at-fork hook knows of a driver: the driver owns this object, and the hook
    holds it weakly, never the driver itself."""

    __slots__ = ("__weakref__", "after_fork")

    def __init__(self, after_fork: Callable[[], None]) -> None:
        self.after_fork = after_fork
