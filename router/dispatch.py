"""How the router talks to the pools: the `Dispatcher` seam and its Ray Serve adapter.

The orchestrator (router/orchestrate.py) calls a `Dispatcher` once per request: `prefill()`
(unless the policy chose a local prefill) then `decode()`. Which replica serves each call is
the routing policy's choice, carried in the messages' `target_replica_id` and enforced by
pdserve's Ray Serve request router (router/replica_router.py). Unit tests drive the
orchestrator with a fake `Dispatcher`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from pdserve.messages import (
    DecodeChunk,
    DecodeRequest,
    KVRelease,
    PrefillRequest,
    PrefillResult,
)


class Dispatcher(Protocol):
    """Runs one request's two phases on the pools."""

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        """Prefill on a prefill replica; returns where the KV waits for decode. Cancelling
        the call aborts the engine request."""
        ...

    def decode(self, request: DecodeRequest) -> AsyncGenerator[DecodeChunk, None]:
        """Stream the generation from a decode replica (nothing is sent until the first
        `anext`). Cancelling an `anext`, or closing the stream before its end, aborts the
        engine request."""
        ...

    async def release(self, request: KVRelease) -> None:
        """Have a decode replica free a handoff's KV on its prefill engine (the decode will
        never pull it)."""
        ...

    async def pools_ready(self, timeout_seconds: float) -> dict[str, bool]:
        """Whether each pool the deployment runs ('prefill' and 'decode', or only 'decode'
        when aggregated) has a replica that answers now."""
        ...


class RayServeDispatcher:
    """Dispatch over Ray Serve handles to the PrefillServer and DecodeServer deployments.
    `prefill_handle` None: an aggregated deployment (no prefill pool)."""

    def __init__(self, prefill_handle: Any | None, decode_handle: Any):
        self._prefill = prefill_handle
        self._decode = decode_handle.options(stream=True)
        self._decode_unary = decode_handle

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        if self._prefill is None:
            raise RuntimeError("this deployment is aggregated: it has no prefill pool")
        response = self._prefill.prefill.remote(request)
        try:
            result: PrefillResult = await response
        except asyncio.CancelledError:
            # Awaiting a Serve response does not cancel the replica's work when the awaiting
            # task is cancelled (deadline, client gone): cancel it explicitly.
            response.cancel()
            raise
        return result

    async def decode(self, request: DecodeRequest) -> AsyncGenerator[DecodeChunk, None]:
        response = self._decode.generate.remote(request)
        finished = False
        try:
            async for chunk in response:
                yield chunk
            finished = True
        finally:
            if not finished:  # closed early: cancel the replica's generation too
                response.cancel()

    async def release(self, request: KVRelease) -> None:
        await self._decode_unary.release.remote(request)

    async def pools_ready(self, timeout_seconds: float) -> dict[str, bool]:
        async def ping(handle: Any) -> bool:
            try:
                return bool(await asyncio.wait_for(handle.ready.remote(), timeout_seconds))
            except Exception:  # no replica answered in time, or it is failing
                return False

        if self._prefill is None:
            return {"decode": await ping(self._decode_unary)}
        prefill, decode = await asyncio.gather(ping(self._prefill), ping(self._decode_unary))
        return {"prefill": prefill, "decode": decode}
