"""``Election.run()``: the campaign loop, on real masters, through both public APIs.

Each integration test runs once per API (the ``client`` fixture); :class:`Running` runs
``run()`` in the background (a thread, or a task of the test loop) and records what its
callbacks were told, with the time, into a queue. Orders of events are checked, never how
long something took; every wait is bounded by a generous timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import pathlib
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

import redlock
import redlock.asyncio
from redlock import QuorumUnavailable
from redlock._api.election import Campaign, Elected, Ended, Resign, Runner, Wait, backoff_after_loss
from redlock.servers import LocalMasters

from .conftest import ClientFactory, MastersFactory, eventually, unique
from .test_election import BlockingElection, election

WAIT = 30.0
ROOT = pathlib.Path(__file__).resolve().parent.parent


# --- the pure part: the backoff after a loss ---------------------------------------------------


@given(
    st.integers(1, 200),
    st.floats(0.001, 2.0),
    st.floats(0.05, 60.0),
    st.integers(0, 2**32),
)
def test_the_backoff_after_a_loss_is_jittered_and_bounded(
    losses: int, retry_delay: float, ttl: float, seed: int
) -> None:
    rng = random.Random(seed)
    ceiling = min(ttl, retry_delay * 2 ** min(losses - 1, 32))
    wait = backoff_after_loss(losses, retry_delay, ttl, rng)
    assert ceiling / 2 <= wait <= ceiling <= ttl
    # More losses in a row never shorten the bound.
    assert min(ttl, retry_delay * 2 ** min(losses, 32)) >= ceiling


def test_the_backoff_doubles_then_stops_at_the_ttl() -> None:
    rng = random.Random(1)
    bounds = [max(backoff_after_loss(n, 0.1, 1.0, rng) for _ in range(200)) for n in range(1, 7)]
    assert bounds[0] <= 0.1
    assert 0.1 < bounds[1] <= 0.2
    assert 0.2 < bounds[2] <= 0.4
    assert all(0.5 <= bound <= 1.0 for bound in bounds[4:])


# --- the Runner's steps, against a simulated election (no masters) --------------------------------


class FakeLock:
    """What the Runner reads of an election's Lock, driven by the test."""

    def __init__(self, now: list[float]) -> None:
        self.ttl = 1.0
        self._spec = SimpleNamespace(retry_delay=0.1)
        self._cluster = SimpleNamespace(_clock=lambda: now[0], _rng=random.Random(7))
        self.token: str | None = None
        self.until = 0.0
        self.lost = False

    @property
    def deadline(self) -> float | None:
        return None if self.token is None or self.lost else self.until


class FakeElection:
    name = "e"

    def __init__(self) -> None:
        self.now = [0.0]
        self._lock = FakeLock(self.now)
        self._stop_asked = False
        self.terms = 0

    @property
    def is_leader(self) -> bool:
        deadline = self._lock.deadline
        return deadline is not None and self.now[0] < deadline

    @property
    def term(self) -> int | None:
        return self.terms if self._lock.token is not None else None

    def _nothing_to_resign(self) -> bool:
        return self._lock.token is None


@given(st.lists(st.integers(0, 9), min_size=1, max_size=120))
def test_the_runner_never_leads_past_the_deadline_and_tells_every_end(choices: list[int]) -> None:
    """Whatever the masters answer, whenever the loss and stop() come: a leadership is told
    (Elected), held only until its deadline, told ended (Ended) before anything else, its
    keys resigned before the next campaign, and the run ends with no leadership open."""
    election = FakeElection()
    lock = election._lock
    runner = Runner(election)  # type: ignore[arg-type]
    draws = iter(choices)
    outcome: object = None
    error: BaseException | None = None
    leading = False
    for _ in range(1000):
        step = runner.advance(outcome, error)
        if step is None:
            break
        outcome, error = None, None
        choice = next(draws, 9)  # out of draws: stop()
        if choice == 9:
            election._stop_asked = True
        if isinstance(step, Campaign):
            assert not leading
            assert lock.token is None  # a lost leadership was resigned before campaigning again
            if choice in (0, 1, 2):
                election.terms += 1
                lock.token, lock.lost, lock.until = f"t{election.terms}", False, election.now[0] + 0.9
                outcome = True
            elif choice == 3:
                error = QuorumUnavailable("no majority", resource="e")
            else:
                election.now[0] += step.timeout
                outcome = False
        elif isinstance(step, Elected):
            assert step.term == election.terms
            leading = True
        elif isinstance(step, Wait):
            if leading:
                # Held only until the deadline: the wait ends there at the latest.
                assert election.now[0] + step.seconds <= lock.until + 1e-9
            else:
                assert step.seconds <= lock.ttl
            election.now[0] += step.seconds * (0.5 if choice in (4, 5) else 1.0)
            if leading and choice == 6:
                lock.lost = True  # the renewer found the keys gone
        elif step is Ended.ENDED:
            assert leading
            leading = False
        else:
            assert step is Resign.RESIGN
            assert not leading  # Ended came first
            lock.token = None
    assert step is None, "the run did not end after stop()"
    assert not leading
    assert lock.token is None  # resigned on the way out


# --- run() in the background ---------------------------------------------------------------------


class Running:
    """``election.run(...)`` in the background; what its callbacks are told lands in ``told``
    as ``(event, value, time.monotonic())``: ("elected", term), ("lost", None), ("leader", identity)."""

    def __init__(self, subject: Any, *, observe: bool = False, **callbacks: Any) -> None:
        self.subject = subject
        self.told: queue.Queue[tuple[str, Any, float]] = queue.Queue()
        self.history: list[tuple[str, Any, float]] = []
        self.unread: list[tuple[str, Any, float]] = []
        given = {
            "on_elected": lambda term: self.told.put(("elected", term, time.monotonic())),
            "on_lost": lambda: self.told.put(("lost", None, time.monotonic())),
        }
        if observe:
            given["on_new_leader"] = lambda leader: self.told.put(("leader", leader, time.monotonic()))
        given.update(callbacks)
        self.future: concurrent.futures.Future[None]
        if isinstance(subject, BlockingElection):
            self.inner = subject.inner
            self.future = asyncio.run_coroutine_threadsafe(subject.inner.run(**given), subject._loop)
        else:
            self.inner = subject
            self.future = concurrent.futures.Future()
            threading.Thread(target=self._run_sync, args=(given,), daemon=True).start()

    def _run_sync(self, given: dict[str, Any]) -> None:
        try:
            self.subject.run(**given)
        except BaseException as error:
            self.future.set_exception(error)
        else:
            self.future.set_result(None)

    def next(self, event: str) -> tuple[Any, float]:
        """The next thing told of kind ``event`` (others stay for their own ``next``)."""
        for index, told in enumerate(self.unread):
            if told[0] == event:
                del self.unread[index]
                return told[1], told[2]
        give_up = time.monotonic() + WAIT
        while True:
            try:
                told = self.told.get(timeout=0.1)
            except queue.Empty:
                if self.future.done():
                    self.future.result()  # run() ended: its error, if any, says why
                    pytest.fail(f"run() returned before telling {event!r}")
                if time.monotonic() > give_up:
                    raise
                continue
            self.history.append(told)
            if told[0] == event:
                return told[1], told[2]
            self.unread.append(told)

    def stop(self) -> None:
        self.inner.stop()
        self.future.result(timeout=WAIT)
        while not self.told.empty():
            self.history.append(self.told.get())

    def events(self) -> list[str]:
        return [event for event, _, _ in self.history if event != "leader"]


def test_a_stopped_leader_hands_over_to_the_next(client: ClientFactory, masters: LocalMasters) -> None:
    name = unique("run")
    a = Running(election(client(masters.urls), name, ttl=2.0, identity="a"))
    term_a, _ = a.next("elected")
    b = Running(election(client(masters.urls), name, ttl=2.0, identity="b"))
    a.stop()  # on_lost, then resign: b takes over at once, not after the ttl
    _, lost_at = a.history[-1][1:]
    assert a.events() == ["elected", "lost"]
    term_b, elected_at = b.next("elected")
    assert term_b > term_a
    assert elected_at > lost_at
    assert b.subject.is_leader
    b.stop()
    assert b.events() == ["elected", "lost"]
    assert not b.subject.is_leader


def test_stop_resigns_and_leaves_nothing_on_the_masters(
    client: ClientFactory, masters: LocalMasters, raw: list[redis.Redis]
) -> None:
    name = unique("run")
    leader = Running(election(client(masters.urls), name, ttl=2.0, identity="a"))
    leader.next("elected")
    assert eventually(lambda: all(r.get(name) is not None for r in raw))
    leader.stop()
    assert all(r.get(name) is None for r in raw)
    assert leader.subject.term is None


def test_a_lost_leadership_is_told_then_won_again(client: ClientFactory, masters: LocalMasters) -> None:
    rl = client(masters.urls)
    name = unique("run")
    leader = Running(election(rl, name, ttl=1.0, identity="a"))
    first, _ = leader.next("elected")
    rl.force_release(name)  # an operator deletes the keys: the next extension finds them gone
    leader.next("lost")
    second, _ = leader.next("elected")  # after the backoff, it campaigns and wins again
    assert second > first
    leader.stop()
    assert leader.events() == ["elected", "lost", "elected", "lost"]


def test_a_leader_cut_off_from_the_majority_stops_leading_before_another_leads(
    client: ClientFactory, fresh_masters: MastersFactory
) -> None:
    """A's renewals cannot reach a majority (two of three masters killed): A is told it lost,
    and once the masters are back (after the ttl: a delayed restart), whoever leads next
    was elected only after that."""
    cluster = fresh_masters(3)
    name = unique("run")
    elected: list[tuple[str, float]] = []
    first = threading.Event()

    def recorder(who: str) -> Any:
        def on_elected(term: int) -> None:
            elected.append((who, time.monotonic()))
            first.set()

        return on_elected

    a = Running(election(client(cluster.urls), name, ttl=1.0, identity="a"), on_elected=recorder("a"))
    assert first.wait(WAIT)
    first.clear()
    elected.clear()
    b = Running(election(client(cluster.urls), name, ttl=1.0, identity="b"), on_elected=recorder("b"))
    cluster[0].kill()
    cluster[1].kill()
    _, lost_at = a.next("lost")
    assert not a.subject.is_leader
    time.sleep(1.2)  # every key the killed masters held has expired: a delayed restart
    cluster[0].restart(wipe=True)
    cluster[1].restart(wipe=True)
    assert first.wait(WAIT)  # a (after its backoff) or b leads again
    assert elected[0][1] > lost_at
    a.stop()
    b.stop()


def test_on_new_leader_tells_every_change(client: ClientFactory, masters: LocalMasters) -> None:
    name = unique("run")
    a = Running(election(client(masters.urls), name, ttl=2.0, identity="a", observe_interval=0.1), observe=True)
    assert a.next("leader")[0] in (None, "a")
    a.next("elected")
    b = Running(election(client(masters.urls), name, ttl=2.0, identity="b", observe_interval=0.1), observe=True)
    assert b.next("leader")[0] == "a"
    a.stop()
    assert b.next("leader")[0] in (None, "b")
    b.next("elected")
    b.stop()
    seen = [value for event, value, _ in b.history if event == "leader"]
    assert seen[0] == "a"
    assert seen[-1] in ("b", None)
    assert all(x != y for x, y in itertools.pairwise(seen))


def test_an_error_in_a_callback_resigns_and_is_raised(client: ClientFactory, masters: LocalMasters) -> None:
    name = unique("run")
    lost = threading.Event()

    def on_elected(term: int) -> None:
        raise ValueError("boom")

    running = Running(
        election(client(masters.urls), name, ttl=2.0, identity="a"), on_elected=on_elected, on_lost=lost.set
    )
    with pytest.raises(ValueError, match="boom"):
        running.future.result(timeout=WAIT)
    assert lost.is_set()  # the leadership ended: told, and resigned
    assert not running.subject.is_leader
    assert running.subject.term is None


def test_one_run_at_a_time_and_callbacks_are_checked(client: ClientFactory, masters: LocalMasters) -> None:
    subject = election(client(masters.urls), unique("run"), ttl=2.0, identity="a")
    inner = subject.inner if isinstance(subject, BlockingElection) else subject
    running = Running(subject)
    running.next("elected")
    with pytest.raises(RuntimeError, match="one run"):
        Running(subject).future.result(timeout=WAIT)
    running.stop()
    with pytest.raises(TypeError, match="on_elected"):
        Running(subject, on_elected="no").future.result(timeout=WAIT)
    with pytest.raises(TypeError, match="on_new_leader"):
        Running(subject, on_new_leader=3).future.result(timeout=WAIT)
    assert not inner.is_leader


def test_stop_before_run_makes_it_return_at_once(client: ClientFactory, masters: LocalMasters) -> None:
    subject = election(client(masters.urls), unique("run"), ttl=2.0, identity="a")
    inner = subject.inner if isinstance(subject, BlockingElection) else subject
    inner.stop()
    running = Running(subject)
    running.future.result(timeout=WAIT)
    assert running.told.empty()
    again = Running(subject)  # the stop was used up by the run it ended
    again.next("elected")
    again.stop()


# --- asyncio: cancellation and the leader's work ---------------------------------------------------


def test_a_cancelled_run_resigns_on_the_way_out(masters: LocalMasters, raw: list[redis.Redis]) -> None:
    name = unique("run")
    told: list[str] = []

    async def main() -> None:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            leader = rl.election(name, ttl=2.0, identity="a")
            elected = asyncio.Event()

            def on_elected(term: int) -> None:
                told.append("elected")
                elected.set()

            running = asyncio.ensure_future(leader.run(on_elected=on_elected, on_lost=lambda: told.append("lost")))
            await asyncio.wait_for(elected.wait(), WAIT)
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            assert not leader.is_leader

    asyncio.run(asyncio.wait_for(main(), 2 * WAIT))
    assert told == ["elected", "lost"]
    assert all(r.get(name) is None for r in raw)  # resigned, not left to expire


def test_the_leaders_work_is_a_task_cancelled_when_leadership_ends(masters: LocalMasters) -> None:
    name = unique("run")
    told: list[str] = []

    async def main() -> None:
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            leader = rl.election(name, ttl=1.0, identity="a")
            working = asyncio.Event()

            async def lead(term: int) -> None:
                told.append(f"work {term > 0}")
                working.set()
                try:
                    await asyncio.sleep(WAIT)
                except asyncio.CancelledError:
                    told.append("work cancelled")
                    raise

            async def on_lost() -> None:
                told.append("lost")

            running = asyncio.ensure_future(leader.run(on_elected=lead, on_lost=on_lost))
            await asyncio.wait_for(working.wait(), WAIT)
            working.clear()
            await rl.force_release(name)  # lost: the work is cancelled before on_lost
            await asyncio.wait_for(working.wait(), WAIT)  # and it leads (and works) again
            leader.stop()
            await asyncio.wait_for(running, WAIT)

    asyncio.run(asyncio.wait_for(main(), 2 * WAIT))
    assert told == ["work True", "work cancelled", "lost", "work True", "work cancelled", "lost"]


def test_a_failing_leaders_work_ends_the_run_with_its_error(masters: LocalMasters) -> None:
    name = unique("run")

    async def main() -> list[str]:
        told: list[str] = []
        async with redlock.asyncio.Redlock(masters.urls, node_timeout=0.1) as rl:
            leader = rl.election(name, ttl=2.0, identity="a")

            async def lead(term: int) -> None:
                raise KeyError("broken")

            with pytest.raises(KeyError, match="broken"):
                await asyncio.wait_for(leader.run(on_elected=lead, on_lost=lambda: told.append("lost")), WAIT)
            assert not leader.is_leader
        return told

    assert asyncio.run(main()) == ["lost"]


# --- the sync API: SIGTERM -----------------------------------------------------------------------

SIGTERM_SCRIPT = textwrap.dedent(
    """
    import signal, sys
    import redlock

    with redlock.Redlock(sys.argv[1].split(","), node_timeout=0.1) as rl:
        election = rl.election(sys.argv[2], ttl=2.0, identity="script")
        election.run(on_elected=lambda term: print("elected", flush=True), on_lost=lambda: print("lost", flush=True))
        print("returned", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    """
)


@pytest.mark.servers
def test_sigterm_makes_a_sync_run_resign_and_return(masters: LocalMasters, raw: list[redis.Redis]) -> None:
    name = unique("run")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", SIGTERM_SCRIPT, ",".join(masters.urls), name],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "elected"
            # Granted by a majority; the other masters' SETs may land a moment later.
            assert eventually(lambda: all(r.get(name) is not None for r in raw))
            process.send_signal(signal.SIGTERM)
            rest = process.stdout.read().split("\n")
            assert process.wait(timeout=WAIT) == 0
        finally:
            process.kill()  # (a failed assertion must not leave the with block waiting for it)
    assert rest[:2] == ["lost", "returned True"]
    assert all(r.get(name) is None for r in raw)
