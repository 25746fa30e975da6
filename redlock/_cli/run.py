"""``redlock exec`` and ``redlock leader``: a command run while a lock (or a leadership) is
held, under :mod:`redlock._cli.supervisor`, and its outcome as an exit code.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

from redlock._api.election import backoff_after_loss
from redlock._api.state import DEFAULT_TTL
from redlock._api.sync import Lock
from redlock._cli.common import (
    ENV_MASTERS,
    ExitCode,
    Parser,
    SharedOptions,
    check_max_ttl,
    client_for,
    duration,
    lock_for,
    not_acquired,
    positive_int,
    usage_errors,
)
from redlock._cli.doctor import say_what_doctor_would
from redlock._cli.supervisor import Supervisor
from redlock.exceptions import LockLost, LockNotHeld

#: What ``redlock exec`` tells its command, as ``etcdctl lock`` passes ETCD_LOCK_KEY: the
#: lock's name, our token, the wall-clock Unix time (seconds, 3 decimals) until which the
#: lock is valid as acquired (auto-extension moves the real end later while exec runs), and
#: with ``--fencing`` the fencing token.
EXEC_ENVIRONMENT = ("REDLOCK_NAME", "REDLOCK_TOKEN", "REDLOCK_VALIDITY_DEADLINE", "REDLOCK_FENCING_TOKEN")


#: Once the lock is lost, how long ``redlock exec`` lets the command stop after SIGTERM
#: before SIGKILL. Short, because the command runs unprotected meanwhile.
DEFAULT_GRACE = 5.0


def add_exec(commands: argparse._SubParsersAction[Parser], options: SharedOptions) -> None:
    run = commands.add_parser(
        "exec",
        parents=[options.cluster, options.holding],
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
        type=positive_int,
        metavar="K",
        help="hold one of K permits of a semaphore on NAME instead of the lock: up to K commands run at once",
    )
    run.add_argument(
        "--grace",
        type=duration(allow_zero=True),
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"once the lock is lost, the time between SIGTERM and SIGKILL (default {DEFAULT_GRACE} s)",
    )
    _add_pass_masters(run)
    run.set_defaults(handler=_cmd_exec)


def add_leader(commands: argparse._SubParsersAction[Parser], options: SharedOptions) -> None:
    leader = commands.add_parser(
        "leader",
        parents=[options.cluster],
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
        type=duration(allow_zero=False),
        default=DEFAULT_TTL,
        metavar="S",
        help=f"how long a leader that stops extending keeps the others out (default {DEFAULT_TTL} s)",
    )
    leader.add_argument(
        "--timeout",
        type=duration(allow_zero=True),
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
        type=duration(allow_zero=True),
        default=DEFAULT_GRACE,
        metavar="S",
        help=f"once leadership is lost, the time between SIGTERM and SIGKILL (default {DEFAULT_GRACE} s)",
    )
    _add_pass_masters(leader)
    leader.set_defaults(handler=_cmd_leader)


def _add_pass_masters(command: Parser) -> None:
    command.add_argument(
        "--pass-masters",
        action="store_true",
        help=f"leave ${ENV_MASTERS} in CMD's environment (by default it is removed: its URLs may carry passwords)",
    )


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
    with client_for(args) as rl, supervisor.handling_signals():
        lock = lock_for(
            rl, args.name, args.ttl, fencing=args.fencing, on_lost=supervisor.on_lost, limit=args.limit, mode=args.mode
        )
        say_what_doctor_would(rl, fencing=args.fencing)
        return _run_holding(args, supervisor, lock)


def _run_holding(args: argparse.Namespace, supervisor: Supervisor, lock: Lock) -> int:
    """Acquire ``lock``, run the command under ``supervisor`` while it is held, release it;
    the exit code (``exec``'s, and each term of ``leader``'s)."""
    supervisor.lock = lock
    code: int | None = None
    try:
        if not lock.acquire(blocking=True, timeout=args.timeout):
            raise not_acquired(lock, args.timeout)
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
    with client_for(args) as rl:
        supervisors: list[Supervisor] = []

        def stop_the_command(lost: object) -> None:
            supervisors[-1].on_lost(lost)  # the current term's

        with usage_errors():
            election = rl.election(args.name, args.ttl, identity=args.identity, on_lost=stop_the_command)
        check_max_ttl(args.ttl)
        say_what_doctor_would(rl, fencing=True)  # a term is a fencing token
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
