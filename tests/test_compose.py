"""docker-compose.yml's structure, and masters in containers where a Docker engine exists.

This machine has the docker CLI but no engine, so the compose file is checked as data:
five independent masters (no replication), AOF fsynced on every write, distinct ports.
The container test runs only where an engine answers; elsewhere it skips and says why.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
import redis
import yaml

from redlock import Redlock

from .containers import IMAGE, SERVER_ARGS

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, dict[str, Any]] = document["services"]
    return found


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host ip, host port, container port) of each port mapping, short or long syntax."""
    mappings = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            mappings.append((port.get("host_ip", ""), int(port["published"]), int(port["target"])))
            continue
        parts = str(port).split(":")
        host_ip = parts[0] if len(parts) == 3 else ""
        mappings.append((host_ip, int(parts[-2]), int(parts[-1])))
    return mappings


def command_args(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return command.split() if isinstance(command, str) else [str(arg) for arg in command]


def test_five_masters(services: dict[str, dict[str, Any]]) -> None:
    assert len(services) == 5
    for service in services.values():
        assert service["image"].startswith("redis:")


def test_no_replication_anywhere() -> None:
    # Redlock needs independent masters: a replica would share (and on failover lose) writes.
    text = COMPOSE.read_text().lower()
    assert "replicaof" not in text
    assert "slaveof" not in text


def test_aof_fsynced_on_every_write(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        args = command_args(service)
        assert args[0] == "redis-server", name
        options = dict(zip(args[1::2], args[2::2], strict=True))
        assert options["--appendonly"] == "yes", name
        assert options["--appendfsync"] == "always", name


def test_distinct_ports_on_loopback_and_distinct_data(services: dict[str, dict[str, Any]]) -> None:
    host_ports: list[int] = []
    volumes: list[str] = []
    for name, service in services.items():
        mappings = published(service)
        assert len(mappings) == 1, name
        host_ip, host_port, container_port = mappings[0]
        # No password on these servers: they must not listen on every interface.
        assert host_ip == "127.0.0.1", name
        assert container_port == 6379, name
        host_ports.append(host_port)
        volumes.extend(volume.split(":")[0] for volume in service.get("volumes", []))
    assert sorted(host_ports) == [7001, 7002, 7003, 7004, 7005]
    # Each master keeps its own AOF: a shared volume would make them one failure domain.
    assert len(set(volumes)) == 5


def test_containers_in_tests_match_the_compose_file(services: dict[str, dict[str, Any]]) -> None:
    for service in services.values():
        assert service["image"] == IMAGE
        assert command_args(service) == list(SERVER_ARGS)


def test_operations_guide_points_at_the_published_ports(services: dict[str, dict[str, Any]]) -> None:
    guide = (ROOT / "docs" / "operations.md").read_text()
    exported = re.search(r"REDLOCK_MASTERS=(\S+)", guide)
    assert exported is not None
    ports = sorted(published(service)[0][1] for service in services.values())
    assert exported.group(1) == ",".join(f"redis://127.0.0.1:{port}" for port in ports)


@pytest.mark.docker
def test_masters_in_containers_hold_a_lock(docker_masters: list[str]) -> None:
    for url in docker_masters:
        with redis.Redis.from_url(url, socket_timeout=5) as client:
            assert client.config_get("appendfsync") == {"appendfsync": "always"}
            assert client.info("replication")["connected_slaves"] == 0
    with Redlock(docker_masters) as rl, rl.lock("compose:smoke", ttl=5.0) as lock:
        assert lock.locked()
