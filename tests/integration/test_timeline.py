"""Every request's path is visible: the x-pdserve-timing stages of a >= 1,000-token request are
all there, non-negative, in path order, and add up to the end-to-end latency; the KV bytes the
router reports equal the whole blocks moved times the model's KV bytes per token."""

from __future__ import annotations

import json
import math
import time

import httpx

from pdserve.router.kv_size import kv_bytes_per_token
from pdserve.router.timeline import STAGES
from tests.integration.conftest import Cluster
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
        bytes_before = cluster.metric("pdserve_kv_transfer_bytes_sum")
        count_before = cluster.metric("pdserve_kv_transfer_bytes_count")
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
    assert cluster.metric("pdserve_kv_transfer_bytes_count") == count_before + 1
    assert cluster.metric("pdserve_kv_transfer_bytes_sum") - bytes_before == expected


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
