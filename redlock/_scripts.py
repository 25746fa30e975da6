"""The Lua scripts every master runs, each in one place.

Scripts are sent by EVALSHA and re-sent by EVAL when a node answers NOSCRIPT (a restarted
master forgets its script cache); :class:`Script` carries both forms.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Script:
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


# KEYS[1] lock key; ARGV[1] our token.
# Returns 1 when our token was there and is now deleted, 0 otherwise. Used for release and
# for the rollback of a failed acquire: it never deletes another holder's key.
RELEASE = Script(
    """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""
)

# KEYS[1] lock key; ARGV[1] our token; ARGV[2] new ttl in milliseconds.
# Returns 1 when our token was there and its ttl is now ARGV[2], 0 otherwise. A key that is
# gone stays gone: extending must never re-create a lock that expired.
EXTEND = Script(
    """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
)
