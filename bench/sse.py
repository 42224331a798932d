"""Server-sent events: decode `text/event-stream` lines and read OpenAI stream chunks (pure).

`httpx_sse` is not installed in this project, so this is the small subset of the WHATWG SSE
format that OpenAI-compatible servers use: `data:` lines (several join with newlines), an
optional `event:` name, `:` comments, and a blank line that ends an event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pdserve.bench.models import Usage

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


def split_field(line: str) -> tuple[str, str] | None:
    """`"data: x"` → `("data", "x")`; a comment or blank line → None. One leading space of
    the value is dropped, as the SSE spec says."""
    if not line or line.startswith(":"):
        return None
    name, sep, value = line.partition(":")
    if not sep:
        return name, ""
    return name, value[1:] if value.startswith(" ") else value


class SSEDecoder:
    """Feed it lines (without line endings) in order; it returns an event when one ends.

    One decoder per response; not thread-safe; no I/O.
    """

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""

    def feed(self, line: str) -> SSEEvent | None:
        line = line.rstrip("\r\n")
        if line == "":
            return self._dispatch()
        field = split_field(line)
        if field is None:
            return None
        name, value = field
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def flush(self) -> SSEEvent | None:
        """The last event when the stream ended without a blank line; else None."""
        return self._dispatch()

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SSEEvent(event=self._event or "message", data="\n".join(self._data))
        self._data, self._event = [], ""
        return event


def _usage(body: Any) -> Usage | None:
    if not isinstance(body, dict):
        return None
    details = body.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=int(body.get("prompt_tokens") or 0),
        completion_tokens=int(body.get("completion_tokens") or 0),
        cached_tokens=int(cached) if cached is not None else None,
    )


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
        text="".join(texts), usage=_usage(body.get("usage")), has_choice=bool(choices)
    )
