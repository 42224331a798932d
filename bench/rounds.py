"""Whether a run's rounds agree with each other: each round's percentile of one deployment
(pure).

`pdserve bench --rounds N` measures every deployment N times, alternating them, and pools the
rounds. On a shared machine the host's speed can move between rounds by more than sampling
explains (bench/intervals.py gives the sampling part): the same deployment's TTFT p50 or
TPOT p50 differing by 1.5x between its two rounds has been measured on this project's CPU
VMs. `pdserve simulate --measured` shows each round's value beside the prediction, so a
reader can tell the machine's drift between rounds from the model's error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pdserve.bench.intervals import PERCENTILE_FIELD, request_values
from pdserve.bench.report import PolicyReport
from pdserve.bench.stats import percentile


def round_values(
    report: PolicyReport, request_class: str | None, field: str
) -> tuple[float, ...] | None:
    """The percentile `field` (e.g. "ttft_p50_s", "itl_p99_s") of each round's successful
    requests of `request_class` (None: all), in round order, pooled within a round as the
    report's own percentiles are. None when the report kept no requests, has fewer than two
    rounds with such requests, or `field` is not a TTFT, ITL, TPOT or E2E percentile."""
    match = PERCENTILE_FIELD.match(field)
    if match is None or not report.requests:
        return None
    metric, q = match.group(1), float(match.group(2))
    by_round: dict[int, list[float]] = {}
    for r in report.requests:
        if r.error is None and (request_class is None or r.request_class == request_class):
            by_round.setdefault(r.round_index, []).extend(request_values(r, metric))
    values = [percentile(v, q) for _, v in sorted(by_round.items()) if v]
    present = tuple(v for v in values if v is not None)
    return present if len(present) >= 2 else None


def round_rates(report: PolicyReport) -> tuple[float, ...] | None:
    """Successful requests per second of each round (from its first start to its last end),
    in round order; None without kept requests in two rounds."""
    by_round: dict[int, list[tuple[float, float, bool]]] = {}
    for r in report.requests or ():
        by_round.setdefault(r.round_index, []).append(
            (r.start_s, r.start_s + r.e2e_s, r.error is None)
        )
    rates = []
    for _, rows in sorted(by_round.items()):
        span = max(end for _, end, _ in rows) - min(start for start, _, _ in rows)
        if span > 0:
            rates.append(sum(ok for _, _, ok in rows) / span)
    return tuple(rates) if len(rates) >= 2 else None


def spread(values: Sequence[float]) -> float | None:
    """max / min of the rounds' values (None without two positive values)."""
    positive = [v for v in values if v > 0]
    if len(positive) < 2:
        return None
    return max(positive) / min(positive)


def round_speed_sigma(reports: Iterable[PolicyReport]) -> float | None:
    """How far the host's speed moved between the rounds of a run: the standard deviation
    of log(TPOT p50) of each deployment's rounds about that deployment's mean, pooled over
    `reports` (degrees of freedom: rounds - 1 per deployment). A decode step's time is what a
    slower host stretches first, and TPOT p50 is a round's most precise number, so its
    round-to-round spread is the host's (with a little sampling noise on top). None when no
    report has two rounds with TPOTs."""
    squares, dof = 0.0, 0
    for report in reports:
        values = [v for v in round_values(report, None, "tpot_p50_s") or () if v > 0]
        if len(values) < 2:
            continue
        logs = [math.log(v) for v in values]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    return math.sqrt(squares / dof) if dof else None
