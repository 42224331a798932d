"""Every engine prefills one prompt of the longest length the model takes, then a burst of
distinct prompts at once, before its replica reports ready (engine.warmup_prompt_tokens and
engine.warmup_burst_prompts, on by default on CPU): the prompts are in the engines' prefix
caches before any client sent anything."""

from __future__ import annotations

from pdserve.engine.warmup import warmup_token_ids
from tests.integration.cluster import Cluster

PROBE_TOKENS = 1024
BLOCK_TOKENS = 128  # the CPU engines' KV block


def _cached_tokens(cluster: Cluster, prompt: list[int]) -> int:
    with cluster.http() as http:
        resp = http.post(
            "/v1/completions",
            json={"model": "pdserve-demo", "prompt": prompt, "max_tokens": 1, "temperature": 0},
        )
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    assert usage["prompt_tokens"] == len(prompt)
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def test_the_warmup_prompt_is_already_cached(cluster: Cluster) -> None:
    cfg = cluster.config
    longest = cfg.model.max_model_len_tokens - 1
    assert cfg.decode.engine.warmup_tokens(cfg.platform, cfg.model.max_model_len_tokens) == longest
    # The warm-up prompt's first 1,024 tokens: the engine that prefills them has them cached.
    cached = _cached_tokens(cluster, warmup_token_ids(longest)[:PROBE_TOKENS])
    assert cached >= PROBE_TOKENS - BLOCK_TOKENS, f"warm-up prompt not cached: {cached}"
    # The same ids in another order were never sent: nothing cached.
    other = warmup_token_ids(longest)[PROBE_TOKENS // 2 : PROBE_TOKENS // 2 + PROBE_TOKENS]
    assert _cached_tokens(cluster, other[::-1]) == 0


def test_the_warmup_burst_prompts_are_already_cached(cluster: Cluster) -> None:
    cfg = cluster.config
    max_len = cfg.model.max_model_len_tokens
    for role in ("prefill", "decode"):  # both engines prefilled the same burst
        burst = cfg.pool(role).engine.warmup_burst_tokens(cfg.platform, max_len)
        assert len(burst) == 4 and sum(burst) >= 1.5 * cfg.pool(role).engine.max_num_batched_tokens
    burst = cfg.prefill.engine.warmup_burst_tokens(cfg.platform, max_len)
    for i in range(len(burst)):
        probe = warmup_token_ids(burst[i], first=i + 1)[:PROBE_TOKENS]
        cached = _cached_tokens(cluster, probe)
        assert cached >= PROBE_TOKENS - BLOCK_TOKENS, f"burst prompt {i} not cached: {cached}"
