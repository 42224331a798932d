"""The router's HTTP surface (FastAPI): the routes, the middleware stack and the app's
lifespan, a thin adapter over preparing, orchestrating and observing requests.

`build_app(...)` returns the ASGI app; the Ray Serve `Router` deployment (router/deployment.py)
builds it once per replica. Per request: `RequestPreparer` validates and tokenizes,
`Orchestrator` runs placement → prefill → decode, `RouterObserver` counts and times it;
`CompletionHandler` (completions.py) turns their results into OpenAI JSON bodies, SSE streams
and headers. Middleware, outermost first: arrival stamp (arrival.py) → API key 401 and the
tenant's request limits 429 (auth.py) →
body size 413 (body_limit.py) → in-flight bound 429 (inflight.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from pdserve.router.admission import AdmissionRejected, RetryAfterAdvisor
from pdserve.router.arrival import ArrivalStampMiddleware
from pdserve.router.auth import TENANT_STATE, TenantMiddleware, tenant_of
from pdserve.router.body_limit import BodyLimitMiddleware
from pdserve.router.completions import CompletionHandler
from pdserve.router.errors import install_error_handlers
from pdserve.router.headers import CONVERSATION_HEADER
from pdserve.router.inflight import GATED_PATHS, InflightGate
from pdserve.router.loop_lag import LoopLagSampler, LoopLagTask
from pdserve.router.observe import Endpoint, RouterObserver
from pdserve.router.openai_models import ChatCompletionRequest, CompletionRequest
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.prepare import RequestPreparer
from pdserve.router.replica_metrics import ReplicaMetricsAddress, ReplicaMetricsServer
from pdserve.router.status import ClusterStatus
from pdserve.router.tenants.directory import Tenant, TenantDirectory
from pdserve.router.tenants.limits import TenantLimiter


def build_app(
    preparer: RequestPreparer,
    orchestrator: Orchestrator,
    observer: RouterObserver,
    status: ClusterStatus,
    *,
    tenants: TenantDirectory | None = None,
    limiter: TenantLimiter | None = None,
    max_request_bytes: int = 8 << 20,
    sse_keepalive_s: float = 15.0,
    max_inflight_requests: int | None = None,
    allow_policy_override: bool = False,
    report_prompt_cost: bool = True,
    replica_metrics: ReplicaMetricsAddress | None = None,
) -> FastAPI:
    """The router's FastAPI app. `tenants` None or without keys: the API is open (one default
    tenant). `limiter`: the tenants' limits (None: a fresh one on the monotonic clock).
    `allow_policy_override` enables the x-pdserve-policy header (local and benchmark
    deployments). `report_prompt_cost`: send the x-pdserve-prompt-cost header and the
    `pdserve_prompt_cost` usage field (router.prompt_cost.enabled). From the first request to
    shutdown a `LoopLagSampler` records the event loop's lag in
    `pdserve_router_event_loop_lag_seconds`. `replica_metrics`: where this replica also serves
    its own /metrics (router/replica_metrics.py), started with the app; None = only on the
    app's /metrics."""

    loop_lag = LoopLagTask(LoopLagSampler(observer.metrics.event_loop_lag.observe))
    keys = tenants or TenantDirectory({})
    limits = limiter or TenantLimiter(time.monotonic)

    async def render_metrics() -> bytes:
        observer.update_pool_gauges()
        for tenant in keys.tenants:
            observer.metrics.tenant_inflight.labels(tenant.name).set(limits.inflight(tenant))
        observer.update_conversation_gauges(preparer.conversations)
        if status.scaling is not None:
            observer.update_scaling(await status.scaling.current())
        return observer.metrics.render()

    metrics_server = (
        None
        if replica_metrics is None
        else ReplicaMetricsServer(
            replica_metrics.host,
            replica_metrics.ports,
            render_metrics,
            lambda authorization: not keys.guards("/metrics") or keys.accepts(authorization),
        )
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if metrics_server is not None:
            await metrics_server.start()
        try:
            yield
        finally:
            await loop_lag.stop()
            if metrics_server is not None:
                await metrics_server.close()

    app = FastAPI(
        title="pdserve", description="Disaggregated prefill/decode LLM serving", lifespan=lifespan
    )
    install_error_handlers(app)
    retry_advisor = RetryAfterAdvisor(time.monotonic)

    def gate_refused(endpoint: Endpoint, exc: AdmissionRejected, scope: Any = None) -> None:
        observer.not_admitted(exc.reason)
        observer.rejected(endpoint, exc.status)
        tenant = (scope or {}).get("state", {}).get(TENANT_STATE)
        if isinstance(tenant, Tenant):
            observer.tenant_rejected(tenant.name, exc.reason)
            observer.metrics.tenant_requests.labels(tenant.name, str(exc.status)).inc()

    def tenant_refused(path: str, tenant: Tenant, exc: AdmissionRejected) -> None:
        observer.tenant_rejected(tenant.name, exc.reason)
        observer.not_admitted(exc.reason)
        observer.rejected(GATED_PATHS[path], exc.status, tenant.name)

    def observe_refusal(reason: str, seconds: float) -> None:
        observer.metrics.refusal_seconds.labels(reason).observe(seconds)

    def below_share(scope: Any, slots: int) -> bool:
        tenant = scope.get("state", {}).get(TENANT_STATE)
        return isinstance(tenant, Tenant) and limits.within_share(tenant, slots)

    # Outermost last: stamp the arrival, check the key, bound the body, bound the in-flight.
    app.add_middleware(
        InflightGate,
        limit=max_inflight_requests,
        advisor=retry_advisor,
        on_refused=gate_refused,
        below_share=below_share if keys.enabled else None,
        observe_refusal=observe_refusal,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_request_bytes)
    app.add_middleware(
        TenantMiddleware,
        directory=keys,
        limiter=limits,
        on_refused=tenant_refused,
        observe_refusal=observe_refusal,
    )
    app.add_middleware(ArrivalStampMiddleware, on_request=loop_lag.start)
    completions = CompletionHandler(
        preparer,
        orchestrator,
        observer,
        allow_policy_override,
        sse_keepalive_s,
        retry_advisor,
        report_prompt_cost=report_prompt_cost,
        limiter=limits,
    )

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        ok, body = await status.readiness()
        return JSONResponse({"ready": ok, **body}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        body = await render_metrics()
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/pdserve/replicas")
    async def replicas() -> dict[str, Any]:
        doc = await status.replicas()
        if replica_metrics is not None and metrics_server is not None:
            # Where every router replica's own /metrics may be (pdserve top scrapes them all).
            doc["router"] = {
                "metrics_ports": [replica_metrics.ports.start, replica_metrics.ports.stop - 1],
                "answering_replica_metrics_port": metrics_server.port,
            }
        return doc

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        model = {"id": preparer.model_id, "object": "model", "created": 0, "owned_by": "pdserve"}
        return {"object": "list", "data": [model]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        conversation, caller = _conversation_of(request)
        return await completions.handle(
            "chat",
            request,
            lambda rid: preparer.prepare_chat(body, rid, conversation, caller),
            tenant_of(request) or keys.default,
        )

    @app.post("/v1/completions")
    async def completion(body: CompletionRequest, request: Request) -> Response:
        conversation, caller = _conversation_of(request)
        return await completions.handle(
            "completion",
            request,
            lambda rid: preparer.prepare_completion(body, rid, conversation, caller),
            tenant_of(request) or keys.default,
        )

    return app


def _conversation_of(request: Request) -> tuple[str | None, str]:
    """The x-pdserve-conversation header (None: not sent) and the caller's credentials (the
    Authorization header; empty on an open API), which scope conversations per API key."""
    return request.headers.get(CONVERSATION_HEADER), request.headers.get("authorization", "")
