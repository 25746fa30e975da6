"""Building the harness's ``LD_PRELOAD`` shims: the C files next to these modules.

``powerloss.c`` (:mod:`chaos.powerloss`) records what a master made durable;
``clientclock.c`` (:mod:`chaos.clock`) keeps a client's waits right while libfaketime runs
its clocks off. Each is compiled on first use (``cc -shared -fPIC``) into a cache dir,
under a name keyed by the hash of its source, so an edited source is rebuilt and
concurrent runs share the build.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile

__all__ = ["CompilerNotFound", "build"]

_HERE = pathlib.Path(__file__).parent


class CompilerNotFound(FileNotFoundError):
    """No C compiler to build a shim with; the message says how to get one."""


def _cache_dir() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "redlock-chaos"


def _compiler(source: str, purpose: str) -> list[str]:
    configured = os.environ.get("CC")
    if configured:
        command = shlex.split(configured)
        if shutil.which(command[0]) is None:
            raise CompilerNotFound(f"CC={configured!r} is not an executable; fix it or unset it to use cc")
        return command
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found is not None:
            return [found]
    raise CompilerNotFound(
        f"{purpose} needs a C compiler to build its LD_PRELOAD shim "
        f"({source}), and none of cc, gcc, clang is on PATH (nor $CC set); "
        "on Debian: `apt-get install -y gcc`"
    )


@functools.cache
def build(name: str, purpose: str) -> str:
    """The shim compiled from ``name`` (a C file of this package), built on first use and
    after any edit of its source; ``purpose`` names what needs it, for the error raised
    when there is no compiler (:class:`CompilerNotFound`)."""
    path = _HERE / name
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    target = _cache_dir() / f"{path.stem}-{digest}.so"
    if target.is_file():
        return str(target)
    compiler = _compiler(name, purpose)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built under a temp name and renamed: another run may be building the same file.
    fd, staging = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [*compiler, "-shared", "-fPIC", "-O2", "-o", staging, str(path), "-ldl"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"building {name} with {shlex.join(compiler)} failed:\n{done.stderr.strip()}")
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return str(target)
