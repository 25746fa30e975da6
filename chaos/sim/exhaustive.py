"""The small-scope mode: every delivery timing of a tiny world, up to a bound.

Where it sits: beside :mod:`chaos.sim.search`, above :mod:`chaos.sim.trial`, whose trial it
runs again and again with the network's latencies chosen instead of drawn.

Theory of operation
-------------------
Two clients, three masters, no fault: only the network's timing varies. Time is made
discrete where it matters to the protocol: each message (and each connect) takes one of
three latencies, *prompt* (0.5 ms), *slow* (0.6 ``node_timeout``: late for nobody, but a
round that waits for it is slow) and *late* (1.5 ``node_timeout``: the client gives up on
it, the master still applies it). Everything else (the workload's holds, the clients'
clock offsets) is fixed by the seed, so a run is a pure function of its choices.

The search is stateless model checking by replay with *delay bounding*: a run is named by
the few choice points where it leaves the prompt default (``forced``, position -> option),
and every run with at most ``deviations`` such points among the first ``horizon`` choice
points is played once, depth first. Every interleaving of message arrivals that those
latencies can produce within the bound is covered; beyond the bound nothing is claimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..schedule import FAULT_SETS, Schedule
from .trial import Settings, TrialResult, run_trial

__all__ = ["Scope", "exhaust"]


@dataclass(frozen=True)
class Scope:
    """How small the world is, and how far the search goes."""

    nodes: int = 3
    clients: int = 2
    ttl: float = 0.2
    #: Simulated seconds a run: room for a holding or two each.
    duration: float = 1.0
    #: At most this many messages off the prompt default in one run.
    deviations: int = 2
    #: Only the first so many choice points may deviate (the rest stay prompt).
    horizon: int = 40
    seed: int = 1


@dataclass
class _Choices:
    """The network's latency per message: ``options[forced.get(i, 0)]`` for the i-th."""

    options: tuple[float, ...]
    forced: dict[int, int]
    made: int = 0

    def __call__(self) -> float:
        index = self.made
        self.made += 1
        return self.options[self.forced.get(index, 0)]


@dataclass
class Outcome:
    runs: int = 0
    violations: int = 0
    #: The first violating run: its forced choices and what the checkers said.
    first: tuple[dict[int, int], list[str]] | None = None
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)


def latencies(settings: Settings) -> tuple[float, ...]:
    """Prompt, slow, late (see the module docstring)."""
    return (0.0005, 0.6 * settings.node_timeout, 1.5 * settings.node_timeout)


def exhaust(
    scope: Scope,
    settings: Settings | None = None,
    *,
    stop_at_first: bool = True,
    run: Callable[..., TrialResult] = run_trial,
) -> Outcome:
    """Play every run of ``scope`` within its bound (or until the first violation)."""
    settings = settings or Settings(names=1)
    # Unfenced, the validity checked just before each write: any overlap is the client's.
    faults = replace(FAULT_SETS["safe"], name="small-scope", fencing=False)
    schedule = Schedule((), scope.duration, scope.nodes, scope.clients, scope.ttl, scope.seed, faults)
    options = latencies(settings)
    outcome = Outcome()
    started = time.perf_counter()
    stack: list[tuple[dict[int, int], int]] = [({}, 0)]
    while stack:
        forced, start = stack.pop()
        choices = _Choices(options, forced)
        result = run(schedule, scope.seed, settings, pick=choices)
        outcome.runs += 1
        if result.violated:
            outcome.violations += 1
            for kind in result.kinds:
                outcome.kinds[kind] = outcome.kinds.get(kind, 0) + 1
            if outcome.first is None:
                outcome.first = (forced, result.describe()[:3])
            if stop_at_first:
                break
        if len(forced) < scope.deviations:
            # Later positions only: each set of deviations is played once, in one order.
            for position in reversed(range(start, min(choices.made, scope.horizon))):
                for option in range(len(options) - 1, 0, -1):
                    stack.append(({**forced, position: option}, position + 1))
    outcome.seconds = time.perf_counter() - started
    return outcome


def describe(outcome: Outcome, scope: Scope, settings: Settings | None = None) -> dict[str, Any]:
    names = ("prompt", "slow", "late")
    document: dict[str, Any] = {
        "scope": scope.__dict__,
        "latencies": dict(zip(names, latencies(settings or Settings(names=1)), strict=True)),
        "runs": outcome.runs,
        "violations": outcome.violations,
        "kinds": outcome.kinds,
        "seconds": round(outcome.seconds, 2),
    }
    if outcome.first is not None:
        forced, lines = outcome.first
        document["counterexample"] = {
            "choices": {str(k): names[v] for k, v in sorted(forced.items())},
            "violations": lines,
        }
    return document
