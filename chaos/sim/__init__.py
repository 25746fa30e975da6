"""Deterministic simulation of Redlock: the library's real flows and connection policy,
simulated masters, network and clocks, one thread, simulated time (``python -m chaos sim``).

Modules, bottom up: :mod:`chaos.sim.model` (what a master does with each command),
:mod:`chaos.sim.world` (event loop, masters, network, clients), :mod:`chaos.sim.watch`
(masters that record what they hold), :mod:`chaos.sim.trial` (a fault schedule against the
explore workload, judged by :mod:`chaos.checkers`), :mod:`chaos.sim.compiled` (which
build of those runs), :mod:`chaos.sim.families` (the fault families and the sweeps'
points), :mod:`chaos.sim.points` and :mod:`chaos.sim.exhaustive` (a point's cheapest
trial; every schedule of a small space), :mod:`chaos.sim.search` (trials by seed,
hypothesis search and shrinking, sweeps, the self-test), :mod:`chaos.sim.variants` (the
broken clients), :mod:`chaos.sim.pictures` (explore's and the phase diagrams' PNGs) and
:mod:`chaos.sim.cli`. See docs/simulation.md.
"""

from . import compiled as _compiled

# A current build of the compiled simulator in the checkout, if any, runs in place of the
# sources of its modules (chaos/sim/compiled.py).
_compiled.use_if_built(__path__, __name__)
