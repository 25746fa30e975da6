"""The ``redlock`` command line: run a command under a lock, inspect locks, check the masters,
start local masters.

It sits on top of the public client (:class:`redlock.Redlock`) and of
:mod:`redlock.servers`; nothing in the library imports it. Each command is a function from
parsed arguments to an exit code, and :func:`main` is the one place where an exception
becomes an exit code and a one-line message on stderr: an expected failure (the quorum is
unreachable, a bad URL or duration, the lock is held by someone else) never prints a
traceback. The codes are listed once, in :data:`EXIT_CODES`, which feeds ``--help``; the
tests check docs/cli.md against it.

``redlock exec`` runs its command in a process group of its own, handed the terminal as a
shell hands it to a job, stopped if the lock is lost, and tied to ``exec`` so that it cannot
outlive it: redlock/_supervisor.py does all of that and says how (redlock/_lifeline.py is the
tie); this module acquires the lock around it and turns its outcome into an exit code.
Everything from the command's first word on is the command's, options included. docs/cli.md
tells all of this to users.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import errno
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import IO, NamedTuple, NoReturn

import redlock
from redlock._client import Lock, Redlock
from redlock._console import printable, to_a_reader
from redlock._election import backoff_after_loss
from redlock._extras import redis_server_hint
from redlock._flows import LockInfo, MasterInfo
from redlock._lock import DEFAULT_NODE_TIMEOUT, DEFAULT_TTL
from redlock._options import Waiting
from redlock._supervisor import CannotRun, Interrupted, Supervisor
from redlock._topology import MasterReport, Severity, TopologyReport, Verdict
from redlock._urls import redacted
from redlock.exceptions import (
    ExtendUnconfirmed,
    LockLost,
    LockNotAcquired,
    LockNotHeld,
    MasterMisconfigured,
    NodeOutcome,
    NodeStatus,
    QuorumUnavailable,
    RedlockError,
    ReleaseUnconfirmed,
)
from redlock.servers import LocalMasters, RedisServerNotFound

__all__ = [
    "ENV_MASTERS",
    "ENV_SERVERS_PID",
    "EXEC_ENVIRONMENT",
    "EXIT_CODES",
    "ExitCode",
    "main",
    "main_entry",
    "release_token",
]

ENV_MASTERS = "REDLOCK_MASTERS"
#: Set by ``eval "$(redlock servers --detach)"``: the process that keeps the masters running.
ENV_SERVERS_PID = "REDLOCK_SERVERS_PID"

#: What ``redlock exec`` tells its command, as ``etcdctl lock`` passes ETCD_LOCK_KEY: the
#: lock's name, our token, the wall-clock Unix time (seconds, 3 decimals) until which the
#: lock is valid as acquired (auto-extension moves the real end later while exec runs), and
#: with ``--fencing`` the fencing token.
EXEC_ENVIRONMENT = ("REDLOCK_NAME", "REDLOCK_TOKEN", "REDLOCK_VALIDITY_DEADLINE", "REDLOCK_FENCING_TOKEN")

#: Once the lock is lost, how long ``redlock exec`` lets the command stop after SIGTERM
#: before SIGKILL. Short, because the command runs unprotected meanwhile.
DEFAULT_GRACE = 5.0

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


# --- the one place where exceptions become exit codes ---------------------------------------


def _exit_status(error: BaseException) -> tuple[int, str] | None:
    """The exit code and message for an expected failure; None for a bug (which propagates)."""
    if isinstance(error, CliError):
        return error.code, str(error)
    if isinstance(error, QuorumUnavailable | ReleaseUnconfirmed | ExtendUnconfirmed | MasterMisconfigured):
        return ExitCode.UNAVAILABLE, str(error)
    if isinstance(error, LockNotAcquired):
        return ExitCode.NOT_ACQUIRED, str(error)
    if isinstance(error, LockLost):
        return ExitCode.LOST, str(error)
    if isinstance(error, CannotRun):
        return (ExitCode.NOT_FOUND if error.not_found else ExitCode.CANNOT_EXECUTE), str(error)
    if isinstance(error, Interrupted):
        return ExitCode.SIGNALLED + error.signum, f"stopped by {signal.Signals(error.signum).name}"
    if isinstance(error, KeyboardInterrupt):
        return ExitCode.SIGNALLED + signal.SIGINT, "interrupted"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``redlock`` command line on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    try:
        args = _parse(list(sys.argv[1:] if argv is None else argv))
        if isinstance(args, int):
            return args
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except BaseException as error:
        status = _exit_status(error)
        if status is None:
            raise
        code, message = status
        if isinstance(error, RedlockError):
            message = _warned.untold(error)
        # One line whatever the message holds: scripts and log collectors read line by line;
        # a master's error reply in it is the master's text, shown escaped.
        print(f"redlock: {printable(' '.join(message.split()))}", file=sys.stderr, flush=True)
        return code


class _Said(logging.Filter):
    """Remembers the warnings printed, so that a final error does not repeat a master's
    trouble that a warning already said (a wrong password: once per master, not twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.lines.append(record.getMessage())
        return True

    def untold(self, error: RedlockError) -> str:
        """``error``'s message, with only the masters' outcomes no warning has said."""
        full = str(error)
        if not error.outcomes:
            return full
        message = full.removesuffix(f" [{'; '.join(str(outcome) for outcome in error.outcomes)}]")
        untold = [outcome for outcome in error.outcomes if not self._told(outcome)]
        return f"{message} [{'; '.join(str(outcome) for outcome in untold)}]" if untold else message

    def _told(self, outcome: NodeOutcome) -> bool:
        return bool(outcome.detail) and any(
            line.startswith(f"master {outcome.node} ") and outcome.detail in line for line in self.lines
        )


#: What the console script's warnings said so far (installed by main_entry).
_warned = _Said()


class _OneLine(logging.Formatter):
    """``redlock: warning: ...`` for a warning; errors keep the plain ``redlock: ...`` form."""

    def format(self, record: logging.LogRecord) -> str:
        word = "warning: " if record.levelno == logging.WARNING else ""
        # A master's trouble is told in its own words (an error reply): shown escaped.
        return f"redlock: {word}{printable(record.getMessage())}"


def main_entry() -> NoReturn:
    """The ``redlock`` console script."""
    # The library logs a lost lock when it happens (exec reports it again on exit) and a
    # master in trouble; in a process of our own, one line each, and a warning says it is one
    # (the command may well succeed: a minority down is no failure).
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLine())
    handler.addFilter(_warned)
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    sys.exit(to_a_reader(main))


# --- arguments --------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error raises instead of printing the usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise CliError(ExitCode.USAGE, f"{message} (see `{self.prog} --help`)")


def _seconds(*, allow_zero: bool) -> Callable[[str], float]:
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


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not 1 or more")
    return value


def _epilog() -> str:
    width = max(len(code) for code, _ in EXIT_CODES)
    rows = "\n".join(f"  {code.rjust(width)}  {meaning.replace('`', '')}" for code, meaning in EXIT_CODES)
    return (
        f"Masters come from --masters URL,URL,... or ${ENV_MASTERS}: redis://, rediss:// or unix:// URLs\n"
        f"of independent masters (no replication between them).\n\nexit codes:\n{rows}"
    )


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="redlock",
        description="Hold a Redlock lock on a majority of independent Redis masters, from the shell.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {redlock.__version__}")
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND", parser_class=_Parser)

    cluster = _Parser(add_help=False)
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
        type=_seconds(allow_zero=False),
        metavar="S",
        help=f"the most one master may take to answer (default {DEFAULT_NODE_TIMEOUT} s; "
        f"status and doctor: {DEFAULT_STATUS_TIMEOUT} s)",
    )
    lifetime = _Parser(add_help=False)
    lifetime.add_argument(
        "--ttl",
        type=_seconds(allow_zero=False),
        default=DEFAULT_TTL,
        metavar="S",
        help=f"the lock's time to live (default {DEFAULT_TTL} s)",
    )
    holding = _Parser(add_help=False, parents=[lifetime])
    holding.add_argument(
        "--timeout",
        type=_seconds(allow_zero=True),
        metavar="S",
        help="how long to wait for the lock; 0 makes one attempt (default: until acquired, or "
        "until a majority has been unreachable for 10 s)",
    )
    holding.add_argument(
        "--fencing",
        action="store_true",
        help="also take a fencing token, larger than every earlier holder's (see docs/cli.md)",
    )

    run = commands.add_parser(
        "exec",
        parents=[cluster, holding],
        help="run a command while holding the lock, like flock(1) across machines",
        description="Acquire NAME, run CMD while the lock is extended in the background, then "
        "release it. Exits with CMD's exit code, 75 if the lock was not acquired, 76 if it was "
        "lost while CMD ran. Options go before NAME or between NAME and CMD: from CMD's first "
        "word on, every argument is CMD's (a `--` before CMD is accepted). CMD sees "
        f"{', '.join(EXEC_ENVIRONMENT)} (the last with --fencing).",
        usage="redlock exec [options] NAME [options] [--] CMD [ARGS...]",
        # An abbreviated option could not be told from the command's first word.
        allow_abbrev=False,
    )
    run.add_argument("name", metavar="NAME")
    side = run.add_mutually_exclusive_group()
    side.add_argument(
        "--read",
        dest="mode",
        action="store_const",
        const="read",
        help="hold NAME as a reader of its read-write lock: beside other readers, never beside a writer",
    )
    side.add_argument(
        "--write",
        dest="mode",
        action="store_const",
        const="write",
        help="hold NAME as the writer of its read-write lock: alone (no reader, no other writer)",
    )
    side.add_argument(
        "--limit",
        type=_count,
        metavar="K",
        help="hold one of K permits of a semaphore on NAME instead of the lock: up to K commands run at once",
    )
    run.add_argument(
        "--grace",
        type=_seconds(allow_zero=True),
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"once the lock is lost, the time between SIGTERM and SIGKILL (default {DEFAULT_GRACE} s)",
    )
    _add_pass_masters(run)
    run.set_defaults(handler=_cmd_exec)

    status = commands.add_parser(
        "status",
        parents=[cluster],
        help="who holds NAME on each master, and whether a quorum agrees",
        description="Ask every master who holds NAME and for how long. Exits 0 if a quorum agrees "
        "on one holder, 1 if none does, 69 if fewer than a quorum answered.",
    )
    status.add_argument("name", metavar="NAME")
    status.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    status.set_defaults(handler=_cmd_status)

    acquire = commands.add_parser(
        "acquire",
        parents=[cluster, holding],
        help="acquire NAME; print its token and validity",
        description="Acquire NAME and print its token alone on the first line, the validity (seconds "
        "the lock may be relied on) on the second, and with --fencing the fencing token on the third. "
        "It is not extended: it expires after --ttl unless released with `redlock release NAME TOKEN`.",
    )
    acquire.add_argument("name", metavar="NAME")
    acquire.add_argument("--json", action="store_true", help="print one JSON object")
    acquire.set_defaults(handler=_cmd_acquire)

    extend = commands.add_parser(
        "extend",
        parents=[cluster, lifetime],
        help="extend NAME held under TOKEN to --ttl; print its validity",
        description="Reset TOKEN's hold on NAME to --ttl on every master and print the validity (seconds "
        "the lock may be relied on from now). Only TOKEN's holder can: a compare-and-pexpire that never "
        "re-creates an expired lock. Exits 76 if a majority no longer held TOKEN, 69 if no majority answered.",
    )
    extend.add_argument("name", metavar="NAME")
    extend.add_argument("token", metavar="TOKEN", nargs="?")
    _add_token_file(extend)
    extend.add_argument("--json", action="store_true", help="print one JSON object")
    extend.set_defaults(handler=_cmd_extend)

    release = commands.add_parser(
        "release",
        parents=[cluster],
        help="release NAME held under TOKEN (or, --force, whoever holds it)",
        description="Delete TOKEN's hold on NAME on every master. Exits 76 if a majority no longer "
        "held TOKEN (the lock expired or was taken meanwhile). With --force instead of TOKEN, delete "
        "NAME on every master whatever token holds it, and print what was removed: for a holder "
        "that is gone. A holder still running is not told and goes on unprotected.",
    )
    release.add_argument("name", metavar="NAME")
    release.add_argument("token", metavar="TOKEN", nargs="?")
    _add_token_file(release)
    release.add_argument("--force", action="store_true", help="delete NAME whatever token holds it")
    release.add_argument("--yes", action="store_true", help="with --force: do not ask for confirmation")
    release.add_argument("--json", action="store_true", help="with --force: print one JSON object")
    release.set_defaults(handler=_cmd_release)

    _add_leader(commands, cluster)
    _add_doctor(commands, cluster)

    servers = commands.add_parser(
        "servers",
        help="run N local masters in the foreground until Ctrl-C",
        description=f"Start N independent local redis-server masters, print `export {ENV_MASTERS}=...` "
        "for them, and stop them on Ctrl-C or SIGTERM. With --detach they run in the background: "
        f'`eval "$(redlock servers --detach)"` sets {ENV_MASTERS} and {ENV_SERVERS_PID}, and '
        f'`kill "${ENV_SERVERS_PID}"` stops them.',
    )
    servers.add_argument("-n", type=_count, default=5, metavar="N", help="how many masters (default 5)")
    servers.add_argument(
        "--persistence",
        choices=("none", "aof-always", "aof-everysec"),
        default="none",
        help="what each master keeps on disk (default none)",
    )
    servers.add_argument(
        "--detach",
        action="store_true",
        help=f"run them in the background; print `export {ENV_MASTERS}=...` and `export {ENV_SERVERS_PID}=...` "
        "for eval once every master answers",
    )
    servers.add_argument(
        "--restart",
        type=_seconds(allow_zero=True),
        metavar="SECONDS",
        help="start a master that exits by itself again, on its port, SECONDS later (default: never; each exit "
        "is reported either way). Without persistence it comes back empty: give more than your longest ttl",
    )
    servers.add_argument(
        "--log",
        metavar="FILE",
        help="with --detach: append what the background process reports (a master that exits) to FILE",
    )
    # Internal: how a detached `servers` reports to the command that started it.
    servers.add_argument("--report-fd", type=int, help=argparse.SUPPRESS)
    servers.set_defaults(handler=_cmd_servers)
    return parser


def _add_token_file(command: _Parser) -> None:
    command.add_argument(
        "--token-file",
        metavar="FILE",
        help="read TOKEN from FILE (mode 600) instead, or from stdin with -: an argument is in the process "
        "list, for every local user to read, and the token lets whoever has it release the lock",
    )


def _token(args: argparse.Namespace) -> str | None:
    """The TOKEN argument, or what --token-file holds; None if neither was given."""
    if args.token_file is None:
        return args.token  # type: ignore[no-any-return]
    if args.token is not None:
        raise CliError(ExitCode.USAGE, "give either TOKEN or --token-file, not both")
    token = _private_text(args.token_file, "--token-file").strip()
    if not token:
        raise CliError(ExitCode.USAGE, f"--token-file {args.token_file}: it is empty")
    return token


def _parse(argv: list[str]) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code when argparse already did what was asked (--help)."""
    parser = _build_parser()
    head, command = _split_exec(parser, argv)
    try:
        args = parser.parse_args(head)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else ExitCode.USAGE
    if args.subcommand in _RUNS_A_COMMAND:
        if not command:
            raise CliError(
                ExitCode.USAGE,
                f"{args.subcommand}: no command given (redlock {args.subcommand} [options] NAME [--] CMD [ARGS...])",
            )
        args.argv = command
    return args


#: The commands whose arguments end with a command to run (cut by _split_exec).
_RUNS_A_COMMAND = ("exec", "leader")


def _split_exec(parser: _Parser, argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` cut where exec's command begins: (what argparse parses, the command).

    ``exec [options] NAME [options] [--] CMD [ARGS...]``: exec's options may come before NAME
    and between NAME and CMD; from CMD's first word on, everything is the command's, even
    words that look like exec's options (``redlock exec backup ./backup.sh --timeout 3600``
    must pass ``--timeout 3600`` to the script). argparse alone would take any option it
    knows wherever it stands, so the cut is made here, knowing which options take a value.
    """
    # The command is the first word that is not an option: the top level has none with a value.
    position = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    if position is None or argv[position] not in _RUNS_A_COMMAND:
        return argv, []
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = subparsers.choices[argv[position]]._option_string_actions
    head = argv[: position + 1]
    words = argv[position + 1 :]
    named = False
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if word.startswith("-") and word != "-":
            head.append(word)
            index += 1
            action = options.get(word)
            # An option with its value attached (--ttl=5) or unknown (argparse says so) takes no
            # further word; --ttl 5 takes the next one, whatever it looks like.
            if action is not None and action.nargs != 0 and index < len(words):
                head.append(words[index])
                index += 1
            continue
        if named:
            break
        head.append(word)
        named = True
        index += 1
    return head, words[index:]


def _master_urls(args: argparse.Namespace) -> list[str]:
    if args.masters_file is not None:
        lines = _private_text(args.masters_file, "--masters-file").splitlines()
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
        _say(
            "warning: --masters gives a password on the command line, where every local user can read it "
            f"(ps, /proc) while this runs; give the URLs in --masters-file FILE (mode 600) or in ${ENV_MASTERS}"
        )
    return urls


def _private_text(path: str, option: str) -> str:
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
def _usage_errors() -> Iterator[None]:
    """The library's argument checks (ValueError / TypeError, raised before any traffic) as usage errors."""
    try:
        yield
    except (ValueError, TypeError) as error:
        raise CliError(ExitCode.USAGE, str(error)) from None


def _client(args: argparse.Namespace) -> Redlock:
    urls = _master_urls(args)
    with _usage_errors():
        return Redlock(urls, node_timeout=args.node_timeout or DEFAULT_NODE_TIMEOUT)


#: The longest ttl a lock of ours can have: auto-extension waits about ttl/3 in a thread, and a
#: thread cannot wait longer than this (OverflowError). The library's own bound, checked
#: first, may be lower.
MAX_TTL = threading.TIMEOUT_MAX


def _lock(
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
    with _usage_errors():
        if limit is not None:
            lock: Lock = rl.semaphore(name, limit, ttl, **waiting)
        elif mode is not None:
            if fencing:
                raise ValueError("--fencing is for a plain lock: a read-write lock has no fencing token")
            rw = rl.rwlock(name, ttl, **waiting)
            lock = rw.read() if mode == "read" else rw.write()
        else:
            lock = rl.lock(name, ttl, fencing=fencing, **waiting)
    _check_max_ttl(ttl)
    return lock


def _check_max_ttl(ttl: float) -> None:
    if ttl > MAX_TTL:
        raise CliError(
            ExitCode.USAGE, f"--ttl {ttl:g} is more than {MAX_TTL:.0f} seconds, the longest lock we can hold"
        )


def _not_acquired(lock: Lock, timeout: float | None) -> LockNotAcquired:
    return LockNotAcquired(f"{lock.name!r} is held by others: not acquired within {timeout} s", resource=lock.name)


# --- acquire / release --------------------------------------------------------------------------


def release_token(rl: Redlock, name: str, token: str) -> None:
    """Release ``name`` held under ``token``, from any process: what ``Lock.release`` does, by token.

    The same compare-and-delete runs on every master, so only the holder of ``token`` can
    release, and a token that expired deletes nothing. Raises :class:`~redlock.LockLost` if a
    majority answered that ``token`` was no longer there, and
    :class:`~redlock.ReleaseUnconfirmed` if no majority answered (the lock may then still be
    held until its ttl runs out).
    """
    rl.release_token(name, token)


def _cmd_acquire(args: argparse.Namespace) -> int:
    with _client(args) as rl:
        lock = _lock(rl, args.name, args.ttl, fencing=args.fencing)
        if not lock.acquire(blocking=True, timeout=args.timeout):
            raise _not_acquired(lock, args.timeout)
        token, validity, fencing_token = lock.token, lock.validity, lock.fencing_token
    if args.json:
        acquired = {"name": args.name, "token": token, "validity": round(validity, 3), "ttl": args.ttl}
        if fencing_token is not None:
            acquired["fencing_token"] = fencing_token
        print(json.dumps(acquired))
    else:
        # The token alone on the first line: `token=$(redlock acquire NAME | head -1)`.
        lines = [str(token), f"{validity:.3f}"]
        if fencing_token is not None:
            lines.append(str(fencing_token))
        print("\n".join(lines))
    return ExitCode.OK


def _cmd_extend(args: argparse.Namespace) -> int:
    token = _token(args)
    if token is None:
        raise CliError(ExitCode.USAGE, "give the TOKEN to extend, or --token-file FILE")
    with _client(args) as rl:
        lock = _lock(rl, args.name, args.ttl)
        with _usage_errors():  # (adopt raises them only for its arguments, before any traffic)
            validity = lock.adopt(token)
    if args.json:
        print(json.dumps({"name": args.name, "token": token, "validity": round(validity, 3), "ttl": args.ttl}))
    else:
        print(f"{validity:.3f}")
    return ExitCode.OK


def _cmd_release(args: argparse.Namespace) -> int:
    if args.force:
        return _force_release(args)
    token = _token(args)
    if token is None:
        raise CliError(
            ExitCode.USAGE, "give the TOKEN to release (or --token-file FILE), or --force to release whoever holds it"
        )
    if args.yes or args.json:
        raise CliError(ExitCode.USAGE, "--yes and --json go with --force")
    with _client(args) as rl, _usage_errors():
        release_token(rl, args.name, token)
    return ExitCode.OK


def _force_release(args: argparse.Namespace) -> int:
    if args.token is not None or args.token_file is not None:
        raise CliError(ExitCode.USAGE, "give either TOKEN or --force, not both")
    with _client(args) as rl:
        with _usage_errors():
            rl._lock_spec(args.name, DEFAULT_TTL)  # a bad name is a usage error before any question
        if not args.yes:
            _confirm(args.name)
        with _library_quiet():
            info = _read_lock_info(rl.force_release, args.name)
    views = info.masters
    if args.json:
        _print_json({"name": args.name, "holder": info.holder, "masters": [_master_json(view) for view in views]})
    else:
        _print(f"forced release of {args.name!r} on {len(views)} masters:")
        _print_masters(views, _removal)
    if info.reachable < info.quorum:
        raise QuorumUnavailable(
            f"forced release of {args.name!r} reached only {info.reachable} of {len(views)} masters: "
            "the others may still hold it",
            resource=args.name,
            quorum=info.quorum,
        )
    return ExitCode.OK


def _confirm(name: str) -> None:
    """Ask on the terminal; without one, nobody can say yes. Raises unless the answer is yes."""
    if not sys.stdin.isatty():
        raise CliError(
            ExitCode.USAGE,
            f"not released: --force {name!r} asks for confirmation on a terminal; give --yes without one",
        )
    print(
        f"Delete {name!r} on every master, whatever token holds it? A holder still running is not told "
        "and goes on unprotected. [y/N] ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    answer = sys.stdin.readline().strip()
    if answer.lower() not in ("y", "yes"):
        said = f"answered {answer!r}" if answer else "no answer"
        raise CliError(
            ExitCode.USAGE, f"aborted: the forced release of {name!r} was not confirmed ({said}); nothing removed"
        )


@contextlib.contextmanager
def _library_quiet() -> Iterator[None]:
    """The library's warnings off while a command prints each master's state itself: not twice."""
    library = logging.getLogger("redlock")
    level = library.level
    library.setLevel(logging.ERROR)
    try:
        yield
    finally:
        library.setLevel(level)


def _read_lock_info(read: Callable[[str], LockInfo], name: str) -> LockInfo:
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


# --- status ---------------------------------------------------------------------------------------


# What status, release --force and doctor print holds what masters said (tokens, values,
# error replies, INFO fields): whoever wrote a key, or runs a master, chose those bytes. They
# are printed escaped (redlock._console.printable), in JSON too: `jq -r` would otherwise hand
# a terminal the raw ESC that JSON's \u001b spelled.


def _print(line: str) -> None:
    print(printable(line))


def _print_json(document: object) -> None:
    print(json.dumps(_printable_json(document)))


def _printable_json(value: object) -> object:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(key)): _printable_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_printable_json(item) for item in value]
    return value


def _master_json(info: MasterInfo) -> dict[str, object]:
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


def _removal(info: MasterInfo) -> str:
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


def _print_masters(masters: Sequence[MasterInfo], state: Callable[[MasterInfo], str]) -> None:
    width = max(len(master.master) for master in masters)
    for master in masters:
        _print(f"  {master.master.ljust(width)}  {state(master)}")


def _cmd_status(args: argparse.Namespace) -> int:
    urls = _master_urls(args)
    timeout = args.node_timeout or DEFAULT_STATUS_TIMEOUT
    with _usage_errors():
        rl = Redlock(urls, node_timeout=timeout)
    with rl:
        with _usage_errors():
            rl._lock_spec(args.name, DEFAULT_TTL)
        with _library_quiet():
            info = _read_lock_info(rl.inspect, args.name)
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
            "masters": [_master_json(view) for view in views],
        }
        _print_json(report)
        return code
    _print(f"{args.name!r} on {len(views)} masters (quorum {info.quorum}):")
    _print_masters(views, _holding)
    summary = {
        "held": f"held by {holder} on {count} of {len(views)} masters",
        "read": f"read-held by {len(info.readers)} reader(s) on a quorum: {', '.join(info.readers)}",
        "free": "free: no master holds it",
        "split": f"split: no token is on a quorum (the most common is on {count})",
        "unavailable": _unavailable(info),
    }
    _print(summary[verdict])
    if info.intent is not None:
        _print(f"a writer waits for the readers to leave: {info.intent}")
    return code


# --- doctor -----------------------------------------------------------------------------------------


def _add_leader(commands: argparse._SubParsersAction[_Parser], cluster: _Parser) -> None:
    leader = commands.add_parser(
        "leader",
        parents=[cluster],
        help="run a command while this process leads the election on NAME",
        description="Campaign for NAME until elected, run CMD while leader (leadership is extended in "
        "the background), then resign. If leadership is lost, CMD is stopped (SIGTERM, then SIGKILL after "
        "--grace) and `leader` exits 76, or with --again campaigns again and runs CMD anew once elected. "
        "Exits with CMD's exit code when CMD ends on its own. Arguments, signals, job control and the "
        "guard are as for `exec`; CMD sees the same variables, REDLOCK_FENCING_TOKEN being the term.",
        usage="redlock leader [options] NAME [options] [--] CMD [ARGS...]",
        allow_abbrev=False,
    )
    leader.add_argument("name", metavar="NAME")
    leader.add_argument(
        "--ttl",
        type=_seconds(allow_zero=False),
        default=DEFAULT_TTL,
        metavar="S",
        help=f"how long a leader that stops extending keeps the others out (default {DEFAULT_TTL} s)",
    )
    leader.add_argument(
        "--timeout",
        type=_seconds(allow_zero=True),
        metavar="S",
        help="how long each campaign may wait; exits 75 if not elected by then (default: as long as it takes, "
        "through outages of the masters too)",
    )
    leader.add_argument(
        "--identity",
        metavar="ID",
        help="who this campaigner says it is, as `redlock status NAME` shows the leader (default host:pid)",
    )
    leader.add_argument(
        "--again", action="store_true", help="after a lost leadership, campaign again instead of exiting 76"
    )
    leader.add_argument(
        "--grace",
        type=_seconds(allow_zero=True),
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"once leadership is lost, the time between SIGTERM and SIGKILL (default {DEFAULT_GRACE} s)",
    )
    _add_pass_masters(leader)
    leader.set_defaults(handler=_cmd_leader)


def _add_pass_masters(command: _Parser) -> None:
    command.add_argument(
        "--pass-masters",
        action="store_true",
        help=f"leave ${ENV_MASTERS} in CMD's environment (by default it is removed: its URLs may carry passwords)",
    )


def _add_doctor(commands: argparse._SubParsersAction[_Parser], cluster: _Parser) -> None:
    doctor = commands.add_parser(
        "doctor",
        parents=[cluster],
        help="whether the masters are fit for Redlock: what each one is, and what to fix",
        description="Ask every master what it is (INFO) and time a PING on each, as Redlock.check() does, "
        "and print each master, what was found about it, and the verdict. Exits 0 when the masters are "
        "fit, 1 when fit with warnings, 78 when a master is unfit for Redlock (with --strict: any warning), "
        "69 when fewer than a quorum could be used.",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    doctor.add_argument("--strict", action="store_true", help="judge as a client with strict=True: warnings unfit")
    doctor.add_argument(
        "--fencing", action="store_true", help="judge the masters for fencing tokens too (their persistence)"
    )
    doctor.set_defaults(handler=_cmd_doctor)


def _doctor_exit(report: TopologyReport) -> ExitCode:
    if any(master.refused for master in report.masters):
        return ExitCode.UNFIT
    if report.usable < report.quorum:
        return ExitCode.UNAVAILABLE
    return ExitCode.NOT_HELD if report.verdict is Verdict.WARNINGS else ExitCode.OK


def _report_json(master: MasterReport) -> dict[str, object]:
    """One master in the JSON output: the report's fields, the latency in milliseconds."""
    shown: dict[str, object] = {field.name: getattr(master, field.name) for field in dataclasses.fields(master)}
    del shown["latency"]
    shown["error"] = master.error or None
    shown["latency_ms"] = None if master.latency is None else round(master.latency * 1000, 3)
    shown["findings"] = [
        {"code": finding.code, "severity": finding.severity.value, "message": finding.message}
        for finding in master.findings
    ]
    return shown


def _said(value: object, shown: str | None = None) -> str:
    return "unknown" if value is None else str(value) if shown is None else shown


def _described(master: MasterReport) -> str:
    """One line of what a master is; "unknown" for what it did not say."""
    if not master.reachable:
        return f"not reached: {master.error}"
    aof = None if master.aof_enabled is None else ("on" if master.aof_enabled else "off")
    parts = [
        f"{_said(master.server)} {master.version or ''}".rstrip(),
        f"{_said(master.mode)} {_said(master.role)}",
        f"replicas {_said(master.connected_replicas)}",
        f"maxmemory {_said(master.maxmemory, 'none' if master.maxmemory == 0 else None)}",
        f"policy {_said(master.maxmemory_policy)}",
        f"aof {_said(aof)}",
    ]
    if master.tls:
        parts.append("tls")
    if master.unix_socket:
        parts.append("unix socket")
    if master.latency is not None:
        parts.append(f"ping {master.latency * 1000:.3f} ms")
    return ", ".join(parts)


def _verdict_line(report: TopologyReport, code: ExitCode) -> str:
    refused = sum(master.refused for master in report.masters)
    warnings = len(report.findings(Severity.WARNING))
    usable = f"{report.usable} of {len(report.masters)} masters usable, quorum {report.quorum}"
    return {
        ExitCode.OK: f"fit: {usable}",
        ExitCode.NOT_HELD: f"fit, with {warnings} warning(s) to weigh: {usable}",
        ExitCode.UNFIT: f"unfit: {refused} master(s) refused; {usable}",
        ExitCode.UNAVAILABLE: f"unfit: {usable}",
    }[code]


def _cmd_doctor(args: argparse.Namespace) -> int:
    urls = _master_urls(args)
    timeout = args.node_timeout or DEFAULT_STATUS_TIMEOUT
    with _usage_errors():
        rl = Redlock(urls, node_timeout=timeout, strict=args.strict)
    # What the handshakes log as warnings, the report says in full: not twice.
    with _library_quiet(), rl:
        report = rl.check(fencing=args.fencing)
    code = _doctor_exit(report)
    if args.json:
        summary = {
            "verdict": report.verdict.value,
            "quorum": report.quorum,
            "usable": report.usable,
            "strict": report.strict,
            "fencing": args.fencing,
            "masters": [_report_json(master) for master in report.masters],
        }
        _print_json(summary)
        return code
    _print(f"{len(report.masters)} masters (quorum {report.quorum}):")
    width = max(len(master.address) for master in report.masters)
    for master in report.masters:
        _print(f"  {master.address.ljust(width)}  {_described(master)}")
        for finding in master.findings:
            _print(f"    {finding.severity.value:<8} {finding.code}: {finding.message}")
    _print(_verdict_line(report, code))
    return code


# --- exec -------------------------------------------------------------------------------------------


def _exec_environment(name: str, lock: Lock, *, pass_masters: bool) -> dict[str, str]:
    env = dict(os.environ)
    # An outer exec's fencing token must not pass for ours.
    env.pop("REDLOCK_FENCING_TOKEN", None)
    if not pass_masters:
        # Its URLs may carry the masters' passwords, which the command, and whatever it runs,
        # need not have: it gets them when asked.
        env.pop(ENV_MASTERS, None)
    env["REDLOCK_NAME"] = name
    env["REDLOCK_TOKEN"] = str(lock.token)
    env["REDLOCK_VALIDITY_DEADLINE"] = f"{time.time() + lock.validity:.3f}"
    if lock.fencing_token is not None:
        env["REDLOCK_FENCING_TOKEN"] = str(lock.fencing_token)
    return env


def _cmd_exec(args: argparse.Namespace) -> int:
    supervisor = Supervisor(args.grace)
    with _client(args) as rl, supervisor.handling_signals():
        lock = _lock(
            rl, args.name, args.ttl, fencing=args.fencing, on_lost=supervisor.on_lost, limit=args.limit, mode=args.mode
        )
        return _run_holding(args, supervisor, lock)


def _run_holding(args: argparse.Namespace, supervisor: Supervisor, lock: Lock) -> int:
    """Acquire ``lock``, run the command under ``supervisor`` while it is held, release it;
    the exit code (``exec``'s, and each term of ``leader``'s)."""
    supervisor.lock = lock
    code: int | None = None
    try:
        if not lock.acquire(blocking=True, timeout=args.timeout):
            raise _not_acquired(lock, args.timeout)
        supervisor.hold()
        returncode = supervisor.run(args.argv, _exec_environment(args.name, lock, pass_masters=args.pass_masters))
        if returncode is not None:
            # As a shell reports a command killed by signal N.
            code = returncode if returncode >= 0 else ExitCode.SIGNALLED - returncode
    finally:
        # Every path releases, an interrupted one included; a failed release only
        # decides the exit code when nothing else went wrong first.
        supervisor.hold()
        release_failure: LockLost | None = None
        if lock.token is not None:
            try:
                lock.release()
            except LockLost as failure:
                release_failure = failure
            except LockNotHeld:
                pass
    if supervisor.lost.is_set():
        when = "while the job was stopped" if supervisor.lost_while_stopped else "while the command ran"
        raise LockLost(
            f"lock {args.name!r} was lost {when}; the command was sent SIGTERM (and SIGKILL "
            f"if still running {args.grace} s later), and its work may have run unprotected",
            resource=args.name,
        )
    if release_failure is not None:
        raise LockLost(
            f"the command exited with {code}, but its lock could not be confirmed at release, so its "
            f"work may have run unprotected: {release_failure}",
            resource=args.name,
        )
    assert code is not None  # run() returns None only when the lock was lost
    return code


def _cmd_leader(args: argparse.Namespace) -> int:
    """``exec`` under the election's Lock: each term is one ``exec`` of the command."""
    with _client(args) as rl:
        supervisors: list[Supervisor] = []

        def stop_the_command(lost: object) -> None:
            supervisors[-1].on_lost(lost)  # the current term's

        with _usage_errors():
            election = rl.election(args.name, args.ttl, identity=args.identity, on_lost=stop_the_command)
        _check_max_ttl(args.ttl)
        losses = 0
        while True:
            supervisor = Supervisor(args.grace)
            supervisors.append(supervisor)
            with supervisor.handling_signals():
                if losses:
                    # As run() does: the others get the first go (a signal here ends it all).
                    time.sleep(backoff_after_loss(losses, rl.retry_delay, args.ttl, rl._rng))
                try:
                    return _run_holding(args, supervisor, election.lock)
                except LockLost:
                    if not (args.again and supervisor.lost.is_set()):
                        raise
            losses += 1
            logging.getLogger("redlock").warning(
                "leadership of %r was lost and the command stopped: campaigning again", args.name
            )


# --- servers --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP interrupt the block once; later ones are ignored while it cleans up."""
    fired = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise Interrupted(signum)

    terminating = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, interrupt) for signum in terminating}
    try:
        yield
    finally:
        for terminating_signal, handler in previous.items():
            signal.signal(terminating_signal, handler)


def _say(line: str) -> None:
    print(f"redlock: {line}", file=sys.stderr, flush=True)


def _servers_failed(error: BaseException) -> CliError:
    message = redis_server_hint() if isinstance(error, RedisServerNotFound) else str(error)
    return CliError(ExitCode.SERVERS_FAILED, f"servers: {message}")


def _cmd_servers(args: argparse.Namespace) -> int:
    if args.detach:
        return _detach_servers(args)
    report: IO[str] | None = None
    if args.report_fd is not None:
        try:
            report = os.fdopen(args.report_fd, "w")
        except OSError as error:
            raise CliError(ExitCode.USAGE, f"servers: --report-fd {args.report_fd}: {error}") from None
    try:
        return _run_servers(args, report)
    except CliError as error:
        if report is not None and not report.closed:
            report.write(f"error {error}\n")
        raise
    finally:
        if report is not None:
            report.close()


def _run_servers(args: argparse.Namespace, report: IO[str] | None) -> int:
    with _stopped_by_signals():
        try:
            masters = LocalMasters(args.n, persistence=args.persistence)
        except (OSError, RuntimeError) as error:
            raise _servers_failed(error) from None
        try:
            try:
                masters.start()
            except (OSError, RuntimeError) as error:
                raise _servers_failed(error) from None
            export = f"export {ENV_MASTERS}={','.join(masters.urls)}"
            if report is None:
                print(export, flush=True)
                print(f"# {args.n} masters running; Ctrl-C or SIGTERM stops them", file=sys.stderr, flush=True)
            else:
                # Closing it is what lets the detaching command return: it reads to the end.
                report.write(f"{export}\n")
                report.close()
            masters.watch(_say, restart_after=args.restart)
        except Interrupted:
            # The way to stop them: a clean stop, not a failure.
            return ExitCode.OK
        finally:
            masters.stop()


def _open_log(path: str | None) -> int:
    """The file descriptor --log FILE is appended through (/dev/null without it).

    Made mode 600 when new: what the masters report is nobody else's business. A symlink at
    the path is refused (O_NOFOLLOW), so that another user who can write to its directory
    (/tmp) cannot point it at a file of ours for us to append to.
    """
    if path is None:
        return os.open(os.devnull, os.O_WRONLY)
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        why = "it is a symlink, which is not followed" if error.errno == errno.ELOOP else error.strerror
        raise CliError(ExitCode.USAGE, f"servers: --log {path}: {why}") from None


def _detach_servers(args: argparse.Namespace) -> int:
    """``servers --detach``: the same command in a session of its own, reporting through a pipe.

    The masters die with the process that started them (redlock.servers ties them to it),
    so that process must outlive us: it runs ``servers`` in the foreground, detached from
    our terminal and output, and tells us its URLs, or why it failed, on a pipe.
    """
    log = _open_log(args.log)  # first: a refused --log leaves nothing else to close
    read_end, write_end = os.pipe()
    command = [sys.executable, "-m", "redlock", "servers", "-n", str(args.n), "--persistence", args.persistence]
    if args.restart is not None:
        command += ["--restart", repr(args.restart)]
    try:
        # posix_spawn rather than subprocess: it is not our child to wait for, and a Popen
        # left running would warn when collected.
        pid = os.posix_spawn(
            sys.executable,
            [*command, "--report-fd", "3"],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 2),
                (os.POSIX_SPAWN_DUP2, write_end, 3),
            ],
            setsid=True,
        )
    except OSError as error:
        os.close(read_end)
        raise CliError(ExitCode.SERVERS_FAILED, f"servers: cannot start the background process: {error}") from None
    finally:
        os.close(write_end)
        os.close(log)
    with os.fdopen(read_end) as pipe:
        report = pipe.read()
    if not report.startswith("export "):
        _, status = os.waitpid(pid, 0)
        why = report.removeprefix("error ").strip()
        raise CliError(
            ExitCode.SERVERS_FAILED,
            why or f"servers: the background process exited ({os.waitstatus_to_exitcode(status)}) before they started",
        )
    print(report, end="")
    print(f"export {ENV_SERVERS_PID}={pid}", flush=True)
    told = (
        f"what happens to them goes to {args.log}" if args.log is not None else "--log FILE keeps what happens to them"
    )
    print(
        f'# {args.n} masters running in the background; kill "${ENV_SERVERS_PID}" stops them; {told}', file=sys.stderr
    )
    return ExitCode.OK
