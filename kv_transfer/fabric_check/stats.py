"""Latency percentiles and bandwidth of one transfer size (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BYTES_PER_GB = 1e9  # bandwidth is reported in decimal GB/s, like link speeds


@dataclass(frozen=True)
class TimingSummary:
    """Statistics of repeated transfers of one size.

    `bandwidth_gbps` is the median of the per-transfer bandwidths (bytes / latency), so one
    slow outlier does not move it; `latency_p99_s` over fewer than 100 samples is, in effect,
    close to the slowest sample.
    """

    num_bytes: int
    num_samples: int
    latency_p50_s: float
    latency_p99_s: float
    bandwidth_gbps: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), numpy's linear interpolation between closest ranks.
    Raises ValueError on an empty sequence or q outside 0..100."""
    if not values:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside 0..100")
    return float(np.percentile(np.asarray(values, dtype=float), q))


def summarize(num_bytes: int, latencies_s: Sequence[float]) -> TimingSummary:
    """Summary of `latencies_s` (seconds per transfer of `num_bytes`).

    Raises ValueError when there are no samples or a latency is not positive (a timer that
    did not advance would give an infinite bandwidth).
    """
    if not latencies_s:
        raise ValueError(f"no timed transfers of {num_bytes} bytes")
    if min(latencies_s) <= 0.0:
        raise ValueError(f"a transfer of {num_bytes} bytes took no measurable time")
    bandwidths = [num_bytes / t / BYTES_PER_GB for t in latencies_s]
    return TimingSummary(
        num_bytes=num_bytes,
        num_samples=len(latencies_s),
        latency_p50_s=percentile(latencies_s, 50.0),
        latency_p99_s=percentile(latencies_s, 99.0),
        bandwidth_gbps=percentile(bandwidths, 50.0),
    )


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; raises ValueError when the denominator is not positive."""
    if denominator <= 0.0:
        raise ValueError(f"ratio with a non-positive denominator {denominator}")
    return numerator / denominator
