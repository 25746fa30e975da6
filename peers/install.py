"""Installs the peer clients, each pinned, into a cache directory outside the project's venv.

Each Python peer gets a directory of its own, ``DIR/<client>``, made by ``pip install
--target`` with ``--no-deps`` and its whole dependency closure pinned to exact versions, so
that what runs is what this file names and nothing of the project's environment leaks in
(or out: redlock-py's and redlock-ng's modules are called ``redlock``, as this package is;
their workers run with ``python -I -S`` and this directory alone on its path). Each Node peer
is installed with ``npm ci`` from its own ``peers/node/<client>/`` package.json and
package-lock.json into ``DIR/<client>``: a directory each, since their ioredis majors differ.

A broken adapter (:data:`BROKEN`, the trials' self-test) runs the client it wraps, from that
client's directory: it is listed with the peers and installed as the client it wraps.

Each directory carries a marker, ``.installed.json``, that names what was installed (the
pins and the Python's cache tag, or the lock file's digest); a directory whose marker
differs is installed again. The installs hold a file lock per client, so that pytest-xdist
workers asking for the same client at once install it once.

``DIR`` is ``$REDLOCK_PEERS_DIR`` if set, else ``$XDG_CACHE_HOME/redlock-quorum/peers``
(``~/.cache/redlock-quorum/peers``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

#: The environment variable that moves the cache directory.
ENV_DIR = "REDLOCK_PEERS_DIR"

HERE = pathlib.Path(__file__).resolve().parent
NODE_SOURCE = HERE / "node"

#: Each Python peer's whole dependency closure, exact (pip's resolver is not asked: --no-deps).
#: pottery 3 is the current major; redlock-py 1.0.8, aioredlock 0.7.3 and redlock-ng 2.0.4 are
#: the last releases. aioredlock 0.7.3 needs aioredis 1.x (its 2.x API differs), which runs on
#: 3.11. redlock-ng asks for redis<6 and urllib3<2 (which it never imports) and pydantic 2;
#: redis 5.3 brings PyJWT.
_REDLOCK_NG = (
    "redlock-ng==2.0.4",
    "redis==5.3.1",
    "PyJWT==2.15.1",
    "urllib3==1.26.20",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
)
#: Broken adapters, each a real client with the one check that makes Redlock safe taken out,
#: and the client it wraps: the self-test of the trials (a comparison that cannot rate it
#: worse than its client cannot tell clients apart). docs/peers.md says what each breaks.
BROKEN: dict[str, str] = {"broken:redlock-ng": "redlock-ng"}
PYTHON_PEERS: dict[str, tuple[str, ...]] = {
    "pottery": ("pottery==3.0.1", "redis==8.2.0", "mmh3==5.3.1", "typing_extensions==4.16.0"),
    "redlock-py": ("redlock-py==1.0.8", "redis==8.2.0"),
    "aioredlock": ("aioredlock==0.7.3", "aioredis==1.3.1", "async-timeout==5.0.1", "attrs==26.1.0", "hiredis==3.5.0"),
    "redlock-ng": _REDLOCK_NG,
    "broken:redlock-ng": _REDLOCK_NG,
}
#: The Node peers, each from its own peers/node/<client>/package.json and package-lock.json.
NODE_PEERS = ("node-redlock", "node-redlock-4", "redis-semaphore")
#: This library, run as a worker from the checkout it is imported from: nothing to install.
OWN = "redlock-quorum"
PEERS = (*PYTHON_PEERS, *NODE_PEERS)
CLIENTS = (OWN, *PEERS)

MARKER = ".installed.json"
#: An install that takes longer has hung (a registry that stopped answering).
INSTALL_TIMEOUT = 600.0


class InstallFailed(RuntimeError):
    """A peer could not be installed: the message says why (the tests skip with it)."""


@dataclass(frozen=True)
class Installed:
    client: str
    #: Where it is: a --target directory, or the Node install's prefix.
    path: pathlib.Path
    #: What the marker says was installed.
    what: dict[str, object]


def cache_dir() -> pathlib.Path:
    """The directory the peers are installed in (not created here)."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return pathlib.Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "redlock-quorum" / "peers"


def home(client: str) -> str:
    """The directory (under the cache) that ``client`` runs from: its own, or for a broken
    adapter the client's it wraps."""
    if client not in PEERS:
        raise ValueError(f"unknown peer {client!r}; choose from {list(PEERS)}")
    return BROKEN.get(client, client)


def wanted(client: str) -> dict[str, object]:
    """What the marker of an up-to-date install of ``client`` says."""
    own = home(client)
    if own in PYTHON_PEERS:
        # A directory of compiled wheels (mmh3, hiredis) serves one Python only.
        return {
            "client": own,
            "requirements": list(PYTHON_PEERS[own]),
            "python": sys.implementation.cache_tag,
        }
    lock = (NODE_SOURCE / own / "package-lock.json").read_bytes()
    return {"client": own, "package-lock": hashlib.sha256(lock).hexdigest()}


def _read_marker(path: pathlib.Path) -> dict[str, object] | None:
    try:
        found = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


@contextlib.contextmanager
def _locked(directory: pathlib.Path, client: str) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{client}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], cwd: pathlib.Path | None = None) -> None:
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallFailed(f"`{' '.join(argv[:4])} ...` failed: {exc}") from exc
    if done.returncode != 0:
        # The last lines are where pip and npm say what went wrong (no network, no such version).
        tail = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:] if line.strip())
        raise InstallFailed(f"`{' '.join(argv[:4])} ...` exited {done.returncode}: {tail}")


def _install_python(client: str, target: pathlib.Path) -> None:
    # Into a fresh directory: --target over an old install leaves the old versions' files.
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-input",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--target",
            str(target),
            *PYTHON_PEERS[client],
        ]
    )


def _install_node(client: str, target: pathlib.Path) -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise InstallFailed("node and npm are not both on PATH")
    target.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(NODE_SOURCE / client / name, target / name)
    # npm ci: exactly the lock file's versions, or an error (never a newer release).
    _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(target)], cwd=target)


def ensure(client: str, directory: pathlib.Path | None = None) -> Installed:
    """``client`` installed in ``directory`` (default :func:`cache_dir`), installing it if
    it is missing or out of date; raises :class:`InstallFailed` saying why it cannot be."""
    directory = cache_dir() if directory is None else directory
    want = wanted(client)
    own = home(client)
    path = directory / own
    if _read_marker(path) == want:  # the common case, without waiting for the lock
        return Installed(client, path, want)
    with _locked(directory, own):
        if _read_marker(path) == want:  # another process installed it meanwhile
            return Installed(client, path, want)
        staging = directory / f".{own}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            if own in PYTHON_PEERS:
                _install_python(own, staging)
            else:
                _install_node(own, staging)
            (staging / MARKER).write_text(json.dumps(want, indent=1) + "\n")
            # The marker is written last and the directory moved in whole: a directory with
            # a marker is complete, whatever was interrupted before.
            shutil.rmtree(path, ignore_errors=True)
            staging.rename(path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return Installed(client, path, want)
