"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import pytest

import redlock
from redlock.servers import LocalMasters

# --- local Redis masters (redlock.servers) --------------------------------------------------


class MastersFactory(Protocol):
    def __call__(self, n: int = 5, **kwargs: Any) -> LocalMasters: ...


@pytest.fixture(scope="session")
def masters() -> Iterator[LocalMasters]:
    """Five masters started once per session, for tests that inject no faults.

    Shared: a test must not kill, pause or restart them, and should use keys of its own.
    """
    with LocalMasters(5) as started:
        yield started


@pytest.fixture
def fresh_masters() -> Iterator[MastersFactory]:
    """A factory, ``fresh_masters(n=5, **LocalMasters_kwargs)``, of started masters that
    are this test's own to kill, pause and restart; all are stopped at teardown."""
    made: list[LocalMasters] = []

    def factory(n: int = 5, **kwargs: Any) -> LocalMasters:
        cluster = LocalMasters(n, **kwargs)
        made.append(cluster)
        return cluster.start()

    yield factory
    for cluster in reversed(made):
        cluster.stop()


# --- clients of the public APIs ---------------------------------------------------------------


class ClientFactory(Protocol):
    """``client(masters, **Redlock_kwargs)``: a Redlock client, closed at teardown."""

    def __call__(self, masters: Sequence[Any], **kwargs: Any) -> Any: ...


@pytest.fixture(params=["sync"])
def client(request: pytest.FixtureRequest) -> Iterator[ClientFactory]:
    """A Redlock client factory, once per public API, with the same blocking surface."""
    made: list[redlock.Redlock] = []

    def factory(masters: Sequence[Any], **kwargs: Any) -> Any:
        made.append(redlock.Redlock(masters, **kwargs))
        return made[-1]

    yield factory
    for rl in made:
        rl.close()
