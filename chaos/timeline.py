"""The timeline picture of a run: who held which lock when, the faults, the violations.

One PNG per scenario, drawn with matplotlib's Agg backend (no display, no pyplot state):

* one band per lock name; each holder interval (:meth:`History.tenures`) is a bar in the
  holder's colour, and holders that overlap are stacked in separate lanes, so an overlap
  shows as two bars one above the other, framed in red;
* resource writes on the band: a tick in the writer's colour for each accepted write (a
  stale holder's tick stands out in another's bar), a grey cross for a write the fenced
  store rejected, a red triangle for an increment that was lost;
* failed acquires as small dots;
* faults in their own band below, one bar each, and shaded across the whole plot while
  they last (except those that last most of the run, such as partitions: only in their
  band).

Time is in seconds from the first event.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from .checkers import Verdict
from .history import AcquireReturned, History, ResourceWrite

__all__ = ["plot_timeline"]

_T = TypeVar("_T")

_CLIENT_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_FAULT_COLOURS = {
    "kill": "#d62728",
    "crash-restart": "#d62728",
    "power-loss": "#a50f15",
    "pause": "#7f7f7f",
    "client-pause": "#6a3d9a",
    "clock-jump": "#e6550d",
    "clock-rate": "#fd8d3c",
    "partition": "#9ecae1",
    "blackhole": "#393b79",
    "latency": "#8c6d31",
}
_UNSHADED = {"partition"}


def _lanes(items: Sequence[_T], start: Any, end: Any) -> tuple[list[int], int]:
    """Greedy interval lanes: the lane of each item, and how many lanes there are."""
    ends: list[float] = []
    lanes: list[int] = []
    for item in items:
        s, e = start(item), end(item)
        for lane, last in enumerate(ends):
            if last <= s:
                ends[lane] = e
                lanes.append(lane)
                break
        else:
            ends.append(e)
            lanes.append(len(ends) - 1)
    return lanes, max(1, len(ends))


def _finite(value: float, fallback: float) -> float:
    return fallback if math.isinf(value) else value


def plot_timeline(
    history: History,
    verdict: Verdict,
    path: str | os.PathLike[str],
    *,
    title: str = "",
    panels: Sequence[Callable[[Any, float], None]] = (),
) -> None:
    """Draw ``history`` (judged as ``verdict``) to a PNG file at ``path``.

    Each of ``panels`` draws one more plot below the timeline, sharing its time axis:
    ``panel(axes, t0)``, with ``t0`` the monotonic time of the first event."""
    t0 = history.start or 0.0
    t_end = (history.end or t0) - t0
    tenures = sorted(history.tenures(), key=lambda t: (t.start, t.client))
    windows = history.fault_windows()
    names = sorted({t.name for t in tenures} | {e.name for e in history.of_type(AcquireReturned)})
    clients = sorted({t.client for t in tenures} | {e.client for e in history.of_type(AcquireReturned)})
    colour = {c: _CLIENT_COLOURS[i % len(_CLIENT_COLOURS)] for i, c in enumerate(clients)}

    # Rows from the top: each name's lanes, then the faults' lanes.
    layout: dict[str, tuple[float, int]] = {}  # name -> (top y, lanes)
    tenure_lane: dict[int, int] = {}
    y = 0.0
    for name in names:
        mine = [t for t in tenures if t.name == name]
        lanes, count = _lanes(mine, lambda t: t.start, lambda t: _finite(t.end, math.inf))
        for tenure, lane in zip(mine, lanes, strict=True):
            tenure_lane[id(tenure)] = lane
        layout[name] = (y, count)
        y += count + 0.6
    fault_lanes, fault_count = _lanes(windows, lambda w: w.start, lambda w: _finite(w.end, math.inf))
    fault_top = y
    total = y + (fault_count if windows else 0)

    height = 1.6 + 0.32 * max(total, 2)
    main_height = min(height, 14)
    figure = Figure(figsize=(11, main_height + 2.0 * len(panels)), dpi=80)
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(1 + len(panels), 1, height_ratios=[main_height, *(2.0 for _ in panels)])
    ax = figure.add_subplot(grid[0])
    for number, panel in enumerate(panels, start=1):
        panel(figure.add_subplot(grid[number], sharex=ax), t0)

    def row(name: str, lane: int) -> float:
        top, _count = layout[name]
        return top + lane

    # Faults: shading across the plot, and a bar each in the fault band.
    for window, lane in zip(windows, fault_lanes, strict=True):
        start = window.start - t0
        end = _finite(window.end, history.end or window.start) - t0
        width = max(end - start, t_end * 0.002)
        shade = _FAULT_COLOURS.get(window.kind, "#999999")
        # A condition of the whole run (a partition, a set-up latency) would only tint the
        # background: it stays in the fault band.
        if window.kind not in _UNSHADED and width < 0.6 * t_end:
            ax.axvspan(start, start + width, color=shade, alpha=0.08, linewidth=0)
        ax.broken_barh([(start, width)], (fault_top + lane + 0.1, 0.8), facecolors=shade, alpha=0.8)
        ax.text(start, fault_top + lane + 0.5, f" {window.kind} {window.target}", va="center", fontsize=7, clip_on=True)

    # Holders.
    for tenure in tenures:
        start = tenure.start - t0
        end = _finite(tenure.end, history.end or tenure.start) - t0
        y0 = row(tenure.name, tenure_lane[id(tenure)])
        ax.broken_barh(
            [(start, max(end - start, t_end * 0.001))],
            (y0 + 0.1, 0.8),
            facecolors=colour[tenure.client],
            edgecolors="black" if tenure.via == "extend" else "none",
            hatch="//" if tenure.via == "extend" else None,
            linewidth=0.5,
        )
        if end - start > t_end * 0.04:
            label = tenure.client if tenure.fencing is None else f"{tenure.client} f{tenure.fencing}"
            ax.text(start + (end - start) / 2, y0 + 0.5, label, ha="center", va="center", fontsize=7, color="white")

    # Failed acquires, writes and lost writes.
    for event in history.of_type(AcquireReturned):
        if not event.ok and event.name in layout:
            top, count = layout[event.name]
            ax.plot(event.time - t0, top + count - 0.05, ".", color=colour[event.client], markersize=2)
    lost = {id(w) for report in verdict.lost_updates for w in report.lost_writes}
    for write in history.of_type(ResourceWrite):
        if write.name not in layout:
            continue
        top, count = layout[write.name]
        x = write.time - t0
        if not write.accepted:
            ax.plot(x, top + 0.5, "x", color="#555555", markersize=7, markeredgewidth=1.5)
        elif id(write) in lost:
            ax.plot(x, top + 0.5, "v", color="red", markersize=8)
        else:
            ax.plot(x, top + 0.5, "|", color=colour.get(write.client, "black"), markersize=10, markeredgewidth=2)

    # Violations: overlaps framed in red across the name's band.
    for overlap in verdict.overlaps:
        top, count = layout[overlap.name]
        start = overlap.start - t0
        width = max(_finite(overlap.end, history.end or overlap.start) - t0 - start, t_end * 0.004)
        ax.add_patch(
            Rectangle((start, top), width, count, fill=False, edgecolor="red", hatch="xx", linewidth=1.5, zorder=5)
        )
        ax.text(start, top - 0.05, "overlap", color="red", fontsize=8, va="bottom", fontweight="bold")

    ticks = [layout[n][0] + layout[n][1] / 2 for n in names]
    labels = [f"lock {n}" for n in names]
    if windows:
        ticks.append(fault_top + fault_count / 2)
        labels.append("faults")
    ax.set_yticks(ticks, labels)
    ax.set_ylim(total + 0.2, -0.4)
    pad = max(t_end, 0.001) * 0.02
    ax.set_xlim(-pad, t_end + pad)
    ax.set_xlabel("seconds since the first event (time.monotonic)")
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    handles: list[Any] = [Patch(color=colour[c], label=c) for c in clients]
    handles += [
        Line2D([], [], marker="|", color="black", linestyle="none", label="write (writer's colour)"),
        Line2D([], [], marker="v", color="red", linestyle="none", label="lost increment"),
        Line2D([], [], marker="x", color="#555555", linestyle="none", label="rejected (fenced)"),
        Patch(fill=False, edgecolor="red", hatch="xx", label="overlap"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    summary = "\n".join(_short(verdict.violations)) or "no violation"
    figure.text(0.01, 0.005, summary, fontsize=7, color="red" if verdict.violations else "green")
    figure.tight_layout(rect=(0, 0.02 + 0.025 * summary.count("\n"), 1, 1))
    figure.savefig(os.fspath(path), format="png")


def _short(lines: Iterable[str]) -> list[str]:
    """At most two violations, each on one line of the footer."""
    found = [textwrap.shorten(line, 170, placeholder=" ...") for line in lines]
    if len(found) > 2:
        found[1] += f"  (and {len(found) - 2} more)"
    return found[:2]
