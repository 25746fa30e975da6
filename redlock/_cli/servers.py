"""``redlock servers``: local masters (:mod:`redlock.servers`) in the foreground until
Ctrl-C, or detached in a session of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import IO

from redlock._cli.common import ENV_MASTERS, ENV_SERVERS_PID, CliError, ExitCode, Parser, duration, positive_int, say
from redlock._cli.supervisor import Interrupted
from redlock._extras import redis_server_hint
from redlock.servers import LocalMasters, RedisServerNotFound


def add_servers(commands: argparse._SubParsersAction[Parser]) -> None:
    servers = commands.add_parser(
        "servers",
        help="run N local masters in the foreground until Ctrl-C",
        description=f"Start N independent local redis-server masters, print `export {ENV_MASTERS}=...` "
        "for them, and stop them on Ctrl-C or SIGTERM. With --detach they run in the background: "
        f'`eval "$(redlock servers --detach)"` sets {ENV_MASTERS} and {ENV_SERVERS_PID}, and '
        f'`kill "${ENV_SERVERS_PID}"` stops them.',
    )
    servers.add_argument("-n", type=positive_int, default=5, metavar="N", help="how many masters (default 5)")
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
        type=duration(allow_zero=True),
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
            masters.watch(say, restart_after=args.restart)
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
