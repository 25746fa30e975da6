"""``redlock exec``'s supervisor: runs the command under the lock, as a shell runs a job.

:mod:`redlock.cli` parses ``exec``'s arguments, acquires the lock and releases it, and turns
what happens into an exit code; this module does everything in between: it runs the command,
forwards signals to it, follows its job control and stops it if the lock is lost. It knows
nothing of exit codes: a command that cannot start raises :class:`CannotRun`, a terminating
signal before the lock is held raises :class:`Interrupted`, and :meth:`Supervisor.run`
returns the command's own return code.

The command runs in a process group of its own, so that a lost lock stops everything the
command started (a shell's children too), not only its first process, and every signal
forwarded to it reaches the whole group. When ``redlock`` runs in the foreground of a
terminal, it hands the terminal to that group while the command runs, as a shell does for a
job: keyboard signals and terminal input then go to the command directly. When the command
stops (Ctrl-Z), ``exec`` stops its own job too, so that the shell gets control back and the
lock is not extended for a stopped job; on continue it checks the lock before the command
goes on. The command dies with ``exec`` (:mod:`redlock._process.lifeline`): without ``exec``
nothing extends the lock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from redlock._api.sync import Lock
from redlock._process import proc as _proc
from redlock._process.lifeline import Guard

__all__ = ["CannotRun", "Interrupted", "Supervisor"]

_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Interrupted(BaseException):
    """A terminating signal arrived while we were waiting (for the lock, or for Ctrl-C).

    A BaseException like KeyboardInterrupt, so that the library's cleanup on interruption
    (the rollback of an acquire in flight) runs for SIGTERM and SIGHUP too.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class CannotRun(Exception):
    """The command (or the guard that ties it to us) could not be started."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        #: No such command, as opposed to one that exists but cannot be executed.
        self.not_found = not_found


class _Terminal:
    """The controlling terminal on stdin, if ``redlock`` has one, and what job control needs of it.

    In a job-control shell each job is a process group, and the group in the terminal's
    foreground gets the keyboard's signals (Ctrl-C, Ctrl-Z) and may read. ``exec`` runs its
    command in a group of its own, so it acts for that group as a shell does for a job: it
    hands the terminal over while the command runs, and when the command stops (Ctrl-Z), it
    takes the terminal back and stops its own job, so that the shell it was started from
    sees a stopped job and gets control back; on ``fg`` or ``bg`` it continues the command.
    """

    def __init__(self) -> None:
        self.fd: int | None = None
        #: Whether a job-control shell runs us as a job: a terminal of our session, and a
        #: process group other than the session leader's (a shell without job control runs
        #: its commands in its own group, and could not continue a stopped one).
        self.job_control = False
        try:
            fd = sys.stdin.fileno()
            # tcgetpgrp answers only for the controlling terminal of our session.
            if os.isatty(fd) and os.tcgetpgrp(fd) > 0:
                self.fd = fd
                self.job_control = os.getpgrp() != os.getsid(0)
        except (OSError, ValueError, AttributeError):
            pass

    def foreground(self) -> int | None:
        if self.fd is None:
            return None
        try:
            return os.tcgetpgrp(self.fd)
        except OSError:
            return None

    def hand_to(self, pgid: int) -> None:
        """Make ``pgid`` the foreground group, if ours is the foreground group now."""
        if self.fd is not None and self.foreground() == os.getpgrp():
            _set_foreground(self.fd, pgid)

    def take_back(self, pgid: int) -> None:
        """Make our group the foreground again, if ``pgid`` (the command's) has it."""
        if self.fd is not None and self.foreground() == pgid:
            _set_foreground(self.fd, os.getpgrp())


def _set_foreground(fd: int, pgid: int) -> None:
    # Taking the terminal back from the background raises SIGTTOU, which would stop us.
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, pgid)
    finally:
        signal.signal(signal.SIGTTOU, previous)


class Supervisor:
    """Runs the command for ``exec``: forwards signals to it, follows its job control, and
    stops it if the lock is lost.

    Signal handlers run in the main thread between bytecodes, so they take no lock; the
    lock-lost callback runs in the library's extension thread.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.lock: Lock | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.lost = threading.Event()
        self.lost_while_stopped = False
        # While we wait for the lock, a terminating signal interrupts the wait (Interrupted);
        # once the lock is held it is forwarded to the command, or kept until it has started.
        self._interruptible = True
        self._pending: list[int] = []
        self._stop_asked: int | None = None
        self._stopper: threading.Thread | None = None
        self._stop_lock = threading.Lock()
        self._previous: dict[int, Any] = {}

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[None]:
        for signum in (*_FORWARDED_SIGNALS, signal.SIGTSTP):
            previous = signal.getsignal(signum)
            # An ignored signal stays ignored, for us and for the command that inherits it
            # (nohup, or a script's background job): whoever ignored it meant it.
            if previous is signal.SIG_IGN:
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._on_signal)
        try:
            yield
        finally:
            for forwarded, handler in self._previous.items():
                signal.signal(forwarded, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGTSTP:
            child = self.child
            if child is None or child.returncode is not None:
                _stop_self(signum)  # waiting for the lock, or releasing it: as if we did not catch it
            else:
                # A stop for us is a stop for the command; we follow it once it has stopped
                # (in _wait()), so that the lock is not extended for a stopped command.
                self._stop_asked = signum
                _signal_group(child, signum)
            return
        if self._interruptible:
            self._interruptible = False  # a second signal must not cut the rollback short
            raise Interrupted(signum)
        child = self.child
        if child is None:
            self._pending.append(signum)
        elif child.returncode is None:
            _signal_group(child, signum)

    def hold(self) -> None:
        """The lock is held: from now on signals are for the command."""
        self._interruptible = False

    def on_lost(self, lock: object) -> None:
        """The library's lock-lost callback (from its extension thread): stop the command."""
        self.lost.set()
        child = self.child
        if child is not None:
            self._stop(child)

    def run(self, argv: Sequence[str], env: dict[str, str]) -> int | None:
        """Run the command to its end; its return code as :attr:`subprocess.Popen.returncode`
        has it (-N if signal N killed it), or None if the lock was lost before it started."""
        if self._pending:
            raise Interrupted(self._pending[0])
        if self.lost.is_set():
            return None
        try:
            guard = Guard()
        except OSError as error:
            raise CannotRun(f"exec: cannot start the guard process: {error}") from None
        child: subprocess.Popen[bytes] | None = None
        try:
            try:
                # A group of its own: the lost-lock SIGTERM and forwarded signals reach everything
                # the command starts, and the command's job control stays its own. It dies with
                # us (see redlock._process.lifeline): without us nothing extends the lock. The preexec_fn
                # is safe beside the extension thread: it takes no lock, imports nothing and
                # only makes system calls (prctl, getppid, write).
                child = subprocess.Popen(
                    argv,
                    env=env,
                    process_group=0,
                    preexec_fn=guard.preexec_fn(),  # noqa: PLW1509
                )
            except FileNotFoundError:
                raise CannotRun(f"exec: {argv[0]}: command not found", not_found=True) from None
            except OSError as error:
                raise CannotRun(f"exec: {argv[0]}: {error.strerror or error}") from None
            except subprocess.SubprocessError:
                # Only the preexec_fn raises it: its write found the guard gone.
                raise CannotRun("exec: the guard process exited before the command could start") from None
            self.child = child
            while self._pending:
                _signal_group(child, self._pending.pop(0))
            if self.lost.is_set():
                self._stop(child)
            returncode = self._wait(child)
            with self._stop_lock:
                stopper = self._stopper
            if stopper is not None:
                # The lock was lost: the rest of the command's group gets its grace and its
                # SIGKILL before we exit, or it would work on unprotected after we are gone.
                stopper.join()
        finally:
            # Only a command we saw to its end is let go; otherwise its group goes with us.
            guard.done(kill_group=child is not None and child.returncode is None)
        return returncode

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        terminal = _Terminal()
        terminal.hand_to(child.pid)
        # The command may have touched the terminal before it was handed over and been
        # stopped for it (SIGTTIN/SIGTTOU); it can go on now.
        _signal_group(child, signal.SIGCONT)
        # Unless a stop was asked for (Ctrl-Z as the command started): that SIGCONT may have
        # undone it, and Linux then drops the stop's report, so it is asked again. Checked
        # after the SIGCONT, so a handler running at any point before it is covered.
        asked = self._stop_asked
        if asked is not None:
            _signal_group(child, asked)
        stuck_since: float | None = None
        try:
            while True:
                # WUNTRACED: a stopped command is reported too, not only a finished one.
                # Polled, not blocking: see _unstick.
                pid, status = os.waitpid(child.pid, os.WUNTRACED | os.WNOHANG)
                if pid == 0:
                    stuck_since = _unstick(child, stuck_since)
                    time.sleep(_WAIT_POLL)
                    continue
                stuck_since = None
                if not os.WIFSTOPPED(status):
                    child.returncode = os.waitstatus_to_exitcode(status)
                    return child.returncode
                self._follow_stop(child, os.WSTOPSIG(status), terminal)
        finally:
            terminal.take_back(child.pid)

    def _follow_stop(self, child: subprocess.Popen[bytes], signum: int, terminal: _Terminal) -> None:
        """The command stopped: stop our own job too, as a shell's job would, and continue it after."""
        asked, self._stop_asked = self._stop_asked, None
        if not terminal.job_control and asked is None:
            # No shell to give control back to, nor anyone who asked us to stop: the command
            # was stopped from outside, and we hold its lock until it ends (see docs/cli.md).
            return
        terminal.take_back(child.pid)
        if terminal.job_control:
            # Our whole group, as the terminal would stop it: a pipeline's other commands too.
            _stop_self(
                signum if signum in (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU) else signal.SIGSTOP, group=True
            )
        else:
            _stop_self(signal.SIGSTOP)
        # Continued (fg, bg, or SIGCONT). While we were stopped nothing extended the lock:
        # if its validity ran out, the command must not go on as if it still held it.
        assert self.lock is not None
        if not self.lock.locked():
            self.lost_while_stopped = True
            self.lost.set()
            self._stop(child)
            return
        terminal.hand_to(child.pid)
        _signal_group(child, signal.SIGCONT)

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        with self._stop_lock:
            if self._stopper is not None:
                return
            self._stopper = threading.Thread(
                target=self._terminate, args=(child,), name="redlock-exec-stop", daemon=True
            )
            self._stopper.start()

    def _terminate(self, child: subprocess.Popen[bytes]) -> None:
        _signal_group(child, signal.SIGTERM)
        # A stopped command could not act on its SIGTERM until continued.
        _signal_group(child, signal.SIGCONT)
        deadline = time.monotonic() + self.grace
        # The whole group, not only its leader: a child of the command that ignores SIGTERM
        # would otherwise go on working without the lock.
        while _group_alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _group_alive(child):
            _signal_group(child, signal.SIGKILL)


def _stop_self(signum: int, *, group: bool = False) -> None:
    """Stop this process (or its whole group) by ``signum``; returns once continued."""
    # A stop signal we catch would only call our handler again: its default action stops.
    previous = signal.signal(signum, signal.SIG_DFL) if signum != signal.SIGSTOP else None
    try:
        if group:
            os.killpg(os.getpgrp(), signum)
        else:
            os.kill(os.getpid(), signum)
    finally:
        if previous is not None:
            signal.signal(signum, previous)


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    # The group outlives its leader while any of the command's children are left; once it
    # is gone there is nothing to signal.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)


#: How often exec looks at its command while it runs (its exit, its stops, a stuck vfork).
_WAIT_POLL = 0.02
#: How long a command may sit stopped-in-vfork before exec unsticks it.
_STUCK_AFTER = 0.2


def _unstick(child: subprocess.Popen[bytes], since: float | None) -> float | None:
    """Resolve a job stop that the command's leader can never report; the new ``since``.

    A shell such as dash starts each command with vfork: until the child execs, the parent
    sleeps uninterruptibly (state D). A Ctrl-Z landing in that window stops the child before
    its exec, so the parent can neither go on nor stop: the job never reports stopped and
    the terminal seems wedged (a shell waiting on such a job hangs the same way). Seen for
    longer than _STUCK_AFTER, it is resolved as the terminal meant: SIGCONT lets the child
    exec (and discards the stop the parent had pending), then the stop is sent again.
    """
    leader = _proc.stat(child.pid)
    if leader is None or leader.state != "D":
        return None
    members = (_proc.stat(pid) for pid in _proc.pids() if pid != child.pid)
    if not any(member is not None and member.pgrp == child.pid and member.stopped for member in members):
        return None
    now = time.monotonic()
    if since is None:
        return now
    if now - since < _STUCK_AFTER:
        return since
    _signal_group(child, signal.SIGCONT)
    time.sleep(_WAIT_POLL)  # time for the child to exec and the parent to leave vfork
    _signal_group(child, signal.SIGTSTP)
    return None


def _group_alive(child: subprocess.Popen[bytes]) -> bool:
    try:
        os.killpg(child.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a member we may not signal (it changed its user) still exists
    return True
