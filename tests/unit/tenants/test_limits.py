"""Tenant limits (pure, injected clock): token buckets, concurrency, reservations settled at
the end, 413 for what can never fit, OpenAI's x-ratelimit-* headers, the in-flight share."""

from __future__ import annotations

import pytest

from pdserve.router.tenants.directory import Tenant
from pdserve.router.tenants.limits import (
    TenantLimiter,
    TenantLimitExceeded,
    TenantRequestTooLarge,
    TokenBucket,
    duration_text,
)
from pdserve.tenant_config import TenantLimits


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tenant(**limits: int) -> Tenant:
    return Tenant("team-a", limits=TenantLimits(**limits))  # type: ignore[arg-type]


def headers(limiter: TenantLimiter, t: Tenant) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in limiter.headers(t)}


def test_token_bucket_refills_continuously_and_caps() -> None:
    b = TokenBucket(60, 60.0, now_s=0.0)
    assert b.take(60, 0.0) and not b.take(1, 0.0)
    assert b.wait_s(1, 0.0) == pytest.approx(1.0)
    assert b.level(30.0) == pytest.approx(30.0)
    assert b.level(1000.0) == 60
    assert b.wait_s(61, 1000.0) == float("inf")
    b.adjust(-100, 1000.0)  # an overdraft
    assert b.level(1000.0) == -40 and b.reset_s(1000.0) == pytest.approx(100.0)


def test_requests_per_minute_refuses_with_retry_after_and_refills() -> None:
    clock = Clock()
    limiter = TenantLimiter(clock)
    t = tenant(requests_per_minute=2)
    limiter.admit(t)
    limiter.admit(t)
    with pytest.raises(TenantLimitExceeded) as err:
        limiter.admit(t)
    assert err.value.status == 429 and err.value.reason == "tenant_requests_per_minute"
    assert err.value.headers["retry-after"] == "30"  # one request refills in 30 s
    assert headers(limiter, t) == {
        "x-ratelimit-limit-requests": "2",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1m0s",
    }
    clock.now += 30
    limiter.admit(t)


def test_concurrency_slots_are_freed_on_release() -> None:
    limiter = TenantLimiter(Clock())
    t = tenant(max_concurrent_requests=1)
    limiter.admit(t)
    with pytest.raises(TenantLimitExceeded, match="in flight") as err:
        limiter.admit(t)
    assert err.value.reason == "tenant_concurrency"
    limiter.release(t)
    limiter.admit(t)
    assert limiter.inflight(t) == 1


def test_tokens_reserve_prompt_plus_max_tokens_and_settle_what_was_not_generated() -> None:
    clock = Clock()
    limiter = TenantLimiter(clock)
    t = tenant(tokens_per_minute=1000)
    limiter.admit(t)
    assert limiter.reserve_tokens(t, 300, 200) == 500
    assert headers(limiter, t)["x-ratelimit-remaining-tokens"] == "500"
    limiter.settle(t, reserved=500, used=320)  # 180 output tokens were never generated
    assert headers(limiter, t)["x-ratelimit-remaining-tokens"] == "680"
    with pytest.raises(TenantLimitExceeded) as err:
        limiter.reserve_tokens(t, 600, 200)
    assert err.value.reason == "tenant_tokens_per_minute"
    assert int(err.value.headers["retry-after"]) == 8  # 120 tokens at 1000/min
    with pytest.raises(TenantRequestTooLarge, match="more than") as too_big:
        limiter.reserve_tokens(t, 900, 200)
    assert too_big.value.status == 413
    clock.now += 60
    assert limiter.reserve_tokens(t, 800, 200) == 1000


def test_no_tokens_left_refuses_before_the_body_is_read() -> None:
    limiter = TenantLimiter(Clock())
    t = tenant(tokens_per_minute=100)
    limiter.reserve_tokens(t, 90, 10)
    with pytest.raises(TenantLimitExceeded) as err:
        limiter.admit(t)
    assert err.value.reason == "tenant_tokens_per_minute"


def test_the_longest_prompt_is_a_413() -> None:
    limiter = TenantLimiter(Clock())
    t = tenant(max_prompt_tokens=100)
    assert limiter.reserve_tokens(t, 100, 10_000) == 0  # no token limit: nothing reserved
    with pytest.raises(TenantRequestTooLarge, match="at most 100"):
        limiter.reserve_tokens(t, 101, 1)


def test_refund_gives_the_request_back() -> None:
    limiter = TenantLimiter(Clock())
    t = tenant(requests_per_minute=1)
    limiter.admit(t)
    limiter.refund_request(t)
    limiter.admit(t)


def test_each_router_replica_enforces_its_share() -> None:
    limiter = TenantLimiter(Clock(), split=3)
    t = tenant(requests_per_minute=10, tokens_per_minute=1000, max_concurrent_requests=2)
    h = headers(limiter, t)
    assert h["x-ratelimit-limit-requests"] == "4" and h["x-ratelimit-limit-tokens"] == "334"
    limiter.admit(t)
    with pytest.raises(TenantLimitExceeded):  # ceil(2 / 3) = 1 in flight
        limiter.admit(t)


def test_no_limits_no_headers() -> None:
    limiter = TenantLimiter(Clock())
    t = Tenant("open")
    for _ in range(1000):
        limiter.admit(t)
    assert limiter.headers(t) == []


def test_in_flight_share_by_weight() -> None:
    limiter = TenantLimiter(Clock())
    big, small = Tenant("big", weight=3.0), Tenant("small", weight=1.0)
    for _ in range(32):
        limiter.admit(big)
    limiter.admit(small)
    # 32 slots: small's share is 32 x 1/4 = 8; big's 24 (it holds 32: over).
    assert limiter.within_share(small, 32)
    assert not limiter.within_share(big, 32)
    for _ in range(7):
        limiter.admit(small)
    assert limiter.within_share(small, 32)
    limiter.admit(small)
    assert not limiter.within_share(small, 32)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.0004, "1ms"), (0.25, "250ms"), (1, "1s"), (1.5, "1.5s"), (60, "1m0s"),
     (360, "6m0s"), (61.25, "1m1.25s")],
)  # fmt: skip
def test_reset_durations_read_like_openais(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text
