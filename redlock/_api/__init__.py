"""What a lock is, shared by both APIs, and the sync API over it.

Above the drivers (:mod:`redlock._io`). :mod:`.state` is a Lock's state and settings, the
mapping of a flow's result to a return value or an exception, written once for both APIs;
:mod:`.telemetry` observes every flow it starts; :mod:`.election`, :mod:`.rwlock` and
:mod:`.locked` build elections, read-write locks and ``@rl.locked`` on it. :mod:`.sync` is
the sync API's shell (``redlock.Redlock``, ``redlock.Lock``, ...), and
:mod:`redlock.asyncio` the asyncio one's (docs/architecture.md).
"""
