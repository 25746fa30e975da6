"""Which modules a compiled build compiles, and how to run their sources instead.

A wheel built with ``REDLOCK_COMPILE=1`` (setup.py) carries the modules of
:data:`MODULES` compiled by mypyc, beside their sources. Compiled code runs the same logic
with less CPU, but cannot be patched or traced line by line, and a compiled class can be
subclassed from Python only if marked with :func:`mypyc_attr` (a no-op without mypy).
``REDLOCK_PURE=1`` in the environment (read once, when :mod:`redlock` is first imported)
makes the sources run instead: for a profiler, a debugger, or the chaos harness's
deliberately broken clients, which patch the core.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import pathlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:  # (mypy's: only a compiled build reads it, and that build has mypy)

        def mypyc_attr(*args: object, **kwargs: object) -> object:
            return lambda cls: cls


__all__ = ["MODULES", "PURE", "mypyc_attr", "prefer_sources_if_asked"]

#: What setup.py compiles (tests/test_packaging.py checks they agree): the sans-I/O core,
#: the drivers' shared base and both drivers.
MODULES = (
    "redlock._protocol.core",
    "redlock._protocol.kinds",
    "redlock._protocol.flows",
    "redlock._protocol.connection",
    "redlock._io.driver",
    "redlock._io.aio",
    "redlock._io.sync",
)
#: The environment variable that makes the sources run.
PURE = "REDLOCK_PURE"


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`MODULES` as their ``.py`` files, ahead of the compiled ones."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        # (redlock._protocol.core -> redlock/_protocol/core.py)
        source = pathlib.Path(__file__).parent.joinpath(*fullname.split(".")[1:]).with_suffix(".py")
        return importlib.util.spec_from_file_location(fullname, source) if source.exists() else None


def prefer_sources_if_asked() -> None:
    """With ``REDLOCK_PURE=1``, import the core from its sources (before anything imports it)."""
    if os.environ.get(PURE) == "1" and not any(isinstance(finder, _Sources) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Sources())
