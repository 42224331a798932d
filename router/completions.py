"""Serving one chat or completion request over HTTP: prepare → orchestrate → OpenAI JSON body
or SSE stream, with the x-pdserve-* response headers.

`CompletionHandler` is built once per router replica by `build_app` (app.py), whose routes call
`handle` per request. It validates and tokenizes through `RequestPreparer` (big bodies off the
event loop), runs `Orchestrator`, and ends every accepted request's `RequestObservation`
exactly once with its HTTP status (499 when the client went away).
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

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from pdserve.messages import DecodeChunk
from pdserve.names import PolicyName
from pdserve.router.admission import AdmissionRejected, RetryAfterAdvisor
from pdserve.router.arrival import stamped_arrival_s
from pdserve.router.errors import (
    FAILURE_STATE,
    REQUEST_ID_STATE,
    OpenAIError,
    error_body,
    server_error_body,
    server_error_status,
)
from pdserve.router.headers import (
    DECISION_HEADER,
    FAIR_SHARE_HEADER,
    ITL_GUARD_HEADER,
    KV_VERIFY_HEADER,
    PACE_HEADER,
    POLICY_HEADER,
    PROMPT_COST_HEADER,
    REQUEST_ID_HEADER,
    SERVED_BY_HEADER,
    TIMING_HEADER,
)
from pdserve.router.observe import Endpoint, RequestObservation, RouterObserver
from pdserve.router.orchestrate import Generation, Orchestrator
from pdserve.router.policy.itl_guard import ItlCost
from pdserve.router.prepare import PreparedRequest, RequestPreparer
from pdserve.router.responses import ResponseBuilder
from pdserve.router.tenants.directory import Tenant
from pdserve.router.tenants.limits import TenantLimiter, TenantRequestTooLarge
from pdserve.tenant_config import DEFAULT_TENANT

_DONE = "[DONE]"
INLINE_PREPARE_MAX_BYTES = 2 << 10
"""Request bodies up to this size (a prompt of ~250 tokens) are tokenized on the event loop
(cheaper than a thread hop); larger ones in the tokenizer thread. At 16 KiB, 1,500-token
prompts (~2 ms each, ~20 ms on a contended CPU) were tokenized on the loop, and a flood's
429s waited behind them (bench/RESULTS.md, "Overload")."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


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
        limiter: TenantLimiter | None = None,
    ):
        """`limiter`: the tenants' limits (reserves each request's tokens once its prompt is
        tokenized; None: a fresh one)."""
        self._limiter = limiter or TenantLimiter(time.monotonic)
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
        self,
        endpoint: Endpoint,
        request: Request,
        prepare: Callable[[str], PreparedRequest],
        tenant: Tenant | None = None,
    ) -> Response:
        """Serve one request of `tenant` (None: the default tenant, without limits)."""
        arrival_s = stamped_arrival_s(request)
        rid = _request_id(request)
        setattr(request.state, REQUEST_ID_STATE, rid)  # for 5xx bodies
        who = tenant or Tenant(DEFAULT_TENANT)
        try:
            return await self._serve(endpoint, request, prepare, rid, arrival_s, who)
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
        tenant: Tenant,
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
            kv_verify = self._kv_verify_of(request)
            fair_share = self._fair_share_of(request)
            itl_guard = self._itl_guard_of(request)
            pace = self._on_off(request, PACE_HEADER)
            reserved = self._limiter.reserve_tokens(
                tenant, len(prepared.prompt_token_ids), prepared.sampling.max_tokens
            )
        except OpenAIError as exc:
            if isinstance(exc, AdmissionRejected):
                self._observer.not_admitted(exc.reason)
                self._observer.tenant_rejected(tenant.name, exc.reason)
            if isinstance(exc, AdmissionRejected | TenantRequestTooLarge):
                self._limiter.refund_request(tenant)  # refused by its limits: not counted
            self._observer.rejected(endpoint, exc.status, tenant.name)
            raise
        obs = self._observer.start(
            endpoint,
            prepared.request_id,
            prepared.engine_request_id,
            arrival_s,
            prepared.layout,
            prepared.cache_break,
            tenant=tenant.name,
        )
        obs.on_end(lambda used: self._limiter.settle(tenant, reserved, used))
        created = int(time.time())
        with _ends(obs, request):
            generation = await self._orchestrator.run(
                prepared,
                obs,
                policy,
                kv_verify,
                tenant=tenant,
                fair_share=fair_share,
                itl_guard=itl_guard,
                pace=pace,
            )
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

    def _override(self, request: Request, header: str, allowed: tuple[str, ...]) -> str | None:
        """A per-request override header's value (None: not sent); 400 when overrides are
        off on this deployment (router.allow_policy_override) or the value is not `allowed`."""
        value = request.headers.get(header)
        if value is None:
            return None
        if not self._allow_policy_override:
            raise OpenAIError(
                400,
                f"the {header} header is disabled on this deployment "
                "(router.allow_policy_override: false)",
                param=header,
            )
        if value not in allowed:
            raise OpenAIError(
                400, f"{header} must be one of {', '.join(allowed)}, got {value!r}", param=header
            )
        return value

    def _fair_share_of(self, request: Request) -> bool | None:
        return self._on_off(request, FAIR_SHARE_HEADER)

    def _itl_guard_of(self, request: Request) -> bool | None:
        return self._on_off(request, ITL_GUARD_HEADER)

    def _on_off(self, request: Request, header: str) -> bool | None:
        """An `on` / `off` override header (None when absent; 400 when overrides are off or
        the value is neither)."""
        value = self._override(request, header, ("on", "off"))
        return None if value is None else value == "on"

    def _kv_verify_of(self, request: Request) -> bool | None:
        return self._on_off(request, KV_VERIFY_HEADER)

    def _policy_of(self, request: Request) -> PolicyName | None:
        return self._override(request, POLICY_HEADER, get_args(PolicyName))  # type: ignore[return-value]


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


def _content_length(request: Request) -> int:
    try:
        return int(request.headers.get("content-length", "0"))
    except ValueError:
        return 0


def _request_id(request: Request) -> str:
    """The client's x-request-id when it sent a usable one, else a new id."""
    rid = request.headers.get(REQUEST_ID_HEADER, "")
    if rid and len(rid) <= 128 and rid.isprintable():
        return rid
    return uuid.uuid4().hex


def _itl_json(verdict: str | None, c: ItlCost) -> dict[str, object]:
    """The ITL guard's part of x-pdserve-decision: its verdict, the decode streams' ITL
    budget, the predicted step with a prompt chunk, the streams, chunk tokens and steps, and
    each stream's predicted stall."""
    return {
        "verdict": verdict,
        "budget_s": round(c.budget_s, 4),
        "step_s": round(c.step_s, 4),
        "streams": c.streams,
        "chunk_tokens": c.chunk_tokens,
        "steps": c.steps,
        "stall_s": round(c.stall_s, 4),
    }


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
                **({"itl": _itl_json(d.itl, d.itl_cost)} if d.itl_cost is not None else {}),
                **({"fallbacks": obs.fallbacks} if obs.fallbacks else {}),
                **({"kv_verify": True} if t.kv_verified else {}),
                **({"recomputed": f"integrity:{t.kv_recomputed}"} if t.kv_recomputed else {}),
            }
        )
    return headers
