"""Health, readiness, model list and Prometheus metrics of the router."""

from __future__ import annotations

import json
import time
from typing import get_args

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.cluster import Cluster
from tests.integration.texts import text_of_words


def test_health_and_ready(cluster: Cluster) -> None:
    assert httpx.get(f"{cluster.url}/health", timeout=10).json() == {"status": "ok"}
    ready = httpx.get(f"{cluster.url}/ready", timeout=10)
    assert ready.status_code == 200
    assert ready.json() == {
        "ready": True,
        "pools": {"prefill": True, "decode": True},
        "placement": True,  # `pdserve up` waited for the router to be able to place requests
    }


def test_models_lists_the_served_model(cluster: Cluster) -> None:
    models = cluster.client().models.list()
    assert [m.id for m in models.data] == ["pdserve-demo"]


def test_metrics_count_requests_and_handoffs(cluster: Cluster) -> None:
    before_ok = cluster.metric("pdserve_requests_total", {"endpoint": "chat", "status": "200"})
    before_404 = cluster.metric("pdserve_requests_total", {"endpoint": "chat", "status": "404"})
    handoffs = cluster.metric("pdserve_kv_transfers_total")
    # Long enough to be disaggregated (local.yaml prefills shorter prompts on decode).
    content = "count me " + text_of_words(200, salt=2024)
    cluster.client().chat.completions.create(
        model="pdserve-demo", messages=[{"role": "user", "content": content}], max_tokens=2
    )
    httpx.post(
        f"{cluster.url}/v1/chat/completions",
        json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        timeout=10,
    )
    assert cluster.metric("pdserve_requests_total", {"endpoint": "chat", "status": "200"}) == (
        before_ok + 1
    )
    assert cluster.metric("pdserve_requests_total", {"endpoint": "chat", "status": "404"}) == (
        before_404 + 1
    )
    assert cluster.metric("pdserve_kv_transfers_total") == handoffs + 1
    text = httpx.get(f"{cluster.url}/metrics", timeout=10).text
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["pdserve_requests"] == "counter"
    assert families["pdserve_kv_transfers"] == "counter"


def test_the_router_loop_never_stalled_for_a_second(cluster: Cluster) -> None:
    """The router replica's event loop, sampled every 50 ms from its first request on, never
    stalled for a second: nothing heavy runs on its request path. When the KV-event
    subscribers imported vLLM on first use (about 1,700 modules), the first /ready stalled
    the loop for 3.4-3.6 s on the 2-core machine, and the objects the import made set off
    150-400 ms full collections under the first load; the router now imports it while it
    starts (router/kv_events.py)."""
    for i in range(3):
        cluster.client().completions.create(
            model="pdserve-demo", prompt=text_of_words(150, salt=7000 + i), max_tokens=4
        )
    name = "pdserve_router_event_loop_lag_seconds"
    text = httpx.get(f"{cluster.url}/metrics", timeout=10).text  # one scrape: it keeps counting
    samples = {
        (s.name, s.labels.get("le")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if family.name == name
    }
    wake_ups, within_1s = samples[f"{name}_count", None], samples[f"{name}_bucket", "1.0"]
    assert wake_ups >= 20, "the sampler has run since the first request"
    assert within_1s == wake_ups, f"{wake_ups - within_1s:g} stalls of a second or more"


def test_a_short_cold_prompt_prefills_on_decode_without_a_handoff(cluster: Cluster) -> None:
    """Selective disaggregation (local.yaml: local_prefill_max_cold_tokens 128): a short
    prompt skips the prefill pool and the KV transfer; a long one does not."""
    threshold = cluster.config.router.routing.local_prefill_max_cold_tokens
    assert threshold > 0
    handoffs = cluster.metric("pdserve_kv_transfers_total")
    with httpx.Client(base_url=cluster.url, timeout=60) as http:
        short = http.post(
            "/v1/completions",
            json={"model": "pdserve-demo", "prompt": "a short cold prompt", "max_tokens": 4},
        )
        assert short.status_code == 200, short.text
        assert short.json()["usage"]["prompt_tokens"] < threshold
        decision = json.loads(short.headers["x-pdserve-decision"])
        served = json.loads(short.headers["x-pdserve-served-by"])
        assert decision["prefill"] is None and served["prefill"] is None, decision
        assert decision["reason"].startswith("local:"), decision
        assert cluster.metric("pdserve_kv_transfers_total") == handoffs
        long = http.post(
            "/v1/completions",
            json={
                "model": "pdserve-demo",
                "prompt": text_of_words(300, salt=777),
                "max_tokens": 4,
            },
        )
        assert long.status_code == 200, long.text
        assert json.loads(long.headers["x-pdserve-decision"])["prefill"] is not None
        assert cluster.metric("pdserve_kv_transfers_total") == handoffs + 1


def test_pool_gauges_follow_the_replicas(cluster: Cluster) -> None:
    cluster.client().completions.create(model="pdserve-demo", prompt="gauge me", max_tokens=2)
    for pool in ("prefill", "decode"):
        assert cluster.metric("pdserve_pool_ready_replicas", {"pool": pool}) == 1
        assert cluster.metric("pdserve_pool_queued_prefill_tokens", {"pool": pool}) == 0
        usage = cluster.metric("pdserve_pool_kv_cache_usage_ratio", {"pool": pool})
        assert 0.0 <= usage <= 1.0


def test_replica_view_lists_both_pools(cluster: Cluster) -> None:
    view = httpx.get(f"{cluster.url}/v1/pdserve/replicas", timeout=10).json()
    assert view["ready"] is True
    assert view["prefix_index_mode"] == "events"
    assert len(view["pools"]["prefill"]) == 1 and len(view["pools"]["decode"]) == 1
    assert all(r["kv_events"] for pool in view["pools"].values() for r in pool)


def test_engines_vllm_metrics_reach_the_ray_metrics_export(cluster: Cluster) -> None:
    """The engines' own vllm: metrics of every replica, through Ray's per-node export."""
    from tests.integration.cluster import RAY_METRICS_PORT

    cluster.client().completions.create(model="pdserve-demo", prompt="export me", max_tokens=2)
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline:
        text = httpx.get(f"http://127.0.0.1:{RAY_METRICS_PORT}/metrics", timeout=10).text
        if "vllm:prompt_tokens" in text or "vllm_prompt_tokens" in text:
            break
        time.sleep(2)
    names = {line.split("{")[0] for line in text.splitlines() if "vllm" in line and line[0] != "#"}
    assert any("prompt_tokens" in n for n in names), sorted(names)[:20]
    assert any("num_requests_running" in n for n in names), sorted(names)[:20]


def test_live_metrics_follow_the_catalog_with_bounded_labels(cluster: Cluster) -> None:
    from pdserve.kv_transfer.integrity import FAILURE_REASONS
    from pdserve.names import POOLS
    from pdserve.router.context.layout import PARTS
    from pdserve.router.metric_catalog import (
        CATALOG,
        DECISIONS,
        INPUT_BUCKETS,
        REJECT_REASONS,
        TENANT_TOKEN_KINDS,
    )
    from pdserve.router.observe import FallbackReason
    from pdserve.router.policy.itl_guard import ItlVerdictCode

    cluster.client().completions.create(model="pdserve-demo", prompt="label me", max_tokens=2)
    httpx.post(f"{cluster.url}/v1/completions", json={"model": "x", "prompt": "y"}, timeout=10)
    text = httpx.get(f"{cluster.url}/metrics", timeout=10).text
    specs = {s.name: s for s in CATALOG}
    bounded = {
        "input_bucket": set(INPUT_BUCKETS),
        "decision": set(DECISIONS),
        "pool": set(POOLS),
        "endpoint": {"chat", "completion"},
        "part": set(PARTS),
        "cached": {"true", "false"},
        # pdserve_kv_integrity_failures_total reports every reason from the first scrape.
        "reason": set(FAILURE_REASONS) | set(REJECT_REASONS) | set(get_args(FallbackReason)),
        "tenant": {"default"},  # this cluster has no keys: one tenant
        "tier": {"prefill", "decode"},
        "kind": set(TENANT_TOKEN_KINDS),
        "verdict": set(get_args(ItlVerdictCode)),
    }
    seen = set()
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("pdserve_"):
            continue
        assert family.name in specs, f"{family.name} is not in the catalog"
        assert family.type == specs[family.name].type
        seen.add(family.name)
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            assert set(labels) <= set(specs[family.name].labels), (family.name, labels)
            for key, value in labels.items():
                if key == "status":
                    assert value.isdigit() and len(value) == 3
                else:
                    assert value in bounded[key], (family.name, key, value)
    assert seen == set(specs)
