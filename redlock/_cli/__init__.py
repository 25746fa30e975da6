"""The ``redlock`` command line behind its public face, :mod:`redlock.cli`.

Above the public modules it runs (:mod:`redlock`, :mod:`redlock.servers`):
:mod:`.supervisor` runs ``redlock exec``'s command under a lock, and :mod:`.console` is what
every command line of the project does at a terminal (docs/architecture.md).
"""
