"""Elastic tiers on the real stack (Ray Serve's controller running pdserve's policy, vLLM, NIXL),
deploy/local-autoscale.yaml: each pool scales on its own signal while the other stays put.

1. Long prompts: the prefill pool's queued prefill work passes its target, a second prefill
   replica starts and serves, decode stays at one; idle, prefill drains back to one.
2. Many long-output streams: the decode pool's KV usage passes its target, a second decode
   replica starts and serves, prefill stays at one; idle, decode goes back to one, and the
   replica Serve removes finishes the streams it holds (drain) while new work goes elsewhere.

No request fails in either phase, and the router shows every scale event with the policy's
reason (/v1/pdserve/replicas, which `pdserve top` reads, and /metrics)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words

SCALE_UP_WITHIN_S = 420
"""Upscale delay 3 s + a new engine's start: ~35 s idle, 70-80 s loaded, 315 s once in CI."""
SCALE_DOWN_WITHIN_S = 180  # downscale delay + the look-back window + the drain
DRAIN_STREAM_TOKENS = 3500  # long enough to outlive decode's 8 s downscale delay


def _replicas(http: httpx.Client, pool: str) -> list[dict[str, Any]]:
    replicas: list[dict[str, Any]] = http.get("/v1/pdserve/replicas").json()["pools"][pool]
    return replicas


def _healthy(http: httpx.Client, pool: str) -> int:
    return len([r for r in _replicas(http, pool) if r["healthy"]])


def _scaling(http: httpx.Client, pool: str) -> dict[str, Any]:
    """A pool's autoscaler state as the router shows it (what `pdserve top` reads)."""
    doc: dict[str, Any] = http.get("/v1/pdserve/replicas").json()["scaling"][pool]
    return doc


class _Load:
    """Clients sending requests back to back until stopped; every outcome kept. `words`: the
    prompt length; `max_tokens`: the output length (ignore_eos, so exactly that many)."""

    def __init__(self, cluster: Cluster, clients: int, words: int, max_tokens: int) -> None:
        self._cluster = cluster
        self._words = words
        self._max_tokens = max_tokens
        self._stop = threading.Event()
        self._salt = itertools.count(70_000 + 1000 * max_tokens)
        self.outcomes: list[tuple[int, str]] = []
        self._pool = ThreadPoolExecutor(clients)
        self._futures = [self._pool.submit(self._client) for _ in range(clients)]

    def _client(self) -> None:
        with self._cluster.http(timeout_s=300) as http:
            while not self._stop.is_set():
                body = {"model": "pdserve-demo", "max_tokens": self._max_tokens,
                        "ignore_eos": True, "temperature": 0,
                        "prompt": text_of_words(self._words, salt=next(self._salt))}  # fmt: skip
                resp = http.post("/v1/completions", json=body)
                self.outcomes.append((resp.status_code, resp.text[:300]))

    def failed(self) -> list[tuple[int, str]]:
        return [o for o in self.outcomes if o[0] != 200]

    def stop_sending(self) -> None:
        """No new requests; those in flight finish (`stop` waits for them)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        for f in self._futures:
            f.result(timeout=300)
        self._pool.shutdown()


def _scale_events_shown(cluster: Cluster, http: httpx.Client, pool: str, why_up: str) -> None:
    """Both of the pool's scale events, up then down, with the policy's reasons, in the
    router's view and counted once each on its /metrics."""
    time.sleep(3)  # the policy republishes within a second; the router rereads each second
    events = _scaling(http, pool)["events"]
    assert [(e["from_replicas"], e["to_replicas"]) for e in events] == [(1, 2), (2, 1)], events
    assert why_up in events[0]["reason"] and "with one fewer" in events[1]["reason"], events
    for direction in ("up", "down"):
        labels = {"pool": pool, "direction": direction}
        assert cluster.metric("pdserve_pool_scale_events_total", labels) == 1, (pool, direction)


def test_the_prefill_pool_scales_up_under_load_and_drains_back_down(elastic: Cluster) -> None:
    with elastic.http() as http:
        first = [r["replica_id"] for r in _replicas(http, "prefill")]
        assert len(first) == 1, first
        load = _Load(elastic, clients=8, words=1500, max_tokens=4)  # ~3,000 tokens: ~2.5 s queued
        try:
            deadline = time.monotonic() + SCALE_UP_WITHIN_S
            while _healthy(http, "prefill") < 2:
                assert time.monotonic() < deadline, "the prefill pool never scaled up"
                assert not load.failed(), f"load requests failed: {load.failed()[:3]}"
                assert _scaling(http, "decode")["target_replicas"] == 1, "decode moved"
                time.sleep(2)
            # The new replica takes work: placement sends prompts to both.
            time.sleep(10)
            target = elastic.metric("pdserve_pool_target_replicas", {"pool": "prefill"})
        finally:
            load.stop()
        served = [r for r in _replicas(http, "prefill") if r["replica_id"] not in first]
        assert served, "no second prefill replica in the view"
        failed = load.failed()
        assert not failed, f"{len(failed)} of {len(load.outcomes)} failed scaling up: {failed[:3]}"
        assert target == 2, f"pdserve_pool_target_replicas{{pool=prefill}} = {target}"

        # Load over: the pool drains back to one replica; a trickle of requests never fails.
        deadline = time.monotonic() + SCALE_DOWN_WITHIN_S
        trickle = []
        while len(_replicas(http, "prefill")) > 1:
            assert time.monotonic() < deadline, "the prefill pool never scaled down"
            body = {"model": "pdserve-demo", "prompt": text_of_words(300, salt=len(trickle)),
                    "max_tokens": 4, "temperature": 0}  # fmt: skip
            trickle.append(http.post("/v1/completions", json=body).status_code)
            time.sleep(1)
        assert trickle and set(trickle) == {200}, trickle
        left = _replicas(http, "prefill")
        assert len(left) == 1 and left[0]["healthy"], left
        assert _scaling(http, "prefill")["signal"] < 0.5  # back under the target
        assert _scaling(http, "decode")["events"] == []  # decode never moved
        _scale_events_shown(elastic, http, "prefill", "queued prefill")


@dataclass
class _Stream:
    """One long streamed completion: where it decoded, how it ended, when."""

    decode_replica: str | None = None
    status: int = 0
    tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    started_s: float = 0.0
    ended_s: float = 0.0


def _stream(cluster: Cluster, salt: int, out: _Stream) -> None:
    body = {"model": "pdserve-demo", "prompt": text_of_words(40, salt=salt), "stream": True,
            "max_tokens": DRAIN_STREAM_TOKENS, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True}}  # fmt: skip
    out.started_s = time.monotonic()
    with (
        cluster.http(timeout_s=300) as http,
        http.stream("POST", "/v1/completions", json=body) as resp,
    ):
        out.decode_replica = json.loads(resp.headers.get("x-pdserve-served-by", "{}")).get("decode")
        out.status = resp.status_code  # after decode_replica: `_spread_streams` waits on it
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                out.error = str(event["error"])
            for choice in event.get("choices") or ():
                out.finish_reason = choice.get("finish_reason") or out.finish_reason
            if event.get("usage"):
                out.tokens = event["usage"]["completion_tokens"]
    out.ended_s = time.monotonic()


def _spread_streams(
    cluster: Cluster, replicas: set[str], most: int
) -> tuple[list[_Stream], list[threading.Thread]]:
    """Start long streams one at a time, each once the previous one knows its decode replica,
    until every replica in `replicas` holds one or `most` have started."""
    streams: list[_Stream] = []
    threads: list[threading.Thread] = []
    while len(streams) < most and not replicas <= {s.decode_replica for s in streams}:
        stream = _Stream()
        thread = threading.Thread(target=_stream, args=(cluster, 90_000 + len(streams), stream))
        thread.start()
        streams.append(stream)
        threads.append(thread)
        placed_by = time.monotonic() + 60
        while stream.decode_replica is None and stream.status == 0:
            assert time.monotonic() < placed_by, "a stream got no answer within 60 s"
            time.sleep(0.2)
    return streams, threads


def test_the_decode_pool_scales_on_kv_usage_and_drains_its_streams_on_the_way_down(
    elastic: Cluster,
) -> None:
    with elastic.http() as http:
        assert _healthy(http, "decode") == 1
        # 40-word prompts prefill on decode (under the cold-token threshold): prefill sees none.
        load = _Load(elastic, clients=64, words=40, max_tokens=400)
        try:
            deadline = time.monotonic() + SCALE_UP_WITHIN_S
            while _healthy(http, "decode") < 2:
                assert time.monotonic() < deadline, "the decode pool never scaled up"
                assert not load.failed(), f"load requests failed: {load.failed()[:3]}"
                prefill = _scaling(http, "prefill")
                assert prefill["target_replicas"] == 1, f"prefill moved: {prefill}"
                time.sleep(2)
            time.sleep(10)  # both decode replicas take streams
            # Let the requests in flight finish, so both replicas are idle when the long
            # streams start (a CI run placed all four on the replica the load had left first).
            load.stop()

            # Once the policy wants one decode replica fewer, start long streams, one at a time
            # until each replica holds one: Serve removes a replica only after its downscale
            # delay, so the one it removes holds a stream and must finish it while new work
            # goes elsewhere.
            deadline = time.monotonic() + SCALE_DOWN_WITHIN_S
            while _scaling(http, "decode")["wanted_replicas"] > 1:
                assert time.monotonic() < deadline, "the decode policy never wanted fewer"
                time.sleep(0.5)
            before = {r["replica_id"] for r in _replicas(http, "decode")}
            streams, threads = _spread_streams(elastic, before, most=6)
            while len(_replicas(http, "decode")) > 1:
                assert time.monotonic() < deadline, "the decode pool never scaled down"
                time.sleep(0.5)
            removed_seen_s = time.monotonic()
            # New work goes to the remaining replica while the removed one drains.
            body = {"model": "pdserve-demo", "prompt": "after the scale-down", "max_tokens": 4}
            after = http.post("/v1/completions", json=body)
            for t in threads:
                t.join(timeout=300)
            remaining = {r["replica_id"] for r in _replicas(http, "decode")}
        finally:
            load.stop()
    failed = load.failed()
    assert not failed, f"{len(failed)} of {len(load.outcomes)} failed: {failed[:3]}"

    (removed,) = before - remaining
    assert after.status_code == 200, after.text
    assert json.loads(after.headers["x-pdserve-served-by"])["decode"] in remaining
    for s in streams:
        assert (s.status, s.error, s.finish_reason) == (200, None, "length"), s
        assert s.tokens == DRAIN_STREAM_TOKENS, s
    drained = [s for s in streams if s.decode_replica == removed]
    assert drained, f"no stream ran on the removed replica {removed}: {streams}"
    assert max(s.ended_s for s in drained) > removed_seen_s, "nothing was left to drain"
    with elastic.http() as http:
        assert _scaling(http, "prefill")["target_replicas"] == 1
        assert _scaling(http, "decode")["target_replicas"] == 1
        _scale_events_shown(elastic, http, "decode", "KV usage")
