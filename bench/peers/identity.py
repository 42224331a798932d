"""Greedy outputs must be token-identical across the setups.

A few fixed prompts (short, medium, and one of ~1,500 tokens: many KV blocks over NIXL) go
to each setup as non-streamed `/v1/completions` with temperature 0, `logprobs: 1` (so the
response lists the generated tokens one by one) and `ignore_eos`. `compare()` is pure.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from pdserve.bench.words import WORDS

MAX_TOKENS = 24


def identity_prompts() -> dict[str, str]:
    """The fixed prompts, by name (the same on every run)."""
    rng = random.Random("pdserve-peers-identity")

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    return {
        "short": "The quick brown fox jumps over",
        "medium": "peers-identity-medium " + words(200),
        "long": "peers-identity-long " + words(1300),
    }


@dataclass(frozen=True)
class Output:
    """What one setup generated for one prompt."""

    text: str
    tokens: tuple[str, ...] | None
    prompt_tokens: int | None
    error: str | None = None


def fetch_outputs(url: str, model: str, timeout_s: float = 120.0) -> dict[str, Output]:
    """Send every identity prompt to one setup; failures are recorded, not raised."""
    outputs: dict[str, Output] = {}
    with httpx.Client(timeout=timeout_s) as client:
        for name, prompt in identity_prompts().items():
            body: dict[str, Any] = {
                "model": model,
                "prompt": prompt,
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
                "ignore_eos": True,
                "logprobs": 1,
            }
            try:
                resp = client.post(f"{url}/v1/completions", json=body)
                resp.raise_for_status()
                data = resp.json()
            except (httpx.HTTPError, ValueError) as exc:
                outputs[name] = Output("", None, None, error=str(exc)[:300])
                continue
            choice = data["choices"][0]
            logprobs = choice.get("logprobs") or {}
            tokens = logprobs.get("tokens")
            outputs[name] = Output(
                text=choice.get("text") or "",
                tokens=tuple(tokens) if tokens is not None else None,
                prompt_tokens=(data.get("usage") or {}).get("prompt_tokens"),
            )
    return outputs


@dataclass(frozen=True)
class IdentityResult:
    """Per prompt: did every setup produce the same tokens (and text)?"""

    identical: bool
    per_prompt: dict[str, bool]
    details: dict[str, dict[str, Any]]


def compare(outputs: Mapping[str, Mapping[str, Output]]) -> IdentityResult:
    """Compare {setup: {prompt: Output}}. A prompt matches when no setup failed, every token
    list (or, if a setup returned none, every text) is equal, and prompt lengths agree."""
    setups = list(outputs)
    prompts = sorted({p for per in outputs.values() for p in per})
    per_prompt: dict[str, bool] = {}
    details: dict[str, dict[str, Any]] = {}
    for prompt in prompts:
        got = {s: outputs[s].get(prompt) for s in setups}
        ok = bool(got) and all(o is not None and o.error is None for o in got.values())
        if ok:
            values = [o for o in got.values() if o is not None]
            texts = {o.text for o in values}
            token_lists = {o.tokens for o in values}
            lengths = {o.prompt_tokens for o in values if o.prompt_tokens is not None}
            tokens_ok = None not in token_lists and len(token_lists) == 1
            ok = len(texts) == 1 and len(lengths) <= 1 and (tokens_ok or None in token_lists)
        per_prompt[prompt] = ok
        by_tokens = all(o is not None and o.tokens is not None for o in got.values())
        details[prompt] = {"compared_token_lists": by_tokens} | {
            s: {
                "text": o.text if o else None,
                "num_tokens": len(o.tokens) if o and o.tokens is not None else None,
                "prompt_tokens": o.prompt_tokens if o else None,
                "error": o.error if o else "missing",
            }
            for s, o in got.items()
        }
    return IdentityResult(
        identical=bool(per_prompt) and all(per_prompt.values()),
        per_prompt=per_prompt,
        details=details,
    )
