"""The steps the scenarios' scripts share: the free-running workload, c1 holding the lock in
the K3/K4 partitions while c2 tries, a holder's work, and how a stale write is judged.

Where it sits: below every family of :mod:`chaos.scenarios`, above :mod:`chaos.runner`
(whose :class:`~chaos.runner.Run` each step drives).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..clients import ClientProcess, Pending
from ..history import AcquireInvoked, AcquireReturned, History
from ..runner import Run

#: The lock name of the scripted scenarios.
LOCK = "chaos-lock"
#: The names the free-running workloads contend for.
NAMES = ("L1", "L2")


def _acquires(history: History) -> list[tuple[AcquireInvoked, AcquireReturned | None]]:
    returned = {(e.client, e.op): e for e in history.of_type(AcquireReturned)}
    return [(e, returned.get((e.client, e.op))) for e in history.of_type(AcquireInvoked)]


def _leaderships(won: Sequence[AcquireReturned]) -> dict[str, int]:
    """Leaderships per client, from the history's grants rather than the campaigners'
    replies: a killed campaigner never replies, and its leaderships count as much as anyone's."""
    return dict(Counter(returned.client for returned in won))


def _loop(
    run: Run, clients: Sequence[ClientProcess], *, duration: float | None = None, **spec: Any
) -> tuple[float, list[Pending]]:
    """Start the free-running workload on every client, for ``duration`` (default
    ``--duration``); returns (until, pending replies)."""
    duration = run.params.loop_duration if duration is None else duration
    until = time.monotonic() + duration
    args = {"names": list(NAMES), "until": until, "ttl": run.params.loop_ttl, **spec}
    pending = [c.submit("loop", reply_timeout=duration + 60, **args) for c in clients]
    run.note(f"workload running for {duration:.1f}s on {', '.join(args['names'])}")
    return until, pending


def _finish(pending: Sequence[Pending]) -> list[Any]:
    return [waiting.result() for waiting in pending]


class Held(NamedTuple):
    """c1 holds the lock (until ``deadline``, monotonic); c2 waits on the other side."""

    c1: ClientProcess
    c2: ClientProcess
    deadline: float


def _c1_holds(
    run: Run, ttl: float, *, before: Callable[[], object] | None = None, drift: float | None = None
) -> Held | None:
    """Clients c1 and c2 in the K3/K4 partitions; c1 acquires (through A,B,C) and reads.
    ``before`` runs just before the acquire; ``drift``, the clients' clock_drift_factor
    (default the library's). None if c1 could not acquire."""
    c1, c2 = run.clients(["c1", "c2"], clock_drift_factor=drift)
    run.partition_k3()
    if before is not None:
        before()
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(got["ok"], f"c1 acquires through {run.cluster.labels(run.left)}", _error(got)):
        return None
    c1.call("read", name=LOCK)
    run.note(f"c1 holds {LOCK!r} on {run.cluster.labels(run.left)} for {ttl:g}s")
    return Held(c1, c2, float(got["deadline"]))


def _c2_tries(run: Run, held: Held, ttl: float, *, expect_denied: bool = False) -> None:
    """c2 tries to take the lock that c1 believes it holds; if it gets it, both do their
    read-modify-write at once (c1 read before the fault and writes now, if its lock is
    still valid), which loses one increment."""
    c1, c2, _ = held
    got = c2.call("acquire", name=LOCK, ttl=ttl, timeout=1.5)
    if got["ok"]:
        run.note(f"c2 holds {LOCK!r} on {run.cluster.labels(run.right)}")
        c2.call("read", name=LOCK)
        run.sleep(0.1)
        wrote = c1.call("write", name=LOCK)
        run.sleep(0.2)
        c2.call("write", name=LOCK)
        run.sleep(0.1)
        c2.call("release", name=LOCK)
    else:
        run.note("c2 could not acquire")
        wrote = c1.call("write", name=LOCK)
    c1.call("release", name=LOCK)
    run.metric("c1_wrote", bool(wrote.get("written")))
    if not expect_denied:
        run.expect(got["ok"], f"c2 acquires through {run.cluster.labels(run.right)}", _error(got))
        return
    run.expect(not got["ok"], "c2 is refused: C still has c1's key")
    # Free again once c1's key expires on C (c1's release could not reach C through the
    # connection the restart broke): the cost is availability only.
    again = c2.call("acquire", name=LOCK, ttl=ttl, timeout=2 * ttl + 1)
    if run.expect(again["ok"], "c2 acquires once c1's key is gone", _error(again)):
        _use(run, c2)


def _use(run: Run, client: ClientProcess, *, hold: float = 0.2, release: bool = True) -> None:
    """The holder's work: read, hold a while (so that the timeline shows it), write, and
    release."""
    client.call("read", name=LOCK)
    run.sleep(hold)
    client.call("write", name=LOCK)
    if release:
        run.sleep(hold / 2)
        client.call("release", name=LOCK)


def _error(reply: dict[str, Any]) -> str:
    error = reply.get("error")
    return "" if error is None else str(error)


def _long_ttl(run: Run) -> float:
    # Where nothing waits for expiry, a long TTL costs nothing and leaves the overlap
    # plenty of room on a slow machine.
    return 3 * run.params.ttl


def _stale_write_judged(
    run: Run, wrote: dict[str, Any], *, fencing: bool, tokens: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """c1 wrote after c2 had acquired: a fenced store must reject it, a plain one cannot.
    ``tokens`` are c1's and c2's acquire replies."""
    if fencing:
        run.expect(
            wrote.get("accepted") is False,
            "the fenced store rejects c1's stale write",
            f"c1 token {tokens[0].get('fencing')}, c2 token {tokens[1].get('fencing')}",
        )
    else:
        run.expect(wrote.get("accepted") is True, "c1's stale write lands (nothing stops it)")


def _kill_then_pause(run: Run, until: float) -> None:
    """Under a free-running workload that ends at ``until``: a fifth of the way in, kill a
    master, restart it (empty) after the ttl, then SIGSTOP another for a fifth of the run."""
    duration, ttl = run.params.loop_duration, run.params.loop_ttl
    victim, hung = run.rng.sample(range(run.params.nodes), 2)
    run.sleep_until(until - duration * 0.8)
    killed = run.nemesis.kill(victim)
    run.sleep(ttl + 0.5)  # restarted empty only once every key it held has expired
    run.nemesis.end(killed)
    paused = run.nemesis.pause_master(hung)
    run.sleep(duration * 0.2)
    run.nemesis.end(paused)
