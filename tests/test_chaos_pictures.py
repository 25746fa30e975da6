"""The harness's pictures, read as a reader would: drawn (matplotlib Agg, a low dpi) from
small synthetic histories and short simulated runs, no chaos run, and checked for what can
be checked: the title carries the verdict against the expectation (in its colour), the
labels a reader needs are there, no text's box overlaps another's, legends sit outside the
plots' data, times are counted from the start, and the counts agree with each other."""

from __future__ import annotations

import itertools
import math
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from chaos.checkers import check_all
from chaos.explore import ExploreConfig, _figures, find_violations, time_bins
from chaos.history import (
    AcquireInvoked,
    AcquireReturned,
    Event,
    FaultBegin,
    FaultEnd,
    History,
    ReleaseInvoked,
    ResourceWrite,
)
from chaos.judgement import FAILURE_COLOUR, PASS_COLOUR, Judgement, judge_run
from chaos.schedule import resolve_fault_set
from chaos.sim import search
from chaos.sim.pictures import explore_figures, surface_figure
from chaos.sweep import PARAMETERS, logistic_fit, sweep_figure, wilson_interval
from chaos.timeline import (
    CLIENT_COLOURS,
    FAULT_COLOURS,
    _footer,
    clock_offsets,
    fault_label,
    ink,
    timeline_figure,
)

DPI = 40
#: Raw monotonic times of a real run are large: a picture that showed them would say t=1000.
T0 = 1000.0


# --- what a reader sees ------------------------------------------------------------------------


def _texts(figure: Figure) -> list[tuple[Text, Any]]:
    """Every text drawn, with its box: tick labels only of ticks inside their axes."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    found = []
    for text in figure.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or text.figure is None:
            continue
        box = text.get_window_extent(renderer)
        if box.width == 0:
            continue
        found.append((text, box))
    # A tick label of a tick outside the view is not drawn, though its Text exists.
    drawn = set()
    for ax in figure.axes:
        frame = ax.get_window_extent(renderer)
        for label in ax.get_xticklabels():
            centre = label.get_window_extent(renderer)
            if frame.x0 - 1 <= (centre.x0 + centre.x1) / 2 <= frame.x1 + 1:
                drawn.add(id(label))
        for label in ax.get_yticklabels():
            centre = label.get_window_extent(renderer)
            if frame.y0 - 1 <= (centre.y0 + centre.y1) / 2 <= frame.y1 + 1:
                drawn.add(id(label))
    ticks = {id(t) for ax in figure.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())}
    return [(t, box) for t, box in found if id(t) not in ticks or id(t) in drawn]


def _strings(figure: Figure) -> list[str]:
    return [text.get_text() for text, _ in _texts(figure)]


def assert_no_text_overlaps(figure: Figure) -> None:
    placed = _texts(figure)
    for (a, box_a), (b, box_b) in itertools.combinations(placed, 2):
        # A legend's entries are laid out by the legend itself.
        inside = box_a.shrunk(0.98, 0.9).overlaps(box_b.shrunk(0.98, 0.9))
        assert not inside, f"{a.get_text()!r} overlaps {b.get_text()!r}"


def assert_legends_outside(figure: Figure) -> int:
    """Each legend's box clear of every axes' data area; returns how many legends there are."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
    for legend in legends:
        box = legend.get_window_extent(renderer)  # type: ignore[union-attr]
        for ax in figure.axes:
            assert not ax.get_window_extent(renderer).shrunk(0.99, 0.99).overlaps(box)
    return len(legends)


def assert_not_squeezed(figure: Figure) -> None:
    """Each plot keeps most of the height its row was given: nothing drawn far outside a
    plot (which the layout would make room for) has squeezed it."""
    for ax in figure.axes:
        spec = ax.get_subplotspec()
        assert spec is not None
        ratios = spec.get_gridspec().get_height_ratios() or [1] * spec.get_gridspec().nrows
        given = sum(ratios[row] for row in spec.rowspan) / sum(ratios)
        # Less its title, axis labels and the space between rows.
        assert ax.get_position().height >= 0.4 * given, (ax.get_title() or ax.get_ylabel(), given)


def _hex(rgba: Any) -> str:
    return to_hex(tuple(float(v) for v in rgba))


def _titles(figure: Figure) -> list[str]:
    return [ax.get_title() for ax in figure.axes]


def _verdict_title(figure: Figure) -> Text:
    """The one title that says a verdict (an axes' title or the figure's suptitle)."""
    suptitle = figure._suptitle  # type: ignore[attr-defined]
    titles = [ax.title for ax in figure.axes] + ([suptitle] if suptitle is not None else [])
    (title,) = [t for t in titles if re.match(r"(PASS|FAIL|MISMATCH|ERROR) \(", t.get_text())]
    return title


def assert_says(figure: Figure, word: str) -> str:
    """The picture's title starts with ``word``, in the verdict's colour; no text over
    text; every legend outside the data. Returns the title."""
    title = _verdict_title(figure)
    assert title.get_text().startswith(f"{word} ("), title.get_text()
    colour = PASS_COLOUR if word == "PASS" else FAILURE_COLOUR
    assert to_hex(title.get_color()) == colour
    assert_no_text_overlaps(figure)
    assert_legends_outside(figure)
    assert_inside(figure)
    return title.get_text()


def assert_inside(figure: Figure) -> None:
    """No text runs off the figure's edge (a long title would be cut)."""
    whole = figure.bbox
    for text, box in _texts(figure):
        assert whole.x0 - 1 <= box.x0, text.get_text()
        assert box.x1 <= whole.x1 + 1, text.get_text()
        assert whole.y0 - 1 <= box.y0, text.get_text()
        assert box.y1 <= whole.y1 + 1, text.get_text()


# --- synthetic histories ---------------------------------------------------------------------


class _Maker:
    """Builds a history: tenures with a write each, refusals, faults; times from ``T0``."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.ops: dict[str, int] = {}
        self.values: dict[str, int] = {}
        self.fault_ids = itertools.count(1)

    def _op(self, client: str) -> int:
        self.ops[client] = self.ops.get(client, 0) + 1
        return self.ops[client]

    def hold(self, client: str, name: str, start: float, end: float, *, fencing: int | None = None,
             write: bool = True, read: int | None = None) -> None:  # fmt: skip
        op = self._op(client)
        token = f"{client}-{op}"
        self.events += [
            AcquireInvoked(time=T0 + start - 0.01, client=client, name=name, op=op),
            AcquireReturned(
                time=T0 + start,
                client=client,
                name=name,
                op=op,
                ok=True,
                token=token,
                deadline=T0 + end + 5,
                fencing=fencing,
            ),
        ]
        if write:
            before = self.values.get(name, 0) if read is None else read
            self.values[name] = before + 1
            self.events.append(
                ResourceWrite(
                    time=T0 + (start + end) / 2,
                    client=client,
                    name=name,
                    resource=f"r:{name}",
                    value=before + 1,
                    read_value=before,
                )
            )
        self.events.append(ReleaseInvoked(time=T0 + end, client=client, name=name, op=self._op(client), token=token))

    def refuse(self, client: str, name: str, at: float) -> None:
        op = self._op(client)
        self.events += [
            AcquireInvoked(time=T0 + at - 0.2, client=client, name=name, op=op),
            AcquireReturned(time=T0 + at, client=client, name=name, op=op, ok=False),
        ]

    def fault(self, kind: str, target: str, start: float, end: float, detail: str = "") -> None:
        fault = f"f{next(self.fault_ids)}"
        self.events += [
            FaultBegin(time=T0 + start, fault=fault, kind=kind, target=target, detail=detail),
            FaultEnd(time=T0 + end, fault=fault),
        ]

    def history(self) -> History:
        return History(sorted(self.events, key=lambda e: e.time))


def _explore_history() -> History:
    """Three locks, four clients, two overlaps with a lost increment each, crowded faults of
    many kinds: the crowded picture of a long explore run."""
    make = _Maker()
    clients = ["c1", "c2", "c3", "c4"]
    for lane, name in enumerate(["L1", "L2", "L3"]):
        t = 0.1 * lane
        for n in range(12):
            make.hold(clients[(n + lane) % 4], name, t, t + 0.6)
            t += 0.75
    # Two holders at once, each writing what it read before the other's write: one lost.
    make.hold("c4", "L3", 4.4, 4.9, read=make.values["L3"])
    make.hold("c2", "L1", 6.0, 6.3, read=make.values["L1"])
    for at in (1.0, 3.5, 7.2):
        make.refuse("c2", "L2", at)
    kinds = ["blackhole", "latency", "clock-jump", "clock-rate", "kill", "pause", "client-pause", "crash-restart"]
    targets = ["c1-E", "c2-C", "A", "B", "C", "D", "c3", "E"]
    for n in range(22):
        start = 0.3 + 0.4 * n
        make.fault(kinds[n % len(kinds)], targets[n % len(targets)], start, start + 0.25 + 0.1 * (n % 3))
    return make.history()


def _explore_figures(history: History, duration: float = 10.0) -> tuple[Figure, Figure, list[Any]]:
    config = ExploreConfig(resolve_fault_set("unsafe-clock"), seed=5, duration=duration)
    verdict = check_all(history)
    violations = find_violations(verdict, T0)
    width = 2.0
    summary = {"bin_seconds": width, "bins": time_bins(history, T0, T0 + duration, width)}
    timeline, over_time = _figures(config, summary, history, t0=T0, violations=violations, dpi=DPI)
    return timeline, over_time, violations


def test_explore_timeline_reads_as_it_should() -> None:
    history = _explore_history()
    timeline, over_time, violations = _explore_figures(history)
    strings = _strings(timeline)
    # Every fault named on its bar (kinds shortened; the legend spells them out).
    for window in history.fault_windows():
        assert f" {fault_label(window)}" in strings, fault_label(window)
    assert "bh: blackhole" in strings
    assert "jump: clock-jump" in strings
    # The zooms say which lock, and their rows which lock and which client.
    zooms = [" ".join(title.split()) for title in _titles(timeline) if title.startswith("zoom: ")]
    assert len(zooms) == 3
    one = r"(overlap \d+\.\d ms|c\d's increment lost to c\d's write)"
    assert all(re.fullmatch(rf"zoom: L\d: {one}(; {one})?", z) for z in zooms), zooms
    zoom_axes = [ax for ax in timeline.axes if ax.get_title().startswith("zoom: ")]
    for ax in zoom_axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == [ax.get_title().split(":")[1].strip()]
        assert ax.get_xlabel() == "seconds since the schedule's start"
        if "overlap" in ax.get_title():
            assert "overlap" in {t.get_text() for t in ax.texts}
        assert {t.get_text().split()[0] for t in ax.texts if t.get_text() != "overlap"} & {"c1", "c2", "c3", "c4"}
    # "overlap" is never clipped: wholly inside its axes.
    timeline.canvas.draw()
    renderer = timeline.canvas.get_renderer()  # type: ignore[attr-defined]
    overlaps = [t for ax in timeline.axes for t in ax.texts if t.get_text() == "overlap"]
    assert len(overlaps) >= 2
    for text in overlaps:
        assert text.axes is not None
        frame = text.axes.get_window_extent(renderer)
        box = text.get_window_extent(renderer)
        assert frame.x0 <= box.x0
        assert box.x1 <= frame.x1
        assert frame.y0 <= box.y0
        assert box.y1 <= frame.y1
    # Each panel once: latency and throughput in over-time.png only, which marks the
    # violations and says what its x axis is, and the latency panel where the timeout is.
    assert timeline.axes[0].get_xlabel() == "seconds since the schedule's start"
    assert not [ax for ax in timeline.axes if ax.get_ylabel() in ("acquire ms", "acquired/s")]
    assert [ax.get_ylabel() for ax in over_time.axes] == ["acquire ms", "acquired/s"]
    assert [ax.get_xlabel() for ax in over_time.axes] == ["seconds since the schedule's start"] * 2
    latency = over_time.axes[0]
    notes = [t.get_text() for t in latency.get_legend().get_texts()]  # type: ignore[union-attr]
    assert any(note.startswith("acquire timeout 2s") for note in notes)
    assert "violation" in notes
    marks = [line for line in latency.lines if to_hex(line.get_color()) == FAILURE_COLOUR]
    assert sorted(float(line.get_xdata()[0]) for line in marks) == sorted(v.time for v in violations)  # type: ignore[index]
    # The set is expected UNSAFE and violations were found: both pictures say PASS.
    assert_says(timeline, "PASS")
    assert assert_legends_outside(timeline) == 1
    assert_not_squeezed(timeline)
    assert assert_says(over_time, "PASS").endswith(f"{len(violations)} violations")
    assert assert_legends_outside(over_time) == 2


def test_explore_counts_agree_and_times_count_from_the_start() -> None:
    """The title counts the run's violations, the footer names each once (or says how many
    more), and every time said is from the schedule's start, not a raw monotonic reading."""
    history = _explore_history()
    timeline, _, violations = _explore_figures(history)
    assert {v.kind for v in violations} == {"mutual-exclusion", "lost-update"}
    title = _verdict_title(timeline).get_text().replace("\n", ": ")
    assert (
        title
        == f"PASS (expected UNSAFE, violations found): explore unsafe-clock (seed 5): {len(violations)} violations"
    )
    footer = [t.get_text() for t in timeline.texts]
    (text,) = footer
    lines = text.splitlines()
    assert len(lines) == 2
    assert lines[1].endswith(f"(and {len(violations) - 2} more)")
    assert len({v.text for v in violations}) == len(violations), "each violation says which one it is"
    for v in violations:
        for said in re.findall(r"t=([0-9.]+)", v.text):
            assert 0 <= float(said) <= 10
    for said in re.findall(r"t=([0-9.]+)", text):
        assert 0 <= float(said) <= 10


def test_a_long_explore_run_says_what_part_it_shows() -> None:
    """The first minute is drawn; a violation after it is counted in the title, but neither
    named in the footer nor zoomed on."""
    make = _Maker()
    make.hold("c1", "L1", 1.0, 1.5)
    make.hold("c2", "L1", 1.2, 1.4, read=0)
    make.hold("c2", "L2", 2.0, 2.5)
    make.hold("c1", "L2", 100.0, 100.6, read=1)
    make.hold("c3", "L2", 100.1, 100.3, read=1)
    make.fault("kill", "A", 0.5, 1.0)
    history = make.history()
    timeline, _, violations = _explore_figures(history, duration=600.0)
    late = [v for v in violations if v.time > 60]
    assert late
    title = _verdict_title(timeline).get_text().replace("\n", ": ")
    shown = len(violations) - len(late)
    assert title.endswith(
        f"explore unsafe-clock (seed 5): {len(violations)} violations; 0-60s of 600s shown, with {shown}"
    )
    zooms = [" ".join(t.split()) for t in _titles(timeline) if t.startswith("zoom: ")]
    assert zooms
    assert all(z.startswith("zoom: L1: ") for z in zooms), zooms
    (footer,) = timeline.texts
    assert "L2" not in footer.get_text()
    assert_not_squeezed(timeline)


def _election_history() -> History:
    """One name, three campaigners (then a fourth) taking turns with a write each term,
    refused acquires, the election scenario's faults."""
    make = _Maker()
    clients = ["c1", "c2", "c3", "c1", "c2", "c4", "c3", "c4", "c1", "c2"]
    t = 0.5
    for term, client in enumerate(clients, start=1):
        make.hold(client, "chaos-election", t, t + 0.75, fencing=term)
        make.refuse("c3" if client != "c3" else "c2", "chaos-election", t + 0.3)
        t += 0.85
    make.fault("clock-rate", "C", 0.0, 9.5, "x1.02")
    make.fault("pause", "E", 2.2, 3.0)
    make.fault("kill", "A", 3.4, 4.7)
    make.fault("client-pause", "c1", 5.0, 6.5)
    make.fault("client-kill", "c3", 6.6, 6.62)
    return make.history()


def test_election_timeline_reads_as_it_should() -> None:
    history = _election_history()
    verdict = check_all(history)
    assert verdict.safe
    figure = timeline_figure(history, verdict, judgement=judge_run("SAFE", "SAFE"), title="23. election", dpi=DPI)
    assert_not_squeezed(figure)
    assert assert_says(figure, "PASS") == "PASS (expected SAFE, no violation found): 23. election"
    strings = _strings(figure)
    # Each term's label is there, not hidden under its write.
    for term, client in enumerate(["c1", "c2", "c3", "c1", "c2", "c4", "c3", "c4", "c1", "c2"], start=1):
        assert f"{client} f{term}" in strings
    # The verdict in large green letters.
    (footer,) = figure.texts
    assert footer.get_text() == "no violation found"
    assert footer.get_fontsize() >= 10
    assert footer.get_color() == PASS_COLOUR
    # Refused acquires: a visible dot each.
    ax, clocks = figure.axes
    # C's clock at x1.02 for 9.5 s gains 190 ms, drawn in the panel under the timeline.
    assert clocks.get_ylabel() == "clock offset ms"
    (line,) = clocks.get_lines()[:1]
    assert max(line.get_ydata()) == pytest.approx(190)  # type: ignore[arg-type]
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert len(dots) == 10
    assert all(dot.get_markersize() >= 4 for dot in dots)
    # Faults in colours no client has.
    clients = {to_hex(c) for c in CLIENT_COLOURS}
    fault_bars = [c for c in ax.collections if len(c.get_edgecolor()) and _hex(c.get_edgecolor()[0]) == "#000000"]
    assert len(fault_bars) == 5
    assert not {_hex(c.get_facecolor()[0]) for c in fault_bars} & clients
    assert_no_text_overlaps(figure)
    assert assert_legends_outside(figure) == 2


def test_fault_colours_are_far_from_every_client_colour() -> None:
    for kind, colour in FAULT_COLOURS.items():
        nearest = min(math.dist(to_rgb(colour), to_rgb(client)) for client in CLIENT_COLOURS)
        assert nearest > 0.2, kind


@pytest.mark.parametrize(
    ("colour", "expected"), [("#1f77b4", "white"), ("#ff7f0e", "black"), ("#bcbd22", "black"), ("#08306b", "white")]
)
def test_labels_take_the_ink_that_reads_on_their_bar(colour: str, expected: str) -> None:
    assert ink(colour) == expected


def _restart_empty_history() -> History:
    """Scenario 5's shape: partitions all run long, C restarts empty early, c1 and c2 hold
    at once and c1's late write loses c2's increment."""
    make = _Maker()
    make.fault("partition", "c1", 0.0, 0.65)
    make.fault("partition", "c2", 0.005, 0.645)
    make.fault("crash-restart", "C", 0.01, 0.028)
    make.hold("c1", "chaos-lock", 0.0, 0.54, write=False)
    make.hold("c2", "chaos-lock", 0.03, 0.44, read=0)
    make.events.append(
        ResourceWrite(time=T0 + 0.34, client="c1", name="chaos-lock", resource="r:chaos-lock", value=1, read_value=0)
    )
    return make.history()


def test_scenario_timeline_reads_as_it_should() -> None:
    history = _restart_empty_history()
    verdict = check_all(history)
    assert verdict.overlaps
    figure = timeline_figure(
        history, verdict, judgement=judge_run("UNSAFE", "UNSAFE"), title="5. restart-empty", dpi=DPI
    )
    assert_says(figure, "PASS")
    assert_not_squeezed(figure)
    main, zoom = figure.axes
    # The faint band near t=0 is a fault's shading, and the legend says so.
    legend = [t.get_text() for t in main.get_legend().get_texts()]  # type: ignore[union-attr]
    assert "while a fault lasts (shaded)" in legend
    # Client labels in the ink that reads on their bar.
    for text in main.texts:
        if text.get_text() in ("c1", "c2"):
            bar = CLIENT_COLOURS[int(text.get_text()[1]) - 1]
            assert text.get_color() == ink(bar)
    # The zoom: an axis label, and no time before the first event or after the last.
    assert zoom.get_xlabel() == "seconds since the first event"
    low, high = zoom.get_xlim()
    assert history.start is not None
    assert history.end is not None
    assert low >= 0.0
    assert high <= history.end - history.start + 1e-9
    assert [t.get_text() for t in zoom.get_yticklabels()] == ["chaos-lock"]
    footer = figure.texts[0].get_text()
    assert "from t=0.040" in footer  # from the first event, 10 ms before c1's grant
    assert_no_text_overlaps(figure)
    assert assert_legends_outside(figure) == 1


def test_the_footer_names_each_violation_once() -> None:
    unsafe = judge_run("UNSAFE", "UNSAFE")
    lines, colour = _footer(["a", "b", "a", "c", "a", "d"], unsafe)
    assert colour == FAILURE_COLOUR
    assert lines == ["a (x3)", "b  (and 2 more)"]
    assert _footer([], judge_run("SAFE", "SAFE")) == (["no violation found"], PASS_COLOUR)
    missed = (["no violation found: MISMATCH, expected UNSAFE"], FAILURE_COLOUR)
    assert _footer([], judge_run("UNSAFE", "SAFE")) == missed


# --- the sweep --------------------------------------------------------------------------------


def _document(name: str, counts: dict[float, int], trials: int = 6) -> dict[str, Any]:
    parameter = PARAMETERS[name]
    points = []
    for value, violations in counts.items():
        low, high = wilson_interval(violations, trials)
        points.append({"value": value, "trials": trials, "errors": 0, "violations": violations,
                       "probability": violations / trials, "low": low, "high": high,
                       "theory": "UNSAFE" if parameter.unsafe(value) else "SAFE"})  # fmt: skip
    return {"parameter": name, "label": parameter.label, "ttl": parameter.ttl, "seed": 1,
            "threshold": parameter.threshold(parameter.ttl), "unsafe_above": parameter.unsafe_above,
            "points": points}  # fmt: skip


#: As measured for docs/chaos-results.md (seed 1, 6 trials per value).
CLOCK_RATE = {1.0: 0, 1.005: 0, 1.01: 0, 1.02: 4, 1.05: 6, 1.1: 6}


def _curves(figure: Figure) -> Iterator[Line2D]:
    for ax in figure.axes:
        for line in ax.lines:
            if line.get_linestyle() not in ("None", "--") and len(line.get_xdata()) > 2:  # type: ignore[arg-type]
                yield line


def test_a_sweep_draws_points_and_no_line_across_values_never_measured() -> None:
    figure = sweep_figure(_document("clock-rate", CLOCK_RATE), dpi=DPI)
    assert list(_curves(figure)) == []
    assert assert_says(figure, "PASS").startswith("PASS (violations at 0 of 3 SAFE points, 3 of 3 UNSAFE ones)\n")
    strings = _strings(figure)
    # One value in the transition: the most likely curve would be a step; the gap is shaded.
    assert "the boundary lies here\n(not measured inside)" in strings
    assert "theory's threshold 1.011" in strings
    assert_no_text_overlaps(figure)
    assert assert_legends_outside(figure) == 1
    assert_not_squeezed(figure)
    (ax,) = figure.axes
    (span,) = ax.patches
    assert span.get_x() == pytest.approx(1.01)
    assert span.get_width() == pytest.approx(0.01)


def test_a_sweep_fits_a_curve_where_enough_values_went_both_ways() -> None:
    counts = {1.0: 0, 1.005: 1, 1.01: 2, 1.02: 4, 1.05: 6, 1.1: 6}
    figure = sweep_figure(_document("clock-rate", counts), dpi=DPI)
    (curve,) = _curves(figure)
    xs = [float(x) for x in curve.get_xdata()]  # type: ignore[arg-type,union-attr]
    assert min(xs) == 1.0  # the measured range only
    assert max(xs) == 1.1
    assert "logistic fit (6 values)" in _strings(figure)
    assert_no_text_overlaps(figure)
    assert assert_legends_outside(figure) == 1


def test_the_logistic_fit_recovers_a_known_curve_and_declines_a_step() -> None:
    a, b = -20.0, 20.0  # P = 1/2 at 1.0
    points = []
    for value in (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2):
        n = 10_000
        k = round(n / (1 + math.exp(-(a + b * value))))
        points.append({"value": value, "trials": n, "violations": k})
    fit = logistic_fit(points)
    assert fit is not None
    assert fit[0] == pytest.approx(a, rel=0.05)
    assert fit[1] == pytest.approx(b, rel=0.05)
    step = [{"value": v, "trials": 6, "violations": 0 if v < 1 else 6} for v in (0.5, 0.8, 0.9, 1.1, 1.5)]
    assert logistic_fit(step) is None
    few = [{"value": v, "trials": 6, "violations": k} for v, k in ((0.5, 0), (0.9, 2), (1.1, 4), (1.5, 6))]
    assert logistic_fit(few) is None


# --- the benchmark's chart ------------------------------------------------------------------------


def _bench_results() -> dict[str, Any]:
    """Every section's shape, as bench.json holds it, with made-up figures."""
    from bench_node import CLIENTS, FLOORS  # noqa: PLC0415
    from bench_telemetry import TELEMETRY_CASES  # noqa: PLC0415

    def spread(n: int) -> dict[str, float]:
        return {"p50_ms": 0.5 + 0.1 * n, "p99_ms": 2.0 + n}

    names = ["floor sync (1 master)", "redlock sync (5 masters)", "redlock sync (5 masters, 1 hung)"]
    ways = ["redis-py Lock (1 node)", "redlock wake-up", "redlock polling"]
    levels = ["1", "10", "100", "1000"]
    return {
        "machine": {"summary": "x86_64, 2 CPUs, Python 3.11, servers on CPU 1, client on CPU 0"},
        "latency": {name: spread(n) for n, name in enumerate(names)},
        "primitives": {f"semaphore (limit {n}) sync": spread(n) for n in (1, 3)},
        "contention": {way: {"throughput_per_s": 500.0 + 100 * n} for n, way in enumerate(ways)},
        "handoff": {way: {"handoff": spread(n)} for n, way in enumerate(ways)},
        "scale": {
            api: {
                c: {"redlock": {"ops_per_s": 1000.0 * i}, "floor": {"ops_per_s": 2000.0 * i}}
                for i, c in enumerate(levels, start=1)
            }
            for api in ("asyncio", "sync")
        },
        "node": {
            "rows": {
                c: {k: {"ops_per_s": 1000.0 * i} for k in ("node-redlock", *CLIENTS, *FLOORS)}
                for i, c in enumerate(levels, start=1)
            }
        },
        "native": {"rows": {"extend, Valkey": spread(1), "release, Valkey": spread(2)}},
        "telemetry": {api: {case: spread(n) for n, case in enumerate(TELEMETRY_CASES)} for api in ("sync", "asyncio")},
    }


def test_the_benchmark_chart_keeps_its_legends_off_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight panels, three to a row; every legend outside its panel, no text over another,
    and nothing past the figure's edge."""
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parent.parent / "benchmarks"))
    from bench import chart_figure  # noqa: PLC0415

    figure = chart_figure(_bench_results(), dpi=DPI)
    shown = [ax for ax in figure.axes if ax.get_visible()]
    assert len(shown) == 8
    assert len({round(ax.get_position().x0, 3) for ax in shown}) == 3
    assert assert_legends_outside(figure) == 7
    assert_no_text_overlaps(figure)
    assert_not_squeezed(figure)
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    whole = figure.bbox
    for ax in shown:
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            assert whole.x0 <= box.x0
            assert box.x1 <= whole.x1 + 1


# --- the verdict, long runs, clocks -------------------------------------------------------------


def _quiet_history(seconds: float, locks: int = 3) -> History:
    """Holders taking turns on ``locks`` names for ``seconds``, none at once; faults all along."""
    make = _Maker()
    clients = ["c1", "c2", "c3", "c4"]
    for lane in range(locks):
        t = 0.1 * lane
        n = 0
        while t < seconds - 1:
            make.hold(clients[(n + lane) % 4], f"L{lane + 1}", t, t + 0.6)
            t += 0.9
            n += 1
    kinds = ["blackhole", "latency", "kill", "pause", "client-pause", "crash-restart"]
    for n in range(int(seconds * 1.5)):
        start = 0.3 + n / 1.5
        make.fault(kinds[n % len(kinds)], ["c1-E", "c2-C", "A", "B", "c3", "E"][n % 6], start, start + 0.3)
    return make.history()


def test_a_run_that_missed_its_expected_violation_says_mismatch_in_red() -> None:
    """An UNSAFE set, no violation found: the title says MISMATCH in a failure's red, and
    so does the footer; nothing on either picture says "no violation found" in green."""
    history = _quiet_history(10.0)
    timeline, over_time, violations = _explore_figures(history)
    assert violations == []
    title = assert_says(timeline, "MISMATCH")
    # (On a line of its own when the whole would not fit over the plot.)
    assert title.replace("\n", ": ").startswith("MISMATCH (expected UNSAFE, no violation found): explore unsafe-clock")
    (footer,) = timeline.texts
    assert footer.get_text() == "no violation found: MISMATCH, expected UNSAFE"
    assert to_hex(footer.get_color()) == FAILURE_COLOUR
    assert_says(over_time, "MISMATCH")
    colours = {to_hex(t.get_color()) for f in (timeline, over_time) for t, _ in _texts(f)}
    assert PASS_COLOUR not in colours


@pytest.mark.parametrize("seconds", [60.0, 120.0])
def test_a_long_run_keeps_its_lanes_apart(seconds: float) -> None:
    """At a minute and more the figure grows: each holder lane keeps at least a quarter
    inch, labels do not print over each other."""
    history = _quiet_history(seconds)
    figure = timeline_figure(history, check_all(history), judgement=judge_run("SAFE", "SAFE"), title="long", dpi=DPI)
    assert figure.get_figwidth() > 11
    main = figure.axes[0]
    (_, top), (_, bottom) = main.transData.transform([(0, 0), (0, 1)])
    assert abs(top - bottom) / DPI >= 0.25
    assert_says(figure, "PASS")
    assert_not_squeezed(figure)


def test_clock_offsets_follow_each_fault_kind() -> None:
    make = _Maker()
    make.fault("clock-rate", "C", 1.0, 3.0, "x1.05")
    make.fault("clock-jump", "A", 2.0, 4.0, "bare majority; +1.5s")
    make.fault("clock-slew", "B", 0.0, 2.0, "x1 to x1.1 over 2s")
    make.fault("clock-jump", "D,E", 1.0, 2.0, "0.5")
    make.hold("c1", "L1", 0.0, 5.0)
    windows = make.history().fault_windows()

    def at(path: list[tuple[float, float]], when: float) -> float:
        """The offset at a corner of the path (or after it, where the path is flat)."""
        return [v for t, v in path if t <= when][-1]

    real = clock_offsets(windows, T0, T0 + 5.0)
    assert at(real["C"][0], 1.0) == pytest.approx(0)
    assert at(real["C"][0], 3.0) == pytest.approx(100)
    assert at(real["C"][0], 5.0) == pytest.approx(100)  # the lead stays
    assert at(real["A"][0], 3.0) == pytest.approx(1500)
    assert at(real["A"][0], 4.5) == pytest.approx(0)  # stepped back
    assert at(real["B"][0], 5.0) == pytest.approx(100)  # a ramp to x1.1 over 2 s gains 0.1 s
    assert at(real["D, E"][0], 3.0) == pytest.approx(0)
    simulated = clock_offsets(windows, T0, T0 + 5.0, jumps_step_back=False)
    assert at(simulated["D, E"][0], 3.0) == pytest.approx(500)  # the simulator's jump stays


def test_a_judgement_names_its_word_by_expectation() -> None:
    assert judge_run("SAFE", "SAFE").word == "PASS"
    assert judge_run("SAFE", "UNSAFE").word == "FAIL"
    assert judge_run("UNSAFE", "SAFE").word == "MISMATCH"
    assert judge_run("UNSAFE", "UNSAFE", checks_passed=False).word == "FAIL"
    assert judge_run("SAFE", "SAFE", error="boom").word == "ERROR"
    assert Judgement("FAIL", "SAFE", "UNSAFE").colour == FAILURE_COLOUR
    with pytest.raises(ValueError, match="expected"):
        judge_run("MAYBE", "SAFE")


# --- the simulator's pictures ----------------------------------------------------------------------


def test_sim_explore_draws_trials_rates_and_its_counterexample() -> None:
    summary = search.explore("unsafe-clock", 12, 11)
    assert summary["violations"]
    figures = explore_figures(summary, dpi=DPI)
    assert sorted(figures) == ["counterexample.png", "rates.png", "trials.png"]
    for figure in figures.values():
        assert_says(figure, "PASS")
        assert_not_squeezed(figure)
    over = summary["over_trials"]
    assert sum(over["violations"]) == summary["violations"]
    # One row for every trial, then two a fault kind, each naming its counts.
    rates = figures["rates.png"].axes[0]
    labels = [t.get_text() for t in rates.get_yticklabels()]
    assert labels[0] == f"all trials ({summary['violations']}/{summary['trials']})"
    for kind, shares in summary["by_fault_kind"].items():
        assert shares["with"]["trials"] + shares["without"]["trials"] == summary["trials"]
        assert f"with {kind} ({shares['with']['violations']}/{shares['with']['trials']})" in labels
    # The counterexample as the real harness draws a run, its clock jump in the clock panel.
    counterexample = figures["counterexample.png"]
    assert counterexample.axes[0].get_xlabel() == "simulated seconds"
    assert "clock offset ms" in [ax.get_ylabel() for ax in counterexample.axes]


def test_sim_explore_of_an_unsafe_set_without_a_violation_says_mismatch() -> None:
    trials = 5
    share = {"trials": trials, "violations": 0, "low": 0.0, "high": 0.43}
    summary = {
        "set": "unsafe-clock", "expected": "UNSAFE", "seed": 1, "trials": trials, "violations": 0,
        "rate": {"value": 0.0, "low": 0.0, "high": 0.43},
        "by_fault_kind": {"clock-jump": {"with": share, "without": {**share, "trials": 0}}},
        "over_trials": {"width": 1, "violations": [0] * trials},
    }  # fmt: skip
    figures = explore_figures(summary, dpi=DPI)
    assert sorted(figures) == ["rates.png", "trials.png"]
    for figure in figures.values():
        assert_says(figure, "MISMATCH")


def test_the_phase_diagram_says_whether_it_agrees_with_theory() -> None:
    surface = search.SURFACES["clock-rate", "ttl"]
    points = []
    for x in (1.0, 1.02, 1.05):
        for y in (0.25, 0.5):
            violations = 3 if surface.unsafe(x, y) else 0
            points.append({"x": x, "y": y, "trials": 6, "violations": violations, "rate": violations / 6,
                           "theory": "UNSAFE" if surface.unsafe(x, y) else "SAFE"})  # fmt: skip
    document = {"x": "clock-rate", "y": "ttl", "points": points}
    assert_says(surface_figure(document, dpi=DPI), "PASS")
    points[0]["violations"] = 1  # at x1.0, where theory allows none
    assert_says(surface_figure(document, dpi=DPI), "FAIL")
