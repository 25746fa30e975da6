"""The compiled simulator: the simulator's hot modules built with mypyc, for a checkout.

Where it sits: imported first by :mod:`chaos.sim` (before any module it may replace), and
by ``python -m chaos sim build``, which makes the build. It is never compiled itself. It
sits above the modules it compiles all the same: :func:`kind` asks :mod:`chaos.sim.world`
where it was loaded from (by then, from the build or the sources for good).

The library's compiled core ships in a wheel (setup.py, ``REDLOCK_COMPILE=1``); the
simulator does not ship compiled: it runs from a checkout, as ``python -m chaos``, and a
compiled module's name is fixed at build time (``chaos.sim.world``), where an installed
harness is ``redlock_chaos``. So the build lives in the checkout, outside the source tree:
``build/sim-compiled/chaos/sim/`` (``build/`` is git-ignored and in no sdist or wheel),
with a stamp of the sources it was built from. When :mod:`chaos.sim` is imported as
``chaos.sim`` and that directory holds a build of the current sources, it is put first on
the package's ``__path__``, so its extension modules load instead of the sources of
:data:`MODULES`; the others load from the sources as always. A build of other sources
(edited since) is left alone, and the sources run: a stale build must never run in place
of the code that is read. ``CHAOS_SIM_PURE=1`` runs the sources whatever is built.

The histories are the same event for event either way (the golden digests of
tests/test_sim.py), so a build changes speed only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import sys
from collections.abc import MutableSequence

__all__ = ["MODULES", "PURE", "build", "build_dir", "kind", "stale", "use_if_built"]

#: The modules compiled, in the order of their layers: the scripts' model, the event loop
#: with its masters, network and clients, the watched master (a subclass of the master:
#: compiled with it, as a Python subclass of a compiled class would need it opened), and
#: a trial's workload and faults. The search above them runs a trial's few calls, and the
#: history and checkers are the real harness's too (about 5 % of a trial).
MODULES = ("model", "world", "watch", "trial")
#: The environment variable that makes the sources run.
PURE = "CHAOS_SIM_PURE"
#: mypyc's shared library of the build, inside the package: ``chaos.sim._simc__mypyc``.
GROUP = "chaos.sim._simc"

_HERE = pathlib.Path(__file__).resolve().parent
_CHECKOUT = _HERE.parent.parent
#: Why the sources run although a build exists (a stale build), or None.
stale: str | None = None


def build_dir() -> pathlib.Path:
    """The build's root, in the checkout (its modules are in ``chaos/sim/`` below it)."""
    return _CHECKOUT / "build" / "sim-compiled"


def _stamp() -> str:
    """What a build is valid for: the compiled sources, byte for byte, and this Python."""
    digest = hashlib.sha256(sys.version.encode())
    for module in MODULES:
        digest.update((_HERE / f"{module}.py").read_bytes())
    return digest.hexdigest()


def use_if_built(path: MutableSequence[str], package: str, root: pathlib.Path | None = None) -> None:
    """Put a current build (in ``root``, :func:`build_dir` by default) first on
    ``chaos.sim``'s ``__path__``: see the module's doc."""
    global stale  # noqa: PLW0603  (found once, at import)
    root = root or build_dir()
    stamp = root / "stamp"
    if package != "chaos.sim" or os.environ.get(PURE) == "1" or not stamp.exists():
        return
    if stamp.read_text(encoding="ascii").strip() != _stamp():
        stale = f"the compiled simulator in {root} was built from other sources: the sources run"
        return
    path.insert(0, str(root / "chaos" / "sim"))


def kind() -> str:
    """Which simulator runs: ``compiled`` or ``pure`` (what the summaries record)."""
    from . import world  # noqa: PLC0415  (imported at once, it would load before use_if_built ran)

    return "pure" if (world.__file__ or "").endswith(".py") else "compiled"


def build(say: object = print) -> pathlib.Path:
    """Compile :data:`MODULES` with mypyc into :func:`build_dir` and stamp it; mypyc and a
    C compiler are needed (the ``dev`` extra has mypy, and so mypyc). Returns the directory."""
    from mypyc.build import mypycify  # noqa: PLC0415  (only a build needs mypyc)
    from setuptools import Distribution  # type: ignore[import-untyped]  # noqa: PLC0415

    out = build_dir()
    stamp = out / "stamp"
    stamp.unlink(missing_ok=True)
    sources = [f"chaos/sim/{module}.py" for module in MODULES]
    # mypy reads the checkout's configuration and finds chaos and redlock from its root. A
    # Distribution of its own, not setup(): setup() would read pyproject.toml, whose license
    # field older setuptools (a venv's own) refuse.
    with contextlib.chdir(_CHECKOUT):
        extensions = mypycify(sources, opt_level="3", group_name=GROUP, target_dir=str(out / "src"))
        dist = Distribution({"name": "chaos-sim-compiled", "ext_modules": extensions})
        command = dist.get_command_obj("build_ext")
        command.build_lib = str(out)
        command.build_temp = str(out / "temp")
        dist.run_command("build_ext")
    stamp.write_text(_stamp() + "\n", encoding="ascii")
    if callable(say):
        say(f"compiled {', '.join(sources)} into {out / 'chaos' / 'sim'}")
    return out
