"""The report: per-policy metrics, per-class and per-step breakdowns, ratios (pure).

`build_report` turns the phases' raw results into `BenchReport`, which is both what the
tables show and, via `model_dump_json`, the `--json` file (schema_version 1). Every metric is
None when it has no data (e.g. all requests failed), never 0.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, ConfigDict

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import PhaseOutcome, RequestResult
from pdserve.bench.prompts import Calibration
from pdserve.bench.stats import mean, rate, ratio, summarize
from pdserve.router.timeline import STAGES

SCHEMA_VERSION = 1
RATIO_FIELDS = (
    "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "tpot_p50_s", "e2e_p50_s",
    "e2e_p99_s", "requests_per_s", "output_tokens_per_s", "goodput_fraction",
)  # fmt: skip
TOKEN_RATIO_FIELDS = ("prompt_tokens_total", "cached_tokens_total", "prefilled_tokens_total")
CLASS_RATIO_FIELDS = ("ttft_p50_s", "ttft_p99_s", "e2e_p99_s", "requests_per_s")
NUM_ERROR_SAMPLES = 10
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


def build_steps(results: Sequence[RequestResult]) -> list[StepRow]:
    by_step: dict[int, list[RequestResult]] = defaultdict(list)
    for r in results:
        if r.ok and r.step is not None:
            by_step[r.step].append(r)
    rows = []
    for step in sorted(by_step):
        rs = by_step[step]
        rows.append(
            StepRow(
                step=step,
                num_requests=len(rs),
                prompt_tokens_mean=mean([r.prompt_tokens for r in rs if r.prompt_tokens]),
                cached_tokens_mean=mean(
                    [r.cached_tokens for r in rs if r.cached_tokens is not None]
                ),
                prefill_s_mean=mean([r.ttft_s for r in rs if r.ttft_s is not None]),
                decode_s_mean=mean([r.e2e_s - r.ttft_s for r in rs if r.ttft_s is not None]),
                **_step_prompt_cost(rs),
            )
        )
    return rows


def _step_prompt_cost(rs: Sequence[RequestResult]) -> dict[str, Any]:
    """StepRow's prompt-cost fields over one step's requests (none without prompt cost)."""
    costs = [r.prompt_cost for r in rs if r.prompt_cost is not None]
    if not costs:
        return {}
    sums: dict[str, list[int]] = {}
    for cost in costs:
        for part, cached, computed in cost.parts:
            acc = sums.setdefault(part, [0, 0])
            acc[0] += cached
            acc[1] += computed
    n = len(costs)
    breaks = [c.cache_break for c in costs if c.cache_break is not None]
    where = Counter(
        f"message {b.message_index} ({b.role})" if b.message_index is not None else b.part
        for b in breaks
    )
    return {
        "parts": {
            p: PartMeans(cached_mean=c / n, computed_mean=u / n) for p, (c, u) in sums.items()
        },
        "num_cache_breaks": len(breaks),
        "cache_break_at": [w for w, _ in where.most_common()],
        "lost_tokens_mean": mean([b.lost_tokens for b in breaks]),
    }


def build_agent_runs(phases: Sequence[PhaseOutcome]) -> list[AgentRunRecord]:
    """Every agent's successful steps per phase, with per-message tokens when reported."""
    runs = []
    for phase in phases:
        by_agent: dict[int, list[RequestResult]] = defaultdict(list)
        for r in phase.results:
            if r.ok and r.agent is not None and r.step is not None:
                by_agent[r.agent].append(r)
        for agent in sorted(by_agent):
            steps = []
            for r in sorted(by_agent[agent], key=lambda r: r.step or 0):
                cost = r.prompt_cost
                steps.append(
                    AgentStepRecord(
                        step=r.step or 0,
                        prompt_tokens=r.prompt_tokens,
                        cached_tokens=r.cached_tokens,
                        messages=[
                            {"index": i, "role": role, "tokens": cached + computed}
                            for i, role, cached, computed in cost.messages
                        ]
                        if cost is not None and cost.messages
                        else None,
                        cache_break=asdict(cost.cache_break)
                        if cost is not None and cost.cache_break is not None
                        else None,
                    )
                )
            runs.append(AgentRunRecord(agent=agent, round_index=phase.round_index, steps=steps))
    return runs


def final_context_tokens(phases: Sequence[PhaseOutcome]) -> int:
    """Sum over agents (of every phase) of the prompt tokens of their last successful step:
    what perfect prefix reuse would prefill."""
    total = 0
    for phase in phases:
        last: dict[int, RequestResult] = {}
        for r in phase.results:
            if (
                r.ok
                and r.agent is not None
                and r.step is not None
                and (r.agent not in last or r.step > (last[r.agent].step or 0))
            ):
                last[r.agent] = r
        total += sum(r.prompt_tokens or 0 for r in last.values())
    return total


def error_samples(results: Sequence[RequestResult]) -> list[ErrorSample]:
    counts = Counter((r.error or "", r.status) for r in results if not r.ok)
    return [
        ErrorSample(message=msg, status=status, count=n)
        for (msg, status), n in counts.most_common(NUM_ERROR_SAMPLES)
    ]


def build_policy_report(phases: Sequence[PhaseOutcome], cfg: BenchConfig) -> PolicyReport:
    results = [r for p in phases for r in p.results]
    wall_s = sum(p.wall_s for p in phases)
    ok = [r for r in results if r.ok]
    prompt_total = sum(r.prompt_tokens or 0 for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    cached_total = sum(cached) if cached else None
    classes = None
    if cfg.workload == "mixed":
        names = sorted({r.request_class for r in results} | {"short", "long"}, reverse=True)
        classes = {
            name: build_metrics([r for r in results if r.request_class == name], wall_s, cfg)
            for name in names
        }
    agent = cfg.workload == "agent"
    return PolicyReport(
        **build_metrics(results, wall_s, cfg).model_dump(),
        num_phases=len(phases),
        wall_s=wall_s,
        prompt_tokens_total=prompt_total,
        cached_tokens_total=cached_total,
        prefilled_tokens_total=None if cached_total is None else prompt_total - cached_total,
        final_context_tokens_total=final_context_tokens(phases) if agent else None,
        classes=classes,
        steps=build_steps(results) if agent else None,
        agent_runs=build_agent_runs(phases) if agent else None,
        errors=error_samples(results),
        requests=[request_record(p.round_index, r) for p in phases for r in p.results],
    )


def request_record(round_index: int, r: RequestResult) -> RequestRecord:
    """One request of round `round_index` as the report keeps it."""
    return RequestRecord(
        round_index=round_index,
        request_class=r.request_class,
        start_s=r.start_s,
        ttft_s=r.ttft_s,
        e2e_s=r.e2e_s,
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
        cached_tokens=r.cached_tokens,
        chunk_gaps_s=list(r.chunk_gaps_s),
        stages=dict(r.stages),
        error=r.error,
    )


def request_result(index: int, q: RequestRecord) -> RequestResult:
    """A kept request back as the bench measured it (its text was not kept): the inverse of
    `request_record`, to rebuild a report's metrics from its kept requests (bench.pool)."""
    return RequestResult(
        index=index,
        request_class=q.request_class,
        start_s=q.start_s,
        e2e_s=q.e2e_s,
        ttft_s=q.ttft_s,
        chunk_gaps_s=tuple(q.chunk_gaps_s),
        prompt_tokens=q.prompt_tokens,
        completion_tokens=q.completion_tokens,
        cached_tokens=q.cached_tokens,
        text="",
        error=q.error,
        stages=tuple(q.stages.items()),
    )


def compute_ratios(policies: dict[str, PolicyReport]) -> dict[str, dict[str, Any]]:
    """`{"B/A": {...}}` for every policy B after the first one A (dict order)."""
    names = list(policies)
    out: dict[str, dict[str, Any]] = {}
    if len(names) < 2:
        return out
    base = policies[names[0]]
    for name in names[1:]:
        new = policies[name]
        values: dict[str, Any] = {f: ratio(getattr(new, f), getattr(base, f)) for f in RATIO_FIELDS}
        for f in TOKEN_RATIO_FIELDS:
            values[f] = ratio(getattr(new, f), getattr(base, f))
        if new.classes is not None and base.classes is not None:
            values["classes"] = {
                cls: {
                    f: ratio(getattr(m, f), getattr(base.classes[cls], f))
                    for f in CLASS_RATIO_FIELDS
                }
                for cls, m in new.classes.items()
                if cls in base.classes
            }
        out[f"{name}/{names[0]}"] = values
    return out


def build_report(
    cfg: BenchConfig,
    model: str,
    calibration: Calibration | None,
    phases: Sequence[PhaseOutcome],
    interrupted: bool,
    notes: Sequence[str] = (),
) -> BenchReport:
    """Group phases by policy (in `--compare` order) or deployment (`--deployments` order;
    a phase's `policy` is then its deployment's name) and build everything."""
    policies = {
        name: build_policy_report([p for p in phases if p.policy == name], cfg)
        for name in cfg.phase_names
        if any(p.policy == name for p in phases)
    }
    return BenchReport(
        workload=cfg.workload,
        url=", ".join(cfg.deployments) if cfg.deployments else cfg.url,
        model=model,
        config=cfg.model_dump(mode="json"),
        calibration=None
        if calibration is None
        else {
            "tokens_per_word": calibration.tokens_per_word,
            "overhead_tokens": calibration.overhead_tokens,
        },
        policies=policies,
        ratios=compute_ratios(policies),
        interrupted=interrupted,
        notes=list(notes),
    )
