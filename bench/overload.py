"""The overload report (pure): how a server answers far more clients than it can serve.

Each load level is a closed loop of `concurrency` clients working through the same kind of
requests; a client whose request gets 429 waits the server's `Retry-After` and sends it
again, as the OpenAI SDKs do. Every attempt is one `RequestResult`. `build_overload_report`
turns the levels' attempts into per-level numbers, ratios against the first level (the
saturation point) and the checks a safe-to-expose server must pass:

- every attempt is answered 200 or 429: no 5xx, no other error, no hang (client timeout);
- every 429 carries `Retry-After`, and their latency p99 is within `max_reject_s`;
- the admitted requests' TTFT p99 at every level stays within `max_ttft_p99_ratio` x its
  value at the first level;
- where GET /health was probed during a level, the 429s' latency p95 is within
  `max_reject_health_ratio` x the probes' p95: a refusal, made before the body is read, should
  cost no more than the cheapest route (both wait on the same event loop; the ratio cancels
  out how busy the client and the machine are).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pdserve.bench.models import RequestResult
from pdserve.bench.report import ReportModel
from pdserve.bench.stats import percentile, rate, ratio, summarize

SCHEMA_VERSION = 1
REJECTED = 429


@dataclass(frozen=True)
class LevelOutcome:
    """The raw attempts of one level. `num_requests` are the distinct requests; `wall_s` runs
    from the first send to the last answer; `unfinished` requests gave up (retry cap);
    `health_s` the seconds of each GET /health probe sent during the level (None: failed)."""

    concurrency: int
    num_requests: int
    attempts: tuple[RequestResult, ...]
    wall_s: float
    num_unfinished: int = 0
    health_s: tuple[float | None, ...] = ()


class AttemptRecord(ReportModel):
    """One attempt as the client saw it (seconds; `start_s` from the level's first send):
    `kind` is ok, rejected (429), 5xx, timeout or other."""

    start_s: float
    e2e_s: float
    ttft_s: float | None
    kind: str


class LevelReport(ReportModel):
    """One load level. Latencies in seconds; None where there is no data."""

    concurrency: int
    num_requests: int
    num_attempts: int
    num_ok: int
    num_rejected: int
    num_5xx: int
    num_timeouts: int
    num_other_errors: int
    num_unfinished: int
    rejected_fraction: float | None
    reject_latency_p50_s: float | None
    reject_latency_p95_s: float | None
    reject_latency_p99_s: float | None
    reject_latency_max_s: float | None
    rejects_without_retry_after: int
    retry_after_p50_s: float | None
    num_health_probes: int
    num_health_failed: int
    health_latency_p50_s: float | None
    health_latency_p95_s: float | None
    reject_to_health_p95_ratio: float | None
    """429 latency p95 / GET /health latency p95 during the same level."""
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p99_s: float | None
    e2e_max_s: float | None
    requests_per_s: float | None
    output_tokens_per_s: float | None
    wall_s: float
    errors: dict[str, int]
    attempts: list[AttemptRecord] | None = None
    """Every attempt in send order (None in reports written before they were kept)."""


class Check(ReportModel):
    name: str
    passed: bool
    detail: str


class OverloadReport(ReportModel):
    schema_version: int = SCHEMA_VERSION
    url: str
    model: str
    config: dict[str, object]
    levels: list[LevelReport]
    ratios: dict[str, dict[str, float | None]]
    checks: list[Check]
    interrupted: bool

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def _kind(r: RequestResult) -> str:
    if r.ok:
        return "ok"
    if r.status == REJECTED:
        return "rejected"
    if r.status is not None and r.status >= 500:
        return "5xx"
    if r.error is not None and r.error.startswith("timed out"):
        return "timeout"
    return "other"


def build_level(level: LevelOutcome) -> LevelReport:
    kinds = Counter(_kind(r) for r in level.attempts)
    ok = [r for r in level.attempts if r.ok]
    rejected = [r for r in level.attempts if _kind(r) == "rejected"]
    reject_latency = summarize([r.e2e_s for r in rejected])
    reject_p95 = percentile([r.e2e_s for r in rejected], 95)
    health = [s for s in level.health_s if s is not None]
    health_p95 = percentile(health, 95)
    ttft = summarize([r.ttft_s for r in ok if r.ttft_s is not None])
    e2e = summarize([r.e2e_s for r in ok])
    errors = Counter(
        (r.error or "")[:160] for r in level.attempts if _kind(r) not in ("ok", "rejected")
    )
    return LevelReport(
        concurrency=level.concurrency,
        num_requests=level.num_requests,
        num_attempts=len(level.attempts),
        num_ok=kinds["ok"],
        num_rejected=kinds["rejected"],
        num_5xx=kinds["5xx"],
        num_timeouts=kinds["timeout"],
        num_other_errors=kinds["other"],
        num_unfinished=level.num_unfinished,
        rejected_fraction=len(rejected) / len(level.attempts) if level.attempts else None,
        reject_latency_p50_s=reject_latency.p50,
        reject_latency_p95_s=reject_p95,
        reject_latency_p99_s=reject_latency.p99,
        reject_latency_max_s=max((r.e2e_s for r in rejected), default=None),
        rejects_without_retry_after=sum(r.retry_after_s is None for r in rejected),
        retry_after_p50_s=summarize(
            [r.retry_after_s for r in rejected if r.retry_after_s is not None]
        ).p50,
        attempts=[
            AttemptRecord(start_s=r.start_s, e2e_s=r.e2e_s, ttft_s=r.ttft_s, kind=_kind(r))
            for r in sorted(level.attempts, key=lambda r: r.start_s)
        ],
        num_health_probes=len(level.health_s),
        num_health_failed=len(level.health_s) - len(health),
        health_latency_p50_s=percentile(health, 50),
        health_latency_p95_s=health_p95,
        reject_to_health_p95_ratio=ratio(reject_p95, health_p95),
        ttft_p50_s=ttft.p50,
        ttft_p99_s=ttft.p99,
        e2e_p99_s=e2e.p99,
        e2e_max_s=max((r.e2e_s for r in ok), default=None),
        requests_per_s=rate(len(ok), level.wall_s),
        output_tokens_per_s=rate(sum(r.completion_tokens or 0 for r in ok), level.wall_s),
        wall_s=level.wall_s,
        errors=dict(errors.most_common(5)),
    )


RATIO_FIELDS = ("ttft_p50_s", "ttft_p99_s", "e2e_p99_s", "requests_per_s", "output_tokens_per_s")


def build_checks(
    levels: Sequence[LevelReport],
    max_reject_s: float,
    max_ttft_p99_ratio: float,
    max_reject_health_ratio: float = 2.0,
) -> list[Check]:
    checks = []
    bad: dict[str, tuple[int, int, int]] = {
        f"c={lv.concurrency}": (lv.num_5xx, lv.num_timeouts, lv.num_other_errors)
        for lv in levels
        if lv.num_5xx or lv.num_timeouts or lv.num_other_errors
    }
    checks.append(
        Check(
            name="only 200 or 429",
            passed=not bad,
            detail="; ".join(
                f"{k}: {a} 5xx, {b} timeouts, {c} other" for k, (a, b, c) in bad.items()
            )
            or "every attempt answered 200 or 429",
        )
    )
    unfinished = sum(lv.num_unfinished for lv in levels)
    checks.append(
        Check(
            name="every request served",
            passed=unfinished == 0,
            detail=f"{unfinished} requests gave up after the retry cap"
            if unfinished
            else "every request was eventually admitted and answered",
        )
    )
    slow = [lv for lv in levels if (lv.reject_latency_p99_s or 0.0) > max_reject_s]
    missing = sum(lv.rejects_without_retry_after for lv in levels)
    worst = max((lv.reject_latency_p99_s or 0.0 for lv in levels), default=0.0)
    slowest = max((lv.reject_latency_max_s or 0.0 for lv in levels), default=0.0)
    checks.append(
        Check(
            name="fast 429 with Retry-After",
            passed=not slow and missing == 0,
            detail=f"429 latency p99 {worst:.3f} s (limit {max_reject_s:g} s; slowest "
            f"{slowest:.3f} s); {missing} without Retry-After",
        )
    )
    for lv in levels:
        r = lv.reject_to_health_p95_ratio
        if r is None:
            continue  # no 429s, or no /health probe answered
        checks.append(
            Check(
                name=f"429 as cheap as /health at c={lv.concurrency}",
                passed=r <= max_reject_health_ratio and lv.num_health_failed == 0,
                detail=f"429 p95 {lv.reject_latency_p95_s:.3f} s = {r:.2f}x /health p95 "
                f"{lv.health_latency_p95_s:.3f} s (limit {max_reject_health_ratio:g}x); "
                f"{lv.num_health_failed} of {lv.num_health_probes} probes failed",
            )
        )
    base = levels[0].ttft_p99_s if levels else None
    for lv in levels[1:]:
        r = ratio(lv.ttft_p99_s, base)
        checks.append(
            Check(
                name=f"admitted TTFT p99 at c={lv.concurrency}",
                passed=r is not None and r <= max_ttft_p99_ratio,
                detail=f"{'-' if r is None else f'{r:.2f}'}x its value at "
                f"c={levels[0].concurrency} (limit {max_ttft_p99_ratio:g}x)",
            )
        )
    return checks


def build_overload_report(
    url: str,
    model: str,
    config: dict[str, object],
    levels: Sequence[LevelOutcome],
    max_reject_s: float,
    max_ttft_p99_ratio: float,
    interrupted: bool = False,
    max_reject_health_ratio: float = 2.0,
) -> OverloadReport:
    reports = [build_level(lv) for lv in levels]
    ratios: dict[str, dict[str, float | None]] = {}
    for lv in reports[1:]:
        base = reports[0]
        ratios[f"c={lv.concurrency}/c={base.concurrency}"] = {
            f: ratio(getattr(lv, f), getattr(base, f)) for f in RATIO_FIELDS
        }
    return OverloadReport(
        url=url,
        model=model,
        config=config,
        levels=reports,
        ratios=ratios,
        checks=build_checks(reports, max_reject_s, max_ttft_p99_ratio, max_reject_health_ratio),
        interrupted=interrupted,
    )
