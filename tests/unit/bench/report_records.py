"""Builders of a bench report's kept requests for the pure tests of what reads them."""

from __future__ import annotations

from pdserve.bench.report import Metrics, PolicyReport, RequestRecord


def record(
    cls: str,
    ttft: float | None,
    *,
    round_index: int = 0,
    e2e_s: float = 1.0,
    gaps: list[float] | None = None,
    error: str | None = None,
) -> RequestRecord:
    """One kept request: 11 tokens from a 10-token prompt, two 50 ms gaps unless `gaps`."""
    return RequestRecord(
        round_index=round_index, request_class=cls, start_s=0.0, ttft_s=ttft, e2e_s=e2e_s,
        prompt_tokens=10, completion_tokens=11, cached_tokens=0,
        chunk_gaps_s=gaps or [0.05, 0.05], stages={}, error=error,
    )  # fmt: skip


def policy_report(records: list[RequestRecord] | None, *, num_phases: int = 1) -> PolicyReport:
    """A policy's report keeping `records`, every percentile left empty."""
    none = {f: None for f in Metrics.model_fields if f not in ("num_requests", "num_errors")}
    return PolicyReport(
        num_requests=len(records or []), num_errors=0, num_phases=num_phases, wall_s=1.0,
        prompt_tokens_total=0, cached_tokens_total=None, prefilled_tokens_total=None,
        errors=[], requests=records, **none,
    )  # fmt: skip
