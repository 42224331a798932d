"""Assemble the whole report from a run's phases (pure): per policy, per class and per step,
agent runs, error samples, kept requests, and the ratios between policies.

`build_report` turns the phases' raw results into a `BenchReport` (report.py, with the metrics
of one set of requests, `build_metrics`); `bench.main` calls it once per run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from pdserve.bench.config import BenchConfig
from pdserve.bench.models import PhaseOutcome, RequestResult
from pdserve.bench.prompts import Calibration
from pdserve.bench.report import (
    AgentRunRecord,
    AgentStepRecord,
    BenchReport,
    ErrorSample,
    PartMeans,
    PolicyReport,
    RequestRecord,
    StepRow,
    build_metrics,
)
from pdserve.bench.rounds import round_rates, round_values
from pdserve.bench.stats import mean, ratio

ITL_FIELDS = ("itl_p50_s", "itl_p90_s", "itl_p99_s")
"""Inter-token latency beside TTFT in every comparison: what a local prefill or a stalled
decode step costs the streams shows in its tail (p90, p99) before its median."""
RATIO_FIELDS = (
    "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", *ITL_FIELDS, "tpot_p50_s", "e2e_p50_s",
    "e2e_p99_s", "requests_per_s", "output_tokens_per_s", "goodput_fraction",
)  # fmt: skip
TOKEN_RATIO_FIELDS = ("prompt_tokens_total", "cached_tokens_total", "prefilled_tokens_total")
CLASS_RATIO_FIELDS = ("ttft_p50_s", "ttft_p99_s", *ITL_FIELDS, "e2e_p99_s", "requests_per_s")
ROUND_RATIO_FIELDS = ("ttft_p50_s", "ttft_p99_s", *ITL_FIELDS, "e2e_p99_s", "requests_per_s")
"""Ratios also given round by round (with --rounds N, N >= 2): latency percentiles and the
request rate."""
CLASS_ROUND_RATIO_FIELDS = ("ttft_p50_s", "ttft_p99_s", *ITL_FIELDS)
"""Per request class, round by round: TTFT and ITL percentiles."""


def round_ratios(
    new: PolicyReport, base: PolicyReport, request_class: str | None, field: str
) -> list[float] | None:
    """`field`'s ratio new ÷ base within each round (the phases of one round ran back to
    back): the spread beside the pooled ratio. None without two rounds on both sides."""
    if field == "requests_per_s" and request_class is None:
        a, b = round_rates(base), round_rates(new)
    else:
        a, b = round_values(base, request_class, field), round_values(new, request_class, field)
    if a is None or b is None or len(a) != len(b):
        return None
    ratios = [ratio(x, y) for x, y in zip(b, a, strict=True)]
    return [r for r in ratios if r is not None] or None


NUM_ERROR_SAMPLES = 10


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
        rounds: dict[str, list[float]] = {}
        for f in ROUND_RATIO_FIELDS:
            if (per_round := round_ratios(new, base, None, f)) is not None:
                rounds[f] = per_round
        for cls in values.get("classes") or {}:
            for f in CLASS_ROUND_RATIO_FIELDS:
                if (per_round := round_ratios(new, base, cls, f)) is not None:
                    rounds[f"{cls}:{f}"] = per_round
        if rounds:
            values["rounds"] = rounds
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
