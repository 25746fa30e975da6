"""The optional compiled build: the pure modules of the hot path through mypyc.

Everything else about the package is in pyproject.toml. By default the build is pure
Python. With ``REDLOCK_COMPILE=1`` the modules of :data:`COMPILED` are compiled with mypyc
(the code passes ``mypy --strict``, which is what mypyc needs), and the wheel carries them
beside their sources; where the compiler fails (no C compiler, no Python headers) the build
says so and the package stays pure Python, which behaves the same, slower. ``_build/backend.py``
adds mypy to the build's requirements only for a compiled build.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

#: The sans-I/O core that every operation runs through, per command and per reply (the lock
#: arithmetic and rounds, the lock kinds, the flows and the connection policy), and the driver
#: code that carries each command and reply between it and the sockets or the event loop (the
#: drivers' base, the asyncio and the sync driver): compiled, they cut 6 % of an asyncio
#: lock+unlock's instructions, 10 % on uvloop, and the sync driver's own a further 21 % of a
#: sync one's. The public classes stay interpreted: users may subclass and patch them. (A
#: Ctrl-C lands in compiled code only where it calls back into Python, a subset of the places
#: the pure package's per-line interrupt test covers.)
COMPILED = (
    "redlock/_protocol/core.py",
    "redlock/_protocol/kinds.py",
    "redlock/_protocol/flows.py",
    "redlock/_protocol/connection.py",
    "redlock/_io/driver.py",
    "redlock/_io/aio.py",
    "redlock/_io/sync.py",
)


def compiled_extensions() -> list[object]:
    choice = os.environ.get("REDLOCK_COMPILE", "").strip().lower()
    if choice in ("", "0", "no", "false"):
        return []
    try:
        from mypyc.build import mypycify  # noqa: PLC0415  (only a compiled build has it)
    except ImportError:
        print("redlock-quorum: REDLOCK_COMPILE is set but mypyc is missing: building pure Python", file=sys.stderr)
        return []
    # (One shared library for them all, named for the package rather than by a hash.)
    extensions = mypycify(list(COMPILED), opt_level="3", group_name="redlock")
    for extension in extensions:
        # A failed compile (no C compiler) leaves the module pure Python instead of failing
        # the install: the sources are in the wheel either way.
        extension.optional = True
    return list(extensions)


setup(ext_modules=compiled_extensions())
