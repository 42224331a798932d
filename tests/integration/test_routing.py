"""Routing on a 2 prefill + 1 decode cluster: the policy's choice is where requests really run
(enforced by pdserve's Ray Serve request router), an agent loop stays on the replica that holds
its prefix (learned from vLLM's KV events), and the baselines stay selectable per request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Cluster, start_cluster, stop_cluster
from tests.integration.texts import text_of_words


@pytest.fixture(scope="module")
def two_prefill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster, env = start_cluster(
        "local-2p1d.yaml", tmp_path_factory.mktemp("2p1d"), 18200, 6396, 8084
    )
    try:
        yield cluster
    finally:
        stop_cluster(env)


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
    with httpx.Client(base_url=two_prefill.url, timeout=60) as http:
        _chat(http, [{"role": "user", "content": "warm up"}], "pdserve")  # view attaches
        messages = [{"role": "system", "content": text_of_words(300, salt=5150)}]
        prefill_replicas, cached = [], []
        for step in range(4):
            messages.append({"role": "user", "content": text_of_words(150, salt=step)})
            resp = _chat(http, messages, "pdserve")
            decision, served = _route(resp)
            if decision["prefill"] is not None:
                assert served["prefill"] == decision["prefill"], "placement not enforced"
                prefill_replicas.append(decision["prefill"])
            assert served["decode"] == decision["decode"]
            cached.append(resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
            messages.append(
                {"role": "assistant", "content": resp.json()["choices"][0]["message"]["content"]}
            )
    assert len(set(prefill_replicas)) == 1, f"the loop moved between replicas: {prefill_replicas}"
    assert all(later > 0 for later in cached[1:]), f"no prefix reuse after step 1: {cached}"
    view = httpx.get(f"{two_prefill.url}/v1/pdserve/replicas", timeout=10).json()
    held = {r["replica_id"]: r["cached_blocks"] for r in view["pools"]["prefill"]}
    assert held[prefill_replicas[0]] > 0, "the prefix index learned nothing from KV events"


def test_round_robin_baseline_alternates_and_is_enforced(two_prefill: Cluster) -> None:
    with httpx.Client(base_url=two_prefill.url, timeout=60) as http:
        chosen = []
        for i in range(4):
            resp = _chat(http, [{"role": "user", "content": f"question {i}"}], "round_robin")
            decision, served = _route(resp)
            assert decision["policy"] == "round_robin"
            assert served["prefill"] == decision["prefill"]
            chosen.append(decision["prefill"])
    assert len(set(chosen)) == 2 and chosen[0] != chosen[1] and chosen[0] == chosen[2]


def test_unknown_policy_header_is_a_400(two_prefill: Cluster) -> None:
    resp = httpx.post(
        f"{two_prefill.url}/v1/completions",
        json={"model": "pdserve-demo", "prompt": "x", "max_tokens": 1},
        headers={"x-pdserve-policy": "fastest"},
        timeout=30,
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "x-pdserve-policy"
