"""Model masters, and the trampoline that drives a flow of the core: the pure tier's cluster.

The core's flows (:mod:`redlock._protocol.core`) never touch a socket or a clock: each yields a
request (a :class:`~redlock._protocol.core.Round` of commands for some masters, or a
:class:`~redlock._protocol.core.Pause`) and is sent back the time once it is answered. :func:`drive`
is the one loop that does that; what answers is the test's. :class:`ModelCluster` answers
from :class:`ModelMaster` s, which apply SET NX PX and every Lua script of
:mod:`redlock._protocol.scripts` the way a real master does, expiry included (the model of
:mod:`chaos.sim.model`, the simulator's too), so that the flows'
decisions (hold, roll back, retry, give up) can be checked over thousands of cases without a
server. A script the model does not know fails the test rather than answering something.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from chaos.sim.model import Keyspace
from redlock._protocol import core as _core
from redlock._protocol.core import Command, ErrorReply, Pause, Request, Round
from redlock._protocol.flows import LockSpec, Tokens, acquire_flow
from redlock.exceptions import NodeStatus


def drive(flow: _core.Flow, answer: Callable[[Request], float]) -> _core.Result:
    """Run ``flow`` to its end and return its result.

    ``answer`` gets each request the flow yields: it records a round's replies (or lets a
    pause pass) and returns the time to send back, the time at which the flow goes on.
    """
    try:
        request = next(flow)
        while True:
            request = flow.send(answer(request))
    except StopIteration as stop:
        result: _core.Result = stop.value
        return result


@dataclass
class ModelMaster(Keyspace):
    """A master as far as the flows can tell: chaos.sim.model's keyspace, which applies SET
    NX PX and every script of :mod:`redlock._protocol.scripts` (the one model of them, shared with the
    simulator), and which can be down.

    ``keys[name] = (value, expires_at)``; a semaphore's permits are a dict value (token ->
    expiry score), seen through :attr:`permits`.
    """

    #: False: down, its connections refused (the round records it UNREACHABLE); it keeps its
    #: data for when it is back, as a master with ``appendfsync always`` does.
    up: bool = True

    @property
    def permits(self) -> dict[str, dict[str, float]]:
        """Each semaphore's permits (token -> expiry), by the semaphore's key."""
        return {key: value for key, (value, _) in self.keys.items() if isinstance(value, dict)}

    def reply_to(self, command: Command, now: float) -> object:
        """Apply ``command``; a script the model does not know fails the test."""
        reply = self.command(command, now)
        assert not (isinstance(reply, ErrorReply) and "NOSCRIPT" in str(reply)), (
            f"the model masters do not know the script {command.script!r}"
        )
        return reply


class ModelCluster:
    """Runs flows against model masters, on a clock of its own that starts at 1000.

    Each round takes ``round_time`` seconds and each pause its length. A master that is not
    ``up`` refuses its connections (UNREACHABLE); one outside ``reach`` is up but its reply
    never comes (TIMEOUT: a SET that timed out may still have landed, so rollbacks go to it).
    """

    def __init__(self, n: int, round_time: float = 0.001) -> None:
        self.masters = [ModelMaster() for _ in range(n)]
        self.now = 1000.0
        self.round_time = round_time
        self.reach: set[int] = set(range(n))
        self.rounds: list[Round] = []
        #: The pauses' lengths summed: how long the flows waited between their rounds.
        self.paused = 0.0

    def run(self, flow: _core.Flow) -> _core.Result:
        return drive(flow, self.answer)

    def answer(self, request: Request) -> float:
        """Answer one request of a flow (see :func:`drive`); the time after it."""
        self.before_request()
        if isinstance(request, Round):
            self.rounds.append(request)
            for node in request.targets:
                master = self.masters[node]
                if not master.up:
                    request.record(node, NodeStatus.UNREACHABLE)
                elif node not in self.reach:
                    request.record(node, NodeStatus.TIMEOUT)
                else:
                    request.record_reply(node, master.reply_to(request.command, self.now))
            self.now += self.round_time
        else:
            assert isinstance(request, Pause)
            assert request.seconds >= 0
            self.paused += request.seconds
            self.now += request.seconds
        return self.now

    def before_request(self) -> None:
        """A hook for faults that depend on time."""

    def spec(self, **changes: Any) -> LockSpec:
        """A lock ``k`` on these masters (ttl 1 s, node_timeout 50 ms, ...), with ``changes``."""
        spec = LockSpec(
            key="k",
            ttl=1.0,
            node_names=tuple(f"m{i}" for i in range(len(self.masters))),
            node_timeout=0.05,
            clock_drift_factor=0.01,
            retry_delay=0.1,
            unavailable_timeout=1.0,
        )
        return dataclasses.replace(spec, **changes)

    def acquire(self, spec: LockSpec, token: str) -> _core.Result:
        """One non-blocking attempt with ``token``."""
        tokens = Tokens(lambda: token)
        return self.run(acquire_flow(spec, tokens, self.now, blocking=False, timeout=None, rng=random.Random(0)))

    def holders(self, token: str, key: str = "k") -> int:
        """How many masters hold ``key`` for ``token`` now."""
        return sum(1 for m in self.masters if m.keys.get(key, ("", 0.0))[0] == token and m.keys[key][1] > self.now)


class FaultyClusterMachine(RuleBasedStateMachine):
    """The faults every stateful test of the flows on a :class:`ModelCluster` of five
    masters uses: time passes, a master goes down (never the last one up), and comes back
    with its data (an AOF fsync=always restart). Subclasses set ``cluster``, add the
    clients' rules and their invariants."""

    cluster: ModelCluster

    @rule(seconds=st.floats(min_value=0, max_value=1.5))
    def time_passes(self, seconds: float) -> None:
        self.cluster.now += seconds

    @precondition(lambda self: sum(m.up for m in self.cluster.masters) > 0)
    @rule(node=st.integers(0, 4))
    def master_goes_down(self, node: int) -> None:
        self.cluster.masters[node].up = False

    @rule(node=st.integers(0, 4))
    def master_comes_back(self, node: int) -> None:
        self.cluster.masters[node].up = True
