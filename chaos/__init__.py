"""The chaos harness: real faults on real masters, recorded histories, and their checkers.

It sits beside the ``redlock`` package, not inside it: the lock never imports it. Layers,
bottom up, one bullet each: a module imports only from the layers above its bullet, never
from its own or a later one, function-level imports included (tests/test_chaos_layers.py
reads this list and checks it). :mod:`chaos.sim` and :mod:`chaos.scenarios` are packages,
each one place in the list.

* :mod:`chaos.history`, :mod:`chaos.netns`, :mod:`chaos.proxy`, :mod:`chaos.shims`,
  :mod:`chaos.variants`: the events a run records (monotonic timestamps, JSON lines per
  process) and :class:`~chaos.history.History`, their merged, ordered form; the kernel
  network (masters and clients in network namespaces, and faults as nftables rules in the
  client's: drops either way, SYN drop, RST, loss); a loopback TCP proxy per
  client-to-master link (latency, blackhole); the ``LD_PRELOAD`` shims, compiled on first
  use; deliberately broken clients;
* :mod:`chaos.checkers`, :mod:`chaos.margins`, :mod:`chaos.judgement`, :mod:`chaos.schedule`,
  :mod:`chaos.clock`, :mod:`chaos.powerloss`, :mod:`chaos.workload`: pure functions from a
  history to its violations and costs; pure too, from the masters' ground truth in a
  history, each acquisition's safety margin, the edges a run reached, and the verdict
  ``unknown``; a run's verdict against its expectation in one word (PASS, FAIL, MISMATCH,
  ERROR), which the report and every picture say; seeded
  random schedules of composed faults (pure data); a master's wall clock under libfaketime
  (jumps and rates), and a client's (a rate for its whole life); a power cut for a master
  (its files keep only what it fsynced); what a client does (lock operations, the
  non-atomic read-modify-write on the protected resource), recorded;
* :mod:`chaos.observer`, :mod:`chaos.timeline`, :mod:`chaos.worker`: what the masters
  really hold right after each grant; the PNG timeline; each client in a process of its
  own, so that a scenario can SIGSTOP it;
* :mod:`chaos.clients`: the harness's handle on a client's process;
* :mod:`chaos.peer_client`: another Redlock client (a worker of ``peers/``'s protocol) as a
  client of a run, its answers recorded as the same history;
* :mod:`chaos.cluster`: masters, resource server, proxies, clocks and clients of one run,
  all stopped at its end;
* :mod:`chaos.nemesis`: the faults (kill, restart, power loss, pause, clock, network,
  client pause, error replies, eviction), each recorded as a window;
* :mod:`chaos.runner`, :mod:`chaos.reactive`: running one scenario to a judged result; a
  nemesis that fires on the grants the observer sees rather than on a timer;
* :mod:`chaos.scenarios`, :mod:`chaos.report`: the catalogue of scenarios with the verdict
  theory predicts, one module per family; the table of a run's results;
* :mod:`chaos.explore`, :mod:`chaos.sweep`, :mod:`chaos.selftest`: a seeded schedule played
  against a live workload (``explore``, ``replay``); where the boundary lies between safe
  and unsafe, one parameter at a time, with Wilson intervals; whether the catalogue
  catches each broken client;
* :mod:`chaos.shrink`, :mod:`chaos.sim`, :mod:`chaos.trial`: a violation's schedule cut to
  the fewest faults that still reproduce it; the deterministic simulator (``python -m chaos
  sim``): the real flows and connection policy against simulated masters, network and
  clocks, on simulated time; any Redlock client put through the catalogue and explore
  (``python -m chaos trial``), and the comparison of every installed one;
* ``python -m chaos`` (:mod:`chaos.__main__`): list, run, selftest, trial, report, exit status.

The package itself, the ``redlock-chaos`` command (:func:`main_entry`), is above them all.
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
