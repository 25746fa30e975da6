"""What a master says about itself at connect, read into :class:`MasterFacts`.

Where it sits: a pure module (no I/O) below the connection policy. The policy sends ``INFO``
as one step of every command connection's handshake (pipelined with the rest, so it costs no
round trip) and hands the reply to :func:`facts_from_info`; what it learns is kept per master
(:attr:`redlock._connection.Link.facts`), where the policy and the lock kinds can read it.

Anything a master does not say (an ACL user denied ``INFO``, a managed service that hides
sections, an older server without a field) stays ``None``: unknown, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
