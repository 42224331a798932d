"""OpenAI response bodies and stream chunks built from decode chunks (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pdserve.messages import DecodeChunk, TokenLogprob

Kind = Literal["chat", "completion"]


def _token_bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))


def chat_logprobs(items: list[TokenLogprob]) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": it.token,
                "logprob": it.logprob,
                "bytes": _token_bytes(it.token),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": _token_bytes(t)} for t, _, lp in it.top
                ],
            }
            for it in items
        ]
    }


def completion_logprobs(items: list[TokenLogprob], text_offset_start: int) -> dict[str, Any]:
    offsets, pos = [], text_offset_start
    for it in items:
        offsets.append(pos)
        pos += len(it.token)
    return {
        "tokens": [it.token for it in items],
        "token_logprobs": [it.logprob for it in items],
        "top_logprobs": [{t: lp for t, _, lp in it.top} for it in items],
        "text_offset": offsets,
    }


def usage(num_prompt: int, num_completion: int, num_cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": num_prompt,
        "completion_tokens": num_completion,
        "total_tokens": num_prompt + num_completion,
        "prompt_tokens_details": {"cached_tokens": num_cached},
    }


@dataclass
class ResponseBuilder:
    """Builds the chunks/body of one response. One instance per request."""

    kind: Kind
    request_id: str
    model: str
    created: int
    num_prompt_tokens: int
    num_cached_tokens: int | None = None
    """Set by the caller before `usage`/`body` (the request's observation knows it)."""
    prompt_cost: dict[str, Any] | None = None
    """Set by the caller before `usage`/`body`: the usage's `pdserve_prompt_cost` field
    (None: not reported)."""
    num_completion_tokens: int = 0
    text_parts: list[str] = field(default_factory=list)
    logprob_items: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    _text_len: int = 0

    @property
    def object_id(self) -> str:
        return f"chatcmpl-{self.request_id}" if self.kind == "chat" else f"cmpl-{self.request_id}"

    def add(self, chunk: DecodeChunk) -> None:
        """Fold a decode chunk into the totals (both streaming and not)."""
        self.num_completion_tokens += len(chunk.token_ids)
        self.text_parts.append(chunk.text)
        if chunk.logprobs:
            self.logprob_items.extend(chunk.logprobs)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason

    def usage(self) -> dict[str, Any]:
        body = usage(
            self.num_prompt_tokens, self.num_completion_tokens, self.num_cached_tokens or 0
        )
        if self.prompt_cost is not None:
            body["pdserve_prompt_cost"] = self.prompt_cost
        return body

    # Streaming -------------------------------------------------------------------------
    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.object_id,
            "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def first_chat_chunk(self) -> dict[str, Any]:
        """Chat streams open with the assistant role."""
        return self._envelope(
            [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )

    def stream_chunk(self, chunk: DecodeChunk) -> dict[str, Any]:
        """The SSE payload for one decode chunk (call after `add`)."""
        if self.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": chunk.text} if chunk.text else {},
                "logprobs": chat_logprobs(chunk.logprobs) if chunk.logprobs else None,
                "finish_reason": chunk.finish_reason,
            }
        else:
            start = self._text_len
            choice = {
                "index": 0,
                "text": chunk.text,
                "logprobs": completion_logprobs(chunk.logprobs, start) if chunk.logprobs else None,
                "finish_reason": chunk.finish_reason,
            }
        self._text_len += len(chunk.text)
        return self._envelope([choice])

    def usage_chunk(self) -> dict[str, Any]:
        """The final stream chunk when stream_options.include_usage is set."""
        body = self._envelope([])
        body["usage"] = self.usage()
        return body

    # Non-streaming ---------------------------------------------------------------------
    def body(self) -> dict[str, Any]:
        """The whole non-streaming response."""
        text = "".join(self.text_parts)
        if self.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": chat_logprobs(self.logprob_items) if self.logprob_items else None,
                "finish_reason": self.finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": completion_logprobs(self.logprob_items, 0)
                if self.logprob_items
                else None,
                "finish_reason": self.finish_reason,
            }
            obj = "text_completion"
        return {
            "id": self.object_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(),
        }
