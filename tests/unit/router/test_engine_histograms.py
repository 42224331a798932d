"""Engine-measured histograms (NIXL's per-transfer time and size): the engine's cumulative
bucket counts reach the router's /metrics as one Prometheus histogram per pool, growth only
(a replaced replica starts from its own counts), malformed reports ignored."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pdserve.engine.stats import EngineCounters
from pdserve.messages import BucketCounts
from pdserve.router.engine_histograms import PoolHistogram
from pdserve.router.metrics import RouterMetrics

BOUNDS = (0.01, 0.1, 1.0)


def _samples(m: RouterMetrics) -> dict[tuple[str, str, str], float]:
    out = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            if s.name.startswith("pdserve_kv_transfer_seconds"):
                out[(s.name, s.labels.get("pool", ""), s.labels.get("le", ""))] = s.value
    return out


def test_bucket_counts_follow_prometheus_le_semantics() -> None:
    b = BucketCounts(BOUNDS)
    for v in (0.01, 0.05, 0.1, 5.0):
        b.observe(v)
    assert b.report() == {"counts": [1, 2, 0, 1], "sum": pytest.approx(5.16)}


def test_growth_of_each_replica_is_summed_per_pool_and_survives_replacement() -> None:
    m = RouterMetrics()
    hist = m.engine_histograms["pdserve_kv_transfer_seconds"]
    first = BucketCounts(hist._bounds)
    first.observe(0.004)
    hist.fold("decode", "d1", first.report())
    hist.fold("decode", "d1", first.report())  # the same report again: no growth
    first.observe(0.2)
    hist.fold("decode", "d1", first.report())
    hist.forget({"d2"})  # d1 was replaced by d2, whose counts start from zero
    second = BucketCounts(hist._bounds)
    second.observe(0.004)
    hist.fold("decode", "d2", second.report())
    hist.fold("decode", "d2", {"counts": [1], "sum": 9.0})  # other bounds: ignored
    hist.fold("decode", "d2", None)
    s = _samples(m)
    assert s[("pdserve_kv_transfer_seconds_count", "decode", "")] == 3
    assert s[("pdserve_kv_transfer_seconds_sum", "decode", "")] == pytest.approx(0.208)
    assert s[("pdserve_kv_transfer_seconds_bucket", "decode", "0.005")] == 2
    assert s[("pdserve_kv_transfer_seconds_bucket", "decode", "0.25")] == 3
    assert s[("pdserve_kv_transfer_seconds_bucket", "decode", "+Inf")] == 3


def test_an_unscraped_pool_histogram_renders_no_series() -> None:
    assert next(PoolHistogram("pdserve_x_seconds", "x", BOUNDS).collect()).samples == []


def test_the_engine_counts_nixls_own_transfer_stats() -> None:
    counters = EngineCounters()
    connector = {"transfer_duration": [0.003, 0.02], "bytes_transferred": [4096, 1 << 20]}
    sched = SimpleNamespace(
        num_running_reqs=1, num_waiting_reqs=0, kv_cache_usage=0.1, kv_connector_stats=connector
    )
    counters.record(sched, None)
    assert counters.kv_transfer_seconds.report()["sum"] == pytest.approx(0.023)
    assert sum(counters.kv_transfer_seconds.report()["counts"]) == 2
    assert counters.kv_transfer_bytes.report()["sum"] == 4096 + (1 << 20)
    assert counters.snapshot().num_kv_transfers_total == 2
