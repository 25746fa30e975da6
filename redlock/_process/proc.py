"""What Linux's ``/proc`` says about a process: the one reader of ``/proc/<pid>/stat``.

``redlock exec`` (:mod:`redlock._cli.supervisor`), the local masters (:mod:`redlock.servers`),
the chaos harness's clients, the benchmark and the tests all ask the kernel the same few
things: is a process stopped, a zombie or gone, who is its parent and group, how much CPU
has it used. They read them here, so that the one subtle part of the format is handled
once: the command name (field 2) is in parentheses and may itself contain spaces and
parentheses, so the fields are counted from the *last* ``)``.

Off Linux (no ``/proc``) every process reads as unknown: :func:`stat` returns None.
"""

from __future__ import annotations

import os
import pathlib
import time
from dataclasses import dataclass

__all__ = ["ProcessStat", "pids", "running", "stat", "wait_for_stop"]


@dataclass(frozen=True)
class ProcessStat:
    """The fields of ``/proc/<pid>/stat`` that anyone here reads."""

    #: One letter: ``R`` running, ``S`` sleeping, ``D`` in uninterruptible sleep, ``T``
    #: stopped by a signal, ``t`` stopped by a tracer, ``Z`` a zombie (exited, not reaped).
    state: str
    ppid: int
    pgrp: int
    #: CPU time in user and in kernel mode, in clock ticks (``os.sysconf("SC_CLK_TCK")``),
    #: summed over all of the process's threads.
    utime: int
    stime: int
    #: When the process started, in clock ticks after boot: with the pid, it names one process
    #: for good, as a pid alone does not once the pid is reused.
    starttime: int

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    @property
    def exited(self) -> bool:
        """A zombie runs no more code: for most purposes it is gone."""
        return self.state == "Z"


def stat(pid: int) -> ProcessStat | None:
    """``pid``'s stat; None once it is gone (or off Linux)."""
    try:
        # Bytes: the command name is whatever the process called itself, not always UTF-8.
        raw = pathlib.Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:
        # Fields from 3 on, so fields[0] is field 3 (state) and fields[k] is field k + 3.
        fields = raw[raw.rindex(b")") + 2 :].split()
        return ProcessStat(
            fields[0].decode("ascii"), int(fields[1]), int(fields[2]), int(fields[11]), int(fields[12]), int(fields[19])
        )
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def running(pid: int) -> bool:
    """Whether ``pid`` still runs code: neither gone nor a zombie."""
    found = stat(pid)
    return found is not None and not found.exited


def pids() -> list[int]:
    """Every process id ``/proc`` lists now (empty off Linux)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(entry) for entry in entries if entry.isdigit()]


def wait_for_stop(pid: int, *, stopped: bool, timeout: float) -> bool:
    """Wait until ``pid`` is stopped (or, with ``stopped=False``, running again).

    A signal is delivered asynchronously: whoever sent SIGSTOP or SIGCONT waits here until it
    has taken effect. False on timeout, or once ``pid`` is gone.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = stat(pid)
        if found is None:
            return False
        if found.stopped == stopped:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
