"""What a master does with each command the lock sends: SET NX PX and every Lua script of
:mod:`redlock._protocol.scripts`, modelled in Python once, here.

Where it sits: below the simulated masters (:mod:`chaos.sim.world`), which feed it the
commands they parse off the wire, and the pure tests (``tests/test_core.py``,
``tests/test_core_primitives.py``), which feed it :class:`~redlock._protocol.core.Command` objects.
It reads no clock: every call takes the master's own time (seconds of its wall clock),
which is what Redis expires keys by, so a simulated clock that jumps or runs fast expires
keys early exactly as a real one does.

Scripts are found by their SHA-1, as a master finds them, so a script that a broken client
(:mod:`chaos.variants`) puts in place of the real one must be modelled here too: an unknown
script is an error reply, never a silent guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from redlock._protocol import scripts as _scripts
from redlock._protocol.core import READERS_MARK, Command, ErrorReply

from .mypyc_attr import mypyc_attr

__all__ = ["MODELLED", "UNMODELLED", "Keyspace", "Reply"]

#: A reply as the client's parser would give it: b"OK", None, an int, bytes, a list, or an
#: ErrorReply.
Reply = object

Arg = str | bytes | int

#: What :meth:`Keyspace.run_script` answers for a script it has no model of.
UNMODELLED = object()


def _text(arg: Arg) -> str:
    return arg.decode() if isinstance(arg, bytes) else str(arg)


# Open to subclasses in Python where compiled: the pure tier's model masters are one.
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass
class Keyspace:
    """One master's keys: ``keys[name] = (value, expires_at)`` in the master's seconds
    (``math.inf``: no expiry). A value is a string, or a dict for the semaphore's sorted
    set (token -> expiry score in ms) and its extend-order hash."""

    keys: dict[str, tuple[object, float]] = field(default_factory=dict)

    def copy(self) -> Keyspace:
        return Keyspace({k: (dict(v) if isinstance(v, dict) else v, t) for k, (v, t) in self.keys.items()})

    def get(self, key: str, now: float) -> object:
        entry = self.keys.get(key)
        if entry is None:
            return None
        if entry[1] <= now:  # Redis expires lazily on access: the same as expiring on time
            del self.keys[key]
            return None
        return entry[0]

    def set(self, key: str, value: object, now: float, ttl_ms: float | None = None) -> None:
        self.keys[key] = (value, math.inf if ttl_ms is None else now + int(ttl_ms) / 1000)

    def delete(self, key: str) -> int:
        return int(self.keys.pop(key, None) is not None)

    def pexpire(self, key: str, ttl_ms: float, now: float) -> int:
        value = self.get(key, now)
        if value is None:
            return 0
        self.set(key, value, now, ttl_ms)
        return 1

    def pttl(self, key: str, now: float) -> int:
        if self.get(key, now) is None:
            return -2
        expires = self.keys[key][1]
        return -1 if math.isinf(expires) else math.floor((expires - now) * 1000)

    def holder(self, key: str, now: float) -> str | None:
        value = self.get(key, now)
        return value if isinstance(value, str) else None

    # --- commands -----------------------------------------------------------------------------

    def command(self, command: Command, now: float) -> Reply:
        """Apply a command object as the flows build it."""
        return self.apply(command.args, now)

    def apply(self, args: Sequence[Arg], now: float) -> Reply:
        """Apply one command (its arguments as sent) at the master's time ``now``."""
        return self.apply_text([_text(arg) for arg in args], now)

    def run_script(self, sha: str, args: list[str], now: float) -> Reply:
        """EVALSHA's or EVAL's ``args`` (as sent) by the model of script ``sha``, or
        :data:`UNMODELLED` (a simulated master's path for every script call)."""
        model = MODELLED.get(sha)
        if model is None:
            return UNMODELLED
        count = int(args[2])
        return model(self, args[3 : 3 + count], args[3 + count :], now)

    def apply_text(self, args: list[str], now: float) -> Reply:
        """:meth:`apply` for arguments already decoded (as a simulated master reads them)."""
        name = args[0].upper()
        if name in ("EVALSHA", "EVAL"):
            sha = args[1] if name == "EVALSHA" else _scripts.Script(args[1]).sha
            reply = self.run_script(sha, args, now)
            if reply is UNMODELLED:
                return ErrorReply("NOSCRIPT No matching script." if name == "EVALSHA" else "ERR unmodelled script")
            return reply
        if name == "SET":
            key, value = args[1], args[2]
            options = [a.upper() for a in args[3:]]
            if "NX" in options and self.get(key, now) is not None:
                return None
            ttl = int(args[3 + options.index("PX") + 1]) if "PX" in options else None
            self.set(key, value, now, ttl)
            return b"OK"
        if name == "GET":
            found = self.holder(args[1], now)
            return None if found is None else found.encode()
        if name == "DEL":
            return sum(self.delete(k) for k in args[1:])
        return ErrorReply(f"ERR unknown command '{name}'")


Model = Callable[[Keyspace, list[str], list[str], float], Reply]


def _foreign(ks: Keyspace, key: str, now: float, wanted: type, shape: str = "") -> ErrorReply | None:
    """The scripts' refusal to touch a key that holds what we never write there (see
    redlock._protocol.scripts, "keys of others"): ``wanted`` str or dict, ``shape`` a regex a string
    must match."""
    value = ks.get(key, now)
    if value is None or (isinstance(value, wanted) and (not shape or re.search(shape, str(value)))):
        return None
    return ErrorReply(f"{_scripts.FOREIGN_KEY} {key} holds {value!r}")


def _ours(ks: Keyspace, key: str, token: str, now: float) -> bool:
    """Whether ``key`` is our holding's extend-order mark: deleted only then."""
    found = ks.holder(key, now)
    return found is not None and found.startswith(token + ":")


_MARK, _COUNTER = r":\d+$", r"^\d+$"


def _release(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    if ks.holder(keys[0], now) != argv[0]:
        return 0
    if len(keys) > 1 and _ours(ks, keys[1], argv[0], now):
        ks.delete(keys[1])
    return ks.delete(keys[0])


def _adopting(argv: list[str]) -> bool:
    """An adoption's extend (ARGV[4] '1'): its number replaces the order mark, unread."""
    return len(argv) > 3 and argv[3] == "1"


def _extend_order_applied(ks: Keyspace, order: str, token: str, number: int, now: float) -> bool:
    """Whether a newer (or this) extend of the holding of ``token`` was applied already."""
    last = ks.holder(order, now)
    mark = token + ":"
    return last is not None and last.startswith(mark) and int(last[len(mark) :]) >= number


def _extend(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    token, ttl, number = argv[0], int(argv[1]), int(argv[2])
    refusal = _foreign(ks, keys[1], now, str, _MARK)
    if refusal is not None:
        return refusal
    if ks.get(keys[0], now) is None:
        return None
    holder = ks.holder(keys[0], now)
    if holder != token:
        return 0
    if not _adopting(argv) and _extend_order_applied(ks, keys[1], token, number, now):
        return 1
    ks.set(keys[1], f"{token}:{number}", now, ttl)
    return ks.pexpire(keys[0], ttl, now)


def _fenced_acquire(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    refusal = _foreign(ks, keys[1], now, str, _COUNTER)
    if refusal is not None:
        return refusal
    if ks.get(keys[0], now) is not None:
        return 0
    ks.set(keys[0], argv[0], now, int(argv[1]))
    counter = int(ks.holder(keys[1], now) or 0)
    before = ks.holder(keys[2], now) if len(keys) > 2 else None
    if before is not None and before.isdigit():
        counter = max(counter, int(before))
    return [1, counter]


def _fenced_restore(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    refusal = _foreign(ks, keys[1], now, str, _COUNTER)
    if refusal is not None:
        return refusal
    set_ = ks.get(keys[0], now) is None
    if set_:
        ks.set(keys[0], argv[0], now, int(argv[1]))
    _fence_raise(ks, keys[1:], argv[2:], now)
    return int(set_)


def _fence_raise(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    refusal = _foreign(ks, keys[0], now, str, _COUNTER)
    if refusal is not None:
        return refusal
    if int(ks.holder(keys[0], now) or 0) < int(argv[0]):
        ks.set(keys[0], argv[0], now)
    return 1


def _inspect(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    holder, intent = ks.holder(keys[0], now), ks.holder(keys[-1], now)
    ms = math.floor(now * 1000)
    readers = sorted((score, token) for token, score in _permits(ks, keys[-2], now).items() if score > ms)
    return [
        1,
        None if holder is None else holder.encode(),
        ks.pttl(keys[0], now),
        [item for score, token in readers for item in (token.encode(), int(score - ms))],
        None if intent is None else intent.encode(),
        ks.pttl(keys[-1], now),
    ]


def _force_release(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    reply = _inspect(ks, keys, argv, now)
    ks.delete(keys[0])
    kept: list[tuple[str, type, str]] = [(keys[1], str, _MARK), (keys[2], dict, ""), (keys[3], dict, "")]
    kept.append((keys[4], str, ""))
    for key, wanted, shape in kept:
        if _foreign(ks, key, now, wanted, shape) is None:
            ks.delete(key)
    return reply


def _multi_acquire(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    names = keys[:-1]
    for i, name in enumerate(names, start=1):
        if ks.get(name, now) is not None:
            return [0, i]
    for name in names:
        ks.set(name, argv[0], now, int(argv[1]))
    return 1


def _multi_release(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    names = keys[:-1]
    if ks.holder(names[0], now) == argv[0] and _ours(ks, keys[-1], argv[0], now):
        ks.delete(keys[-1])
    held = 0
    for name in names:
        if ks.holder(name, now) == argv[0]:
            ks.delete(name)
            held += 1
    return int(held == len(names))


def _multi_extend(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    names, token, ttl, number = keys[:-1], argv[0], int(argv[1]), int(argv[2])
    refusal = _foreign(ks, keys[-1], now, str, _MARK)
    if refusal is not None:
        return refusal
    if all(ks.get(name, now) is None for name in names):
        return None
    if any(ks.holder(name, now) != token for name in names):
        return 0
    if not _adopting(argv) and _extend_order_applied(ks, keys[-1], token, number, now):
        return 1
    ks.set(keys[-1], f"{token}:{number}", now, ttl)
    for name in names:
        ks.pexpire(name, ttl, now)
    return 1


def _permits(ks: Keyspace, key: str, now: float) -> dict[str, float]:
    value = ks.get(key, now)
    return value if isinstance(value, dict) else {}


def _keep(ks: Keyspace, keys: list[str], sets: tuple[dict[str, float], dict[str, float]], ttl: int, now: float) -> None:
    """Write the semaphore's set and hash back, their backstop expiry at least ``ttl``."""
    backstop = max(ks.pttl(keys[0], now), ttl)
    for key, value in zip(keys, sets, strict=False):
        ks.set(key, value, now, backstop)


def _semaphore_refusal(ks: Keyspace, keys: list[str], now: float) -> ErrorReply | None:
    return _foreign(ks, keys[0], now, dict) or _foreign(ks, keys[1], now, dict)


def _semaphore_acquire(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    refusal = _semaphore_refusal(ks, keys, now)
    if refusal is not None:
        return refusal
    ms = math.floor(now * 1000)
    pool, order = _permits(ks, keys[0], now), _permits(ks, keys[1], now)
    limit = int(argv[2])
    if len(pool) >= limit:
        for token in [t for t, score in pool.items() if score < ms]:
            del pool[token]
            order.pop(token, None)
        if len(pool) >= limit:
            return 0
    pool[argv[0]] = ms + int(argv[1])
    _keep(ks, keys, (pool, order), int(argv[1]), now)
    return 1


def _semaphore_extend(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    refusal = _semaphore_refusal(ks, keys, now)
    if refusal is not None:
        return refusal
    ms = math.floor(now * 1000)
    pool, order = _permits(ks, keys[0], now), _permits(ks, keys[1], now)
    token, ttl, number = argv[0], int(argv[1]), int(argv[2])
    if token not in pool:
        return None
    if pool[token] < ms:
        return 0
    if not _adopting(argv) and order.get(token, -math.inf) >= number:
        return 1
    order[token] = number
    pool[token] = ms + ttl
    _keep(ks, keys, (pool, order), ttl, now)
    return 1


def _semaphore_release(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    ms = math.floor(now * 1000)
    pool, order = _permits(ks, keys[0], now), _permits(ks, keys[1], now)
    score = pool.pop(argv[0], None)
    if score is None:
        return 0
    order.pop(argv[0], None)
    return int(score >= ms)


def _readers_marked(ks: Keyspace, name: str, now: float) -> bool:
    """Whether the name's key is the readers' mark (see _scripts, "a read-write lock")."""
    return ks.holder(name, now) == READERS_MARK


def _mark_readers(ks: Keyspace, keys: list[str], now: float) -> None:
    """The readers' mark in the name's key ``keys[0]``, as long-lived as the readers ``keys[2]``."""
    ks.set(keys[0], READERS_MARK, now, ks.pttl(keys[2], now))


def _rw_refusal(ks: Keyspace, keys: list[str], now: float) -> ErrorReply | None:
    return _foreign(ks, keys[1], now, str) or _foreign(ks, keys[2], now, dict) or _foreign(ks, keys[3], now, dict)


def _rw_read_extend(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    reply = _semaphore_extend(ks, keys[:2], argv, now)
    if reply == 1 and (ks.get(keys[2], now) is None or _readers_marked(ks, keys[2], now)):
        ks.set(keys[2], READERS_MARK, now, ks.pttl(keys[0], now))
    return reply


def _rw_read_release(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    reply = _semaphore_release(ks, keys[:2], argv, now)
    ms = math.floor(now * 1000)
    if not any(score >= ms for score in _permits(ks, keys[0], now).values()) and _readers_marked(ks, keys[2], now):
        ks.delete(keys[2])
    return reply


def _drop_expired_readers(ks: Keyspace, keys: list[str], now: float) -> tuple[dict[str, float], dict[str, float]]:
    """A read-write lock's readers and their extend-order hash, expired readers dropped."""
    ms = math.floor(now * 1000)
    readers, order = _permits(ks, keys[2], now), _permits(ks, keys[3], now)
    for token in [t for t, score in readers.items() if score < ms]:
        del readers[token]
        order.pop(token, None)
    return readers, order


def _rw_read_acquire(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    refusal = _rw_refusal(ks, keys, now)
    if refusal is not None:
        return refusal
    name_held = ks.get(keys[0], now) is not None and not _readers_marked(ks, keys[0], now)
    if name_held or ks.get(keys[1], now) is not None:
        return 0
    readers, order = _drop_expired_readers(ks, keys, now)
    readers[argv[0]] = math.floor(now * 1000) + int(argv[1])
    _keep(ks, keys[2:], (readers, order), int(argv[1]), now)
    _mark_readers(ks, keys, now)
    return 1


def _rw_write_acquire(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    refusal = _rw_refusal(ks, keys, now)
    if refusal is not None:
        return refusal
    held = ks.get(keys[0], now) is not None and not _readers_marked(ks, keys[0], now)
    if not held:
        readers, order = _drop_expired_readers(ks, keys, now)
        if readers:
            _keep(ks, keys[2:], (readers, order), 0, now)
            held = True
    if held:
        ks.set(keys[1], argv[0], now, int(argv[1]))
        return 0
    # Every reader in them expired: the script's ZREMs and HDELs leave them empty, gone.
    ks.delete(keys[2])
    ks.delete(keys[3])
    ks.set(keys[0], argv[0], now, int(argv[1]))
    ks.delete(keys[1])
    return 1


def _handoff(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    if ks.holder(keys[0], now) != argv[0]:
        return 0
    ks.set(keys[0], argv[1], now, int(argv[2]))
    if _ours(ks, keys[1], argv[0], now):
        ks.delete(keys[1])
    return 1


def _rw_write_release(ks: Keyspace, keys: list[str], argv: list[str], now: float) -> Reply:
    if ks.holder(keys[2], now) == argv[0]:
        ks.delete(keys[2])
    return _release(ks, keys[:2], argv, now)


MODELLED: dict[str, Model] = {
    _scripts.RELEASE.sha: _release,
    _scripts.RELEASE_AND_NOTIFY.sha: _release,
    _scripts.EXTEND.sha: _extend,
    _scripts.FENCED_ACQUIRE.sha: _fenced_acquire,
    _scripts.FENCE_RAISE.sha: _fence_raise,
    _scripts.FENCED_RESTORE.sha: _fenced_restore,
    _scripts.INSPECT.sha: _inspect,
    _scripts.FORCE_RELEASE.sha: _force_release,
    _scripts.MULTI_ACQUIRE.sha: _multi_acquire,
    _scripts.MULTI_RELEASE.sha: _multi_release,
    _scripts.MULTI_EXTEND.sha: _multi_extend,
    _scripts.SEMAPHORE_ACQUIRE.sha: _semaphore_acquire,
    _scripts.SEMAPHORE_EXTEND.sha: _semaphore_extend,
    _scripts.SEMAPHORE_RELEASE.sha: _semaphore_release,
    _scripts.RW_READ_ACQUIRE.sha: _rw_read_acquire,
    _scripts.RW_READ_EXTEND.sha: _rw_read_extend,
    _scripts.RW_READ_RELEASE.sha: _rw_read_release,
    _scripts.RW_WRITE_ACQUIRE.sha: _rw_write_acquire,
    _scripts.RW_WRITE_RELEASE.sha: _rw_write_release,
    _scripts.HANDOFF.sha: _handoff,
}
"""Every script a master can be asked to run, by SHA-1 (the broken clients' are added by
:mod:`chaos.sim.variants`)."""
