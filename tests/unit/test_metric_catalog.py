"""The router's /metrics follows the catalog: names, types, base units, bounded labels."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pdserve.router.metric_catalog import CATALOG, DECISIONS, INPUT_BUCKETS, input_bucket
from pdserve.router.metrics import RouterMetrics

UNBOUNDED_LABELS = {"request_id", "prompt", "user", "model_input", "replica_id"}


def test_every_catalog_metric_is_exported_with_its_type() -> None:
    m = RouterMetrics()
    m.requests.labels("chat", "remote_prefill", "200").inc()
    m.ttft.labels("0-256", "remote_prefill").observe(0.1)
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    for spec in CATALOG:
        assert spec.name in families, spec.name
        assert families[spec.name].type == spec.type


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: s.name)
def test_names_units_and_labels(spec: object) -> None:
    from pdserve.router.metric_catalog import MetricSpec

    assert isinstance(spec, MetricSpec)
    assert spec.name.startswith("pdserve_")
    assert not spec.name.endswith("_total"), "the client library adds _total to counters"
    if spec.type == "histogram":
        assert spec.name.endswith(("_seconds", "_bytes")), "histograms carry a base unit"
    assert not set(spec.labels) & UNBOUNDED_LABELS


@pytest.mark.parametrize(
    ("tokens", "bucket"),
    [(0, "0-256"), (255, "0-256"), (256, "256-1k"), (1500, "1k-4k"), (5000, "4k-16k"),
     (20000, "16k+")],
)  # fmt: skip
def test_input_buckets_are_bounded(tokens: int, bucket: str) -> None:
    assert input_bucket(tokens) == bucket
    assert bucket in INPUT_BUCKETS
    assert "local_prefill" in DECISIONS
