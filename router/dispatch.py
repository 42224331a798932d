"""Where a request's prefill and decode run. The seam where a routing policy slots in.

`Dispatcher` is called by the router once per request: `prefill()` then `decode()`.
`RayServeDispatcher` sends both through Ray Serve deployment handles (Ray Serve's own
replica choice for now; a policy-driven request router replaces it later).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

from pdserve.messages import DecodeChunk, DecodeRequest, PrefillRequest, PrefillResult


class Dispatcher(Protocol):
    """Runs one request's two phases. Cancelling either call aborts the engine request."""

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        """Prefill on a prefill replica; returns where the KV waits for decode."""
        ...

    def decode(self, request: DecodeRequest) -> AsyncIterator[DecodeChunk]:
        """Stream the generation from a decode replica."""
        ...

    async def pools_ready(self, timeout_seconds: float) -> dict[str, bool]:
        """Whether each pool ('prefill', 'decode') has a replica that answers now."""
        ...


class RayServeDispatcher:
    """Dispatch over Ray Serve handles to the PrefillServer and DecodeServer deployments."""

    def __init__(self, prefill_handle: Any, decode_handle: Any):
        self._prefill = prefill_handle
        self._decode = decode_handle.options(stream=True)
        self._decode_unary = decode_handle

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        result: PrefillResult = await self._prefill.prefill.remote(request)
        return result

    async def decode(self, request: DecodeRequest) -> AsyncIterator[DecodeChunk]:
        async for chunk in self._decode.generate.remote(request):
            yield chunk

    async def pools_ready(self, timeout_seconds: float) -> dict[str, bool]:
        async def ping(handle: Any) -> bool:
            try:
                return bool(await asyncio.wait_for(handle.ready.remote(), timeout_seconds))
            except Exception:  # no replica answered in time, or it is failing
                return False

        prefill, decode = await asyncio.gather(ping(self._prefill), ping(self._decode_unary))
        return {"prefill": prefill, "decode": decode}
