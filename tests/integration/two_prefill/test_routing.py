"""On the 2 prefill + 1 decode cluster (started with an API key). Routing: the policy's choice is
where requests really run (enforced by pdserve's Ray Serve request router), an agent loop
stays on the replica that holds its prefix (learned from vLLM's KV events), and the baselines
stay selectable per request. The front door: every /v1 route needs the key; /health and
/ready do not."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words
from tests.integration.two_prefill.settings import API_KEY


def _chat(http: httpx.Client, messages: list[dict[str, str]], policy: str) -> httpx.Response:
    resp = http.post(
        "/v1/chat/completions",
        json={"model": "pdserve-demo", "messages": messages, "max_tokens": 8, "temperature": 0},
        headers={"x-pdserve-policy": policy},
    )
    assert resp.status_code == 200, resp.text
    return resp


def _route(resp: httpx.Response) -> tuple[dict[str, Any], dict[str, Any]]:
    return json.loads(resp.headers["x-pdserve-decision"]), json.loads(
        resp.headers["x-pdserve-served-by"]
    )


def test_agent_loop_sticks_to_its_prefix_and_placement_is_enforced(two_prefill: Cluster) -> None:
    with two_prefill.http() as http:
        _chat(http, [{"role": "user", "content": "warm up"}], "pdserve")  # view attaches
        two_prefill.wait_idle(("prefill",))
        messages = [{"role": "system", "content": text_of_words(300, salt=5150)}]
        prefill_replicas, cached, reasons = [], [], []
        for step in range(4):
            messages.append({"role": "user", "content": text_of_words(150, salt=step)})
            resp = _chat(http, messages, "pdserve")
            decision, served = _route(resp)
            reasons.append(decision["reason"])
            if decision["prefill"] is not None:
                assert served["prefill"] == decision["prefill"], "placement not enforced"
                prefill_replicas.append(decision["prefill"])
                # The predicted time to first token of every option the policy weighed.
                predicted = decision["predicted_ttft_s"]
                assert predicted[decision["prefill"]] > 0, decision
                assert f"local:{decision['decode']}" in predicted, decision
            assert served["decode"] == decision["decode"]
            cached.append(resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
            messages.append(
                {"role": "assistant", "content": resp.json()["choices"][0]["message"]["content"]}
            )
    assert len(set(prefill_replicas)) == 1, (
        f"the loop moved between replicas: {prefill_replicas}; reasons: {reasons}"
    )
    assert all(later > 0 for later in cached[1:]), f"no prefix reuse after step 1: {cached}"
    with two_prefill.http() as http:
        view = http.get("/v1/pdserve/replicas").json()
    held = {r["replica_id"]: r["cached_blocks"] for r in view["pools"]["prefill"]}
    assert held[prefill_replicas[0]] > 0, "the prefix index learned nothing from KV events"


def test_round_robin_baseline_alternates_and_is_enforced(two_prefill: Cluster) -> None:
    with two_prefill.http() as http:
        chosen = []
        for i in range(4):
            resp = _chat(http, [{"role": "user", "content": f"question {i}"}], "round_robin")
            decision, served = _route(resp)
            assert decision["policy"] == "round_robin"
            assert served["prefill"] == decision["prefill"]
            chosen.append(decision["prefill"])
    assert len(set(chosen)) == 2 and chosen[0] != chosen[1] and chosen[0] == chosen[2]


def test_unknown_policy_header_is_a_400(two_prefill: Cluster) -> None:
    with two_prefill.http() as http:
        resp = http.post(
            "/v1/completions",
            json={"model": "pdserve-demo", "prompt": "x", "max_tokens": 1},
            headers={"x-pdserve-policy": "fastest"},
        )
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "x-pdserve-policy"


@pytest.mark.parametrize(
    "authorization", [None, "Bearer sk-wrong", f"Basic {API_KEY}", "Bearer", f"{API_KEY}"]
)
def test_every_v1_route_needs_the_api_key(two_prefill: Cluster, authorization: str | None) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    with httpx.Client(base_url=two_prefill.url, timeout=30, headers=headers) as http:
        for resp in (
            http.post("/v1/chat/completions", json={"model": "pdserve-demo", "messages": []}),
            http.post("/v1/completions", json={"model": "pdserve-demo", "prompt": "hi"}),
            http.get("/v1/models"),
            http.get("/v1/pdserve/replicas"),
        ):
            assert resp.status_code == 401, resp.text
            assert resp.json()["error"]["code"] == "invalid_api_key"
            assert API_KEY not in resp.text
        assert http.get("/health").status_code == 200
        assert http.get("/ready").status_code == 200


def test_the_api_key_is_served_by_the_official_client(two_prefill: Cluster) -> None:
    resp = two_prefill.client().completions.create(
        model="pdserve-demo", prompt="with a key", max_tokens=4, temperature=0
    )
    assert resp.usage is not None and resp.usage.completion_tokens == 4
