"""The validation's bound (issue 16): predicted TTFT and ITL p50 within 15 % of measured,
p99 within 30 %, per request class where the run has classes (pure)."""

from __future__ import annotations

from pdserve.bench.rounds import one_value_holds_all
from pdserve.sim.predict import ComparedRow

P50_TOLERANCE = 0.15
P99_TOLERANCE = 0.30


def bound_of(row: ComparedRow) -> float | None:
    """The row's relative bound (p50 15 %, p99 30 %); None for rows the bound does not cover
    (other metrics; TTFT over all requests when the report has request classes: see
    ComparedRow.bounded)."""
    if not row.bounded or row.field not in ("ttft_p50_s", "itl_p50_s", "ttft_p99_s", "itl_p99_s"):
        return None
    return P50_TOLERANCE if row.field.endswith("p50_s") else P99_TOLERANCE


def within(row: ComparedRow) -> bool | None:
    """Whether a TTFT/ITL prediction is inside its bound (p50 +-15 %, p99 +-30 %); None for
    rows the bound does not cover (`bound_of`) or without both numbers."""
    bound = bound_of(row)
    if row.ratio is None or bound is None:
        return None
    return abs(row.ratio - 1) <= bound


def rounds_hold(row: ComparedRow) -> bool | None:
    """Whether one number can be within the row's bound of every round of the run (see
    pdserve.bench.rounds): False means the run's own rounds are further apart than the bound
    allows, so no prediction can meet it on both. None for unbounded rows or fewer than two
    rounds."""
    bound = bound_of(row)
    if bound is None or row.rounds is None:
        return None
    return one_value_holds_all(row.rounds, bound)
