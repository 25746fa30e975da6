"""Clock faults for a redis-server: jump its wall clock, or make it run fast or slow.

Redis expires keys by its wall clock (``gettimeofday``), so a master whose clock is moved
expires locks early (forward jump, fast rate) or late (backward jump, slow rate): the K3
and clock-rate scenarios of docs/safety.md. The harness does this to a real redis-server with libfaketime,
which the ``libfaketime`` wheel ships as a shared library, so ``pip`` is all it needs.

How it is wired
    :meth:`ClockControl.env` gives the variables to start the master with (``LD_PRELOAD``
    of the library, and a timestamp file in the master's own dir). With
    ``FAKETIME_NO_CACHE=1`` libfaketime re-reads that file on every wall-clock call, and
    re-parses it whenever its text changed, so rewriting the file moves the clock of the
    running process. ``DONT_FAKE_MONOTONIC=1`` leaves CLOCK_MONOTONIC alone: Redis's event
    loop and timers keep real time, and only what Redis derives from the wall clock (key
    expiry, ``TIME``) moves.

What the file says, and why
    libfaketime computes the fake time as ``base + (real - start) * rate``. For a spec
    ``"+N"`` (with or without ``xR``), ``base`` is ``start + N`` where ``start`` is when the
    process loaded the library, which the harness cannot know exactly; with ``R == 1``
    start cancels out, so a step at real speed is written that way and is exact.

    A rate change must not step the clock, yet the master parses the new text only at its
    next wall-clock call, which on an idle master is up to a cron tick (100 ms) after the
    harness wrote it. So the master runs with ``FAKETIME_XRESET=1``: then any spec with an
    ``xR`` continues the clock from the last time the process read it, at the new rate
    from that read on, whenever the text is parsed and whatever base it names. The base
    of an ``xR`` spec (``"+offset xR"``) matters only to a process that starts with it (a
    restart: :meth:`ClockControl.reapply`), whose ``start`` is its load time, so it starts
    ``restart duration * (R - 1)`` off the model: microseconds. (An absolute ``"@time xR"``
    made the clock stand still until the parse, then run on from there: a master idle for
    80 ms stepped back 80 ms against the real time when a rate began, and forward when it
    ended.)

    A step therefore never carries an ``xR`` (XRESET would ignore it), and keeps the rate:
    at real speed ``"+N"``, exact; at another rate an absolute ``"@time"``, exact only once
    the master parses it, so the controller pokes the master (``poke``, e.g. a ``TIME``
    on a side connection) right after writing it. A paused master parses it at its resume
    and lags the model by the time it was stopped after the step.

    The file is replaced atomically (write, then rename), since libfaketime exits the
    process on a spec it cannot parse, and a torn file could be one.

A client's clock
    :func:`client_env` runs a client process's clocks at a rate for its whole life, and
    CLOCK_MONOTONIC among them: the Redlock in it measures with its default
    ``time.monotonic``, the library's real clock path, not a clock the harness hands it.
    Measured with the wheel's build: libfaketime fakes CLOCK_REALTIME, CLOCK_MONOTONIC,
    CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME and the coarse clocks alike (all from the wall-clock
    base) or, with ``DONT_FAKE_MONOTONIC``, none but the wall clock, so no clock id is left
    unfaked to stamp the history with; the system call itself is not wrapped, and reads
    the machine's real CLOCK_MONOTONIC, the one every other process of a run stamps with.
    A small shim (``clientclock.c``, :data:`CLIENT_SHIM`) makes that reading
    (:func:`history_clock`), and fixes the waits libfaketime leaves alone: CPython's
    ``time.sleep`` and lock waits take absolute deadlines on CLOCK_MONOTONIC, computed
    from the faked reading, which the kernel would time on the real one. An unfaked
    observer process was the other way to stamp; a system call is the same clock at a
    microsecond's cost, with no message in between to delay a stamp. Waits keep their
    nominal length in real seconds, as the kernel's relative timeouts (poll, socket
    timeouts) do: only what the client reads runs at the rate. libfaketime's own
    ``pthread_cond_timedwait`` (CPython's GIL) divides by the rate: left to it.

Limits
    * ``FAKETIME`` must not be set in the master's environment: it overrides the file.
    * A master restarted while its clock is off would restart it from the last spec's
      base; call :meth:`ClockControl.reapply` just before restarting it.
    * Each wall-clock call in the master costs a small file read; fine for a chaos run.
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import os
import pathlib
import threading
import time
import typing
from collections.abc import Callable

from redlock._extras import install_hint

from .shims import build

__all__ = [
    "CLIENT_SHIM",
    "SPEC_FILE",
    "ClockControl",
    "LibfaketimeNotFound",
    "client_env",
    "client_shim",
    "history_clock",
    "libfaketime_path",
]

SPEC_FILE = "faketime.rc"

# Variables that would make libfaketime ignore or misread our file.
_CONFLICTING = ("FAKETIME", "FAKETIME_DONT_RESET", "FAKETIME_FMT")


class LibfaketimeNotFound(FileNotFoundError):
    """The libfaketime shared library is not installed; the message says how to get it."""


def libfaketime_path() -> str:
    """The path of ``libfaketime.so.1`` from the ``libfaketime`` wheel."""
    try:
        spec = importlib.util.find_spec("libfaketime")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = os.path.join(location, "vendor", "libfaketime", "src", "libfaketime.so.1")
        if os.path.isfile(candidate):
            return candidate
    raise LibfaketimeNotFound(f"libfaketime.so.1 not found (the libfaketime wheel ships it): {install_hint('chaos')}")


def _preload_env() -> dict[str, str]:
    """``LD_PRELOAD`` with libfaketime first, and whatever the harness preloads after it."""
    library = libfaketime_path()
    preload = os.environ.get("LD_PRELOAD")
    return {"LD_PRELOAD": f"{library}:{preload}" if preload else library}


def client_env(rate: float) -> dict[str, str]:
    """Environment variables that start a client process with its clocks running ``rate``
    times as fast as the real one, from its start to its end (0.9: 10 % slow).

    Unlike a master's, a client's clock does not change while it runs (a machine whose
    oscillator is off), so the spec goes in ``FAKETIME`` itself: ``+0 xR`` starts from the
    real time and runs at R, with no file to read. CLOCK_MONOTONIC is faked too, so the
    Redlock measures with its own default clock (``time.monotonic``), the library's real
    clock path. Then the client needs the ``clientclock.c`` shim (see
    :data:`CLIENT_SHIM` for why): its waits keep their length in real seconds, and
    :func:`history_clock` reads the machine's real CLOCK_MONOTONIC to stamp its history.
    """
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be finite and > 0, not {rate!r}")
    preload = _preload_env()["LD_PRELOAD"]
    return {"LD_PRELOAD": f"{client_shim()}:{preload}", "FAKETIME": f"+0 x{rate:.6f}", "TZ": "UTC"}


#: The shim a client under :func:`client_env` runs with. libfaketime fakes every clock a
#: process reads through libc (CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW,
#: CLOCK_BOOTTIME, the coarse ones; measured: all of them from the wall-clock base, so the
#: faked CLOCK_MONOTONIC reads about 1.8e9), or none of them (``DONT_FAKE_MONOTONIC``),
#: and no clock id is left for an unfaked reading. It does not wrap the absolute waits
#: CPython makes (``time.sleep`` is ``clock_nanosleep(TIMER_ABSTIME)``, a lock or Event
#: wait is ``sem_clockwait``), which the kernel would time against the real clock, decades
#: behind: a 2 ms sleep would last years. The shim gives each such wait the real deadline
#: that leaves it what it had left on the faked clock, and reads the real CLOCK_MONOTONIC
#: by the system call itself, which libfaketime does not wrap: the one clock every other
#: process of a run stamps with, so the client's history stays on the run's time line.
#: Waits keep their nominal length in real seconds (as the kernel's relative timeouts,
#: ``poll`` and socket timeouts, do anyway): only what the process reads runs at R, and
#: that is what a holder's safety rests on (its validity, its deadline).
CLIENT_SHIM = "clientclock.c"


def client_shim() -> str:
    """The compiled :data:`CLIENT_SHIM` (built on first use; needs a C compiler)."""
    return build(CLIENT_SHIM, "a client clock fault")


def history_clock() -> Callable[[], float]:
    """The clock to stamp this process's history with: the machine's real CLOCK_MONOTONIC.

    That is ``time.monotonic``, unless this process runs under :func:`client_env`, whose
    libfaketime fakes it: then the shim's own reading by system call."""
    try:
        reading = ctypes.CDLL(None).chaos_real_monotonic
    except AttributeError:
        return time.monotonic
    reading.restype = ctypes.c_double
    reading.argtypes = []
    return typing.cast(Callable[[], float], reading)


def _format_absolute(seconds: float) -> str:
    """``YYYY-mm-dd HH:MM:SS.ffffff`` in UTC: libfaketime's default ``@`` format, read with
    ``TZ=UTC`` (set by :meth:`ClockControl.env`)."""
    whole = math.floor(seconds)
    micros = round((seconds - whole) * 1_000_000)
    if micros == 1_000_000:
        whole, micros = whole + 1, 0
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole)) + f".{micros:06d}"


class ClockControl:
    """The wall clock of the master whose data dir is ``master_dir``.

    ``env()`` gives what to start the master with; then ``jump()``, ``rate()`` and
    ``reset()`` move its clock while it runs. The controller keeps a model of the master's
    clock (``offset``, ``factor``) so that each change continues from where the clock is.

    ``clock`` is the real wall clock the model reads, ``time.time`` (the same
    CLOCK_REALTIME libfaketime reads); tests of the spec text pass their own. ``poke``
    makes the running master read its clock at once (module docstring: an absolute step);
    errors are its own to swallow, since the master may be down.
    """

    def __init__(
        self,
        master_dir: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        poke: Callable[[], None] | None = None,
    ) -> None:
        self.dir = pathlib.Path(master_dir)
        self.path = self.dir / SPEC_FILE
        self._clock = clock
        self.poke = poke
        # A nemesis thread and a scenario's teardown may both move the clock.
        self._lock = threading.RLock()
        now = clock()
        # The master's fake time is _anchor_fake + (real - _anchor_real) * _factor.
        self._anchor_real = now
        self._anchor_fake = now
        self._factor = 1.0
        self._spec = ""
        # Written now, before the master starts: without our file libfaketime would fall
        # back to ~/.faketimerc or /etc/faketimerc, whatever they say.
        self._write()

    def __repr__(self) -> str:
        return f"<ClockControl {self.path} offset={self.offset:+.3f}s x{self._factor:g}>"

    # -- what the master starts with --

    def env(self) -> dict[str, str]:
        """Environment variables to start the master with (e.g. ``LocalMaster.env``).

        Raises RuntimeError if this process's environment sets a variable that would make
        libfaketime ignore the file, since the master inherits it.
        """
        conflicting = [name for name in _CONFLICTING if name in os.environ]
        if conflicting:
            raise RuntimeError(
                f"{', '.join(conflicting)} set in the environment would override the clock "
                f"file {self.path}; unset it for the harness"
            )
        return {
            **_preload_env(),
            "FAKETIME_TIMESTAMP_FILE": str(self.path.resolve()),
            # Re-read the file on every call: the point is to change it while running.
            "FAKETIME_NO_CACHE": "1",
            # A new rate continues from the clock's last reading (module docstring).
            "FAKETIME_XRESET": "1",
            # Event loop and timers on real time; only the wall clock (expiry) moves.
            "DONT_FAKE_MONOTONIC": "1",
            # The "@" specs are parsed with mktime(), which reads local time.
            "TZ": "UTC",
        }

    # -- the model --

    @property
    def factor(self) -> float:
        """How fast the master's clock runs against the real one."""
        return self._factor

    @property
    def offset(self) -> float:
        """How far the master's clock is ahead of the real one now, in seconds."""
        with self._lock:
            now = self._clock()
            return self._fake(now) - now

    @property
    def spec(self) -> str:
        """The text last written for libfaketime."""
        return self._spec

    def _fake(self, real: float) -> float:
        return self._anchor_fake + (real - self._anchor_real) * self._factor

    # -- changes --

    def jump(self, seconds: float) -> None:
        """Step the master's clock by ``seconds`` (negative: backward), keeping its rate."""
        if not math.isfinite(seconds):
            raise ValueError(f"seconds must be finite, not {seconds!r}")
        with self._lock:
            now = self._clock()
            self._anchor_fake = self._fake(now) + seconds
            self._anchor_real = now
            self._write(step=True)

    def rate(self, factor: float) -> None:
        """Run the master's clock ``factor`` times as fast as the real one, from now on
        (1.05: 5 % fast), continuing from where it is."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"factor must be finite and > 0, not {factor!r}")
        with self._lock:
            now = self._clock()
            self._anchor_fake = self._fake(now)
            self._anchor_real = now
            self._factor = float(factor)
            self._write()

    def reset(self) -> None:
        """Back to the real time at the real rate: a step of ``-offset``. A fault's end
        should rather undo just what it did (``rate(1)``, ``jump(-seconds)``), which keeps
        the clock continuous where the fault was."""
        with self._lock:
            if self._factor != 1.0:
                # One spec cannot both step and change the rate (module docstring): the
                # rate first, read by the master, then the step.
                self.rate(1.0)
                self._poke()
            self.jump(-self.offset)

    def reapply(self) -> None:
        """Write the current state afresh: call it just before (re)starting the master, so
        that a new process picks the clock up where the model has it."""
        with self._lock:
            self._write(force=True)

    def _poke(self) -> None:
        if self.poke is not None:
            self.poke()

    def _write(self, *, force: bool = False, step: bool = False) -> None:
        now = self._clock()
        fake = self._fake(now)
        # Module docstring: a rate (and what a new process starts from) carries "xR" and
        # continues the clock; a step carries none, relative at real speed (exact), else
        # absolute and poked.
        absolute = step and self._factor != 1.0
        if not step:
            spec = f"{fake - now:+.6f} x{self._factor:.6f}"
        elif absolute:
            spec = f"@{_format_absolute(fake)}"
        else:
            spec = f"{fake - now:+.6f}"
        if spec == self._spec and not force:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_name(f".{SPEC_FILE}.{os.getpid()}.tmp")
        staging.write_text(spec + "\n", encoding="ascii")
        os.replace(staging, self.path)
        self._spec = spec
        # The model now counts from this moment (the master will, once it parses).
        self._anchor_real, self._anchor_fake = now, fake
        if absolute:
            self._poke()
