"""The drivers: the protocol's flows carried over sockets and threads, or an event loop.

Above :mod:`redlock._protocol`, whose connection policy they ask what to do at each event,
and below :mod:`redlock._api`, which hands them flows to run. This is the lowest layer that
does I/O: :mod:`.driver` is what both drivers do alike, :mod:`.sync` and :mod:`.aio` move
the bytes and wait (docs/architecture.md).
"""
