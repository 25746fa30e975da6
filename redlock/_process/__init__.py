"""Processes on Linux: what ``/proc`` says of one (:mod:`.proc`), and the ties that stop a
child when its parent dies (:mod:`.lifeline`).

They import nothing of the package: ``redlock exec``'s supervisor (:mod:`redlock._cli`),
the local masters (:mod:`redlock.servers`), the chaos harness, the benchmark and the tests
all use them (docs/architecture.md).
"""
