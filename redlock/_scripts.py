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


# KEYS[1] lock key; KEYS[2] (optional) its extend-order key; ARGV[1] our token.
# Returns 1 when our token was there and is now deleted, 0 otherwise. Used for release and
# for the rollback of a failed acquire: it never deletes another holder's key.
RELEASE = Script(
    """
if redis.call('get', KEYS[1]) == ARGV[1] then
    if KEYS[2] then redis.call('del', KEYS[2]) end
    return redis.call('del', KEYS[1])
end
return 0
"""
)

# KEYS[1] lock key; KEYS[2] its extend-order key; ARGV[1] our token; ARGV[2] new ttl in
# milliseconds; ARGV[3] the number of this extend within our holding (1, 2, ...).
# Returns 1 when our token is there: its ttl is now ARGV[2], or a newer extend of ours
# already set it (this one arrived late and must not undo that, e.g. a ttl=1 extend landing
# after a later ttl=10 one). Returns 0 when our token is gone: extending must never
# re-create a lock that expired. The order key lives exactly as long as the lock key.
EXTEND = Script(
    """
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local mark = ARGV[1] .. ':'
local last = redis.call('get', KEYS[2])
if last and string.sub(last, 1, #mark) == mark and tonumber(string.sub(last, #mark + 1)) >= tonumber(ARGV[3]) then
    return 1
end
redis.call('set', KEYS[2], mark .. ARGV[3], 'PX', ARGV[2])
return redis.call('pexpire', KEYS[1], ARGV[2])
"""
)

# KEYS[1] lock key; KEYS[2] its extend-order key; ARGV[1] our token; ARGV[2] the channel
# waiters listen on.
# As RELEASE, and on success publishes our token on ARGV[2], so that a client waiting for
# this lock retries at once instead of at its next timer; the token lets a listener count
# the N copies of one release (one per master) as one. Rollbacks use plain RELEASE: a
# failed attempt freed nothing anyone waited for, and waking them would feed contention.
RELEASE_AND_NOTIFY = Script(
    """
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1], KEYS[2])
    redis.call('publish', ARGV[2], ARGV[1])
    return 1
end
return 0
"""
)

# KEYS[1] lock key; KEYS[2] the lock's fencing counter; ARGV[1] our token; ARGV[2] ttl in ms.
# As SET NX PX, and on success also returns the counter: {1, counter} when set, 0 when the
# key is held. The client takes max(counters of a majority) + 1 as its fencing token.
FENCED_ACQUIRE = Script(
    """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
end
return 0
"""
)

# KEYS[1] the lock's fencing counter; ARGV[1] a fencing token.
# counter = max(counter, ARGV[1]); returns 1. Never lowers the counter, so writing back a
# token that a master has already seen exceeded is harmless.
FENCE_RAISE = Script(
    """
local counter = tonumber(redis.call('get', KEYS[1]) or '0')
if counter < tonumber(ARGV[1]) then
    redis.call('set', KEYS[1], ARGV[1])
end
return 1
"""
)

# KEYS[1] lock key.
# Returns {1, token or nil, pttl}: who holds the key on this master and for how many more
# milliseconds (PTTL: -2 no key, -1 no expiry), read in one step so that a key expiring
# between two reads cannot show up as a holder with no ttl. The leading 1 marks an answer.
INSPECT = Script(
    """
return {1, redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}
"""
)

# KEYS[1] lock key; KEYS[2] its extend-order key; ARGV[1] the channel waiters listen on.
# As INSPECT, and deletes the key whatever token it holds (an operator's override), with
# its extend-order key; announces the release to waiters as a release would. The fencing
# counter stays: it must keep growing across holders, forced out or not.
FORCE_RELEASE = Script(
    """
local token = redis.call('get', KEYS[1])
local pttl = redis.call('pttl', KEYS[1])
if token then
    redis.call('del', KEYS[1], KEYS[2])
    redis.call('publish', ARGV[1], token)
end
return {1, token, pttl}
"""
)

ALL = (RELEASE, EXTEND, RELEASE_AND_NOTIFY, FENCED_ACQUIRE, FENCE_RAISE, INSPECT, FORCE_RELEASE)

# KEYS[1] the protected value; KEYS[2] the highest fencing token it has accepted;
# ARGV[1] the writer's fencing token; ARGV[2] the value to write.
# Returns 1 and writes when ARGV[1] >= the highest token accepted so far, else 0 and
# writes nothing: a holder whose lock expired while it paused cannot overwrite the work
# of a newer holder. Equal tokens are accepted: one holder may write several times.
FENCED_WRITE = Script(
    """
local highest = tonumber(redis.call('get', KEYS[2]) or '-1')
local token = tonumber(ARGV[1])
if token < highest then
    return 0
end
redis.call('set', KEYS[2], ARGV[1])
redis.call('set', KEYS[1], ARGV[2])
return 1
"""
)
