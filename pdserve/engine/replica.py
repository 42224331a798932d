"""The Ray Serve deployment base shared by both pools: one replica owns one vLLM engine.

`PrefillServer` (pdserve.prefill_pool) and `DecodeServer` (pdserve.decode_pool) subclass it
and add their role's request method. Ray Serve constructs one instance per replica; the async
constructor returns once the engine can serve (30-60 s on CPU), so Serve marks the replica
ready only then. Ray Serve calls `record_routing_stats` every
`router.routing_stats_period_seconds`; the router's request router reads the result.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pdserve.config import PdserveConfig
from pdserve.engine.server import EngineServer
from pdserve.messages import EngineStats
from pdserve.model_source import resolve_model
from pdserve.names import PoolName
from pdserve.serve_logs import log_to_serve


def _replica_identity() -> tuple[str, int]:
    """(this replica's unique id, its rank among the deployment's replicas on this node)."""
    from ray import serve

    ctx = serve.get_replica_context()
    return str(ctx.replica_id.unique_id), int(ctx.rank.local_rank)


class PoolReplica:
    """A pool replica: engine lifecycle, readiness, stats. Subclasses set `role`."""

    role: ClassVar[PoolName]

    async def __init__(self, config: dict[str, Any]) -> None:  # type: ignore[misc]
        log_to_serve()
        self._config = PdserveConfig.model_validate(config)
        replica_id, local_rank = _replica_identity()
        self._server = EngineServer(
            self._config, self.role, resolve_model(self._config.model), replica_id, local_rank
        )
        await self._server.start()

    async def ready(self) -> bool:
        """Answers once the replica serves (the router's /ready pings this)."""
        return True

    async def check_health(self) -> None:
        """Ray Serve calls this every health_check_period_s; raising makes Serve replace the
        replica. Raises once the engine's process is gone (killed, crashed)."""
        await self._server.check_health()

    async def stats(self) -> EngineStats:
        """The engine's counters (tests and operators read them through a handle)."""
        return self._server.stats()

    def record_routing_stats(self) -> dict[str, Any]:
        """Load, KV block size and KV-event endpoint for the router's replica view."""
        return self._server.routing_stats()

    def __del__(self) -> None:
        # Ray Serve calls __del__ when it stops the replica: stop the engine process with it.
        server = getattr(self, "_server", None)
        if server is not None:
            server.shutdown()
