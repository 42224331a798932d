"""A second cluster, 2 prefill + 1 decode, started with an API key. Routing: the policy's choice
is where requests really run (enforced by pdserve's Ray Serve request router), an agent loop
stays on the replica that holds its prefix (learned from vLLM's KV events), and the baselines
stay selectable per request. The front door: every /v1 route needs the key; /health and
/ready do not. Last, a fault: one prefill engine is killed under load (no request fails, the
replica is replaced)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest

from pdserve import local_cluster
from tests.integration.conftest import Cluster, start_cluster, stop_cluster
from tests.integration.texts import text_of_words

API_KEY = "sk-pdserve-test-4f1c"
RAY_PORT_2P1D = 6396


@pytest.fixture(scope="module")
def two_prefill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    shm_before = local_cluster.shm_snapshot()
    cluster, env = start_cluster(
        "local-2p1d.yaml",
        tmp_path_factory.mktemp("2p1d"),
        18200,
        RAY_PORT_2P1D,
        8084,
        api_key=API_KEY,
    )
    try:
        yield cluster
    finally:
        # After the engine kill below: `down` must still leave nothing behind.
        stop_cluster(env, shm_before)


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


# ---- faults: the last test of the module, it kills one of this cluster's prefill engines ----


def _prefill_engine_cores() -> list[psutil.Process]:
    """This cluster's prefill EngineCore processes (one per prefill replica)."""
    found = []
    for proc in psutil.process_iter(["name", "environ"]):
        env = proc.info["environ"] or {}
        if (
            (proc.info["name"] or "").startswith("VLLM::EngineCor")
            and env.get("PDSERVE_ENGINE_ROLE") == "prefill"
            and env.get("PDSERVE_GCS_ADDRESS", "").endswith(f":{RAY_PORT_2P1D}")
        ):
            found.append(proc)
    return found


def _prefill_replica_ids(http: httpx.Client, healthy_only: bool = False) -> set[str]:
    view = http.get("/v1/pdserve/replicas").json()
    return {r["replica_id"] for r in view["pools"]["prefill"] if r["healthy"] or not healthy_only}


def test_a_killed_prefill_engine_costs_no_request_and_is_replaced(two_prefill: Cluster) -> None:
    engines = _prefill_engine_cores()
    assert len(engines) == 2, f"expected 2 prefill engines, found {len(engines)}"
    with two_prefill.http() as http:
        before = _prefill_replica_ids(http)
    fallbacks_before = two_prefill.metric("pdserve_fallbacks_total", {"stage": "prefill"})
    engines[0].kill()  # SIGKILL: the engine process is gone, its replica actor lives on

    async def burst() -> list[httpx.Response]:
        headers = {"authorization": f"Bearer {API_KEY}", "x-pdserve-policy": "round_robin"}
        async with httpx.AsyncClient(base_url=two_prefill.url, timeout=120) as http:
            bodies = [
                {"model": "pdserve-demo", "prompt": text_of_words(300, salt=7700 + i),
                 "max_tokens": 8, "temperature": 0}
                for i in range(6)
            ]  # fmt: skip
            return list(
                await asyncio.gather(
                    *(http.post("/v1/completions", json=b, headers=headers) for b in bodies)
                )
            )

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 6, [r.text for r in responses]
    recovered = [json.loads(r.headers["x-pdserve-decision"]).get("fallbacks") for r in responses]
    assert any(recovered), "round robin sent nothing to the dead replica: nothing was tested"
    assert two_prefill.metric("pdserve_fallbacks_total", {"stage": "prefill"}) >= (
        fallbacks_before + sum(1 for f in recovered if f)
    )

    # Ray Serve's health check (the engine's own) replaces the replica; the new one serves.
    deadline = time.monotonic() + 240
    with two_prefill.http() as http:
        while True:
            now = _prefill_replica_ids(http, healthy_only=True)  # reporting routing stats
            if len(now) == 2 and now != before:
                break
            assert time.monotonic() < deadline, f"prefill replicas not replaced: {now}"
            time.sleep(2)
        served = set()
        for i in range(4):
            resp = http.post(
                "/v1/completions",
                json={"model": "pdserve-demo", "prompt": text_of_words(300, salt=7800 + i),
                      "max_tokens": 4, "temperature": 0},
                headers={"x-pdserve-policy": "round_robin"},
            )  # fmt: skip
            assert resp.status_code == 200, resp.text
            assert "fallbacks" not in json.loads(resp.headers["x-pdserve-decision"])
            served.add(json.loads(resp.headers["x-pdserve-served-by"])["prefill"])
    assert served == now, "both prefill replicas, the new one included, serve again"
