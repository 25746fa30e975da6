"""The ``redlock`` command line: run a command under a lock, inspect locks, check the masters,
start local masters.

It sits on top of the public client (:class:`redlock.Redlock`) and of
:mod:`redlock.servers`; nothing in the library imports it. This module is its face: the
parser, put together from the command families of :mod:`redlock._cli` (``exec`` and
``leader`` in :mod:`redlock._cli.run`, ``acquire``, ``extend`` and ``release`` in
:mod:`redlock._cli.tokens`, :mod:`redlock._cli.status`, :mod:`redlock._cli.doctor`,
:mod:`redlock._cli.servers`), and :func:`main`. Each command is a function from parsed
arguments to an exit code, and :func:`main` is the one place where an exception becomes an
exit code and a one-line message on stderr: an expected failure (the quorum is unreachable,
a bad URL or duration, the lock is held by someone else) never prints a traceback. The codes
are listed once, in :data:`EXIT_CODES` (:mod:`redlock._cli.common`), which feeds
``--help``; the tests check docs/cli.md against it.

``redlock exec`` runs its command in a process group of its own, handed the terminal as a
shell hands it to a job, stopped if the lock is lost, and tied to ``exec`` so that it cannot
outlive it: :mod:`redlock._cli.supervisor` does all of that and says how
(:mod:`redlock._process.lifeline` is the tie); :mod:`redlock._cli.run` acquires the lock
around it and turns its outcome into an exit code. Everything from the command's first word
on is the command's, options included. docs/cli.md tells all of this to users.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import redlock
from redlock._cli.common import ENV_MASTERS, ENV_SERVERS_PID, EXIT_CODES, CliError, ExitCode, Parser, shared_options
from redlock._cli.console import printable, to_a_reader
from redlock._cli.doctor import add_doctor
from redlock._cli.run import EXEC_ENVIRONMENT, add_exec, add_leader
from redlock._cli.servers import add_servers
from redlock._cli.status import add_status
from redlock._cli.supervisor import CannotRun, Interrupted
from redlock._cli.tokens import add_token_commands, release_token
from redlock.exceptions import (
    ExtendUnconfirmed,
    LockLost,
    LockNotAcquired,
    MasterMisconfigured,
    NodeOutcome,
    QuorumUnavailable,
    RedlockError,
    ReleaseUnconfirmed,
)

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
        #: Warnings about several masters at once: each of the addresses was told the text.
        self.grouped: list[tuple[list[str], str]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.lines.append(record.getMessage())
            told: tuple[list[str], list[str]] | None = getattr(record, "told", None)
            if told is not None:
                self.grouped.extend((told[0], text) for text in told[1])
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
        if not outcome.detail:
            return False
        return any(line.startswith(f"master {outcome.node} ") and outcome.detail in line for line in self.lines) or any(
            outcome.node in addresses and (outcome.detail in message or message in outcome.detail)
            for addresses, message in self.grouped
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


def _epilog() -> str:
    width = max(len(code) for code, _ in EXIT_CODES)
    rows = "\n".join(f"  {code.rjust(width)}  {meaning.replace('`', '')}" for code, meaning in EXIT_CODES)
    return (
        f"Masters come from --masters URL,URL,... or ${ENV_MASTERS}: redis://, rediss:// or unix:// URLs\n"
        f"of independent masters (no replication between them).\n\nexit codes:\n{rows}"
    )


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


def _split_exec(parser: Parser, argv: list[str]) -> tuple[list[str], list[str]]:
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


def _build_parser() -> Parser:
    parser = Parser(
        prog="redlock",
        description="Hold a Redlock lock on a majority of independent Redis masters, from the shell.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {redlock.__version__}")
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND", parser_class=Parser)

    options = shared_options()
    # (In this order in --help.)
    add_exec(commands, options)
    add_status(commands, options)
    add_token_commands(commands, options)
    add_leader(commands, options)
    add_doctor(commands, options)
    add_servers(commands)
    return parser
