"""The elastic prefill pool on the real stack (Ray Serve's controller running pdserve's policy,
vLLM, NIXL): under a load of long prompts the pool's queued prefill work passes its target
and a second replica starts and serves; once the load ends the pool drains back to one
replica; no request fails on the way up or down, and the router shows both scale events with
the policy's reasons (/v1/pdserve/replicas, which `pdserve top` reads, and /metrics)."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.integration.conftest import Cluster
from tests.integration.texts import text_of_words

SCALE_UP_WITHIN_S = 300  # upscale delay 3 s + a new engine's start (~35 s idle, slower loaded)
SCALE_DOWN_WITHIN_S = 180  # downscale delay 20 s + the look-back window + the drain


def _prefill_replicas(http: httpx.Client) -> list[dict[str, Any]]:
    pool: list[dict[str, Any]] = http.get("/v1/pdserve/replicas").json()["pools"]["prefill"]
    return pool


def _scaling(http: httpx.Client) -> dict[str, Any]:
    """The prefill pool's autoscaler state as the router shows it (what `pdserve top` reads)."""
    doc: dict[str, Any] = http.get("/v1/pdserve/replicas").json()["scaling"]["prefill"]
    return doc


class _Load:
    """Clients sending long unique prompts back to back until stopped; every outcome kept."""

    def __init__(self, cluster: Cluster, clients: int, words: int) -> None:
        self._cluster = cluster
        self._clients = clients
        self._words = words
        self._stop = threading.Event()
        self._salt = itertools.count(70_000)
        self.outcomes: list[tuple[int, str]] = []
        self._pool = ThreadPoolExecutor(clients)
        self._futures = [self._pool.submit(self._client) for _ in range(clients)]

    def _client(self) -> None:
        with self._cluster.http(timeout_s=300) as http:
            while not self._stop.is_set():
                body = {"model": "pdserve-demo", "max_tokens": 4, "temperature": 0,
                        "prompt": text_of_words(self._words, salt=next(self._salt))}  # fmt: skip
                resp = http.post("/v1/completions", json=body)
                self.outcomes.append((resp.status_code, resp.text[:300]))

    def stop(self) -> None:
        self._stop.set()
        for f in self._futures:
            f.result(timeout=300)
        self._pool.shutdown()


def test_the_prefill_pool_scales_up_under_load_and_drains_back_down(elastic: Cluster) -> None:
    with elastic.http() as http:
        first = [r["replica_id"] for r in _prefill_replicas(http)]
        assert len(first) == 1, first
        load = _Load(elastic, clients=8, words=1500)  # ~3,000 tokens each: ~2.5 s queued
        try:
            deadline = time.monotonic() + SCALE_UP_WITHIN_S
            while len([r for r in _prefill_replicas(http) if r["healthy"]]) < 2:
                assert time.monotonic() < deadline, "the prefill pool never scaled up"
                failed = [o for o in load.outcomes if o[0] != 200]
                assert not failed, f"load requests failed: {failed[:3]}"
                time.sleep(2)
            # The new replica takes work: placement sends prompts to both.
            before = {r["replica_id"]: r for r in _prefill_replicas(http)}
            time.sleep(10)
            target = elastic.metric("pdserve_pool_target_replicas", {"pool": "prefill"})
        finally:
            load.stop()
        served = [r for r in _prefill_replicas(http) if r["replica_id"] not in first]
        assert served, f"no second replica in the view: {before}"
        failed = [o for o in load.outcomes if o[0] != 200]
        assert not failed, f"{len(failed)} of {len(load.outcomes)} failed scaling up: {failed[:3]}"
        assert target == 2, f"pdserve_pool_target_replicas{{pool=prefill}} = {target}"

        # Load over: the pool drains back to one replica; a trickle of requests never fails.
        deadline = time.monotonic() + SCALE_DOWN_WITHIN_S
        trickle = []
        while len(_prefill_replicas(http)) > 1:
            assert time.monotonic() < deadline, "the prefill pool never scaled down"
            body = {"model": "pdserve-demo", "prompt": text_of_words(300, salt=len(trickle)),
                    "max_tokens": 4, "temperature": 0}  # fmt: skip
            trickle.append(http.post("/v1/completions", json=body).status_code)
            time.sleep(1)
        assert trickle and set(trickle) == {200}, trickle
        left = _prefill_replicas(http)
        time.sleep(3)  # the policy republishes within a second; the router rereads each second
        scaling = _scaling(http)
    assert len(left) == 1 and left[0]["healthy"], left
    assert scaling["signal"] < 0.5 and scaling["signal_target"] == 0.5, scaling  # back under
    # Both scale events, with the policy's reasons, in the router's view and its counters.
    moves = [(e["from_replicas"], e["to_replicas"]) for e in scaling["events"]]
    assert moves == [(1, 2), (2, 1)], scaling["events"]
    assert "queued prefill" in scaling["events"][0]["reason"], scaling["events"]
    assert "with one fewer" in scaling["events"][1]["reason"], scaling["events"]
    for direction in ("up", "down"):
        labels = {"pool": "prefill", "direction": direction}
        assert elastic.metric("pdserve_pool_scale_events_total", labels) == 1, direction
