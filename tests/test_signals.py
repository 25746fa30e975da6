"""Signals at any point: a handler that raises (as Python's SIGINT handler does) never
crashes the process, whatever C code it lands in.

Pure: the encoding of commands is where a signal met C code that mishandled it
(``hiredis.pack_command`` made an ``int`` text with ``PyObject_Repr``, which ran the handler
and then used the NULL its exception left: SIGSEGV). A child process takes a storm of raising
handlers, one every 0.1 ms, for two seconds, in the encoding alone, so that the storm lands
on every instruction of it; the child must end on its own, having been interrupted often.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from types import FrameType
from typing import Any

import pytest
import redis

import redlock
import redlock._io.aio
import redlock.asyncio
from redlock.servers import LocalMasters

from .cli_helpers import PATIENCE
from .conftest import MastersFactory, eventually, raw_clients, unique

STORM = """
import signal, sys, time
from redlock._protocol import connection as _connection

class Tick(Exception):
    pass

deadline = time.monotonic() + 2.0

def handler(signum, frame):
    # Only in the encoding (its own lines, or the call into hiredis): the loop stays calm.
    code = frame.f_code if frame is not None else None
    inside = code is not None and (code.co_filename == _connection.__file__ or code.co_name == "encode_once")
    if inside and time.monotonic() < deadline:
        raise Tick

def encode_once():
    return _connection.encode(("SET", "k", "v", "PX", 3000, "EX", 10**30))

signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
interrupted = encoded = 0
while time.monotonic() < deadline:
    try:
        encode_once()
        encoded += 1
    except Tick:
        interrupted += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print(interrupted, encoded)
"""


def test_a_storm_of_raising_signal_handlers_in_the_encoding_never_crashes() -> None:
    done = subprocess.run([sys.executable, "-c", STORM], capture_output=True, text=True, timeout=PATIENCE, check=False)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    interrupted, encoded = map(int, done.stdout.split())
    assert interrupted >= 100, "the storm hardly landed: the test proves nothing"
    assert encoded >= 1000


# --- interruptions of lock calls: the Lock and the masters agree afterwards -------------------


class Interrupt(BaseException):
    """What a Ctrl-C handler raises: a BaseException, as KeyboardInterrupt is."""


LIBRARY = str(pathlib.Path(redlock.__file__).parent)


@contextlib.contextmanager
def interruptions() -> Iterator[Callable[[float], contextlib.AbstractContextManager[None]]]:
    """``within(delay)``: a context in which one SIGALRM, ``delay`` seconds in, raises
    :class:`Interrupt` if it lands in the library's code (or in a C call it made), and
    nowhere else, so that whatever escapes comes out of the call under test."""
    armed = False

    def handler(signum: int, frame: FrameType | None) -> None:
        if armed and frame is not None and frame.f_code.co_filename.startswith(LIBRARY):
            raise Interrupt

    @contextlib.contextmanager
    def within(delay: float) -> Iterator[None]:
        nonlocal armed
        armed = True
        signal.setitimer(signal.ITIMER_REAL, delay)
        try:
            yield
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        yield within
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def keys_gone(raw: list[redis.Redis], name: str) -> bool:
    return not any(client.exists(name) for client in raw)


def holders(raw: list[redis.Redis], name: str, token: str) -> list[int]:
    """The masters whose key ``name`` holds ``token``."""
    return [i for i, client in enumerate(raw) if client.get(name) == token.encode()]


def where(interruption: BaseException) -> str:
    """Where the interruption struck, innermost frame first."""
    frames = reversed(traceback.extract_tb(interruption.__traceback__))
    return " <- ".join(f"{frame.name}:{frame.lineno}" for frame in frames)


def disagreement(lock: redlock.Lock, token: str, raw: list[redis.Redis], call: str) -> str | None:
    """How the Lock and the masters disagree after an interrupted ``call``, or None.

    Held, the Lock must be right that a majority keeps its token at least as long as it
    believes (its deadline); not held, no master may keep its token: the deletes were sent
    (a loaded master may answer after the round's bound, so they are waited for)."""
    if lock.locked():
        left = lock.deadline - time.monotonic()
        kept = [i for i in holders(raw, lock.name, token) if raw[i].pttl(lock.name) >= left * 1000]
        if len(kept) < lock.quorum:
            return f"{call}() raised, the Lock holds for {left:.3f}s more, but only masters {kept} keep its key as long"
        return None
    if not eventually(lambda: not holders(raw, lock.name, token), within=5.0):
        return f"{call}() raised, the Lock holds nothing, yet masters {holders(raw, lock.name, token)} keep its token"
    return None


def interrupted_calls(
    masters: LocalMasters, call: str, wanted: int, seed: int, *, neighbours: int = 0
) -> tuple[int, list[str]]:
    """Calls of ``call`` (acquire, extend or release), each with an interruption due at a
    random moment of its first 0.6 ms (one takes 0.2 to 0.5), until ``wanted`` were
    interrupted (at most 50 calls each: compiled, fewer moments of a call run Python code
    that a handler can interrupt); how many were interrupted, and
    every way the Lock and the masters disagreed afterwards. ``neighbours`` threads lock and
    unlock names of their own on the same client meanwhile (the interrupted main thread may
    be reading their replies for them): each must go on unharmed."""
    rng = random.Random(seed)
    interrupted, violations = 0, []
    rl = redlock.Redlock(masters.urls, node_timeout=0.1)
    storm_over = threading.Event()

    def neighbour() -> None:
        # A send the main thread's interruption cut leaves its connections in an unknown
        # state, and they are dropped: a neighbour's round on them may then fall short of a
        # majority (retryable errors, never a loss). Its Lock and the masters must agree.
        rounds = 0
        try:
            with raw_clients(masters.urls) as raw:
                while not storm_over.is_set():
                    lock = rl.lock(unique(), ttl=10.0)
                    with contextlib.suppress(redlock.QuorumUnavailable):
                        if not lock.acquire(blocking=False):
                            violations.append(f"a neighbour was refused a name nobody else uses: {lock.outcomes}")
                            return
                    if lock.locked():
                        with contextlib.suppress(redlock.ExtendUnconfirmed):
                            lock.extend()
                        for _ in range(5):
                            with contextlib.suppress(redlock.ReleaseUnconfirmed):
                                lock.release()
                                break
                    if lock.token is not None or not eventually(lambda n=lock.name: keys_gone(raw, n), within=5.0):
                        violations.append(f"a neighbour's {lock.name} stayed held (token {lock.token})")
                    rounds += 1
        except Exception as error:
            violations.append(f"a neighbour thread failed after {rounds} rounds: {error!r}")
        if rounds == 0:
            violations.append("a neighbour thread made no progress")

    threads = [threading.Thread(target=neighbour, name=f"neighbour-{i}") for i in range(neighbours)]
    try:
        for thread in threads:
            thread.start()
        with interruptions() as within, raw_clients(masters.urls) as raw:
            rl.lock(unique(), ttl=10.0).acquire(blocking=False)  # connected: the storm hits rounds
            for _ in range(50 * wanted):
                if interrupted >= wanted:
                    break
                lock = rl.lock(unique(), ttl=10.0)
                if call != "acquire":
                    assert lock.acquire(blocking=False)
                try:
                    with within(rng.uniform(0.00001, 0.0006)):
                        getattr(lock, call)(**({"blocking": False} if call == "acquire" else {}))
                except Interrupt as interruption:
                    interrupted += 1
                    # An acquire's token is the Lock's only if it holds: any key is then its.
                    token = lock.token or next((v.decode() for v in (c.get(lock.name) for c in raw) if v), "")
                    found = disagreement(lock, token, raw, call) if token else None
                    if lock.locked() and call == "acquire":
                        found = f"acquire() raised, yet locked() is True ({found or 'its keys agree'})"
                    if found is not None:
                        violations.append(f"{lock.name}: {found}; struck at {where(interruption)}")
                if lock.locked():
                    lock.release()
    finally:
        storm_over.set()
        for thread in threads:
            thread.join(timeout=30)
            if thread.is_alive():
                violations.append(f"{thread.name} still runs 30 s after the storm: hung")
        rl.close()
    return interrupted, violations


@pytest.mark.parametrize("call", ["acquire", "extend", "release"])
def test_an_interrupted_call_leaves_the_lock_and_the_masters_agreeing(masters: LocalMasters, call: str) -> None:
    interrupted, violations = interrupted_calls(masters, call, wanted=40, seed=1)
    assert not violations, violations
    assert interrupted == 40, f"only {interrupted} calls of 2,000 were interrupted: the test proves little"


def test_threads_sharing_the_client_go_on_while_the_main_thread_is_interrupted(masters: LocalMasters) -> None:
    interrupted, violations = interrupted_calls(masters, "acquire", wanted=40, seed=3, neighbours=3)
    assert not violations, violations
    assert interrupted == 40, f"only {interrupted} calls of 2,000 were interrupted: the test proves little"


@pytest.mark.slow
@pytest.mark.parametrize("call", ["acquire", "extend", "release"])
def test_six_hundred_interrupted_calls_leave_the_lock_and_the_masters_agreeing(
    masters: LocalMasters, call: str
) -> None:
    interrupted, violations = interrupted_calls(masters, call, wanted=600, seed=2)
    assert not violations, violations
    assert interrupted == 600, f"only {interrupted} calls of 30,000 were interrupted"


_HUNG = "did not return within PATIENCE: hung"


@contextlib.asynccontextmanager
async def _or_hung(violations: list[str], what: str) -> AsyncIterator[None]:
    """A call that never returns is a violation the test reports, not a run that hangs."""
    try:
        async with asyncio.timeout(PATIENCE):
            yield
    except TimeoutError:
        violations.append(f"{what} {_HUNG}")


def interrupted_tasks(masters: LocalMasters, call: str, wanted: int, seed: int, how: str) -> tuple[int, list[str]]:
    """As :func:`interrupted_calls`, for the asyncio API: each call runs as a task, and at a
    random moment of its first 0.6 ms the task is cancelled (``how`` "cancel") or a signal
    handler raises wherever the loop's thread runs the library's code (``how`` "signal"):
    in the task, or in a callback of the event loop (a reply being read, a timer), where
    asyncio closes that connection. Until ``wanted`` calls were struck (one the call had
    finished before is not counted); after each, and after any error of a call, the Lock and
    the masters must agree."""
    rng = random.Random(seed)

    async def storm() -> tuple[int, list[str]]:
        struck, violations = 0, []
        rl = redlock.asyncio.Redlock(masters.urls, node_timeout=0.1)
        loop = asyncio.get_running_loop()
        try:
            await rl.lock(unique(), ttl=10.0).acquire(blocking=False)  # connected
            with interruptions() as within, raw_clients(masters.urls) as raw:
                for _ in range(50 * wanted):
                    if struck >= wanted:
                        break
                    lock = rl.lock(unique(), ttl=10.0)
                    if call != "acquire":
                        with contextlib.suppress(redlock.RedlockError):
                            async with _or_hung(violations, "an acquire after the strikes"):
                                await lock.acquire(blocking=False)
                        if violations and violations[-1].endswith(_HUNG):
                            break
                        if not lock.locked():
                            continue  # (a connection the last strike closed: no majority yet)
                    arguments = {"blocking": False} if call == "acquire" else {}
                    delay = rng.uniform(0.00001, 0.0006)
                    failed: BaseException | None = None
                    try:
                        if how == "cancel":
                            task = asyncio.ensure_future(getattr(lock, call)(**arguments))
                            loop.call_later(delay, task.cancel)
                            await task
                        else:
                            async with _or_hung(violations, f"a struck {call}"):
                                with within(delay):
                                    await getattr(lock, call)(**arguments)
                            if violations and violations[-1].endswith(_HUNG):
                                break
                    except (asyncio.CancelledError, Interrupt) as strike:
                        struck += 1
                        failed = strike
                    except redlock.RedlockError as error:
                        failed = error
                    if failed is None:
                        continue
                    token = lock.token or next((v.decode() for v in (c.get(lock.name) for c in raw) if v), "")
                    # In a thread: the loop must run on meanwhile, to finish what the struck
                    # call left to finish (a release's deletes).
                    found = await asyncio.to_thread(disagreement, lock, token, raw, call) if token else None  # type: ignore[arg-type]
                    if lock.locked() and call == "acquire":
                        found = f"acquire() raised, yet locked() is True ({found or 'its keys agree'})"
                    if found is not None:
                        violations.append(f"{lock.name}: {found} (after {failed!r})")
                    if lock.locked():
                        with contextlib.suppress(redlock.RedlockError):
                            await lock.release()
        finally:
            await rl.aclose()
        return struck, violations

    return asyncio.run(storm())


# A signal handler that raises in the loop's thread also strikes asyncio's own machinery: a
# connect's `async with asyncio.timeout()` left un-exited is collected as a coroutine never
# awaited, which says nothing of the lock. (Before each connection dropped itself on such an
# exception, one of them stalled for good: 3 of 5 answered nothing for minutes.)
SIGNALS_IN_ASYNCIO = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning", "ignore::ResourceWarning"
)


def collected_here() -> None:
    """What a storm left for the collector (a connect's transport, struck before it was
    handed over) is collected now, under this test's filters, not in a later test (which
    would fail on an unclosed transport it never made)."""
    gc.collect()
    gc.collect()


@SIGNALS_IN_ASYNCIO
@pytest.mark.parametrize("how", ["cancel", "signal"])
@pytest.mark.parametrize("call", ["acquire", "extend", "release"])
def test_a_struck_task_leaves_the_lock_and_the_masters_agreeing(masters: LocalMasters, call: str, how: str) -> None:
    struck, violations = interrupted_tasks(masters, call, wanted=20, seed=4, how=how)
    collected_here()
    assert not violations, violations
    assert struck == 20, f"only {struck} calls of 1,000 were struck: the test proves little"


@pytest.mark.slow
@SIGNALS_IN_ASYNCIO
@pytest.mark.parametrize("how", ["cancel", "signal"])
@pytest.mark.parametrize("call", ["acquire", "extend", "release"])
def test_hundreds_of_struck_tasks_leave_the_lock_and_the_masters_agreeing(
    masters: LocalMasters, call: str, how: str
) -> None:
    # A strike in a reply being read closes that connection: the reconnects make 200 signals
    # take about as long as 600 cancellations.
    wanted = 600 if how == "cancel" else 200
    struck, violations = interrupted_tasks(masters, call, wanted=wanted, seed=5, how=how)
    collected_here()
    assert not violations, violations
    # The strength of the storm, not an outcome: on a loaded machine a call can end before
    # its strike comes (CI once struck 106 of 10,000 extends, with no violation). Half the
    # strikes wanted still prove what the test is for.
    assert struck >= wanted // 2, f"only {struck} calls of {50 * wanted} were struck"


_HANDSHAKE = {b"AUTH", b"HELLO", b"CLIENT", b"INFO", b"COMMAND", b"SCRIPT", b"SELECT", b"PING"}


def _after_the_handshake(data: bytes) -> bytes:
    """The commands of ``data`` (RESP arrays of bulk strings) after its last handshake command."""
    commands, at = [], 0
    while at < len(data):
        start = at
        count, at = int(data[at + 1 : data.index(b"\r\n", at)]), data.index(b"\r\n", at) + 2
        words = []
        for _ in range(count):
            size, at = int(data[at + 1 : data.index(b"\r\n", at)]), data.index(b"\r\n", at) + 2
            words.append(data[at : at + size])
            at += size + 2
        commands.append((words[0].upper(), data[start:at]))
    last = max((i for i, (word, _) in enumerate(commands) if word in _HANDSHAKE), default=-1)
    return b"".join(raw for _, raw in commands[last + 1 :])


class _StruckAtTheHandshake(redlock._io.aio.Driver):
    """A signal handler's exception lands once in a new connection's handshake, after the
    policy counted its commands sent: the handshake's bytes are lost, what was queued behind
    them (the round that asked for the connection) goes out."""

    struck = False

    def _write(self, conn: Any, data: bytes) -> None:
        if b"AUTH" in data and not _StruckAtTheHandshake.struck:
            _StruckAtTheHandshake.struck = True
            rest = _after_the_handshake(data)
            assert rest, "no command waited behind the handshake: the strike would prove nothing"
            super()._write(conn, rest)
            raise Interrupt("in the handshake's write")
        super()._write(conn, data)


@SIGNALS_IN_ASYNCIO
def test_a_handshake_struck_before_its_bytes_left_starts_that_connection_over(
    fresh_masters: MastersFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left as it was, the connection sent the next command unauthenticated, read the master's
    NOAUTH as the answer to AUTH, and counted that master misconfigured (a release's delete
    then never reached it: CI's asyncio signal storm saw a token outlive its release)."""
    cluster = fresh_masters(3)  # each with a password: the handshake starts with AUTH
    monkeypatch.setattr(redlock.asyncio.Redlock, "_driver_class", _StruckAtTheHandshake)
    monkeypatch.setattr(_StruckAtTheHandshake, "struck", False)

    async def main() -> list[list[redlock.NodeStatus]]:
        seen = []
        async with redlock.asyncio.Redlock(cluster.urls, node_timeout=0.5) as rl:
            deadline = time.monotonic() + PATIENCE
            while time.monotonic() < deadline:
                lock = rl.lock(unique(), ttl=10.0)
                with contextlib.suppress(redlock.RedlockError):
                    await lock.acquire(blocking=False)
                seen.append([outcome.status for outcome in lock.outcomes])
                if lock.locked():
                    await lock.release()
                if all(status is redlock.NodeStatus.GRANTED for status in seen[-1]):
                    break
                await asyncio.sleep(0.05)
        return seen

    seen = asyncio.run(main())
    assert _StruckAtTheHandshake.struck
    assert all(redlock.NodeStatus.MISCONFIGURED not in statuses for statuses in seen), seen
    assert all(status is redlock.NodeStatus.GRANTED for status in seen[-1]), seen
