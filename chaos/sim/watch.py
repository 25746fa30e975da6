"""Interleavings the real-process catalogue does not stage, seen as they happen on a master.

Where it sits: above :mod:`chaos.sim.world` (a :class:`WatchedMaster` is a master that
also looks at each lock command before and after applying it) and below
:mod:`chaos.sim.trial` (which uses it when asked) and :func:`chaos.sim.search.hunt`.

Timing alone rarely makes these in a real run, and no scenario of the catalogue forces
them; the simulator sees every one, by the master's own state when the command lands:

``late-grant-after-rollback``
    A master grants a token after another master already ran that token's release: the
    client gave the attempt up (the round ended without a majority, or too late) and its
    rollback, or its release after holding, is landing, while a slow SET still sets the
    key here, after the client stopped counting on it.
``extend-crossing-restart``
    An extend lands on a master that granted the token in an earlier life: it restarted
    between the grant and the extend (the key is gone, or was restored).
``release-overtaken``
    A release lands on a master where the token's key has lapsed and another token holds
    the name: the release finds someone else's key (and, comparing, leaves it).

A watched master behaves exactly as a plain one (the same replies, the same draws), so a
watched trial's history is the unwatched one's; the watch only counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redlock._protocol import scripts as _scripts

from .model import Reply
from .world import Master, World, _sha

__all__ = ["KINDS", "Watch", "WatchedMaster"]

KINDS = ("late-grant-after-rollback", "extend-crossing-restart", "release-overtaken")

_ACQUIRES = {_scripts.FENCED_ACQUIRE.sha}
_EXTENDS = {_scripts.EXTEND.sha}
_RELEASES = {_scripts.RELEASE.sha, _scripts.RELEASE_AND_NOTIFY.sha}


@dataclass
class Watch:
    """What the masters of one trial saw: counts by kind, the first few in words."""

    counts: dict[str, int] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    #: Tokens whose release (a rollback, or the end of a holding) some master has run.
    released: set[str] = field(default_factory=set)

    #: The first of each kind, in words.
    first: dict[str, str] = field(default_factory=dict)

    def note(self, kind: str, at: float, detail: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        said = f"{at:.4f}s {kind}: {detail}"
        self.first.setdefault(kind, said)
        if len(self.seen) < 5:
            self.seen.append(said)


class WatchedMaster(Master):
    def __init__(self, world: World, index: int, persistence: str, watch: Watch) -> None:
        super().__init__(world, index, persistence)
        self.watch = watch
        #: Each token this master granted, with the incarnation that granted it.
        self.granted_by: dict[str, int] = {}

    def execute(self, args: list[str]) -> Reply:
        name = args[0].upper()
        if name not in ("EVALSHA", "EVAL", "SET") or len(args) < 3:
            return super().execute(args)
        if name == "SET":
            return self._after_acquire(args[2], args[1], super().execute(args))
        sha = args[1] if name == "EVALSHA" else _sha(args[1])
        count = int(args[2])
        keys, argv = args[3 : 3 + count], args[3 + count :]
        if not keys or not argv:
            return super().execute(args)
        token, key = argv[0], keys[0]
        if sha in _EXTENDS:
            born = self.granted_by.get(token)
            if born is not None and born < self.incarnation:
                self.watch.note(
                    "extend-crossing-restart",
                    self.world.now,
                    f"{token} extended on {self.name}, granted before its restart",
                )
        elif sha in _RELEASES:
            holder = self.data.holder(key, self.wall())
            if holder is not None and holder != token and token in self.granted_by:
                detail = f"{token}'s release found {holder} holding {key} on {self.name}"
                self.watch.note("release-overtaken", self.world.now, detail)
        reply = super().execute(args)
        if sha in _RELEASES:
            self.watch.released.add(token)
        return self._after_acquire(token, key, reply) if sha in _ACQUIRES else reply

    def _after_acquire(self, token: str, key: str, reply: Reply) -> Reply:
        granted = reply == b"OK" or (isinstance(reply, list) and reply[:1] == [1])
        if granted:
            self.granted_by[token] = self.incarnation
            if token in self.watch.released:
                self.watch.note(
                    "late-grant-after-rollback",
                    self.world.now,
                    f"{self.name} granted {key} to {token} after another master ran its release",
                )
        return reply
