"""The router's HTTP surface (FastAPI): a thin adapter over preparing, orchestrating and
observing requests.

`build_app(...)` returns the ASGI app; the Ray Serve `Router` deployment (router/deployment.py)
builds it once per replica. Per request: `RequestPreparer` validates and tokenizes,
`Orchestrator` runs placement → prefill → decode, `RouterObserver` counts and times it; this
module only turns their results into OpenAI JSON bodies, SSE streams and headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, get_args

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from pdserve.messages import DecodeChunk
from pdserve.names import PolicyName
from pdserve.router.admission import AdmissionRejected, RetryAfterAdvisor
from pdserve.router.auth import ApiKeyMiddleware, ApiKeys
from pdserve.router.body_limit import BodyLimitMiddleware
from pdserve.router.errors import (
    FAILURE_STATE,
    REQUEST_ID_STATE,
    OpenAIError,
    error_body,
    install_error_handlers,
    server_error_body,
    server_error_status,
)
from pdserve.router.headers import (
    CONVERSATION_HEADER,
    DECISION_HEADER,
    POLICY_HEADER,
    PROMPT_COST_HEADER,
    REQUEST_ID_HEADER,
    SERVED_BY_HEADER,
    TIMING_HEADER,
)
from pdserve.router.inflight import InflightGate
from pdserve.router.loop_lag import LoopLagSampler, LoopLagTask
from pdserve.router.observe import Endpoint, RequestObservation, RouterObserver
from pdserve.router.openai_models import ChatCompletionRequest, CompletionRequest
from pdserve.router.orchestrate import Generation, Orchestrator
from pdserve.router.prepare import PreparedRequest, RequestPreparer
from pdserve.router.responses import ResponseBuilder
from pdserve.router.status import ClusterStatus

_DONE = "[DONE]"
ARRIVAL_KEY = "pdserve_arrival_s"
INLINE_PREPARE_MAX_BYTES = 16 << 10
"""Request bodies up to this size are validated and tokenized on the event loop (cheaper
than a thread hop); larger ones in the tokenizer thread."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def build_app(
    preparer: RequestPreparer,
    orchestrator: Orchestrator,
    observer: RouterObserver,
    status: ClusterStatus,
    *,
    api_keys: ApiKeys | None = None,
    max_request_bytes: int = 8 << 20,
    sse_keepalive_s: float = 15.0,
    max_inflight_requests: int | None = None,
    allow_policy_override: bool = False,
    report_prompt_cost: bool = True,
) -> FastAPI:
    """The router's FastAPI app. `api_keys` None or empty: the API is open.
    `allow_policy_override` enables the x-pdserve-policy header (local and benchmark
    deployments). `report_prompt_cost`: send the x-pdserve-prompt-cost header and the
    `pdserve_prompt_cost` usage field (router.prompt_cost.enabled). From the first request to
    shutdown a `LoopLagSampler` records the event loop's lag in
    `pdserve_router_event_loop_lag_seconds`."""

    loop_lag = LoopLagTask(LoopLagSampler(observer.metrics.event_loop_lag.observe))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await loop_lag.stop()

    app = FastAPI(
        title="pdserve", description="Disaggregated prefill/decode LLM serving", lifespan=lifespan
    )
    install_error_handlers(app)
    retry_advisor = RetryAfterAdvisor(time.monotonic)

    def gate_refused(endpoint: Endpoint, exc: AdmissionRejected) -> None:
        observer.not_admitted(exc.reason)
        observer.rejected(endpoint, exc.status)

    # Outermost last: stamp the arrival, check the key, bound the body, bound the in-flight.
    app.add_middleware(
        InflightGate, limit=max_inflight_requests, advisor=retry_advisor, on_refused=gate_refused
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_request_bytes)
    app.add_middleware(ApiKeyMiddleware, keys=api_keys or ApiKeys(frozenset()))
    app.add_middleware(ArrivalStampMiddleware, on_request=loop_lag.start)
    completions = CompletionHandler(
        preparer,
        orchestrator,
        observer,
        allow_policy_override,
        sse_keepalive_s,
        retry_advisor,
        report_prompt_cost=report_prompt_cost,
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
        observer.update_pool_gauges()
        observer.update_conversation_gauges(preparer.conversations)
        if status.scaling is not None:
            observer.update_scaling(await status.scaling.current())
        body = observer.metrics.render()
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/pdserve/replicas")
    async def replicas() -> dict[str, Any]:
        return await status.replicas()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        model = {"id": preparer.model_id, "object": "model", "created": 0, "owned_by": "pdserve"}
        return {"object": "list", "data": [model]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        conversation, caller = _conversation_of(request)
        return await completions.handle(
            "chat", request, lambda rid: preparer.prepare_chat(body, rid, conversation, caller)
        )

    @app.post("/v1/completions")
    async def completion(body: CompletionRequest, request: Request) -> Response:
        conversation, caller = _conversation_of(request)
        return await completions.handle(
            "completion",
            request,
            lambda rid: preparer.prepare_completion(body, rid, conversation, caller),
        )

    return app


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


class CompletionHandler:
    """Serves chat and completion requests: prepare → orchestrate → JSON or SSE response.
    Every accepted request's observation is ended exactly once with its HTTP status."""

    def __init__(
        self,
        preparer: RequestPreparer,
        orchestrator: Orchestrator,
        observer: RouterObserver,
        allow_policy_override: bool,
        sse_keepalive_s: float = 15.0,
        retry_advisor: RetryAfterAdvisor | None = None,
        *,
        report_prompt_cost: bool = True,
    ):
        self._preparer = preparer
        self._report_prompt_cost = report_prompt_cost
        self._retry_advisor = retry_advisor or RetryAfterAdvisor(time.monotonic)
        self._sse_keepalive_s = sse_keepalive_s
        self._orchestrator = orchestrator
        self._observer = observer
        self._allow_policy_override = allow_policy_override
        # One thread: big prompts tokenize one at a time, off the loop; small ones inline.
        self._prepare_pool = ThreadPoolExecutor(1, thread_name_prefix="pdserve-tokenize")

    async def handle(
        self, endpoint: Endpoint, request: Request, prepare: Callable[[str], PreparedRequest]
    ) -> Response:
        arrival_s = _arrival(request)
        rid = _request_id(request)
        setattr(request.state, REQUEST_ID_STATE, rid)  # for 5xx bodies
        try:
            return await self._serve(endpoint, request, prepare, rid, arrival_s)
        except AdmissionRejected as exc:  # a chosen replica is past its bound
            exc.at_least(self._retry_advisor.retry_after_s())
            raise

    async def _serve(
        self,
        endpoint: Endpoint,
        request: Request,
        prepare: Callable[[str], PreparedRequest],
        rid: str,
        arrival_s: float,
    ) -> Response:
        try:
            if _content_length(request) > INLINE_PREPARE_MAX_BYTES:
                # Tokenizing a big prompt takes milliseconds to seconds: not on the event
                # loop, where it would stall every other stream.
                loop = asyncio.get_running_loop()
                prepared = await loop.run_in_executor(self._prepare_pool, prepare, rid)
            else:
                prepared = prepare(rid)
            policy = self._policy_of(request)
        except OpenAIError as exc:
            self._observer.rejected(endpoint, exc.status)
            raise
        obs = self._observer.start(
            endpoint,
            prepared.request_id,
            prepared.engine_request_id,
            arrival_s,
            prepared.layout,
            prepared.cache_break,
        )
        created = int(time.time())
        with _ends(obs, request):
            generation = await self._orchestrator.run(prepared, obs, policy)
        builder = ResponseBuilder(
            kind=endpoint,
            request_id=prepared.request_id,
            model=self._preparer.model_id,
            created=created,
            num_prompt_tokens=generation.num_prompt_tokens,
        )
        if not prepared.stream:
            with _ends(obs, request):
                async for chunk in generation.chunks:
                    builder.add(chunk)
            builder.num_cached_tokens = obs.num_cached_tokens
            builder.prompt_cost = self._prompt_cost(obs)
            obs.ended(200)
            return JSONResponse(builder.body(), headers=self._headers(obs))
        # Wait for the first token before answering, so the timing header can carry the TTFT
        # breakdown and a failure before the first token is a proper HTTP error.
        with _ends(obs, request):
            first = await anext(generation.chunks, None)
        builder.prompt_cost = self._prompt_cost(obs)
        events = _events(obs, builder, generation, first, prepared.include_usage)

        async def stream_over() -> None:
            # Also when the events generator never ran (client gone at once): close the
            # decode stream (aborts the engine request) and end the observation.
            await generation.chunks.aclose()
            obs.ended(499)

        return _StreamResponse(
            events,
            ping=self._sse_keepalive_s,
            sep="\n",
            headers=self._headers(obs),
            on_end=stream_over,
        )

    def _prompt_cost(self, obs: RequestObservation) -> dict[str, Any] | None:
        """The usage field's prompt cost (None: not reported, or no first token yet)."""
        if not self._report_prompt_cost or obs.prompt_cost is None:
            return None
        return obs.prompt_cost.usage_json()

    def _headers(self, obs: RequestObservation) -> dict[str, str]:
        headers = _headers(obs)
        if self._report_prompt_cost and obs.prompt_cost is not None:
            headers[PROMPT_COST_HEADER] = _dumps(obs.prompt_cost.header_json())
        return headers

    def _policy_of(self, request: Request) -> PolicyName | None:
        name = request.headers.get(POLICY_HEADER)
        if name is None:
            return None
        if not self._allow_policy_override:
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


class _StreamResponse(EventSourceResponse):
    """An SSE response that runs `on_end` once it is over, however it ended (done, failed,
    cancelled, or never iterated)."""

    def __init__(self, *args: Any, on_end: Callable[[], Awaitable[None]], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._on_end = on_end

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_end()


@contextlib.contextmanager
def _ends(obs: RequestObservation, request: Request) -> Iterator[None]:
    """If the block fails, end the observation with the failure's status (the OpenAIError's;
    499 when cancelled because the client went away; else 502 when a pool replica failed it,
    500 otherwise, noting where it failed for the error body) and re-raise."""
    try:
        yield
    except OpenAIError as exc:
        obs.ended(exc.status)
        raise
    except asyncio.CancelledError:
        obs.ended(499)
        raise
    except Exception:
        setattr(request.state, FAILURE_STATE, obs.failure_point)
        obs.ended(server_error_status(obs.failure_point))
        raise


async def _events(
    obs: RequestObservation,
    builder: ResponseBuilder,
    generation: Generation,
    first: DecodeChunk | None,
    include_usage: bool,
) -> AsyncIterator[str]:
    """The SSE payloads of a streamed response (sse-starlette adds the framing)."""
    chunks: AsyncGenerator[DecodeChunk, None] = generation.chunks
    status = 500
    try:
        if builder.kind == "chat":
            yield _dumps(builder.first_chat_chunk())
        if first is not None:
            builder.add(first)
            yield _dumps(builder.stream_chunk(first))
            async for chunk in chunks:
                builder.add(chunk)
                yield _dumps(builder.stream_chunk(chunk))
        if include_usage:
            builder.num_cached_tokens = obs.num_cached_tokens
            final = builder.usage_chunk()
            final["pdserve_timing"] = obs.timeline.stages()
            yield _dumps(final)
        yield _DONE
        status = 200
    except (asyncio.CancelledError, GeneratorExit):
        status = 499  # the client went away; closing the stream aborts the decode request
        raise
    except OpenAIError as exc:
        status = exc.status
        yield _dumps(error_body(exc.status, exc.message, exc.param, exc.code))
    except Exception:
        # Logged with its traceback where it happened (RequestObservation.failed).
        status = server_error_status(obs.failure_point)
        yield _dumps(server_error_body(obs.request_id, obs.failure_point))
    finally:
        await chunks.aclose()
        obs.ended(status)


def _conversation_of(request: Request) -> tuple[str | None, str]:
    """The x-pdserve-conversation header (None: not sent) and the caller's credentials (the
    Authorization header; empty on an open API), which scope conversations per API key."""
    return request.headers.get(CONVERSATION_HEADER), request.headers.get("authorization", "")


def _content_length(request: Request) -> int:
    try:
        return int(request.headers.get("content-length", "0"))
    except ValueError:
        return 0


def _arrival(request: Request) -> float:
    return float(request.scope.get("state", {}).get(ARRIVAL_KEY, time.monotonic()))


def _request_id(request: Request) -> str:
    """The client's x-request-id when it sent a usable one, else a new id."""
    rid = request.headers.get(REQUEST_ID_HEADER, "")
    if rid and len(rid) <= 128 and rid.isprintable():
        return rid
    return uuid.uuid4().hex


def _headers(obs: RequestObservation) -> dict[str, str]:
    """x-pdserve-decision (when the policy placed it), x-pdserve-timing (the stages so far)
    and x-pdserve-served-by (the replicas that really served it, from their replies).
    Ray Serve's proxy already returns x-request-id: the same id as the timeline's."""
    t = obs.timeline
    headers = {
        TIMING_HEADER: _dumps(t.stages()),
        SERVED_BY_HEADER: _dumps(
            {"prefill": t.prefill_replica_id or None, "decode": t.decode_replica_id}
        ),
    }
    d = obs.decision
    if d is not None:
        headers[DECISION_HEADER] = _dumps(
            {
                "policy": d.policy,
                "prefill": d.prefill_replica_id,
                "decode": d.decode_replica_id,
                "priority": d.engine_priority,
                "est_prefill_s": round(d.est_prefill_s, 4),
                "predicted_ttft_s": {k: round(v, 4) for k, v in d.predicted_ttft_s.items()},
                "cached_tokens": d.num_cached_tokens,
                "reason": d.reason,
                **({"fallbacks": obs.fallbacks} if obs.fallbacks else {}),
            }
        )
    return headers
