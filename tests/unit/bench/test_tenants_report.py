"""bench-tenants' report (pure): reset durations, rate-limit header checks, and the checks
over synthetic outcomes (each can fail)."""

from __future__ import annotations

import pytest

from pdserve.bench.tenants_load import Attempt, Outcome
from pdserve.bench.tenants_report import build_report, header_problems, parse_duration_s
from pdserve.router.tenants.limits import duration_text
from pdserve.tenant_config import TenantLimits

LIMITS = TenantLimits(requests_per_minute=120, tokens_per_minute=1000)
GOOD = {
    "x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "500ms", "x-ratelimit-limit-tokens": "1000",
    "x-ratelimit-remaining-tokens": "900", "x-ratelimit-reset-tokens": "6s",
}  # fmt: skip


@pytest.mark.parametrize("seconds", [0, 0.02, 0.5, 1, 1.25, 59.9, 60, 61.5, 360])
def test_durations_round_trip(seconds: float) -> None:
    assert parse_duration_s(duration_text(seconds)) == pytest.approx(seconds, abs=1e-3)


@pytest.mark.parametrize("text", ["", "m", "5", "1h", "-1s", "1.5ms"])
def test_malformed_durations(text: str) -> None:
    assert parse_duration_s(text) is None


def test_header_problems() -> None:
    rpm_429 = Attempt(429, GOOD, "tenant batch is over its requests per minute", 1.0)
    assert header_problems(rpm_429, LIMITS) == []
    assert header_problems(Attempt(200, {**GOOD, "x-ratelimit-limit-requests": "100"}), LIMITS)
    missing = {k: v for k, v in GOOD.items() if "tokens" not in k}
    assert header_problems(Attempt(200, missing), LIMITS)
    wrong = Attempt(429, {**GOOD, "x-ratelimit-remaining-requests": "3"}, rpm_429.message)
    assert header_problems(wrong, LIMITS) == ["a requests-per-minute 429 with requests remaining"]
    assert header_problems(Attempt(200, GOOD), TenantLimits()) != []  # unexpected headers
    assert header_problems(Attempt(200, {**GOOD, "x-ratelimit-reset-tokens": "7m"}), LIMITS)


def outcomes(b_ttft: dict[str, list[float]], b_429: int = 0) -> list[Outcome]:
    out: list[Outcome] = []
    for phase, values in b_ttft.items():
        for v in values:
            out.append(Outcome("chat", phase, 0.0, v, [Attempt(200, {})]))
        if phase != "alone":
            a = Outcome("batch", phase, 0.0, 1.0)
            a.attempts = [Attempt(429, GOOD, "over its requests per minute", 1.0),
                          Attempt(200, GOOD)]  # fmt: skip
            out.append(a)
    out[0].attempts = [Attempt(429, {}, "max_inflight_requests")] * b_429 + out[0].attempts
    return out


def report(b_ttft: dict[str, list[float]], prefill: dict[str, float], b_429: int = 0) -> dict:
    r = build_report(
        {}, 10.0, 50.0, outcomes(b_ttft, b_429), 10.0, "chat", "batch",
        {"batch": LIMITS}, prefill, "gold", "bronze", 3.0,
        max_ttft_ratio=1.5, max_degradation_share=1 / 3, weight_tolerance=0.15,
    )  # fmt: skip
    return {name.split(" ")[0] + name.split(" ")[-1]: ok for name, ok in r.checks.items()} | {
        "passed": r.passed
    }


def test_a_fair_run_passes_every_check() -> None:
    checks = report(
        {"alone": [0.2] * 20, "sharing_on": [0.25] * 20, "sharing_off": [1.0] * 20},
        {"gold": 30.0, "bronze": 10.5},
    )
    assert checks["passed"], checks


@pytest.mark.parametrize(
    ("b_ttft", "prefill", "b_429"),
    [
        ({"alone": [0.2] * 20, "sharing_on": [0.4] * 20, "sharing_off": [1.0] * 20},
         {"gold": 30.0, "bronze": 10.0}, 0),  # sharing on: 2x alone
        ({"alone": [0.2] * 20, "sharing_on": [0.28] * 20, "sharing_off": [0.3] * 20},
         {"gold": 30.0, "bronze": 10.0}, 0),  # most of off's degradation
        ({"alone": [0.2] * 20, "sharing_on": [0.2] * 20, "sharing_off": [1.0] * 20},
         {"gold": 20.0, "bronze": 10.0}, 0),  # 2:1, not 3:1
        ({"alone": [0.2] * 20, "sharing_on": [0.2] * 20, "sharing_off": [1.0] * 20},
         {"gold": 30.0, "bronze": 10.0}, 1),  # B got a 429
    ],
)  # fmt: skip
def test_each_check_can_fail(
    b_ttft: dict[str, list[float]], prefill: dict[str, float], b_429: int
) -> None:
    assert not report(b_ttft, prefill, b_429)["passed"]
