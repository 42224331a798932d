"""`send_one` judges what the router answered (httpx MockTransport: no server)."""

from __future__ import annotations

import json

import httpx
import pytest

from pdserve.bench.fault_load import completion_body, prompt_of_words, send_one

DECISION = {"x-pdserve-decision": json.dumps({"fallbacks": ["prefill failed on p0"]})}


def _sse(*payloads: str) -> bytes:
    return "".join(f"data: {p}\n\n" for p in payloads).encode()


def _client(status: int, body: bytes, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    def answer(_: httpx.Request) -> httpx.Response:
        kind = "text/event-stream" if status == 200 else "application/json"
        return httpx.Response(
            status, content=body, headers={"content-type": kind, **(headers or {})}
        )

    return httpx.AsyncClient(base_url="http://router", transport=httpx.MockTransport(answer))


CHUNK = json.dumps({"choices": [{"index": 0, "text": " a", "finish_reason": None}]})
ERROR = json.dumps(
    {
        "error": {
            "message": "the decode failed mid-stream (request r)",
            "type": "server_error",
            "param": None,
            "code": "decode_failed",
        }
    }
)


@pytest.mark.parametrize(
    ("status", "body", "headers", "expected"),
    [
        (200, _sse(CHUNK, "[DONE]"), DECISION, (200, True, None, 1)),
        (200, _sse(CHUNK, ERROR), {}, (200, False, "decode_failed", 0)),
        (200, _sse(CHUNK), {}, (200, False, None, 0)),  # cut: neither [DONE] nor an error
        (502, ERROR.encode(), {}, (502, False, "decode_failed", 0)),
        (500, b"Internal Server Error", {}, (500, False, None, 0)),
    ],
)
async def test_send_one_judges_the_answer(
    status: int, body: bytes, headers: dict[str, str], expected: tuple[object, ...]
) -> None:
    async with _client(status, body, headers) as http:
        body_json = completion_body("m", prompt_of_words(5, salt=1), 4)
        o = await send_one(http, body_json, {}, timeout_s=5)
    assert (o.status, o.completed, o.error_code, o.fallbacks) == expected
    assert o.ended_s >= o.started_s


def test_prompts_differ_from_their_first_word() -> None:
    a, b = prompt_of_words(50, salt=1), prompt_of_words(50, salt=2)
    assert a.split()[:2] != b.split()[:2] and len(a.split()) == 52
