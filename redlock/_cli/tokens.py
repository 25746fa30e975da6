"""``redlock acquire``, ``extend`` and ``release``: a lock held across processes by its
token, and ``release --force`` for a holder that is gone.
"""

from __future__ import annotations

import argparse
import json
import sys

from redlock._api.state import DEFAULT_TTL
from redlock._api.sync import Redlock
from redlock._cli.common import (
    CliError,
    ExitCode,
    Parser,
    SharedOptions,
    client_for,
    library_quiet,
    lock_for,
    not_acquired,
    print_json,
    print_line,
    private_text,
    read_lock_info,
    usage_errors,
)
from redlock._cli.status import master_json, print_masters, removal
from redlock.exceptions import QuorumUnavailable


def add_token_commands(commands: argparse._SubParsersAction[Parser], options: SharedOptions) -> None:
    """``acquire``, ``extend`` and ``release``."""
    acquire = commands.add_parser(
        "acquire",
        parents=[options.cluster, options.holding],
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
        parents=[options.cluster, options.lifetime],
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
        parents=[options.cluster],
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


def _add_token_file(command: Parser) -> None:
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
    token = private_text(args.token_file, "--token-file").strip()
    if not token:
        raise CliError(ExitCode.USAGE, f"--token-file {args.token_file}: it is empty")
    return token


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
    with client_for(args) as rl:
        lock = lock_for(rl, args.name, args.ttl, fencing=args.fencing)
        if not lock.acquire(blocking=True, timeout=args.timeout):
            raise not_acquired(lock, args.timeout)
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
    with client_for(args) as rl:
        lock = lock_for(rl, args.name, args.ttl)
        with usage_errors():  # (adopt raises them only for its arguments, before any traffic)
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
    with client_for(args) as rl, usage_errors():
        release_token(rl, args.name, token)
    return ExitCode.OK


def _force_release(args: argparse.Namespace) -> int:
    if args.token is not None or args.token_file is not None:
        raise CliError(ExitCode.USAGE, "give either TOKEN or --force, not both")
    with client_for(args) as rl:
        with usage_errors():
            rl._lock_spec(args.name, DEFAULT_TTL)  # a bad name is a usage error before any question
        if not args.yes:
            _confirm(args.name)
        with library_quiet():
            info = read_lock_info(rl.force_release, args.name)
    views = info.masters
    if args.json:
        print_json({"name": args.name, "holder": info.holder, "masters": [master_json(view) for view in views]})
    else:
        print_line(f"forced release of {args.name!r} on {len(views)} masters:")
        print_masters(views, removal)
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
