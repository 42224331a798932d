"""SSE decoding (httpx-sse underneath) and OpenAI stream chunks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from pdserve.bench.models import Usage
from pdserve.bench.sse import SSEEvent, aiter_events, read_chunk


def _events(lines: list[str]) -> list[SSEEvent]:
    """The events `aiter_events` reads from a response whose body is `lines`, LF-joined."""
    body = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    resp = httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})

    async def read() -> list[SSEEvent]:
        return [e async for e in aiter_events(resp)]

    return asyncio.run(read())


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["data: a", "", "data: b", ""], [("message", "a"), ("message", "b")]),
        (["data: a\r\n", "\r\n"], [("message", "a")]),
        (["data:a", "", "data:  two", ""], [("message", "a"), ("message", " two")]),  # one space
        (["data: x", "data: y", ""], [("message", "x\ny")]),  # multi-line data
        ([": ping", "", "data: a", ""], [("message", "a")]),  # comments are no events
        (["event: error", "data: boom", ""], [("error", "boom")]),
        (["id: 7", "", "data: a", "", ""], [("message", "a")]),  # no data, no event
        (['data: {"t": "a\u2028b"}', ""], [("message", '{"t": "a\u2028b"}')]),  # U+2028
        (["", "", ""], []),
    ],
)
def test_decoder(lines: list[str], expected: list[tuple[str, str]]) -> None:
    assert [(e.event, e.data) for e in _events(lines)] == expected


async def _read(
    chunks: AsyncIterator[bytes], content_type: str = "text/event-stream"
) -> list[SSEEvent]:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks, headers={"content-type": content_type})

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http,
        http.stream("GET", "http://sse.test/") as resp,
    ):
        return [e async for e in aiter_events(resp)]


async def _bytes(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_aiter_events_splits_only_at_sse_line_ends() -> None:
    # An event split across reads, CRLF endings, a comment, and U+2028 inside the JSON text
    # (a Unicode line boundary that `aiter_lines` would split at).
    text = json.dumps({"choices": [{"text": "a\u2028b"}]}, ensure_ascii=False)
    parts = (b": ping\r\n\r\ndata: ", (text + "\n\n").encode(), b"data: [DO", b"NE]\r\n\r\n")
    events = await _read(_bytes(*parts))
    assert [read_chunk(e).text for e in events] == ["a\u2028b", ""]
    assert read_chunk(events[-1]).done


async def test_aiter_events_yields_each_event_before_the_next_arrives() -> None:
    seen: list[str] = []
    release = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        await asyncio.wait_for(release.wait(), timeout=5)  # times out if events are buffered
        yield b"data: 2\n\n"

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks(), headers={"content-type": "text/event-stream"})

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http,
        http.stream("GET", "http://sse.test/") as resp,
    ):
        async for event in aiter_events(resp):
            seen.append(event.data)
            release.set()
    assert seen == ["1", "2"]


async def test_aiter_events_reports_a_response_that_is_not_an_event_stream() -> None:
    events = await _read(_bytes(b'{"choices": []}'), content_type="application/json")
    chunk = read_chunk(events[0])
    assert len(events) == 1 and chunk.error is not None and "text/event-stream" in chunk.error


def _chunk(body: object, event: str = "message") -> SSEEvent:
    return SSEEvent(event=event, data=json.dumps(body))


def test_completion_text_chunk() -> None:
    c = read_chunk(_chunk({"choices": [{"index": 0, "text": "Hel"}], "usage": None}))
    assert (c.text, c.usage, c.error, c.done, c.has_choice) == ("Hel", None, None, False, True)


def test_chat_delta_chunks() -> None:
    assert read_chunk(_chunk({"choices": [{"delta": {"content": "lo"}}]})).text == "lo"
    role_only = read_chunk(_chunk({"choices": [{"delta": {"role": "assistant"}}]}))
    assert role_only.text == "" and role_only.has_choice


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {
                "cached_tokens": 8}},
            Usage(10, 3, 8),
        ),
        ({"prompt_tokens": 10, "completion_tokens": 3}, Usage(10, 3, None)),
        ({"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": None},
         Usage(10, 3, None)),
    ],
)  # fmt: skip
def test_usage_chunk(usage: dict[str, object], expected: Usage) -> None:
    c = read_chunk(_chunk({"choices": [], "usage": usage}))
    assert c.usage == expected and c.text == "" and not c.has_choice


def test_done() -> None:
    assert read_chunk(SSEEvent("message", "[DONE]")).done


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (_chunk({"error": {"message": "too long", "type": "BadRequestError"}}), "too long"),
        (_chunk({"object": "error", "message": "old style"}), "old style"),
        (SSEEvent("error", "plain failure"), "plain failure"),
        (SSEEvent("message", "{not json"), "malformed stream event: '{not json'"),
    ],
)
def test_errors_in_stream(event: SSEEvent, message: str) -> None:
    assert read_chunk(event).error == message


def test_pdserve_timing_of_the_usage_chunk_is_read_in_order() -> None:
    body = {
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "pdserve_timing": {"router_queue": 0.001, "prefill": 0.05, "decode": 0.2, "note": "x"},
    }
    chunk = read_chunk(SSEEvent(event="message", data=json.dumps(body)))
    assert chunk.stages == (("router_queue", 0.001), ("prefill", 0.05), ("decode", 0.2))
    plain = read_chunk(SSEEvent(event="message", data=json.dumps({"choices": []})))
    assert plain.stages == ()


def test_usage_chunk_carries_pdserve_prompt_cost() -> None:
    usage = {
        "prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 4},
        "pdserve_prompt_cost": {
            "parts": {"system": {"cached": 4, "computed": 2}, "template": {"cached": 0,
                                                                          "computed": 4}},
            "cache_break": {"token_index": 3, "message_index": 0, "role": "system",
                            "part": "system", "lost_tokens": 7},
            "messages": [{"index": 0, "role": "system", "cached": 4, "computed": 3}],
        },
    }  # fmt: skip
    chunk = read_chunk(SSEEvent("message", json.dumps({"choices": [], "usage": usage})))
    assert chunk.usage is not None and chunk.usage.prompt_cost is not None
    cost = chunk.usage.prompt_cost
    assert cost.parts == (("system", 4, 2), ("template", 0, 4))
    assert cost.messages == ((0, "system", 4, 3),)
    assert cost.cache_break is not None and cost.cache_break.lost_tokens == 7
    usage["pdserve_prompt_cost"] = {"parts": {"system": {"cached": "x"}}}  # malformed
    chunk = read_chunk(SSEEvent("message", json.dumps({"choices": [], "usage": usage})))
    assert chunk.usage is not None and chunk.usage.prompt_cost is None
