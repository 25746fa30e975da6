"""Redis masters in Docker containers (testcontainers), for test runs with ``REDLOCK_TEST_DOCKER=1``.

By default the tests start their masters as local ``redis-server`` processes
(:mod:`redlock.servers`). With ``REDLOCK_TEST_DOCKER=1`` the ``master_urls`` fixture
(conftest.py) takes them from containers of the official ``redis`` image instead, configured
as docker-compose.yml configures its masters: independent, AOF on, ``appendfsync always``.
That needs a Docker engine and ``pip install -e '.[docker]'``; where either is missing, the
docker-path test skips and says which.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings
from collections.abc import Iterator
from typing import Any

import redis

ENV_VAR = "REDLOCK_TEST_DOCKER"

#: The image docker-compose.yml runs too (tests/test_compose.py checks that they agree).
IMAGE = "redis:7.4-alpine"

#: The server settings docker-compose.yml gives each master.
SERVER_ARGS = ("redis-server", "--appendonly", "yes", "--appendfsync", "always", "--save", "")

_READY_TIMEOUT = 60.0
_DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


def docker_requested() -> bool:
    """Whether this run asked for masters in containers (``REDLOCK_TEST_DOCKER=1``)."""
    return os.environ.get(ENV_VAR) == "1"


def docker_unavailable() -> str | None:
    """Why containers cannot be started here, or None when a Docker engine answers."""
    try:
        # Imported here, not at the top: both are optional (the `docker` extra).
        import docker  # type: ignore[import-untyped]  # noqa: PLC0415
        import testcontainers.core.container  # noqa: F401, PLC0415
    except ImportError as error:
        return f"testcontainers is not installed ({error}): pip install -e '.[docker]'"
    host = os.environ.get("DOCKER_HOST", _DEFAULT_DOCKER_HOST)
    if host.startswith("unix://") and not os.path.exists(host.removeprefix("unix://")):
        return f"no Docker engine: {host.removeprefix('unix://')} does not exist (DOCKER_HOST={host})"
    try:
        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as error:
        return f"no Docker engine answers at {host}: {error}"
    finally:
        # A failed docker-py connection leaves its socket for the garbage collector, whose
        # ResourceWarning would then fail whichever test runs (filterwarnings = error).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    return None


@contextlib.contextmanager
def redis_containers(n: int = 5, image: str = IMAGE) -> Iterator[list[str]]:
    """``n`` independent masters in containers; yields their ``redis://`` URLs, removes them after."""
    from testcontainers.core.container import DockerContainer  # noqa: PLC0415  (optional dependency)

    containers: list[Any] = []
    try:
        for _ in range(n):
            container = DockerContainer(image).with_command(list(SERVER_ARGS)).with_exposed_ports(6379)
            containers.append(container.start())
        urls = [f"redis://{c.get_container_host_ip()}:{c.get_exposed_port(6379)}" for c in containers]
        for url in urls:
            _wait_until_ready(url)
        yield urls
    finally:
        for container in containers:
            container.stop()


def _wait_until_ready(url: str) -> None:
    # A started container is not yet a listening server; its port mapping answers first.
    deadline = time.monotonic() + _READY_TIMEOUT
    while True:
        try:
            with redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1) as client:
                client.ping()
                return
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
