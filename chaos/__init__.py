"""The chaos harness: real faults on real masters, recorded histories, and their checkers.

It sits beside the ``redlock`` package, not inside it: the lock never imports it. Layers,
bottom up:

* :mod:`chaos.history`: the events a run records (monotonic timestamps, JSON lines per
  process) and :class:`~chaos.history.History`, their merged, ordered form;
* :mod:`chaos.checkers`: pure functions from a history to its violations and costs;
* :mod:`chaos.margins`: pure too: from the masters' ground truth in a history, each
  acquisition's safety margin, the edges a run reached, and the verdict ``unknown``;
* :mod:`chaos.proxy`: a loopback TCP proxy per client-to-master link (latency, blackhole);
* :mod:`chaos.netns`: the kernel network: masters and clients in network namespaces, and
  faults as nftables rules in the client's (drops either way, SYN drop, RST, loss);
* :mod:`chaos.clock`: a master's wall clock under libfaketime (jumps and rates), and a
  client's (a rate for its whole life);
* :mod:`chaos.workload`: what a client does (lock operations, the non-atomic
  read-modify-write on the protected resource), recorded;
* :mod:`chaos.worker` and :mod:`chaos.clients`: each client in a process of its own, so
  that a scenario can SIGSTOP it, and the harness's handle on it;
* :mod:`chaos.cluster`: masters, resource server, proxies, clocks and clients of one run,
  all stopped at its end;
* :mod:`chaos.powerloss`: a power cut for a master (its files keep only what it fsynced),
  through an ``LD_PRELOAD`` shim compiled on first use;
* :mod:`chaos.nemesis`: the faults (kill, restart, power loss, pause, clock, network,
  client pause, error replies, eviction), each recorded as a window;
* :mod:`chaos.observer` and :mod:`chaos.reactive`: what the masters really hold right
  after each grant, and a nemesis that fires on those grants rather than on a timer;
* :mod:`chaos.runner` and :mod:`chaos.scenarios`: the catalogue of scenarios with the
  verdict theory predicts, and running one to a judged result;
* :mod:`chaos.schedule` and :mod:`chaos.explore`: seeded random schedules of composed faults
  (pure data), and playing one against a live workload (``explore``, ``replay``);
* :mod:`chaos.sweep`: where the boundary lies between safe and unsafe, one parameter at a
  time, with Wilson intervals;
* :mod:`chaos.report` and :mod:`chaos.timeline`: the table and the PNG timeline;
* :mod:`chaos.variants` and :mod:`chaos.selftest`: deliberately broken clients, and
  whether the catalogue catches each of them;
* :mod:`chaos.sim`: the deterministic simulator (``python -m chaos sim``): the real flows
  and connection policy against simulated masters, network and clocks, on simulated time;
* ``python -m chaos`` (:mod:`chaos.__main__`): list, run, selftest, report, exit status.
"""

from __future__ import annotations

import os
import sys

# The harness's broken clients (chaos.variants, chaos.sim.variants) patch the library's core,
# which compiled code does not allow: the harness's own processes (and the workers they
# start) run the core's sources, the same code, whatever build is installed
# (redlock/_compiled.py). Not where redlock came first: a program importing the harness.
if "redlock" not in sys.modules:
    os.environ.setdefault("REDLOCK_PURE", "1")

from redlock._cli.console import to_a_reader
from redlock._extras import can_import, install_hint

#: chaos.__main__'s exit status for an environment that lacks something (it cannot be
#: imported from there before redis-py is known to be installed).
_EXIT_ENVIRONMENT = 3


def main_entry() -> int:
    """The ``redlock-chaos`` command: :func:`chaos.__main__.main`, or one line saying how to
    get redis-py (the harness reads and sets masters' keys through it) where it is missing."""
    if not can_import("redis"):
        print(f"error: redis-py is not installed: {install_hint('chaos')}", file=sys.stderr)
        return _EXIT_ENVIRONMENT
    from .__main__ import main  # noqa: PLC0415  (imports redis-py)

    return to_a_reader(main)
