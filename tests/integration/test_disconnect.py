"""A client that goes away mid-request aborts the request on both replicas: nothing keeps
running or holding KV in either engine."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words


def _idle(handle: Any) -> bool:
    stats = handle.stats.remote().result()
    return bool(
        stats.num_running_requests == 0
        and stats.num_waiting_requests == 0
        and stats.kv_cache_usage == 0.0
    )


def _wait_idle(handles: dict[str, Any], timeout_s: float) -> dict[str, bool]:
    deadline = time.monotonic() + timeout_s
    state = {}
    while time.monotonic() < deadline:
        state = {pool: _idle(h) for pool, h in handles.items()}
        if all(state.values()):
            return state
        time.sleep(0.25)
    return state


MAX_TOKENS = 3000  # a full run takes ~7 s on an idle 2-core machine, so idleness alone is no proof


def _generated(handle: Any) -> int:
    return int(handle.stats.remote().result().generation_tokens_total)


def _token_events(lines: Iterator[str], n: int) -> None:
    """Read the next `n` SSE data events; each must be a token delta (no error, no end)."""
    seen = 0
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line.removeprefix("data:").strip()
        assert payload != "[DONE]", f"the stream ended after {seen} events"
        event = json.loads(payload)
        assert "error" not in event, f"error event after {seen} events: {event}"
        assert event["choices"][0]["finish_reason"] is None, f"generation ended early: {event}"
        seen += 1
        if seen == n:
            return
    raise AssertionError(f"the stream closed after {seen} of {n} events")


def _long_generation(stream: bool) -> dict[str, Any]:
    return {
        "model": "pdserve-demo",
        "prompt": text_of_words(300, salt=99),
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
        "stream": stream,
    }


def test_stream_disconnect_aborts_decode(cluster: Cluster, engine_handles: dict[str, Any]) -> None:
    decode = engine_handles["decode"]
    assert _wait_idle(engine_handles, 30) == {"prefill": True, "decode": True}
    generated_before = _generated(decode)
    with (
        httpx.Client(base_url=cluster.url, timeout=60) as http,
        http.stream("POST", "/v1/completions", json=_long_generation(True)) as resp,
    ):
        assert resp.status_code == 200
        # Keep the line iterator referenced: dropping it (a `break` out of
        # `for line in resp.iter_lines()`) closes the connection at once, and the abort it
        # triggers would race the stats read below.
        lines = resp.iter_lines()
        _token_events(lines, 5)
        running = decode.stats.remote().result().num_running_requests
        assert running == 1, "the generation should be running on decode while streaming"
    # Leaving the block closes the connection, thousands of tokens before the end.
    state = _wait_idle(engine_handles, 15)
    assert state == {"prefill": True, "decode": True}, f"engines still busy: {state}"
    generated = _generated(decode) - generated_before
    assert generated < MAX_TOKENS, f"decode generated all {generated} tokens: it was not aborted"


def test_unary_disconnect_aborts_decode(cluster: Cluster, engine_handles: dict[str, Any]) -> None:
    decode = engine_handles["decode"]
    assert _wait_idle(engine_handles, 30) == {"prefill": True, "decode": True}
    generated_before = _generated(decode)
    t0 = time.monotonic()
    try:
        httpx.post(f"{cluster.url}/v1/completions", json=_long_generation(False), timeout=2.0)
        raise AssertionError("a 3,000-token generation should not finish in 2 s here")
    except httpx.TimeoutException:
        pass
    state = _wait_idle(engine_handles, 15)
    assert state == {"prefill": True, "decode": True}, f"engines still busy: {state}"
    assert time.monotonic() - t0 < 20
    generated = _generated(decode) - generated_before
    assert generated < MAX_TOKENS, f"decode generated all {generated} tokens: it was not aborted"


def test_cluster_serves_after_disconnects(cluster: Cluster) -> None:
    resp = cluster.client().completions.create(
        model="pdserve-demo", prompt="after the storm", max_tokens=5, temperature=0
    )
    assert resp.usage.completion_tokens == 5
