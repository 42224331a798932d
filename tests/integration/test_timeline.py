"""Every request's path is visible: the x-pdserve-timing stages of a >= 1,000-token request are
all there, non-negative, in path order, and add up to the end-to-end latency; the KV transfer
the router reports is NIXL's own: one more transfer, its bytes the whole blocks moved times the
model's KV bytes per token, its time within the decode engine's wait for the KV."""

from __future__ import annotations

import json
import math
import time

import httpx

from pdserve.router.timeline import STAGES
from tests.integration.cluster import Cluster
from tests.integration.kv_size import kv_bytes_per_token
from tests.integration.texts import text_of_words

CPU_BLOCK_TOKENS = 128


def test_timeline_stages_add_up_and_kv_bytes_match(cluster: Cluster) -> None:
    body = {
        "model": "pdserve-demo",
        "prompt": text_of_words(600, salt=31337),
        "max_tokens": 48,
        "ignore_eos": True,
        "temperature": 0,
    }
    with httpx.Client(base_url=cluster.url, timeout=60) as http:
        # Warm the connection so the measurement is the request, not the TCP handshake.
        http.post("/v1/completions", json={**body, "prompt": "warm up", "max_tokens": 1})
        before = _settled_nixl(cluster)
        t0 = time.monotonic()
        resp = http.post("/v1/completions", json=body, headers={"x-request-id": "tl-1"})
        e2e = time.monotonic() - t0
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-request-id"] == "tl-1"
    num_prompt = resp.json()["usage"]["prompt_tokens"]
    assert num_prompt >= 1000
    stages = json.loads(resp.headers["x-pdserve-timing"])
    assert list(stages) == list(STAGES), "every stage present, in path order"
    assert all(v >= 0 for v in stages.values()), stages
    assert stages["prefill"] > 0 and stages["decode"] > 0
    assert abs(sum(stages.values()) - e2e) <= 0.05 * e2e, (sum(stages.values()), e2e, stages)

    with open(f"{cluster.model_path}/config.json") as f:
        per_token = kv_bytes_per_token(json.load(f), cluster.config.model.dtype)
    expected = math.ceil(num_prompt / CPU_BLOCK_TOKENS) * CPU_BLOCK_TOKENS * per_token
    # The engine's connector reports at its next step; the router folds it in at a scrape.
    deadline = time.monotonic() + 15
    while _nixl(cluster)[0] == before[0] and time.monotonic() < deadline:
        time.sleep(0.5)
    after = _settled_nixl(cluster)
    transfers, moved, nixl_s = (a - b for a, b in zip(after, before, strict=True))
    assert transfers == 1, (before, after)
    assert moved == expected, (moved, expected)
    assert 0 < nixl_s <= stages["kv_transfer"] + 0.005, (nixl_s, stages)


def _nixl(cluster: Cluster) -> tuple[float, float, float]:
    """The decode pool's NIXL transfers so far: count, bytes, seconds."""
    decode = {"pool": "decode"}
    return (
        cluster.metric("pdserve_kv_transfer_bytes_count", decode),
        cluster.metric("pdserve_kv_transfer_bytes_sum", decode),
        cluster.metric("pdserve_kv_transfer_seconds_sum", decode),
    )


def _settled_nixl(cluster: Cluster) -> tuple[float, float, float]:
    """`_nixl` once it stops changing: an engine reports a transfer's stats at its next step,
    so an earlier test's transfer can still arrive after its request ended."""
    last = _nixl(cluster)
    for _ in range(10):
        time.sleep(1.5)
        now = _nixl(cluster)
        if now == last:
            return now
        last = now
    return last


def test_streaming_timing_header_carries_the_ttft_breakdown(cluster: Cluster) -> None:
    body = {
        "model": "pdserve-demo",
        "prompt": text_of_words(150, salt=4242),  # disaggregated: over the cold threshold
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{cluster.url}/v1/completions", json=body, timeout=60) as resp:
        assert resp.status_code == 200
        header = json.loads(resp.headers["x-pdserve-timing"])
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert {"router_queue", "prefill", "kv_transfer", "decode_first_token"} <= set(header)
    assert "decode" not in header, "the header is sent at the first token"
    final = json.loads(events[-2])
    assert final["usage"]["completion_tokens"] == 8
    assert list(final["pdserve_timing"]) == list(STAGES)
