"""The router's in-flight bound (`router.admission.max_inflight_requests`), as ASGI middleware.

Installed once by the app factory, inside the API-key and body-size checks. A completion or
chat request that finds the router full is refused with 429 and a Retry-After before its
body is parsed or its prompt tokenized (at 10x overload most requests are refused: each
refusal must cost next to nothing). An admitted request holds its slot until its response
is over, a stream until its last event. Every answer feeds the `RetryAfterAdvisor`: a 429
(from here or from a replica bound at placement) counts as a refusal, anything else as a
freed slot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pdserve.router.admission import AdmissionRejected, RetryAfterAdvisor, check_inflight
from pdserve.router.arrival import scope_arrival_s
from pdserve.router.observe import Endpoint
from pdserve.router.refusal import RefusalObserver, refuse

GATED_PATHS: dict[str, Endpoint] = {"/v1/completions": "completion", "/v1/chat/completions": "chat"}
"""Paths the bound applies to, with their endpoint label."""


class InflightGate:
    def __init__(
        self,
        app: Any,
        limit: int | None,
        advisor: RetryAfterAdvisor,
        on_refused: Callable[[Endpoint, AdmissionRejected, Any], None],
        below_share: Callable[[Any, int], bool] | None = None,
        observe_refusal: RefusalObserver | None = None,
    ):
        """`on_refused(endpoint, rejection, scope)` is called for each request this gate
        refuses (metrics); `limit` None: no bound, only the advisor's bookkeeping.
        `below_share(scope, limit)`: whether the request's tenant holds no more than its
        weighted share of the bound (router/tenants/limits.py); such a request is admitted
        even when the router is full, so one busy tenant cannot hold every slot. None: the
        bound is first come, first served.
        `observe_refusal(reason, seconds)`: each refusal's time from arrival to its 429's
        response start (router/refusal.py); None: not timed."""
        self._observe_refusal = observe_refusal
        self._below_share = below_share
        self._app = app
        self._limit = limit
        self._advisor = advisor
        self._on_refused = on_refused
        self.inflight = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        endpoint = GATED_PATHS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        try:
            share = self._below_share
            if self._limit is None or share is None or not share(scope, self._limit):
                check_inflight(self.inflight, self._limit)
        except AdmissionRejected as exc:
            self._advisor.refused()
            exc.at_least(self._advisor.retry_after_s())
            self._on_refused(endpoint, exc, scope)
            await refuse(send, exc, scope_arrival_s(scope), self._observe_refusal)
            return
        status = 0

        async def observe(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.inflight += 1
        try:
            await self._app(scope, receive, observe)
        finally:
            self.inflight -= 1
            if status == 429:
                self._advisor.refused()
            else:
                self._advisor.completed()
