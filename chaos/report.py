"""The report of a chaos run: one row per scenario, as text for the terminal and Markdown.

Columns: expected and observed verdict, whether the scenario passed, acquisitions
(successful / attempted), violations (count and kinds), availability (share of acquires
that succeeded), acquire latency (p50 / p99 over every acquire that returned), the smallest
safety margin the masters' ground truth gave (:mod:`chaos.margins`: negative is a near miss)
and the wall time of the scenario. :func:`details` lists, under the table, what failed, the
margins and coverage, and the metrics each scenario measured.

The result column is the run's :class:`~chaos.judgement.Judgement` (``ok`` for PASS), the
word every picture's title starts with too."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

from .runner import ScenarioResult

__all__ = ["details", "markdown_table", "rows", "text_table", "write_summary"]

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
    word = result.judgement.word
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
