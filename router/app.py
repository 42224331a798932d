"""The router's HTTP surface: OpenAI endpoints, health, readiness, metrics (FastAPI).

`build_app(service, metrics, dispatcher)` returns the ASGI app; the Ray Serve `Router`
deployment (router/deployment.py) builds it once per replica.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, get_args

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from pdserve.router.dispatch import Dispatcher
from pdserve.router.errors import OpenAIError, error_body, install_error_handlers
from pdserve.router.metrics import RouterMetrics
from pdserve.router.openai_models import ChatCompletionRequest, CompletionRequest
from pdserve.router.policy.types import PolicyName
from pdserve.router.responses import Kind, ResponseBuilder
from pdserve.router.service import CompletionService, Generation, PreparedRequest

_DONE = "[DONE]"
POLICY_HEADER = "x-pdserve-policy"
DECISION_HEADER = "x-pdserve-decision"
TIMING_HEADER = "x-pdserve-timing"
REQUEST_ID_HEADER = "x-request-id"
ARRIVAL_KEY = "pdserve_arrival_s"
SERVED_BY_HEADER = "x-pdserve-served-by"
T = TypeVar("T")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def build_app(
    service: CompletionService,
    metrics: RouterMetrics,
    dispatcher: Dispatcher,
    allow_policy_override: bool = False,
) -> FastAPI:
    """The router's FastAPI app. `allow_policy_override` enables the x-pdserve-policy header
    (local and benchmark deployments)."""
    app = FastAPI(title="pdserve", description="Disaggregated prefill/decode LLM serving")
    install_error_handlers(app)
    app.add_middleware(ArrivalStampMiddleware)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        pools = service.pools_ready()
        if pools is None:  # the replica view is not attached yet: ask the pools directly
            pools = await dispatcher.pools_ready(timeout_seconds=5.0)
        ok = all(pools.values())
        return JSONResponse({"ready": ok, "pools": pools}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        service.update_pool_gauges()
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/pdserve/replicas")
    async def replicas() -> dict[str, Any]:
        return service.replicas()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": service.model_id, "object": "model", "created": 0, "owned_by": "pdserve"}
            ],
        }

    def policy_of(request: Request) -> PolicyName | None:
        name = request.headers.get(POLICY_HEADER)
        if name is None:
            return None
        if not allow_policy_override:
            raise OpenAIError(
                400,
                f"the {POLICY_HEADER} header is disabled on this deployment "
                "(router.allow_policy_override: false)",
                param=POLICY_HEADER,
            )
        if name not in get_args(PolicyName):
            raise OpenAIError(
                400,
                f"unknown routing policy {name!r}; use one of {', '.join(get_args(PolicyName))}",
                param=POLICY_HEADER,
            )
        return name  # type: ignore[return-value]

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        arrival = _arrival(request)
        rid = _request_id(request)
        prepared = _guard(metrics, "chat", lambda: service.prepare_chat(body, rid))
        policy = _guard(metrics, "chat", lambda: policy_of(request))
        return await _serve(
            service, metrics, "chat", prepared, policy, body.stream, _include_usage(body), arrival
        )

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        arrival = _arrival(request)
        rid = _request_id(request)
        prepared = _guard(metrics, "completion", lambda: service.prepare_completion(body, rid))
        policy = _guard(metrics, "completion", lambda: policy_of(request))
        return await _serve(
            service,
            metrics,
            "completion",
            prepared,
            policy,
            body.stream,
            _include_usage(body),
            arrival,
        )

    return app


class ArrivalStampMiddleware:
    """Stamps each request's arrival (monotonic clock) before its body is read and validated,
    so the timeline's router_queue stage covers parsing too. Pure ASGI: no per-request task."""

    def __init__(self, app: Any):
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})[ARRIVAL_KEY] = time.monotonic()
        await self._app(scope, receive, send)


def _arrival(request: Request) -> float:
    return float(request.scope.get("state", {}).get(ARRIVAL_KEY, time.monotonic()))


def _request_id(request: Request) -> str:
    """The client's x-request-id when it sent a usable one, else a new id."""
    rid = request.headers.get(REQUEST_ID_HEADER, "")
    if rid and len(rid) <= 128 and rid.isprintable():
        return rid
    return uuid.uuid4().hex


def _include_usage(body: ChatCompletionRequest | CompletionRequest) -> bool:
    return bool(body.stream and body.stream_options and body.stream_options.include_usage)


def _guard(metrics: RouterMetrics, endpoint: str, step: Callable[[], T]) -> T:
    """Run a validation step, counting its rejection."""
    try:
        return step()
    except OpenAIError as exc:
        metrics.requests.labels(endpoint, "none", str(exc.status)).inc()
        raise


def _served_by(generation: Generation) -> str:
    """Which replicas really served the request (compare with x-pdserve-decision)."""
    t = generation.timeline
    return _dumps({"prefill": t.prefill_replica_id or None, "decode": t.decode_replica_id})


def _decision_header(generation: Generation) -> dict[str, str]:
    d = generation.decision
    if d is None:
        return {}
    info = {
        "policy": d.policy,
        "prefill": d.prefill_replica_id,
        "decode": d.decode_replica_id,
        "priority": d.engine_priority,
        "est_prefill_s": round(d.est_prefill_s, 4),
        "cached_tokens": d.num_cached_tokens,
        "reason": d.reason,
    }
    return {DECISION_HEADER: _dumps(info)}


async def _serve(
    service: CompletionService,
    metrics: RouterMetrics,
    kind: Kind,
    prepared: PreparedRequest,
    policy: PolicyName | None,
    stream: bool,
    include_usage: bool,
    arrival_s: float,
) -> Response:
    created = int(time.time())
    try:
        generation = await service.generate(prepared, policy, arrival_s)
    except OpenAIError as exc:
        metrics.requests.labels(kind, "none", str(exc.status)).inc()
        raise
    except Exception:
        metrics.requests.labels(kind, "none", "500").inc()
        raise
    decision = generation.decision_label
    # Ray Serve's proxy already returns x-request-id (the client's, or one it made and put in
    # the request headers, which `_request_id` reads): the same id as the timeline's.
    headers = _decision_header(generation)
    builder = ResponseBuilder(
        kind=kind,
        request_id=prepared.request_id,
        model=service.model_id,
        created=created,
        num_prompt_tokens=generation.num_prompt_tokens,
        num_cached_tokens=generation.num_cached_tokens,
    )
    if not stream:
        try:
            async for chunk in generation.chunks:
                builder.add(chunk)
        except Exception:
            metrics.requests.labels(kind, decision, "500").inc()
            raise
        metrics.requests.labels(kind, decision, "200").inc()
        headers[TIMING_HEADER] = _dumps(generation.timeline.stages())
        headers[SERVED_BY_HEADER] = _served_by(generation)
        return JSONResponse(builder.body(), headers=headers)

    # Wait for the first token before answering, so the timing header can carry the TTFT
    # breakdown and a failure before the first token is a proper HTTP error.
    chunks = generation.chunks.__aiter__()
    try:
        first = await anext(chunks)
    except StopAsyncIteration:
        first = None
    except Exception:
        metrics.requests.labels(kind, decision, "500").inc()
        raise
    headers[TIMING_HEADER] = _dumps(generation.timeline.stages())
    headers[SERVED_BY_HEADER] = _served_by(generation)

    async def events() -> AsyncIterator[str]:
        status = "200"
        try:
            if kind == "chat":
                yield _dumps(builder.first_chat_chunk())
            if first is not None:
                builder.add(first)
                yield _dumps(builder.stream_chunk(first))
            async for chunk in chunks:
                builder.add(chunk)
                yield _dumps(builder.stream_chunk(chunk))
            if include_usage:
                final = builder.usage_chunk()
                final["pdserve_timing"] = generation.timeline.stages()
                yield _dumps(final)
            yield _DONE
        except asyncio.CancelledError:
            status = "499"  # the client went away; cancellation aborts both engines
            raise
        except OpenAIError as exc:
            status = str(exc.status)
            yield _dumps(error_body(exc.status, exc.message, exc.param, exc.code))
        except Exception as exc:
            status = "500"
            yield _dumps(error_body(500, f"generation failed: {exc}"))
        finally:
            metrics.requests.labels(kind, decision, status).inc()

    return EventSourceResponse(events(), ping=3600, sep="\n", headers=headers)
