"""Percentiles, summaries and ratios (pure). None means "no data", never zero."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks
    (`numpy.percentile`'s default method, "linear"); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return None
    return float(np.percentile(values, q))


@dataclass(frozen=True)
class Summary:
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


def summarize(values: Sequence[float]) -> Summary:
    return Summary(
        count=len(values),
        mean=sum(values) / len(values) if values else None,
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p99=percentile(values, 99),
    )


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def ratio(new: float | None, base: float | None) -> float | None:
    """new ÷ base; None when either is missing or base is zero."""
    if new is None or base is None or base == 0:
        return None
    return new / base


def rate(count: float, seconds: float) -> float | None:
    """count / seconds; None for a zero-length interval."""
    return count / seconds if seconds > 0 else None


def sig3(value: float | None) -> str:
    """Three significant digits for tables (`-` for no data; thousands without exponent)."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    text = f"{value:#.3g}"  # keeps trailing zeros: 1.00, 0.120
    return text[:-1] if text.endswith(".") else text
