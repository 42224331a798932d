"""A pre-parse refusal: answer 429 straight from ASGI middleware, timed from the request's arrival.

Who calls it: middleware that refuses a request before the app reads its body — the in-flight
bound (inflight.py), and any other front-door limit — once per refused request, in place of
calling the app. Side effects: sends the OpenAI error body with the rejection's headers
(Retry-After and whatever else the rejection carries), and calls `observe(reason, seconds)` once
the response start has been handed to the server (uvicorn writes the status line and headers
then), with the seconds since the arrival stamp (arrival.py). The router exports them as
`pdserve_router_refusal_seconds{reason}`: at 10x overload most requests end here, so this path
must stay cheap, and the histogram shows when it is not (a refusal waits on a busy event loop).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from pdserve.router.admission import AdmissionRejected
from pdserve.router.errors import error_body

RefusalObserver = Callable[[str, float], None]
"""`observe(reason, seconds)`: a refusal's reason (bounded: the rejection's `reason`) and the
seconds from the request's arrival to its 429's response start."""


def refusal_messages(exc: AdmissionRejected) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ASGI `http.response.start` and `http.response.body` messages of `exc`'s answer."""
    body = json.dumps(error_body(exc.status, exc.message, None, exc.code or "")).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.encode(), v.encode()) for k, v in exc.headers.items()),
    ]
    start = {"type": "http.response.start", "status": exc.status, "headers": headers}
    return start, {"type": "http.response.body", "body": body}


async def refuse(
    send: Any,
    exc: AdmissionRejected,
    arrival_s: float | None,
    observe: RefusalObserver | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Answer `exc` (a 429) on `send`. `arrival_s`: the request's arrival stamp on `clock`
    (the monotonic clock, as arrival.py stamps it); None (not stamped) or `observe` None: the
    refusal is answered but not timed."""
    start, body = refusal_messages(exc)
    await send(start)
    if observe is not None and arrival_s is not None:
        observe(exc.reason, max(0.0, clock() - arrival_s))
    await send(body)
