"""The Router Ray Serve deployment: FastAPI ingress built once per replica."""

from __future__ import annotations

from typing import Any

import prometheus_client
from fastapi import FastAPI

from pdserve.config import PdserveConfig
from pdserve.model_source import resolve_model
from pdserve.router.app import build_app
from pdserve.router.dispatch import RayServeDispatcher
from pdserve.router.metrics import RouterMetrics
from pdserve.router.prompts import PromptRenderer
from pdserve.router.service import CompletionService


class Router:
    """Ingress replica: owns the tokenizer, metrics and the dispatcher to both pools."""

    def __init__(self, config: dict[str, Any], prefill: Any, decode: Any):
        # This process serves only the router: drop the *_created series from /metrics.
        prometheus_client.disable_created_metrics()
        self._config = PdserveConfig.model_validate(config)
        self._metrics = RouterMetrics()
        self._dispatcher = RayServeDispatcher(prefill, decode)
        renderer = PromptRenderer(resolve_model(self._config.model))
        self._service = CompletionService(self._config, renderer, self._dispatcher, self._metrics)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_app(self._service, self._metrics, self._dispatcher)
