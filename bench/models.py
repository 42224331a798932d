"""Typed data shared by the benchmark's core and its adapters (frozen dataclasses, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Endpoint = Literal["completions", "chat"]


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn as sent to `/v1/chat/completions`."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_call_id: str | None = None

    def to_json(self) -> dict[str, str]:
        body = {"role": self.role, "content": self.content}
        if self.tool_call_id is not None:
            body["tool_call_id"] = self.tool_call_id
        return body


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload, fully materialized before it is sent.

    Exactly one of `prompt` (completions: text or token ids) and `messages` (chat) is set.
    `arrival_s` is the send time relative to the phase start; None means "as soon as the
    concurrency limit allows". `agent`/`step` are set for the agent workload only.
    """

    index: int
    request_class: str
    max_tokens: int
    target_prompt_tokens: int
    prompt: str | tuple[int, ...] | None = None
    messages: tuple[ChatMessage, ...] | None = None
    arrival_s: float | None = None
    agent: int | None = None
    step: int | None = None
    conversation: str | None = None
    """Sent as the x-pdserve-conversation header (agent workload), so pdserve compares each
    step with the previous one of the same conversation."""

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a RequestSpec needs exactly one of `prompt` and `messages`")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def endpoint(self) -> Endpoint:
        return "chat" if self.messages is not None else "completions"


@dataclass(frozen=True)
class CacheBreakRecord:
    """pdserve's cache break of one request: where its prompt departed from the previous
    prompt of its conversation (router/context/breaks.py)."""

    token_index: int
    message_index: int | None
    role: str | None
    part: str
    lost_tokens: int


@dataclass(frozen=True)
class PromptCostRecord:
    """pdserve's `pdserve_prompt_cost` usage field: prompt tokens by part and by message,
    cached and computed, and the cache break (None: none)."""

    parts: tuple[tuple[str, int, int], ...]
    """(part, cached, computed), in the server's order."""
    messages: tuple[tuple[int, str, int, int], ...]
    """(index, role, cached, computed) per message segment; empty when the server knew no
    layout."""
    cache_break: CacheBreakRecord | None = None


@dataclass(frozen=True)
class Usage:
    """The `usage` object of the final stream chunk; `cached_tokens` is None when the server
    does not report `prompt_tokens_details` (plain vLLM needs `--enable-prompt-tokens-details`)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    prompt_cost: PromptCostRecord | None = None
    """pdserve's prompt cost by part (None from other servers, or with it switched off)."""


@dataclass(frozen=True)
class RequestResult:
    """What one request measured. Times are seconds; `start_s` is relative to the phase start.

    `error` is None for a success. `ttft_s` is None only when no chunk arrived at all.
    `chunk_gaps_s` are the gaps between consecutive non-empty content chunks (one chunk may
    carry several tokens). Token counts come from `usage` (None when the server sent none).
    `retry_after_s` is the `Retry-After` header of an HTTP error answer (None without one).
    `stages` is pdserve's own timeline of the request (stage, seconds; empty elsewhere).
    `prompt_cost` is pdserve's prompt cost by part (None elsewhere).
    """

    index: int
    request_class: str
    start_s: float
    e2e_s: float
    ttft_s: float | None
    chunk_gaps_s: tuple[float, ...]
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    text: str
    error: str | None = None
    status: int | None = None
    agent: int | None = None
    step: int | None = None
    retry_after_s: float | None = None
    stages: tuple[tuple[str, float], ...] = ()
    prompt_cost: PromptCostRecord | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        return tpot_s(self.ttft_s, self.e2e_s, self.completion_tokens)


def tpot_s(ttft_s: float | None, e2e_s: float, completion_tokens: int | None) -> float | None:
    """Time per output token after the first: (E2E - TTFT) / (completion tokens - 1); None
    without a first token or with fewer than two tokens."""
    if ttft_s is None or completion_tokens is None or completion_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (completion_tokens - 1)


@dataclass(frozen=True)
class PhaseOutcome:
    """All results of one phase: one policy, one round. `wall_s` runs from the first send to
    the last completion (or to the interruption)."""

    policy: str
    round_index: int
    results: tuple[RequestResult, ...]
    wall_s: float
    interrupted: bool = False


@dataclass(frozen=True)
class WorkloadPlan:
    """The requests of one phase, plus how many the length limits clipped or skipped."""

    specs: tuple[RequestSpec, ...]
    num_input_clipped: int = 0
    num_output_clipped: int = 0
    num_skipped: int = 0
