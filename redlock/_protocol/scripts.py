"""The Lua scripts every master runs, each in one place.

Scripts are sent by EVALSHA and re-sent by EVAL when a node answers NOSCRIPT (a restarted
master forgets its script cache); :class:`Script` carries both forms.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

#: Where every key this library keeps beside a lock's own lives. Not ``redlock:``: that is
#: pottery's namespace (its ``Redlock(key="order:42")`` is the key ``redlock:order:42``), and
#: keys of ours there once deleted and overwrote pottery's held locks. No lock name of this
#: library may start with it (redlock._protocol.core.RESERVED_PREFIXES); a peer that names its lock
#: so anyway finds its key left alone (see "keys of others" below).
NAMESPACE = "redlock-quorum:"
#: The value a read-write lock's readers keep in the name's own key while any of them holds
#: it (see "a read-write lock" below). Never a token: tokens are hex, or hex, "@" and an
#: identity.
READERS_MARK = NAMESPACE + "readers"


@dataclass(frozen=True)
class Script:
    source: str
    sha: str = field(init=False)
    #: Running it twice does what running it once does (a compare-and-act on the caller's
    #: own token, or a read): it may be sent again on a new connection when the one it was
    #: written on broke before its answer came (see redlock._protocol.connection.Link.lost).
    idempotent: bool = False
    #: It deletes the caller's token (a release, a rollback): sent again after its first
    #: send's fate was lost, a "not there" answer may be that first send's own work.
    removes_token: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


# --- keys of others ------------------------------------------------------------------------
# A script writes or deletes a key only after checking that it is absent or holds what this
# library keeps there: a lock's token (a string), an extend-order mark ("<token>:<number>"),
# a fencing counter (digits), a sorted set of readers or permits, a hash of extend numbers.
# Anything else is someone else's key: a peer client's lock whose name lands where ours are,
# or another kind of lock of ours on the same name. Then the script writes nothing and
# answers an error that starts with FOREIGN_KEY and names the key and what it holds (the
# client raises redlock.KeyConflict when that keeps a majority from agreeing). A compare
# before a delete (our token, our mark) reads through ``value``, which takes a key of
# another type for absent (false, as GET answers for one) instead of failing the script
# halfway.
FOREIGN_KEY = "FOREIGNKEY"

_KEYS_OF_OTHERS = (
    """
local function value(key)
    local found = redis.pcall('get', key)
    if type(found) == 'string' then return found end
    return false
end
local function ours(key, mark)
    local found = value(key)
    return found and string.sub(found, 1, #mark) == mark
end
local function foreign(key, wanted, what, shape)
    local found = redis.call('type', key)['ok']
    if found == 'none' then return nil end
    if found == wanted then
        if not shape then return nil end
        local text = redis.call('get', key)
        if string.match(text, shape) then return nil end
        found = 'the string "' .. string.gsub(string.sub(text, 1, 40), '[^%w%p ]', '?') .. '"'
    else
        found = 'a ' .. found
    end
    return redis.error_reply('"""
    + FOREIGN_KEY
    + """ ' .. key .. ' holds ' .. found .. ' where this library keeps ' .. what .. ': left as it '
        .. 'is (another program wrote it, or another kind of lock holds this name)')
end
"""
)
#: Lua patterns of what we write in a string: an extend-order mark, a fencing counter. (A
#: token's is not checked: an adopted token may be any printable text.)
_MARK, _COUNTER = "':%d+$'", "'^%d+$'"


def _checked(*checks: str) -> str:
    """The guard every script starts with: ``checks`` are the arguments of ``foreign`` calls,
    made in order, the first refusal returned before the script writes anything."""
    refusals = "".join(f"refusal = foreign({check})\nif refusal then return refusal end\n" for check in checks)
    return _KEYS_OF_OTHERS + "local refusal\n" + refusals


# KEYS[1] lock key; KEYS[2] (optional) its extend-order key; ARGV[1] our token.
# Returns 1 when our token was there and is now deleted, 0 otherwise. Used for release and
# for the rollback of a failed acquire: it never deletes another holder's key.
RELEASE = Script(
    _KEYS_OF_OTHERS
    + """
if value(KEYS[1]) == ARGV[1] then
    if KEYS[2] and ours(KEYS[2], ARGV[1] .. ':') then redis.call('del', KEYS[2]) end
    return redis.call('del', KEYS[1])
end
return 0
""",
    idempotent=True,
    removes_token=True,
)

# KEYS[1] lock key; KEYS[2] its extend-order key; ARGV[1] our token; ARGV[2] new ttl in
# milliseconds; ARGV[3] the number of this extend within our holding (1, 2, ...).
# Returns 1 when our token is there: its ttl is now ARGV[2], or a newer extend of ours
# already set it (this one arrived late and must not undo that, e.g. a ttl=1 extend landing
# after a later ttl=10 one). Returns 0 when another token holds the key, and nil (Lua false)
# when there is no key at all (the master restarted empty, or our key expired there):
# either way nothing is touched, since extending must never re-create a lock that expired.
# The difference tells the client where it may write its key back once a majority has
# confirmed it (see redlock._protocol.flows.extend_flow). The order key lives as long as the lock key.
# ARGV[4] '1' (optional) for an adoption: another Lock object takes the holding over by its
# token and numbers its extends from 1 again, so the number replaces whatever the giver's
# extends left instead of being compared with it (else the adopter's first extends would be
# taken for late ones and change nothing while it counted on them).
EXTEND = Script(
    _checked("KEYS[2], 'string', 'an extend-order mark', " + _MARK)
    + """
if redis.call('exists', KEYS[1]) == 0 then
    return false
end
local current = value(KEYS[1])
if current ~= ARGV[1] then
    return 0
end
local mark = ARGV[1] .. ':'
local last = redis.call('get', KEYS[2])
if ARGV[4] ~= '1' and last and string.sub(last, 1, #mark) == mark
    and tonumber(string.sub(last, #mark + 1)) >= tonumber(ARGV[3]) then
    return 1
end
redis.call('set', KEYS[2], mark .. ARGV[3], 'PX', ARGV[2])
return redis.call('pexpire', KEYS[1], ARGV[2])
""",
    idempotent=True,
)

# KEYS[1] lock key; KEYS[2] its extend-order key; ARGV[1] our token; ARGV[2] the channel
# waiters listen on.
# As RELEASE, and on success publishes our token on ARGV[2], so that a client waiting for
# this lock retries at once instead of at its next timer; the token lets a listener count
# the N copies of one release (one per master) as one. Rollbacks use plain RELEASE: a
# failed attempt freed nothing anyone waited for, and waking them would feed contention.
RELEASE_AND_NOTIFY = Script(
    _KEYS_OF_OTHERS
    + """
if value(KEYS[1]) == ARGV[1] then
    if ours(KEYS[2], ARGV[1] .. ':') then redis.call('del', KEYS[2]) end
    redis.call('del', KEYS[1])
    redis.call('publish', ARGV[2], ARGV[1])
    return 1
end
return 0
""",
    idempotent=True,
    removes_token=True,
)

# KEYS[1] lock key; KEYS[2] the lock's fencing counter; KEYS[3] (optional) where 0.1.0 and
# earlier kept it (pottery's namespace: read, never written, and only where it holds digits);
# ARGV[1] our token; ARGV[2] ttl in ms.
# As SET NX PX, and on success also returns the counter: {1, counter} when set, 0 when the
# key is held. The client takes max(counters of a majority) + 1 as its fencing token, and
# raises the counter to it (FENCE_RAISE): counting the old counter in keeps tokens growing
# across an upgrade.
FENCED_ACQUIRE = Script(
    _checked("KEYS[2], 'string', 'a fencing counter', " + _COUNTER)
    + """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local counter = tonumber(redis.call('get', KEYS[2]) or '0')
    if KEYS[3] then
        local before = tonumber(string.match(value(KEYS[3]) or '', '^%d+$') or '0')
        if before > counter then counter = before end
    end
    return {1, counter}
end
return 0
"""
)

# KEYS[1] lock key; KEYS[2] the lock's fencing counter; ARGV[1] our token; ARGV[2] ttl in ms;
# ARGV[3] our fencing token.
# A fenced lock's key written back, after an extend a majority confirmed, on a master that
# had lost it: SET NX PX (never over another token), and the counter raised to our fencing
# token (a master that restarted empty lost its counter too; raising never lowers it).
# Returns 1 when our key was set, 0 when the key was there (the counter is raised anyway).
FENCED_RESTORE = Script(
    _checked("KEYS[2], 'string', 'a fencing counter', " + _COUNTER)
    + """
local set = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local counter = tonumber(redis.call('get', KEYS[2]) or '0')
if counter < tonumber(ARGV[3]) then
    redis.call('set', KEYS[2], ARGV[3])
end
if set then return 1 end
return 0
"""
)

# KEYS[1] the lock's fencing counter; ARGV[1] a fencing token.
# counter = max(counter, ARGV[1]); returns 1. Never lowers the counter, so writing back a
# token that a master has already seen exceeded is harmless.
FENCE_RAISE = Script(
    _checked("KEYS[1], 'string', 'a fencing counter', " + _COUNTER)
    + """
local counter = tonumber(redis.call('get', KEYS[1]) or '0')
if counter < tonumber(ARGV[1]) then
    redis.call('set', KEYS[1], ARGV[1])
end
return 1
""",
    idempotent=True,
)

# KEYS[1] lock key; KEYS[2], KEYS[3] the readers and the writer's intent of a read-write lock
# of that name (absent for any other kind). (FORCE_RELEASE shares the reading: its last two
# keys are those two.)
# Returns {1, token or nil, pttl, readers, intent or nil, intent's pttl}: who holds the key on
# this master and for how many more milliseconds (PTTL: -2 no key, -1 no expiry), read in one
# step so that a key expiring between two reads cannot show up as a holder with no ttl;
# ``readers`` is {token, ms left, ...} for each unexpired reader (its score is its expiry on
# this master's clock, as the read-write scripts keep it). The leading 1 marks an answer.
# A key of another type where a string or the readers belong reads as absent (``value``).
_INSPECT_READ = (
    _KEYS_OF_OTHERS
    + """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local readers = {}
if redis.call('type', KEYS[#KEYS - 1])['ok'] == 'zset' then
    local scored = redis.call('zrangebyscore', KEYS[#KEYS - 1], '(' .. now, '+inf', 'WITHSCORES')
    for i = 1, #scored, 2 do
        readers[#readers + 1] = scored[i]
        readers[#readers + 1] = tonumber(scored[i + 1]) - now
    end
end
local reply = {1, value(KEYS[1]), redis.call('pttl', KEYS[1]), readers,
    value(KEYS[#KEYS]), redis.call('pttl', KEYS[#KEYS])}"""
)

INSPECT = Script(_INSPECT_READ + "\nreturn reply\n", idempotent=True)

# KEYS[1] lock key; KEYS[2] its extend-order key; KEYS[3] the extend-order hash of the readers
# of a read-write lock of that name; KEYS[4] the readers; KEYS[5] a waiting writer's intent;
# ARGV[1], ARGV[2] the channels writers and readers wait on.
# As INSPECT (what it removes, read just before), and deletes the lock's key whatever token
# it holds (an operator's override) and the keys beside it that hold what we keep there;
# announces the release to waiters as a release would. The fencing counter stays: it must
# keep growing across holders, forced out or not.
FORCE_RELEASE = Script(
    _INSPECT_READ
    + """
local gone = redis.call('del', KEYS[1])
local kept = {{KEYS[2], 'string', """
    + _MARK
    + """}, {KEYS[3], 'hash'}, {KEYS[4], 'zset'}, {KEYS[5], 'string'}}
for _, key in ipairs(kept) do
    if not foreign(key[1], key[2], '', key[3]) then gone = gone + redis.call('del', key[1]) end
end
if gone > 0 then
    local token = reply[2] or reply[5] or 'readers'
    redis.call('publish', ARGV[1], token)
    redis.call('publish', ARGV[2], token)
end
return reply
"""
)


# --- several names at once (a multi-name lock) -----------------------------------------------
# Every multi-name script takes KEYS[1..n] the lock's names, sorted and unique, and last
# KEYS[n+1] the extend-order key of the first name. A master votes yes only when every key is
# ours: it sets all of them or none, so two holders of overlapping sets never share a master's
# vote on a common name, and the quorum argument of the single lock carries over name by name.

# ARGV[1] our token; ARGV[2] ttl in ms.
# Returns 1 when every name was free and is now set to our token, else {0, i}: nothing was
# set, and KEYS[i] is the first name found held (the client waits for that name's release).
MULTI_ACQUIRE = Script(
    """
local n = #KEYS - 1
for i = 1, n do
    if redis.call('exists', KEYS[i]) == 1 then
        return {0, i}
    end
end
for i = 1, n do
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
"""
)

# ARGV[1] our token; ARGV[2..n+1] the channel of each name (ARGV[1+i] for KEYS[i]), or
# nothing for a release that announces nothing (a rollback).
# Deletes each name that holds our token; returns 1 when every name held it, else 0: one
# name gone means our holding lapsed on this master. The order key goes with the first name,
# and only if that one is ours: once it lapsed, the order key may be its next holder's.
MULTI_RELEASE = Script(
    _KEYS_OF_OTHERS
    + """
local n = #KEYS - 1
local held = 0
if value(KEYS[1]) == ARGV[1] and ours(KEYS[n + 1], ARGV[1] .. ':') then
    redis.call('del', KEYS[n + 1])
end
for i = 1, n do
    if value(KEYS[i]) == ARGV[1] then
        redis.call('del', KEYS[i])
        held = held + 1
        if ARGV[1 + i] then redis.call('publish', ARGV[1 + i], ARGV[1]) end
    end
end
if held == n then return 1 end
return 0
""",
    idempotent=True,
    removes_token=True,
)

# ARGV[1] our token; ARGV[2] new ttl in ms; ARGV[3] the number of this extend, ARGV[4] the
# adoption flag (see EXTEND).
# As EXTEND, over every name: 1 when all hold our token (their ttl is now ARGV[2], unless a
# newer extend of ours set it), 0 and nothing touched when any is gone (never revive one);
# nil (Lua false) instead of 0 when no name exists at all (the master lost them all).
MULTI_EXTEND = Script(
    _checked("KEYS[#KEYS], 'string', 'an extend-order mark', " + _MARK)
    + """
local n = #KEYS - 1
if redis.call('exists', unpack(KEYS, 1, n)) == 0 then
    return false
end
for i = 1, n do
    if value(KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
local mark = ARGV[1] .. ':'
local last = redis.call('get', KEYS[n + 1])
if ARGV[4] ~= '1' and last and string.sub(last, 1, #mark) == mark
    and tonumber(string.sub(last, #mark + 1)) >= tonumber(ARGV[3]) then
    return 1
end
redis.call('set', KEYS[n + 1], mark .. ARGV[3], 'PX', ARGV[2])
for i = 1, n do
    redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1
""",
    idempotent=True,
)

# --- a counting semaphore ------------------------------------------------------------------
# KEYS[1] the semaphore: a sorted set of permit tokens, each scored by the time it expires,
# in milliseconds of this master's own clock (redis.call('TIME')), never a client's: expiry
# is judged where it is enforced, exactly as a key's PX is. KEYS[2] its extend-order hash
# (token -> the number of the last extend applied). Both keys carry a PEXPIRE reaching the
# latest permit's expiry: a backstop, so an abandoned semaphore leaves nothing behind.
# Scripts that call TIME and then write need effects replication: the default since Redis 5
# (and the only mode since 7), so replicas get the ZADD, not the script.
#
# The clock: microseconds from TIME, floored to ms. A permit is expired once its score is
# below now (score < now), so it lives at least as long as a PX key set at the same moment.

# ARGV[1] our token; ARGV[2] ttl in ms; ARGV[3] the limit (permits at most).
# Grants (adds ours, returns 1) if fewer than ARGV[3] unexpired permits remain, else returns
# 0 and changes nothing but the clean-up. Expired permits are dropped only when the set is
# full: below the limit they cannot turn a grant into a refusal, and the common case (room
# left) costs no range scan.
SEMAPHORE_ACQUIRE = Script(
    _checked("KEYS[1], 'zset', 'a semaphore (a sorted set)'", "KEYS[2], 'hash', 'extend numbers (a hash)'")
    + """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[3])
if redis.call('zcard', KEYS[1]) >= limit then
    local expired = redis.call('zrangebyscore', KEYS[1], '-inf', '(' .. now)
    for _, token in ipairs(expired) do
        redis.call('zrem', KEYS[1], token)
        redis.call('hdel', KEYS[2], token)
    end
    if redis.call('zcard', KEYS[1]) >= limit then
        return 0
    end
end
redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('pexpire', KEYS[2], ARGV[2])
end
return 1
"""
)

# ARGV[1] our token; ARGV[2] new ttl in ms; ARGV[3] the number of this extend, ARGV[4] the
# adoption flag (see EXTEND).
# Returns 1 when our permit is there and unexpired: it now expires ARGV[2] ms from now, or a
# newer extend of ours already set it. Returns 0 when it is there but expired, and nil (Lua
# false) when it is not in the set at all (the master restarted empty, or our expired permit
# was cleared away), changing nothing: an extend never revives a permit (its place may be
# someone else's by now).
SEMAPHORE_EXTEND = Script(
    _checked("KEYS[1], 'zset', 'a semaphore (a sorted set)'", "KEYS[2], 'hash', 'extend numbers (a hash)'")
    + """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('zscore', KEYS[1], ARGV[1])
if not score then
    return false
end
if tonumber(score) < now then
    return 0
end
local last = redis.call('hget', KEYS[2], ARGV[1])
if ARGV[4] ~= '1' and last and tonumber(last) >= tonumber(ARGV[3]) then
    return 1
end
redis.call('hset', KEYS[2], ARGV[1], ARGV[3])
redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local ttl = math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[2]))
redis.call('pexpire', KEYS[1], ttl)
redis.call('pexpire', KEYS[2], ttl)
return 1
""",
    idempotent=True,
)

# The releases' common step (a semaphore's permit, a read-write lock's reader): remove our
# token from the set KEYS[1] and the hash KEYS[2]; return 0 when it was not there, or expired
# (removed too, but it counts as gone). ``now`` is this master's ms, as in the acquire. A
# KEYS[1] that is no sorted set holds no permit of ours (someone else's key: left alone).
_REMOVE_OUR_PERMIT = """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('type', KEYS[1])['ok'] ~= 'zset' then
    return 0
end
local score = redis.call('zscore', KEYS[1], ARGV[1])
if not score then
    return 0
end
redis.call('zrem', KEYS[1], ARGV[1])
if redis.call('type', KEYS[2])['ok'] == 'hash' then
    redis.call('hdel', KEYS[2], ARGV[1])
end
if tonumber(score) < now then
    return 0
end"""

# ARGV[1] our token; ARGV[2] (optional) the channel waiters listen on.
# Removes our permit; returns 1 when it was there and unexpired (then announces the freed
# permit on ARGV[2]), else 0. An expired permit is removed too but counts as gone.
SEMAPHORE_RELEASE = Script(
    _REMOVE_OUR_PERMIT
    + """
if ARGV[2] then redis.call('publish', ARGV[2], ARGV[1]) end
return 1
""",
    idempotent=True,
    removes_token=True,
)

# --- a read-write lock ---------------------------------------------------------------------
# Every read-write script takes KEYS[1] the writer's key (a string: the writer's token, PX
# as a lock's key), KEYS[2] the writer's intent (a string: the token of a writer held back
# by readers, with a PX), KEYS[3] the readers (a sorted set of reader tokens, each scored by
# the time it expires in ms of this master's own clock, as the semaphore's permits are) and
# KEYS[4] the readers' extend-order hash (token -> number of its last extend applied). A
# master grants a reader only with no writer and no intent, and a writer only with no writer
# and no unexpired reader: a reader and a writer never both hold one master's vote, and two
# majorities share a master (docs/algorithm.md, "Read-write lock").
#
# While readers hold a name, its key (KEYS[1]) holds READERS_MARK, expiring with the last of
# them: a plain lock's SET NX on that name is refused there as it is by a writer, and so is
# any peer client's lock of that name. (Without it a plain lock and readers of one name were
# granted at once: the plain lock never looks at the readers.) A writer takes the mark for
# absent once no unexpired reader is left.
_MARK_VALUE = "'" + READERS_MARK + "'"

# The acquires' common step: ``now`` (this master's ms, as the semaphore's), and the readers
# expired by it dropped (a crashed reader's entry; ZRANGEBYSCORE finds none, cheaply, else).
_RW_DROP_EXPIRED_READERS = """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('zrangebyscore', KEYS[3], '-inf', '(' .. now)
for _, token in ipairs(expired) do
    redis.call('zrem', KEYS[3], token)
    redis.call('hdel', KEYS[4], token)
end"""

_RW_CHECKED = _checked(
    "KEYS[2], 'string', 'a writer\\'s intent (its token)'",
    "KEYS[3], 'zset', 'readers (a sorted set)'",
    "KEYS[4], 'hash', 'extend numbers (a hash)'",
)

# ARGV[1] our token; ARGV[2] ttl in ms.
# Returns 1 when no writer (nor any other lock of that name) holds the lock and no writer
# waits: our token is now a reader, and the name's key marks readers until the last of them
# expires. Else 0 and nothing added.
RW_READ_ACQUIRE = Script(
    _RW_CHECKED
    + """
if (redis.call('exists', KEYS[1]) == 1 and value(KEYS[1]) ~= """
    + _MARK_VALUE
    + """) or redis.call('exists', KEYS[2]) == 1 then
    return 0
end
"""
    + _RW_DROP_EXPIRED_READERS
    + """
redis.call('zadd', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('pttl', KEYS[3]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[3], ARGV[2])
    redis.call('pexpire', KEYS[4], ARGV[2])
end
redis.call('set', KEYS[1], """
    + _MARK_VALUE
    + """, 'PX', redis.call('pttl', KEYS[3]))
return 1
"""
)

# KEYS[1] the readers; KEYS[2] their extend-order hash; KEYS[3] the name's key; ARGV as
# SEMAPHORE_EXTEND's. As SEMAPHORE_EXTEND on the readers, and on success the readers' mark
# in the name's key lives as long as they do (written back where it was gone: our reader
# holds, so no one else may hold the name there).
RW_READ_EXTEND = Script(
    SEMAPHORE_EXTEND.source.replace(
        "\nreturn 1\n",
        "\nif redis.call('exists', KEYS[3]) == 0 or value(KEYS[3]) == "
        + _MARK_VALUE
        + " then\n    redis.call('set', KEYS[3], "
        + _MARK_VALUE
        + ", 'PX', ttl)\nend\nreturn 1\n",
    ),
    idempotent=True,
)

# ARGV[1] our token; ARGV[2] ttl in ms (of the writer's key, and of its intent).
# Returns 1 when no writer holds the lock and no unexpired reader is left: our token is now
# the writer's key, and the intent is cleared (ours, or a writer's whose next attempt marks
# it again). Returns 0 otherwise, and marks our intent (ARGV[2] ms; it replaces any other
# writer's), so that no new reader is let in while a writer waits: for these readers to
# leave, or for the writer holding it now to release (then the writers waiting go first).
RW_WRITE_ACQUIRE = Script(
    _RW_CHECKED
    + """
local held = redis.call('exists', KEYS[1]) == 1 and value(KEYS[1]) ~= """
    + _MARK_VALUE
    + """
if not held then"""
    + _RW_DROP_EXPIRED_READERS
    + """
    held = redis.call('zcard', KEYS[3]) > 0
end
if held then
    redis.call('set', KEYS[2], ARGV[1], 'PX', ARGV[2])
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('del', KEYS[2])
return 1
"""
)

# KEYS[1] the readers; KEYS[2] their extend-order hash; KEYS[3] the name's key; ARGV[1] our
# token; ARGV[2] (optional) the channel writers wait on.
# As SEMAPHORE_RELEASE (1 when our reader was there and unexpired, else 0). The last reader
# out takes the readers' mark from the name's key, and announces: before that no writer can
# get in here, and a writer woken for nothing would be busy asking when the last reader's
# announcement comes.
RW_READ_RELEASE = Script(
    _KEYS_OF_OTHERS
    + _REMOVE_OUR_PERMIT
    + """
if redis.call('zcount', KEYS[1], now, '+inf') == 0 then
    if value(KEYS[3]) == """
    + _MARK_VALUE
    + """ then redis.call('del', KEYS[3]) end
    if ARGV[2] then redis.call('publish', ARGV[2], ARGV[1]) end
end
return 1
""",
    idempotent=True,
    removes_token=True,
)

# KEYS[1] the writer's key; KEYS[2] its extend-order key; KEYS[3] the writer's intent;
# ARGV[1] our token; ARGV[2], ARGV[3] (optional) the channels writers and readers wait on.
# As RELEASE_AND_NOTIFY for the writer's key, and also takes back our intent (a writer that
# gives up, or that won on other masters, must not keep readers out here). Returns 1 when
# the writer's key held our token and is deleted, else 0. Announces on ARGV[2] and ARGV[3]
# when either was ours: readers wait for both to go.
RW_WRITE_RELEASE = Script(
    _KEYS_OF_OTHERS
    + """
local freed = 0
if value(KEYS[3]) == ARGV[1] then
    redis.call('del', KEYS[3])
    freed = 1
end
local held = 0
if value(KEYS[1]) == ARGV[1] then
    if ours(KEYS[2], ARGV[1] .. ':') then redis.call('del', KEYS[2]) end
    redis.call('del', KEYS[1])
    held = 1
end
if held + freed > 0 then
    for i = 2, #ARGV do redis.call('publish', ARGV[i], ARGV[1]) end
end
return held
""",
    idempotent=True,
    removes_token=True,
)

# KEYS[1] lock key; KEYS[2] its extend-order key; ARGV[1] the releaser's token, ARGV[2] the
# next holder's, ARGV[3] the next holder's ttl in ms. Hands the lock over (a local waiter
# takes it in one round: redlock._protocol.core.Handoff): 1 when the releaser's token was there and
# is now replaced, else 0 and nothing changes. It compares first: where the releaser's
# holding is gone (expired, and maybe taken by someone else) it writes nothing. The
# releaser's extend numbering goes with its token. Not idempotent: sent again it finds
# the next holder's token and answers 0 (the native form, SET IFEQ, does the same).
HANDOFF = Script(
    _KEYS_OF_OTHERS
    + """
if value(KEYS[1]) == ARGV[1] then
    redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])
    if ours(KEYS[2], ARGV[1] .. ':') then redis.call('del', KEYS[2]) end
    return 1
end
return 0
"""
)

ALL = (
    RELEASE,
    EXTEND,
    RELEASE_AND_NOTIFY,
    FENCED_ACQUIRE,
    FENCED_RESTORE,
    FENCE_RAISE,
    INSPECT,
    FORCE_RELEASE,
    MULTI_ACQUIRE,
    MULTI_RELEASE,
    MULTI_EXTEND,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND,
    SEMAPHORE_RELEASE,
    RW_READ_ACQUIRE,
    RW_READ_EXTEND,
    RW_READ_RELEASE,
    RW_WRITE_ACQUIRE,
    RW_WRITE_RELEASE,
    HANDOFF,
)

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
