"""The Router Ray Serve deployment: builds the request path once per replica and serves it.

Ray Serve constructs `Router` once per router replica (the FastAPI ingress); the pool handles
come in as constructor arguments. Everything the request path needs is built here and passed
in — no module globals: the tokenizer (`RequestPreparer`), the replica view and policy
(`Placer`), the pools (`Orchestrator` over a `RayServeDispatcher`), metrics and tracing
(`RouterObserver`), operator views (`ClusterStatus`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import prometheus_client
from fastapi import FastAPI

from pdserve.autoscaling import store as scaling_store
from pdserve.config import PdserveConfig, RouterConfig
from pdserve.kv_transfer.faults import FaultSwitch
from pdserve.model_source import resolve_model
from pdserve.names import PoolName
from pdserve.router.app import build_app
from pdserve.router.context.breaks import ConversationTracker
from pdserve.router.dispatch import RayServeDispatcher
from pdserve.router.fault_hooks import HandoffSwapper
from pdserve.router.kv_events import load_vllm_event_types
from pdserve.router.kv_events import warm_up_kernels as warm_up_event_kernels
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.placement import Placer
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.policy.warmup import warm_up_kernels
from pdserve.router.prepare import RequestPreparer
from pdserve.router.prompts import PromptRenderer
from pdserve.router.replica_metrics import ReplicaMetricsAddress
from pdserve.router.replica_view import ReplicaSource, ReplicaView
from pdserve.router.scaling import ScalingView
from pdserve.router.status import ClusterStatus
from pdserve.router.tenants.directory import TenantDirectory
from pdserve.router.tenants.gate import TierGates
from pdserve.router.tenants.limits import TenantLimiter
from pdserve.router.tracing import RequestTracer
from pdserve.serve_logs import log_to_serve


class Router:
    """Ingress replica: owns the tokenizer, metrics, the replica view and the dispatcher."""

    def __init__(self, config: dict[str, Any], prefill: Any | None, decode: Any):
        """`prefill` None: an aggregated deployment (no prefill pool)."""
        log_to_serve()
        # This process serves only the router: drop the *_created series from /metrics.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self._config = PdserveConfig.model_validate(config)
        router = self._config.router
        dispatcher = RayServeDispatcher(prefill, decode)
        pools = self._config.pools
        uses_events = all(self._config.pool(p).engine.kv_events for p in pools)
        mode = router.prefix_index
        if mode == "auto":
            mode = "events" if uses_events else "approximate"
        if mode == "events":
            load_vllm_event_types()  # now, not on the first request: see its docstring
        # Seconds on a cold numba cache: now, not on the first request.
        warm_up_kernels()
        warm_up_event_kernels()
        self._view = ReplicaView(PrefixIndex(mode=mode), pools=pools)
        placer = Placer(
            router.routing,
            self._view,
            policy=router.policy,
            admission=router.admission,
            aggregated=self._config.aggregated,
        )
        self._tracer = (
            RequestTracer(router.otlp_traces_endpoint) if router.otlp_traces_endpoint else None
        )
        renderer = PromptRenderer(resolve_model(self._config.model))
        cost = router.prompt_cost
        conversations = (
            ConversationTracker(cost.conversation_state_max_bytes, router.routing.block_size_tokens)
            if cost.enabled and cost.detect_cache_breaks
            else None
        )
        self._preparer = RequestPreparer(self._config, renderer, conversations)
        faults = FaultSwitch.from_env()
        self._directory = TenantDirectory.load(router.auth, os.environ)
        # Each router replica enforces its share of every tenant limit (docs/tenants.md).
        split = router.autoscaling.min_replicas if router.autoscaling else router.num_replicas
        self._limiter = TenantLimiter(time.monotonic, split)
        self._orchestrator = Orchestrator(
            router,
            dispatcher,
            placer,
            aggregated=self._config.aggregated,
            kv_verify_fraction=self._config.kv_transfer.verify_fraction,
            handoff_swapper=HandoffSwapper(faults) if faults.armed else None,
            # One tenant (no keys, or keys of one tenant): nothing to share, no queues.
            gates=tier_gates(router, placer) if self._directory.shared else None,
        )
        self._observer = RouterObserver(
            RouterMetrics(),
            placer,
            self._tracer,
        )
        elastic = tuple(
            pool
            for pool in pools
            if (a := self._config.pool(pool).autoscaling) is not None and a.policy == "slo"
        )
        scaling = ScalingView(self._config.app_name, elastic, scaling_store.read)
        self._status = ClusterStatus(placer, dispatcher, scaling)

    def attach_request_router(self, pool: PoolName, source: ReplicaSource) -> None:
        """Called by PdserveRequestRouter when Ray Serve creates it in this process."""
        self._view.attach(pool, source)

    def __del__(self) -> None:
        tracer = getattr(self, "_tracer", None)
        if tracer is not None:
            tracer.close()

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_app(
            self._preparer,
            self._orchestrator,
            self._observer,
            self._status,
            tenants=self._directory,
            limiter=self._limiter,
            max_request_bytes=self._config.router.max_request_bytes,
            sse_keepalive_s=self._config.router.deadlines.sse_keepalive_seconds,
            max_inflight_requests=self._config.router.admission.max_inflight_requests,
            allow_policy_override=self._config.router.allow_policy_override,
            report_prompt_cost=self._config.router.prompt_cost.enabled,
            replica_metrics=ReplicaMetricsAddress(
                self._config.router.host, self._config.router.metrics_ports
            ),
        )


def tier_gates(router: RouterConfig, placer: Placer) -> TierGates:
    """The prefill and decode tiers' fair queues of one router replica, sized from the
    healthy replicas in its view (router.tenants)."""
    share = router.tenants
    streams = share.decode_streams_per_replica or router.admission.max_decode_streams

    def prefill_capacity_s() -> float:
        return share.prefill_seconds_per_replica * max(1, placer.prefilling_replicas())

    def decode_capacity() -> float:
        assert streams is not None
        return float(streams * max(1, placer.decode_replicas()))

    return TierGates.build(
        prefill_capacity_s,
        decode_capacity if streams is not None else None,
        time.monotonic,
        share.max_queue_seconds,
        share.max_queued_per_tenant,
    )
