"""Other Redlock clients on the same masters: workers that speak one JSON-lines protocol.

- ``peers/python_worker.py``: the Python clients (this library, pottery, redlock-py,
  aioredlock, redlock-ng, and ``broken:redlock-ng``, the trials' self-test), each behind an
  adapter that says what the client claims;
- ``peers/node/worker.js``: the Node clients (node-redlock as ``@sesamecare-oss/redlock``
  and as ``redlock`` 4.x, redis-semaphore's ``RedlockMutex``), an adapter object each under
  one request handler, each installed from its own ``peers/node/<client>/``;
- :mod:`peers.install`: ``python -m peers install`` puts each peer, pinned, into a cache
  directory outside the project's environment;
- :mod:`peers.workers`: start a worker of any client and talk to it.

The protocol is described in docs/peers.md; tests/test_peers.py runs the mixed-clients
checks on it.
"""
