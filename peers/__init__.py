"""Other Redlock clients on the same masters: workers that speak one JSON-lines protocol.

- ``peers/python_worker.py``: the Python clients (this library, pottery, redlock-py,
  aioredlock), each behind an adapter that says what the client claims;
- ``peers/node/worker.js``: node-redlock (``@sesamecare-oss/redlock`` on ioredis);
- :mod:`peers.install`: ``python -m peers install`` puts each peer, pinned, into a cache
  directory outside the project's environment;
- :mod:`peers.workers`: start a worker of any client and talk to it.

The protocol is described in docs/peers.md; tests/test_peers.py runs the mixed-clients
checks on it.
"""
