"""``python -m chaos selftest``: would the harness notice a broken client?

Runs scenarios of the catalogue with every client replaced by a deliberately broken one
(:mod:`chaos.variants`), and reports, per variant and scenario, whether the run caught it
and by what margin. A variant is *caught* by a scenario when the run does not come out as
it does for the real client:

* a SAFE scenario finds a violation, or one of its checks fails;
* an UNSAFE scenario fails a check, or finds a kind of violation that only the client can
  be blamed for (an overstated validity, a late extend, a fencing error), beyond those
  its fault is expected to cause.

Caught *robustly* means by a margin no busy machine could fake or hide: a check that
failed (each is a plain statement about the run: a key left behind, a late release that
succeeded), or an overlap, an overstated validity or a late extend of at least
:data:`ROBUST_MS`, or at least :data:`ROBUST_COUNT` violations. Every variant must be caught robustly in every run
(``--runs``, each with its own seed); the exit status is 1 when one escapes.

Files, in ``--out``: ``selftest.json`` (every cell, with its evidence) and each run's
histories under ``<variant>/run-<n>/``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .netns import unavailable
from .runner import Params, ScenarioResult, run_scenario
from .scenarios import CATALOGUE, find
from .variants import VARIANTS, Variant
from .variants import find as find_variant

__all__ = ["ROBUST_COUNT", "ROBUST_MS", "Cell", "add_arguments", "judge", "selftest"]

#: An overlap or an overstatement this long (ms) cannot come from scheduling noise.
ROBUST_MS = 20.0
#: Or this many violations in one run.
ROBUST_COUNT = 3

#: Kinds of violation that no fault of the masters or the network can cause a correct
#: client: found in an UNSAFE scenario beyond its expected kinds, they blame the client.
_CLIENT_KINDS = frozenset({"validity-overstated", "late-extend", "fencing"})

#: The default scenarios: the whole catalogue.
DEFAULT_SCENARIOS = tuple(s.name for s in CATALOGUE)


@dataclass
class Cell:
    """How one run of one scenario went with one variant."""

    variant: str
    scenario: str
    number: str
    run: int
    seed: int
    caught: bool
    robust: bool
    evidence: list[str] = field(default_factory=list)
    overlap_ms: float = 0.0
    overstated_ms: float = 0.0
    late_ms: float = 0.0
    violations: int = 0
    lost: int = 0
    failed_checks: list[str] = field(default_factory=list)
    error: str | None = None

    def tag(self) -> str:
        """The table's cell: what caught it, briefly; "-" if nothing did."""
        if self.error is not None:
            return "error"
        if not self.caught:
            return "-"
        parts = []
        if self.failed_checks:
            parts.append("check")
        if self.overlap_ms:
            parts.append(f"ov{self.overlap_ms:.0f}")
        if self.overstated_ms:
            parts.append(f"vo{self.overstated_ms:.0f}")
        if self.late_ms:
            parts.append(f"late{self.late_ms:.0f}")
        if self.lost:
            parts.append(f"lost{self.lost}")
        text = "+".join(parts) or "yes"
        return text if self.robust else f"({text})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def judge(variant: str, run: int, result: ScenarioResult) -> Cell:
    """Whether ``result`` (a run of a scenario with ``variant``) caught the variant."""
    scenario = result.scenario
    cell = Cell(
        variant=variant,
        scenario=scenario.name,
        number=scenario.number,
        run=run,
        seed=result.params.seed,
        caught=False,
        robust=False,
        error=result.error.strip().splitlines()[-1] if result.error else None,
    )
    verdict = result.verdict
    if verdict is None or result.error is not None:
        return cell
    expected_checks = {f"a {kind} violation is found" for kind in scenario.kinds}
    cell.failed_checks = [c.text for c in result.failed_checks if c.text not in expected_checks]
    extra = set(verdict.kinds) - set(scenario.kinds)
    if scenario.expected == "UNSAFE":
        extra &= _CLIENT_KINDS
    blamed = extra or cell.failed_checks
    if not blamed:
        return cell
    cell.caught = True
    if "mutual-exclusion" in extra or scenario.expected == "SAFE":
        cell.overlap_ms = 1000 * max((o.duration for o in verdict.overlaps), default=0.0)
    if "validity-overstated" in extra:
        cell.overstated_ms = 1000 * max((v.excess for v in verdict.overstated), default=0.0)
    if "late-extend" in extra:
        cell.late_ms = 1000 * max(e.revived.start - e.lapsed.end for e in verdict.late_extends)
    if "lost-update" in extra or scenario.expected == "SAFE":
        cell.lost = sum(u.lost for u in verdict.lost_updates if not u.ok)
    cell.violations = len(verdict.violations) if scenario.expected == "SAFE" else len(verdict.overstated)
    cell.evidence = [*(f"check failed: {text}" for text in cell.failed_checks), *verdict.violations[:3]]
    cell.robust = bool(
        cell.failed_checks or max(cell.overlap_ms, cell.overstated_ms) >= ROBUST_MS or cell.violations >= ROBUST_COUNT
    )
    return cell


def add_arguments(parser: argparse.ArgumentParser) -> None:
    names = ", ".join(v.name for v in VARIANTS)
    parser.add_argument("--variants", nargs="+", metavar="VARIANT", help=f"broken clients (default all: {names})")
    parser.add_argument("--scenarios", nargs="+", metavar="NAME", help="scenarios to run (default the catalogue)")
    parser.add_argument("--runs", type=int, default=2, help="runs per variant, each with its own seed (default 2)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the first run (default: random)")
    parser.add_argument("--nodes", type=int, default=5, help="number of masters (default 5)")
    parser.add_argument("--quick", action="store_true", help="short TTLs and durations")
    parser.add_argument("--out", default="chaos-selftest", help="directory for the table and the histories")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _table(variants: Sequence[Variant], scenarios: Sequence[str], cells: Sequence[Cell], runs: int) -> str:
    numbers = [find(name).number for name in scenarios]
    width = max(len(v.name) for v in variants)
    lines = [f"{'variant':<{width}}  caught  " + " ".join(f"{n:>11}" for n in numbers)]
    for variant in variants:
        mine = [c for c in cells if c.variant == variant.name]
        row = []
        for name in scenarios:
            tags = [c.tag() for c in sorted(mine, key=lambda c: c.run) if c.scenario == name]
            row.append(f"{'/'.join(tags) if any(t != '-' for t in tags) else '-':>11}")
        verdict = "yes" if _escaped(variant.name, cells, runs) == [] else "NO"
        lines.append(f"{variant.name:<{width}}  {verdict:<6}  " + " ".join(row))
    return "\n".join(lines)


def _escaped(variant: str, cells: Sequence[Cell], runs: int) -> list[int]:
    """The runs in which no scenario caught ``variant`` robustly."""
    caught = {c.run for c in cells if c.variant == variant and c.robust}
    return [run for run in range(1, runs + 1) if run not in caught]


def selftest(args: argparse.Namespace, *, say: Callable[[str], None]) -> int:
    """Run the self-test as ``args`` says; 0 when every variant was caught robustly in
    every run, 1 when one escaped."""
    variants = [find_variant(name) for name in args.variants] if args.variants else list(VARIANTS)
    if args.scenarios:
        scenarios = [find(name).name for name in args.scenarios]
    else:
        # The catalogue this machine can run: the kernel network's scenarios need namespaces.
        kernel = unavailable() is None
        scenarios = [name for name in DEFAULT_SCENARIOS if kernel or not find(name).kernel]
    first_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    out = pathlib.Path(args.out)
    started = time.monotonic()
    cells: list[Cell] = []
    say(f"selftest: {len(variants)} variants x {len(scenarios)} scenarios x {args.runs} runs, seed {first_seed}")
    for variant in variants:
        for run in range(1, args.runs + 1):
            params = Params(seed=first_seed + run - 1, quick=args.quick, nodes=args.nodes, variant=variant.name)
            for name in scenarios:
                scenario = find(name)
                result = run_scenario(scenario, params, out / variant.name / f"run-{run}", plot=False)
                cell = judge(variant.name, run, result)
                cells.append(cell)
                elapsed = time.monotonic() - started
                say(f"{elapsed:7.1f}s {variant.name} run {run} {scenario.number} {name}: {cell.tag()}")
    table = _table(variants, scenarios, cells, args.runs)
    escaped = {v.name: _escaped(v.name, cells, args.runs) for v in variants}
    document = {
        "seed": first_seed,
        "quick": args.quick,
        "runs": args.runs,
        "robust_ms": ROBUST_MS,
        "robust_count": ROBUST_COUNT,
        "variants": {v.name: {"mistake": v.mistake, "escaped_runs": escaped[v.name]} for v in variants},
        "scenarios": scenarios,
        "cells": [c.to_dict() for c in cells],
        "table": table,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "selftest.json").write_text(json.dumps(document, indent=1), encoding="utf-8")
    print(table)
    print(
        "\ncells: ovN overlap of N ms, voN validity overstated by N ms, lateN extended N ms after the lock lapsed,"
        " lostN lost increments, check a failed check; (..) caught, but not robustly; runs separated by /"
    )
    failed = [name for name, runs in escaped.items() if runs]
    total = time.monotonic() - started
    if failed:
        print(f"\nnot caught robustly in every run: {', '.join(failed)} ({total:.0f}s; seed {first_seed})")
        return 1
    print(f"\nevery variant caught robustly in each of {args.runs} run(s) ({total:.0f}s; seed {first_seed})")
    return 0
