"""What the commands of :mod:`redlock.cli` share: exit codes, the options and what they
make (the masters' URLs, the client, the lock), and how what masters said is printed.

Where it sits: the lowest of the command modules (docs/architecture.md); every command
family (:mod:`.tokens`, :mod:`.status`, :mod:`.doctor`, :mod:`.run`, :mod:`.servers`)
builds on it, and :mod:`redlock.cli` puts them together.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import NamedTuple, NoReturn

from redlock._api.options import Waiting
from redlock._api.state import DEFAULT_NODE_TIMEOUT, DEFAULT_TTL
from redlock._api.sync import Lock, Redlock
from redlock._cli.console import printable
from redlock._protocol.flows import LockInfo, MasterInfo
from redlock._protocol.urls import redacted
from redlock.exceptions import LockNotAcquired, MasterMisconfigured

ENV_MASTERS = "REDLOCK_MASTERS"


#: Set by ``eval "$(redlock servers --detach)"``: the process that keeps the masters running.
ENV_SERVERS_PID = "REDLOCK_SERVERS_PID"


#: ``status`` is a diagnostic read: there a slow answer is worth more than a false
#: "unreachable", so it waits longer per master than a lock operation does.
DEFAULT_STATUS_TIMEOUT = 0.5


class ExitCode(enum.IntEnum):
    """Exit codes of ``redlock``; ``exec`` otherwise exits with its command's own code.

    69, 75 and 78 are sysexits.h's EX_UNAVAILABLE, EX_TEMPFAIL and EX_CONFIG; 76 sits next to
    them. Codes in that range are rarely a command's own, so a script can tell ``exec``'s from
    the command's.
    """

    OK = 0
    NOT_HELD = 1
    USAGE = 2
    UNAVAILABLE = 69
    SERVERS_FAILED = 71
    NOT_ACQUIRED = 75
    LOST = 76
    UNFIT = 78
    CANNOT_EXECUTE = 126
    NOT_FOUND = 127
    SIGNALLED = 128


#: Every exit code and its meaning, as ``--help`` and docs/cli.md list them.
EXIT_CODES: tuple[tuple[str, str], ...] = (
    ("0", "success; `status`: a quorum of masters agrees on one holder; `doctor`: the masters are fit for Redlock"),
    (
        "1",
        "`status`: no holder has a quorum (the lock is free, or split); `doctor`: fit, with warnings "
        "(risks to weigh, or a master that could not be reached)",
    ),
    ("2", "usage error: a bad option, duration, name or master URL, or no masters given"),
    ("69", "quorum unavailable: fewer than a majority of masters could be reached"),
    ("71", "`servers`: the local masters could not be started"),
    ("75", "lock not acquired: others held it for the whole `--timeout`; `leader`: not elected within `--timeout`"),
    (
        "76",
        "lock lost: `release` or `extend` found the token gone from a majority; `exec`: the lock was lost "
        "while the command ran (the command was sent SIGTERM, then SIGKILL after `--grace`); `leader`: leadership "
        "was lost while the command ran (the same; with `--again` it campaigns again instead)",
    ),
    (
        "78",
        "`doctor`: a master is unfit for Redlock (a cluster node, a replica, one server under two "
        "addresses, refusing our credentials; with `--strict`, any warning)",
    ),
    ("126", "`exec`, `leader`: the command could not be executed"),
    ("127", "`exec`, `leader`: the command was not found"),
    ("128+N", "`exec`, `leader`: the command was killed by signal N; any command: stopped by signal N first"),
    ("other", "`exec`, `leader`: the command's own exit code"),
)


class CliError(Exception):
    """An expected failure of the command line itself, with the exit code it maps to."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    """argparse, except that a usage error raises instead of printing the usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise CliError(ExitCode.USAGE, f"{message} (see `{self.prog} --help`)")


def duration(*, allow_zero: bool) -> Callable[[str], float]:
    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = "zero or more" if allow_zero else "more than zero"
            raise argparse.ArgumentTypeError(f"{text!r} is not {bound} seconds")
        return value

    return seconds


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not 1 or more")
    return value


class SharedOptions(NamedTuple):
    """The option groups several commands share (argparse parents)."""

    #: The masters and how long each may take to answer: every command that reaches them.
    cluster: Parser
    #: --ttl.
    lifetime: Parser
    #: --ttl, --timeout and --fencing: the commands that acquire.
    holding: Parser


def shared_options() -> SharedOptions:
    cluster = Parser(add_help=False)
    given = cluster.add_mutually_exclusive_group()
    given.add_argument(
        "--masters",
        metavar="URL,URL,...",
        help=f"the masters (default: ${ENV_MASTERS}); a password here is in the process list, for every "
        "local user to read: give it in --masters-file or the environment instead",
    )
    given.add_argument(
        "--masters-file",
        metavar="FILE",
        help="read the masters' URLs from FILE (separated by commas or lines; lines starting with # are "
        "comments), which no one but its owner may read or write (mode 600); - reads them from stdin",
    )
    cluster.add_argument(
        "--node-timeout",
        type=duration(allow_zero=False),
        metavar="S",
        help=f"the most one master may take to answer (default {DEFAULT_NODE_TIMEOUT} s; "
        f"status and doctor: {DEFAULT_STATUS_TIMEOUT} s)",
    )
    lifetime = Parser(add_help=False)
    lifetime.add_argument(
        "--ttl",
        type=duration(allow_zero=False),
        default=DEFAULT_TTL,
        metavar="S",
        help=f"the lock's time to live (default {DEFAULT_TTL} s)",
    )
    holding = Parser(add_help=False, parents=[lifetime])
    holding.add_argument(
        "--timeout",
        type=duration(allow_zero=True),
        metavar="S",
        help="how long to wait for the lock; 0 makes one attempt (default: until acquired, or "
        "until a majority has been unreachable for 10 s)",
    )
    holding.add_argument(
        "--fencing",
        action="store_true",
        help="also take a fencing token, larger than every earlier holder's (see docs/cli.md)",
    )
    return SharedOptions(cluster, lifetime, holding)


def master_urls(args: argparse.Namespace) -> list[str]:
    if args.masters_file is not None:
        lines = private_text(args.masters_file, "--masters-file").splitlines()
        text = ",".join(line for line in lines if line.strip() and not line.lstrip().startswith("#"))
    elif args.masters is not None:
        text = args.masters
    else:
        text = os.environ.get(ENV_MASTERS, "")
    if not text.strip():
        raise CliError(
            ExitCode.USAGE, f"no masters given: pass --masters URL,URL,... or --masters-file FILE, or set {ENV_MASTERS}"
        )
    urls = [url.strip() for url in text.split(",")]
    if not all(urls):
        raise CliError(ExitCode.USAGE, f"an empty master URL in {', '.join(map(redacted, urls))!r}")
    if args.masters is not None and any(redacted(url) != url for url in urls):
        say(
            "warning: --masters gives a password on the command line, where every local user can read it "
            f"(ps, /proc) while this runs; give the URLs in --masters-file FILE (mode 600) or in ${ENV_MASTERS}"
        )
    return urls


def private_text(path: str, option: str) -> str:
    """What the file at ``path`` holds (``-``: stdin), refused if others may read or write it:
    it holds a secret, and one that others could rewrite would send us to their masters."""
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode
            if mode & 0o077:
                raise CliError(
                    ExitCode.USAGE,
                    f"{option} {path}: others may read or write it (mode {mode & 0o777:03o}), and it holds "
                    f"secrets; make it yours alone: chmod 600 {path}",
                )
            return file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(ExitCode.USAGE, f"{option} {path}: {error}") from None


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """The library's argument checks (ValueError / TypeError, raised before any traffic) as usage errors."""
    try:
        yield
    except (ValueError, TypeError) as error:
        raise CliError(ExitCode.USAGE, str(error)) from None


def client_for(args: argparse.Namespace) -> Redlock:
    urls = master_urls(args)
    with usage_errors():
        return Redlock(urls, node_timeout=args.node_timeout or DEFAULT_NODE_TIMEOUT)


#: The longest ttl a lock of ours can have: auto-extension waits about ttl/3 in a thread, and a
#: thread cannot wait longer than this (OverflowError). The library's own bound, checked
#: first, may be lower.
MAX_TTL = threading.TIMEOUT_MAX


def lock_for(
    rl: Redlock,
    name: str,
    ttl: float,
    *,
    fencing: bool = False,
    on_lost: Callable[[Lock], None] | None = None,
    limit: int | None = None,
    mode: str | None = None,
) -> Lock:
    """A Lock on ``name`` (with ``limit``, a permit of a semaphore; with ``mode``, "read" or
    "write", that side of the read-write lock on ``name``); with ``on_lost``, one that
    auto-extends and reports a loss to it.

    Built before anything talks to a master, so that the library's argument checks (and
    ours) turn a bad name or ttl into a usage error before any traffic.
    """
    if limit is not None and fencing:
        raise CliError(ExitCode.USAGE, "--fencing is for a lock: a semaphore (--limit) has no fencing token")
    waiting: Waiting[Lock] = {"auto_extend": on_lost is not None, "on_lost": on_lost}
    with usage_errors():
        if limit is not None:
            lock: Lock = rl.semaphore(name, limit, ttl, **waiting)
        elif mode is not None:
            if fencing:
                raise ValueError("--fencing is for a plain lock: a read-write lock has no fencing token")
            rw = rl.rwlock(name, ttl, **waiting)
            lock = rw.read() if mode == "read" else rw.write()
        else:
            lock = rl.lock(name, ttl, fencing=fencing, **waiting)
    check_max_ttl(ttl)
    return lock


def check_max_ttl(ttl: float) -> None:
    if ttl > MAX_TTL:
        raise CliError(
            ExitCode.USAGE, f"--ttl {ttl:g} is more than {MAX_TTL:.0f} seconds, the longest lock we can hold"
        )


def not_acquired(lock: Lock, timeout: float | None) -> LockNotAcquired:
    return LockNotAcquired(f"{lock.name!r} is held by others: not acquired within {timeout} s", resource=lock.name)


@contextlib.contextmanager
def library_quiet() -> Iterator[None]:
    """The library's warnings off while a command prints each master's state itself: not twice."""
    library = logging.getLogger("redlock")
    level = library.level
    library.setLevel(logging.ERROR)
    try:
        yield
    finally:
        library.setLevel(level)


def read_lock_info(read: Callable[[str], LockInfo], name: str) -> LockInfo:
    """``read(name)`` (inspect, force_release); when so many masters refuse us that the
    library raises, the picture of what each master said instead, so that the refusals are
    shown per master, counted as answers, and judged unavailable like any missing quorum."""
    try:
        return read(name)
    except MasterMisconfigured as refused:
        masters = tuple(
            MasterInfo(outcome.node, False, error=outcome.detail or "not read", status=outcome.status)
            for outcome in refused.outcomes
        )
        return LockInfo(name, refused.quorum, masters)


def say(line: str) -> None:
    print(f"redlock: {line}", file=sys.stderr, flush=True)


# What status, release --force and doctor print holds what masters said (tokens, values,
# error replies, INFO fields): whoever wrote a key, or runs a master, chose those bytes. They
# are printed escaped (redlock._cli.console.printable), in JSON too: `jq -r` would otherwise hand
# a terminal the raw ESC that JSON's \u001b spelled.


def print_line(line: str) -> None:
    print(printable(line))


def print_json(document: object) -> None:
    print(json.dumps(_printable_json(document)))


def _printable_json(value: object) -> object:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(key)): _printable_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_printable_json(item) for item in value]
    return value
