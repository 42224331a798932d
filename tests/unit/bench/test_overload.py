"""The overload report: per-level counts, 429 latency, admitted TTFT and the checks."""

from __future__ import annotations

from pdserve.bench.models import RequestResult
from pdserve.bench.overload import LevelOutcome, build_overload_report


def _ok(ttft_s: float) -> RequestResult:
    return RequestResult(0, "short", 0.0, ttft_s + 0.5, ttft_s, (), 50, 32, 0, "x", status=200)


def _rejected(latency_s: float, retry_after_s: float | None = 2.0) -> RequestResult:
    return RequestResult(
        0, "short", 0.0, latency_s, None, (), None, 0, None, "",
        error="HTTP 429: full", status=429, retry_after_s=retry_after_s,
    )  # fmt: skip


def _failed(status: int | None, error: str) -> RequestResult:
    return RequestResult(0, "long", 0.0, 1.0, None, (), None, 0, None, "", error=error,
                         status=status)  # fmt: skip


def _report(saturated: list[RequestResult], overloaded: list[RequestResult], unfinished: int = 0):
    levels = [
        LevelOutcome(8, 4, tuple(saturated), 2.0),
        LevelOutcome(80, 4, tuple(overloaded), 4.0, unfinished),
    ]
    return build_overload_report("http://x", "m", {}, levels, 1.0, 2.0)


def test_a_server_that_sheds_load_fast_passes_every_check() -> None:
    base = [_ok(0.1), _ok(0.2), _ok(0.2), _ok(0.4)]
    over = [_ok(0.2), _ok(0.3), _ok(0.5), _ok(0.7), _rejected(0.01), _rejected(0.02)]
    report = _report(base, over)
    assert report.passed, report.checks
    lv = report.levels[1]
    assert (lv.num_attempts, lv.num_ok, lv.num_rejected) == (6, 4, 2)
    assert lv.rejected_fraction == 2 / 6
    assert lv.requests_per_s == 1.0  # 4 answered in 4 s
    assert report.ratios["c=80/c=8"]["requests_per_s"] == 0.5


def test_5xx_timeouts_and_other_errors_fail_the_first_check() -> None:
    over = [_ok(0.2), _failed(503, "HTTP 503: no replica"), _failed(None, "timed out after 9 s")]
    report = _report([_ok(0.2)], over)
    only = report.checks[0]
    assert not only.passed and "1 5xx, 1 timeouts, 0 other" in only.detail
    assert report.levels[1].errors == {"HTTP 503: no replica": 1, "timed out after 9 s": 1}


def test_slow_429s_or_429s_without_retry_after_fail() -> None:
    report = _report([_ok(0.2)], [_ok(0.2)] + [_rejected(1.5)] * 3)
    assert not next(c for c in report.checks if c.name.startswith("fast 429")).passed
    report = _report([_ok(0.2)], [_ok(0.2), _rejected(0.01, retry_after_s=None)])
    fast = next(c for c in report.checks if c.name.startswith("fast 429"))
    assert not fast.passed and "1 without Retry-After" in fast.detail


def test_admitted_ttft_p99_past_twice_the_saturation_value_fails() -> None:
    report = _report([_ok(0.5)] * 4, [_ok(0.5)] * 3 + [_ok(1.2)])
    ttft = report.checks[-1]
    assert ttft.name == "admitted TTFT p99 at c=80"
    assert not ttft.passed and ttft.detail.startswith("2.36x")  # p99 1.179 s / 0.5 s


def test_requests_that_gave_up_fail_the_served_check() -> None:
    report = _report([_ok(0.2)], [_ok(0.2)], unfinished=2)
    served = next(c for c in report.checks if c.name == "every request served")
    assert not served.passed and "2 requests" in served.detail


def test_429s_are_compared_with_the_health_probes_of_the_same_level() -> None:
    over = [_ok(0.2)] + [_rejected(s) for s in (0.01, 0.02, 0.03, 0.04, 0.05)]
    cheap = (0.02, 0.03, 0.03, 0.04)
    levels = [
        LevelOutcome(8, 1, (_ok(0.2),), 2.0, health_s=cheap),
        LevelOutcome(80, 1, tuple(over), 4.0, health_s=(*cheap, None)),
    ]
    report = build_overload_report("http://x", "m", {}, levels, 1.0, 2.0)
    base, lv = report.levels
    assert base.reject_to_health_p95_ratio is None  # no 429s at the first level
    assert (lv.num_health_probes, lv.num_health_failed) == (5, 1)
    assert abs(lv.reject_latency_p95_s - 0.048) < 1e-9
    assert abs(lv.health_latency_p95_s - 0.0385) < 1e-9
    assert abs(lv.reject_to_health_p95_ratio - 0.048 / 0.0385) < 1e-9
    check = next(c for c in report.checks if c.name.startswith("429 as cheap as /health"))
    assert not check.passed and "1 of 5 probes failed" in check.detail  # a failed probe fails

    slow = LevelOutcome(80, 1, tuple(over), 4.0, health_s=(0.01, 0.01))  # 429s 4.8x /health
    report = build_overload_report("http://x", "m", {}, [levels[0], slow], 1.0, 2.0)
    check = next(c for c in report.checks if c.name.startswith("429 as cheap as /health"))
    assert not check.passed and "4.80x" in check.detail
    passing = LevelOutcome(80, 1, tuple(over), 4.0, health_s=cheap)
    report = build_overload_report("http://x", "m", {}, [levels[0], passing], 1.0, 2.0)
    assert report.passed, report.checks
