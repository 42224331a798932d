"""A simulation's results in the bench's own terms (pure): the same `Metrics` (TTFT, ITL,
TPOT, E2E percentiles, throughput, goodput at the SLOs) that `pdserve bench` reports, so a
prediction and a measurement compare field by field."""

from __future__ import annotations

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import RequestResult
from pdserve.bench.report import Metrics, build_metrics
from pdserve.sim.outcome import SimOutcome, SimResult


def as_bench_result(index: int, r: SimResult) -> RequestResult:
    """One simulated request as the bench would have recorded it."""
    return RequestResult(
        index=index,
        request_class=r.request.request_class,
        start_s=r.sent_s,
        e2e_s=r.e2e_s or 0.0,
        ttft_s=r.ttft_s,
        chunk_gaps_s=r.chunk_gaps_s,
        prompt_tokens=r.request.prompt_tokens,
        completion_tokens=r.request.output_tokens,
        cached_tokens=r.cached_tokens,
        stages=tuple((name, max(0.0, seconds)) for name, seconds in r.stages.items()),
        text="",
    )


def sim_metrics(outcome: SimOutcome, slo: BenchConfig) -> tuple[Metrics, dict[str, Metrics]]:
    """(all requests, per request class) metrics; goodput uses `slo.slo_ttft_s` and
    `slo.slo_tpot_s`."""
    results = [as_bench_result(i, r) for i, r in enumerate(outcome.results)]
    classes = sorted({r.request_class for r in results})
    per_class = {
        c: build_metrics([r for r in results if r.request_class == c], outcome.wall_s, slo)
        for c in classes
    }
    return build_metrics(results, outcome.wall_s, slo), per_class
