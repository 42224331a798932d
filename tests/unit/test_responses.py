"""OpenAI response and stream-chunk shapes built from decode chunks (pure)."""

from __future__ import annotations

from pdserve.messages import DecodeChunk, TokenLogprob
from pdserve.router.responses import ResponseBuilder


def _builder(kind: str) -> ResponseBuilder:
    return ResponseBuilder(
        kind=kind,  # type: ignore[arg-type]
        request_id="abc",
        model="m",
        created=1,
        num_prompt_tokens=10,
        num_cached_tokens=4,
    )


CHUNKS = [
    DecodeChunk(text="Hel", token_ids=[1, 2]),
    DecodeChunk(text="lo", token_ids=[3], finish_reason="length"),
]


def test_chat_body_and_usage() -> None:
    b = _builder("chat")
    for c in CHUNKS:
        b.add(c)
    body = b.body()
    assert body["object"] == "chat.completion"
    assert body["id"] == "chatcmpl-abc"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 4},
    }


def test_completion_stream_chunks_and_usage_chunk() -> None:
    b = _builder("completion")
    payloads = []
    for c in CHUNKS:
        b.add(c)
        payloads.append(b.stream_chunk(c))
    assert [p["choices"][0]["text"] for p in payloads] == ["Hel", "lo"]
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"
    usage = b.usage_chunk()
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3


def test_chat_stream_opens_with_role() -> None:
    first = _builder("chat").first_chat_chunk()
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["object"] == "chat.completion.chunk"


def test_logprobs_shapes() -> None:
    lp = [TokenLogprob(token="a", token_id=1, logprob=-0.5, top=[("a", 1, -0.5), ("b", 2, -1.5)])]
    chunk = DecodeChunk(text="a", token_ids=[1], logprobs=lp, finish_reason="stop")
    chat = _builder("chat")
    chat.add(chunk)
    content = chat.body()["choices"][0]["logprobs"]["content"][0]
    assert content["token"] == "a" and content["logprob"] == -0.5
    assert [t["token"] for t in content["top_logprobs"]] == ["a", "b"]
    comp = _builder("completion")
    comp.add(chunk)
    clp = comp.body()["choices"][0]["logprobs"]
    assert clp["tokens"] == ["a"] and clp["top_logprobs"] == [{"a": -0.5, "b": -1.5}]
    assert clp["text_offset"] == [0]
