"""Server-sent events: OpenAI stream chunks from a `text/event-stream` response (pure, but
`aiter_events`, which reads the response).

SSE parsing is httpx-sse's (the WHATWG event-stream rules: `data:` lines joined with newlines,
`event:`, `id:`, `retry:`, `:` comments, a blank line ends an event, and only CR/LF end a
line). `aiter_events` yields each event as soon as its blank line arrives (httpx-sse reads
`response.aiter_text()`, which passes on each network read unbuffered), so arrival times taken
per event are per-chunk arrival times. `read_chunk` interprets one event of an OpenAI
completions or chat completions stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx_sse

from pdserve.bench.models import CacheBreakRecord, PromptCostRecord, Usage

DONE = "[DONE]"


@dataclass(frozen=True)
class SSEEvent:
    event: str
    data: str


@dataclass(frozen=True)
class StreamChunk:
    """One decoded event: generated `text` (may be empty), the `usage` if this chunk carries
    it, an `error` message if the server reported one in the stream, `done` for `[DONE]`."""

    text: str = ""
    usage: Usage | None = None
    error: str | None = None
    done: bool = False
    has_choice: bool = False
    stages: tuple[tuple[str, float], ...] = ()
    """pdserve's per-request timeline (`pdserve_timing` of the final usage chunk: stage name
    and seconds, in path order); empty from other servers."""


async def aiter_events(response: httpx.Response) -> AsyncIterator[SSEEvent]:
    """The events of a streaming `response`, each as soon as it is complete. Events without
    data (keep-alives, a lone `id:`) are skipped. A response that is not `text/event-stream`
    yields one `error` event saying so (`read_chunk` makes it an error chunk)."""
    try:
        async for sse in httpx_sse.EventSource(response).aiter_sse():
            if sse.data:
                yield SSEEvent(event=sse.event, data=sse.data)
    except httpx_sse.SSEError as exc:
        yield SSEEvent(event="error", data=str(exc))


def _usage(body: Any) -> Usage | None:
    if not isinstance(body, dict):
        return None
    details = body.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=int(body.get("prompt_tokens") or 0),
        completion_tokens=int(body.get("completion_tokens") or 0),
        cached_tokens=int(cached) if cached is not None else None,
        prompt_cost=prompt_cost(body.get("pdserve_prompt_cost")),
    )


def prompt_cost(field: Any) -> PromptCostRecord | None:
    """pdserve's `pdserve_prompt_cost` usage field (None when absent or malformed)."""
    if not isinstance(field, dict) or not isinstance(field.get("parts"), dict):
        return None
    try:
        parts = tuple(
            (str(name), int(v["cached"]), int(v["computed"])) for name, v in field["parts"].items()
        )
        messages = tuple(
            (int(m["index"]), str(m["role"]), int(m["cached"]), int(m["computed"]))
            for m in field.get("messages") or ()
        )
        brk = field.get("cache_break")
        found = None
        if isinstance(brk, dict):
            index = brk.get("message_index")
            found = CacheBreakRecord(
                token_index=int(brk["token_index"]),
                message_index=None if index is None else int(index),
                role=None if brk.get("role") is None else str(brk["role"]),
                part=str(brk["part"]),
                lost_tokens=int(brk["lost_tokens"]),
            )
    except (KeyError, TypeError, ValueError):
        return None
    return PromptCostRecord(parts=parts, messages=messages, cache_break=found)


def error_message(body: Any) -> str | None:
    """The message of an OpenAI error body (`{"error": {...}}`, or vLLM's older
    `{"object": "error", "message": ...}`); None if `body` is not an error."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    if isinstance(err, str):
        return err
    if body.get("object") == "error":
        return str(body.get("message") or body)
    return None


def read_chunk(event: SSEEvent) -> StreamChunk:
    """Interpret one event of a completions or chat completions stream."""
    if event.data.strip() == DONE:
        return StreamChunk(done=True)
    try:
        body = json.loads(event.data)
    except json.JSONDecodeError:
        if event.event == "error":
            return StreamChunk(error=event.data[:300])
        return StreamChunk(error=f"malformed stream event: {event.data[:200]!r}")
    message = error_message(body)
    if message is not None or event.event == "error":
        return StreamChunk(error=message or event.data[:200])
    texts: list[str] = []
    choices = body.get("choices") or []
    for choice in choices:
        text = choice.get("text")
        if text is None:
            text = (choice.get("delta") or {}).get("content")
        texts.append(text or "")
    return StreamChunk(
        text="".join(texts),
        usage=_usage(body.get("usage")),
        has_choice=bool(choices),
        stages=_stages(body.get("pdserve_timing")),
    )


def _stages(timing: Any) -> tuple[tuple[str, float], ...]:
    """(stage, seconds) pairs of a `pdserve_timing` object; () for anything else."""
    if not isinstance(timing, dict):
        return ()
    return tuple((str(k), float(v)) for k, v in timing.items() if isinstance(v, (int, float)))
