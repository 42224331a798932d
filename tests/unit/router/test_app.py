"""The router's HTTP layer over the real request path (preparer, orchestrator, observer,
placer) with a scripted Dispatcher: OpenAI bodies, SSE streams, headers, error bodies and the
request counter, as a client sees them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from pdserve.config import PdserveConfig
from pdserve.router.app import build_app
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.prepare import RequestPreparer
from pdserve.router.status import ClusterStatus
from tests.unit.router.fakes import FakeDispatcher, StepClock, WordTokenizer, placer

LONG_PROMPT = " ".join(f"w{i}" for i in range(300))  # 300 tokens: remote prefill
MODEL = "pdserve-demo"


class Client:
    def __init__(self, dispatcher: FakeDispatcher, fallback: str = "fail", **app_args: Any):
        config = PdserveConfig.model_validate({"router": {"fallback": {"prefill": fallback}}})
        the_placer = placer(local_prefill_max_cold_tokens=64)
        self.metrics = RouterMetrics()
        observer = RouterObserver(self.metrics, the_placer, clock=StepClock())
        app = build_app(
            RequestPreparer(config, WordTokenizer()),
            Orchestrator(config.router, dispatcher, the_placer),
            observer,
            ClusterStatus(the_placer, dispatcher),
            **app_args,
        )
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://router",
        )

    def requests(self, endpoint: str, decision: str, status: str) -> float:
        labels = {"endpoint": endpoint, "decision": decision, "status": status}
        return self.metrics.registry.get_sample_value("pdserve_requests_total", labels) or 0.0


def sse_payloads(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


async def test_completion_answers_the_openai_body_with_decision_and_timing_headers() -> None:
    c = Client(FakeDispatcher())
    resp = await c.http.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 3},
        headers={"x-request-id": "abc"},
    )
    assert resp.status_code == 200
    body = resp.json()
    assert body["id"] == "cmpl-abc" and body["choices"][0]["text"] == " a b c"
    assert body["usage"]["prompt_tokens"] == 300 and body["usage"]["completion_tokens"] == 3
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 3
    decision = json.loads(resp.headers["x-pdserve-decision"])
    assert (decision["prefill"], decision["decode"], decision["policy"]) == ("p0", "d0", "pdserve")
    assert json.loads(resp.headers["x-pdserve-served-by"]) == {"prefill": "p0", "decode": "d0"}
    assert "decode" in json.loads(resp.headers["x-pdserve-timing"])
    assert c.requests("completion", "remote_prefill", "200") == 1


async def test_chat_stream_sends_role_tokens_usage_with_timeline_then_done() -> None:
    c = Client(FakeDispatcher())
    resp = await c.http.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi there"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert resp.status_code == 200
    assert "decode_first_token" in json.loads(resp.headers["x-pdserve-timing"])
    payloads = sse_payloads(resp.text)
    assert payloads[-1] == "[DONE]"
    events = [json.loads(p) for p in payloads[:-1]]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-1])
    assert text == " a b c" and events[-2]["choices"][0]["finish_reason"] == "length"
    usage = events[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert set(usage["pdserve_timing"]) >= {"router_queue", "decode"}
    assert c.requests("chat", "local_prefill", "200") == 1  # 3 prompt tokens: local prefill


async def test_unknown_model_is_a_404_counted_as_rejected_and_nothing_is_sent() -> None:
    d = FakeDispatcher()
    c = Client(d)
    resp = await c.http.post("/v1/completions", json={"model": "gpt-x", "prompt": "hello"})
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "model_not_found"
    assert d.prefills == [] and d.decodes == []
    assert c.requests("completion", "none", "404") == 1


async def test_policy_header_is_refused_unless_enabled() -> None:
    c = Client(FakeDispatcher())
    body = {"model": MODEL, "prompt": "hello"}
    resp = await c.http.post("/v1/completions", json=body, headers={"x-pdserve-policy": "x"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "x-pdserve-policy"
    c2 = Client(FakeDispatcher(), allow_policy_override=True)
    resp = await c2.http.post(
        "/v1/completions", json=body, headers={"x-pdserve-policy": "round_robin"}
    )
    assert resp.status_code == 200
    assert json.loads(resp.headers["x-pdserve-decision"])["policy"] == "round_robin"


async def test_kv_verify_header_is_refused_unless_enabled_and_turns_the_check_off() -> None:
    body = {"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 3}
    off = {"x-pdserve-kv-verify": "off"}
    resp = await Client(FakeDispatcher()).http.post("/v1/completions", json=body, headers=off)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "x-pdserve-kv-verify"
    d = FakeDispatcher()
    c = Client(d, allow_policy_override=True)
    bad = {"x-pdserve-kv-verify": "maybe"}
    resp = await c.http.post("/v1/completions", json=body, headers=bad)
    assert resp.status_code == 400 and "on, off" in resp.json()["error"]["message"]
    assert d.prefills == []
    resp = await c.http.post("/v1/completions", json=body, headers=off)
    assert resp.status_code == 200
    assert [p.verify_kv for p in d.prefills] == [False]
    assert "kv_verify" not in json.loads(resp.headers["x-pdserve-decision"])


async def test_prefill_failure_is_an_openai_502_and_the_next_request_succeeds() -> None:
    d = FakeDispatcher(prefill_error=RuntimeError("prefill replica died"))
    c = Client(d)
    body = {"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 3}
    resp = await c.http.post("/v1/completions", json=body, headers={"x-request-id": "r-9"})
    assert resp.status_code == 502  # the prefill replica (upstream) failed
    error = resp.json()["error"]
    assert error["code"] == "prefill_failed" and "r-9" in error["message"]
    assert "died" not in error["message"]  # the exception text stays in the router's log
    assert c.requests("completion", "none", "502") == 1
    d.prefill_error = None
    assert (await c.http.post("/v1/completions", json=body)).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_decode_failure_before_the_first_token_is_an_http_502(stream: bool) -> None:
    c = Client(FakeDispatcher(decode_fail_at=0))
    body = {"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 3, "stream": stream}
    resp = await c.http.post("/v1/completions", json=body, headers={"x-request-id": "r-7"})
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "decode_failed")
    assert "r-7" in error["message"]
    assert c.requests("completion", "remote_prefill", "502") == 1


async def test_decode_failure_mid_stream_ends_the_stream_with_an_error_event() -> None:
    d = FakeDispatcher(decode_fail_at=2)
    c = Client(d)
    body = {"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 3, "stream": True}
    resp = await c.http.post("/v1/completions", json=body, headers={"x-request-id": "r-8"})
    assert resp.status_code == 200  # already streaming when decode failed
    payloads = sse_payloads(resp.text)
    assert "[DONE]" not in payloads
    assert [json.loads(p)["choices"][0]["text"] for p in payloads[:2]] == [" a", " b"]
    error = json.loads(payloads[-1])["error"]
    assert error["code"] == "decode_failed" and "mid-stream" in error["message"]
    assert "r-8" in error["message"]
    assert "chunk 2" not in error["message"]
    assert c.requests("completion", "remote_prefill", "502") == 1


async def test_ready_and_models() -> None:
    c = Client(FakeDispatcher())
    ready = await c.http.get("/ready")
    assert ready.status_code == 200 and ready.json() == {
        "ready": True,
        "pools": {"prefill": True, "decode": True},
        "placement": True,
    }
    models = (await c.http.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    metrics = (await c.http.get("/metrics")).text
    assert 'pdserve_pool_ready_replicas{pool="decode"} 1.0' in metrics
