"""The chaos harness: real faults on real masters, recorded histories, and their checkers.

It sits beside the ``redlock`` package, not inside it: the lock never imports it. Layers,
bottom up:

* :mod:`chaos.history`: the events a run records (monotonic timestamps, JSON lines per
  process) and :class:`~chaos.history.History`, their merged, ordered form;
* :mod:`chaos.checkers`: pure functions from a history to its violations and costs;
* :mod:`chaos.proxy`: a loopback TCP proxy per client-to-master link (latency, blackhole);
* :mod:`chaos.clock`: a master's wall clock under libfaketime (jumps and rates), and a
  client's (a rate for its whole life);
* :mod:`chaos.workload`: what a client does (lock operations, the non-atomic
  read-modify-write on the protected resource), recorded;
* :mod:`chaos.worker` and :mod:`chaos.clients`: each client in a process of its own, so
  that a scenario can SIGSTOP it, and the harness's handle on it;
* :mod:`chaos.cluster`: masters, resource server, proxies, clocks and clients of one run,
  all stopped at its end;
* :mod:`chaos.nemesis`: the faults (kill, restart, power loss, pause, clock, network,
  client pause), each recorded as a window;
* :mod:`chaos.runner` and :mod:`chaos.scenarios`: the catalogue of scenarios with the
  verdict theory predicts, and running one to a judged result;
* :mod:`chaos.report` and :mod:`chaos.timeline`: the table and the PNG timeline;
* :mod:`chaos.variants` and :mod:`chaos.selftest`: deliberately broken clients, and
  whether the catalogue catches each of them;
* ``python -m chaos`` (:mod:`chaos.__main__`): list, run, selftest, report, exit status.
"""
