"""PrefillServer: a Ray Serve replica that owns one vLLM engine in the kv_producer role.

Ray Serve builds one per replica (constructor starts the engine: 30-60 s on CPU). The router
calls `prefill()` once per request; the KV stays in this engine until a decode pulls it or
`kv_transfer.abort_request_timeout_seconds` passes.
"""

from __future__ import annotations

from typing import Any

from pdserve.config import PdserveConfig
from pdserve.engine.server import EngineServer
from pdserve.engine.stats import EngineStats
from pdserve.messages import PrefillRequest, PrefillResult
from pdserve.model_source import resolve_model


def _replica_id() -> str:
    from ray import serve

    return str(serve.get_replica_context().replica_id.unique_id)


class PrefillServer:
    """Prefill replica."""

    async def __init__(self, config: dict[str, Any]):
        self._config = PdserveConfig.model_validate(config)
        self._engine = EngineServer(
            self._config, "prefill", resolve_model(self._config.model), _replica_id()
        )
        await self._engine.start()

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        return await self._engine.prefill(request)

    async def ready(self) -> bool:
        return True

    async def stats(self) -> EngineStats:
        return self._engine.stats()

    def record_routing_stats(self) -> dict[str, Any]:
        """Ray Serve calls this every request_routing_stats_period_s; the router's request
        router reads the result as this replica's routing stats."""
        return self._engine.routing_stats()

    def __del__(self) -> None:
        # Ray Serve calls __del__ when it stops the replica: stop the engine process with it.
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.shutdown()
