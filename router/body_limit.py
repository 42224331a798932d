"""Request body size limit (`router.max_request_bytes`): 413 before anything is parsed.

Pure ASGI middleware, installed once by the app factory. A body with a `content-length` over
the limit is refused without parsing it: up to `DRAIN_FACTOR` times the limit it is read and
dropped first (so the client, still sending, gets the 413 instead of a reset connection),
beyond that the 413 goes out at once and the connection closes. A chunked body is read up to
the limit and replayed to the app; one byte more and it is refused.
"""

from __future__ import annotations

from typing import Any

from pdserve.router.errors import send_error

DRAIN_FACTOR = 4
"""Oversized bodies up to this many times the limit are drained before the 413."""


class BodyLimitMiddleware:
    def __init__(self, app: Any, max_bytes: int):
        self._app = app
        self._max = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
                break
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = 0  # the HTTP server rejects a malformed length itself
            if size > self._max:
                if size <= DRAIN_FACTOR * self._max:
                    await _drain(receive)
                await self._refuse(send, size)
                return
            await self._app(scope, receive, send)
            return
        # No declared length (chunked): buffer up to the limit, then replay.
        messages: list[Any] = []
        total = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            total += len(message.get("body", b""))
            if total > self._max:
                await self._refuse(send, None)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Any:
            if messages:
                return messages.pop(0)
            return await receive()

        await self._app(scope, replay, send)

    async def _refuse(self, send: Any, size: int | None) -> None:
        what = f"{size} bytes" if size is not None else "more than that"
        await send_error(
            send,
            413,
            f"The request body is too large: at most {self._max} bytes are accepted, this "
            f"one has {what} (router.max_request_bytes).",
            "request_too_large",
            ((b"connection", b"close"),),
        )


async def _drain(receive: Any) -> None:
    """Read and drop the rest of the request body."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
