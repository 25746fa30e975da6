"""setuptools' build backend, with mypy among the requirements of a compiled build.

A pure build (the default) needs setuptools only; ``REDLOCK_COMPILE=1`` (see setup.py)
needs mypyc, which ships inside mypy, in the isolated build environment too.
"""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the backend's other hooks, unchanged)

#: The mypy that compiles (the one the code is checked with, the dev extra's), and what it
#: must see to type the whole package as ``mypy --strict`` does: hiredis's and
#: OpenTelemetry's types. 1.20 at least: older mypyc re-raised the wrong exception in a
#: compiled coroutine that awaited a failed future (mypyc/mypyc#1177), and the asyncio
#: driver is compiled.
MYPYC = ("mypy>=1.20", "hiredis>=3.0", "opentelemetry-api>=1.27")


def _compiler() -> list[str]:
    choice = os.environ.get("REDLOCK_COMPILE", "").strip().lower()
    return [] if choice in ("", "0", "no", "false") else list(MYPYC)


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *_compiler()]  # type: ignore[arg-type]

