"""The catalogue: each scenario of docs/safety.md, with the verdict theory predicts.

Masters are A, B, C, ... (5 by default). Where a scenario needs the partitions of K3/K4,
client c1 reaches A,B,C only and c2 reaches C,D,E only (with N masters: the first and the
last majority, sharing the middle); the fault then hits the shared master(s), "C".

The UNSAFE scenarios are timed so that their violation happens on every run, not by luck:
each step waits for the previous one to have happened (an acquire returned, a key seen
gone on the master, a process seen stopped), never for a guessed delay. The SAFE ones
follow the same script with the one change that theory says makes it safe (a delayed
restart, fsync always, a slower clock, fencing, ...), so that each pair shows exactly
what the remedy buys.

Each family of scenarios is a module with its scripts and, below them, its rows of the
catalogue (``SCENARIOS``); the steps they share are in :mod:`chaos.scenarios._steps`:

* :mod:`~chaos.scenarios.masters`: 1-8, 26, 28, 29: masters killed, paused, restarted,
  powered off, answering errors, evicting;
* :mod:`~chaos.scenarios.clocks`: 9-11: a master's clock;
* :mod:`~chaos.scenarios.pauses`: 12, 13, 16: a client stopped;
* :mod:`~chaos.scenarios.network`: 14, 15: slow and lost links, a split vote;
* :mod:`~chaos.scenarios.broken_clients`: 17-20: what a broken client would get wrong;
* :mod:`~chaos.scenarios.primitives`: 21, 22, 30: semaphore, multi-lock, read-write lock;
* :mod:`~chaos.scenarios.election`: 23, 27: leader election;
* :mod:`~chaos.scenarios.features`: 24, 25, 31: threads, force-release, handover;
* :mod:`~chaos.scenarios.counterexamples`: 32-36: the published counterexamples.

Each entry's ``why`` says what the scenario shows; ``python -m chaos list`` prints them.
"""

from __future__ import annotations

import string

from ..runner import Scenario
from . import broken_clients, clocks, counterexamples, election, features, masters, network, pauses, primitives
from ._steps import LOCK, NAMES, _loop
from .clocks import clock_rate_trial
from .masters import restart_after

# _loop: the free-running workload, which chaos.explore drives too.
__all__ = ["CATALOGUE", "LOCK", "NAMES", "_loop", "clock_rate_trial", "find", "restart_after"]


def _number_order(scenario: Scenario) -> tuple[int, str]:
    """A number's place in the catalogue: "7a" is (7, "a"), so that 10 comes after 9."""
    return int(scenario.number.rstrip(string.ascii_lowercase)), scenario.number.lstrip(string.digits)


#: Every scenario, in the order of its number.
CATALOGUE: tuple[Scenario, ...] = tuple(
    sorted(
        (
            *masters.SCENARIOS,
            *clocks.SCENARIOS,
            *pauses.SCENARIOS,
            *network.SCENARIOS,
            *broken_clients.SCENARIOS,
            *primitives.SCENARIOS,
            *election.SCENARIOS,
            *features.SCENARIOS,
            *counterexamples.SCENARIOS,
        ),
        key=_number_order,
    )
)


def find(name: str) -> Scenario:
    """A scenario by name ("restart-empty") or number ("5", "11a")."""
    for scenario in CATALOGUE:
        if name in (scenario.name, scenario.number, scenario.slug):
            return scenario
    known = ", ".join(s.name for s in CATALOGUE)
    raise KeyError(f"no scenario {name!r}; known: {known}")
