"""When a request arrived: an ASGI middleware stamps it before anything else reads the request.

`build_app` (app.py) installs `ArrivalStampMiddleware` outermost; `CompletionHandler`
(completions.py) reads the stamp with `stamped_arrival_s` as the start of the request's timeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import Request

ARRIVAL_KEY = "pdserve_arrival_s"


class ArrivalStampMiddleware:
    """Stamps each request's arrival (monotonic clock) before its body is read and validated,
    so the timeline's router_queue stage covers parsing too, and calls `on_request` (cheap,
    synchronous) first. Pure ASGI: no per-request task."""

    def __init__(self, app: Any, on_request: Callable[[], None] = lambda: None):
        self._app = app
        self._on_request = on_request

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})[ARRIVAL_KEY] = time.monotonic()
            self._on_request()
        await self._app(scope, receive, send)


def stamped_arrival_s(request: Request) -> float:
    """The request's arrival stamp (monotonic clock; now when it was not stamped)."""
    return float(request.scope.get("state", {}).get(ARRIVAL_KEY, time.monotonic()))


def scope_arrival_s(scope: Any) -> float | None:
    """The arrival stamp of an ASGI `scope` (for middleware inside the stamp); None when it
    was not stamped."""
    stamp = scope.get("state", {}).get(ARRIVAL_KEY)
    return None if stamp is None else float(stamp)
