"""Disaggregated output equals aggregated vLLM output, and decode really pulls the KV.

For chat and completions, streaming and not, short, medium and long (>= 1,500 tokens, many KV
blocks) prompts: the greedy text from pdserve must equal what one aggregated vLLM engine of the
same model produces, token for token. A prompt under `local_prefill_max_cold_tokens` (the short
one, with deploy/local.yaml's 128) prefills on the decode engine: no handoff, nothing
transferred, decode computes the whole prompt. Every other request is disaggregated (prefill on
one engine, KV over NIXL, decode on another): the router's KV-handoff counter rises by one and
the decode engine computes at most one block of the prompt itself (the rest arrives over NIXL).
"""

from __future__ import annotations

import zlib
from typing import Any

import openai
import pytest

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

MAX_TOKENS = 24
CPU_BLOCK_TOKENS = 128

CASES = [
    pytest.param("short", 12, id="short"),  # under local.yaml's cold threshold: local prefill
    pytest.param("medium", 200, id="medium"),  # disaggregated
    pytest.param("long", 800, id="long"),
]


def _chat_messages(text: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": text},
    ]


def _run(client: openai.OpenAI, api: str, stream: bool, text: str) -> tuple[str, int, list[Any]]:
    """(text, prompt_tokens, raw chunks or [response]) for one greedy request."""
    common: dict[str, Any] = {
        "model": "pdserve-demo",
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "seed": 7,
    }
    if stream:
        common["stream"] = True
        common["stream_options"] = {"include_usage": True}
    if api == "chat":
        resp = client.chat.completions.create(messages=_chat_messages(text), **common)
    else:
        resp = client.completions.create(prompt=text, **common)
    if not stream:
        out = resp.choices[0].message.content if api == "chat" else resp.choices[0].text
        return out or "", resp.usage.prompt_tokens, [resp]
    chunks = list(resp)
    pieces = []
    usage = None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            piece = choice.delta.content if api == "chat" else choice.text
            pieces.append(piece or "")
    assert usage is not None, "stream_options.include_usage must yield a usage chunk"
    return "".join(pieces), usage.prompt_tokens, chunks


@pytest.mark.parametrize("api", ["chat", "completion"])
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize(("size", "num_words"), CASES)
def test_disaggregated_matches_aggregated_and_decode_pulls_kv(
    cluster: Cluster,
    reference: openai.OpenAI,
    engine_handles: dict[str, Any],
    api: str,
    stream: bool,
    size: str,
    num_words: int,
) -> None:
    # A distinct salt per case: no prefix-cache hits between cases.
    salt = zlib.crc32(f"{api}{stream}{size}".encode()) % 10_000
    text = text_of_words(num_words, salt=salt)
    decode = engine_handles["decode"]

    expected, expected_prompt_tokens, _ = _run(reference, api, stream, text)
    cluster.wait_idle()  # an earlier test's draining load would change the placement
    transfers_before = cluster.metric("pdserve_kv_transfers_total")
    stats_before = decode.stats.remote().result()

    got, prompt_tokens, _ = _run(cluster.client(), api, stream, text)

    stats_after = decode.stats.remote().result()
    transfers_after = cluster.metric("pdserve_kv_transfers_total")

    assert prompt_tokens == expected_prompt_tokens, "router must render/tokenize like vLLM"
    if size == "long":
        assert prompt_tokens >= 1500, f"long prompt has only {prompt_tokens} tokens"
    assert got == expected, (
        f"disaggregated output differs from aggregated vLLM:\n{got!r}\n{expected!r}"
    )
    assert len(got) > 0
    computed = stats_after.prompt_tokens_computed_total - stats_before.prompt_tokens_computed_total
    transferred = (
        stats_after.prompt_tokens_kv_transfer_total - stats_before.prompt_tokens_kv_transfer_total
    )
    if prompt_tokens < cluster.config.router.routing.local_prefill_max_cold_tokens:
        # Selective disaggregation: a short prompt prefills on decode, nothing moves.
        assert transfers_after == transfers_before, "a short prompt must not be handed off"
        assert transferred == 0
        assert computed == prompt_tokens, f"decode computed {computed} of {prompt_tokens}"
        return
    assert transfers_after - transfers_before == 1, "one completed KV handoff per request"
    assert computed <= CPU_BLOCK_TOKENS, f"decode recomputed {computed} prompt tokens"
    assert transferred >= prompt_tokens - CPU_BLOCK_TOKENS, (
        f"only {transferred} of {prompt_tokens} prompt tokens arrived over NIXL"
    )
    assert stats_after.num_kv_transfers_total > stats_before.num_kv_transfers_total
    assert stats_after.num_kv_transfer_failures_total == stats_before.num_kv_transfer_failures_total


def test_cached_tokens_count_prefill_cache_hits_not_transfers(cluster: Cluster) -> None:
    """A repeated long prefix is served from the prefill engine's prefix cache, and usage
    reports it; the first request (KV only transferred) reports no cached tokens."""
    client = cluster.client()
    text = text_of_words(500, salt=424242)
    first = client.completions.create(
        model="pdserve-demo", prompt=text, max_tokens=4, temperature=0
    )
    second = client.completions.create(
        model="pdserve-demo", prompt=text + " again", max_tokens=4, temperature=0
    )
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= CPU_BLOCK_TOKENS, f"expected prefix-cache hits, got {cached}"
    assert cached < second.usage.prompt_tokens
