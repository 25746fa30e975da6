"""The timeline picture of a run: who held which lock when, the faults, the violations.

One PNG per scenario, drawn with matplotlib's Agg backend (no display, no pyplot state):

* one band per lock name; each holder interval (:meth:`History.tenures`) is a bar in the
  holder's colour, and holders that overlap are stacked in separate lanes, so an overlap
  shows as two bars one above the other, framed in red;
* resource writes in their writer's lane (the writer's holder interval at that moment, or
  its last one): a tick in the writer's colour for each accepted write, a grey cross for a
  write the fenced store rejected, a red triangle for an increment that was lost, so one
  sees whose increment vanished;
* an overstated validity (:func:`chaos.checkers.check_validity`) as a red stripe from the
  bound to the claimed deadline;
* failed acquires as small dots;
* faults in their own band below, one bar each, and shaded across the whole plot while
  they last (except those that last most of the run, such as partitions: only in their
  band);
* under the timeline, a zoomed panel around each violation (up to three), where an
  overlap of a few milliseconds is as wide as the panel.

The x axis runs to the end of the last holder interval, even one that outlives the
history. Time is in seconds from the first event, as in the reports. The legend lists only
what the picture shows.
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
from .history import AcquireReturned, History, ResourceWrite, Tenure

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
_FAULT_COLOURS["client-clock"] = "#c994c7"
#: The legend's marks, in order (after the clients).
_MARKS = ("revived", "failed", "write", "lost", "rejected", "overlap", "overstated")
_UNSHADED = {"partition", "client-clock"}
#: Zoomed panels at most; violations closer than this (seconds) share one.
_ZOOMS = 3
_ZOOM_MERGE = 0.05


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


class _Picture:
    """What is drawn, where: computed once, drawn on the timeline and on each zoom."""

    def __init__(self, history: History, verdict: Verdict) -> None:
        self.history = history
        self.verdict = verdict
        self.t0 = history.start or 0.0
        self.tenures = sorted(history.tenures(), key=lambda t: (t.start, t.client))
        self.windows = history.fault_windows()
        last = max((t.end for t in self.tenures if math.isfinite(t.end)), default=history.end or self.t0)
        self.end = max(history.end or self.t0, last)
        self.t_end = self.end - self.t0
        returned = history.of_type(AcquireReturned)
        self.names = sorted({t.name for t in self.tenures} | {e.name for e in returned})
        clients = sorted({t.client for t in self.tenures} | {e.client for e in returned})
        self.colour = {c: _CLIENT_COLOURS[i % len(_CLIENT_COLOURS)] for i, c in enumerate(clients)}
        # Rows from the top: each name's lanes, then the faults' lanes.
        self.layout: dict[str, tuple[float, int]] = {}  # name -> (top y, lanes)
        self.lane: dict[int, int] = {}
        y = 0.0
        for name in self.names:
            mine = [t for t in self.tenures if t.name == name]
            lanes, count = _lanes(mine, lambda t: t.start, lambda t: _finite(t.end, math.inf))
            for tenure, lane in zip(mine, lanes, strict=True):
                self.lane[id(tenure)] = lane
            self.layout[name] = (y, count)
            y += count + 0.6
        self.fault_lanes, fault_count = _lanes(self.windows, lambda w: w.start, lambda w: _finite(w.end, math.inf))
        self.fault_top = y
        self.fault_count = fault_count
        self.total = y + (fault_count if self.windows else 0)
        self.lost = {id(w) for report in verdict.lost_updates for w in report.lost_writes}
        self.shown: dict[str, Any] = {}

    def x(self, t: float) -> float:
        return t - self.t0

    def y_of(self, tenure: Tenure) -> float:
        return self.layout[tenure.name][0] + self.lane[id(tenure)]

    def holder_at(self, client: str, name: str, when: float) -> Tenure | None:
        """The tenure of ``client`` on ``name`` at ``when``, else its last one before."""
        mine = [t for t in self.tenures if t.client == client and t.name == name and t.start <= when]
        inside = [t for t in mine if when <= t.end]
        found = inside or mine
        return found[-1] if found else None

    def legend(self, key: str, handle: Any) -> None:
        self.shown.setdefault(key, handle)

    def handles(self) -> list[Any]:
        """The legend: the clients in name order, then the marks in a fixed order."""
        clients = sorted(key for key in self.shown if key in self.colour)
        marks = [key for key in _MARKS if key in self.shown]
        return [self.shown[key] for key in (*clients, *marks)]

    def draw(self, ax: Any, *, span: float | None = None) -> None:
        """Draw everything; ``span`` is the width of a zoomed panel (None: the timeline)."""
        zoomed = span is not None
        width = self.t_end if span is None else span
        self._faults(ax, width)
        self._holders(ax, width, zoomed)
        self._events(ax)
        self._violations(ax, width, zoomed)

    def _faults(self, ax: Any, span: float) -> None:
        for window, lane in zip(self.windows, self.fault_lanes, strict=True):
            start = self.x(window.start)
            end = self.x(_finite(window.end, self.end))
            width = max(end - start, span * 0.002)
            shade = _FAULT_COLOURS.get(window.kind, "#999999")
            # A condition of the whole run (a partition, a client's clock) would only tint
            # the background: it stays in the fault band.
            if window.kind not in _UNSHADED and width < 0.6 * self.t_end:
                ax.axvspan(start, start + width, color=shade, alpha=0.08, linewidth=0)
            top = self.fault_top + lane
            ax.broken_barh([(start, width)], (top + 0.1, 0.8), facecolors=shade, alpha=0.8)
            ax.text(start, top + 0.5, f" {window.kind} {window.target}", va="center", fontsize=7, clip_on=True)

    def _holders(self, ax: Any, span: float, zoomed: bool) -> None:
        for tenure in self.tenures:
            start = self.x(tenure.start)
            end = self.x(_finite(tenure.end, self.end))
            y0 = self.y_of(tenure)
            revived = tenure.via == "extend"
            ax.broken_barh(
                [(start, max(end - start, span * 0.001))],
                (y0 + 0.1, 0.8),
                facecolors=self.colour[tenure.client],
                edgecolors="black" if revived else "none",
                hatch="//" if revived else None,
                linewidth=0.5,
            )
            self.legend(tenure.client, Patch(color=self.colour[tenure.client], label=tenure.client))
            if revived:
                self.legend(
                    "revived", Patch(facecolor="white", edgecolor="black", hatch="//", label="revived by an extend")
                )
            if zoomed or end - start > self.t_end * 0.04:
                label = tenure.client if tenure.fencing is None else f"{tenure.client} f{tenure.fencing}"
                ax.text(
                    start + (end - start) / 2, y0 + 0.5, label, ha="center", va="center", fontsize=7,
                    color="white", clip_on=True,
                )  # fmt: skip

    def _events(self, ax: Any) -> None:
        for event in self.history.of_type(AcquireReturned):
            if not event.ok and event.name in self.layout:
                top, count = self.layout[event.name]
                ax.plot(self.x(event.time), top + count - 0.05, ".", color=self.colour[event.client], markersize=2)
                self.legend(
                    "failed", Line2D([], [], marker=".", color="black", linestyle="none", label="acquire refused")
                )
        for write in self.history.of_type(ResourceWrite):
            if write.name not in self.layout:
                continue
            holder = self.holder_at(write.client, write.name, write.time)
            y = (self.y_of(holder) if holder is not None else self.layout[write.name][0]) + 0.5
            x = self.x(write.time)
            if not write.accepted:
                ax.plot(x, y, "x", color="#555555", markersize=7, markeredgewidth=1.5, zorder=6)
                self.legend(
                    "rejected", Line2D([], [], marker="x", color="#555555", linestyle="none", label="rejected (fenced)")
                )
            elif id(write) in self.lost:
                ax.plot(x, y, "v", color="red", markeredgecolor="black", markersize=8, zorder=6)
                self.legend("lost", Line2D([], [], marker="v", color="red", linestyle="none", label="lost increment"))
            else:
                ax.plot(x, y, "|", color="black", markersize=12, markeredgewidth=2, zorder=6)
                self.legend(
                    "write", Line2D([], [], marker="|", color="black", linestyle="none", label="write (writer's lane)")
                )

    def _violations(self, ax: Any, span: float, zoomed: bool) -> None:
        # On the timeline, many overlaps side by side would bury their labels in each other.
        labelled = zoomed or len(self.verdict.overlaps) <= 3
        for overlap in self.verdict.overlaps:
            top, count = self.layout[overlap.name]
            start = self.x(overlap.start)
            width = max(self.x(_finite(overlap.end, self.end)) - start, span * 0.004)
            ax.add_patch(
                Rectangle((start, top), width, count, fill=False, edgecolor="red", hatch="xx", linewidth=1.5, zorder=5)
            )
            if labelled:
                ax.text(
                    start, top - 0.05, "overlap", color="red", fontsize=8, va="bottom", fontweight="bold", clip_on=True
                )
            self.legend("overlap", Patch(fill=False, edgecolor="red", hatch="xx", label="overlap"))
        for claim in self.verdict.overstated:
            mine = [t for t in self.tenures if t.client == claim.client and t.op == claim.op and t.name == claim.name]
            if not mine:
                continue
            ax.broken_barh(
                [(self.x(claim.bound), claim.excess)], (self.y_of(mine[-1]) + 0.75, 0.15), facecolors="red", zorder=4
            )
            self.legend("overstated", Patch(color="red", label="validity past invoked + ttl - drift"))

    def zooms(self) -> list[tuple[float, float, str]]:
        """Windows around the violations, at most :data:`_ZOOMS`: (start, end, caption)."""
        found: list[tuple[float, float, str]] = []
        for overlap in self.verdict.overlaps:
            end = _finite(overlap.end, self.end)
            found.append((overlap.start, end, f"overlap {1000 * (end - overlap.start):.1f} ms"))
        lost = [w for report in self.verdict.lost_updates for w in report.lost_writes]
        found += [(w.time, w.time, f"lost increment of {w.client}") for w in lost]
        found += [
            (v.bound, v.deadline, f"{v.holder} overstates by {1000 * v.excess:.1f} ms") for v in self.verdict.overstated
        ]
        windows: list[tuple[float, float, str]] = []
        for start, end, caption in found:
            # One panel for violations close together (an overlap and its lost write).
            if windows and start - windows[-1][1] < _ZOOM_MERGE:
                last = windows[-1]
                windows[-1] = (last[0], max(last[1], end), last[2])
            else:
                windows.append((start, end, caption))
        return windows[:_ZOOMS]


def plot_timeline(
    history: History,
    verdict: Verdict,
    path: str | os.PathLike[str],
    *,
    title: str = "",
    panels: Sequence[Callable[[Any, float], None]] = (),
) -> None:
    """Draw ``history`` (judged as ``verdict``) to a PNG file at ``path``.

    Each of ``panels`` draws one more plot below the timeline (and its zooms), sharing its
    time axis: ``panel(axes, t0)``, with ``t0`` the monotonic time of the first event."""
    picture = _Picture(history, verdict)
    zooms = picture.zooms()
    height = 1.6 + 0.32 * max(picture.total, 2)
    main_height = min(height, 14)
    ratios = [main_height, *([2.6] if zooms else []), *(2.0 for _ in panels)]
    figure = Figure(figsize=(11, sum(ratios)), dpi=80)
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(len(ratios), max(1, len(zooms)), height_ratios=ratios)
    ax = figure.add_subplot(grid[0, :])
    for number, panel in enumerate(panels, start=len(ratios) - len(panels)):
        panel(figure.add_subplot(grid[number, :], sharex=ax), history.start or 0.0)
    picture.draw(ax)
    ticks = [picture.layout[n][0] + picture.layout[n][1] / 2 for n in picture.names]
    labels = [f"lock {n}" for n in picture.names]
    if picture.windows:
        ticks.append(picture.fault_top + picture.fault_count / 2)
        labels.append("faults")
    ax.set_yticks(ticks, labels)
    ax.set_ylim(picture.total + 0.2, -0.4)
    pad = max(picture.t_end, 0.001) * 0.02
    ax.set_xlim(-pad, picture.t_end + pad)
    ax.set_xlabel("seconds since the first event (time.monotonic)")
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    for column, (start, end, caption) in enumerate(zooms):
        zoom = figure.add_subplot(grid[1, column])
        # Wide enough to show the holders on either side, narrow enough to show the gap.
        margin = max(0.01, (end - start) * 0.6)
        picture.draw(zoom, span=end - start + 2 * margin)
        zoom.set_xlim(picture.x(start) - margin, picture.x(end) + margin)
        # The locks' bands only: the faults are named on the timeline above.
        zoom.set_ylim(picture.fault_top - 0.4, -0.4)
        zoom.set_yticks([])
        zoom.set_title(f"zoom: {caption}", fontsize=8, color="red")
        zoom.tick_params(labelsize=7)
        zoom.grid(axis="x", alpha=0.3)
    ax.legend(
        handles=list(picture.shown.values()), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False
    )
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
