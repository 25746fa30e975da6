"""The command line's parts below :mod:`redlock.cli`: processes, the supervisor, the terminal.

:mod:`.supervisor` runs ``redlock exec``'s command under a lock (above :mod:`redlock._api`);
:mod:`.lifeline` ties a child's life to its parent's and :mod:`.proc` reads ``/proc``, for
the supervisor and for the local masters of :mod:`redlock.servers`; :mod:`.console` is what
every command line of the project does at a terminal (docs/architecture.md).
"""
