"""mypyc's class decorator for the compiled simulator's modules (chaos/sim/compiled.py), or
a stand-in that does nothing where mypy (and so mypyc) is not installed.

Where it sits: at the bottom of :mod:`chaos.sim`, below the modules it decorates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["mypyc_attr"]

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:  # (mypy's, in the dev extra: only a build reads it, and it needs mypy)

        def mypyc_attr(*args: object, **kwargs: object) -> object:
            return lambda cls: cls
