"""SSE line decoding and OpenAI stream chunks (pure)."""

from __future__ import annotations

import json

import pytest

from pdserve.bench.models import Usage
from pdserve.bench.sse import SSEDecoder, SSEEvent, read_chunk, split_field


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("data: {}", ("data", "{}")),
        ("data:{}", ("data", "{}")),
        ("data:  two", ("data", " two")),  # only one leading space is dropped
        ("event: error", ("event", "error")),
        ("data", ("data", "")),
        (": keep-alive comment", None),
        ("", None),
    ],
)
def test_split_field(line: str, expected: tuple[str, str] | None) -> None:
    assert split_field(line) == expected


def _events(lines: list[str]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out = [e for line in lines if (e := decoder.feed(line)) is not None]
    last = decoder.flush()
    return [*out, last] if last is not None else out


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["data: a", "", "data: b", ""], [("message", "a"), ("message", "b")]),
        (["data: a\r\n", "\r\n"], [("message", "a")]),
        (["data: x", "data: y", ""], [("message", "x\ny")]),  # multi-line data
        ([": ping", "", "data: a", ""], [("message", "a")]),  # comments are no events
        (["event: error", "data: boom", ""], [("error", "boom")]),
        (["data: tail"], [("message", "tail")]),  # no blank line at the end: flush
        (["", "", ""], []),
    ],
)
def test_decoder(lines: list[str], expected: list[tuple[str, str]]) -> None:
    assert [(e.event, e.data) for e in _events(lines)] == expected


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
