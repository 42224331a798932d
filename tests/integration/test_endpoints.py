"""Health, readiness, model list and Prometheus metrics of the router."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Cluster


def test_health_and_ready(cluster: Cluster) -> None:
    assert httpx.get(f"{cluster.url}/health", timeout=10).json() == {"status": "ok"}
    ready = httpx.get(f"{cluster.url}/ready", timeout=10)
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "pools": {"prefill": True, "decode": True}}


def test_models_lists_the_served_model(cluster: Cluster) -> None:
    models = cluster.client().models.list()
    assert [m.id for m in models.data] == ["pdserve-demo"]


def test_metrics_count_requests_and_handoffs(cluster: Cluster) -> None:
    before_ok = cluster.metric("pdserve_requests_total", {"endpoint": "chat", "status": "200"})
    before_404 = cluster.metric("pdserve_requests_total", {"endpoint": "chat", "status": "404"})
    handoffs = cluster.metric("pdserve_kv_transfers_total")
    cluster.client().chat.completions.create(
        model="pdserve-demo", messages=[{"role": "user", "content": "count me"}], max_tokens=2
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
