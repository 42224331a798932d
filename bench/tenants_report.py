"""What `pdserve bench-tenants` measured, and its checks (pure: no I/O).

`build_report` turns the outcomes of every phase (bench/tenants_load.py) and the router's
per-tenant prefill seconds into a `TenantsReport`; `render` prints it. The checks are the
issue's: B's TTFT p99 with A flooding and sharing on within `max_ttft_ratio` of alone and at
most `max_degradation_share` of the increase with sharing off; no 429 for B; A's 429s (and every
answer of a limited tenant) with well-formed x-ratelimit-* headers; nothing lost; the measured
prefill seconds split by weight within the tolerance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import BaseModel
from rich.table import Table

from pdserve.bench.stats import percentile, ratio, sig3
from pdserve.bench.tenants_load import RATE_HEADERS, Attempt, Outcome
from pdserve.tenant_config import TenantLimits

PHASES = ("alone", "sharing_on", "sharing_off")
_DURATION = re.compile(r"^(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$|^(\d+)ms$")


def parse_duration_s(text: str) -> float | None:
    """OpenAI's reset header ('250ms', '1.5s', '6m0s') in seconds; None if malformed."""
    m = _DURATION.match(text)
    if m is None or text in ("", "m"):
        return None
    if m.group(3) is not None:
        return int(m.group(3)) / 1000
    if m.group(1) is None and m.group(2) is None:
        return None
    return int(m.group(1) or 0) * 60 + float(m.group(2) or 0)


def header_problems(attempt: Attempt, limits: TenantLimits, split: int = 1) -> list[str]:
    """What is wrong with one answer's x-ratelimit-* headers for a tenant with `limits`."""
    problems: list[str] = []
    h = attempt.rate_headers
    for kind, limit in (
        ("requests", limits.requests_per_minute),
        ("tokens", limits.tokens_per_minute),
    ):
        names = [f"x-ratelimit-{w}-{kind}" for w in ("limit", "remaining", "reset")]
        if limit is None:
            if any(n in h for n in names):
                problems.append(f"{kind}: headers sent for a limit the tenant does not have")
            continue
        if any(n not in h for n in names):
            problems.append(f"{kind}: missing {[n for n in names if n not in h]}")
            continue
        want = -(-limit // split)
        if h[names[0]] != str(want):
            problems.append(f"{names[0]} is {h[names[0]]}, want {want}")
        remaining = h[names[1]]
        if not remaining.isdigit() or int(remaining) > want:
            problems.append(f"{names[1]} is {remaining!r}")
        reset = parse_duration_s(h[names[2]])
        if reset is None or reset > 60.0:
            problems.append(f"{names[2]} is {h[names[2]]!r}")
        elif (
            attempt.status == 429
            and "requests per minute" in attempt.message
            and (kind == "requests" and (remaining != "0" or reset <= 0))
        ):
            problems.append("a requests-per-minute 429 with requests remaining")
    return problems


class PhaseRow(BaseModel):
    phase: str
    steady_served: int
    steady_429s: int
    steady_ttft_p50_s: float | None
    steady_ttft_p99_s: float | None
    flood_sent: int
    flood_served: int
    flood_refused: int
    flood_attempts: int
    flood_429s: int
    flood_per_s: float | None


class TenantsReport(BaseModel):
    config: dict[str, object]
    capacity_per_s: float
    """Tenant A's prompts the cluster served per second in the calibration."""
    flood_rate_per_s: float
    """What tenant A sent per second (its first attempts)."""
    phases: list[PhaseRow]
    flood_429_reasons: dict[str, int]
    header_problems: list[str]
    lost: list[str]
    ttft_p99_on_vs_alone: float | None
    degradation_share: float | None
    weights_expected: float
    weights_measured: float | None
    prefill_seconds: dict[str, float]
    checks: dict[str, bool]
    passed: bool


def _reason(message: str) -> str:
    for needle, reason in (
        ("requests per minute", "tenant_requests_per_minute"),
        ("tokens per minute", "tenant_tokens_per_minute"),
        ("in flight on this router", "tenant_concurrency"),
        ("max_queue_seconds", "fair_queue_timeout"),
        ("max_queued_per_tenant", "fair_queue_full"),
        ("max_prefill_backlog_seconds", "prefill_backlog"),
        ("max_decode_streams", "decode_streams"),
        ("max_inflight_requests", "router_inflight"),
    ):
        if needle in message:
            return reason
    return "other"


def build_report(
    config: dict[str, object],
    capacity_per_s: float,
    flood_rate_per_s: float,
    outcomes: Sequence[Outcome],
    phase_s: float,
    steady: str,
    flood: str,
    limits: Mapping[str, TenantLimits],
    prefill_s: Mapping[str, float],
    heavy: str,
    light: str,
    weights_expected: float,
    *,
    max_ttft_ratio: float,
    max_degradation_share: float,
    weight_tolerance: float,
) -> TenantsReport:
    rows: list[PhaseRow] = []
    p99: dict[str, float | None] = {}
    for phase in PHASES:
        mine = [o for o in outcomes if o.phase == phase]
        b = [o for o in mine if o.tenant == steady]
        a = [o for o in mine if o.tenant == flood]
        ttfts = [o.ttft_s for o in b if o.served and o.ttft_s is not None]
        p99[phase] = percentile(ttfts, 99)
        a_served = sum(o.served for o in a)
        rows.append(
            PhaseRow(
                phase=phase,
                steady_served=sum(o.served for o in b),
                steady_429s=sum(x.status == 429 for o in b for x in o.attempts),
                steady_ttft_p50_s=percentile(ttfts, 50),
                steady_ttft_p99_s=p99[phase],
                flood_sent=len(a),
                flood_served=a_served,
                flood_refused=sum(o.refused for o in a),
                flood_attempts=sum(len(o.attempts) for o in a),
                flood_429s=sum(x.status == 429 for o in a for x in o.attempts),
                flood_per_s=a_served / phase_s if a else None,
            )
        )
    reasons: dict[str, int] = {}
    problems: list[str] = []
    for o in outcomes:
        for x in o.attempts:
            if o.tenant == flood and x.status == 429:
                reasons[_reason(x.message)] = reasons.get(_reason(x.message), 0) + 1
            if o.tenant in limits and x.status in (200, 429):
                problems += [
                    f"{o.tenant} {x.status}: {p}" for p in header_problems(x, limits[o.tenant])
                ]
    lost = [
        f"{o.tenant}/{o.phase}: {o.error or 'no token'}"
        for o in outcomes
        if not o.served and not o.refused
    ]
    on_vs_alone = ratio(p99["sharing_on"], p99["alone"])
    alone, on, off = p99["alone"], p99["sharing_on"], p99["sharing_off"]
    share = None
    if alone is not None and on is not None and off is not None and off > alone:
        share = max(0.0, on - alone) / (off - alone)
    measured = ratio(prefill_s.get(heavy), prefill_s.get(light))
    by_phase = {r.phase: r for r in rows}
    checks = {
        f"B's TTFT p99 with A, sharing on <= {max_ttft_ratio:g}x alone": (
            on_vs_alone is not None and on_vs_alone <= max_ttft_ratio
        ),
        f"B's degradation with sharing on <= {max_degradation_share:.2f} of sharing off's": (
            share is not None and share <= max_degradation_share
        ),
        "B got no 429 alone or with sharing on": (
            by_phase["alone"].steady_429s == 0 and by_phase["sharing_on"].steady_429s == 0
        ),
        "A's excess got 429s": by_phase["sharing_on"].flood_429s > 0,
        "every answer of a limited tenant had correct x-ratelimit-* headers": not problems,
        "nothing lost (every request served, or refused with 429s)": not lost,
        f"prefill seconds split {weights_expected:g}:1 within ±{weight_tolerance:.0%}": (
            measured is not None and abs(measured / weights_expected - 1.0) <= weight_tolerance
        ),
    }
    return TenantsReport(
        config=config,
        capacity_per_s=capacity_per_s,
        flood_rate_per_s=flood_rate_per_s,
        phases=rows,
        flood_429_reasons=reasons,
        header_problems=problems[:20],
        lost=lost[:20],
        ttft_p99_on_vs_alone=on_vs_alone,
        degradation_share=share,
        weights_expected=weights_expected,
        weights_measured=measured,
        prefill_seconds=dict(prefill_s),
        checks=checks,
        passed=all(checks.values()),
    )


def phases_table(report: TenantsReport) -> Table:
    table = Table(title="Tenant B (steady) beside tenant A (flood), one run")
    for col in ("phase", "B served", "B 429s", "B TTFT p50 s", "B TTFT p99 s",
                "A sent", "A served", "A refused", "A 429s"):  # fmt: skip
        table.add_column(col, justify="left" if col == "phase" else "right")
    for r in report.phases:
        table.add_row(
            r.phase, str(r.steady_served), str(r.steady_429s), sig3(r.steady_ttft_p50_s),
            sig3(r.steady_ttft_p99_s), str(r.flood_sent), str(r.flood_served),
            str(r.flood_refused), str(r.flood_429s),
        )  # fmt: skip
    return table


def summary_lines(report: TenantsReport) -> list[str]:
    lines = [
        f"calibration: the cluster served {sig3(report.capacity_per_s)} of A's prompts/s; A "
        f"sent {sig3(report.flood_rate_per_s)}/s (its share x "
        f"{report.config.get('flood_share_multiple')})",
        f"B's TTFT p99, sharing on ÷ alone: {sig3(report.ttft_p99_on_vs_alone)}x; "
        f"its increase with sharing on ÷ with sharing off: {sig3(report.degradation_share)}",
        f"A's 429s by reason: {report.flood_429_reasons or 'none'}",
        f"prefill seconds (engine-reported) {report.prefill_seconds}: "
        f"{sig3(report.weights_measured)}:1, weights {report.weights_expected:g}:1",
    ]
    lines += [f"header problem: {p}" for p in report.header_problems]
    lines += [f"lost: {p}" for p in report.lost]
    lines += [f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in report.checks.items()]
    return lines


__all__ = ["RATE_HEADERS", "TenantsReport", "build_report", "phases_table", "summary_lines"]
