"""The client process: ``python -m chaos.worker``, driven over its stdin and stdout.

Clients run as separate processes so that a scenario can really SIGSTOP one (a GC pause,
a swapped-out process) while the others and the harness go on. CLOCK_MONOTONIC is one
clock for the whole machine, so every process's history shares one time line.

Protocol: JSON, one object per line. The first line configures the client::

    {"cmd": "init", "client": "c1", "urls": [...], "resource_url": "...", "history": "...",
     "redlock": {"node_timeout": 0.05, ...}, "fencing": false, "seed": 1,
     "variant": null, "clock_rate": null}

``variant`` names a deliberately broken client (:mod:`chaos.variants`), patched in before
the Redlock is built. ``clock_rate`` says that the harness started this process under
libfaketime with its clocks, CLOCK_MONOTONIC among them, running at that rate
(:func:`chaos.clock.client_env`): the Redlock measures time with its default
``time.monotonic``, as a client on a machine whose clock is off would, while the history
is stamped with the machine's real CLOCK_MONOTONIC (:func:`chaos.clock.history_clock`),
and the deadlines the lock computes are mapped onto it.

then each command, ``{"id": 7, "cmd": "acquire", "args": {...}, "pause": null}``, is
answered by ``{"id": 7, "ok": true, "result": {...}}`` or ``{"id": 7, "ok": false,
"error": "..."}``, in order. Commands are the :class:`~chaos.workload.ClientSession`
methods (``acquire``, ``read``, ``write``, ``extend``, ``release``, ``cycle``, ``loop``,
``elect``, ``run_election``)
plus ``ping``; ``acquire`` takes ``lock_delay`` (seconds, default 0) among its args, and
``also`` (more names: one lock on all of them), ``limit`` (a semaphore's permit) and
``quorum`` (a forced quorum: the self-test's semaphore on a plain majority).
``"pause": "before" | "after"`` makes the process SIGSTOP itself around the step (for
``write``, between its validity check and the write itself). End of input ends the process.

The process dies with its parent (``PR_SET_PDEATHSIG``), so a harness killed outright
leaves no client behind; replies go to a private copy of stdout, and anything a library
prints goes to stderr, so the protocol stream cannot be corrupted.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

import redlock

from . import variants
from .clock import history_clock
from .history import Recorder, run_queue_wait
from .workload import ClientSession, ElectSpec, LoopSpec, Resource, direct_client

__all__ = ["PARENT_ENV", "main"]

#: The harness's pid, so that the worker can tell whether it outlived it already.
PARENT_ENV = "CHAOS_PARENT_PID"

_PR_SET_PDEATHSIG = 1
_WARMUP_TTL = 5.0

#: How long a write to the resource may take (seconds).
_RESOURCE_TIMEOUT = 15.0


def _die_with_parent() -> None:
    expected = os.environ.get(PARENT_ENV)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0)
    # The parent may have died before the prctl took effect: nobody would kill us later.
    if expected is not None and os.getppid() != int(expected):
        os._exit(1)


def _timeline(rate: float, real: Callable[[], float]) -> Callable[[float], float]:
    """The map from this process's (faked) ``time.monotonic`` readings, which the lock's
    deadlines are in, to the ``real`` clock the history is written in.

    libfaketime's ``+0 xR`` runs the faked clock at rate R from the process's start, so
    one pair of readings taken together fixes the map (the real one taken on both sides of
    the faked one, to halve the error); the map is the harness's bookkeeping, not
    something the lock knows.
    """
    before = real()
    faked = time.monotonic()
    anchor = (before + real()) / 2

    def timeline(reading: float) -> float:
        return anchor + (reading - faked) / rate

    return timeline


class _Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        self.client = str(config["client"])
        options = dict(config.get("redlock", {}))
        if config.get("variant"):
            variants.apply(str(config["variant"]))
        stamps = history_clock()
        timeline: Callable[[float], float] | None = None
        if config.get("clock_rate") is not None:
            timeline = _timeline(float(config["clock_rate"]), stamps)
        self.rl = redlock.Redlock(list(config["urls"]), **options)
        # No fault touches the resource but K2's, whose write TCP delivers seconds late
        # (retransmission backoff after a cut): the wait must outlast it.
        self.resource_client = direct_client(str(config["resource_url"]), timeout=_RESOURCE_TIMEOUT)
        # Each acquire and extend records how long the client waited for a CPU meanwhile,
        # which the validity check allows it (chaos.checkers.VALIDITY_SLACK).
        self.recorder = Recorder(config["history"], clock=stamps, source=self.client, queue=run_queue_wait)
        self.session = ClientSession(
            self.client,
            self.rl,
            Resource(self.resource_client),
            self.recorder,
            fencing=bool(config.get("fencing", False)),
            seed=int(config.get("seed", 0)),
            timeline=timeline,
        )
        self._warm_up()

    def _warm_up(self) -> None:
        # Connect to every master and load the scripts before the scenario starts, so
        # that its first operation is not also the first connect. Not recorded: it is on a
        # name of its own, and it happens before any fault.
        lock = self.rl.lock(f"chaos:warmup:{self.client}", _WARMUP_TTL)
        with contextlib.suppress(redlock.RedlockError):
            if lock.acquire(blocking=False):
                lock.release()

    def close(self) -> None:
        self.rl.close()
        self.resource_client.close()
        self.recorder.close()

    def handle(self, command: dict[str, Any]) -> Any:
        name = command["cmd"]
        args: dict[str, Any] = dict(command.get("args") or {})
        pause = command.get("pause")
        session = self.session
        if pause == "before" and name != "write":
            session.stop_self(f"before {name}")
        result: Any
        if name == "ping":
            result = {"pid": os.getpid()}
        elif name == "acquire":
            result = session.acquire(
                args["name"],
                float(args["ttl"]),
                blocking=bool(args.get("blocking", True)),
                timeout=args.get("timeout"),
                at=args.get("at"),
                lock_delay=float(args.get("lock_delay", 0.0)),
                also=list(args.get("also", ())),
                limit=int(args.get("limit", 0)),
                quorum=int(args.get("quorum", 0)),
                auto_extend=bool(args.get("auto_extend", False)),
                mode=str(args.get("mode", "")),
            )
        elif name == "read":
            result = session.read(args["name"])
        elif name == "write":
            result = session.write(args["name"], pause=pause, check=bool(args.get("check", True)))
        elif name == "extend":
            result = session.extend(args["name"], args.get("ttl"))
        elif name == "renewal":
            result = session.renewal(args["name"])
        elif name == "release":
            result = session.release(args["name"])
        elif name == "hand_over":
            result = session.hand_over(
                args["name"], float(args["ttl"]), release_at=float(args["release_at"]), timeout=float(args["timeout"])
            )
        elif name == "cycle":
            result = session.cycle(
                args["name"], float(args["ttl"]), at=args.get("at"), timeout=float(args.get("timeout", 5.0))
            )
        elif name == "loop":
            result = session.loop(LoopSpec.from_dict(args))
        elif name == "elect":
            result = session.elect(ElectSpec.from_dict(args))
        elif name == "run_election":
            result = session.run_election(ElectSpec.from_dict(args))
        else:
            raise ValueError(f"unknown command {name!r}")
        if pause == "after":
            session.stop_self(f"after {name}")
        return result


def _reply(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def main() -> int:
    # Replies get their own copy of stdout; fd 1 becomes stderr for whatever else prints.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    _die_with_parent()
    worker: _Worker | None = None
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            ident = command.get("id")
            try:
                if command.get("cmd") == "init":
                    worker = _Worker(command)
                    result: Any = {"pid": os.getpid()}
                elif worker is None:
                    raise RuntimeError("the first command must be init")
                else:
                    result = worker.handle(command)
            except Exception:
                _reply(out, {"id": ident, "ok": False, "error": traceback.format_exc()})
            else:
                _reply(out, {"id": ident, "ok": True, "result": result})
    except KeyboardInterrupt:
        return 130
    finally:
        if worker is not None:
            worker.close()
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
