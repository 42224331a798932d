"""How precisely a run pins its percentiles: confidence intervals over its requests (pure).

A p99 of 300 requests is about its third-slowest request; a second run of the same workload
on the same machine can give a quite different one. When each request gives one value (TTFT,
TPOT, E2E) the interval is the distribution-free one from order statistics: the ranks between
which the true percentile lies with the given confidence (binomial). When a request gives
several values that move together (its stream's chunk gaps for ITL) the requests are
resampled whole (a percentile bootstrap). Either way it is the spread that sampling alone
explains, not the machine's drift between runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from pdserve.bench.models import tpot_s
from pdserve.bench.report import PolicyReport, RequestRecord

CONFIDENCE = 0.95
RESAMPLES = 1000
BATCH_VALUES = 4_000_000
"""Values resampled at once (32 MB of floats), whatever the run's size."""

PERCENTILE_FIELD = re.compile(r"^(ttft|itl|tpot|e2e)_p(\d+)_s$")
"""A report field that is a percentile: (metric, q)."""


def percentile_interval(
    per_request: Sequence[Sequence[float]],
    q: float,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The `confidence` interval of the `q`-th percentile (0..100) of the pooled values:
    `order_statistic_interval` when every request gives one value, else `bootstrap_interval`
    (requests resampled whole). None without values."""
    if not 0 <= q <= 100 or not 0 < confidence < 1:
        raise ValueError(f"need 0 <= q <= 100 and 0 < confidence < 1, got {q}, {confidence}")
    groups = [v for v in per_request if len(v)]
    if not groups:
        return None
    if all(len(g) == 1 for g in groups):
        return order_statistic_interval([g[0] for g in groups], q, confidence=confidence)
    return bootstrap_interval(groups, q, confidence=confidence, resamples=resamples, seed=seed)


def order_statistic_interval(
    values: Sequence[float], q: float, *, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """[x_(l), x_(u)] of the sorted values, with ranks from Binomial(n, q/100) so that the
    true percentile of independent draws lies between them with at least `confidence`; a
    rank past either end is that end (300 values cannot bound a p99 above their maximum)."""
    x = np.sort(np.asarray(values, dtype=float))
    n, p = len(x), q / 100
    tail = (1 - confidence) / 2
    if p in (0.0, 1.0):  # the sample's extreme is all n values can say
        end = float(x[0] if p == 0 else x[-1])
        return end, end
    k = np.arange(n + 1)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_pmf = (
        log_factorial[n]
        - log_factorial[k]
        - log_factorial[n - k]
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )
    cdf = np.cumsum(np.exp(log_pmf))
    # The true percentile is below x_(j) (1-based) when at least j draws fall below it.
    low_rank = int(np.searchsorted(cdf, tail, side="left"))  # P(B < l) <= tail
    high_rank = int(np.searchsorted(cdf, 1 - tail, side="left")) + 1
    return float(x[max(0, low_rank - 1)]), float(x[min(n - 1, high_rank - 1)])


def bootstrap_interval(
    per_request: Sequence[Sequence[float]],
    q: float,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap's interval, resampling requests with all their values."""
    # One row per request, padded with +inf: a resample is a set of rows; sorted, its valid
    # values come first, and its percentile interpolates between the closest ranks of them
    # (numpy.percentile's "linear" method on the values pooled).
    padded = np.full((len(per_request), max(len(g) for g in per_request)), np.inf)
    lengths = np.array([len(g) for g in per_request])
    for i, g in enumerate(per_request):
        padded[i, : len(g)] = g
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(per_request), size=(resamples, len(per_request)))
    batch = max(1, BATCH_VALUES // padded.size)  # resamples at a time: bounded memory
    estimates = []
    for start in range(0, resamples, batch):
        chosen = picks[start : start + batch]
        rows = np.sort(padded[chosen].reshape(len(chosen), -1), axis=1)
        last = lengths[chosen].sum(axis=1) - 1  # index of each resample's largest value
        position = last * q / 100
        below = np.floor(position).astype(int)
        above = np.minimum(below + 1, last)
        low_v = np.take_along_axis(rows, below[:, None], axis=1)[:, 0]
        high_v = np.take_along_axis(rows, above[:, None], axis=1)[:, 0]
        estimates.append(low_v + (high_v - low_v) * (position - below))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(np.concatenate(estimates), [tail, 100 - tail])
    return float(low), float(high)


def measured_interval(
    report: PolicyReport, request_class: str | None, field: str
) -> tuple[float, float] | None:
    """The confidence interval of one of the report's percentiles (`field`, e.g.
    "ttft_p99_s", "itl_p50_s") over its successful requests of `request_class` (None: all),
    from the requests the report kept; None when it kept none or the field is not a TTFT,
    ITL, TPOT or E2E percentile."""
    match = PERCENTILE_FIELD.match(field)
    if match is None or not report.requests:
        return None
    metric, q = match.group(1), float(match.group(2))
    chosen = [
        r
        for r in report.requests
        if r.error is None and (request_class is None or r.request_class == request_class)
    ]
    return percentile_interval([request_values(r, metric) for r in chosen], q)


def request_values(r: RequestRecord, metric: str) -> list[float]:
    """A request's values of `metric` as the report's percentiles pool them (build_metrics)."""
    if metric == "itl":
        return r.chunk_gaps_s
    if metric == "tpot":
        value = tpot_s(r.ttft_s, r.e2e_s, r.completion_tokens)
    else:
        value = r.e2e_s if metric == "e2e" else r.ttft_s
    return [] if value is None else [value]
