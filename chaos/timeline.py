"""The timeline picture of a run: who held which lock when, the faults, the violations.

One PNG per scenario, drawn with matplotlib's Agg backend (no display, no pyplot state):

* one band per lock name; each holder interval (:meth:`History.tenures`) is a bar in the
  holder's colour, labelled with the client (and its fencing token) where the label fits
  inside the bar, in black or white, whichever reads better on that colour; holders that
  overlap are stacked in separate lanes, so an overlap shows as two bars one above the
  other, framed in red and labelled "overlap" in the space left above each band;
* resource writes in their writer's lane (the writer's holder interval at that moment, or
  its last one), in the lower half of the bar so they never cover its label: a tick for
  each accepted write, a grey cross for a write the fenced store rejected, a red triangle
  for an increment that was lost, so one sees whose increment vanished;
* an overstated validity (:func:`chaos.checkers.check_validity`) as a red stripe from the
  bound to the claimed deadline;
* refused acquires as dots in the client's colour, in a strip under their lock's lanes;
* faults in their own band below, one bar each with a black edge, in colours no client
  uses; a bar's label is the fault's short name and target (the legend spells the short
  names out), and the bars are laid out in lanes wide enough for their labels, so labels
  never print over each other. A fault is also shaded across the whole plot while it
  lasts (the legend says so), except one that lasts most of the run, such as a
  partition: that would only tint the background;
* under the timeline, a zoomed panel around each violation (up to three), where an
  overlap of a few milliseconds is as wide as the panel; its rows are named by lock, its
  bars by client, and it shows no time outside the run;
* when a master's clock was faulted (jump, rate, strobe, slew), a panel of each such
  master's clock offset from true time, in milliseconds, as the faults' magnitudes make it
  (a rate's lead stays after it ends, as the nemesis leaves it; a strobe is a band).

The title starts with the verdict against the expectation (:class:`chaos.judgement.Judgement`,
in its colour: PASS in green; FAIL, MISMATCH and ERROR in red). The footer lists the
violations (each once, with how often it recurred; at most two lines and how many more),
or says in large letters that none was found, in the verdict's colour: red where
violations were expected. The figure grows with the run: wider for a longer span (up to
:data:`_MAX_WIDTH_INCHES`), taller for more lanes, so that a lane keeps its height at a
minute and more. Times are seconds from
``origin`` (the first event unless the caller says otherwise), in the axis, the footer and
the zooms alike. The legend, outside the plot, lists only what the picture shows.

Labels that could still collide (holders' bars too short, faults' lanes estimated from an
average character width) are checked once the figure is laid out: a label that does not
fit its bar or would touch a label already placed is left out.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

from .checkers import Verdict
from .history import AcquireReturned, FaultWindow, History, ResourceWrite, Tenure
from .judgement import FAILURE_COLOUR, Judgement

__all__ = [
    "CLIENT_COLOURS",
    "FAULT_COLOURS",
    "clock_offsets",
    "fault_label",
    "ink",
    "plot_timeline",
    "timeline_figure",
    "verdict_title",
]

_T = TypeVar("_T")

#: The clients' colours (matplotlib's tab10 without its red and grey, which faults and
#: violations use), brown and olive last: they are the nearest to the faults' greys and yellows.
CLIENT_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#e377c2", "#17becf", "#8c564b", "#bcbd22")
#: Each fault kind's colour: reds for a master gone, greys and black for a process
#: stopped, yellows for clocks, pale blue and navy for the network; none a client's.
FAULT_COLOURS = {
    "kill": "#d62728",
    "crash-restart": "#fb6a4a",
    "power-loss": "#67000d",
    "error-reply": "#f4a582",
    "pause": "#bdbdbd",
    "client-pause": "#737373",
    "client-kill": "#000000",
    "clock-jump": "#ffd92f",
    "clock-rate": "#fff2ae",
    "clock-strobe": "#e6ab02",
    "clock-slew": "#ffffb3",
    "client-clock": "#e5d8bd",
    "partition": "#c6dbef",
    "blackhole": "#08306b",
    "half-open": "#4a1486",
    "latency": "#d9f0d3",
}
_FAULT_FALLBACK = "#f0f0f0"
#: Short names on the fault bars; the legend spells them out.
_FAULT_SHORT = {
    "crash-restart": "crash",
    "power-loss": "power",
    "error-reply": "error",
    "client-pause": "pause",
    "client-kill": "kill",
    "clock-jump": "jump",
    "clock-rate": "rate",
    "clock-strobe": "strobe",
    "clock-slew": "slew",
    "client-clock": "clock",
    "partition": "cut",
    "blackhole": "bh",
    "half-open": "half",
    "latency": "lat",
}
#: The legend's marks, in order (after the clients, before the faults).
_MARKS = ("revived", "failed", "write", "lost", "rejected", "overlap", "overstated", "shaded")
_UNSHADED = {"partition", "client-clock"}
#: Zoomed panels at most; violations closer than this (seconds) share one.
_ZOOMS = 3
_ZOOM_MERGE = 0.05
#: Vertical layout, in lanes: the space above each band (for "overlap") and the strip
#: under it for refused acquires.
_HEAD = 0.6
_STRIP = 0.45
#: For laying fault labels out before the figure exists: the timeline's data area is about
#: this many inches wide, and a 7-point character about this wide (generous: a label too
#: wide for its lane is dropped, not printed over another).
_CHAR_INCHES = 0.075
#: A bold character's width per point of font size, in inches (generous).
_BOLD_CHAR_INCHES = 0.0085
#: The figure's width: this much for a run of up to _WIDE_AFTER seconds, then this much more
#: per second, up to the most; the data area is the width less the axis labels and legend.
_WIDTH_INCHES = 11.0
_WIDE_AFTER = 20.0
_INCHES_PER_SECOND = 0.12
_MAX_WIDTH_INCHES = 18.0
_MARGIN_INCHES = 3.6
#: A lane's height (inches per data unit), a fault lane's share of a holder lane, and the
#: clock panel's height.
_LANE_INCHES = 0.3
_FAULT_LANE = 0.7
_CLOCK_INCHES = 1.8
#: The masters' lines in the clock panel (a panel of its own: no client's bar is near).
_MASTER_COLOURS = ("#000000", "#8c510a", "#7f7f7f", "#c51b7d", "#01665e")
#: The kinds that move a master's clock.
_CLOCK_KINDS = ("clock-jump", "clock-rate", "clock-strobe", "clock-slew")


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


def ink(colour: str) -> str:
    """Black or white, whichever contrasts more with ``colour`` (WCAG's contrast ratio)."""

    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

    red, green, blue = (channel(v) for v in to_rgb(colour))
    luminance = 0.2126 * red + 0.7152 * green + 0.0722 * blue
    return "white" if 1.05 / (luminance + 0.05) > (luminance + 0.05) / 0.05 else "black"


def fault_label(window: FaultWindow) -> str:
    return f"{_FAULT_SHORT.get(window.kind, window.kind)} {window.target}"


@dataclass
class _Label:
    """A label that may be left out: it must lie within ``x0``..``x1`` (data) and the axes."""

    text: Text
    x0: float
    x1: float


class _Picture:
    """What is drawn, where: computed once, drawn on the timeline and on each zoom."""

    def __init__(self, history: History, verdict: Verdict, origin: float | None, axes_inches: float) -> None:
        self.history = history
        self.verdict = verdict
        self.origin = (history.start or 0.0) if origin is None else origin
        self.tenures = sorted(history.tenures(), key=lambda t: (t.start, t.client))
        self.windows = history.fault_windows()
        first = history.start if history.start is not None else self.origin
        last = max((t.end for t in self.tenures if math.isfinite(t.end)), default=history.end or first)
        self.end = max(history.end or first, last)
        self.lo = self.x(first)
        self.hi = self.x(self.end)
        self.span = max(self.hi - self.lo, 0.001)
        returned = history.of_type(AcquireReturned)
        self.refused = [e for e in returned if not e.ok]
        self.names = sorted({t.name for t in self.tenures} | {e.name for e in returned})
        clients = sorted({t.client for t in self.tenures} | {e.client for e in returned})
        self.colour = {c: CLIENT_COLOURS[i % len(CLIENT_COLOURS)] for i, c in enumerate(clients)}
        # Rows from the top: each name's head, lanes and strip; then the faults' lanes.
        self.layout: dict[str, tuple[float, int]] = {}  # name -> (top y of its lanes, lanes)
        self.strip: dict[str, float] = {}  # name -> y of its refused acquires
        self.lane: dict[int, int] = {}
        y = 0.0
        for name in self.names:
            mine = [t for t in self.tenures if t.name == name]
            lanes, count = _lanes(mine, lambda t: t.start, lambda t: _finite(t.end, math.inf))
            for tenure, lane in zip(mine, lanes, strict=True):
                self.lane[id(tenure)] = lane
            y += _HEAD
            self.layout[name] = (y, count)
            y += count
            if any(e.name == name for e in self.refused):
                self.strip[name] = y + _STRIP / 2
                y += _STRIP
        self.bands_end = y
        # A fault's lane holds its bar and its label, estimated from its length in characters.
        per_inch = self.span * 1.04 / axes_inches

        def reach(w: FaultWindow) -> float:
            # Inside its bar when it fits there, else just after it.
            end = max(_finite(w.end, self.end), w.start + self.span * 0.002)
            wide = (len(fault_label(w)) + 2) * _CHAR_INCHES * per_inch
            return end if w.start + wide <= end else end + wide

        self.fault_lanes, fault_count = _lanes(self.windows, lambda w: w.start, reach)
        self.fault_reach = [reach(w) for w in self.windows]
        self.fault_top = y + _HEAD
        self.fault_count = fault_count
        self.total = self.fault_top + fault_count * _FAULT_LANE if self.windows else y
        self.lost = {id(w) for report in verdict.lost_updates for w in report.lost_writes}
        self.shown: dict[str, Any] = {}
        self.optional: list[_Label] = []
        self.only: str | None = None

    def x(self, t: float) -> float:
        return t - self.origin

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
        """The legend: the clients in name order, the marks in a fixed order, the faults."""
        clients = sorted(key for key in self.shown if key in self.colour)
        marks = [key for key in _MARKS if key in self.shown]
        faults = sorted(key for key in self.shown if key.startswith("fault:"))
        return [self.shown[key] for key in (*clients, *marks, *faults)]

    def draw(self, ax: Any, view: tuple[float, float], *, lock: str | None = None) -> None:
        """Draw everything, or for a zoom only ``lock``'s band (anything drawn outside the
        axes' view would still count in its layout); ``view`` is the x range shown."""
        self.only = lock
        if lock is None:
            self._faults(ax)
        self._holders(ax, view)
        self._events(ax)
        self._violations(ax, view)

    def drawn(self, name: str) -> bool:
        return name in self.layout and self.only in (None, name)

    def _faults(self, ax: Any) -> None:
        for window, lane, reach in zip(self.windows, self.fault_lanes, self.fault_reach, strict=True):
            start = self.x(window.start)
            end = self.x(_finite(window.end, self.end))
            width = max(end - start, self.span * 0.002)
            shade = FAULT_COLOURS.get(window.kind, _FAULT_FALLBACK)
            # A condition of the whole run (a partition, a client's clock) would only tint
            # the background: it stays in the fault band.
            if window.kind not in _UNSHADED and width < 0.6 * self.span:
                ax.axvspan(start, start + width, color=shade, alpha=0.12, linewidth=0)
                self.legend("shaded", Patch(color="#999999", alpha=0.25, label="while a fault lasts (shaded)"))
            top = self.fault_top + lane * _FAULT_LANE
            ax.broken_barh(
                [(start, width)], (top + 0.1 * _FAULT_LANE, 0.8 * _FAULT_LANE), facecolors=shade, edgecolors="black",
                linewidth=0.6,
            )  # fmt: skip
            short = _FAULT_SHORT.get(window.kind)
            name = window.kind if short is None else f"{short}: {window.kind}"
            self.legend(f"fault:{window.kind}", Patch(facecolor=shade, edgecolor="black", linewidth=0.6, label=name))
            # Inside the bar where it fits (in the ink that reads on it), else after it.
            inside = math.isclose(self.x(reach), start + width)
            text = ax.text(
                start if inside else start + width, top + 0.5 * _FAULT_LANE, f" {fault_label(window)}", va="center",
                fontsize=7,
                color=ink(shade) if inside else "black",
            )  # fmt: skip
            self.optional.append(_Label(text, start, self.x(reach)))

    def _holders(self, ax: Any, view: tuple[float, float]) -> None:
        for tenure in self.tenures:
            if not self.drawn(tenure.name):
                continue
            start = self.x(tenure.start)
            end = self.x(_finite(tenure.end, self.end))
            y0 = self.y_of(tenure)
            revived = tenure.via == "extend"
            colour = self.colour[tenure.client]
            ax.broken_barh(
                [(start, max(end - start, (view[1] - view[0]) * 0.001))],
                (y0 + 0.1, 0.8),
                facecolors=colour,
                edgecolors="black" if revived else "none",
                hatch="//" if revived else None,
                linewidth=0.5,
            )
            self.legend(tenure.client, Patch(color=colour, label=tenure.client))
            if revived:
                self.legend(
                    "revived", Patch(facecolor="white", edgecolor="black", hatch="//", label="revived by an extend")
                )
            # Centred on the part of the bar in view (a zoom may show only its end), in the
            # upper half: the lower half is for the writes' marks.
            left, right = max(start, view[0]), min(end, view[1])
            if right <= left:
                continue
            label = tenure.client if tenure.fencing is None else f"{tenure.client} f{tenure.fencing}"
            # On a patch of the bar's own colour, so an overlap's hatching does not cross it.
            text = ax.text(
                (left + right) / 2, y0 + 0.33, label, ha="center", va="center", fontsize=7, color=ink(colour),
                zorder=7, bbox={"facecolor": colour, "edgecolor": "none", "pad": 0.4},
            )  # fmt: skip
            self.optional.append(_Label(text, left, right))

    def _events(self, ax: Any) -> None:
        for event in self.refused:
            if event.name in self.strip and self.drawn(event.name):
                ax.plot(
                    self.x(event.time), self.strip[event.name], "o", color=self.colour[event.client],
                    markeredgecolor="black", markeredgewidth=0.5, markersize=4,
                )  # fmt: skip
                self.legend(
                    "failed",
                    Line2D(
                        [], [], marker="o", color="#999999", markeredgecolor="black", linestyle="none",
                        label="acquire refused (under its lock)",
                    ),
                )  # fmt: skip
        for write in self.history.of_type(ResourceWrite):
            if not self.drawn(write.name):
                continue
            holder = self.holder_at(write.client, write.name, write.time)
            y0 = self.y_of(holder) if holder is not None else self.layout[write.name][0]
            x = self.x(write.time)
            if not write.accepted:
                ax.plot(x, y0 + 0.7, "x", color="#555555", markersize=6, markeredgewidth=1.5, zorder=6)
                self.legend(
                    "rejected", Line2D([], [], marker="x", color="#555555", linestyle="none", label="rejected (fenced)")
                )
            elif id(write) in self.lost:
                ax.plot(x, y0 + 0.68, "v", color="red", markeredgecolor="black", markersize=7, zorder=6)
                self.legend("lost", Line2D([], [], marker="v", color="red", linestyle="none", label="lost increment"))
            else:
                ax.plot(x, y0 + 0.72, "|", color="black", markersize=6, markeredgewidth=1.5, zorder=6)
                self.legend(
                    "write", Line2D([], [], marker="|", color="black", linestyle="none", label="write (writer's lane)")
                )

    def _violations(self, ax: Any, view: tuple[float, float]) -> None:
        for overlap in self.verdict.overlaps:
            if not self.drawn(overlap.name):
                continue
            top, count = self.layout[overlap.name]
            start = self.x(overlap.start)
            width = max(self.x(_finite(overlap.end, self.end)) - start, (view[1] - view[0]) * 0.004)
            # The hatching faint, the frame solid: the holders' labels stay readable inside.
            ax.add_patch(
                Rectangle((start, top), width, count, fill=False, edgecolor="#ff000080", hatch="xx", linewidth=0)
            )
            ax.add_patch(Rectangle((start, top), width, count, fill=False, edgecolor="red", linewidth=1.5, zorder=5))
            left = max(start, view[0])
            if left < min(start + width, view[1]):
                text = ax.text(left, top - 0.05, "overlap", color="red", fontsize=8, va="bottom", fontweight="bold")
                # Side by side on the timeline, many would bury each other: those keep the frame only.
                self.optional.append(_Label(text, left, view[1]))
            self.legend("overlap", Patch(fill=False, edgecolor="red", hatch="xx", label="overlap"))
        for claim in self.verdict.overstated:
            mine = [t for t in self.tenures if t.client == claim.client and t.op == claim.op and t.name == claim.name]
            if not mine or not self.drawn(claim.name):
                continue
            ax.broken_barh(
                [(self.x(claim.bound), claim.excess)], (self.y_of(mine[-1]) + 0.78, 0.12), facecolors="red", zorder=4
            )
            self.legend("overstated", Patch(color="red", label="validity past invoked + ttl - drift"))

    def zooms(self) -> list[tuple[float, float, str, str]]:
        """Windows around the violations, at most :data:`_ZOOMS`: (start, end, lock, caption)."""
        found: list[tuple[float, float, str, str]] = []
        for overlap in self.verdict.overlaps:
            end = _finite(overlap.end, self.end)
            found.append((overlap.start, end, overlap.name, f"overlap {1000 * (end - overlap.start):.1f} ms"))
        for report in self.verdict.lost_updates:
            # From the increment to the write that did not build on it: both in one panel.
            for lost, by in zip(report.lost_writes, report.overwritten_by, strict=True):
                caption = f"{lost.client}'s increment lost"
                if by is None:
                    found.append((lost.time, lost.time, lost.name, caption))
                else:
                    ends = sorted((lost.time, by.time))
                    found.append((ends[0], ends[1], lost.name, f"{caption} to {by.client}'s write"))
        found += [
            (v.bound, v.deadline, v.name, f"{v.holder} overstates by {1000 * v.excess:.1f} ms")
            for v in self.verdict.overstated
        ]
        windows: list[tuple[float, float, str, str]] = []
        for start, end, name, caption in sorted(found):
            # One panel for violations of one lock close together (an overlap and its lost write).
            last = windows[-1] if windows else None
            if last is not None and last[2] == name and start - last[1] < _ZOOM_MERGE:
                windows[-1] = (last[0], max(last[1], end), name, f"{last[3]}; {caption}")
            elif name in self.layout:
                windows.append((start, end, name, caption))
        return [(start, end, name, _one_line(caption)) for start, end, name, caption in windows[:_ZOOMS]]


def timeline_figure(
    history: History,
    verdict: Verdict,
    *,
    judgement: Judgement,
    title: str = "",
    panels: Sequence[Callable[[Any, float], None]] = (),
    origin: float | None = None,
    footer: Sequence[str] | None = None,
    xlabel: str = "seconds since the first event",
    jumps_step_back: bool = True,
    dpi: float = 80,
) -> Figure:
    """The figure of ``history`` (judged as ``verdict``, and the run as ``judgement``),
    laid out and ready to save.

    Each of ``panels`` draws one more plot below the timeline (and its zooms), sharing its
    time axis: ``panel(axes, origin)``, with ``origin`` the monotonic time shown as 0 (by
    default the first event's; ``xlabel`` says what it is). ``footer`` lists the
    violations to name under the picture (by default the verdict's, timed from
    ``origin``). ``jumps_step_back``: whether a clock jump's end steps the clock back, as
    the real nemesis does (the simulator's jump keeps its lead)."""
    first = history.start if history.start is not None else 0.0
    span = max((history.end or first) - first, 0.001)
    width = min(_MAX_WIDTH_INCHES, _WIDTH_INCHES + max(0.0, span - _WIDE_AFTER) * _INCHES_PER_SECOND)
    picture = _Picture(history, verdict, origin, width - _MARGIN_INCHES)
    if footer is None:
        footer = replace(verdict, origin=picture.origin).violations
    zooms = picture.zooms()
    main_height = 1.2 + _LANE_INCHES * max(picture.total, 2)
    lines, colour = _footer(footer, judgement)
    clocks = clock_offsets(picture.windows, picture.origin, picture.end, jumps_step_back=jumps_step_back)
    ratios = [main_height, *([2.4] if zooms else []), *([_CLOCK_INCHES] if clocks else []), *(2.0 for _ in panels)]
    figure = Figure(figsize=(width, sum(ratios) + 0.15 * len(lines)), dpi=dpi)
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(len(ratios), max(1, len(zooms)), height_ratios=ratios)
    ax = figure.add_subplot(grid[0, :])
    pad = picture.span * 0.02
    view = (picture.lo - pad, picture.hi + pad)
    below = len(ratios) - len(panels)
    if clocks:
        _clock_panel(figure.add_subplot(grid[below - 1, :], sharex=ax), clocks, xlabel)
    for number, panel in enumerate(panels, start=below):
        panel(figure.add_subplot(grid[number, :], sharex=ax), picture.origin)
    picture.draw(ax, view)
    ticks = [picture.layout[n][0] + picture.layout[n][1] / 2 for n in picture.names]
    labels = [f"lock {n}" for n in picture.names]
    if picture.windows:
        ticks.append(picture.fault_top + picture.fault_count * _FAULT_LANE / 2)
        labels.append("faults")
    ax.set_yticks(ticks, labels)
    ax.set_ylim(picture.total + 0.1, 0)
    ax.set_xlim(*view)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    verdict_title(ax, judgement, title)
    for column, (start, end, name, caption) in enumerate(zooms):
        zoom = figure.add_subplot(grid[1, column])
        # Wide enough to show the holders on either side, narrow enough to show the gap;
        # never past the run's first or last moment.
        margin = max(0.01, (end - start) * 0.6)
        near = (max(picture.x(start) - margin, picture.lo), min(picture.x(end) + margin, picture.hi))
        picture.draw(zoom, near, lock=name)
        zoom.set_xlim(*near)
        # The violation's lock only: the faults are named on the timeline above.
        top, count = picture.layout[name]
        bottom = top + count + (_STRIP if name in picture.strip else 0.0)
        zoom.set_ylim(bottom + 0.1, top - _HEAD)
        zoom.set_yticks([top + count / 2], [name], fontsize=7)
        # Wrapped to its column (an 8-point character is about 0.07 in).
        wrap = int(width / len(zooms) / 0.075) - 4
        zoom.set_title(textwrap.fill(f"zoom: {name}: {caption}", wrap), fontsize=8, color="red")
        zoom.set_xlabel(xlabel, fontsize=7)
        zoom.xaxis.set_major_locator(MaxNLocator(4))
        zoom.tick_params(labelsize=7)
        zoom.grid(axis="x", alpha=0.3)
    handles = picture.handles()
    # Two columns when one would run past the timeline's bottom (0.17 in per entry).
    columns = 1 if 0.17 * len(handles) < main_height - 0.6 else 2
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False, ncol=columns)
    figure.text(0.01, 0.005, "\n".join(lines), fontsize=8 if footer else 11, color=colour,
                fontweight="normal" if footer else "bold", va="bottom")  # fmt: skip
    inches = 0.1 + 0.15 * len(lines) if footer else 0.3
    figure.tight_layout(rect=(0, inches / figure.get_figheight(), 1, 1))
    _declutter(figure, picture.optional)
    return figure


def verdict_title(target: Any, judgement: Judgement, text: str = "", *, fontsize: float = 10) -> None:
    """Title ``target`` (an axes, or a figure: its suptitle) with the verdict first, in its
    colour: every picture of the harness says its verdict the same way."""
    title = judgement.headline + (f": {text}" if text else "")
    figure = target if isinstance(target, Figure) else target.figure
    # About as many bold characters as fit over the plot (most of the figure's width);
    # a longer title puts the verdict on a line of its own rather than run off the edge.
    fits = figure.get_figwidth() * 0.7 / (fontsize * _BOLD_CHAR_INCHES)
    if len(title) > fits and text:
        title = f"{judgement.headline}\n{text}"
    style = {"fontsize": fontsize, "color": judgement.colour, "fontweight": "bold"}
    if isinstance(target, Figure):
        target.suptitle(title, **style)
    else:
        target.set_title(title, **style)


#: A clock's offset from true time over a run: (seconds from the origin, offset in ms) at
#: each corner of its piecewise-linear path, and the strobes' bands (start, end, ms).
_Offsets = tuple[list[tuple[float, float]], list[tuple[float, float, float]]]


def _magnitude(window: FaultWindow) -> float | None:
    """A clock fault's magnitude from its detail: seconds of a jump or a strobe, a rate.
    The nemesis writes ``+1.5s``, ``x1.05``, ``x1 to x1.05 over 2s``; the simulator the
    bare number."""
    numbers = re.findall(r"[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?", window.detail)
    if not numbers:
        return None
    if window.kind == "clock-jump":
        return float(numbers[-1])  # (after a reactive nemesis's cause)
    if window.kind == "clock-slew" and " to x" in window.detail:
        return float(window.detail.split(" to x", 1)[1].split()[0])
    return float(numbers[0])


def clock_offsets(
    windows: Sequence[FaultWindow], origin: float, end: float, *, jumps_step_back: bool = True
) -> dict[str, _Offsets]:
    """Each faulted master's clock offset from true time (ms) over ``origin``..``end``, as
    its faults' magnitudes make it: a jump steps it (and, when ``jumps_step_back``, its end
    steps it back); a rate ``r`` makes it gain ``r - 1`` seconds a second while it lasts
    and keeps the lead; a slew ramps the rate from 1 to ``r``; a strobe flips it between
    where it is and a jump ahead (drawn as a band). Masters named ``A,C`` are each moved;
    masters moved alike are one entry (``A, C``)."""
    moves: dict[str, list[tuple[FaultWindow, float]]] = {}
    for window in windows:
        value = _magnitude(window) if window.kind in _CLOCK_KINDS else None
        if value is not None:
            for master in window.target.split(","):
                moves.setdefault(master, []).append((window, value))
    alike: dict[str, list[str]] = {}
    paths: dict[str, _Offsets] = {}
    for master, faults in sorted(moves.items()):
        times = {0.0, end - origin} | {t - origin for w, _ in faults for t in (w.start, _finite(w.end, end))}
        # A slew's path is a parabola: drawn through twenty points of it.
        for window, _ in faults:
            if window.kind == "clock-slew":
                stop = _finite(window.end, end)
                times |= {window.start - origin + (stop - window.start) * i / 20 for i in range(1, 20)}
        corners = sorted(t for t in times if 0.0 <= t <= end - origin)
        # Each corner from just before it and at it: a jump is a step, not a slope.
        path = [(t, _offset(faults, origin + t + nudge, jumps_step_back)) for t in corners for nudge in (-1e-9, 0.0)]
        strobes = [
            (w.start - origin, _finite(w.end, end) - origin, 1000 * value) for w, value in faults
            if w.kind == "clock-strobe"
        ]  # fmt: skip
        key = repr((path, strobes))
        alike.setdefault(key, []).append(master)
        paths[key] = (path, strobes)
    return {", ".join(masters): paths[key] for key, masters in alike.items()}


def _offset(faults: Sequence[tuple[FaultWindow, float]], when: float, jumps_step_back: bool) -> float:
    """The offset (ms) at ``when`` that ``faults`` make, summed (their effects compose)."""
    total = 0.0
    for window, value in faults:
        if when < window.start:
            continue
        lasted = min(when, window.end) - window.start
        if window.kind == "clock-jump" and (when < window.end or not jumps_step_back):
            total += value
        elif window.kind == "clock-rate":
            total += (value - 1.0) * lasted
        elif window.kind == "clock-slew":
            length = max(window.end - window.start, 1e-9) if math.isfinite(window.end) else max(lasted, 1e-9)
            total += (value - 1.0) * lasted * lasted / (2 * length)
    return 1000 * total


def _clock_panel(ax: Any, clocks: dict[str, _Offsets], xlabel: str) -> None:
    for number, (master, (path, strobes)) in enumerate(clocks.items()):
        # Told apart by colour and by dash, since their lines often run on top of each other.
        colour = _MASTER_COLOURS[number % len(_MASTER_COLOURS)]
        dash = ("-", "--", ":", "-.")[number % 4]
        label = f"master{'s' * (',' in master)} {master}"
        ax.plot([t for t, _ in path], [v for _, v in path], dash, color=colour, linewidth=1.5, label=label)
        for start, stop, ahead in strobes:
            base = [v for t, v in path if start <= t <= stop] or [0.0]
            ax.fill_between([start, stop], min(base), max(base) + ahead, color=colour, alpha=0.2, linewidth=0)
    ax.axhline(0.0, color="#7f7f7f", linewidth=0.8)
    ax.set_ylabel("clock offset ms")
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.grid(alpha=0.3)


def plot_timeline(
    history: History,
    verdict: Verdict,
    path: str | os.PathLike[str],
    **options: Any,
) -> None:
    """Draw ``history`` (judged as ``verdict``) to a PNG file at ``path``; ``options`` are
    :func:`timeline_figure`'s."""
    timeline_figure(history, verdict, **options).savefig(os.fspath(path), format="png")


def _declutter(figure: Figure, labels: Sequence[_Label]) -> None:
    """Leave out each label that does not fit its range and its axes, or that would touch
    one already placed; the overlap labels go first, then the widest bars' labels."""
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    placed: list[Any] = []
    first = sorted(labels, key=lambda label: (label.text.get_text() != "overlap", -(label.x1 - label.x0)))
    for label in first:
        text = label.text
        ax = text.axes
        assert ax is not None  # drawn with ax.text
        box = text.get_window_extent(renderer)
        frame = ax.get_window_extent(renderer)
        (low, _), (high, _) = ax.transData.transform([(label.x0, 0), (label.x1, 0)])
        fits = (
            box.x0 >= max(low, frame.x0) - 0.5
            and box.x1 <= min(high, frame.x1) + 0.5
            and box.y0 >= frame.y0
            and box.y1 <= frame.y1
        )
        if fits and not any(box.overlaps(other) for other in placed):
            placed.append(box)
        else:
            text.remove()


def _one_line(caption: str) -> str:
    """A zoom's caption: its first two violations, and how many more."""
    parts = caption.split("; ")
    return "; ".join(parts[:2]) + (f" (+{len(parts) - 2} more)" if len(parts) > 2 else "")


def _footer(lines: Iterable[str], judgement: Judgement) -> tuple[list[str], str]:
    """The footer and its colour: each violation once (with how often it recurred), at most
    two lines and how many more; or that there was none, in the verdict's colour (red, and
    saying so, when violations were expected)."""
    counts = Counter(lines)
    if not counts:
        if judgement.passed:
            return ["no violation found"], judgement.colour
        return [f"no violation found: {judgement.word}, expected {judgement.expected}"], judgement.colour
    found = [
        textwrap.shorten(line if n == 1 else f"{line} (x{n})", 150, placeholder=" ...") for line, n in counts.items()
    ]
    if len(found) > 2:
        found[1] += f"  (and {len(found) - 2} more)"
    return found[:2], FAILURE_COLOUR
