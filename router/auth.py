"""The front door: which tenant sends a request, and its limits, before the body is read.

`TenantMiddleware` (pure ASGI, installed by the app factory inside the arrival stamp) looks up
the Authorization header's key in the `TenantDirectory` (router/tenants/directory.py): routes
under /v1/ (and /metrics when `protect_metrics`) need `Authorization: Bearer <key>` when any
key is configured (401 otherwise; /health and /ready never do). The tenant goes into the
request's scope state (`tenant_of`). For completions and chats it then takes one request and a
concurrency slot from the tenant's limits (`TenantLimiter.admit`: 429 with Retry-After, timed
like every pre-parse refusal: router/refusal.py), adds `x-pdserve-tenant` and OpenAI's
`x-ratelimit-*` headers to whatever the response is, and frees the slot when the response is
over. Keys never appear in logs, metrics or error bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Request

from pdserve.router.admission import AdmissionRejected
from pdserve.router.arrival import scope_arrival_s
from pdserve.router.errors import send_error
from pdserve.router.headers import TENANT_HEADER
from pdserve.router.refusal import RefusalObserver, refuse
from pdserve.router.tenants.directory import AuthConfigError, Tenant, TenantDirectory
from pdserve.router.tenants.limits import TenantLimiter

__all__ = ["CLIENT_KEY_ENV", "AuthConfigError", "TenantMiddleware", "client_headers", "tenant_of"]

CLIENT_KEY_ENV = "PDSERVE_API_KEY"
"""Where pdserve's own clients (`pdserve bench`, `profile`, `top`) find the key to send."""

TENANT_STATE = "pdserve_tenant"
"""Scope state key of the request's `Tenant`."""

LIMITED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
"""Paths a tenant's request limits apply to (POST)."""


def client_headers(environ: Mapping[str, str]) -> dict[str, str]:
    """The Authorization header pdserve's own clients send: the first key in
    PDSERVE_API_KEY (the router's default key variable), or none when it is unset."""
    keys = [k.strip() for k in environ.get(CLIENT_KEY_ENV, "").split(",") if k.strip()]
    return {"authorization": f"Bearer {keys[0]}"} if keys else {}


def tenant_of(request: Request) -> Tenant | None:
    """The tenant the front door found for this request (None: not behind it, e.g. tests)."""
    tenant = request.scope.get("state", {}).get(TENANT_STATE)
    return tenant if isinstance(tenant, Tenant) else None


class TenantMiddleware:
    """401 for a missing or unknown key; 429 for a tenant over its request limits."""

    def __init__(
        self,
        app: Any,
        directory: TenantDirectory,
        limiter: TenantLimiter,
        on_refused: Callable[[str, Tenant, AdmissionRejected], None],
        observe_refusal: RefusalObserver | None = None,
    ):
        """`on_refused(path, tenant, rejection)` is called for each 429 sent here (metrics);
        `observe_refusal` times each such refusal from arrival (router/refusal.py)."""
        self._app = app
        self._directory = directory
        self._limiter = limiter
        self._on_refused = on_refused
        self._observe_refusal = observe_refusal

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        header = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        path = scope["path"]
        tenant = self._directory.resolve(header)
        if tenant is None:
            if self._directory.guards(path):
                await self._unauthorized(send, header is None)
                return
            tenant = self._directory.default  # an open route, an unknown caller
        scope.setdefault("state", {})[TENANT_STATE] = tenant
        if path not in LIMITED_PATHS or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        limiter = self._limiter
        name = (TENANT_HEADER.encode(), tenant.name.encode())

        async def with_tenant_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                extra = [name, *limiter.headers(tenant)]
                message = {**message, "headers": [*message["headers"], *extra]}
            await send(message)

        try:
            limiter.admit(tenant)
        except AdmissionRejected as exc:
            self._on_refused(path, tenant, exc)
            arrival = scope_arrival_s(scope)
            await refuse(with_tenant_headers, exc, arrival, self._observe_refusal)
            return
        try:
            await self._app(scope, receive, with_tenant_headers)
        finally:
            limiter.release(tenant)

    @staticmethod
    async def _unauthorized(send: Any, missing: bool) -> None:
        message = (
            "Missing API key: send 'Authorization: Bearer <key>'."
            if missing
            else "Invalid API key, or a malformed Authorization header (expected 'Bearer <key>')."
        )
        await send_error(send, 401, message, "invalid_api_key", ((b"www-authenticate", b"Bearer"),))
