"""Alerts and the Grafana dashboard query metrics that pdserve really exports.

Every metric name in an alert or panel must be in router/metric_catalog.py (histograms as
_bucket/_sum/_count, counters as _total) or in KNOWN_EXTERNAL_METRICS, and every label it groups
or matches on must belong to one of those metrics (or be a scrape target label).
"""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python
import pytest
import yaml

from tests.chart.helpers import (
    CHART_DIR,
    one,
    promql_metrics,
    render,
    summed_across_routers,
    unknown_metric_problems,
)

ALERTS_FILE = CHART_DIR / "files" / "prometheus" / "pdserve-alerts.yaml"
DASHBOARD_FILE = CHART_DIR / "files" / "grafana" / "pdserve-dashboard.json"
REQUIRED_ALERTS = {
    "PdserveTTFTP99High",
    "PdserveKVTransferP99High",
    "PdserveHeadOfLineBlocking",
    "PdservePrefillBottleneck",
    "PdserveDecodeBottleneck",
    "PdservePoolNoReadyReplicas",
    "PdserveKVIntegrityFailures",
}


def _rules(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _rendered_groups(chart: helm_python.Chart, alerts: dict[str, Any] | None = None) -> Any:
    values: dict[str, Any] = {"monitoring": {"enabled": True}}
    if alerts:
        values["monitoring"]["prometheusRule"] = {"alerts": alerts}
    return one(render(chart, values), "PrometheusRule")["spec"]["groups"]


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return loaded


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def test_static_rules_file_equals_the_chart_rules_at_default_thresholds(
    chart: helm_python.Chart,
) -> None:
    static = yaml.safe_load(ALERTS_FILE.read_text())
    assert static["groups"] == _rendered_groups(chart)
    assert set(_rules(static["groups"])) == REQUIRED_ALERTS


def test_thresholds_come_from_values(chart: helm_python.Chart) -> None:
    rules = _rules(
        _rendered_groups(chart, {"ttftP99Seconds": 1.5, "prefillQueuedTokensHigh": 2000000})
    )
    assert rules["PdserveTTFTP99High"]["expr"].endswith("> 1.5")
    # Large numbers must stay plain decimals (Go would print 2e+06).
    assert "> 2000000 and" in rules["PdservePrefillBottleneck"]["expr"]


@pytest.mark.parametrize("alert", sorted(REQUIRED_ALERTS))
def test_alert_references_existing_metrics(alert: str) -> None:
    rule = _rules(yaml.safe_load(ALERTS_FILE.read_text())["groups"])[alert]
    assert unknown_metric_problems(rule["expr"]) == []
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}
    assert rule["annotations"]["summary"]


def _all_exprs() -> list[str]:
    rules = _rules(yaml.safe_load(ALERTS_FILE.read_text())["groups"])
    return [r["expr"] for r in rules.values()] + [
        t["expr"] for p in _panels() for t in p["targets"]
    ]


def test_no_query_sums_a_cluster_series_over_router_replicas() -> None:
    """With several router replicas every replica exports the engines' and the autoscaler's
    values (scope 'cluster'): a sum over replicas would count them once per router."""
    problems = [p for expr in _all_exprs() for p in summed_across_routers(expr)]
    assert problems == []


def test_the_router_sum_checker_catches_a_summed_cluster_series() -> None:
    assert summed_across_routers("sum(rate(pdserve_kv_transfer_failures_total[5m]))") == [
        "pdserve_kv_transfer_failures_total in a sum() across router replicas"
    ]
    assert summed_across_routers("sum by (pool) (pdserve_pool_running_requests)") != []
    ok = "sum by (le) (max by (pod, pool, le) (rate(pdserve_kv_transfer_seconds_bucket[5m])))"
    assert summed_across_routers(ok) == []
    assert summed_across_routers("max by (pool) (pdserve_pool_ready_replicas)") == []
    # Router-scope series are summed: each replica counts its own requests.
    assert summed_across_routers("sum(rate(pdserve_requests_total[1m]))") == []


def test_metric_checker_catches_unknown_names_and_labels() -> None:
    assert promql_metrics(
        'histogram_quantile(0.99, sum by (le) (rate(pdserve_ttft_bucket{pool="a"}[5m]))) > 1e3'
    ) == {"pdserve_ttft_bucket"}
    assert unknown_metric_problems("rate(pdserve_requests[5m])") == [
        "pdserve_requests is neither in router/metric_catalog.py nor in KNOWN_EXTERNAL_METRICS"
    ]
    assert unknown_metric_problems("sum by (pool) (rate(pdserve_requests_total[1m]))") == [
        "label 'pool' is not a label of ['pdserve_requests_total']"
    ]
    assert unknown_metric_problems("vector(1)") == ["references no metric: vector(1)"]


def test_dashboard_is_a_templated_grafana_dashboard() -> None:
    dash = _dashboard()
    assert dash["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ns_metric = re.fullmatch(
        r"label_values\((\w+), namespace\)", variables["namespace"]["definition"]
    )
    assert ns_metric and unknown_metric_problems(ns_metric.group(1)) == []
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


@pytest.mark.parametrize("panel", _panels(), ids=lambda p: p["title"])
def test_dashboard_panel_queries_existing_metrics(panel: dict[str, Any]) -> None:
    for target in panel["targets"]:
        assert unknown_metric_problems(target["expr"]) == [], panel["title"]


@pytest.mark.parametrize(
    ("metric", "must_contain"),
    [
        ("pdserve_time_to_first_token_seconds_bucket", "input_bucket"),
        ("pdserve_queue_time_seconds_sum", ""),
        ("pdserve_prefill_time_seconds_sum", ""),
        ("pdserve_kv_transfer_seconds_sum", ""),
        ("pdserve_inter_token_latency_seconds_bucket", ""),
        ("pdserve_kv_transfer_seconds_bucket", ""),
        ("pdserve_kv_transfer_bytes_sum", "pdserve_kv_transfer_seconds_sum"),
        ("pdserve_pool_queued_prefill_tokens", "by (pool)"),
        ("pdserve_pool_running_requests", "by (pool)"),
        ("pdserve_pool_kv_cache_usage_ratio", "by (pool)"),
        ("pdserve_requests_total", "by (decision)"),
        ("pdserve_requests_total", "by (status)"),
        ("pdserve_router_event_loop_lag_seconds_bucket", "histogram_quantile(0.99"),
        # Tenants row: every tenant series is scope "router", summed over router replicas.
        ("pdserve_tenant_requests_total", "sum by (tenant)"),
        ("pdserve_tenant_rejected_total", "sum by (tenant, reason)"),
        ("pdserve_tenant_time_to_first_token_seconds_bucket", "histogram_quantile(0.99"),
        ("pdserve_tenant_inter_token_latency_seconds_bucket", "histogram_quantile(0.99"),
        ("pdserve_tenant_prefill_seconds_total", "/ scalar(sum("),
        ("pdserve_tenant_queue_wait_seconds_bucket", "sum by (le, tenant, tier)"),
    ],
)
def test_dashboard_has_the_panels_sres_need(metric: str, must_contain: str) -> None:
    exprs = [t["expr"] for p in _panels() for t in p["targets"]]
    assert any(metric in promql_metrics(e) and must_contain in e for e in exprs)


def test_dashboard_configmap_carries_the_file(chart: helm_python.Chart) -> None:
    objects = render(chart, {"monitoring": {"enabled": True}})
    data = one(objects, "ConfigMap")["data"]["pdserve-dashboard.json"]
    assert json.loads(data) == _dashboard()
