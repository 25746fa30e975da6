"""Trials by seed, counterexamples found and shrunk, sweeps, and the self-test.

Where it sits: above :mod:`chaos.sim.trial` (one judged trial), :mod:`chaos.sim.families`
(what the trials are drawn from) and :mod:`chaos.sim.points` (a point's cheapest trial), and
below the command line (:mod:`chaos.sim.cli`).

* :func:`explore`: ``trials`` independent trials of a fault family, trial ``i`` seeded by
  ``(seed, i)`` whatever process runs it, so the counts are the same for any ``workers``.
  The first violating trial's schedule is shrunk (:func:`shrink`) into the counterexample.
* :func:`search`: hypothesis draws schedules of a family (a :func:`chaos.schedule.generate`
  seed and which of its ops to keep) until one violates, then shrinks it: fewer ops first.
* :func:`sweep`: violation rate with Wilson intervals per value of one magnitude.
* :func:`selftest`: every broken client of :mod:`chaos.sim.variants` must be found.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

import redlock

from ..schedule import FaultOp, FaultSet, Schedule
from ..sweep import clopper_pearson_interval, wilson_interval
from . import compiled
from .families import FAMILIES, PROBING, SURFACES, SWEEPS, Family, edge_point
from .points import point_trial
from .trial import Settings, TrialResult, _Trial, run_trial
from .watch import KINDS, Watch

# FAMILIES, SURFACES, SWEEPS, Family, edge_point: chaos.sim.families's, the vocabulary of the
# command line, which reads them here.
__all__ = [
    "FAMILIES",
    "HUNTS",
    "KINDS",
    "SURFACES",
    "SWEEPS",
    "TRIALS",
    "Family",
    "edge_point",
    "explore",
    "history_digest",
    "hunt",
    "hunt_targeted",
    "hunted",
    "rates",
    "search",
    "selftest",
    "shrink",
    "sweep",
    "sweep2d",
    "trials_of",
]


def trial_seed(seed: int, index: int) -> int:
    """Trial ``index`` of a run seeded ``seed``: independent of who runs it."""
    return random.Random(f"trial:{seed}:{index}").getrandbits(48)


@dataclass
class Counts:
    trials: int = 0
    violations: int = 0
    acquisitions: int = 0
    events: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    #: (trial index, its seed) of the first violating trial.
    first: tuple[int, int] | None = None
    #: The violating trials' indexes (for the rate over trials), in no order.
    violating: list[int] = field(default_factory=list)
    #: Per fault kind: [trials whose schedule had it, how many of those violated].
    faults: dict[str, list[int]] = field(default_factory=dict)

    def add(self, index: int, seed: int, result: TrialResult, faults: Sequence[str] = ()) -> None:
        self.trials += 1
        self.acquisitions += result.acquisitions
        self.events += result.events
        for kind in set(faults):
            row = self.faults.setdefault(kind, [0, 0])
            row[0] += 1
            row[1] += result.violated
        if result.violated:
            self.violations += 1
            self.violating.append(index)
            for kind in result.kinds:
                self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if self.first is None or index < self.first[0]:
                self.first = (index, seed)

    def merge(self, other: Counts) -> None:
        self.trials += other.trials
        self.violations += other.violations
        self.acquisitions += other.acquisitions
        self.events += other.events
        for kind, n in other.kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + n
        self.violating += other.violating
        for kind, (trials, violations) in other.faults.items():
            row = self.faults.setdefault(kind, [0, 0])
            row[0] += trials
            row[1] += violations
        if other.first is not None and (self.first is None or other.first[0] < self.first[0]):
            self.first = other.first


def _shard(family: Family, seed: int, indexes: Sequence[int], settings_: Settings) -> Counts:
    counts = Counts()
    for index in indexes:
        each = trial_seed(seed, index)
        schedule = family.schedule(each)
        counts.add(index, each, run_trial(schedule, each, settings_), [op.kind for op in schedule.ops])
    return counts


#: Trials per task on a distributed cluster: small enough to spread over many workers, large
#: enough that a task outweighs its scheduling (a trial is tens of milliseconds).
CLUSTER_SHARD = 50


def _run_shards(
    family: Family, seed: int, trials: int, workers: int, settings_: Settings, *, scheduler: str | None = None
) -> Counts:
    """Every trial, on this process, a pool of ``workers`` processes, or the dask.distributed
    cluster at ``scheduler``. Shards are sets of trial indexes and their counts merge the
    same in any order, so the numbers never depend on who ran what."""
    indexes = list(range(trials))
    if scheduler is not None:
        return _on_cluster(scheduler, family, seed, indexes, settings_)
    if workers <= 1:
        return _shard(family, seed, indexes, settings_)
    total = Counts()
    chunks = [indexes[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for counts in pool.map(_shard, *zip(*[(family, seed, chunk, settings_) for chunk in chunks], strict=True)):
            total.merge(counts)
    return total


def _on_cluster(address: str, family: Family, seed: int, indexes: list[int], settings_: Settings) -> Counts:
    """The shards as tasks of a dask.distributed cluster (the ``sim`` extra)."""
    try:
        from distributed import Client  # noqa: PLC0415  (an extra: only a cluster run needs it)
    except ImportError as error:
        raise RuntimeError("a scheduler address needs dask.distributed: .venv/bin/pip install -e '.[sim]'") from error
    chunks = [indexes[i : i + CLUSTER_SHARD] for i in range(0, len(indexes), CLUSTER_SHARD)]
    total = Counts()
    with Client(address) as client:  # type: ignore[no-untyped-call,unused-ignore]
        n = len(chunks)
        futures = client.map(_shard, [family] * n, [seed] * n, chunks, [settings_] * n, pure=False)
        for counts in client.gather(futures):
            total.merge(counts)
    return total


def shrink(schedule: Schedule, seed: int, settings_: Settings, violates: Callable[[TrialResult], bool]) -> Schedule:
    """The smallest sub-schedule found that still violates: ops dropped one at a time
    (latest first) while the trial still fails, then the run cut after the last op."""
    ops = list(schedule.ops)
    changed = True
    while changed:
        changed = False
        for op in reversed(list(ops)):
            fewer = [o for o in ops if o is not op]
            if violates(run_trial(replace(schedule, ops=tuple(fewer)), seed, settings_)):
                ops, changed = fewer, True
    shortest = replace(schedule, ops=tuple(ops))
    cut = max([op.end for op in ops] + [0.0]) + 3 * schedule.ttl + 0.5
    if cut < schedule.duration:
        shorter = replace(shortest, duration=round(cut, 3))
        if violates(run_trial(shorter, seed, settings_)):
            shortest = shorter
    return shortest


def _violated(result: TrialResult) -> bool:
    return result.violated


#: How many bins of trials the summary's ``over_trials`` has at most.
_TRIAL_BINS = 100


def _over_trials(counts: Counts) -> dict[str, Any]:
    """Violating trials per bin of consecutive trial indexes (``width`` each, the last
    maybe fewer): how the rate settled as trials were added."""
    width = max(1, math.ceil(counts.trials / _TRIAL_BINS))
    bins = [0] * math.ceil(counts.trials / width) if counts.trials else []
    for index in counts.violating:
        bins[index // width] += 1
    return {"width": width, "violations": bins}


def _by_fault(counts: Counts) -> dict[str, Any]:
    """Per fault kind, the violating share of the trials whose schedule had it and of
    those whose schedule did not, each with its Wilson interval."""
    rows: dict[str, Any] = {}
    for kind, (trials, violations) in sorted(counts.faults.items()):
        rows[kind] = {
            "with": _share(violations, trials),
            "without": _share(counts.violations - violations, counts.trials - trials),
        }
    return rows


def _share(violations: int, trials: int) -> dict[str, Any]:
    low, high = wilson_interval(violations, trials)
    return {"trials": trials, "violations": violations, "low": low, "high": high}


def explore(
    name: str,
    trials: int,
    seed: int,
    *,
    workers: int = 1,
    settings_: Settings | None = None,
    duration: float | None = None,
    scheduler: str | None = None,
) -> dict[str, Any]:
    """``trials`` trials of family ``name`` (each ``duration`` simulated seconds, if given):
    the summary ``sim explore`` writes."""
    family = FAMILIES[name] if duration is None else replace(FAMILIES[name], duration=duration)
    settings_ = settings_ or Settings()
    started = time.perf_counter()
    counts = _run_shards(family, seed, trials, workers, settings_, scheduler=scheduler)
    seconds = time.perf_counter() - started
    low, high = wilson_interval(counts.violations, counts.trials)
    summary: dict[str, Any] = {
        "set": name,
        "expected": family.faults.expected,
        "trials": counts.trials,
        "seed": seed,
        "violations": counts.violations,
        "rate": {"value": counts.violations / max(1, counts.trials), "low": low, "high": high},
        "kinds": dict(sorted(counts.kinds.items())),
        "by_fault_kind": _by_fault(counts),
        "over_trials": _over_trials(counts),
        "acquisitions": counts.acquisitions,
        "events": counts.events,
        "seconds": round(seconds, 3),
        "acquisitions_per_second": round(counts.acquisitions / seconds, 1) if seconds else None,
        "workers": workers,
        "scheduler": scheduler,
        # The same histories either way (tests/test_sim.py's digests); the compiled core is
        # faster, with REDLOCK_PURE=0 where a compiled build is installed.
        "core": "compiled" if redlock.compiled else "pure",
        # The simulator's own modules, from their sources or a build (chaos/sim/compiled.py).
        "simulator": compiled.kind(),
        "family": {k: v for k, v in dataclasses.asdict(family).items() if k != "faults"},
        "settings": settings_.to_dict(),
    }
    if counts.first is not None:
        index, each = counts.first
        schedule = shrink(family.schedule(each), each, settings_, _violated)
        result = run_trial(schedule, each, settings_)
        summary["counterexample"] = {
            "trial": index,
            "seed": each,
            "schedule": schedule.to_dict(),
            "violations": result.describe()[:5],
            "kinds": result.kinds,
        }
    return summary


def search(
    family: Family,
    budget: int,
    seed: int,
    *,
    settings_: Settings | None = None,
    violates: Callable[[TrialResult], bool] = _violated,
    extra_ops: Callable[[Schedule, int], Schedule] | None = None,
) -> tuple[Schedule, int, int] | None:
    """Hypothesis looks for a violating schedule of ``family`` within ``budget`` trials and
    shrinks it; returns (the shrunk schedule, its workload seed, trials run), or None."""
    settings_ = settings_ or Settings()
    runs = 0

    def build(drawn: tuple[int, list[bool]]) -> Schedule:
        each, keep = drawn
        schedule = family.schedule(each)
        if extra_ops is not None:
            schedule = extra_ops(schedule, each)
        ops = tuple(op for op, kept in zip(schedule.ops, keep, strict=False) if kept)
        return replace(schedule, ops=ops)

    def condition(drawn: tuple[int, list[bool]]) -> bool:
        nonlocal runs
        runs += 1
        return violates(run_trial(build(drawn), drawn[0], settings_))

    strategy = st.tuples(st.integers(0, 2**31), st.lists(st.booleans(), min_size=40, max_size=40))
    try:
        found = find(
            strategy,
            condition,
            settings=settings(
                max_examples=budget,
                database=None,
                phases=[Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
                deadline=None,
            ),
            random=random.Random(seed),
        )
    except NoSuchExample:
        return None
    return build(found), found[0], runs


def sweep(
    parameter: str,
    values: Sequence[float],
    trials: int,
    seed: int,
    *,
    workers: int = 1,
    scheduler: str | None = None,
) -> dict[str, Any]:
    """Violation rate per value of one magnitude; see :data:`SWEEPS`."""
    make, theory = SWEEPS[parameter]
    points = []
    for value in values:
        family = make(value)
        counts = _run_shards(family, seed, trials, workers, PROBING, scheduler=scheduler)
        points.append({"value": value, **_rate(counts), "theory": theory(value)})
    return {"parameter": parameter, "seed": seed, "simulator": compiled.kind(), "points": points}


def _rate(counts: Counts) -> dict[str, Any]:
    """A sweep point's counts: violating trials, their share and its 95 % interval."""
    low, high = wilson_interval(counts.violations, counts.trials)
    return {
        "trials": counts.trials,
        "violations": counts.violations,
        "rate": counts.violations / max(1, counts.trials),
        "low": low,
        "high": high,
        "acquisitions": counts.acquisitions,
    }


def sweep2d(
    across: tuple[str, Sequence[float]],
    up: tuple[str, Sequence[float]],
    trials: int,
    seed: int,
    *,
    workers: int = 1,
    scheduler: str | None = None,
) -> dict[str, Any]:
    """Violation rate at every (x, y) of a grid, ``across`` naming x and its values and
    ``up`` y and its: the data of a phase diagram."""
    (x, xs), (y, ys) = across, up
    surface = SURFACES[x, y]
    points = []
    for y_value in ys:
        for x_value in xs:
            family, settings_ = surface.make(x_value, y_value)
            counts = _run_shards(family, seed, trials, workers, settings_, scheduler=scheduler)
            theory = "UNSAFE" if surface.unsafe(x_value, y_value) else "SAFE"
            points.append({"x": x_value, "y": y_value, **_rate(counts), "theory": theory})
    return {
        "x": x,
        "y": y,
        "x_label": surface.x_label,
        "y_label": surface.y_label,
        "theory": surface.theory,
        "seed": seed,
        "simulator": compiled.kind(),
        "boundary": [[surface.boundary(v), v] for v in ys],
        "points": points,
    }


def history_digest(name: str, seed: int, index: int = 0) -> str:
    """The recorded history of trial ``index`` of seed ``seed``, hashed (16 hex digits):
    ``name`` a family (``unsafe-clock``) or a sweep point (``clock-rate=1.05``). Equal
    digests mean equal histories, event for event: how a speed-up, another machine, or the
    compiled core shows it changed nothing."""
    if "=" in name:
        family, settings_, _ = edge_point(name)
    else:
        family, settings_ = FAMILIES[name], Settings()
    each = trial_seed(seed, index)
    trial = _Trial(family.schedule(each), each, settings_)
    trial.world.run(family.duration)
    return hashlib.sha256(trial.recorder.history().to_json().encode()).hexdigest()[:16]


#: What ``rates --trial`` chooses between.
TRIALS = ("sweep", "point")


def trials_of(trial: str) -> Callable[[str], tuple[Family, Settings, str]]:
    """A point's family, workload and theory, for the trial of that name."""
    if trial == "sweep":
        return edge_point
    if trial == "point":
        return point_trial
    raise ValueError(f"trial must be one of {', '.join(TRIALS)}, not {trial!r}")


def rates(
    points: Sequence[str],
    trials: int,
    seed: int,
    *,
    seconds: float | None = None,
    chunk: int = 1000,
    save: Callable[[dict[str, Any]], object] | None = None,
    trial: str = "sweep",
) -> dict[str, Any]:
    """Violation rates at a few points of the sweeps, to ``trials`` trials each, with Wilson
    and Clopper-Pearson intervals: the rate tables near the edges. The points take turns a
    ``chunk`` of trials at a time (trials 0 to n-1 of each, the trials ``sweep --trials n``
    plays), so a run cut short by ``seconds`` of wall time still gives every point a count,
    and ``save`` gets the document after every turn. ``trial``: ``sweep``, the sweep's own
    6 s trials, or ``point``, the cheapest trial of the point (:mod:`chaos.sim.points`)."""
    make = trials_of(trial)
    made = {point: make(point) for point in points}
    counts = {point: Counts() for point in points}
    spent = dict.fromkeys(points, 0.0)
    started = time.perf_counter()

    def document() -> dict[str, Any]:
        rows = []
        for point, (_, _, theory) in made.items():
            c = counts[point]
            low, high = clopper_pearson_interval(c.violations, c.trials)
            rows.append(
                {
                    "point": point,
                    "theory": theory,
                    **_rate(c),
                    "exact_low": low,
                    "exact_high": high,
                    "kinds": dict(sorted(c.kinds.items())),
                    "cpu_seconds": round(spent[point], 1),
                }
            )
        return {
            "seed": seed,
            "trial": trial,
            "simulator": compiled.kind(),
            "core": "compiled" if redlock.compiled else "pure",
            "seconds": round(time.perf_counter() - started, 1),
            "points": rows,
        }

    while any(counts[p].trials < trials for p in points):
        if seconds is not None and time.perf_counter() - started >= seconds:
            break
        for point in points:
            done = counts[point].trials
            if done >= trials:
                continue
            family, settings_, _ = made[point]
            cpu = time.process_time()
            counts[point].merge(_shard(family, seed, range(done, min(trials, done + chunk)), settings_))
            spent[point] += time.process_time() - cpu
        if save is not None:
            save(document())
    return document()


# --- interleavings outside the catalogue ---------------------------------------------------------

#: The hunt's workload: extends one holding in two (an extend that crosses a restart needs
#: one under way), otherwise explore's.
_HUNTING = Settings(extend_share=0.5)


#: Where the hunt looks besides the families: SAFE sets in which no violation is allowed.
HUNTS = {
    # The SAFE kinds unfenced, the workload checking its validity just before it writes
    # (the self-test's family, without its error replies).
    "unfenced": replace(FAMILIES["safe"].faults, name="unfenced", fencing=False),
    # Instant restarts of masters that keep every write (appendfsync always), beside the
    # network faults and holder pauses: safe by theory, and where extends cross restarts.
    "restarts-kept": FaultSet(
        "restarts-kept", ("restart", "blackhole", "one-way", "link-delay", "client-pause"), safe=True, fencing=True
    ),
}


def hunted(name: str) -> Family:
    """A family, or a set of :data:`HUNTS`, as a family of explore's shape."""
    if name in HUNTS:
        return replace(FAMILIES["safe"], faults=HUNTS[name])
    return FAMILIES[name]


def hunt(name: str, trials: int, seed: int, *, settings_: Settings = _HUNTING) -> dict[str, Any]:
    """``trials`` random trials of family ``name`` (or ``unfenced``) with every master
    watched (:mod:`chaos.sim.watch`): how often each interleaving happened, in how many
    trials, and how many of those trials violated anything."""
    family = hunted(name)
    started = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {
        kind: {"occurrences": 0, "trials": 0, "violating_trials": 0, "first": None} for kind in KINDS
    }
    violations = 0
    kinds: dict[str, int] = {}
    examples: list[dict[str, Any]] = []
    for index in range(trials):
        each = trial_seed(seed, index)
        watch = Watch()
        result = run_trial(family.schedule(each), each, settings_, watch=watch)
        violations += result.violated
        for kind in result.kinds:
            kinds[kind] = kinds.get(kind, 0) + 1
        if result.violated and len(examples) < 3:
            examples.append({"trial": index, "seed": each, "violations": result.describe()[:3], "seen": watch.seen})
        for kind, count in watch.counts.items():
            row = rows[kind]
            row["occurrences"] += count
            row["trials"] += 1
            row["violating_trials"] += result.violated
            if row["first"] is None:
                row["first"] = {"trial": index, "seed": each, "seen": watch.first[kind]}
    return {
        "set": name,
        "trials": trials,
        "seed": seed,
        "violations": violations,
        "kinds": dict(sorted(kinds.items())),
        "interleavings": rows,
        "violating": examples,
        "seconds": round(time.perf_counter() - started, 1),
    }


def hunt_targeted(
    name: str,
    kind: str,
    budget: int,
    seed: int,
    *,
    settings_: Settings = _HUNTING,
    ignore: Sequence[str] = (),
) -> dict[str, Any]:
    """Hypothesis's targeted search: schedules of family ``name`` (a generator seed and
    which ops to keep) steered towards more of interleaving ``kind`` (``target()`` on its
    count), for ``budget`` trials; any violation fails the property and is shrunk, except
    one of only the ``ignore``d kinds (counted: a kind already understood, not sought)."""
    from hypothesis import given, target  # noqa: PLC0415
    from hypothesis import seed as seeded  # noqa: PLC0415

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    family = hunted(name)
    seen = {"trials": 0, "with": 0, "most": 0, "occurrences": 0, "ignored": 0}
    failing: list[dict[str, Any]] = []

    def build(drawn: tuple[int, list[bool]]) -> Schedule:
        each, keep = drawn
        schedule = family.schedule(each)
        return replace(schedule, ops=tuple(op for op, kept in zip(schedule.ops, keep, strict=False) if kept))

    @seeded(seed)
    @settings(
        max_examples=budget,
        database=None,
        phases=[Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(st.tuples(st.integers(0, 2**31), st.lists(st.booleans(), min_size=40, max_size=40)))
    def probe(drawn: tuple[int, list[bool]]) -> None:
        watch = Watch()
        result = run_trial(build(drawn), drawn[0], settings_, watch=watch)
        count = watch.counts.get(kind, 0)
        seen["trials"] += 1
        seen["with"] += bool(count)
        seen["occurrences"] += count
        seen["most"] = max(seen["most"], count)
        target(float(count), label=kind)
        if result.violated and set(result.kinds) <= set(ignore):
            seen["ignored"] += 1
        elif result.violated:
            failing[:] = [{"seed": drawn[0], "schedule": build(drawn).to_dict(), "violations": result.describe()[:3]}]
            raise AssertionError(result.describe()[:1])

    started = time.perf_counter()
    with contextlib.suppress(AssertionError):  # (the shrunk example is the last failing one recorded)
        probe()
    return {
        "set": name,
        "kind": kind,
        "ignore": list(ignore),
        "budget": budget,
        "seed": seed,
        **seen,
        "violation": failing[0] if failing else None,
        "seconds": round(time.perf_counter() - started, 1),
    }


# --- the self-test ------------------------------------------------------------------------------


def _error_replies(schedule: Schedule, seed: int) -> Schedule:
    """Add the sim-only fault: a minority of masters answers writes with -OOM for a while."""
    rng = random.Random(f"errors:{seed}")
    ops = list(schedule.ops)
    at = 0.3
    while at < schedule.duration - 2.0:
        masters = sorted(rng.sample(range(schedule.nodes), (schedule.nodes - 1) // 2))
        end = min(at + rng.uniform(0.5, 2.0), schedule.duration - 1.5)
        ops.insert(0, FaultOp(round(at, 4), round(end, 4), "error-replies", ",".join(chr(65 + m) for m in masters)))
        at = end + rng.uniform(0.2, 1.0)
    return replace(schedule, ops=tuple(sorted(ops, key=lambda op: op.start)))


def selftest(
    budget: int, seed: int, *, say: Callable[[str], None] = print, names: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Search the SAFE family (plus error replies) with each broken client; one row each."""
    from . import variants  # noqa: PLC0415  (patches the library while it runs)

    # The SAFE kinds, unfenced: the workload checks its validity just before it writes, so
    # a correct client's pause cannot make a stale write, and any overlap is the client's.
    safe = FAMILIES["safe"].faults
    family = replace(FAMILIES["safe"], faults=replace(safe, name="selftest", fencing=False), duration=5.0)
    # Four names for three clients: a lapsed holding often finds its name free again, which
    # is where an extend that re-creates keys shows.
    selftest_settings = Settings(extend_share=0.5, names=4, retry_delay=0.01)
    rows = []
    for variant in variants.SIM_VARIANTS:
        if names and variant.name not in names:
            continue
        started = time.perf_counter()
        with variants.applied(variant):
            found = search(family, budget, seed, settings_=selftest_settings, extra_ops=_error_replies)
        row: dict[str, Any] = {
            "variant": variant.name,
            "mistake": variant.mistake,
            "caught": found is not None,
            "seconds": round(time.perf_counter() - started, 2),
        }
        if found is not None:
            schedule, each, runs = found
            with variants.applied(variant):
                result = run_trial(schedule, each, selftest_settings)
            row.update(trials=runs, seed=each, schedule=schedule.to_dict(), violations=result.describe()[:3])
            ops = ", ".join(f"{op.kind} {op.target} [{op.start:g}-{op.end:g}s]" for op in schedule.ops) or "no fault"
            say(f"{variant.name}: caught in {row['seconds']}s ({runs} trials); shrunk schedule: {ops}")
            say(f"    {row['violations'][0] if row['violations'] else ''}")
        else:
            say(f"{variant.name}: NOT caught within {budget} trials")
        rows.append(row)
    return rows


def first_violation(name: str, budget: int, seed: int) -> tuple[int, float] | None:
    """How many trials (by seed) of family ``name`` until the first violation, and the
    wall seconds it took: the budget to find one unaided."""
    family = FAMILIES[name]
    started = time.perf_counter()
    for index in range(budget):
        each = trial_seed(seed, index)
        if run_trial(family.schedule(each), each).violated:
            return index + 1, time.perf_counter() - started
    return None
