"""An engine's warm-up before its replica reports ready (adapter over a vLLM AsyncLLM).

Two parts, both from the pool's EngineConfig: one prompt of `warmup_tokens` (the longest the
model takes, by default on CPU), then `warmup_burst_tokens`: distinct prompts sent at once
that fill a step's token budget and split one prompt. Every prompt asks for one token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from pdserve.pool_config import EngineConfig

TOKEN_ID_RANGE = (10, 1000)
"""Token ids in [10, 1000) are real vocabulary entries of any model, no specials: the warm-up
prompts cycle through them, and `pdserve profile` (pdserve.profiling.plan) and the benchmarks
draw random prompts from them."""


def warmup_token_ids(num_tokens: int, first: int = 0) -> list[int]:
    """A warm-up prompt: `num_tokens` ids cycling through TOKEN_ID_RANGE
    (ordinary vocabulary entries of any model, no special tokens), starting `first` ids into
    the range. Prompts with different `first` (below the range's size) differ in their first
    id, so they share no prefix-cache block."""
    low, high = TOKEN_ID_RANGE
    return [low + (first + i) % (high - low) for i in range(num_tokens)]


@dataclasses.dataclass(frozen=True)
class WarmUpTimes:
    """What a warm-up did: prompt lengths (tokens) and wall seconds of each part."""

    prompt_tokens: int
    prompt_s: float
    burst_tokens: tuple[int, ...]
    burst_s: float


async def prefill_at_once(engine: Any, prompts: list[list[int]], tag: str) -> float:
    """Send `prompts` to the AsyncLLM `engine` at once (max_tokens 1, request ids from
    `tag`); seconds until the last one finished."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0)

    async def one(i: int, ids: list[int]) -> None:
        prompt = TokensPrompt(prompt_token_ids=ids)
        async for _ in engine.generate(prompt, params, f"{tag}-{i}"):
            pass

    started_s = time.monotonic()
    await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts)))
    return time.monotonic() - started_s


async def warm_up(
    engine: Any, eng: EngineConfig, platform: str, max_model_len_tokens: int, tag: str
) -> WarmUpTimes:
    """Run the warm-up `eng` asks for on `engine` (nothing when its prompt length is 0)."""
    num_tokens = eng.warmup_tokens(platform, max_model_len_tokens)
    if num_tokens <= 0:
        return WarmUpTimes(0, 0.0, (), 0.0)
    prompt_s = await prefill_at_once(engine, [warmup_token_ids(num_tokens)], f"{tag}-prompt")
    burst = eng.warmup_burst_tokens(platform, max_model_len_tokens)
    burst_s = 0.0
    if burst:
        prompts = [warmup_token_ids(n, first=i + 1) for i, n in enumerate(burst)]
        burst_s = await prefill_at_once(engine, prompts, f"{tag}-burst")
    return WarmUpTimes(num_tokens, prompt_s, burst, burst_s)
