"""Tenants on the real 2P1D cluster (key file + PDSERVE_API_KEY), with the official `openai`
client: each key's tenant is known, OpenAI's x-ratelimit-* headers come on every answer, a
tenant over its requests per minute gets a 429 the SDK understands, a prompt over its limit a
413, and the per-tenant metrics count what was served (engine-measured prefill seconds, KV
block-seconds, tokens) under bounded labels."""

from __future__ import annotations

import concurrent.futures

import httpx
import openai
import pytest

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words
from tests.integration.two_prefill.settings import API_KEY, METERED_KEY, TEAM_KEY


def client(cluster: Cluster, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{cluster.url}/v1", api_key=key, max_retries=0, timeout=60)


def test_a_prompt_over_the_tenants_limit_is_a_413_and_costs_no_request(
    two_prefill: Cluster,
) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client(two_prefill, METERED_KEY).completions.create(
            model="pdserve-demo", prompt=text_of_words(2000), max_tokens=2
        )
    assert err.value.status_code == 413, err.value.response.text
    assert "max_prompt_tokens" in err.value.message
    assert err.value.response.headers["x-ratelimit-remaining-requests"] == "3"


def test_a_tenant_over_its_requests_per_minute_gets_openais_429(two_prefill: Cluster) -> None:
    metered = client(two_prefill, METERED_KEY)
    remaining = []
    for _ in range(3):
        raw = metered.completions.with_raw_response.create(
            model="pdserve-demo", prompt="count my requests", max_tokens=4, temperature=0
        )
        assert raw.headers["x-pdserve-tenant"] == "metered"
        assert raw.headers["x-ratelimit-limit-requests"] == "3"
        assert raw.headers["x-ratelimit-limit-tokens"] == "6000"
        remaining.append(int(raw.headers["x-ratelimit-remaining-requests"]))
        assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 6000
        assert raw.parse().usage.completion_tokens == 4
    assert remaining == [2, 1, 0]
    with pytest.raises(openai.RateLimitError) as err:
        metered.completions.create(model="pdserve-demo", prompt="one more", max_tokens=4)
    headers = err.value.response.headers
    assert int(headers["retry-after"]) >= 1
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"].endswith("s")
    assert err.value.code == "rate_limit_exceeded"
    assert METERED_KEY not in err.value.response.text
    # Other tenants are not touched by metered's limit.
    other = client(two_prefill, API_KEY).completions.with_raw_response.create(
        model="pdserve-demo", prompt="not metered", max_tokens=2
    )
    assert other.headers["x-pdserve-tenant"] == "default"
    assert "x-ratelimit-limit-requests" not in other.headers
    assert (
        two_prefill.metric(
            "pdserve_tenant_rejected_total",
            {"tenant": "metered", "reason": "tenant_requests_per_minute"},
        )
        == 1
    )


def test_per_tenant_accounting_of_served_work(two_prefill: Cluster) -> None:
    team = client(two_prefill, TEAM_KEY)
    labels = {"tenant": "team", "tier": "prefill"}  # tier: only the queue-wait histogram has it
    before = {
        name: two_prefill.metric(name, {"tenant": "team"} if "queue" not in name else labels)
        for name in (
            "pdserve_tenant_prefill_seconds_total",
            "pdserve_tenant_decode_kv_block_seconds_total",
            "pdserve_tenant_queue_wait_seconds_count",
        )
    }
    prompt_tokens_before = two_prefill.metric(
        "pdserve_tenant_tokens_total", {"tenant": "team", "kind": "prompt"}
    )

    def one(i: int) -> int:
        resp = team.completions.create(
            model="pdserve-demo", prompt=f"{i} " + text_of_words(600), max_tokens=8,
            temperature=0, extra_headers={"x-pdserve-policy": "round_robin"},
        )  # fmt: skip
        assert resp.usage is not None
        return resp.usage.prompt_tokens

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        prompt_tokens = sum(pool.map(one, range(6)))
    after = {
        name: two_prefill.metric(name, {"tenant": "team"} if "queue" not in name else labels)
        for name in before
    }
    assert (
        after["pdserve_tenant_queue_wait_seconds_count"]
        - before["pdserve_tenant_queue_wait_seconds_count"]
        == 6
    ), "each request passed the prefill tier's fair queue"
    assert (
        after["pdserve_tenant_prefill_seconds_total"]
        > before["pdserve_tenant_prefill_seconds_total"]
    ), "remote prefills report their engine time"
    assert (
        after["pdserve_tenant_decode_kv_block_seconds_total"]
        > before["pdserve_tenant_decode_kv_block_seconds_total"]
    )
    served_prompt = two_prefill.metric(
        "pdserve_tenant_tokens_total", {"tenant": "team", "kind": "prompt"}
    )
    assert served_prompt - prompt_tokens_before == prompt_tokens
    text = httpx.get(f"{two_prefill.url}/metrics", timeout=10).text
    tenants = {
        line.split('tenant="')[1].split('"')[0]
        for line in text.splitlines()
        if 'tenant="' in line and not line.startswith("#")
    }
    assert tenants <= {"default", "metered", "team"}, tenants
    for key in (API_KEY, METERED_KEY, TEAM_KEY):
        assert key not in text
