"""DecodeServer: the decode pool's Ray Serve deployment (one vLLM engine per replica, in the
NixlConnector kv_consumer role).

The router calls `generate()` (streaming) once per request; the engine pulls the prompt's KV
over NIXL from the prefill replica named in the handoff (or prefills locally), then streams
tokens (see stream.py). Cancelling the stream aborts the request in the engine. `release()`
frees a handoff whose decode never reached an engine (the router calls it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar

from pdserve.autoscaling.serve_policy import ITL_S, KV_USAGE
from pdserve.decode_pool.stream import decode_stream
from pdserve.engine.replica import PoolReplica
from pdserve.messages import DecodeChunk, DecodeRequest, KVRelease
from pdserve.names import PoolName


class DecodeServer(PoolReplica):
    """Decode replica."""

    role: ClassVar[PoolName] = "decode"

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Ray Serve calls this every few seconds when the pool autoscales: the signals the
        decode pool's policy (`pdserve.autoscaling.serve_policy.PoolPolicy`) scales on."""
        server = self._server
        if not server.reports_signals:
            return {}
        return {KV_USAGE: server.stats().kv_cache_usage, ITL_S: server.take_itl_s()}

    async def generate(self, request: DecodeRequest) -> AsyncIterator[DecodeChunk]:
        server = self._server
        stream = decode_stream(
            server.engine, request, server.replica_id, server.pending, server.take_kv_verdict
        )
        async for chunk in stream:
            yield chunk

    async def release(self, request: KVRelease) -> None:
        """Free a handoff's KV on its prefill engine now: vLLM submits a pre-aborted request
        whose NIXL connector notifies the prefill engine (as for a rejected transfer)."""
        await self._server.engine.notify_kv_transfer_request_rejected(
            request.request_id, request.handoff.to_decode_params()
        )
