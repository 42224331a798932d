"""The router's Prometheus metrics, in a registry owned by one router instance.

Names, types and labels follow router/metric_catalog.py (tests check they agree).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from pdserve.messages import BYTES_BUCKETS, SECONDS_BUCKETS
from pdserve.router.engine_histograms import PoolHistogram
from pdserve.router.metric_catalog import CATALOG, MetricSpec


class RouterMetrics:
    """Created once per router replica; `render()` serves GET /metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        made = {spec.name: self._make(spec) for spec in CATALOG if not spec.measured_by_engines}
        self.engine_histograms = {
            spec.name: self._engine_histogram(spec) for spec in CATALOG if spec.measured_by_engines
        }
        self.requests: Counter = made["pdserve_requests"]  # type: ignore[assignment]
        self.rejected: Counter = made["pdserve_requests_rejected"]  # type: ignore[assignment]
        self.refusal_seconds: Histogram = made["pdserve_router_refusal_seconds"]  # type: ignore[assignment]
        self.fallbacks: Counter = made["pdserve_fallbacks"]  # type: ignore[assignment]
        self.itl_guard: Counter = made["pdserve_itl_guard_decisions"]  # type: ignore[assignment]
        self.kv_transfers: Counter = made["pdserve_kv_transfers"]  # type: ignore[assignment]
        self.kv_transfer_failures: Counter = made["pdserve_kv_transfer_failures"]  # type: ignore[assignment]
        self.kv_expired: Counter = made["pdserve_kv_expired"]  # type: ignore[assignment]
        self.kv_after_expiry: Counter = made["pdserve_kv_notifications_after_expiry"]  # type: ignore[assignment]
        self.kv_integrity_checks: Counter = made["pdserve_kv_integrity_checks"]  # type: ignore[assignment]
        self.kv_integrity_failures: Counter = made["pdserve_kv_integrity_failures"]  # type: ignore[assignment]
        self.prompt_tokens: Counter = made["pdserve_prompt_tokens"]  # type: ignore[assignment]
        self.conversations: Gauge = made["pdserve_conversations"]  # type: ignore[assignment]
        self.conversation_state_bytes: Gauge = made["pdserve_conversation_state_bytes"]  # type: ignore[assignment]
        self.cache_breaks: Counter = made["pdserve_cache_breaks"]  # type: ignore[assignment]
        self.cached_prompt_tokens: Counter = made["pdserve_cached_prompt_tokens"]  # type: ignore[assignment]
        self.generation_tokens: Counter = made["pdserve_generation_tokens"]  # type: ignore[assignment]
        self.ttft: Histogram = made["pdserve_time_to_first_token_seconds"]  # type: ignore[assignment]
        self.queue_time: Histogram = made["pdserve_queue_time_seconds"]  # type: ignore[assignment]
        self.prefill_time: Histogram = made["pdserve_prefill_time_seconds"]  # type: ignore[assignment]
        self.kv_wait_seconds: Histogram = made["pdserve_kv_wait_seconds"]  # type: ignore[assignment]
        self.itl: Histogram = made["pdserve_inter_token_latency_seconds"]  # type: ignore[assignment]
        self.e2e: Histogram = made["pdserve_e2e_latency_seconds"]  # type: ignore[assignment]
        self.ready_replicas: Gauge = made["pdserve_pool_ready_replicas"]  # type: ignore[assignment]
        self.queued_prefill_tokens: Gauge = made["pdserve_pool_queued_prefill_tokens"]  # type: ignore[assignment]
        self.running_requests: Gauge = made["pdserve_pool_running_requests"]  # type: ignore[assignment]
        self.kv_cache_usage: Gauge = made["pdserve_pool_kv_cache_usage_ratio"]  # type: ignore[assignment]
        self.target_replicas: Gauge = made["pdserve_pool_target_replicas"]  # type: ignore[assignment]
        self.wanted_replicas: Gauge = made["pdserve_pool_wanted_replicas"]  # type: ignore[assignment]
        self.scaling_signal: Gauge = made["pdserve_pool_scaling_signal"]  # type: ignore[assignment]
        self.scaling_target: Gauge = made["pdserve_pool_scaling_target"]  # type: ignore[assignment]
        self.scale_events: Counter = made["pdserve_pool_scale_events"]  # type: ignore[assignment]
        self.event_loop_lag: Histogram = made["pdserve_router_event_loop_lag_seconds"]  # type: ignore[assignment]
        self.tenant_requests: Counter = made["pdserve_tenant_requests"]  # type: ignore[assignment]
        self.tenant_rejected: Counter = made["pdserve_tenant_rejected"]  # type: ignore[assignment]
        self.tenant_tokens: Counter = made["pdserve_tenant_tokens"]  # type: ignore[assignment]
        self.tenant_prefill_seconds: Counter = made["pdserve_tenant_prefill_seconds"]  # type: ignore[assignment]
        self.tenant_kv_block_seconds: Counter = made["pdserve_tenant_decode_kv_block_seconds"]  # type: ignore[assignment]
        self.tenant_ttft: Histogram = made["pdserve_tenant_time_to_first_token_seconds"]  # type: ignore[assignment]
        self.tenant_itl: Histogram = made["pdserve_tenant_inter_token_latency_seconds"]  # type: ignore[assignment]
        self.tenant_queue_wait: Histogram = made["pdserve_tenant_queue_wait_seconds"]  # type: ignore[assignment]
        self.tenant_inflight: Gauge = made["pdserve_tenant_inflight_requests"]  # type: ignore[assignment]

    def _make(self, spec: MetricSpec) -> Counter | Gauge | Histogram:
        labels = list(spec.labels)
        if spec.type == "counter":
            return Counter(spec.name, spec.help, labels, registry=self.registry)
        if spec.type == "gauge":
            return Gauge(spec.name, spec.help, labels, registry=self.registry)
        return Histogram(
            spec.name, spec.help, labels, buckets=_buckets(spec), registry=self.registry
        )

    def _engine_histogram(self, spec: MetricSpec) -> PoolHistogram:
        hist = PoolHistogram(spec.name, spec.help, _buckets(spec))
        self.registry.register(hist)
        return hist

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _buckets(spec: MetricSpec) -> tuple[float, ...]:
    return BYTES_BUCKETS if spec.name.endswith("_bytes") else SECONDS_BUCKETS
