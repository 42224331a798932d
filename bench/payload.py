"""Request bodies and headers for one `RequestSpec` (pure)."""

from __future__ import annotations

from typing import Any

from pdserve.bench.models import RequestSpec
from pdserve.router.headers import (
    CONVERSATION_HEADER,
    ITL_GUARD_HEADER,
    KV_VERIFY_HEADER,
    PACE_HEADER,
    POLICY_HEADER,
)

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


KV_VERIFY_PHASE = "kv-verify:"
"""A --compare phase named `kv-verify:on` / `kv-verify:off` keeps the router's policy and
sends the x-pdserve-kv-verify header instead (the KV check on or off for its requests)."""
ITL_GUARD_PHASE = "itl-guard:"
"""A --compare phase named `itl-guard:on` / `itl-guard:off` keeps the router's policy and
sends the x-pdserve-itl-guard header (the ITL guard on or off for its requests)."""
PACE_PHASE = "pace:"
"""A --compare phase named `pace:on` / `pace:off` keeps the router's policy and sends the
x-pdserve-pace header (the measured pace on or off for its requests)."""


def request_headers(policy: str | None, conversation: str | None = None) -> dict[str, str]:
    """The compared phase's header (None: no header): x-pdserve-policy, or for a
    `kv-verify:on|off` phase x-pdserve-kv-verify, for an `itl-guard:on|off` phase
    x-pdserve-itl-guard, for a `pace:on|off` phase x-pdserve-pace; and the conversation
    header of an agent's steps."""
    headers: dict[str, str] = {}
    if policy is not None and policy.startswith(KV_VERIFY_PHASE):
        headers[KV_VERIFY_HEADER] = policy.removeprefix(KV_VERIFY_PHASE)
    elif policy is not None and policy.startswith(ITL_GUARD_PHASE):
        headers[ITL_GUARD_HEADER] = policy.removeprefix(ITL_GUARD_PHASE)
    elif policy is not None and policy.startswith(PACE_PHASE):
        headers[PACE_HEADER] = policy.removeprefix(PACE_PHASE)
    elif policy is not None:
        headers[POLICY_HEADER] = policy
    if conversation is not None:
        headers[CONVERSATION_HEADER] = conversation
    return headers
