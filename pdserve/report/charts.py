"""Charts as SVG text, drawn with matplotlib's object API (pure: no pyplot, no global state).

Every function takes plain numbers and returns one `<svg>` element as a string, with the text
kept as text (`svg.fonttype: none`: smaller, searchable, selectable) and stable element ids
(`svg.hashsalt`), so two renders of the same data are the same bytes. Marked elements carry a
`gid` the report's browser check looks for: `p50-marker`, `p99-marker`, `event-marker`.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from pdserve.report.page import fmt_s

MAX_CDF_POINTS = 600
"""A CDF is drawn through at most this many points: evenly spaced ranks, plus every point of
the top 1 % (the tail the p99 marker sits in), so a 100,000-gap ITL CDF stays a small path."""
WIDTH_IN, HEIGHT_IN = 7.0, 3.6
_SVG_STYLE: dict[Any, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "pdserve-report",
    "font.size": 9.0,
}
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
STAGE_COLOURS = {
    "router_queue": "#9e9e9e",
    "prefill_queue": "#ffbb78",
    "prefill": "#ff7f0e",
    "prefill_hops": "#c49c94",
    "kv_transfer": "#d62728",
    "decode_first_token": "#aec7e8",
    "decode_hops": "#c5b0d5",
    "decode": "#1f77b4",
}


def _figure(height_in: float = HEIGHT_IN) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(WIDTH_IN, height_in), layout="constrained")
    return fig, fig.add_subplot()


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context(_SVG_STYLE):
        fig.savefig(buf, format="svg", metadata={"Date": None})  # no timestamp: same bytes
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: inlined in HTML


def cdf_points(values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, cumulative fraction) thinned to at most MAX_CDF_POINTS points."""
    x = np.sort(np.asarray(values, dtype=float))
    y = np.arange(1, len(x) + 1) / len(x)
    if len(x) <= MAX_CDF_POINTS:
        return x, y
    tail = max(1, len(x) // 100)
    head = np.linspace(0, len(x) - tail - 1, MAX_CDF_POINTS - min(tail, MAX_CDF_POINTS // 2))
    keep = np.unique(np.concatenate([head.astype(int), np.arange(len(x) - tail, len(x))]))
    return x[keep], y[keep]


def cdf_svg(title: str, xlabel: str, series: Mapping[str, Sequence[float]]) -> str:
    """One CDF per series (label → samples), with its p50 and p99 marked and named in the
    legend. Series without samples are left out; a log x-axis when p1 to p99 spans 30×."""
    fig, ax = _figure()
    drawn = {k: v for k, v in series.items() if len(v)}
    for i, (label, values) in enumerate(drawn.items()):
        colour = PALETTE[i % len(PALETTE)]
        x, y = cdf_points(values)
        p50, p99 = np.percentile(values, [50, 99])
        ax.step(
            x,
            y,
            where="post",
            color=colour,
            linewidth=1.4,
            label=f"{label}: p50 {fmt_s(p50)}, p99 {fmt_s(p99)}",
        )
        for q, value, marker in ((0.5, p50, "o"), (0.99, p99, "D")):
            (point,) = ax.plot(
                [value], [q], marker=marker, color=colour, markersize=6, linestyle="none"
            )
            point.set_gid(f"p{round(q * 100)}-marker")
    for q in (0.5, 0.99):
        ax.axhline(q, color="#bbbbbb", linewidth=0.6, linestyle=":")
    if drawn:
        # The bulk's spread decides (p1 to p99): a few near-zero gaps of chunks that arrived
        # back to back must not squeeze every curve into the axis' last decade.
        low = min(float(np.percentile(v, 1)) for v in drawn.values())
        high = max(float(np.percentile(v, 99)) for v in drawn.values())
        if low > 0 and high / low > 30:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(loc="lower right", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
    ax.set(title=title, xlabel=xlabel, ylabel="fraction of samples", ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    return _svg(fig)


@dataclass(frozen=True)
class Event:
    """A moment to mark on a time series (seconds on its x-axis)."""

    at_s: float
    label: str


def over_time_svg(
    title: str,
    ylabel: str,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    events: Sequence[Event] = (),
    *,
    points: bool = False,
    xlabel: str = "seconds from the phase's start",
) -> str:
    """Lines (or dots, `points`) of y over time per series (label → (x, y)), with each event
    a labelled vertical line."""
    fig, ax = _figure()
    for i, (label, (xs, ys)) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        if points:
            rare = len(xs) < 50  # a few fallbacks or failures among many: drawn larger
            ax.scatter(
                xs,
                ys,
                s=18 if rare else 6,
                color=colour,
                alpha=0.9 if rare else 0.6,
                label=label,
                linewidths=0,
                zorder=3 if rare else 2,
            )
        else:
            ax.plot(xs, ys, color=colour, linewidth=1.3, label=label, drawstyle="steps-post")
    for event in events:
        line = ax.axvline(event.at_s, color="black", linewidth=1.2, linestyle="--")
        line.set_gid("event-marker")
        ax.annotate(
            event.label,
            (event.at_s, 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 4),
            textcoords="offset points",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.8},
        )
    if series:
        ax.legend(loc="upper left", fontsize=8, markerscale=2)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return _svg(fig)


def per_second(
    times_s: Sequence[float], end_s: float, bin_s: float | None = None
) -> tuple[list[float], list[float]]:
    """Events per second in bins from 0 to `end_s`, as a step series (x, rate) that closes
    its last bin. `bin_s` None: 1 s, or finer for a run shorter than 30 s (at least 0.1 s)."""
    if bin_s is None:
        bin_s = 1.0 if end_s >= 30 else max(0.1, round(end_s / 30, 1))
    bins = max(1, int(end_s // bin_s) + 1)
    counts = [0] * bins
    for t in times_s:
        counts[min(bins - 1, max(0, int(t // bin_s)))] += 1
    rates = [c / bin_s for c in counts]
    return [i * bin_s for i in range(bins + 1)], [*rates, rates[-1]]


@dataclass(frozen=True)
class TimelineRow:
    """One request's bar: its label, when it started (s) and its stages in path order."""

    label: str
    start_s: float
    stages: Sequence[tuple[str, float]]


def timeline_svg(title: str, rows: Sequence[TimelineRow]) -> str:
    """A stacked horizontal bar per request (its stages end to end from its start), one
    colour per stage, the first request on top."""
    fig, ax = _figure(max(2.4, 0.9 + 0.2 * len(rows)))
    seen: set[str] = set()
    for y, row in enumerate(rows):
        left = row.start_s
        for stage, seconds in row.stages:
            label = stage if stage not in seen else None
            seen.add(stage)
            ax.barh(
                y,
                seconds,
                left=left,
                height=0.7,
                label=label,
                color=STAGE_COLOURS.get(stage, "#7f7f7f"),
            )
            left += seconds
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set(title=title, xlabel="seconds from the phase's start")
    if seen:
        fig.legend(loc="outside lower center", fontsize=7, ncols=4)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


@dataclass(frozen=True)
class Bar:
    """One bar group member: value with an optional (low, high) error range."""

    value: float | None
    low: float | None = None
    high: float | None = None


def grouped_bars_svg(
    title: str,
    xlabel: str,
    groups: Mapping[str, Mapping[str, Bar]],
    *,
    reference: float | None = None,
) -> str:
    """Horizontal bars side by side per group (group → series → bar), the first group on
    top; a bar with a range gets an error bar; `reference` draws a vertical line (e.g. 1.0
    for ratios)."""
    names = list(dict.fromkeys(s for bars in groups.values() for s in bars))
    fig, ax = _figure(max(2.4, 1.0 + 0.12 * len(groups) * max(1, len(names))))
    height = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        ys: list[float] = []
        xs: list[float] = []
        errs: list[list[float]] = [[], []]
        for g, bars in enumerate(groups.values()):
            bar = bars.get(name)
            if bar is None or bar.value is None:
                continue
            ys.append(g + (i - (len(names) - 1) / 2) * height)
            xs.append(bar.value)
            errs[0].append(bar.value - bar.low if bar.low is not None else 0.0)
            errs[1].append(bar.high - bar.value if bar.high is not None else 0.0)
        has_err = any(errs[0]) or any(errs[1])
        ax.barh(
            ys,
            xs,
            height,
            label=name,
            color=PALETTE[i % len(PALETTE)],
            xerr=errs if has_err else None,
            capsize=3,
        )
    ax.set_yticks(range(len(groups)), list(groups), fontsize=8)
    ax.invert_yaxis()
    if reference is not None:
        ax.axvline(reference, color="black", linewidth=0.8, linestyle=":")
    if names:
        ax.legend(fontsize=8, loc="best")
    ax.set(title=title, xlabel=xlabel)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def stacked_steps_svg(
    title: str,
    steps: Sequence[int],
    parts: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    breaks: Sequence[int],
) -> str:
    """Stacked bars per step: per part (in stacking order) its cached tokens (pale) then its
    computed tokens (solid), in the part's own colour; the number of cache breaks of
    a step is written above its bar."""
    fig, ax = _figure()
    bottom = np.zeros(len(steps))
    for i, (part, (cached, computed)) in enumerate(parts.items()):
        colour = PALETTE[i % len(PALETTE)]
        ax.bar(
            steps,
            cached,
            bottom=bottom,
            label=f"{part} cached",
            color=colour,
            alpha=0.35,
        )
        bottom += np.asarray(cached, dtype=float)
        ax.bar(steps, computed, bottom=bottom, label=f"{part} computed", color=colour)
        bottom += np.asarray(computed, dtype=float)
    for step, top, count in zip(steps, bottom, breaks, strict=True):
        if count:
            mark = ax.annotate(
                f"{count} break{'s' if count > 1 else ''}",
                (step, top),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                fontsize=7,
                color="#d62728",
            )
            mark.set_gid("event-marker")
    ax.set(title=title, xlabel="agent step", ylabel="prompt tokens per request (mean)")
    if parts:
        ax.legend(fontsize=7, ncols=2)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)
