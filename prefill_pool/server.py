"""PrefillServer: the prefill pool's Ray Serve deployment (one vLLM engine per replica, in
the NixlConnector kv_producer role).

The router calls `prefill()` once per remote-prefill request; the KV stays in this engine
until a decode replica pulls it (see produce.py).
"""

from __future__ import annotations

from typing import ClassVar

from pdserve.autoscaling.serve_policy import QUEUED_PREFILL_S
from pdserve.engine.replica import PoolReplica
from pdserve.messages import PrefillRequest, PrefillResult
from pdserve.names import PoolName
from pdserve.prefill_pool.produce import produce_kv


class PrefillServer(PoolReplica):
    """Prefill replica."""

    role: ClassVar[PoolName] = "prefill"

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Ray Serve calls this every few seconds when the pool autoscales: the signal the
        prefill pool's policy (`pdserve.autoscaling.serve_policy.PoolPolicy`) scales on."""
        if not self._server.reports_signals:
            return {}
        return {QUEUED_PREFILL_S: self._server.queued_prefill_s()}

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        server = self._server
        return await produce_kv(server.engine, request, server.replica_id, server.pending)
