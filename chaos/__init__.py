"""The chaos harness: real faults on real masters, recorded histories, and their checkers.

It sits beside the ``redlock`` package, not inside it: the lock never imports it. Layers,
bottom up:

* :mod:`chaos.history`: the events a run records (monotonic timestamps, JSON lines per
  process) and :class:`~chaos.history.History`, their merged, ordered form;
* :mod:`chaos.checkers`: pure functions from a history to its violations and costs;
* :mod:`chaos.proxy`: a loopback TCP proxy per client-to-master link (latency, blackhole);
* :mod:`chaos.clock`: a master's wall clock under libfaketime (jumps and rates).
"""
