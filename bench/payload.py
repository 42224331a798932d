"""Request bodies and headers for one `RequestSpec` (pure)."""

from __future__ import annotations

from typing import Any

from pdserve.bench.models import RequestSpec
from pdserve.router.headers import CONVERSATION_HEADER, POLICY_HEADER

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def request_body(spec: RequestSpec, model: str) -> dict[str, Any]:
    """Streaming, greedy, exact-length (`ignore_eos`, a vLLM extension) OpenAI body."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": spec.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    if spec.messages is not None:
        body["messages"] = [m.to_json() for m in spec.messages]
    elif isinstance(spec.prompt, tuple):
        body["prompt"] = list(spec.prompt)
    else:
        body["prompt"] = spec.prompt
    return body


def request_headers(policy: str | None, conversation: str | None = None) -> dict[str, str]:
    """The policy header when comparing policies (None: no header), and the conversation
    header of an agent's steps."""
    headers = {} if policy is None else {POLICY_HEADER: policy}
    if conversation is not None:
        headers[CONVERSATION_HEADER] = conversation
    return headers
