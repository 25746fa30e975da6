"""The kinds of lock: what each one sends to a master, and how many masters must agree.

Where it sits: above the protocol's vocabulary (:mod:`redlock._protocol.core`) and below the flows
(:mod:`redlock._protocol.flows`), which are the same for every kind. A kind is one object carrying
its commands for acquire, extend, release and rollback, its quorum rule, the key a failed
acquire waits on, and the names telemetry gives its rounds. A new primitive is one new
class here plus its scripts in :mod:`redlock._protocol.scripts` (the read-write lock is two: its readers and
its writer, each a kind).

Every kind also has a *restore*: the command that writes our holding back on a master that
answered an extend with "no key at all" (it restarted empty), once a majority has confirmed
the extend elsewhere. It is the kind's own acquire with our token, so it never overwrites
another holder and keeps every per-master limit (docs/algorithm.md, "Restoring a key a
master lost", says why it is safe).

Every kind keeps an extend-order key (:func:`~redlock._protocol.core.order_key`) beside its first
key, so that an extend arriving late never undoes a newer one, and its release deletes it.

A lock on one name also has native forms of its extend and release (``SET IFEQ``,
``DELIFEQ``/``DELEX``), for the masters that have them: they need no Lua, and no order key
(docs/algorithm.md, "Native commands", says why none is needed there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from redlock._protocol import scripts as _scripts
from redlock._protocol.core import (
    DELEX,
    DELIFEQ,
    SET_IFEQ,
    Command,
    NativeForm,
    Round,
    fence_key,
    intent_key,
    legacy_fence_key,
    order_key,
    quorum_size,
    readers_key,
    release_channel,
    semaphore_quorum,
)


@dataclass(frozen=True)
class LockKind:
    """A lock on one name (the base: plain Redlock)."""

    # (No ClassVar here: a mypyc-compiled dataclass takes a ClassVar for a read-only field
    # of every subclass. Properties are what compiled and pure code read alike.)

    @property
    def fencing(self) -> bool:
        """Whether the acquire also returns each master's counter (see :class:`FencedLock`)."""
        return False

    @property
    def marks_refusals(self) -> bool:
        """Whether a refused acquire may leave a mark of ours behind (a writer's intent): an
        acquire that gives up takes it back, with its release command sent to every master."""
        return False

    @property
    def mode(self) -> str:
        """A read-write lock's side: "read" or "write"; "" for every other kind."""
        return ""

    @property
    def names(self) -> tuple[str, ...]:
        """A multi-name lock's names; () for a lock on one name."""
        return ()

    @property
    def limit(self) -> int:
        """A semaphore's number of permits; 0 for a lock."""
        return 0

    @property
    def waits_in_line(self) -> bool:
        """Whether this client's blocking acquires of it take turns at the masters (see
        :class:`~redlock._protocol.core.Line`): locks with one holder of one name, not semaphores."""
        return not self.names and not self.limit

    @property
    def hands_over(self) -> bool:
        """Whether a release may hand the holding to a waiter in line of the same client by
        swapping tokens on the masters (see :class:`~redlock._protocol.core.Handoff`): a plain lock.
        Not a fenced one (the swap raises no counter), nor a writer (whose release also takes
        its intent back and tells the readers)."""
        return self.waits_in_line

    def quorum(self, node_count: int) -> int:
        return quorum_size(node_count)

    def keys(self, key: str) -> tuple[str, ...]:
        """Every key this kind holds on each master for a lock named ``key``."""
        return (key,)

    def acquire(self, key: str, token: str, ttl_ms: int) -> Command:
        return Command.set_nx_px(key, token, ttl_ms)

    def extend(self, key: str, token: str, ttl_ms: int, extend_id: int, *, adopt: bool = False) -> Command:
        """Reset our token's ttl; ``adopt``: as the first extend of a Lock that takes the
        holding over by its token, whose numbering starts again (see _scripts.EXTEND)."""
        script = _scripts.EXTEND
        native = NativeForm(SET_IFEQ, Command(("SET", key, token, "IFEQ", token, "PX", ttl_ms), script))
        return Command.run_script(
            script, [key, order_key(key)], _extend_args(token, ttl_ms, extend_id, adopt), (native,)
        )

    def restore(self, key: str, token: str, ttl_ms: int, fencing_token: int | None) -> Command:
        """Write our token back where a master lost it: ``SET NX``, never over another's."""
        return Command.set_nx_px(key, token, ttl_ms)

    def release(self, key: str, token: str, *, notify: bool) -> Command:
        """Delete our token (``notify``: and announce it to waiters; a rollback does not)."""
        if notify:
            script, args = _scripts.RELEASE_AND_NOTIFY, [token, release_channel(key)]
            # Natively, the announcement follows the delete; unlike the script's, it goes out
            # even where our token was gone: a waiter it wakes early only tries once more.
            then: Command | None = Command(("PUBLISH", release_channel(key), token))
        else:
            script, args, then = _scripts.RELEASE, [token], None
        native = (
            NativeForm(DELIFEQ, Command(("DELIFEQ", key, token), script), then),
            NativeForm(DELEX, Command(("DELEX", key, "IFEQ", token), script), then),
        )
        return Command.run_script(script, [key, order_key(key)], args, native)

    def handoff(self, key: str, token: str, new_token: str, ttl_ms: int) -> Command:
        """Replace our token by ``new_token`` for ``ttl_ms``, only where ours still holds."""
        script = _scripts.HANDOFF
        native = NativeForm(SET_IFEQ, Command(("SET", key, new_token, "IFEQ", token, "PX", ttl_ms), script))
        return Command.run_script(script, [key, order_key(key)], [token, new_token, ttl_ms], (native,))

    def wake_key(self, key: str, acquire: Round) -> str:
        """Whose release a failed acquire waits for."""
        return key


@dataclass(frozen=True)
class FencedLock(LockKind):
    """A lock on one name whose holders get increasing fencing tokens (see
    :func:`redlock._protocol.flows.fencing_token_from`): the acquire also reads each master's counter."""

    @property
    def fencing(self) -> bool:
        return True

    @property
    def hands_over(self) -> bool:
        return False

    def acquire(self, key: str, token: str, ttl_ms: int) -> Command:
        keys = [key, fence_key(key), legacy_fence_key(key)]
        return Command.run_script(_scripts.FENCED_ACQUIRE, keys, [token, ttl_ms])

    def restore(self, key: str, token: str, ttl_ms: int, fencing_token: int | None) -> Command:
        """As the plain lock's, and the master's lost counter raised back to our fencing token."""
        return Command.run_script(_scripts.FENCED_RESTORE, [key, fence_key(key)], [token, ttl_ms, fencing_token or 0])

    def raise_fence(self, key: str, fencing_token: int) -> Command:
        """Write ``fencing_token`` back as the counter's new floor (``max(counter, token)``)."""
        return Command.run_script(_scripts.FENCE_RAISE, [fence_key(key)], [fencing_token])


@dataclass(frozen=True)
class MultiLock(LockKind):
    """One lock on several names, all or none on each master (one script per master)."""

    #: Sorted and unique (the lock's key is the first).
    all_names: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.all_names

    def keys(self, key: str) -> tuple[str, ...]:
        return self.all_names

    def acquire(self, key: str, token: str, ttl_ms: int) -> Command:
        return Command.run_script(_scripts.MULTI_ACQUIRE, [*self.all_names, order_key(key)], [token, ttl_ms])

    def extend(self, key: str, token: str, ttl_ms: int, extend_id: int, *, adopt: bool = False) -> Command:
        keys = [*self.all_names, order_key(key)]
        return Command.run_script(_scripts.MULTI_EXTEND, keys, _extend_args(token, ttl_ms, extend_id, adopt))

    def restore(self, key: str, token: str, ttl_ms: int, fencing_token: int | None) -> Command:
        """All names or none, each only where free: the acquire itself, with our token."""
        return self.acquire(key, token, ttl_ms)

    def release(self, key: str, token: str, *, notify: bool) -> Command:
        channels = [release_channel(name) for name in self.all_names] if notify else []
        return Command.run_script(_scripts.MULTI_RELEASE, [*self.all_names, order_key(key)], [token, *channels])

    def wake_key(self, key: str, acquire: Round) -> str:
        """The name the most refusing masters found held (the script names it, 1-based)."""
        held = [
            int(reply[1]) for reply in acquire.replies.values() if isinstance(reply, list | tuple) and len(reply) == 2
        ]
        if not held:
            return key
        index = max(set(held), key=held.count)
        return self.all_names[index - 1] if 1 <= index <= len(self.all_names) else key


@dataclass(frozen=True)
class Semaphore(LockKind):
    """Up to ``permits`` holders at once on one name (see :func:`~redlock._protocol.core.semaphore_quorum`)."""

    permits: int = 1

    @property
    def limit(self) -> int:
        return self.permits

    def quorum(self, node_count: int) -> int:
        return semaphore_quorum(node_count, self.permits)

    def acquire(self, key: str, token: str, ttl_ms: int) -> Command:
        return Command.run_script(_scripts.SEMAPHORE_ACQUIRE, [key, order_key(key)], [token, ttl_ms, self.permits])

    def extend(self, key: str, token: str, ttl_ms: int, extend_id: int, *, adopt: bool = False) -> Command:
        args = _extend_args(token, ttl_ms, extend_id, adopt)
        return Command.run_script(_scripts.SEMAPHORE_EXTEND, [key, order_key(key)], args)

    def restore(self, key: str, token: str, ttl_ms: int, fencing_token: int | None) -> Command:
        """Our permit back only if the master has one free: the acquire itself, with our token."""
        return self.acquire(key, token, ttl_ms)

    def release(self, key: str, token: str, *, notify: bool) -> Command:
        channel = [release_channel(key)] if notify else []
        return Command.run_script(_scripts.SEMAPHORE_RELEASE, [key, order_key(key)], [token, *channel])


def _extend_args(token: str, ttl_ms: int, extend_id: int, adopt: bool) -> list[str | int]:
    """The arguments of every kind's extend script: an adoption adds its flag (ARGV[4])."""
    return [token, ttl_ms, extend_id, 1] if adopt else [token, ttl_ms, extend_id]


def _rw_keys(key: str) -> list[str]:
    """The keys every read-write script takes (see redlock._protocol.scripts, "a read-write lock")."""
    return [key, intent_key(key), readers_key(key), order_key(readers_key(key))]


@dataclass(frozen=True)
class ReadLock(LockKind):
    """A reader of a read-write lock on one name: any number of readers at once, never with
    a writer (docs/algorithm.md, "Read-write lock"). Each reader is a token in a sorted set
    per master, expiring on its own, as a semaphore's permit does: its extend is the
    semaphore's script on that set, its release the semaphore's but for when it announces;
    both also keep the readers' mark in the name's own key (see _scripts, "a read-write lock")."""

    @property
    def mode(self) -> str:
        return "read"

    @property
    def waits_in_line(self) -> bool:
        # Readers share: a client's readers waiting for a writer all go when it leaves,
        # rather than one by one behind the first (see core.Line and core.wakes_all).
        return False

    def acquire(self, key: str, token: str, ttl_ms: int) -> Command:
        return Command.run_script(_scripts.RW_READ_ACQUIRE, _rw_keys(key), [token, ttl_ms])

    def extend(self, key: str, token: str, ttl_ms: int, extend_id: int, *, adopt: bool = False) -> Command:
        readers = readers_key(key)
        args = _extend_args(token, ttl_ms, extend_id, adopt)
        return Command.run_script(_scripts.RW_READ_EXTEND, [readers, order_key(readers), key], args)

    def restore(self, key: str, token: str, ttl_ms: int, fencing_token: int | None) -> Command:
        """Our reader back only where no writer holds the name or waits: the acquire itself."""
        return self.acquire(key, token, ttl_ms)

    def release(self, key: str, token: str, *, notify: bool) -> Command:
        # Announced on the name's own channel, where a writer waiting for readers listens.
        channel = [release_channel(key)] if notify else []
        readers = readers_key(key)
        return Command.run_script(_scripts.RW_READ_RELEASE, [readers, order_key(readers), key], [token, *channel])

    def wake_key(self, key: str, acquire: Round) -> str:
        """Readers wait for the writer (or its intent) to go: announced on the readers' own
        channel, which wakes every reader of a client at once (see core.wakes_all)."""
        return readers_key(key)


@dataclass(frozen=True)
class WriteLock(LockKind):
    """The writer of a read-write lock on one name: its key is a plain lock's key (extended
    as one, natively where the master can), granted only where no unexpired reader is left.
    A writer refused for readers marks its intent, which keeps new readers out while it
    waits; its release, and an acquire that gives up, take the mark back."""

    @property
    def marks_refusals(self) -> bool:
        return True

    @property
    def hands_over(self) -> bool:
        return False

    @property
    def mode(self) -> str:
        return "write"

    def acquire(self, key: str, token: str, ttl_ms: int) -> Command:
        return Command.run_script(_scripts.RW_WRITE_ACQUIRE, _rw_keys(key), [token, ttl_ms])

    def restore(self, key: str, token: str, ttl_ms: int, fencing_token: int | None) -> Command:
        """Our key back only where no writer and no unexpired reader holds the name: the
        acquire itself (a lock's ``SET NX`` would set it beside a reader let in meanwhile).
        Refused, it marks our intent there, which our release takes back."""
        return self.acquire(key, token, ttl_ms)

    def release(self, key: str, token: str, *, notify: bool) -> Command:
        # Announced to the writers waiting (on the name's channel) and to the readers (on theirs).
        channels = [release_channel(key), release_channel(readers_key(key))] if notify else []
        return Command.run_script(_scripts.RW_WRITE_RELEASE, [key, order_key(key), intent_key(key)], [token, *channels])


PLAIN = LockKind()
FENCED = FencedLock()
READ = ReadLock()
WRITE = WriteLock()


def kind_of(*, fencing: bool = False, names: Sequence[str] = (), limit: int = 0, mode: str = "") -> LockKind:
    """The kind for a lock's settings (checked already: fencing only on one name, a
    read-write ``mode`` of "read" or "write" only for a lock on one name)."""
    if mode:
        return READ if mode == "read" else WRITE
    if limit:
        return Semaphore(limit)
    if names:
        return MultiLock(tuple(names))
    return FENCED if fencing else PLAIN


#: Telemetry's ``redlock.round.step`` of every script a kind runs, by its sha (a plain
#: ``SET`` round is an "acquire" and needs no entry).
ALL_STEPS: Mapping[str, str] = {
    _scripts.RELEASE.sha: "release",
    _scripts.RELEASE_AND_NOTIFY.sha: "release",
    _scripts.EXTEND.sha: "extend",
    _scripts.FENCED_ACQUIRE.sha: "acquire",
    _scripts.FENCE_RAISE.sha: "fence",
    _scripts.FENCED_RESTORE.sha: "restore",
    _scripts.MULTI_ACQUIRE.sha: "acquire",
    _scripts.MULTI_EXTEND.sha: "extend",
    _scripts.MULTI_RELEASE.sha: "release",
    _scripts.SEMAPHORE_ACQUIRE.sha: "acquire",
    _scripts.SEMAPHORE_EXTEND.sha: "extend",
    _scripts.SEMAPHORE_RELEASE.sha: "release",
    _scripts.RW_READ_ACQUIRE.sha: "acquire",
    _scripts.RW_READ_EXTEND.sha: "extend",
    _scripts.RW_READ_RELEASE.sha: "release",
    _scripts.RW_WRITE_ACQUIRE.sha: "acquire",
    _scripts.RW_WRITE_RELEASE.sha: "release",
    _scripts.HANDOFF.sha: "handoff",
}
