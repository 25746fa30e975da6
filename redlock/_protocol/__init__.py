"""The Redlock protocol without I/O: what is sent to the masters, what their replies mean,
and every decision in between.

The lowest layer of the package (docs/architecture.md). Time and each master's reply are
inputs, never read here: the lock arithmetic, commands and rounds (:mod:`.core`), the Lua
scripts (:mod:`.scripts`), the kinds of lock (:mod:`.kinds`), the flows an operation runs
(:mod:`.flows`), what a master says about itself and whether the masters suit Redlock
(:mod:`.facts`, :mod:`.topology`), URLs and the checked settings (:mod:`.urls`,
:mod:`.config`) and the connection policy both drivers follow (:mod:`.connection`). The
hot-path modules are what a compiled build compiles (setup.py).
"""
