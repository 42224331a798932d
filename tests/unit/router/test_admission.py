"""Admission control: the pure bounds, and the real request path refusing work past them with
a fast 429 + Retry-After while short requests still get in."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from pdserve.config import AdmissionConfig, PdserveConfig
from pdserve.router.admission import (
    AdmissionRejected,
    RetryAfterAdvisor,
    check_decode_streams,
    check_inflight,
    check_prefill_backlog,
)
from pdserve.router.metrics import RouterMetrics
from tests.unit.router.fakes import FakeDispatcher, placer, router_app


@pytest.mark.parametrize(
    ("backlog_s", "est_s", "limit_s", "retry_after_s"),
    [
        (0.0, 50.0, 10.0, None),  # an idle replica always takes one
        (4.0, 5.0, 10.0, None),
        (8.0, 5.0, 10.0, 3),
        (8.0, 5.0, None, None),  # bound off
        (30.0, 0.2, 10.0, 21),
    ],
)
def test_prefill_backlog_bound(
    backlog_s: float, est_s: float, limit_s: float | None, retry_after_s: int | None
) -> None:
    if retry_after_s is None:
        check_prefill_backlog("p0", backlog_s, est_s, limit_s)
        return
    with pytest.raises(AdmissionRejected) as err:
        check_prefill_backlog("p0", backlog_s, est_s, limit_s)
    assert err.value.status == 429 and err.value.code == "rate_limit_exceeded"
    assert err.value.headers == {"retry-after": str(retry_after_s)}
    assert err.value.reason == "prefill_backlog" and "p0" in err.value.message


def test_count_bounds() -> None:
    check_inflight(3, 4)
    check_inflight(10**6, None)
    check_decode_streams("d0", 0, 1)
    with pytest.raises(AdmissionRejected, match=r"router\.admission\.max_inflight_requests"):
        check_inflight(4, 4)
    with pytest.raises(AdmissionRejected) as err:
        check_decode_streams("d0", 2, 2)
    assert err.value.reason == "decode_streams" and err.value.headers["retry-after"] == "1"


LONG = " ".join(f"w{i}" for i in range(300))  # remote prefill
SHORT = "a short question"  # local prefill on decode


def client(
    d: FakeDispatcher, admission: AdmissionConfig
) -> tuple[httpx.AsyncClient, RouterMetrics]:
    config = PdserveConfig.model_validate({"router": {"admission": admission.model_dump()}})
    the_placer = placer(local_prefill_max_cold_tokens=64, admission=config.router.admission)
    metrics = RouterMetrics()
    app = router_app(
        config, d, the_placer, metrics,
        max_inflight_requests=config.router.admission.max_inflight_requests,
    )  # fmt: skip
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://router"), metrics


def body(prompt: str) -> dict[str, object]:
    return {"model": "pdserve-demo", "prompt": prompt, "max_tokens": 3}


def rejected(metrics: RouterMetrics, reason: str) -> float:
    labels = {"reason": reason}
    return metrics.registry.get_sample_value("pdserve_requests_rejected_total", labels) or 0.0


async def test_past_the_prefill_backlog_long_prompts_get_429_but_short_ones_get_in() -> None:
    d = FakeDispatcher(chunk_delay_s=0.2)  # streams stay open a while
    admission = AdmissionConfig(max_prefill_backlog_seconds=1e-9, max_decode_streams=None)
    c, metrics = client(d, admission)
    async with c:
        d.prefill_hangs = True  # the first long prompt occupies the prefill replica
        first = asyncio.create_task(c.post("/v1/completions", json=body(LONG)))
        await asyncio.sleep(0.05)
        t0 = asyncio.get_running_loop().time()
        second = await c.post("/v1/completions", json=body("x " + LONG))
        assert asyncio.get_running_loop().time() - t0 < 0.5  # refused at once, not queued
        assert second.status_code == 429
        assert second.json()["error"]["code"] == "rate_limit_exceeded"
        assert int(second.headers["retry-after"]) >= 1
        short = await c.post("/v1/completions", json=body(SHORT))
        assert short.status_code == 200  # prefills on decode: the prefill backlog is no bar
        first.cancel()
    assert rejected(metrics, "prefill_backlog") == 1
    assert len(d.prefills) == 1


async def test_decode_stream_bound_frees_up_when_a_stream_ends() -> None:
    d = FakeDispatcher(chunk_delay_s=0.1)
    c, metrics = client(d, AdmissionConfig(max_decode_streams=1))
    async with c:
        first = asyncio.create_task(c.post("/v1/completions", json=body(SHORT)))
        await asyncio.sleep(0.05)
        busy = await c.post("/v1/completions", json=body("another " + SHORT))
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert (await first).status_code == 200
        after = await c.post("/v1/completions", json=body("again " + SHORT))
        assert after.status_code == 200
    assert rejected(metrics, "decode_streams") == 1


async def test_router_inflight_bound() -> None:
    d = FakeDispatcher(chunk_delay_s=0.1)
    c, metrics = client(d, AdmissionConfig(max_inflight_requests=1))
    async with c:
        first = asyncio.create_task(c.post("/v1/completions", json=body(SHORT)))
        await asyncio.sleep(0.05)
        busy = await c.post("/v1/completions", json=body(SHORT))
        assert busy.status_code == 429
        assert "max_inflight_requests" in busy.json()["error"]["message"]
        assert (await first).status_code == 200
        assert (await c.post("/v1/completions", json=body(SHORT))).status_code == 200
    assert rejected(metrics, "router_inflight") == 1
    # the refusal's cost, from arrival to its 429's response start
    refusals = metrics.registry.get_sample_value(
        "pdserve_router_refusal_seconds_count", {"reason": "router_inflight"}
    )
    assert refusals == 1
    total = metrics.registry.get_sample_value(
        "pdserve_requests_total", {"endpoint": "completion", "decision": "none", "status": "429"}
    )
    assert total == 1


async def test_a_stream_holds_its_inflight_slot_until_it_ends() -> None:
    d = FakeDispatcher(chunk_delay_s=0.15)
    c, metrics = client(d, AdmissionConfig(max_inflight_requests=1))
    async with c:
        stream = {**body(SHORT), "stream": True}
        first = asyncio.create_task(c.post("/v1/completions", json=stream))
        await asyncio.sleep(0.25)  # headers sent at the first token; two chunks still to come
        busy = await c.post("/v1/completions", json=body(SHORT))
        assert busy.status_code == 429
        assert (await first).text.rstrip().endswith("data: [DONE]")
        assert (await c.post("/v1/completions", json=body(SHORT))).status_code == 200
    assert rejected(metrics, "router_inflight") == 1


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _advisor(clock: ManualClock) -> RetryAfterAdvisor:
    return RetryAfterAdvisor(clock, window_s=2.0, max_s=30.0, retries_per_slot=1.0)


def _window(advisor: RetryAfterAdvisor, clock: ManualClock, refused: int, completed: int) -> float:
    for _ in range(refused):
        advisor.refused()
    for _ in range(completed):
        advisor.completed()
    clock.now += 2.0
    return advisor.retry_after_s()


def test_retry_after_grows_while_refusals_outnumber_completions_then_relaxes() -> None:
    clock = ManualClock()
    advisor = _advisor(clock)
    assert advisor.retry_after_s() == 1.0
    # 10x overload: 10 refusals per completion. At most x2 per window, up to the cap.
    advice = [_window(advisor, clock, refused=100, completed=10) for _ in range(6)]
    assert advice == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    # Refused clients now come back about as fast as slots free up: the advice holds.
    assert _window(advisor, clock, refused=10, completed=10) == 30.0
    # Load gone: back toward 1 s, halving per window.
    assert [_window(advisor, clock, 0, 10) for _ in range(6)] == [15.0, 7.5, 3.75, 1.875, 1.0, 1.0]


def test_the_advice_settles_where_refusals_match_completions() -> None:
    clock = ManualClock()
    advisor = _advisor(clock)
    waiting = 100  # clients that honour Retry-After; 20 requests end per second
    for _ in range(20):
        t = advisor.retry_after_s()
        _window(advisor, clock, refused=round(waiting * 2.0 / t), completed=40)
    assert 4.0 <= advisor.retry_after_s() <= 6.0  # waiting / rate = 5 s


def test_a_rejection_carries_at_least_the_advice() -> None:
    exc = AdmissionRejected("router_inflight", "full", 1.0)
    exc.at_least(7.2)
    assert exc.retry_after_s == 8 and exc.headers == {"retry-after": "8"}
    assert exc.message == "full; retry in about 8 s"
    exc.at_least(2.0)  # never lowered
    assert exc.headers == {"retry-after": "8"}


def test_refused_clients_may_outnumber_free_slots_by_the_retry_factor() -> None:
    clock = ManualClock()
    advisor = RetryAfterAdvisor(clock, window_s=2.0, retries_per_slot=3.0)
    assert _window(advisor, clock, refused=30, completed=10) == 1.0  # 3 retries per slot: ok
    assert _window(advisor, clock, refused=60, completed=10) == 2.0
