"""``python -m chaos shrink``: a violation's saved window cut to the fewest faults that still reproduce it.

An explore run saves, for each violation, the schedule of the window around it
(``violations/violation-N.json``): a dozen faults or more, most of them beside the point.
:func:`shrink_window` replays subsets of them (:func:`chaos.explore.replay` with ``ops``)
and keeps the smallest one that still gives a violation of the saved kind, by delta
debugging (:func:`ddmin`, Zeller and Hildebrandt 2002). A replay repeats the faults' times,
not the interleaving, so a subset *reproduces* when the violation comes back in ``need`` of
``tries`` replays (:func:`m_of_k`, which stops as soon as the answer is known).

The smallest set is then named by the assumption it breaks (:func:`classify`: a voter
restarted empty, a clock that jumped or ran fast, a holder paused, a power cut, a slow
link) and written as a step list like those of docs/safety.md (:func:`steps`), with the
two holders' voters and the first one's margin on the masters (:mod:`chaos.margins`) when
the violation is an overlap.

:func:`ddmin`, :func:`m_of_k`, :func:`classify` and :func:`steps` are pure: the replays are
the caller's (a fake reproducer in the tests).
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from redlock import quorum_size

from .checkers import Overlap
from .explore import ExploreOutcome, replay
from .history import master_label
from .schedule import FaultOp, Schedule

__all__ = ["Cause", "classify", "ddmin", "m_of_k", "shrink_window", "steps"]

T = TypeVar("T")


# --- the search (pure) ------------------------------------------------------------------------


def ddmin(items: Sequence[T], reproduces: Callable[[tuple[T, ...]], bool]) -> tuple[T, ...]:
    """A 1-minimal subset of ``items`` (kept in their order) for which ``reproduces`` holds:
    removing any one of its items stops it reproducing. ``items`` as a whole is taken to
    reproduce (the caller checked); the empty set is tried first (a violation with no
    fault at all is the client's own). Each subset is asked once (the answers are cached:
    a replay costs seconds)."""
    items = tuple(items)
    asked: dict[tuple[int, ...], bool] = {}

    def test(subset: tuple[int, ...]) -> bool:
        if subset not in asked:
            asked[subset] = reproduces(tuple(items[i] for i in subset))
        return asked[subset]

    current = tuple(range(len(items)))
    if not current or test(()):
        return ()
    parts = 2
    while len(current) >= 2:
        chunks = _split(current, parts)
        found = next((c for c in chunks if test(c)), None)
        if found is not None:
            current, parts = found, 2
            continue
        # With two parts a complement is the other part, already asked.
        complements = [] if parts == 2 else [tuple(i for i in current if i not in c) for c in chunks]
        found = next((c for c in complements if test(c)), None)
        if found is not None:
            current, parts = found, max(parts - 1, 2)
            continue
        if parts >= len(current):
            break
        parts = min(len(current), 2 * parts)
    return tuple(items[i] for i in current)


def _split(indexes: tuple[int, ...], parts: int) -> list[tuple[int, ...]]:
    """``indexes`` in ``parts`` runs of nearly equal length (faults near each other in time
    stay together: a cause and its effect are often neighbours)."""
    size, extra = divmod(len(indexes), parts)
    chunks, at = [], 0
    for n in range(parts):
        step = size + (n < extra)
        chunks.append(indexes[at : at + step])
        at += step
    return [c for c in chunks if c]


def m_of_k(trial: Callable[[int], bool], need: int, tries: int) -> tuple[int, int]:
    """Play ``trial(n)`` for n = 1.. until ``need`` of them have reproduced or the ones left
    could no longer make it; returns (reproduced, played)."""
    if not (isinstance(tries, int) and tries >= 1):
        raise ValueError(f"tries must be an integer >= 1, not {tries!r}")
    if not (isinstance(need, int) and 1 <= need <= tries):
        raise ValueError(f"need must be an integer from 1 to tries ({tries}), not {need!r}")
    reproduced = played = 0
    while reproduced < need and reproduced + (tries - played) >= need:
        played += 1
        reproduced += bool(trial(played))
    return reproduced, played


# --- naming and telling it (pure) -----------------------------------------------------------------


@dataclass(frozen=True)
class Cause:
    """Which assumption of the algorithm a set of faults broke."""

    #: Short names, most telling first: "restart-empty voter", "clock rate", ...
    names: tuple[str, ...]
    #: The first one's assumption, as docs/safety.md names it (K1-K5).
    assumption: str

    @property
    def name(self) -> str:
        return " + ".join(self.names) or "no fault"

    def to_dict(self) -> dict[str, Any]:
        return {"cause": self.name, "causes": list(self.names), "assumption": self.assumption}


_RESTART = ("restart-empty voter", "K4: a master that granted the lock came back without its key")
# In order of precedence: the first present names the counterexample (a network fault
# beside a restart is at most its helper).
_CAUSES: tuple[tuple[str, tuple[str, str]], ...] = (
    ("restart", _RESTART),
    ("half-open", _RESTART),
    ("kill", _RESTART),
    ("power-loss", ("power loss", "K4: a master lost the key it had not yet fsynced when its power went")),
    ("clock-jump", ("clock jump", "K3: a master's clock stepped forward and expired the key early")),
    ("clock-strobe", ("clock strobe", "K3: a master's clock flapped forward and expired the key early")),
    ("clock-rate", ("clock rate", "K3: a master's clock ran faster than the drift allowance")),
    ("clock-slew", ("clock slew", "K3: a master's clock sped up past the drift allowance")),
    ("client-pause", ("pause", "K1: the holder stopped past its validity and wrote unfenced")),
    ("pause-master", ("master pause", "a master stopped while it held the key")),
    ("client-kill", ("holder killed", "a holder died holding the lock")),
)
_NETWORK = ("network", "K2/K5: messages delayed or lost past the validity")


def classify(ops: Sequence[FaultOp], *, empty_kills: bool = True) -> Cause:
    """The assumption ``ops`` (a shrunk set) broke; ``empty_kills``: a ``kill`` restarts its
    master empty (a set without ``appendfsync always``), else a kill alone keeps the data."""
    kinds = {op.kind for op in ops}
    found: list[tuple[str, str]] = []
    for kind, cause in _CAUSES:
        if kind in kinds and (kind != "kill" or empty_kills) and cause not in found:
            found.append(cause)
    if any(op.fault.target == "link" and op.kind != "half-open" for op in ops):
        found.append(_NETWORK)
    if not found:
        return Cause((), "none: the violation needs no fault (the client or the checker is wrong)")
    return Cause(tuple(name for name, _ in found), found[0][1])


def _op_text(op: FaultOp, empty_kills: bool) -> str:
    length = f"{op.end - op.start:.2f} s"
    target = op.target
    # One master or several (``A,B,C``): "master C crashes", "masters A,B,C crash".
    master, s = ("masters", "") if len(op.masters) > 1 else ("master", "s")
    return {
        "restart": f"{master} {target} crash{'es' if s else ''} and restart{s} empty at once",
        "kill": f"{master} {target} {'are' if not s else 'is'} killed, back after {length} "
        f"{'empty' if empty_kills else 'with its data'}",
        "power-loss": f"{master} {target} lose{s} power (keeping what was fsynced), back after {length}",
        "pause-master": f"{master} {target} {'are' if not s else 'is'} stopped for {length}",
        "clock-jump": f"the clock of {master} {target} steps forward {op.value:.2f} s",
        "clock-rate": f"the clock of {master} {target} runs x{op.value:.3f} for {length}",
        "clock-strobe": f"the clock of {master} {target} flips {op.value:+.3f} s on and off for {length}",
        "clock-slew": f"the clock of {master} {target} speeds up to x{op.value:.3f} over {length}",
        "link-delay": f"link {target} delays each message {op.value:.2f} s for {length}",
        "blackhole": f"link {target} passes nothing for {length}",
        "one-way": f"link {target} holds replies back {op.value:.2f} s for {length}",
        "client-pause": f"client {target} is stopped for {length}",
        "client-kill": f"client {target} is killed; a new one takes its place after {length}",
        "half-open": f"link {target} drops everything for {length} while its master restarts empty behind it",
        "loss": f"link {target} drops {op.value:.0f} % of its packets for {length}",
    }.get(op.kind, f"{op.kind} on {target} for {length}")


def _voters(voters: Sequence[str] | None, nodes: int) -> str:
    if not voters:
        return "on masters not recorded"
    bare = " (a bare majority)" if len(voters) == quorum_size(nodes) else ""
    return f"on {', '.join(voters)}{bare}"


def steps(
    ops: Sequence[FaultOp],
    violation: str,
    *,
    nodes: int,
    overlap: Overlap | None = None,
    origin: float = 0.0,
    margin: float | None = None,
    empty_kills: bool = True,
) -> list[str]:
    """The counterexample as numbered steps in time order (seconds from the window's start,
    ``origin`` on the history's clock): the faults of ``ops``, and for an ``overlap`` its two
    holders' grants and where they overlapped; ``violation`` (the checker's line) closes it."""
    timed: list[tuple[float, str]] = [(op.start, _op_text(op, empty_kills)) for op in ops]
    if overlap is not None:
        first, second = overlap.first, overlap.second
        valid = "" if first.deadline is None else f", valid until t={first.deadline - origin:.2f}"
        timed.append(
            (first.start - origin, f"{first.client} acquires {first.name!r} {_voters(first.voters, nodes)}{valid}")
        )
        timed.append((
            second.start - origin,
            f"{second.client} acquires {second.name!r} {_voters(second.voters, nodes)} "
            f"while {first.client} still holds it",
        ))  # fmt: skip
        if margin is not None and math.isfinite(margin):
            timed.append((
                first.end - origin,
                f"{first.client} lets the lock go (its release or deadline); its key had kept others out "
                f"until {margin:+.2f} s from here (its margin on the masters)",
            ))  # fmt: skip
    timed.sort(key=lambda s: s[0])
    lines = [f"{n}. t={at:.2f}: {text}" for n, (at, text) in enumerate(timed, start=1)]
    lines.append(f"{len(lines) + 1}. {violation}")
    return lines


# --- the replays ----------------------------------------------------------------------------------


def shrink_window(
    path: str | pathlib.Path,
    out_dir: str | pathlib.Path,
    *,
    tries: int = 3,
    need: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Shrink the window saved in ``path`` (module docstring); writes ``shrink.json`` (the
    summary returned) in ``out_dir``, with each replay under ``subset-N/try-M``."""
    m_of_k(lambda n: True, need, tries)  # the arguments' checks, before any replay
    path = pathlib.Path(path)
    out = pathlib.Path(out_dir)
    document = json.loads(path.read_text(encoding="utf-8"))
    schedule = Schedule.from_dict(document["schedule"])
    kind = str(document["violation"]["kind"])
    empty_kills = schedule.faults.persistence != "aof-always"
    say = progress or (lambda message: None)
    trials: list[dict[str, Any]] = []
    # The last replay of each subset that reproduced: the shrunk set's is told in steps.
    witness: dict[tuple[FaultOp, ...], ExploreOutcome] = {}

    def reproduces(subset: tuple[FaultOp, ...]) -> bool:
        number = len(trials) + 1

        def trial(attempt: int) -> bool:
            outcome, again, _ = replay(path, out / f"subset-{number}" / f"try-{attempt}", plot=False, ops=subset)
            if again:
                witness[subset] = outcome
            return again

        reproduced, played = m_of_k(trial, need, tries)
        trials.append({
            "subset": number,
            "faults": len(subset),
            "ops": [op.to_dict() for op in subset],
            "reproduced": reproduced,
            "played": played,
        })  # fmt: skip
        say(f"subset {number}: {len(subset)} faults, {kind} in {reproduced} of {played} replays")
        return reproduced >= need

    summary: dict[str, Any] = {
        "window": str(path),
        "violation": document["violation"],
        "tries": tries,
        "need": need,
        "faults_before": len(schedule.ops),
    }
    if not reproduces(schedule.ops):
        summary.update(reproduced=False, trials=trials, replays=sum(t["played"] for t in trials))
        _write(out, summary)
        return summary
    smallest = ddmin(schedule.ops, reproduces)
    outcome = witness[smallest]
    cause = classify(smallest, empty_kills=empty_kills)
    overlap, margin, hit = _overlap(outcome, smallest)
    t0 = float(outcome.result.metrics.get("schedule_t0", 0.0))
    text = next((v.text for v in outcome.violations if v.kind == kind), kind)
    summary.update(
        reproduced=True,
        faults_after=len(smallest),
        ops=[op.to_dict() for op in smallest],
        **cause.to_dict(),
        voters_hit=hit,
        margin=margin,
        steps=steps(
            smallest, text, nodes=schedule.nodes, overlap=overlap, origin=t0, margin=margin, empty_kills=empty_kills
        ),
        trials=trials,
        replays=sum(t["played"] for t in trials),
    )
    _write(out, summary)
    return summary


def _overlap(outcome: ExploreOutcome, ops: Sequence[FaultOp]) -> tuple[Overlap | None, float | None, list[str]]:
    """The replay's first overlap, its first holder's margin and which of that holder's
    voters the master faults of ``ops`` hit."""
    verdict = outcome.result.verdict
    overlap = verdict.overlaps[0] if verdict is not None and verdict.overlaps else None
    if overlap is None:
        return None, None, []
    margins = outcome.result.margins
    margin = None
    if margins is not None:
        margin = next(
            (m.margin for m in margins.margins if (m.client, m.op) == (overlap.first.client, overlap.first.op)), None
        )
    struck = {master_label(i) for op in ops for i in op.masters}
    hit = sorted(v for v in overlap.first.voters or () if v in struck)
    return overlap, margin, hit


def _write(out: pathlib.Path, summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "shrink.json").write_text(json.dumps(summary, indent=1, allow_nan=False), encoding="utf-8")
