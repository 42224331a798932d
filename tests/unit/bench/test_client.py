"""The HTTP adapter against an in-process mock transport (no network)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest

from pdserve.bench.client import BenchClient, BenchError
from pdserve.bench.models import ChatMessage, RequestResult, RequestSpec

Handler = Callable[[httpx.Request], Coroutine[Any, Any, httpx.Response]]


SSE = {"content-type": "text/event-stream"}


def _sse(*payloads: object) -> bytes:
    events = [f"data: {json.dumps(p)}\n\n" for p in payloads]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def _run(
    handler: Handler, spec: RequestSpec, policy: str | None = None, timeout_s: float = 5.0
) -> RequestResult:
    async def go() -> RequestResult:
        client = BenchClient(
            "http://bench.test", 2, timeout_s, transport=httpx.MockTransport(handler)
        )
        try:
            return await client.send(spec, "m", policy, 0.0)
        finally:
            await client.close()

    return asyncio.run(go())


COMPLETION = RequestSpec(3, "short", 3, 10, prompt="hi")
USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}


def test_streamed_completion_is_measured_and_sends_the_policy_header() -> None:
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = _sse(
            {"choices": [{"text": "a"}]},
            {"choices": [{"text": ""}]},
            {"choices": [{"text": "bc"}]},
            {"choices": [{"text": "d", "finish_reason": "length"}]},
            {"choices": [], "usage": USAGE},
        )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    r = _run(handler, COMPLETION, policy="pdserve")
    assert r.ok and r.text == "abcd" and r.index == 3 and r.request_class == "short"
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (10, 3, 4)
    assert r.ttft_s is not None and 0 <= r.ttft_s <= r.e2e_s
    assert len(r.chunk_gaps_s) == 2  # three non-empty content chunks
    request = seen[0]
    assert request.url.path == "/v1/completions"
    assert request.headers["x-pdserve-policy"] == "pdserve"
    sent = json.loads(request.content)
    assert sent["stream"] and sent["ignore_eos"] and sent["prompt"] == "hi"


def test_chat_goes_to_chat_completions_without_policy_header() -> None:
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, content=_sse({"choices": [{"delta": {"content": "x"}}]}), headers=SSE
        )

    spec = RequestSpec(0, "agent", 1, 0, messages=(ChatMessage("user", "q"),))
    r = _run(handler, spec)
    assert r.ok and r.text == "x" and r.completion_tokens == 1  # no usage: counts chunks
    assert seen[0].url.path == "/v1/chat/completions"
    assert "x-pdserve-policy" not in seen[0].headers


@pytest.mark.parametrize(
    ("response", "error", "status"),
    [
        (
            httpx.Response(400, json={"error": {"message": "prompt too long", "type": "x"}}),
            "HTTP 400: prompt too long",
            400,
        ),
        (httpx.Response(503, text="upstream down"), "HTTP 503: upstream down", 503),
        (
            httpx.Response(200, content=_sse({"error": {"message": "engine died"}}), headers=SSE),
            "engine died",
            200,
        ),
    ],
)
def test_failures_become_error_results(response: httpx.Response, error: str, status: int) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return response

    r = _run(handler, COMPLETION)
    assert not r.ok and r.error == error and r.status == status


def test_timeout_is_an_error_not_a_crash() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(2)
        return httpx.Response(200, content=_sse(), headers=SSE)

    r = _run(handler, COMPLETION, timeout_s=0.05)
    assert not r.ok and r.error is not None and "timed out" in r.error


def test_list_models() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "a"}, {"id": "b"}]})
        return httpx.Response(404)

    async def go(h: Handler) -> list[str]:
        client = BenchClient("http://bench.test/", 1, 5.0, transport=httpx.MockTransport(h))
        try:
            return await client.list_models()
        finally:
            await client.close()

    assert asyncio.run(go(handler)) == ["a", "b"]

    async def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500)

    with pytest.raises(BenchError, match="/v1/models failed"):
        asyncio.run(go(broken))


def test_the_api_key_from_pdserve_api_key_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=_sse(), headers=SSE)

    monkeypatch.setenv("PDSERVE_API_KEY", "sk-first, sk-second")
    assert _run(handler, COMPLETION).ok
    assert seen[0].headers["authorization"] == "Bearer sk-first"
    monkeypatch.delenv("PDSERVE_API_KEY")
    assert _run(handler, COMPLETION).ok
    assert "authorization" not in seen[1].headers
