"""The report's data (pure): the `BenchReport` models and the metrics of one set of requests.

`BenchReport` is both what the tables show and, via `model_dump_json`, the `--json` file
(schema_version 1); `build_metrics` computes a `Metrics` (percentiles, throughput, goodput,
timeline stages) over any set of requests. The whole report is assembled from a run's phases in
`report_build.py` (per policy, per class, per step, agent runs, ratios). Every metric is None
when it has no data (e.g. all requests failed), never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import RequestResult
from pdserve.bench.stats import mean, rate, summarize
from pdserve.router.timeline import STAGES

SCHEMA_VERSION = 1
CLIENT_OVERHEAD = "client_overhead"
"""The pseudo-stage of `Metrics.stages` outside the router's timeline (see build_stages)."""


class ReportModel(BaseModel):
    """Base of the bench's JSON reports: a misspelt field in a report read back is an error."""

    model_config = ConfigDict(extra="forbid")


class StageStats(ReportModel):
    """One stage of pdserve's per-request timeline over a set of requests (seconds)."""

    num_requests: int
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None


class Metrics(ReportModel):
    """Latency percentiles (seconds), throughput and goodput of a set of requests. `stages`:
    pdserve's timeline stages (router_queue, prefill, kv_transfer, ...) over the successful
    requests that reported one, in path order; None against other servers."""

    num_requests: int
    num_errors: int
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p90_s: float | None
    itl_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p90_s: float | None
    e2e_p99_s: float | None
    requests_per_s: float | None
    output_tokens_per_s: float | None
    goodput_fraction: float | None
    goodput_per_s: float | None
    prompt_tokens_mean: float | None
    stages: dict[str, StageStats] | None = None


class PartMeans(ReportModel):
    """One prompt part's tokens per request: from the prefix cache, and computed."""

    cached_mean: float
    computed_mean: float


class StepRow(ReportModel):
    """Agent workload: one step, averaged over agents (and rounds). The prompt-cost fields
    are None when the server reports no `pdserve_prompt_cost`."""

    step: int
    num_requests: int
    prompt_tokens_mean: float | None
    cached_tokens_mean: float | None
    prefill_s_mean: float | None
    decode_s_mean: float | None
    parts: dict[str, PartMeans] | None = None
    """Per part (system, user, assistant, tool, template), means over the step's requests."""
    num_cache_breaks: int | None = None
    """The step's requests whose prompt departed from their conversation's previous one."""
    cache_break_at: list[str] | None = None
    """Where they broke, most common first: `message INDEX (ROLE)`."""
    lost_tokens_mean: float | None = None
    """Tokens per break the previous step had computed that this one recomputed."""


class AgentStepRecord(ReportModel):
    """One agent's step as the server reported it (the input of `pdserve context whatif`)."""

    step: int
    prompt_tokens: int | None
    cached_tokens: int | None
    messages: list[dict[str, Any]] | None
    """Per message segment: `index`, `role`, `tokens` (None: no per-message cost)."""
    cache_break: dict[str, Any] | None


class AgentRunRecord(ReportModel):
    """One agent's successful steps in one phase, in order."""

    agent: int
    round_index: int
    steps: list[AgentStepRecord]


class ErrorSample(ReportModel):
    message: str
    status: int | None
    count: int


class RequestRecord(ReportModel):
    """One request as the client measured it (seconds; `start_s` from its phase's start), for
    analysis beyond the percentiles: confidence intervals of a percentile, a distribution's
    shape. `stages`: pdserve's timeline (empty against other servers); `error`: None for a
    success."""

    round_index: int
    request_class: str
    start_s: float
    ttft_s: float | None
    e2e_s: float
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    chunk_gaps_s: list[float]
    stages: dict[str, float]
    error: str | None = None


class PolicyReport(Metrics):
    """One policy, pooled over its rounds. Token totals are sums over all requests;
    `cached_tokens_total` is None when the server reports no cached tokens."""

    num_phases: int
    wall_s: float
    prompt_tokens_total: int
    cached_tokens_total: int | None
    prefilled_tokens_total: int | None
    final_context_tokens_total: int | None = None
    classes: dict[str, Metrics] | None = None
    steps: list[StepRow] | None = None
    agent_runs: list[AgentRunRecord] | None = None
    errors: list[ErrorSample]
    requests: list[RequestRecord] | None = None
    """Every request of every round, in order (None in reports written before they were
    kept)."""


class BenchReport(ReportModel):
    schema_version: int = SCHEMA_VERSION
    workload: str
    url: str
    model: str
    config: dict[str, Any]
    calibration: dict[str, float] | None
    policies: dict[str, PolicyReport]
    ratios: dict[str, dict[str, Any]]
    interrupted: bool
    notes: list[str]


def is_good(r: RequestResult, cfg: BenchConfig) -> bool:
    """Meets both SLOs (a request with fewer than two tokens has no TPOT to miss)."""
    if not r.ok or r.ttft_s is None or r.ttft_s > cfg.slo_ttft_s:
        return False
    return r.tpot_s is None or r.tpot_s <= cfg.slo_tpot_s


def build_metrics(results: Sequence[RequestResult], wall_s: float, cfg: BenchConfig) -> Metrics:
    ok = [r for r in results if r.ok]
    ttft = summarize([r.ttft_s for r in ok if r.ttft_s is not None])
    itl = summarize([g for r in ok for g in r.chunk_gaps_s])
    tpot = summarize([t for r in ok if (t := r.tpot_s) is not None])
    e2e = summarize([r.e2e_s for r in ok])
    num_good = sum(is_good(r, cfg) for r in results)
    return Metrics(
        num_requests=len(results),
        num_errors=len(results) - len(ok),
        ttft_mean_s=ttft.mean,
        ttft_p50_s=ttft.p50,
        ttft_p90_s=ttft.p90,
        ttft_p99_s=ttft.p99,
        itl_p50_s=itl.p50,
        itl_p90_s=itl.p90,
        itl_p99_s=itl.p99,
        tpot_p50_s=tpot.p50,
        tpot_p90_s=tpot.p90,
        tpot_p99_s=tpot.p99,
        e2e_p50_s=e2e.p50,
        e2e_p90_s=e2e.p90,
        e2e_p99_s=e2e.p99,
        requests_per_s=rate(len(ok), wall_s),
        output_tokens_per_s=rate(sum(r.completion_tokens or 0 for r in ok), wall_s),
        goodput_fraction=num_good / len(results) if results else None,
        goodput_per_s=rate(num_good, wall_s),
        prompt_tokens_mean=mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
        stages=build_stages(ok),
    )


def build_stages(ok: Sequence[RequestResult]) -> dict[str, StageStats] | None:
    """Per stage of pdserve's timeline: how many requests reported it and its percentiles
    (a request that skipped a stage, e.g. a local prefill's `prefill`, is not counted), plus
    `client_overhead`: the TTFT this client saw minus the router's stages up to the first
    token (HTTP in and out of the router, the client's own work)."""
    by_stage: dict[str, list[float]] = {}
    for r in ok:
        for name, seconds in r.stages:
            by_stage.setdefault(name, []).append(seconds)
        if r.stages and r.ttft_s is not None:
            router_ttft = sum(v for name, v in r.stages if name != "decode")
            by_stage.setdefault(CLIENT_OVERHEAD, []).append(max(0.0, r.ttft_s - router_ttft))
    if not by_stage:
        return None
    order = {name: i for i, name in enumerate(STAGES)}
    out = {}
    for name in sorted(by_stage, key=lambda n: (order.get(n, len(order)), n)):
        values = by_stage[name]
        sm = summarize(values)
        out[name] = StageStats(num_requests=len(values), p50_s=sm.p50, p90_s=sm.p90, p99_s=sm.p99)
    return out
