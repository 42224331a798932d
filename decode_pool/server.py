"""DecodeServer: a Ray Serve replica that owns one vLLM engine in the kv_consumer role.

Ray Serve builds one per replica. The router calls `generate()` (streaming) once per request;
the engine pulls the prompt's KV over NIXL from the prefill replica named in the handoff, then
streams tokens. Cancelling the stream aborts the request in the engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pdserve.config import PdserveConfig
from pdserve.engine.server import EngineServer
from pdserve.engine.stats import EngineStats
from pdserve.messages import DecodeChunk, DecodeRequest
from pdserve.model_source import resolve_model
from pdserve.prefill_pool.server import _replica_id


class DecodeServer:
    """Decode replica."""

    async def __init__(self, config: dict[str, Any]):
        self._config = PdserveConfig.model_validate(config)
        self._engine = EngineServer(
            self._config, "decode", resolve_model(self._config.model), _replica_id()
        )
        await self._engine.start()

    async def generate(self, request: DecodeRequest) -> AsyncIterator[DecodeChunk]:
        async for chunk in self._engine.decode(request):
            yield chunk

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
