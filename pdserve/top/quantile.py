"""Histogram quantiles from cumulative bucket counts, as Prometheus `histogram_quantile` (pure).

Contract of `histogram_quantile(q, buckets)`: `buckets` maps upper bound `le` (float, +inf
included) to the cumulative count up to it (typically the window's bucket deltas). Returns
None when there are no observations, no +Inf bucket, or q is outside [0, 1]. Otherwise it finds
the bucket holding rank q*total and interpolates linearly inside it (the first bucket starts
at 0 when its bound is positive); a rank in the +Inf bucket returns the highest finite bound.
Counts that decrease with `le` (a scrape race) are made monotonic first, as Prometheus does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pdserve.top.scrape import SampleKey, label_values


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of a cumulative histogram (see the module contract)."""
    if not 0.0 <= q <= 1.0 or math.inf not in buckets or len(buckets) < 2:
        return None
    bounds = sorted(buckets)
    counts: list[float] = []
    for le in bounds:
        counts.append(max(buckets[le], counts[-1] if counts else 0.0))
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(bounds) - 1) if counts[i] >= rank), len(bounds) - 1)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count <= 0:
        return end
    return start + (end - start) * (rank / count)


def buckets_by(
    samples: Mapping[SampleKey, float], family: str, by: tuple[str, ...] = ()
) -> dict[tuple[str, ...], dict[float, float]]:
    """`{family}_bucket` samples summed over every label but `by` and `le`, per `by` group.

    E.g. `buckets_by(d, "pdserve_time_to_first_token_seconds", ("input_bucket",))` gives
    {("0-256",): {0.005: 0.0, ..., inf: 12.0}, ...}: the TTFT histogram of each input bucket
    with decisions added together (like `sum by (input_bucket, le)`).
    """
    out: dict[tuple[str, ...], dict[float, float]] = {}
    name = f"{family}_bucket"
    for (sample_name, labels), value in samples.items():
        if sample_name != name:
            continue
        le = dict(labels).get("le")
        if le is None:
            continue
        group = out.setdefault(label_values(labels, by), {})
        bound = float(le)
        group[bound] = group.get(bound, 0.0) + value
    return out


def quantile_of(q: float, samples: Mapping[SampleKey, float], family: str) -> float | None:
    """The q-quantile of `family` over all its label sets (None without observations)."""
    return histogram_quantile(q, buckets_by(samples, family).get((), {}))
