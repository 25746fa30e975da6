"""What a master says about itself at connect, read into :class:`MasterFacts`.

Where it sits: a pure module (no I/O) below the connection policy. The policy sends ``INFO``
as one step of every command connection's handshake (pipelined with the rest, so it costs no
round trip) and hands the reply to :func:`facts_from_info`; what it learns is kept per master
(:attr:`redlock._protocol.connection.Judgement.facts`), where the policy and the lock kinds can read it.

Anything a master does not say (an ACL user denied ``INFO``, a managed service that hides
sections, an older server without a field) stays ``None``: unknown, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from redlock._protocol.core import DELEX, DELIFEQ, SET_IFEQ


@dataclass(frozen=True)
class MasterFacts:
    """What one master said about itself on the current connection; None: it did not say."""

    #: "redis" or "valkey" (Valkey says ``server_name``; Redis does not, so a master that
    #: reports a version but no name is Redis).
    server: str | None = None
    #: The server's own version: ``valkey_version`` on Valkey (whose ``redis_version`` is a
    #: compatibility number), ``redis_version`` elsewhere.
    version: tuple[int, ...] | None = None
    #: Unique per server process: two addresses with one run_id reach one server.
    run_id: str | None = None
    #: "standalone", "cluster" or "sentinel".
    mode: str | None = None
    #: "master" or "slave" (a replica).
    role: str | None = None
    connected_replicas: int | None = None
    #: Bytes; 0 means no limit.
    maxmemory: int | None = None
    maxmemory_policy: str | None = None
    aof_enabled: bool | None = None
    #: Whether INFO answered at all (False: denied or not understood).
    answered: bool = False
    #: Which of the native commands asked about (:data:`ASKED`) the master has, by its own
    #: command table (``COMMAND INFO``), which a renamed or disabled command is not in.
    #: None: it did not say.
    commands: frozenset[str] | None = None
    #: Every field of the reply, for reports (``redlock doctor``).
    raw: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def version_text(self) -> str | None:
        return None if self.version is None else ".".join(map(str, self.version))


UNKNOWN = MasterFacts()


def parse_info(reply: object) -> dict[str, str]:
    """``INFO``'s ``field:value`` lines as a dict (section headers and blanks skipped)."""
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """``"7.2.4"`` as ``(7, 2, 4)``; None when it is not a dotted number."""
    if not text:
        return None
    parts = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts) or None


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def facts_from_info(reply: object) -> MasterFacts:
    """The facts in an ``INFO`` reply (the default sections)."""
    fields = parse_info(reply)
    server = fields.get("server_name") or ("redis" if "redis_version" in fields else None)
    version = parse_version(fields.get("valkey_version") or fields.get("redis_version"))
    mode = fields.get("redis_mode") or fields.get("server_mode")
    if fields.get("cluster_enabled") == "1":
        mode = "cluster"
    aof = fields.get("aof_enabled")
    return MasterFacts(
        server=server,
        version=version,
        run_id=fields.get("run_id"),
        mode=mode,
        role=fields.get("role"),
        connected_replicas=_int(fields.get("connected_slaves")),
        maxmemory=_int(fields.get("maxmemory")),
        maxmemory_policy=fields.get("maxmemory_policy"),
        aof_enabled=None if aof is None else aof == "1",
        answered=bool(fields),
        raw=fields,
    )


#: The native commands the handshake asks ``COMMAND INFO`` about.
ASKED = (DELIFEQ, DELEX)

#: Since which version each server has each native command (by its release notes; the
#: handshake's ``COMMAND INFO`` answer is preferred where there is one).
_SINCE: dict[str, dict[str, tuple[int, ...]]] = {
    DELIFEQ: {"valkey": (9, 0)},
    DELEX: {"redis": (8, 4)},
    SET_IFEQ: {"valkey": (8, 1), "redis": (8, 4)},
}


def with_commands(facts: MasterFacts, reply: object) -> MasterFacts:
    """``facts`` and what ``COMMAND INFO DELIFEQ DELEX`` answered: one entry per name asked,
    nil for a command the server does not have (or has only under another name)."""
    if not isinstance(reply, list) or len(reply) != len(ASKED):
        return facts  # not an answer to the question: it did not say
    return replace(facts, commands=frozenset(name for name, entry in zip(ASKED, reply, strict=True) if entry))


def _since(facts: MasterFacts, command: str) -> bool:
    since = _SINCE[command].get(facts.server or "")
    return since is not None and facts.version is not None and facts.version >= since


def native_commands(facts: MasterFacts) -> frozenset[str]:
    """The native commands a master has, as far as it said: by ``COMMAND INFO`` if it
    answered, else by its server and version; nothing if it said neither.

    ``SET ... IFEQ`` is an option, which ``COMMAND INFO`` does not list: it comes with
    either delete (each server added it before or with its own), or goes by the version.
    A guess that turns out wrong costs one round trip: the master answers that it does not
    know the command, and the policy sends the script instead (redlock._protocol.connection).
    """
    if facts.commands is not None:
        deletes = facts.commands & {DELIFEQ, DELEX}
    else:
        deletes = frozenset(name for name in ASKED if _since(facts, name))
    return deletes | {SET_IFEQ} if deletes or _since(facts, SET_IFEQ) else deletes


def releases_natively(native: frozenset[str]) -> bool:
    """Whether a master with ``native`` serves a lock on one name with no Lua at all."""
    return SET_IFEQ in native and bool(native & {DELIFEQ, DELEX})
