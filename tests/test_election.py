"""Leader election (``Redlock.election``), on real masters, through both public APIs.

Each integration test runs once per API (the ``client`` fixture); the asyncio Election is
driven through :class:`BlockingElection`, which runs its coroutines on the test loop's
thread. Observations are collected by a background reader into a queue, and every wait
on one is bounded by a generous timeout: nothing here measures speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

import redlock
import redlock.asyncio
from redlock import LockLost, QuorumUnavailable
from redlock._api.election import UNCHANGED, Observer, default_observe_interval
from redlock._api.state import identity_of, identity_token
from redlock._protocol.config import MAX_IDENTITY_BYTES, check_identity
from redlock._protocol.core import Pause, Request, Round
from redlock._protocol.flows import LockSpec
from redlock._protocol.kinds import FENCED
from redlock.exceptions import NodeStatus
from redlock.servers import LocalMasters

from .conftest import BlockingRedlock, ClientFactory, MastersFactory, eventually, unique
from .model import drive

WAIT = 30.0


# --- the pure parts ------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=60).filter(str.isprintable))
def test_a_token_carries_any_printable_identity(identity: str) -> None:
    token = identity_token(identity)
    assert identity_of(token) == identity
    assert identity_of(identity_token(identity)) == identity
    assert identity_token(identity) != token  # the random part keeps tokens unique


@given(st.text(max_size=300))
def test_an_identity_is_accepted_exactly_when_printable_encodable_and_bounded(identity: str) -> None:
    try:
        size = len(identity.encode())
    except UnicodeEncodeError:
        size = None
    valid = bool(identity) and size is not None and size <= MAX_IDENTITY_BYTES and identity.isprintable()
    if valid:
        assert check_identity(identity) == identity
    else:
        with pytest.raises(ValueError, match="identity"):
            check_identity(identity)


@pytest.mark.parametrize("token", [None, "", "ab" * 20, "ab" * 20 + "@", "x" * 40 + "@id", "ab" * 20 + ":id"])
def test_tokens_without_an_identity_carry_none(token: str | None) -> None:
    assert identity_of(token) is None


SPEC = LockSpec("e", 3.0, ("A", "B", "C"), 0.05, 0.01, 0.2, 10.0, kind=FENCED)


def _inspect_reply(round_: Round, token: str | None, holders: int) -> None:
    for node in round_.targets:
        value = token.encode() if token is not None and node < holders else None
        round_.record(node, NodeStatus.GRANTED, reply=[1, value, 3000 if value else -2, [], None, -2])


def observe_step(
    observer: Observer, now: float, wake_at: float | None, token: str | None, holders: int = 3
) -> tuple[object, Pause | None]:
    """One step of ``observer``: woken at ``wake_at`` (None: when its pause ends), and the
    first ``holders`` masters holding ``token``; what it reported, and how it paused."""
    requests: list[Request] = []

    def answer(request: Request) -> float:
        requests.append(request)
        if isinstance(request, Pause):
            return now + request.seconds if wake_at is None else wake_at
        _inspect_reply(request, token, holders)
        return now

    result = drive(observer.step(now), answer)
    assert [type(request) for request in requests] in ([Round], [Pause, Round])  # a pause at most, then a look
    pause = requests[0] if isinstance(requests[0], Pause) else None
    return observer.seen(result), pause


def test_observer_reports_changes_only_and_looks_again_soon_after_a_release() -> None:
    observer = Observer(SPEC, interval=1.0)
    leader = identity_token("host-a:1")
    assert observe_step(observer, 0.0, None, None) == (None, None)  # the first step looks at once
    seen, pause = observe_step(observer, 0.0, None, leader)
    assert seen == "host-a:1"
    assert pause == Pause(1.0, wake_on="e")
    assert observe_step(observer, 0.0, None, leader)[0] is UNCHANGED
    assert observe_step(observer, 0.0, None, leader, holders=1)[0] is None  # a minority is no leader
    seen, _ = observe_step(observer, 0.0, 0.3, None)  # woken by a release announcement
    assert seen is UNCHANGED
    _, pause = observe_step(observer, 10.0, None, None)
    assert pause is not None
    assert pause.seconds == SPEC.retry_delay  # the takeover is near: look again soon
    _, pause = observe_step(observer, 20.0, None, None)
    assert pause is not None
    assert pause.seconds == 1.0


@given(st.lists(st.tuples(st.sampled_from([None, "a", "b:1"]), st.integers(0, 3), st.booleans()), max_size=25))
def test_observer_reports_exactly_each_change_of_the_majoritys_holder(
    looks: list[tuple[str | None, int, bool]],
) -> None:
    observer = Observer(SPEC, interval=0.5)
    reported, leaders = [], []
    now = 0.0
    for identity, holders, woken in looks:
        token = None if identity is None else identity_token(identity)
        seen, pause = observe_step(observer, now, now + 0.01 if woken else None, token, holders)
        assert pause is None or pause.seconds in (0.5, SPEC.retry_delay)
        now += 1.0
        if seen is not UNCHANGED:
            reported.append(seen)
        leaders.append(identity if holders >= SPEC.quorum else None)
    assert reported == [leader for i, leader in enumerate(leaders) if i == 0 or leader != leaders[i - 1]]


def test_default_observe_interval() -> None:
    assert default_observe_interval(10.0) == 1.0
    assert default_observe_interval(1.5) == 0.5


# --- the API's surface --------------------------------------------------------------------------


class BlockingElection:
    """An asyncio Election seen through the sync Election's surface."""

    def __init__(self, rl: BlockingRedlock, election: redlock.asyncio.Election) -> None:
        self._run = rl._loop.run
        self._loop = rl._loop.loop
        self.inner = election

    name = property(lambda self: self.inner.name)
    identity = property(lambda self: self.inner.identity)
    is_leader = property(lambda self: self.inner.is_leader)
    term = property(lambda self: self.inner.term)
    lock = property(lambda self: self.inner.lock)

    def campaign(self, timeout: float | None = None) -> bool:
        return self._run(self.inner.campaign(timeout))

    def resign(self) -> None:
        self._run(self.inner.resign())

    def leader(self) -> str | None:
        return self._run(self.inner.leader())

    def __enter__(self) -> BlockingElection:
        self._run(self.inner.__aenter__())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._run(self.inner.__aexit__(*exc_info))


def election(rl: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(rl, BlockingRedlock):
        return BlockingElection(rl, rl.inner.election(*args, **kwargs))
    return rl.election(*args, **kwargs)


class Observation:
    """``observe()`` read in the background (a thread, or a task of the test loop) into a queue."""

    def __init__(self, subject: Any) -> None:
        self.seen: queue.Queue[object] = queue.Queue()
        self._stop = threading.Event()
        if isinstance(subject, BlockingElection):
            inner = subject.inner

            async def read() -> None:
                async for leader in inner.observe():
                    self.seen.put(leader)

            self._task = asyncio.run_coroutine_threadsafe(read(), subject._loop)
            self._thread: threading.Thread | None = None
        else:

            def read_sync() -> None:
                # Ends at the next change after stop(), or when the client closes.
                with contextlib.suppress(redlock.ClientClosed), _closing(subject.observe()) as changes:
                    for leader in changes:
                        self.seen.put(leader)
                        if self._stop.is_set():
                            return

            self._thread = threading.Thread(target=read_sync, daemon=True)
            self._thread.start()

    def next(self) -> object:
        return self.seen.get(timeout=WAIT)

    def stop(self) -> None:
        if self._thread is None:
            self._task.cancel()
        else:
            self._stop.set()  # the thread ends at the next change, or with its client


class _closing:
    def __init__(self, generator: Iterator[str | None]) -> None:
        self.generator = generator

    def __enter__(self) -> Iterator[str | None]:
        return self.generator

    def __exit__(self, *exc_info: object) -> None:
        self.generator.close()  # type: ignore[attr-defined]


def test_a_lone_campaigner_leads_and_others_see_it(client: ClientFactory, masters: LocalMasters) -> None:
    rl, other = client(masters.urls), client(masters.urls)
    name = unique("election")
    candidate = election(rl, name, ttl=2.0, identity="host-a:1234")
    watcher = election(other, name, ttl=2.0, identity="watcher")
    assert not candidate.is_leader
    assert candidate.term is None
    assert watcher.leader() is None
    assert candidate.campaign()
    assert candidate.is_leader
    assert isinstance(candidate.term, int)
    assert candidate.campaign()  # already leader: at once
    assert watcher.leader() == "host-a:1234"
    assert not watcher.is_leader
    candidate.resign()
    assert not candidate.is_leader
    assert candidate.term is None
    assert watcher.leader() is None
    candidate.resign()  # nothing to resign: nothing happens


def test_terms_increase_across_successive_leaders(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique("election")
    a, b = election(rl, name, ttl=2.0, identity="a"), election(rl, name, ttl=2.0, identity="b")
    terms = []
    for campaigner in (a, b, a, b):
        assert campaigner.campaign(timeout=WAIT)
        terms.append(campaigner.term)
        campaigner.resign()
    assert terms == sorted(terms)
    assert len(set(terms)) == len(terms)


def test_a_second_campaigner_waits_then_takes_over_on_resign(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    name = unique("election")
    first = election(client(masters.urls), name, ttl=2.0, identity="first")
    second = election(client(masters.urls), name, ttl=2.0, identity="second")
    assert first.campaign()
    assert not second.campaign(timeout=0.3)
    # Nothing of the failed campaign is left: every master holds the leader's token or none.
    assert eventually(lambda: {r.get(name) for r in raw} <= {first.lock.token.encode(), None})
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(second.campaign)
        first.resign()
        assert waiting.result(timeout=WAIT)
    assert second.is_leader
    assert not first.is_leader
    assert second.leader() == "second"
    second.resign()


def test_a_leader_that_stops_extending_is_replaced_after_its_ttl(client: ClientFactory, masters: LocalMasters) -> None:
    name = unique("election")
    gone = client(masters.urls)
    first = election(gone, name, ttl=1.0, identity="first")
    second = election(client(masters.urls), name, ttl=1.0, identity="second")
    assert first.campaign()
    term = first.term
    gone.close()  # the process goes away without resigning: its renewer stops with it
    assert second.campaign(timeout=WAIT)
    assert second.term > term
    assert second.leader() == "second"
    second.resign()


def test_observe_sees_every_change_of_leader(client: ClientFactory, masters: LocalMasters) -> None:
    name = unique("election")
    a = election(client(masters.urls), name, ttl=2.0, identity="a")
    b = election(client(masters.urls), name, ttl=2.0, identity="b")
    watcher = election(client(masters.urls), name, ttl=2.0, identity="watcher", observe_interval=0.1)
    observation = Observation(watcher)
    try:
        assert observation.next() is None
        assert a.campaign()
        assert observation.next() == "a"
        a.resign()
        assert observation.next() is None
        assert b.campaign()
        assert observation.next() == "b"
        b.resign()
        assert observation.next() is None
    finally:
        observation.stop()
    assert not watcher.is_leader  # observing campaigns for nothing


def test_leadership_lost_is_reported_like_a_lost_lock(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique("election")
    lost: list[Any] = []
    told = threading.Event()

    def on_lost(who: Any) -> None:
        lost.append(who)
        told.set()

    leader = election(rl, name, ttl=1.0, identity="a", on_lost=on_lost)
    assert leader.campaign()
    rl.force_release(name)  # an operator deletes the keys: the next extension finds them gone
    assert told.wait(WAIT)
    inner = leader.inner if isinstance(leader, BlockingElection) else leader
    assert lost == [inner]
    assert not leader.is_leader
    with pytest.raises(LockLost):
        leader.resign()
    assert leader.term is None


def test_a_with_block_raises_lock_lost_when_leadership_is_lost(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique("election")
    leader = election(rl, name, ttl=1.0, identity="a")
    with pytest.raises(LockLost), leader:
        assert leader.is_leader
        rl.force_release(name)
        assert eventually(lambda: not leader.is_leader, WAIT)


def test_cancel_on_lost_cancels_the_leaders_work(masters: LocalMasters) -> None:
    async def main() -> None:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            name = unique("election")
            leader = rl.election(name, ttl=1.0, identity="a", cancel_on_lost=True)
            with pytest.raises(LockLost):
                async with leader:
                    await rl.force_release(name)
                    await asyncio.sleep(WAIT)  # cancelled when the renewer finds the keys gone
            assert not leader.is_leader

    asyncio.run(asyncio.wait_for(main(), 2 * WAIT))


def test_a_plain_lock_is_no_leader(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique("election")
    lock = rl.lock(name, 2.0)
    assert lock.acquire()
    assert election(rl, name, identity="a").leader() is None
    lock.release()


def test_campaign_stands_by_through_an_outage(client: ClientFactory, fresh_masters: MastersFactory) -> None:
    cluster = fresh_masters(3)
    rl = client(cluster.urls, retry_delay=0.05, unavailable_timeout=0.2)
    candidate = election(rl, unique("election"), ttl=2.0, identity="a")
    for index in range(3):
        cluster[index].kill()
    with pytest.raises(QuorumUnavailable):
        candidate.campaign(timeout=0.3)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(candidate.campaign)
        # Past unavailable_timeout: a lock's acquire would have given up by now, not a campaign.
        threading.Event().wait(0.5)
        assert not waiting.done()
        for index in range(3):
            cluster[index].restart(wipe=True)
        assert waiting.result(timeout=WAIT)
    assert candidate.is_leader
    candidate.resign()


def test_a_cancelled_campaign_stops_and_leaves_nothing_behind(masters: LocalMasters, raw: list[redis.Redis]) -> None:
    name = unique("election")

    async def main() -> bytes:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1, retry_delay=0.02) as rl:
            leader = rl.election(name, ttl=2.0, identity="leader")
            assert await leader.campaign()
            assert leader.lock.token is not None
            waiting = asyncio.ensure_future(rl.election(name, ttl=2.0, identity="waiting").campaign())
            await asyncio.sleep(0.2)  # a few attempts, refused: it waits for a release
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            token = leader.lock.token.encode()
            await asyncio.sleep(0.1)  # let the rollback's stragglers land
            await leader.resign()
            return token

    token = asyncio.run(asyncio.wait_for(main(), WAIT))
    # While the leader led, only its token was anywhere; after its resign, nothing is.
    assert token.endswith(b"@leader")
    assert eventually(lambda: all(r.get(name) is None for r in raw))


# --- bad arguments, before any traffic ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"identity": ""}, ValueError, "identity"),
        ({"identity": 7}, TypeError, "identity"),
        ({"identity": "a\nb"}, ValueError, "identity"),
        ({"identity": "\x00"}, ValueError, "identity"),
        ({"identity": "\ud800"}, ValueError, "identity"),
        ({"identity": "x" * (MAX_IDENTITY_BYTES + 1)}, ValueError, "identity"),
        ({"identity": "é" * (MAX_IDENTITY_BYTES // 2 + 1)}, ValueError, "identity"),
        ({"observe_interval": 0}, ValueError, "observe_interval"),
        ({"on_lost": "no"}, TypeError, "on_lost"),
        ({"ttl": 0.01}, ValueError, "ttl"),
        ({"lock_delay": -1}, ValueError, "lock_delay"),
        ({"name": ["e", "f"]}, TypeError, "name"),
    ],
)
@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_bad_arguments_fail_before_any_traffic(api: str, kwargs: dict[str, Any], error: type, match: str) -> None:
    # Nothing listens there: an argument error must come before any attempt to connect.
    urls = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"]
    kwargs = {"identity": "ok", **kwargs}
    if api == "sync":
        with redlock.Redlock(urls) as rl, pytest.raises(error, match=match):
            rl.election(kwargs.pop("name", "e"), **kwargs)
        return

    async def main() -> None:
        async with redlock.asyncio.Redlock(urls) as rl:
            with pytest.raises(error, match=match):
                rl.election(kwargs.pop("name", "e"), **kwargs)

    asyncio.run(main())


def test_the_default_identity_names_host_and_process(masters: LocalMasters) -> None:
    with redlock.Redlock(masters.urls) as rl:
        assert rl.election(unique("election")).identity.endswith(f":{__import__('os').getpid()}")
