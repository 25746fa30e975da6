"""``redlock status``: who holds a lock on each master, and whether a quorum agrees; and
how each master's view of a lock is shown, which ``release --force`` shows too.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from redlock._api.state import DEFAULT_TTL
from redlock._api.sync import Redlock
from redlock._cli.common import (
    DEFAULT_STATUS_TIMEOUT,
    ExitCode,
    Parser,
    SharedOptions,
    library_quiet,
    master_urls,
    print_json,
    print_line,
    read_lock_info,
    usage_errors,
)
from redlock._protocol.flows import LockInfo, MasterInfo
from redlock.exceptions import NodeStatus


def add_status(commands: argparse._SubParsersAction[Parser], options: SharedOptions) -> None:
    status = commands.add_parser(
        "status",
        parents=[options.cluster],
        help="who holds NAME on each master, and whether a quorum agrees",
        description="Ask every master who holds NAME and for how long. Exits 0 if a quorum agrees "
        "on one holder, 1 if none does, 69 if fewer than a quorum answered.",
    )
    status.add_argument("name", metavar="NAME")
    status.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    status.set_defaults(handler=_cmd_status)


def master_json(info: MasterInfo) -> dict[str, object]:
    """One master in the JSON output: milliseconds left as PTTL says them, -1 for a key
    with no expiry (not a Redlock key)."""
    held = info.reachable and info.token is not None and info.ttl is not None
    return {
        "master": info.master,
        "reachable": info.reachable,
        "answered": info.answered,
        "status": "read" if info.reachable else _trouble_of(info).word,
        "token": info.token if held else None,
        "pttl_ms": (-1 if math.isinf(info.ttl) else round(info.ttl * 1000)) if held and info.ttl is not None else None,
        "error": None if info.reachable else info.error,
        "readers": [{"token": token, "pttl_ms": round(left * 1000)} for token, left in info.readers],
        "intent": info.intent,
        "intent_pttl_ms": _pttl_ms(info.intent_ttl),
    }


def _pttl_ms(ttl: float | None) -> int | None:
    return None if ttl is None else -1 if math.isinf(ttl) else round(ttl * 1000)


def _rw_state(info: MasterInfo) -> str:
    """A read-write lock's readers and waiting writer on one master ("" for other locks)."""
    parts = []
    if info.readers:
        each = ", ".join(f"{token} {left:.3f} s" for token, left in info.readers)
        parts.append(f"{len(info.readers)} reader{'s' if len(info.readers) > 1 else ''} ({each})")
    if info.intent is not None:
        left = "" if info.intent_ttl is None else f" {info.intent_ttl:.3f} s left"
        parts.append(f"writer waiting: {info.intent}{left}")
    return "".join(f"; {part}" for part in parts)


class _Trouble(NamedTuple):
    """Why a master could not be read, in the words of each output."""

    word: str  # --json's "status"
    line: str  # its line in the table
    many: str  # after a count in the verdict ("2 unreachable")


_TIMED_OUT = _Trouble("timeout", "no answer in time (hung or slow)", "did not answer in time (hung or slow)")


_NOT_READ = _Trouble("not read", "answered, not read", "answered but were not read")


_TROUBLES = {
    NodeStatus.TIMEOUT: _TIMED_OUT,
    NodeStatus.NOT_AWAITED: _TIMED_OUT,
    NodeStatus.UNREACHABLE: _Trouble("unreachable", "unreachable", "unreachable"),
    NodeStatus.ERROR: _Trouble("error", "answered with an error", "answered with an error"),
    NodeStatus.MISCONFIGURED: _Trouble(
        "misconfigured",
        "misconfigured, refuses us",
        "misconfigured: refused our credentials, permissions, TLS or scripts (fix that: waiting will not help)",
    ),
    NodeStatus.GRANTED: _NOT_READ,
    NodeStatus.DENIED: _NOT_READ,
}


def _trouble_of(info: MasterInfo) -> _Trouble:
    return _TROUBLES[info.status] if info.status is not None else _TROUBLES[NodeStatus.UNREACHABLE]


def _trouble(info: MasterInfo) -> str:
    """A master that could not be read, as its line says it: what kind of trouble, and the detail."""
    line = _trouble_of(info).line
    return f"{line}: {info.error}" if info.error else line


def _holding(info: MasterInfo) -> str:
    if not info.reachable:
        return _trouble(info)
    if info.token is None or info.ttl is None:
        return ("no writer" if info.readers else "free") + _rw_state(info)
    if math.isinf(info.ttl):
        return f"{info.token}  no expiry (not a Redlock key?)"
    return f"{info.token}  {info.ttl:.3f} s left" + _rw_state(info)


def removal(info: MasterInfo) -> str:
    if not info.reachable:
        return f"not released there, {_trouble(info)}"
    removed = [] if info.token is None else [info.token]
    removed += [f"reader {token}" for token, _ in info.readers]
    removed += [] if info.intent is None else [f"writer's intent {info.intent}"]
    return f"removed {', '.join(removed)}" if removed else "nothing to remove"


def _unavailable(info: LockInfo) -> str:
    """Why no verdict: how many masters could be read against the quorum, and what the others did."""
    troubles: dict[str, int] = {}
    for master in info.masters:
        if not master.reachable:
            words = _trouble_of(master).many
            troubles[words] = troubles.get(words, 0) + 1
    why = "; ".join(f"{count} {words}" for words, count in troubles.items())
    return (
        f"unavailable: {info.reachable} of {len(info.masters)} masters read ({info.answered} answered), "
        f"a quorum needs {info.quorum}; {why}"
    )


def print_masters(masters: Sequence[MasterInfo], state: Callable[[MasterInfo], str]) -> None:
    width = max(len(master.master) for master in masters)
    for master in masters:
        print_line(f"  {master.master.ljust(width)}  {state(master)}")


def _cmd_status(args: argparse.Namespace) -> int:
    urls = master_urls(args)
    timeout = args.node_timeout or DEFAULT_STATUS_TIMEOUT
    with usage_errors():
        rl = Redlock(urls, node_timeout=timeout)
    with rl:
        with usage_errors():
            rl._lock_spec(args.name, DEFAULT_TTL)
        with library_quiet():
            info = read_lock_info(rl.inspect, args.name)
    views = info.masters
    reachable, count, holder = info.reachable, info.votes, info.holder
    if reachable < info.quorum:
        verdict, code = "unavailable", ExitCode.UNAVAILABLE
    elif holder is not None:
        verdict, code = "held", ExitCode.OK
    elif info.readers:
        verdict, code = "read", ExitCode.OK
    else:
        verdict, code = ("split" if count else "free"), ExitCode.NOT_HELD
        holder = None
    if args.json:
        report = {
            "name": args.name,
            "verdict": verdict,
            "holder": holder,
            "readers": list(info.readers),
            "intent": info.intent,
            "votes": count,
            "quorum": info.quorum,
            "reachable": reachable,
            "answered": info.answered,
            "masters": [master_json(view) for view in views],
        }
        print_json(report)
        return code
    print_line(f"{args.name!r} on {len(views)} masters (quorum {info.quorum}):")
    print_masters(views, _holding)
    summary = {
        "held": f"held by {holder} on {count} of {len(views)} masters",
        "read": f"read-held by {len(info.readers)} reader(s) on a quorum: {', '.join(info.readers)}",
        "free": "free: no master holds it",
        "split": f"split: no token is on a quorum (the most common is on {count})",
        "unavailable": _unavailable(info),
    }
    print_line(summary[verdict])
    if info.intent is not None:
        print_line(f"a writer waits for the readers to leave: {info.intent}")
    return code
