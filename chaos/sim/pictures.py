"""The simulator's pictures: what ``sim explore`` and ``sim sweep --by`` write beside their JSON.

Where it sits: beside :mod:`chaos.sim.cli`, which writes them, and above
:mod:`chaos.sim.search` and :mod:`chaos.sim.trial`, whose documents and trials it draws. Drawn with
matplotlib's Agg backend (no pyplot state); each title starts with the verdict against the
expectation, as every picture of the harness does (:func:`chaos.timeline.verdict_title`).

``sim explore`` (:func:`explore_figures`), the simulator's counterparts of the real
harness's ``timeline.png`` and ``over-time.png``:

* ``trials.png``: the violating share over the trials, as they were added (the running
  share with its 95 % Wilson interval, and each bin of trials' own share), so one sees
  whether the rate had settled;
* ``rates.png``: the violating share of the trials whose schedule had each fault kind and
  of those whose schedule did not, each with its Wilson interval, beside the whole
  family's: which faults the violations go with;
* ``counterexample.png``: the shrunk counterexample, played again, as the real harness's
  timeline (:func:`chaos.timeline.timeline_figure`), masters' clocks included.

``sim sweep X --by Y`` (:func:`surface_figure`): ``sweep.png``, the phase diagram.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..judgement import FAILURE_COLOUR, judge_run, judge_sweep
from ..schedule import Schedule
from ..sweep import wilson_interval
from ..timeline import timeline_figure, verdict_title
from .families import SURFACES
from .trial import run_trial

__all__ = ["explore_figures", "surface_figure", "write_explore_pictures", "write_surface"]

_RATE_COLOUR = "#1f77b4"


def explore_figures(summary: dict[str, Any], *, dpi: float = 80) -> dict[str, Figure]:
    """The pictures of a ``sim explore`` summary, by file name (``counterexample.png``
    only when a trial violated)."""
    judgement = judge_run(summary["expected"], "UNSAFE" if summary["violations"] else "SAFE")
    run = f"sim {summary['set']} (seed {summary['seed']}): {summary['violations']}/{summary['trials']} trials violated"
    figures = {"trials.png": _trials(summary, judgement, run, dpi), "rates.png": _rates(summary, judgement, run, dpi)}
    example = summary.get("counterexample")
    if example is not None:
        figures["counterexample.png"] = _counterexample(summary, example, dpi)
    return figures


def write_explore_pictures(summary: dict[str, Any], out: str | pathlib.Path) -> list[pathlib.Path]:
    """:func:`explore_figures`, saved in ``out``; the paths written."""
    paths = []
    for name, figure in explore_figures(summary).items():
        path = pathlib.Path(out) / name
        figure.savefig(str(path), format="png")
        paths.append(path)
    return paths


def _figure(width: float, height: float, dpi: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


def _trials(summary: dict[str, Any], judgement: Any, run: str, dpi: float) -> Figure:
    over = summary["over_trials"]
    width, bins, trials = over["width"], over["violations"], summary["trials"]
    figure = _figure(10, 4, dpi)
    ax = figure.add_subplot(1, 1, 1)
    ends = [min((i + 1) * width, trials) for i in range(len(bins))]
    sizes = [end - i * width for i, end in enumerate(ends)]
    each = f"share in each bin of {width} trial{'s' * (width != 1)}"
    ax.bar(
        [i * width + size / 2 for i, size in enumerate(sizes)], [v / n for v, n in zip(bins, sizes, strict=True)],
        width=[0.9 * n for n in sizes], color=FAILURE_COLOUR, alpha=0.35, label=each,
    )  # fmt: skip
    running, lows, highs = [], [], []
    seen = 0
    for violations, end in zip(bins, ends, strict=True):
        seen += violations
        low, high = wilson_interval(seen, end)
        running.append(seen / end)
        lows.append(low)
        highs.append(high)
    ax.fill_between(ends, lows, highs, color=_RATE_COLOUR, alpha=0.2, linewidth=0, label="95 % Wilson interval")
    ax.plot(ends, running, color=_RATE_COLOUR, linewidth=1.5, label="share of the trials so far")
    top = max([*highs, *(v / n for v, n in zip(bins, sizes, strict=True)), 0.01])
    ax.set_ylim(0, min(1.0, top * 1.15))
    ax.set_xlim(0, trials)
    ax.set_xlabel("trials")
    ax.set_ylabel("violating trials / trials")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    verdict_title(ax, judgement, run)
    figure.tight_layout()
    return figure


def _rates(summary: dict[str, Any], judgement: Any, run: str, dpi: float) -> Figure:
    """One row for the whole family, then two per fault kind (with it, without it)."""
    rate = summary["rate"]
    rows = [(f"all trials ({summary['violations']}/{summary['trials']})", rate["value"], rate["low"], rate["high"])]
    for kind, shares in summary["by_fault_kind"].items():
        for side in ("with", "without"):
            share = shares[side]
            if share["trials"]:
                label = f"{side} {kind} ({share['violations']}/{share['trials']})"
                rows.append((label, share["violations"] / share["trials"], share["low"], share["high"]))
    figure = _figure(10, 1.4 + 0.28 * len(rows), dpi)
    ax = figure.add_subplot(1, 1, 1)
    ys = list(range(len(rows)))
    values = [value for _, value, _, _ in rows]
    ax.errorbar(
        values, ys, xerr=[[v - low for _, v, low, _ in rows], [high - v for _, v, _, high in rows]], fmt="o",
        capsize=3, color=_RATE_COLOUR, label="violating trials / trials,\n95 % Wilson interval",
    )  # fmt: skip
    ax.axvline(rate["value"], color="#7f7f7f", linestyle="--", linewidth=1, label="all trials")
    ax.set_yticks(ys, [label for label, _, _, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, min(1.0, max(high for _, _, _, high in rows) * 1.1 + 0.01))
    ax.set_xlabel("violating trials / trials, by the fault kinds in the trial's schedule")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    verdict_title(ax, judgement, run)
    figure.tight_layout()
    return figure


def _counterexample(summary: dict[str, Any], example: dict[str, Any], dpi: float) -> Figure:
    """The shrunk schedule played again with its workload seed, as ``sim replay`` plays it."""
    schedule = Schedule.from_dict(example["schedule"])
    result = run_trial(schedule, int(example["seed"]))
    assert result.history is not None  # (run_trial keeps it)
    judgement = judge_run(summary["expected"], "UNSAFE" if result.violated else "SAFE")
    ops = len(schedule.ops)
    title = f"sim {summary['set']}: counterexample, trial {example['trial']} shrunk to {ops} op{'s' * (ops != 1)}"
    return timeline_figure(
        result.history,
        result.verdict,
        judgement=judgement,
        title=title,
        origin=0.0,
        footer=[*dataclasses.replace(result.verdict, origin=0.0).violations, *result.leftovers],
        xlabel="simulated seconds",
        jumps_step_back=False,
        dpi=dpi,
    )


def surface_figure(document: dict[str, Any], *, dpi: float = 110) -> Figure:
    """The phase diagram: each grid point coloured by its violation rate, theory's boundary
    on top, points with no violation ringed; titled with the sweep's verdict against
    theory (:func:`chaos.report.judge_sweep`)."""
    surface = SURFACES[document["x"], document["y"]]
    points = document["points"]
    figure = _figure(7, 4.5, dpi)
    ax = figure.add_subplot(1, 1, 1)
    darkest = max([p["rate"] for p in points] + [0.01])
    scatter = ax.scatter(
        [p["x"] for p in points], [p["y"] for p in points], c=[p["rate"] for p in points], cmap="viridis_r",
        vmin=0.0, vmax=darkest, s=260, marker="s",
        edgecolors=["white" if p["violations"] == 0 else "none" for p in points],
    )  # fmt: skip
    ys = sorted({p["y"] for p in points})
    low, high = ys[0], ys[-1]
    fine = [low + (high - low) * i / 200 for i in range(201)]
    ax.plot([surface.boundary(v) for v in fine], fine, color="red", linewidth=2, label=f"theory: {surface.theory}")
    for p in points:
        ink = "white" if p["rate"] > darkest / 2 else "black"  # (readable on the dark squares)
        ax.annotate(
            f"{p['violations']}/{p['trials']}", (p["x"], p["y"]), fontsize=6, ha="center", va="center", color=ink
        )
    ax.set_xlabel(surface.x_label)
    ax.set_ylabel(surface.y_label)
    xs = sorted({p["x"] for p in points})
    # (A margin even for a grid one point wide: matplotlib refuses an empty range.)
    x_margin, y_margin = (xs[-1] - xs[0]) * 0.06 or 0.05, (high - low) * 0.08 or 0.05
    ax.set_xlim(xs[0] - x_margin, xs[-1] + x_margin)
    ax.set_ylim(low - y_margin, high + y_margin)
    figure.colorbar(scatter, ax=ax, label="violating trials / trials")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, frameon=False)
    verdict_title(ax, judge_sweep(points), f"simulated: {surface.y_label} x {surface.x_label}", fontsize=8)
    figure.tight_layout()
    return figure


def write_surface(document: dict[str, Any], path: str | pathlib.Path) -> None:
    """:func:`surface_figure`, saved as a PNG at ``path``."""
    surface_figure(document).savefig(str(path), format="png")
