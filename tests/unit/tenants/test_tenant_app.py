"""Tenants over the router's real request path (fake Dispatcher): x-ratelimit-* headers on
every response, 429s and 413s from a tenant's limits, the prefill tier's fair queue in front
of a flood, and nothing secret in logs or metrics."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import httpx
import pytest

from pdserve.config import AdmissionConfig, PdserveConfig
from pdserve.messages import PrefillRequest, PrefillResult
from pdserve.router.metrics import RouterMetrics
from pdserve.router.tenants.directory import Tenant, TenantDirectory, key_digest
from pdserve.router.tenants.gate import TierGates
from pdserve.router.tenants.limits import TenantLimiter
from pdserve.tenant_config import TenantLimits
from tests.unit.router.fakes import FakeDispatcher, placer, router_app

MODEL = "pdserve-demo"
KEY_A, KEY_B, KEY_LIMITED = "sk-tenant-a-9f3e", "sk-tenant-b-71c2", "sk-limited-0d4a"
SECRET_PROMPT = "zebracorn " * 200  # long enough to prefill remotely
LIMITED = Tenant(
    "limited",
    limits=TenantLimits(requests_per_minute=3, tokens_per_minute=2000, max_prompt_tokens=400),
)
DIRECTORY = TenantDirectory(
    {
        key_digest(KEY_A): Tenant("flood"),
        key_digest(KEY_B): Tenant("interactive"),
        key_digest(KEY_LIMITED): LIMITED,
    }
)


@dataclass
class SlowPrefills(FakeDispatcher):
    """Each prefill takes `prefill_s`; `order` records which prompt's prefill started when."""

    prefill_s: float = 0.02

    def __post_init__(self) -> None:
        self.order: list[int] = []

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        self.order.append(request.prompt_token_ids[0])
        await asyncio.sleep(self.prefill_s)
        return await super().prefill(request)


def client(
    dispatcher: FakeDispatcher, metrics: RouterMetrics, fair_capacity_s: float
) -> httpx.AsyncClient:
    config = PdserveConfig.model_validate({"router": {"allow_policy_override": True}})
    the_placer = placer(admission=AdmissionConfig(max_inflight_requests=None,
                                                  max_prefill_backlog_seconds=None,
                                                  max_decode_streams=None))  # fmt: skip
    gates = TierGates.build(lambda: fair_capacity_s, None, lambda: 0.0, 30.0, 64)
    app = router_app(
        config,
        dispatcher,
        the_placer,
        metrics,
        gates,
        tenants=DIRECTORY,
        limiter=TenantLimiter(lambda: 1000.0),
        allow_policy_override=True,
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://router", timeout=30)


def body(first_word: str, words: int = 300) -> dict[str, object]:
    prompt = " ".join([first_word] + [f"w{i}" for i in range(words)])
    return {"model": MODEL, "prompt": prompt, "max_tokens": 3}


@pytest.fixture
def metrics() -> RouterMetrics:
    return RouterMetrics()


@pytest.mark.parametrize("fair_share", ["on", "off"])
async def test_a_flood_queued_first_does_not_hold_back_another_tenant(
    metrics: RouterMetrics, fair_share: str
) -> None:
    d = SlowPrefills()
    async with client(d, metrics, fair_capacity_s=1e-6) as c:

        async def send(key: str, word: str) -> httpx.Response:
            headers = {
                "authorization": f"Bearer {key}",
                "x-pdserve-fair-share": fair_share,
                "x-pdserve-policy": "round_robin",  # every prompt prefills remotely
            }
            return await c.post("/v1/completions", json=body(word), headers=headers)

        flood = [asyncio.create_task(send(KEY_A, "flood")) for _ in range(8)]
        await asyncio.sleep(0.005)  # the flood is queued (or at the engine) first
        light = await send(KEY_B, "lightweight")  # another first token id
        done = await asyncio.gather(*flood)
    assert light.status_code == 200 and all(r.status_code == 200 for r in done)
    assert light.headers["x-pdserve-tenant"] == "interactive"
    assert len(d.order) == 9
    light_at = [i for i, token in enumerate(d.order) if token != d.order[0]]
    if fair_share == "on":
        # Its prefill started right after the one that was running when it arrived.
        assert light_at == [1], d.order
    else:
        assert light_at == [8], d.order  # behind the whole flood
    waits = metrics.render().decode()
    queued = 'pdserve_tenant_queue_wait_seconds_count{tenant="flood",tier="prefill"}'
    assert (queued in waits) == (fair_share == "on")


async def test_rate_limit_headers_on_every_response_and_429_after_the_limit(
    metrics: RouterMetrics,
) -> None:
    async with client(FakeDispatcher(), metrics, 100.0) as c:
        auth = {"authorization": f"Bearer {KEY_LIMITED}"}
        answers = [await c.post("/v1/completions", json=body("x", 50), headers=auth)
                   for _ in range(4)]  # fmt: skip
    ok = answers[:3]
    assert [r.status_code for r in ok] == [200, 200, 200]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in ok] == ["2", "1", "0"]
    for r in answers:
        assert r.headers["x-ratelimit-limit-requests"] == "3"
        assert r.headers["x-ratelimit-limit-tokens"] == "2000"
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    # Each reserved 51 prompt + 3 output tokens and used 51 + 3 (the fake's three chunks).
    assert ok[0].headers["x-ratelimit-remaining-tokens"] == str(2000 - 54)
    refused = answers[3]
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["x-pdserve-tenant"] == "limited"
    text = metrics.render().decode()
    assert 'pdserve_router_refusal_seconds_count{reason="tenant_requests_per_minute"} 1.0' in text
    assert 'pdserve_tenant_requests_total{status="429",tenant="limited"} 1.0' in text
    assert (
        'pdserve_tenant_rejected_total{reason="tenant_requests_per_minute",tenant="limited"} 1.0'
        in text
    )
    assert 'pdserve_tenant_requests_total{status="200",tenant="limited"} 3.0' in text


async def test_a_prompt_over_the_tenants_limits_is_a_413(metrics: RouterMetrics) -> None:
    async with client(FakeDispatcher(), metrics, 100.0) as c:
        auth = {"authorization": f"Bearer {KEY_LIMITED}"}
        long_prompt = await c.post("/v1/completions", json=body("x", 450), headers=auth)
        too_many = await c.post(
            "/v1/completions", json={**body("x", 100), "max_tokens": 1990}, headers=auth
        )
        fine = await c.post("/v1/completions", json=body("x", 100), headers=auth)
    assert long_prompt.status_code == 413 and "max_prompt_tokens" in long_prompt.text
    assert too_many.status_code == 413 and "max_tokens" in too_many.text
    assert fine.status_code == 200  # the refused requests were given back


async def test_no_key_prompt_or_unknown_tenant_in_logs_or_metrics(
    metrics: RouterMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    failing = FakeDispatcher(prefill_error=RuntimeError("engine died"))
    async with client(failing, metrics, 100.0) as c:
        for key in (KEY_A, KEY_B, KEY_LIMITED, "sk-unknown-tenant-5e1b"):
            prompt = {"model": MODEL, "prompt": SECRET_PROMPT, "max_tokens": 3}
            await c.post("/v1/completions", json=prompt, headers={"authorization": f"Bearer {key}"})
        text = metrics.render().decode() + (await c.get("/metrics")).text
    logs = caplog.text
    assert "engine died" in logs, "the failure was logged (so the check below means something)"
    for secret in (KEY_A, KEY_B, KEY_LIMITED, "sk-unknown", "zebracorn"):
        assert secret not in logs and secret not in text
    tenants = {
        line.split('tenant="')[1].split('"')[0]
        for line in text.splitlines()
        if 'tenant="' in line and not line.startswith("#")
    }
    assert tenants and tenants <= {"flood", "interactive", "limited", "default"}
