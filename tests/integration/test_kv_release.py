"""Stranded KV: a prefill whose decode never comes holds its blocks on the prefill engine until
vLLM's lease (`kv_transfer.kv_lease_seconds`, 30 s) — unless the router releases
it through a decode replica, which frees it at once. Measured on the real engines: two
prefills held, one released; the released one's blocks are free within seconds, the other's
are still held."""

from __future__ import annotations

import itertools
import time
from typing import Any

from pdserve.messages import KVRelease, PrefillRequest, PrefillResult
from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

_ids = itertools.count()
PROMPT_TOKENS = 3500  # under the local config's max_model_len (4096)


def _prefill(handles: dict[str, Any], tokens: list[int]) -> PrefillResult:
    request = PrefillRequest(request_id=f"kv-release-{next(_ids)}", prompt_token_ids=tokens)
    result: PrefillResult = handles["prefill"].prefill.remote(request).result(timeout_s=120)
    return result


def _usage(handles: dict[str, Any]) -> float:
    """The prefill engine's KV usage now. Two 1-token probe prefills make the idle engine take
    steps (the first also handles pending frees), so the reported usage is fresh; each probe
    holds one block, little next to the 3,500-token prompts measured."""
    _prefill(handles, [11])
    _prefill(handles, [12])
    return float(handles["prefill"].stats.remote().result(timeout_s=30).kv_cache_usage)


def _prompt(seed: int) -> list[int]:
    return [(seed * i + 5) % 900 + 20 for i in range(PROMPT_TOKENS)]


def test_a_released_handoff_frees_the_prefill_kv_before_its_lease(
    cluster: Cluster, engine_handles: dict[str, Any]
) -> None:
    # One remote prefill through the router first: the decode engine's NIXL handshake with
    # the prefill engine is done once, on its first pull; a release reuses it.
    warm = cluster.client().completions.create(
        model="pdserve-demo", prompt=text_of_words(400, salt=3131), max_tokens=2, temperature=0
    )
    assert warm.usage is not None and warm.usage.prompt_tokens > 128  # past local prefill
    idle = _usage(engine_handles)
    kept = _prefill(engine_handles, _prompt(13))
    freed = _prefill(engine_handles, _prompt(17))
    both = _usage(engine_handles)
    held = both - idle
    assert held > 0, "two held prefills must show in the prefill engine's KV usage"

    release = KVRelease(request_id="kv-release-r", handoff=freed.handoff)
    engine_handles["decode"].release.remote(release).result(timeout_s=30)
    time.sleep(3)  # the lease is 30 s; a release takes effect in well under a second
    now = _usage(engine_handles)
    # Freeing one of the two prompts removes about half of what they hold.
    assert now < both - 0.25 * held, f"usage {idle:.5f} -> {both:.5f} -> {now:.5f}: not freed"
    assert now > idle + 0.25 * held, "the unreleased prefill is still held (the lease frees it)"

    engine_handles["decode"].release.remote(
        KVRelease(request_id="kv-release-k", handoff=kept.handoff)
    ).result(timeout_s=30)
