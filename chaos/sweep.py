"""``python -m chaos sweep``: where the boundary lies between safe and unsafe, per parameter.

A sweep runs a short scripted trial (a few seconds, real masters and clients) ``T`` times
for each value of one parameter and counts the trials with a violation. Each parameter
moves the scenario across a threshold that theory predicts, stated with it below; the
violation probability (with its 95 % Wilson interval) should be ~0 on the safe side and
rise on the other. Output, in ``--out``: ``sweep.json``, ``sweep.png`` (:func:`sweep_figure`)
and each trial's files in ``trials/``.

The parameters (``drift`` is ``ttl * clock_drift_factor + 2 ms``, the library's allowance):

``clock-rate`` (master C's clock rate ``r``, the K3 partitions, ttl 2 s)
    C expires c1's key ``ttl / r`` after setting it, c1 relies on it until
    ``ttl - drift`` after its acquire began: two holders iff ``ttl (1 - 1/r) > drift``,
    i.e. ``r > 1 / (1 - f - 0.002 / ttl)`` (1.0112 for f = 0.01, ttl 2 s).
``pause`` (holder pause, as a share ``p`` of the validity left when it stops)
    c1 stops between its validity check and its write; its keys outlive its validity by
    ``drift`` plus its acquire's round trip, then c2 (retrying every ~20 ms) takes the lock
    and writes. c1's late write loses c2's increment iff ``p > 1 + (drift + elapsed) / v``:
    the threshold is 1 (plus about 1 %).
``restart-delay`` (C, killed right after c1's acquire, comes back empty after ``d * ttl``; ttl 2 s)
    c2 gets C, D, E as soon as C is back; two holders iff that is before c1's deadline,
    ``d < 1 - f - (restart + reconnect) / ttl``: below 0.99 by theory, a little lower in
    practice since the restart and c2's first reconnect take time.
``drift-factor`` (the clients' ``clock_drift_factor`` ``f``, C's clock at x1.03, ttl 2 s)
    the clock-rate condition solved for f: two holders iff ``f < 1 - 1/r - 0.002 / ttl``
    (0.0281 at r = 1.03).
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .runner import Params, Run, Scenario, run_scenario
from .scenarios import LOCK, clock_rate_trial, restart_after

__all__ = [
    "PARAMETERS",
    "Parameter",
    "clopper_pearson_interval",
    "logistic_fit",
    "margin_fit",
    "plot_sweep",
    "run_sweep",
    "sweep_figure",
    "wilson_interval",
]

_Z95 = 1.959963984540054
_EXPIRY_PRECISION = 0.002
_DEFAULT_DRIFT_FACTOR = 0.01
#: C's clock rate in the drift-factor sweep.
DRIFT_SWEEP_RATE = 1.03


def wilson_interval(successes: int, trials: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (95 % by default).

    Unlike the normal approximation it stays within [0, 1] and is not empty at 0 or
    ``trials`` successes, which is where a sweep's points mostly are. With no trials it is
    [0, 1]: nothing is known.
    """
    if not isinstance(successes, int) or not isinstance(trials, int):
        raise TypeError("successes and trials must be integers")
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, not successes={successes}, trials={trials}")
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a positive number, not {z!r}")
    if trials == 0:
        return 0.0, 1.0
    n = trials
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # At 0 or n successes the bound on that side is exactly p; rounding must not cross it.
    low = 0.0 if successes == 0 else max(0.0, min(p, centre - half))
    high = 1.0 if successes == n else min(1.0, max(p, centre + half))
    return low, high


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in logs (n in the millions, k anywhere)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(n + 1)
    # Beyond 40 standard deviations the terms add nothing a float can hold: far above the
    # mean the sum is 1, and below the mean less 40 of them it can start.
    spread = 40 * math.sqrt(n * p * (1 - p))
    if k >= n * p + spread:
        return 1.0
    first = max(0, k - int(2 * spread) - 50)
    terms = [
        log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q for i in range(first, k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def clopper_pearson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval for a binomial proportion: conservative where
    Wilson's is approximate, which matters at a handful of violations in a million trials.

    Each bound is the p at which the observed count sits on the tail ``(1 - confidence) / 2``,
    found by bisection on the binomial distribution (no statistics library needed)."""
    if not isinstance(successes, int) or not isinstance(trials, int):
        raise TypeError("successes and trials must be integers")
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, not successes={successes}, trials={trials}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}")
    if trials == 0:
        return 0.0, 1.0
    tail = (1.0 - confidence) / 2

    def solve(below: Callable[[float], bool]) -> float:
        # The p where ``below`` turns from True to False, to 1e-12.
        low, high = 0.0, 1.0
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if below(middle) else (low, middle)
        return (low + high) / 2

    n, k = trials, successes
    # Lower bound: P(X >= k) = tail, i.e. 1 - cdf(k - 1) = tail; upper: cdf(k) = tail.
    low = 0.0 if k == 0 else solve(lambda p: 1.0 - _binomial_cdf(k - 1, n, p) < tail)
    high = 1.0 if k == n else solve(lambda p: _binomial_cdf(k, n, p) > tail)
    return low, high


# --- the trials -----------------------------------------------------------------------------


def _pause_trial(run: Run, share: float, ttl: float) -> None:
    """c1 acquires, reads, checks its validity and stops for ``share`` of the validity it
    has left; c2 keeps trying meanwhile and, once it holds, does its read-modify-write;
    then c1 is continued and writes."""
    c1, c2 = run.clients(["c1", "c2"], retry_delay=0.02)
    got = c1.call("acquire", name=LOCK, ttl=ttl, timeout=ttl)
    if not run.expect(got["ok"], "c1 acquires"):
        return
    c1.call("read", name=LOCK)
    stale = c1.submit("write", name=LOCK, pause="before")
    c1.wait_stopped()
    stopped = time.monotonic()
    pause = share * max(0.0, float(got["deadline"]) - stopped)
    run.metric("pause", pause)
    other = c2.submit("cycle", name=LOCK, ttl=ttl, timeout=max(pause, 0.01))
    run.sleep_until(stopped + pause)
    c1.resume()
    stale.result()
    c1.call("release", name=LOCK)
    other.result()


@dataclass(frozen=True)
class Parameter:
    """One sweepable parameter: its trial, the theory's threshold and on which side of it
    violations are expected."""

    name: str
    label: str
    ttl: float
    defaults: tuple[float, ...]
    #: True when values above the threshold are the unsafe ones.
    unsafe_above: bool
    threshold: Callable[[float], float]
    trial: Callable[[Run, float, float], None]
    clocked: bool = False
    proxies: bool = False
    theory: str = ""
    #: The trial's smallest margin on the masters (chaos.margins) moves with the value and
    #: crosses 0 at the threshold, so :func:`margin_fit` can place it. Not so for a pause
    #: (c1's keys expire on time; its write is what comes late) or a restart's delay
    #: (the key is lost at the kill, whenever C comes back).
    margins: bool = False

    def unsafe(self, value: float) -> bool:
        """Whether theory predicts violations at ``value``."""
        limit = self.threshold(self.ttl)
        return value > limit if self.unsafe_above else value < limit


def _drift(ttl: float, factor: float = _DEFAULT_DRIFT_FACTOR) -> float:
    return ttl * factor + _EXPIRY_PRECISION


PARAMETERS: dict[str, Parameter] = {
    p.name: p
    for p in (
        Parameter(
            "clock-rate",
            "master C's clock rate",
            ttl=2.0,
            defaults=(1.0, 1.005, 1.02, 1.05, 1.1),
            unsafe_above=True,
            threshold=lambda ttl: 1 / (1 - _drift(ttl) / ttl),
            trial=lambda run, value, ttl: clock_rate_trial(run, value, ttl=ttl),
            clocked=True,
            proxies=True,
            theory="two holders iff ttl * (1 - 1/r) > drift, i.e. r > 1 / (1 - drift / ttl)",
            margins=True,
        ),
        Parameter(
            "pause",
            "holder pause / validity left",
            ttl=1.0,
            defaults=(0.5, 0.9, 1.2, 1.5, 2.0),
            unsafe_above=True,
            threshold=lambda ttl: 1.0,
            trial=_pause_trial,
            theory="a stale write iff the pause outlasts the validity (and the keys' drift margin)",
        ),
        Parameter(
            "restart-delay",
            "restart delay / ttl",
            ttl=2.0,
            defaults=(0.25, 0.5, 0.75, 1.0, 1.25),
            unsafe_above=False,
            threshold=lambda ttl: 1 - _drift(ttl) / ttl,
            trial=lambda run, value, ttl: restart_after(run, value * ttl, ttl=ttl),
            proxies=True,
            theory="two holders iff C is back (empty) before c1's validity ends: d < 1 - drift / ttl",
        ),
        Parameter(
            "drift-factor",
            f"clock_drift_factor (C at x{DRIFT_SWEEP_RATE:g})",
            ttl=2.0,
            defaults=(0.0, 0.01, 0.02, 0.04, 0.06),
            unsafe_above=False,
            threshold=lambda ttl: 1 - 1 / DRIFT_SWEEP_RATE - _EXPIRY_PRECISION / ttl,
            trial=lambda run, value, ttl: clock_rate_trial(run, DRIFT_SWEEP_RATE, ttl=ttl, drift=value),
            clocked=True,
            proxies=True,
            theory="two holders iff f < 1 - 1/r - 0.002 / ttl",
            margins=True,
        ),
    )
}


def _trial_scenario(parameter: Parameter, value: float, ttl: float) -> Scenario:
    def script(run: Run) -> None:
        parameter.trial(run, value, ttl)

    return Scenario(
        number="S",
        name=f"{parameter.name}-{value:g}",
        title=f"{parameter.label} = {value:g}",
        expected="UNSAFE" if parameter.unsafe(value) else "SAFE",
        script=script,
        clocked=parameter.clocked,
        proxies=parameter.proxies,
    )


def run_sweep(
    name: str,
    values: Sequence[float],
    trials: int,
    out_dir: str | pathlib.Path,
    *,
    seed: int = 1,
    nodes: int = 5,
    ttl: float | None = None,
    progress: Callable[[str], None] | None = None,
    plot: bool = True,
) -> dict[str, Any]:
    """Run ``trials`` trials per value of parameter ``name``; returns what ``sweep.json`` holds."""
    if name not in PARAMETERS:
        raise ValueError(f"parameter must be one of {', '.join(PARAMETERS)}, not {name!r}")
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, not {trials!r}")
    if not values or not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
        raise ValueError(f"values must be finite numbers, not {values!r}")
    parameter = PARAMETERS[name]
    ttl = parameter.ttl if ttl is None else ttl
    say = progress or (lambda _message: None)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points: list[dict[str, Any]] = []
    for value in values:
        violated = errors = 0
        margins: list[float] = []
        for trial in range(trials):
            params = Params(seed=seed * 1000 + trial, quick=True, nodes=nodes)
            result = run_scenario(
                _trial_scenario(parameter, value, ttl), params, out / "trials" / f"{value:g}-{trial + 1}", plot=False
            )
            if result.error is not None:
                errors += 1
            elif result.verdict is not None and not result.verdict.safe:
                violated += 1
            smallest = None if result.margins is None else result.margins.smallest
            if result.error is None and smallest is not None:
                margins.append(smallest.margin)
            say(f"{name}={value:g} trial {trial + 1}/{trials}: {result.observed}")
        counted = trials - errors
        low, high = wilson_interval(violated, counted)
        points.append({
            "value": value,
            "trials": counted,
            "errors": errors,
            "violations": violated,
            "probability": violated / counted if counted else None,
            "low": low,
            "high": high,
            "theory": "UNSAFE" if parameter.unsafe(value) else "SAFE",
            "margins": margins,
        })  # fmt: skip
    fit = logistic_fit(points)
    document = {
        "parameter": name,
        "label": parameter.label,
        "ttl": ttl,
        "threshold": parameter.threshold(ttl),
        "unsafe_above": parameter.unsafe_above,
        "theory": parameter.theory,
        "seed": seed,
        "nodes": nodes,
        "points": points,
        # The boundary two ways: where P(violation) is 1/2 on the logistic curve (needs
        # trials that went both ways near it), and where the trials' margins cross 0.
        "binary_fit": None if fit is None or fit[1] == 0 else {"threshold": -fit[0] / fit[1], "a": fit[0], "b": fit[1]},
        "margin_fit": margin_fit(points) if parameter.margins else None,
    }
    (out / "sweep.json").write_text(json.dumps(document, indent=1, allow_nan=False), encoding="utf-8")
    if plot:
        plot_sweep(document, out / "sweep.png")
    return document


#: A logistic curve is fitted only to this many values or more, of which at least
#: :data:`FIT_MIN_MIXED` had trials that went both ways. With fewer mixed ones the most
#: likely curve is a step (infinitely steep) at a place never measured.
FIT_MIN_VALUES = 5
FIT_MIN_MIXED = 2


def logistic_fit(points: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """``(a, b)`` of ``P(violation) = 1 / (1 + exp(-(a + b x)))`` by maximum likelihood
    over the points' trials (Newton's method), or None when the points cannot carry a curve
    (fewer than :data:`FIT_MIN_VALUES` values, or fewer than :data:`FIT_MIN_MIXED` whose
    trials went both ways)."""
    counted = [p for p in points if p["trials"]]
    if len({p["value"] for p in counted}) < FIT_MIN_VALUES:
        return None
    if len({p["value"] for p in counted if 0 < p["violations"] < p["trials"]}) < FIT_MIN_MIXED:
        return None
    # Centred and scaled, so that one step size suits any parameter's range.
    xs = [float(p["value"]) for p in counted]
    centre = sum(xs) / len(xs)
    scale = (max(xs) - min(xs)) or 1.0
    us = [(x - centre) / scale for x in xs]

    def log_likelihood(a: float, b: float) -> float:
        total = 0.0
        for p, u in zip(counted, us, strict=True):
            z = a + b * u
            # log q and log (1 - q), without overflow for a steep curve.
            total -= p["violations"] * _softplus(-z) + (p["trials"] - p["violations"]) * _softplus(z)
        return total

    a = b = 0.0
    for _ in range(200):
        grad_a = grad_b = h_aa = h_ab = h_bb = 0.0
        for p, u in zip(counted, us, strict=True):
            q = _sigmoid(a + b * u)
            n, k = p["trials"], p["violations"]
            grad_a += k - n * q
            grad_b += (k - n * q) * u
            w = n * q * (1 - q)
            h_aa, h_ab, h_bb = h_aa + w, h_ab + w * u, h_bb + w * u * u
        det = h_aa * h_bb - h_ab * h_ab
        if det <= 1e-12:
            return None
        step_a = (h_bb * grad_a - h_ab * grad_b) / det
        step_b = (h_aa * grad_b - h_ab * grad_a) / det
        # Halved until the likelihood grows: a full Newton step overshoots on a steep curve.
        before = log_likelihood(a, b)
        shrink = 1.0
        while shrink > 1e-6 and log_likelihood(a + shrink * step_a, b + shrink * step_b) < before:
            shrink /= 2
        a, b = a + shrink * step_a, b + shrink * step_b
        if shrink * (abs(step_a) + abs(step_b)) < 1e-9:
            break
    return a - b * centre / scale, b / scale


#: A margin line is fitted to at least this many trials' margins, over two values or more.
MARGIN_FIT_MIN = 3


def margin_fit(points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The value at which the trials' smallest margins cross 0, by least squares on every
    trial's (value, margin): a margin is a distance to the boundary, so each trial places
    it, where a violation only says on which side it was. Returns the line (``slope``,
    ``intercept``), its zero (``threshold``) with a standard error (the delta method), and
    how many margins it used; None with fewer than :data:`MARGIN_FIT_MIN` margins, fewer
    than two values, or a flat line."""
    pairs = [(float(p["value"]), float(m)) for p in points for m in p.get("margins", ())]
    if len(pairs) < MARGIN_FIT_MIN or len({x for x, _ in pairs}) < 2:
        return None
    n = len(pairs)
    mean_x = sum(x for x, _ in pairs) / n
    mean_y = sum(y for _, y in pairs) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in pairs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in pairs) / sxx
    intercept = mean_y - slope * mean_x
    if slope == 0 or not math.isfinite(slope):
        return None
    root = -intercept / slope
    residual = sum((y - intercept - slope * x) ** 2 for x, y in pairs)
    sd = math.sqrt(residual / (n - 2)) if n > 2 else 0.0
    stderr = sd * math.sqrt(1 / n + (root - mean_x) ** 2 / sxx) / abs(slope)
    return {"threshold": root, "stderr": stderr, "slope": slope, "intercept": intercept, "margins": n}


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-max(-50.0, min(50.0, z))))


def _softplus(z: float) -> float:
    """``log(1 + exp(z))``, exact for large ``z`` too."""
    return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))


def sweep_figure(document: dict[str, Any], *, dpi: float = 80) -> Any:
    """The violation probability per value, each point with its 95 % Wilson interval and no
    line between points (a line would suggest values never measured); a logistic curve
    over the measured range where :func:`logistic_fit` gives one, else the gap between
    the last value without a violation and the first with one, shaded; the theory's
    threshold; the legend outside the plot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 (only for a picture)
    from matplotlib.figure import Figure  # noqa: PLC0415

    from .judgement import judge_sweep  # noqa: PLC0415
    from .timeline import verdict_title  # noqa: PLC0415

    points = [p for p in document["points"] if p["probability"] is not None]
    figure = Figure(figsize=(8.5, 4), dpi=dpi)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot(1, 1, 1)
    xs = [p["value"] for p in points]
    ys = [p["probability"] for p in points]
    errors = [
        [y - p["low"] for y, p in zip(ys, points, strict=True)],
        [p["high"] - y for y, p in zip(ys, points, strict=True)],
    ]
    ax.errorbar(
        xs, ys, yerr=errors, fmt="o", capsize=4, color="#1f77b4", label="violations / trials,\n95 % Wilson interval"
    )
    fit = logistic_fit(points)
    if fit is not None:
        a, b = fit
        low, high = min(xs), max(xs)
        grid = [low + (high - low) * i / 200 for i in range(201)]
        ax.plot(
            grid, [_sigmoid(a + b * x) for x in grid], "-", color="#1f77b4",
            alpha=0.5, label=f"logistic fit ({len(points)} values)",
        )  # fmt: skip
    else:
        gap = _boundary_gap(points, unsafe_above=document["unsafe_above"])
        if gap is not None:
            ax.axvspan(
                *gap, color="#999999", alpha=0.15, linewidth=0, label="the boundary lies here\n(not measured inside)"
            )
    ax.axvline(
        document["threshold"], color="red", linestyle="--", label=f"theory's threshold {document['threshold']:.4g}"
    )
    margin = document.get("margin_fit")
    if margin is not None:
        ax.axvline(
            margin["threshold"], color="#2ca02c", linestyle=":",
            label=f"margins cross 0 at {margin['threshold']:.4g}\n({margin['margins']} trials' margins)",
        )  # fmt: skip
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel(f"{document['label']} (ttl {document['ttl']:g}s)")
    ax.set_ylabel("P(violation)")
    trials = max((p["trials"] for p in points), default=0)
    verdict_title(
        ax, judge_sweep(points), f"sweep {document['parameter']}: {trials} trials per value (seed {document['seed']})"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    figure.tight_layout()
    return figure


def _boundary_gap(points: Sequence[dict[str, Any]], *, unsafe_above: bool) -> tuple[float, float] | None:
    """From the first value with a violation (going from the safe side towards the unsafe
    one) back to the last value before it with none, if both exist."""
    ordered = sorted(points, key=lambda p: p["value"] if unsafe_above else -p["value"])
    broken = next((i for i, p in enumerate(ordered) if p["violations"] > 0), None)
    clean = [p["value"] for p in ordered[: broken or 0] if p["violations"] == 0]
    if broken is None or not clean:
        return None
    ends = (clean[-1], ordered[broken]["value"])
    return min(ends), max(ends)


def plot_sweep(document: dict[str, Any], path: str | pathlib.Path) -> None:
    """:func:`sweep_figure`, saved as a PNG at ``path``."""
    sweep_figure(document).savefig(str(path), format="png")
