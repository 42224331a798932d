"""Cost-model samples from the router's responses and client-side stream timings (pure).

The router reports each request's stages in the `x-pdserve-timing` header (compact JSON;
`prefill` = compute seconds on the prefill engine) and its routing decision in
`x-pdserve-decision` (incl. `cached_tokens`, the router's view of the prefix cache). The
response's `usage.prompt_tokens_details.cached_tokens` is the engine's own count.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pdserve.router.headers import DECISION_HEADER, TIMING_HEADER
from pdserve.router.policy.cost_model import DecodeSample, PrefillSample


class ProfileError(RuntimeError):
    """The profile cannot go on (cluster unreachable, HTTP error, unusable response); the
    message says what happened and, where it can, what to do."""


def header_json(headers: Mapping[str, str], name: str) -> dict[str, Any] | None:
    """The JSON object in header `name`; None when absent. Raises ProfileError when it is
    present but not a JSON object."""
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"header {name} is not JSON: {raw[:200]!r}") from exc
    if not isinstance(value, dict):
        raise ProfileError(f"header {name} is not a JSON object: {raw[:200]!r}")
    return value


def cached_tokens(body: Mapping[str, Any], decision: Mapping[str, Any] | None) -> int:
    """Prompt tokens served from the prefix cache: the engine's count in
    `usage.prompt_tokens_details.cached_tokens` when present, else the decision header's
    `cached_tokens`, else 0."""
    usage = body.get("usage")
    if isinstance(usage, Mapping):
        details = usage.get("prompt_tokens_details")
        if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
            return int(details["cached_tokens"])
    if decision is not None and decision.get("cached_tokens") is not None:
        return int(decision["cached_tokens"])
    return 0


def prompt_tokens(body: Mapping[str, Any], num_sent_tokens: int) -> int:
    """The prompt's tokens: the response's `usage.prompt_tokens`, else what was sent."""
    usage = body.get("usage")
    if isinstance(usage, Mapping) and usage.get("prompt_tokens") is not None:
        return int(usage["prompt_tokens"])
    return num_sent_tokens


def prefill_sample(
    headers: Mapping[str, str], body: Mapping[str, Any], num_prompt_tokens: int
) -> PrefillSample | None:
    """The prefill of one non-streaming completion, or None when it had no remote prefill
    (the router prefilled it on the decode engine: the timing header has no `prefill` stage).

    Tokens: `usage.prompt_tokens` (else `num_prompt_tokens`, what was sent) minus the cached
    ones (`cached_tokens`). Raises ProfileError when the timing header is missing (not a
    pdserve router) or malformed.
    """
    timing = header_json(headers, TIMING_HEADER)
    if timing is None:
        raise ProfileError(
            f"the response has no {TIMING_HEADER} header: is this URL a pdserve router?"
        )
    seconds = timing.get("prefill")
    if seconds is None:
        return None
    prompt = prompt_tokens(body, num_prompt_tokens)
    cached = min(cached_tokens(body, header_json(headers, DECISION_HEADER)), prompt)
    return PrefillSample(
        num_uncached_tokens=prompt - cached, num_cached_tokens=cached, seconds=float(seconds)
    )


def tpot_s(first_token_s: float, last_token_s: float, num_tokens: int) -> float | None:
    """Time per output token after the first: (last − first) / (tokens − 1), from the
    client's arrival times of the first and last token; None for fewer than 2 tokens."""
    if num_tokens < 2:
        return None
    return max(0.0, last_token_s - first_token_s) / (num_tokens - 1)


@dataclass(frozen=True, slots=True)
class DecodeBatch:
    """One measured decode batch: B streams over `prompt_tokens`-token prompts, each
    generating `output_tokens`. `client_tpot_s`: per stream, measured by the client;
    `router_tpot_s`: per stream, from the router's `decode` stage (may be empty)."""

    batch_size: int
    prompt_tokens: int
    output_tokens: int
    client_tpot_s: tuple[float, ...]
    router_tpot_s: tuple[float, ...] = ()

    def context_tokens(self) -> int:
        """Context held by the whole batch at the middle of decoding: B x (L + out/2), the
        cost model's `context_tokens` (a batch total, not per sequence)."""
        return self.batch_size * (self.prompt_tokens + self.output_tokens // 2)

    def sample(self) -> DecodeSample:
        """The decode step sample: the median client TPOT over the batch's streams. Raises
        ProfileError when no stream produced 2+ tokens."""
        if not self.client_tpot_s:
            raise ProfileError(
                f"decode batch B={self.batch_size} L={self.prompt_tokens}: no stream returned "
                "two or more tokens"
            )
        return DecodeSample(
            batch_size=self.batch_size,
            context_tokens=self.context_tokens(),
            step_s=statistics.median(self.client_tpot_s),
        )


@dataclass(frozen=True, slots=True)
class ServingSample:
    """The serving layer around one remote prefill, from the router's timing header (seconds):
    `router_s` router_queue (before dispatch), `prefill_hops_s` and `decode_hops_s` the Ray
    Serve round trips to each pool, `kv_wait_s` the decode engine's wait for the KV (the
    pull, on an idle cluster), `decode_first_token_s` the decode engine's first step."""

    num_prompt_tokens: int
    router_s: float
    prefill_hops_s: float
    kv_wait_s: float
    decode_hops_s: float
    decode_first_token_s: float


def serving_sample(
    headers: Mapping[str, str], body: Mapping[str, Any], num_prompt_tokens: int
) -> ServingSample | None:
    """The serving stages of one non-streaming completion; None for a local prefill or a
    timing header without every stage."""
    timing = header_json(headers, TIMING_HEADER) or {}
    keys = ("router_queue", "prefill_hops", "kv_transfer", "decode_hops", "decode_first_token")
    if "prefill" not in timing or any(k not in timing for k in keys):
        return None
    prompt = prompt_tokens(body, num_prompt_tokens)
    return ServingSample(
        num_prompt_tokens=prompt,
        router_s=float(timing["router_queue"]),
        prefill_hops_s=float(timing["prefill_hops"]),
        kv_wait_s=float(timing["kv_transfer"]),
        decode_hops_s=float(timing["decode_hops"]),
        decode_first_token_s=float(timing["decode_first_token"]),
    )


@dataclass(frozen=True, slots=True)
class LocalPrefillSample:
    """A fresh prompt the router prefilled on the decode engine (a local prefill), from the
    router's timing header: `first_token_s` is the decode engine's `decode_first_token` stage,
    from scheduling the prompt to its first token, which here includes computing the prompt.
    `batch_size` streams holding `context_tokens` in all were decoding beside it (0: it ran
    alone), so that step also decoded them. `decode_hops_s`: its `decode_hops` stage, the
    round trip router -> decode replica -> router less the engine's time (None when the header
    has none)."""

    num_prompt_tokens: int
    num_cached_tokens: int
    first_token_s: float
    batch_size: int = 0
    context_tokens: int = 0
    decode_hops_s: float | None = None


def local_prefill_sample(
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    num_prompt_tokens: int,
    *,
    beside: tuple[int, int] = (0, 0),
) -> LocalPrefillSample | None:
    """The local prefill of one non-streaming completion, sent while `beside` = (streams,
    their context tokens) were decoding; None when it had a remote prefill (a `prefill`
    stage) or its timing header has no `decode_first_token`."""
    timing = header_json(headers, TIMING_HEADER) or {}
    if "prefill" in timing or timing.get("decode_first_token") is None:
        return None
    prompt = prompt_tokens(body, num_prompt_tokens)
    return LocalPrefillSample(
        num_prompt_tokens=prompt,
        num_cached_tokens=min(cached_tokens(body, header_json(headers, DECISION_HEADER)), prompt),
        first_token_s=float(timing["decode_first_token"]),
        batch_size=beside[0],
        context_tokens=beside[1],
        decode_hops_s=None if timing.get("decode_hops") is None else float(timing["decode_hops"]),
    )


def median_or_none(values: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None
