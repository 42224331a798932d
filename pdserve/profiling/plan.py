"""What `pdserve profile` measures, and the token-id prompts it sends (pure).

Prefill: one request at a time, `max_tokens` 1, prompts of random token ids (no prefix-cache
hits), then pairs that reuse a cached prefix (prompt P, then P + extra), then fresh prompts
short enough for the router to prefill on the decode engine (local prefills). Decode: batches of B
concurrent streams of `decode_output_tokens` tokens over prompts of L tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pdserve.engine.warmup import TOKEN_ID_RANGE

FULL_PREFILL_TOKENS = (64, 256, 512, 1024, 2048, 3072)
QUICK_PREFILL_TOKENS = (64, 512, 2048)
LOCAL_PREFILL_TOKENS = (32, 64, 96)
"""Fresh prompts under the router's cold local-prefill threshold, prefilled on the decode
engine: their first step gives the fixed cost of a prompt an engine prefills for itself. Each
is sent alone, and the middle one again beside every decode batch, once its streams decode."""
FULL_CACHED_PAIRS = ((1024, 512), (1024, 1024), (2048, 512))
QUICK_CACHED_PAIRS = ((1024, 512),)
FULL_BATCH_SIZES = (1, 4, 8, 16)
QUICK_BATCH_SIZES = (1, 8)
DECODE_PROMPT_TOKENS = (128, 1024)
DECODE_OUTPUT_TOKENS = 64
DECODE_UNIQUE_SUFFIX_TOKENS = 32
"""Each stream of a decode batch = the batch's shared prefix + this many tokens of its own."""
WARMUP_REQUESTS = 4


@dataclass(frozen=True, slots=True)
class ProfilePlan:
    """The measurements of one profile run. Every length is in tokens.

    `cached_pairs`: (cached prefix, extra) — the prefix is sent first, then prefix + extra.
    `repeats` applies to every prefill length, cached pair and decode (batch, prompt) point.
    """

    prefill_tokens: tuple[int, ...]
    cached_pairs: tuple[tuple[int, int], ...]
    decode_batch_sizes: tuple[int, ...]
    decode_prompt_tokens: tuple[int, ...]
    decode_output_tokens: int
    repeats: int
    warmup_requests: int = WARMUP_REQUESTS
    local_prefill_tokens: tuple[int, ...] = ()
    """Fresh prompts the router prefills on the decode engine (under its cold threshold)."""

    def num_requests(self) -> int:
        """HTTP completions the run sends (the progress bar's total): warm-up, prefill
        requests, two per cached pair, the local prefills, and per decode batch B streams plus
        one that caches the batch's shared prefix (and one local prefill that joins them)."""
        prefill = (
            len(self.prefill_tokens) + 2 * len(self.cached_pairs) + len(self.local_prefill_tokens)
        )
        beside = 1 if self.local_prefill_tokens else 0  # a local prefill joins each batch
        decode = sum(b + 1 + beside for b in self.decode_batch_sizes) * len(
            self.decode_prompt_tokens
        )
        return self.warmup_requests + self.repeats * (prefill + decode)


def make_plan(
    *,
    quick: bool,
    repeats: int,
    max_prompt_tokens: int,
    max_model_len_tokens: int,
    min_extra_tokens: int = 0,
    min_prompt_tokens: int = 0,
) -> ProfilePlan:
    """The plan for these limits.

    Prompt lengths above `max_prompt_tokens` (or the model context minus one token) are
    capped to it, and lengths under `min_prompt_tokens` (the router's cold local-prefill
    threshold: a shorter fresh prompt is prefilled on the decode engine, which reports no
    prefill stage, so it would measure nothing) are raised to it, which keeps the shortest
    prompt that still goes to the prefill pool in the fit; duplicates collapse. A cached
    pair's extra is raised to at least
    `min_extra_tokens` (the router's local-prefill threshold: fewer uncached tokens would be
    prefilled on the decode engine, which reports no prefill stage); pairs that then exceed
    the cap are dropped. Local prefills: the LOCAL_PREFILL_TOKENS under `min_prompt_tokens`
    (or one prompt of `min_prompt_tokens` - 1 when none is; none when it is 0 or 1, the
    router then prefills every fresh prompt remotely). Decode prompts that do not fit (cap, or
    context minus the output tokens) are dropped. Raises ValueError for repeats < 1 or a cap
    under 128 tokens.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cap = min(max_prompt_tokens, max_model_len_tokens - 1)
    if cap < 128:
        raise ValueError(f"prompt cap {cap} is under 128 tokens: too small to profile")
    base = QUICK_PREFILL_TOKENS if quick else FULL_PREFILL_TOKENS
    lengths = tuple(sorted({min(max(n, min_prompt_tokens), cap) for n in base}))
    raised = (
        (p, max(e, min_extra_tokens))
        for p, e in (QUICK_CACHED_PAIRS if quick else FULL_CACHED_PAIRS)
    )
    pairs = tuple(dict.fromkeys((p, e) for p, e in raised if p + e <= cap))
    local = tuple(n for n in LOCAL_PREFILL_TOKENS if n < min(min_prompt_tokens, cap))
    if not local and min(min_prompt_tokens, cap) > 1:
        local = (min(min_prompt_tokens, cap) - 1,)
    out = DECODE_OUTPUT_TOKENS
    decode_prompts = tuple(
        n for n in DECODE_PROMPT_TOKENS if n <= cap and n + out <= max_model_len_tokens
    )
    return ProfilePlan(
        prefill_tokens=lengths,
        cached_pairs=pairs,
        decode_batch_sizes=QUICK_BATCH_SIZES if quick else FULL_BATCH_SIZES,
        decode_prompt_tokens=decode_prompts,
        decode_output_tokens=out,
        repeats=repeats,
        local_prefill_tokens=local,
    )


def random_tokens(rng: random.Random, n: int) -> list[int]:
    """`n` random token ids in TOKEN_ID_RANGE (the engine warm-up's vocabulary range). Two such
    prompts share a whole KV block (16+ tokens) with negligible probability, so a fresh prompt
    gets no prefix-cache hit."""
    lo, hi = TOKEN_ID_RANGE
    return [rng.randrange(lo, hi) for _ in range(n)]


def decode_batch_prompts(
    rng: random.Random, batch_size: int, prompt_tokens: int
) -> tuple[list[int], list[list[int]]]:
    """(shared prefix, prompts) for one decode batch: every prompt is the shared prefix plus
    its own DECODE_UNIQUE_SUFFIX_TOKENS random tokens, `prompt_tokens` in all.

    The profiler caches the prefix first, so the B streams need only a short prefill each and
    all reach the decode engine at about the same time: the batch really is B sequences for
    (almost) every measured step, instead of ramping up behind B long prefills.
    """
    suffix = min(DECODE_UNIQUE_SUFFIX_TOKENS, prompt_tokens // 2)
    prefix = random_tokens(rng, prompt_tokens - suffix)
    return prefix, [prefix + random_tokens(rng, suffix) for _ in range(batch_size)]
