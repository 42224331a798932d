"""The elastic-tiers report: per-phase percentiles over the successful requests, failures
counted, and the replica timeline reduced to its changes; rendered as two tables."""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Console

from pdserve.bench.elastic import render
from pdserve.bench.elastic_report import Change, Sample, changes, summarize_phase
from pdserve.bench.models import RequestResult


def _result(
    i: int, ttft: float, gaps: tuple[float, ...], error: str | None = None
) -> RequestResult:
    return RequestResult(
        index=i, request_class="elastic", start_s=0.0, e2e_s=1.0, ttft_s=ttft,
        chunk_gaps_s=gaps, prompt_tokens=10, completion_tokens=4, cached_tokens=0, text="",
        error=error,
    )  # fmt: skip


def test_a_phase_summary_counts_failures_and_takes_percentiles_of_the_rest() -> None:
    results = [
        _result(0, 0.1, (0.05,)),
        _result(1, 0.3, (0.05, 0.2)),
        _result(2, 9.0, (9.0,), "HTTP 502"),
    ]
    s = summarize_phase("decode-heavy", 10.0, 60.0, results)
    assert (s.requests, s.failed) == (3, 1)
    assert s.ttft_p50_s is not None and abs(s.ttft_p50_s - 0.2) < 1e-9
    assert (
        s.itl_p99_s is not None and 0.05 < s.itl_p99_s <= 0.2
    )  # the failed request's 9 s excluded
    idle = summarize_phase("idle", 70.0, 30.0, [])
    assert (idle.requests, idle.ttft_p99_s) == (0, None)


def test_the_timeline_keeps_only_changes_per_pool() -> None:
    samples = [
        Sample(0.0, {"prefill": 1, "decode": 1}, {"prefill": 1, "decode": 1}),
        Sample(2.0, {"prefill": 1, "decode": 1}, {"prefill": 2, "decode": 1}),
        Sample(4.0, {"prefill": 1, "decode": 1}, {"prefill": 2, "decode": 1}),
        Sample(6.0, {"prefill": 2, "decode": 1}, {"prefill": 2, "decode": 1}),
    ]
    assert changes(samples) == [
        Change(0.0, "decode", 1, 1), Change(0.0, "prefill", 1, 1),
        Change(2.0, "prefill", 1, 2), Change(6.0, "prefill", 2, 2),
    ]  # fmt: skip


def test_the_report_renders_both_tables() -> None:
    phase = summarize_phase("prefill-heavy", 0.0, 90.0, [_result(0, 1.5, (0.05,))])
    report = {"phases": [asdict(phase)], "changes": [asdict(Change(12.0, "prefill", 1, 2))]}
    console = Console(record=True, width=120)
    console.print(render(report))
    text = console.export_text()
    assert "prefill-heavy" in text and "1.500" in text and "Replicas per pool" in text
