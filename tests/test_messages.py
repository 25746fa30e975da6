"""What the library says, read as text: the words a person acts on."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

import redlock
import redlock.asyncio
from redlock.servers import LocalMasters

from .conftest import unique


def test_a_sync_with_on_asyncio_objects_says_to_use_async_with(masters: LocalMasters) -> None:
    async def main() -> None:
        rl = redlock.asyncio.Redlock(masters.urls)
        try:
            for used in (rl, rl.lock(unique()), rl.semaphore(unique(), limit=2), rl.election(unique())):
                with pytest.raises(TypeError, match="'async with', not 'with'"), used:  # type: ignore[attr-defined]
                    pass
        finally:
            await rl.aclose()

    asyncio.run(main())


def test_fewer_than_three_masters_are_accepted_with_a_warning(
    masters: LocalMasters, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="redlock"), redlock.Redlock(masters.urls[:1]) as one:
        assert repr(one).startswith("<Redlock 1 master: ")
    with caplog.at_level(logging.WARNING, logger="redlock"), redlock.Redlock(masters.urls[:2]) as two:
        assert repr(two).startswith("<Redlock 2 masters: ")
    said = [record.getMessage() for record in caplog.records]
    assert any("1 master: a single point of failure" in line for line in said)
    assert any("2 masters: no master may fail" in line for line in said)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="redlock"), redlock.Redlock(masters.urls[:3]):
        pass
    assert not caplog.records


def test_a_hung_master_is_said_in_words_with_how_long_it_waited(
    fresh_masters: object, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = fresh_masters(3)  # type: ignore[operator]
    with redlock.Redlock(cluster.urls, node_timeout=0.05, wake_on_release=False) as rl:
        lock = rl.lock(unique(), ttl=10.0)
        assert lock.acquire(blocking=False)
        cluster[2].pause()
        try:
            with caplog.at_level(logging.WARNING, logger="redlock"):
                lock.release()  # the two others confirm it; C's reply is waited for, then not
                time.sleep(0.3)  # C owes it past four node_timeouts: it looks hung
                for _ in range(3):  # rounds that find C owing a reply for long: hung
                    other = rl.lock(unique(), ttl=10.0)
                    assert other.acquire(blocking=False)
                    other.release()
        finally:
            cluster[2].resume()
    said = "\n".join(record.getMessage() for record in caplog.records)
    assert f"master {cluster[2].host}:{cluster[2].port} does not answer in time: hung: no reply for" in said
    assert "is timeout" not in said
    assert "earlier replies unanswered" not in said
