"""The test tiers of tests/conftest.py: which tests are pure, and that a pure one cannot start
a redis-server, in this process or in a child."""

from __future__ import annotations

import subprocess

import pytest

from redlock.servers import LocalMasters, find_redis_server


def test_a_pure_test_that_starts_a_server_fails(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("pure") is not None
    masters = LocalMasters(1)
    try:
        with pytest.raises(pytest.fail.Exception, match="is in the pure tier"):
            masters.start()
    finally:
        masters.stop()
    # A child finds the server binary as find_redis_server() does: one that refuses.
    done = subprocess.run([find_redis_server(), "--port", "0"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode != 0
    assert "pure tier" in done.stderr


def test_a_test_with_masters_is_not_pure(request: pytest.FixtureRequest, masters: LocalMasters) -> None:
    assert request.node.get_closest_marker("pure") is None


@pytest.mark.servers
def test_a_test_marked_servers_is_not_pure(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("pure") is None
