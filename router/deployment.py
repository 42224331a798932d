"""The Router Ray Serve deployment: FastAPI ingress built once per replica."""

from __future__ import annotations

from typing import Any

import prometheus_client
from fastapi import FastAPI

from pdserve.config import PdserveConfig
from pdserve.model_source import resolve_model
from pdserve.router.app import build_app
from pdserve.router.dispatch import RayServeDispatcher
from pdserve.router.kv_size import kv_bytes_per_token
from pdserve.router.metrics import RouterMetrics
from pdserve.router.placement import Placer
from pdserve.router.policy.prefix_index import PrefixIndex
from pdserve.router.prompts import PromptRenderer
from pdserve.router.replica_view import ReplicaSource, ReplicaView
from pdserve.router.service import CompletionService
from pdserve.router.tracing import RequestTracer


class Router:
    """Ingress replica: owns the tokenizer, metrics, the replica view and the dispatcher."""

    def __init__(self, config: dict[str, Any], prefill: Any, decode: Any):
        # This process serves only the router: drop the *_created series from /metrics.
        prometheus_client.disable_created_metrics()
        self._config = PdserveConfig.model_validate(config)
        self._metrics = RouterMetrics()
        self._dispatcher = RayServeDispatcher(prefill, decode)
        uses_events = self._config.prefill.engine.kv_events and self._config.decode.engine.kv_events
        mode = self._config.router.prefix_index
        if mode == "auto":
            mode = "events" if uses_events else "approximate"
        self._view = ReplicaView(PrefixIndex(mode=mode))
        placer = Placer(self._config.router.policy_config(), self._view)
        endpoint = self._config.router.otlp_traces_endpoint
        self._tracer = RequestTracer(endpoint) if endpoint else None
        model_path = resolve_model(self._config.model)
        renderer = PromptRenderer(model_path)
        self._service = CompletionService(
            self._config,
            renderer,
            self._dispatcher,
            self._metrics,
            placer,
            kv_bytes_per_token=kv_bytes_per_token(
                renderer.model_config(), self._config.model.dtype
            ),
            tracer=self._tracer,
        )

    def attach_request_router(self, pool: str, source: ReplicaSource) -> None:
        """Called by PdserveRequestRouter when Ray Serve creates it in this process."""
        if pool in ("prefill", "decode"):
            self._view.attach(pool, source)  # type: ignore[arg-type]

    def __del__(self) -> None:
        tracer = getattr(self, "_tracer", None)
        if tracer is not None:
            tracer.close()

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_app(
            self._service,
            self._metrics,
            self._dispatcher,
            allow_policy_override=self._config.router.allow_policy_override,
        )
