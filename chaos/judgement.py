"""A run's verdict against its expectation, in one word: what the report's result column and
every picture's title say.

Pure: no matplotlib and no run, so that the report (which must import without matplotlib)
and the pictures (:mod:`chaos.timeline`, :mod:`chaos.sweep`, :mod:`chaos.sim`) share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["FAILURE_COLOUR", "PASS_COLOUR", "Judgement", "judge_run", "judge_sweep"]

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
