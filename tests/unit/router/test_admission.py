"""Admission control: the pure bounds, and the real request path refusing work past them with
a fast 429 + Retry-After while short requests still get in."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from pdserve.config import AdmissionConfig, PdserveConfig
from pdserve.router.admission import (
    AdmissionRejected,
    check_decode_streams,
    check_inflight,
    check_prefill_backlog,
)
from pdserve.router.app import build_app
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.prepare import RequestPreparer
from pdserve.router.status import ClusterStatus
from tests.unit.router.fakes import FakeDispatcher, WordTokenizer, placer


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
    app = build_app(
        RequestPreparer(config, WordTokenizer()),
        Orchestrator(config.router, d, the_placer),
        RouterObserver(metrics, the_placer),
        ClusterStatus(the_placer, d),
        max_inflight_requests=config.router.admission.max_inflight_requests,
    )
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
