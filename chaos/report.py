"""The report of a chaos run: one row per scenario, as text for the terminal and Markdown.

Columns: expected and observed verdict, whether the scenario passed, acquisitions
(successful / attempted), violations (count and kinds), availability (share of acquires
that succeeded), acquire latency (p50 / p99 over every acquire that returned), the smallest
safety margin the masters' ground truth gave (:mod:`chaos.margins`: negative is a near miss)
and the wall time of the scenario. :func:`details` lists, under the table, what failed, the
margins and coverage, and the metrics each scenario measured.

:class:`Judgement` is a run's verdict against its expectation, in one word: what the
table's result column and every picture's title say (:func:`judge_run`)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    # Only named here: the pictures use the judgement without starting the runner's imports.
    from .runner import ScenarioResult

__all__ = [
    "Judgement",
    "details",
    "judge_result",
    "judge_run",
    "judge_sweep",
    "markdown_table",
    "rows",
    "text_table",
    "write_summary",
]

#: The colours a verdict is drawn in: a failure's red, a pass's green (dark enough to read
#: as text on white).
FAILURE_COLOUR = "#d62728"
PASS_COLOUR = "#1a7f37"


@dataclass(frozen=True)
class Judgement:
    """A run's verdict against its expectation. ``word``: PASS (as expected), FAIL (a
    violation where none is allowed, or a scenario's own check failed), MISMATCH (an UNSAFE
    expectation and no violation found: the run did not show what it exists to show) or
    ERROR (the run itself broke)."""

    word: Literal["PASS", "FAIL", "MISMATCH", "ERROR"]
    expected: str
    observed: str
    #: What the word rests on, when "expected X, found Y" would not say it (a sweep).
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.word == "PASS"

    @property
    def colour(self) -> str:
        return PASS_COLOUR if self.passed else FAILURE_COLOUR

    @property
    def headline(self) -> str:
        """The word and why, as a title starts: ``MISMATCH (expected UNSAFE, no violation found)``."""
        if self.detail:
            return f"{self.word} ({self.detail})"
        found = {"SAFE": "no violation found", "UNSAFE": "violations found"}.get(self.observed, self.observed)
        return f"{self.word} (expected {self.expected}, {found})"


def judge_run(expected: str, observed: str, *, error: str | None = None, checks_passed: bool = True) -> Judgement:
    """The judgement of a run that was ``expected`` SAFE or UNSAFE and ``observed`` so."""
    if expected not in ("SAFE", "UNSAFE"):
        raise ValueError(f"expected must be SAFE or UNSAFE, not {expected!r}")
    if error is not None or observed == "ERROR":
        return Judgement("ERROR", expected, "ERROR")
    if expected == "UNSAFE" and observed == "SAFE":
        return Judgement("MISMATCH", expected, observed)
    return Judgement("PASS" if observed == expected and checks_passed else "FAIL", expected, observed)


def judge_sweep(points: Sequence[dict[str, Any]]) -> Judgement:
    """A sweep's judgement, from its points' ``violations`` and ``theory`` (SAFE or
    UNSAFE at that value): FAIL when a value theory calls SAFE gave a violation, MISMATCH
    when no value it calls UNSAFE gave one (the sweep never showed the other side), else
    PASS."""
    safe = [p for p in points if p["theory"] == "SAFE"]
    unsafe = [p for p in points if p["theory"] == "UNSAFE"]
    broken = sum(1 for p in safe if p["violations"])
    shown = sum(1 for p in unsafe if p["violations"])
    detail = f"violations at {broken} of {len(safe)} SAFE points, {shown} of {len(unsafe)} UNSAFE ones"
    if broken:
        return Judgement("FAIL", "SAFE", "UNSAFE", detail)
    if unsafe and not shown:
        return Judgement("MISMATCH", "UNSAFE", "SAFE", detail)
    return Judgement("PASS", "SAFE", "SAFE", detail)


def judge_result(result: ScenarioResult) -> Judgement:
    return judge_run(
        result.expected, result.observed, error=result.error, checks_passed=all(c.passed for c in result.checks)
    )


HEADERS = (
    "#",
    "scenario",
    "expected",
    "observed",
    "result",
    "acquired",
    "violations",
    "avail.",
    "p50/p99 ms",
    "min margin ms",
    "time",
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _row(result: ScenarioResult) -> tuple[str, ...]:
    verdict = result.verdict
    if verdict is None:
        acquired = violations = availability = latency = "-"
    else:
        live = verdict.liveness
        acquired = f"{live.succeeded}/{live.attempts}"
        count = len(verdict.violations)
        violations = f"{count} ({', '.join(verdict.kinds)})" if count else "0"
        share = live.success_share
        availability = "-" if share is None else f"{share:.0%}"
        latency = f"{_ms(live.latency_p50)}/{_ms(live.latency_p99)}"
    word = judge_result(result).word
    status = "ok" if word == "PASS" else word
    return (
        result.scenario.number,
        result.scenario.name,
        result.expected,
        result.observed,
        status,
        acquired,
        violations,
        availability,
        latency,
        _margin(result),
        f"{result.elapsed:.1f}s",
    )


def _margin(result: ScenarioResult) -> str:
    """The smallest safety margin of the run (chaos.margins), signed: negative is a near miss."""
    smallest = None if result.margins is None else result.margins.smallest
    return "-" if smallest is None else f"{smallest.margin * 1000:+.0f}"


def rows(results: Sequence[ScenarioResult]) -> list[tuple[str, ...]]:
    return [_row(r) for r in results]


def text_table(results: Sequence[ScenarioResult]) -> str:
    table = [HEADERS, *rows(results)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(results: Sequence[ScenarioResult]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(line) + " |" for line in rows(results)]
    return "\n".join(lines)


def details(results: Sequence[ScenarioResult]) -> str:
    """Per scenario: failed checks, the first violations, metrics and files."""
    out: list[str] = []
    for result in results:
        head = (
            f"{result.scenario.number} {result.scenario.name}: expected {result.expected}, observed {result.observed}"
        )
        out.append(head)
        if result.error:
            out.append("  error: " + result.error.strip().splitlines()[-1])
        for check in result.checks:
            mark = "ok  " if check.passed else "FAIL"
            out.append(f"  [{mark}] {check.text}{f' ({check.detail})' if check.detail else ''}")
        if result.verdict is not None:
            for line in result.verdict.violations[:3]:
                out.append(f"  violation: {line}")
            if len(result.verdict.violations) > 3:
                out.append(f"  ... {len(result.verdict.violations) - 3} more violations")
        if result.margins is not None:
            out.append(f"  margins: {result.margins.describe()}")
        if result.coverage is not None:
            reached = ", ".join(f"{k} {v}" for k, v in result.coverage.to_dict().items() if v and k != "edges")
            out.append(f"  coverage: {result.coverage.edges} edges reached ({reached or 'none'})")
        for key, value in result.metrics.items():
            out.append(f"  {key}: {_metric(value)}")
        if result.plot_path is not None:
            out.append(f"  timeline: {result.plot_path}")
    return "\n".join(out)


def _metric(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def write_summary(results: Sequence[ScenarioResult], out_dir: str | pathlib.Path, *, command: str) -> None:
    """``report.md`` and ``summary.json`` in ``out_dir``."""
    out = pathlib.Path(out_dir)
    markdown = [
        "# Chaos run",
        "",
        f"`{command}`",
        "",
        markdown_table(results),
        "",
        "```",
        details(results),
        "```",
        "",
    ]
    (out / "report.md").write_text("\n".join(markdown), encoding="utf-8")
    summary = {
        "command": command,
        "passed": all(r.passed for r in results),
        "scenarios": [{**r.to_dict(), "verdict": None if r.verdict is None else r.verdict.to_dict()} for r in results],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=False), encoding="utf-8")
