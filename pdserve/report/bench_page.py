"""The report page of a `pdserve bench` run (pure: BenchReport in, Page out).

One page per run, whatever was compared (policies with `--compare`, deployments with
`--deployments`; both are the report's `policies`, in run order, the first the baseline):
- TTFT and ITL CDFs, all requests and per request class, p50/p99 marked, the ratios against
  the baseline in the caption;
- TTFT by send time and completions per second through the run (rounds overlaid: each round's
  phase starts at 0), errors per second where any;
- a stacked timeline of a sample of requests (pdserve's stages: router queue, prefill queue,
  prefill, KV transfer, decode);
- for agent runs, the prompt's cost by part per step with the cache breaks.
"""

from __future__ import annotations

from collections.abc import Sequence

from pdserve.bench.report import BenchReport, PolicyReport, RequestRecord
from pdserve.report.charts import (
    TimelineRow,
    cdf_svg,
    over_time_svg,
    per_second,
    stacked_steps_svg,
    timeline_svg,
)
from pdserve.report.page import Chart, Page, Section, fmt_ratio, fmt_s

TIMELINE_SAMPLE = 24
"""Requests drawn in each policy's stacked timeline (evenly spaced through its first round)."""


def bench_page(report: BenchReport, title: str | None = None) -> Page:
    names = list(report.policies)
    what = "deployments" if report.config.get("deployments") else "policies"
    facts = [
        ("workload", report.workload),
        ("endpoint", f"{report.url} ({report.model})"),
        (what, ", ".join(f"{n} ({p.num_requests} requests)" for n, p in report.policies.items())),
        ("rounds", str(report.config.get("rounds", 1))),
    ]
    if report.interrupted:
        facts.append(("interrupted", "yes: the charts show what completed before Ctrl-C"))
    sections = [distributions(report, names), _over_time(report)]
    if timelines := _timelines(report):
        sections.append(timelines)
    if agent := _agent(report):
        sections.append(agent)
    heading = title or f"pdserve bench: {report.workload}, {' vs '.join(names)}"
    return Page(kind="bench", title=heading, sections=sections, facts=facts)


def _requests(policy: PolicyReport, request_class: str | None = None) -> list[RequestRecord]:
    return [
        r
        for r in policy.requests or []
        if r.error is None and (request_class is None or r.request_class == request_class)
    ]


def _ratio_caption(report: BenchReport, field: str, request_class: str | None) -> str:
    """`B ÷ A: p50 0.61×, p99 0.80×` for every compared policy."""
    parts = []
    for key, values in report.ratios.items():
        scope = (
            values if request_class is None else (values.get("classes") or {}).get(request_class)
        )
        if not scope:
            continue
        p50, p99 = scope.get(f"{field}_p50_s"), scope.get(f"{field}_p99_s")
        parts.append(f"{key.replace('/', ' ÷ ')}: p50 {fmt_ratio(p50)}, p99 {fmt_ratio(p99)}")
    return "; ".join(parts)


def distributions(report: BenchReport, names: Sequence[str]) -> Section:
    classes = sorted({c for p in report.policies.values() for c in (p.classes or {})})
    charts = []
    for request_class in [None, *classes]:
        scope = "all requests" if request_class is None else f"{request_class} requests"
        key = "all" if request_class is None else request_class
        ttft = {
            n: [
                r.ttft_s
                for r in _requests(report.policies[n], request_class)
                if r.ttft_s is not None
            ]
            for n in names
        }
        charts.append(
            Chart(
                key=f"ttft-cdf-{key}",
                svg=cdf_svg(f"TTFT, {scope}", "time to first token (s)", ttft),
                caption=_caption(report, "ttft", request_class),
            )
        )
        if request_class is None or len(classes) > 1:
            itl = {
                n: [g for r in _requests(report.policies[n], request_class) for g in r.chunk_gaps_s]
                for n in names
            }
            charts.append(
                Chart(
                    key=f"itl-cdf-{key}",
                    svg=cdf_svg(f"ITL (gap between stream chunks), {scope}", "gap (s)", itl),
                    caption=_caption(report, "itl", request_class),
                )
            )
    return Section(
        "Distributions",
        charts,
        text="Each curve is one policy or deployment, pooled over its rounds; the circle marks "
        "its p50 and the diamond its p99. The ratios are against the first, measured in the "
        "same run.",
    )


def _caption(report: BenchReport, field: str, request_class: str | None) -> str:
    ratios = _ratio_caption(report, field, request_class)
    if not ratios:
        return ""
    return f"Ratios ({'all requests' if request_class is None else request_class}): {ratios}."


def _over_time(report: BenchReport) -> Section:
    ttft: dict[str, tuple[list[float], list[float]]] = {}
    done: dict[str, tuple[list[float], list[float]]] = {}
    errors: dict[str, tuple[list[float], list[float]]] = {}
    for name, policy in report.policies.items():
        reqs = policy.requests or []
        ok = [r for r in reqs if r.error is None and r.ttft_s is not None]
        ttft[name] = ([r.start_s for r in ok], [r.ttft_s or 0.0 for r in ok])
        end_s = max((r.start_s + r.e2e_s for r in reqs), default=0.0)
        done[name] = per_second([r.start_s + r.e2e_s for r in reqs if r.error is None], end_s)
        failed = [r.start_s + r.e2e_s for r in reqs if r.error is not None]
        if failed:
            errors[name] = per_second(failed, end_s)
    charts = [
        Chart("ttft-over-time", over_time_svg("TTFT by send time", "TTFT (s)", ttft, points=True)),
        Chart(
            "throughput-over-time",
            over_time_svg("Completed requests per second", "requests/s", done),
        ),
    ]
    if errors:
        total = sum(len(p.requests or []) - len(_requests(p)) for p in report.policies.values())
        charts.append(
            Chart(
                "errors-over-time",
                over_time_svg(
                    "Failed requests per second (429s, timeouts, errors)", "errors/s", errors
                ),
                caption=f"Failed requests in all: {total}.",
            )
        )
    return Section(
        "Over time",
        charts,
        text="Every round's phase starts at 0 s, so the rounds of a policy lie on top of each "
        "other: a burst or a stall shows where it happened in the load.",
    )


def _timelines(report: BenchReport) -> Section | None:
    charts = []
    for name, policy in report.policies.items():
        staged = [r for r in _requests(policy) if r.stages and r.round_index == 0]
        if not staged:
            continue
        step = max(1, len(staged) // TIMELINE_SAMPLE)
        sample = sorted(staged[::step][:TIMELINE_SAMPLE], key=lambda r: r.start_s)
        rows = [
            TimelineRow(
                f"{r.request_class} {r.prompt_tokens or '?'} tok",
                r.start_s,
                [(stage, seconds) for stage, seconds in r.stages.items() if seconds > 0],
            )
            for r in sample
        ]
        charts.append(
            Chart(
                f"timeline-{name}",
                timeline_svg(f"{name}: where each request's time went", rows),
                caption=f"{len(sample)} of {len(staged)} requests of round 1, evenly spaced; "
                "each bar starts when the request was sent.",
            )
        )
    if not charts:
        return None
    return Section(
        "Request timelines",
        charts,
        text="pdserve's own timeline of each request (x-pdserve-timing): router queue, prefill "
        "queue, prefill, KV transfer, decode.",
    )


def _agent(report: BenchReport) -> Section | None:
    charts = []
    for name, policy in report.policies.items():
        steps = [s for s in policy.steps or [] if s.parts]
        if not steps:
            continue
        names = list(dict.fromkeys(p for s in steps for p in s.parts or {}))
        stacked: dict[str, tuple[list[float], list[float]]] = {}
        for part in names:
            means = [(s.parts or {}).get(part) for s in steps]
            stacked[part] = (
                [m.cached_mean if m else 0.0 for m in means],
                [m.computed_mean if m else 0.0 for m in means],
            )
        breaks = [s.num_cache_breaks or 0 for s in steps]
        where = sorted({w for s in steps for w in s.cache_break_at or []})
        charts.append(
            Chart(
                f"prompt-cost-{name}",
                stacked_steps_svg(
                    f"{name}: prompt cost by part per step",
                    [s.step for s in steps],
                    stacked,
                    breaks,
                ),
                caption=f"{sum(breaks)} cache break{'' if sum(breaks) == 1 else 's'}"
                + (f" (at {', '.join(where)})" if where else "")
                + f"; prefill per step, mean: {', '.join(fmt_s(s.prefill_s_mean) for s in steps)}.",
            )
        )
    if not charts:
        return None
    return Section(
        "Agent steps",
        charts,
        text="Per step, the mean prompt split by part and by whether the prefix cache held it; "
        "a break is a prompt that departed from its conversation's previous one.",
    )
