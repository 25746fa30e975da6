"""Adoption by token: taking over a holding that another Lock (another process) acquired and
handed over as its token.

Where it sits: in :mod:`redlock._api`, below :mod:`redlock._api.state`, whose ``LockState``
records the lease these functions make once a majority confirms it (``adopt()``), or releases
it at once (``release_token()``).
"""

from __future__ import annotations

from redlock._protocol import config as _config
from redlock._protocol.core import Flow
from redlock._protocol.flows import RELEASE_PATIENCE, Lease, LockSpec, extend_flow


def lease_to_release(token: object, now: float) -> Lease:
    """The lease of a holding known only by its token, to release it (``release_token()``):
    the validity is unknown, so the release waits its full patience from ``now``."""
    if not isinstance(token, str) or not token:
        raise ValueError("token must be a non-empty str")
    return Lease(token, now + RELEASE_PATIENCE)


def adoption(
    spec: LockSpec, max_hold: float | None, token: object, fencing_token: object, now: float
) -> tuple[Lease, Flow]:
    """Check ``adopt``'s arguments; the new lease and the flow that verifies it (an extend
    with the adopted token, resetting the masters' extend numbering: see scripts.EXTEND)."""
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}")
    if not token or not token.isprintable():
        raise ValueError(f"token must be a non-empty printable str, got {token!r}")
    if fencing_token is not None:
        if not spec.fencing:
            raise ValueError("fencing_token is for a Lock made with fencing=True")
        _config.check_count("fencing_token", fencing_token)
    # Nothing to rely on before a majority confirms: the deadline starts at now.
    lease = Lease(token, now, fencing_token)  # type: ignore[arg-type]
    if max_hold is not None:
        lease.hold_until = now + max_hold
    return lease, extend_flow(spec, lease, spec.ttl, now, adopt=True)
