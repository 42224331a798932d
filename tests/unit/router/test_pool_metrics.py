"""Pool metrics the router exports from its replicas' routing stats, at each scrape."""

from __future__ import annotations

from typing import Any

from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.placement import Placer
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.replica_view import ReplicaView
from tests.unit.router.fakes import BLOCK_TOKENS, FixedSource


def _observed(
    prefill: list[str], decode: list[str]
) -> tuple[RouterObserver, RouterMetrics, FixedSource, FixedSource]:
    """A router observer over fixed prefill and decode replicas, and their sources."""
    sources = FixedSource(prefill), FixedSource(decode)
    view = ReplicaView(PrefixIndex(mode="approximate"), refresh_interval_s=0.0)
    view.attach("prefill", sources[0])
    view.attach("decode", sources[1])
    placer = Placer(PolicyConfig(block_size_tokens=BLOCK_TOKENS), view, policy="pdserve")
    metrics = RouterMetrics()
    return RouterObserver(metrics, placer), metrics, *sources


def _failures(metrics: RouterMetrics, pool: str) -> float:
    value = metrics.registry.get_sample_value("pdserve_kv_transfer_failures_total", {"pool": pool})
    return value or 0.0


def test_engine_kv_transfer_failures_become_a_router_counter() -> None:
    observer, metrics, _, decode = _observed(["p0"], ["d0", "d1"])
    stats: list[tuple[str, dict[str, Any]]] = decode.replicas()

    observer.update_pool_gauges()
    assert _failures(metrics, "decode") == 0
    stats[0][1]["kv_transfer_failures_total"] = 3  # d0's engine saw 3 failed pulls
    observer.update_pool_gauges()
    stats[1][1]["kv_transfer_failures_total"] = 1
    observer.update_pool_gauges()
    observer.update_pool_gauges()  # nothing new: counted once
    assert _failures(metrics, "decode") == 4
    assert _failures(metrics, "prefill") == 0


def test_engine_expired_kv_becomes_a_router_counter_per_pool() -> None:
    observer, metrics, prefill, _ = _observed(["p0"], ["d0"])

    observer.update_pool_gauges()
    prefill.replicas()[0][1]["kv_expired_total"] = 2  # p0's lease freed two unpulled KVs
    observer.update_pool_gauges()
    observer.update_pool_gauges()
    get = metrics.registry.get_sample_value
    assert get("pdserve_kv_expired_total", {"pool": "prefill"}) == 2
    assert (get("pdserve_kv_expired_total", {"pool": "decode"}) or 0.0) == 0
    assert _failures(metrics, "prefill") == 0  # a separate counter


def test_engine_integrity_counts_become_router_counters_per_pool_and_reason() -> None:
    observer, metrics, _, decode = _observed(["p0"], ["d0"])
    failures = {"digest": 0, "identity": 0, "stale": 0, "unverifiable": 0}
    report = {"checks": 0, "failures": failures, "notifications_after_expiry": 0}
    decode.replicas()[0][1]["kv_integrity"] = report
    observer.update_pool_gauges()
    report["checks"] = 5
    failures["stale"] = 2
    failures["digest"] = 1
    report["notifications_after_expiry"] = 1
    observer.update_pool_gauges()
    observer.update_pool_gauges()  # nothing new: counted once
    get = metrics.registry.get_sample_value
    assert get("pdserve_kv_integrity_checks_total", {"pool": "decode"}) == 5
    assert get("pdserve_kv_integrity_failures_total", {"pool": "decode", "reason": "stale"}) == 2
    assert get("pdserve_kv_integrity_failures_total", {"pool": "decode", "reason": "digest"}) == 1
    assert get("pdserve_kv_notifications_after_expiry_total", {"pool": "decode"}) == 1
    labels = {"pool": "decode", "reason": "identity"}
    assert (get("pdserve_kv_integrity_failures_total", labels) or 0.0) == 0
