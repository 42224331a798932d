"""Orchestrating a request: placement → prefill → KV handoff → decode.

`Orchestrator` is built once per router replica; the HTTP layer calls `run()` once per
prepared request. It builds each message type in one place (`prefill_request`,
`decode_request`), talks to the pools only through a `Dispatcher`, and reports every step to
the request's `RequestObservation`. It never formats HTTP.

The points where a request can fail, in path order (named so fault handling can hook in):
- `placement`: no replica to place on → `OpenAIError(503)`, nothing was sent;
- `prefill`: the remote prefill call failed, or missed its deadline (`OpenAIError(504)`,
  the call is cancelled). `router.fallback.prefill` recovers it first: retried once on
  another prefill replica and/or prefilled on the chosen decode replica instead (each step
  counted in `pdserve_fallbacks_total` and listed in the decision header). When that is
  exhausted (or `fail`), the error propagates from `run()`, no decode request was sent, the
  prefill is no longer counted as outstanding;
- `decode_before_first_token`: the decode stream failed or missed the first-token deadline
  (504) before its first chunk → raised by the first `anext()` of `Generation.chunks` (the
  HTTP layer can still answer an HTTP error);
- `decode_after_first_token`: failed, or went idle past `stream_idle_seconds` / ran past
  `request_seconds` (504) mid-stream → raised by a later `anext()`.
A missed deadline cancels the pool call, which aborts the engine request (router/deadlines.py
computes each budget). Closing `Generation.chunks` early (client gone) closes the decode
stream, which aborts the request on the decode engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pdserve.config import RouterConfig
from pdserve.kv_transfer.params import KVHandoff
from pdserve.messages import (
    DecodeChunk,
    DecodeRequest,
    KVRelease,
    PrefillRequest,
    PrefillResult,
)
from pdserve.names import PolicyName, PoolName
from pdserve.router.admission import AdmissionRejected
from pdserve.router.deadlines import Budget, RequestDeadlines
from pdserve.router.dispatch import Dispatcher
from pdserve.router.errors import OpenAIError
from pdserve.router.fault_hooks import HandoffSwapper
from pdserve.router.observe import FallbackReason, RequestObservation
from pdserve.router.placement import Placer
from pdserve.router.policy.types import Decision, NoReplicaError
from pdserve.router.prepare import PreparedRequest
from pdserve.router.tenants.directory import Tenant
from pdserve.router.tenants.gate import TierGates

HEALTH_POLL_S = 0.5
"""How often a waiting prefill call checks that its replica is still healthy."""


class ReplicaUnhealthyError(RuntimeError):
    """The replica serving a call turned unhealthy (its engine died or stopped answering)
    while the router waited for it; the call was cancelled."""

    def __init__(self, pool: str, replica_id: str):
        super().__init__(f"{pool} replica {replica_id} turned unhealthy during the call")


def _failure_reason(exc: BaseException) -> FallbackReason:
    """The bounded `reason` label of a failed stage."""
    if isinstance(exc, ReplicaUnhealthyError):
        return "unhealthy"
    return "timeout" if isinstance(exc, OpenAIError) and exc.status == 504 else "error"


log = logging.getLogger("pdserve.router")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Generation:
    """A dispatched request: its prompt length and the decode stream. The prompt's cached
    tokens are known to the request's observation (`RequestObservation.num_cached_tokens`)
    once its prefill (remote, or local at the first token) reported them."""

    num_prompt_tokens: int
    chunks: AsyncGenerator[DecodeChunk, None]
    """The decode stream; iterate it to the end, or `aclose()` it to abort the request."""


def prefill_request(
    prepared: PreparedRequest, decision: Decision | None, verify_kv: bool = False
) -> PrefillRequest:
    """The message to the prefill pool."""
    return PrefillRequest(
        request_id=f"{prepared.engine_request_id}-p",
        prompt_token_ids=prepared.prompt_token_ids,
        priority=decision.engine_priority if decision is not None else prepared.priority,
        target_replica_id=decision.prefill_replica_id if decision is not None else None,
        expected_cached_tokens=decision.num_cached_tokens if decision is not None else 0,
        verify_kv=verify_kv,
    )


def decode_request(
    prepared: PreparedRequest,
    decision: Decision | None,
    handoff: KVHandoff | None,
    stream_batch_interval_s: float,
    verify_kv: bool = False,
    prefill_request_id: str | None = None,
) -> DecodeRequest:
    """The message to the decode pool; `handoff` None asks for a local prefill. `verify_kv`:
    the handoff came from `prefill_request(..., verify_kv=True)` (whose request id was
    `prefill_request_id`) and must be checked."""
    return DecodeRequest(
        request_id=f"{prepared.engine_request_id}-d",
        prompt_token_ids=prepared.prompt_token_ids,
        sampling=prepared.sampling,
        handoff=handoff,
        priority=decision.engine_priority if decision is not None else prepared.priority,
        target_replica_id=decision.decode_replica_id if decision is not None else None,
        expected_cached_tokens=decision.num_cached_tokens_decode if decision is not None else 0,
        # Streaming: tokens every interval. Otherwise only the first token (for TTFT) and
        # the rest at the end.
        batch_interval_s=stream_batch_interval_s if prepared.stream else math.inf,
        verify_kv=verify_kv and handoff is not None,
        prefill_request_id=prefill_request_id if handoff is not None else None,
    )


class Orchestrator:
    """Runs prepared requests over a `Dispatcher`, placed by a `Placer` when there is one."""

    def __init__(
        self,
        router: RouterConfig,
        dispatcher: Dispatcher,
        placer: Placer | None,
        clock: Callable[[], float] = time.monotonic,
        *,
        aggregated: bool = False,
        kv_verify_fraction: float = 1.0,
        rng: random.Random | None = None,
        handoff_swapper: HandoffSwapper | None = None,
        gates: TierGates | None = None,
    ):
        """`clock` is the router's monotonic clock (the one request arrivals are stamped
        with); deadlines count from arrival on it. `aggregated`: there is no prefill pool,
        so every request prefills on its decode replica (also before the placer is ready).
        `kv_verify_fraction`: the share of remote prefills whose handoff the engines check
        (kv_transfer.verify), drawn from `rng`. `handoff_swapper`: the swap_handoffs fault
        hook (tests only; pdserve.router.fault_hooks). `gates`: the tiers' fair queues
        (router/tenants/gate.py; None: no queues, tiers are first come, first served)."""
        self._gates = gates
        self._fair_share = router.tenants.fair_share
        self._kv_verify_fraction = kv_verify_fraction
        self._rng = rng or random.Random()
        self._handoff_swapper = handoff_swapper
        self._aggregated = aggregated
        self._dispatcher = dispatcher
        self._placer = placer
        self._stream_batch_interval_s = router.stream_batch_interval_ms / 1000.0
        self._deadlines = router.deadlines
        self._fallback = router.fallback
        self._clock = clock
        self._releases: set[asyncio.Task[None]] = set()  # in flight, kept from the GC

    async def run(
        self,
        prepared: PreparedRequest,
        obs: RequestObservation,
        policy: PolicyName | None,
        kv_verify: bool | None = None,
        *,
        tenant: Tenant | None = None,
        fair_share: bool | None = None,
        itl_guard: bool | None = None,
        pace: bool | None = None,
    ) -> Generation:
        """Place the request, prefill it (remotely, or locally on decode) and return the
        decode stream. `policy` overrides the configured routing policy for this request,
        `kv_verify` the kv_transfer.verify setting, `fair_share` router.tenants.fair_share,
        `itl_guard` whether router.routing.itl_slo_s applies, `pace` whether the measured
        pace (router.routing.pace_weight) does (None: the settings decide).
        With fair sharing the request first waits its turn in the prefill tier's queue (its
        predicted prefill seconds), then the decode tier's (a stream slot), as `tenant`
        (None: not queued); it holds both until its prefill, and its stream, end. Raises at
        `placement` or `prefill` (see the module docstring), or AdmissionRejected (429) from
        a tier queue."""
        deadlines = RequestDeadlines(self._deadlines, obs.timeline.arrival_s, self._clock)
        share = self._fair_share if fair_share is None else fair_share
        if share and tenant is not None and self._gates is not None:
            await self._enter_tiers(self._gates, prepared, obs, tenant)
        decision = self._place(prepared, policy, obs, itl_guard, pace)
        obs.placed(decision)
        interval = self._stream_batch_interval_s
        num_prompt = len(prepared.prompt_token_ids)
        if self._aggregated or (decision is not None and decision.prefill_is_local):
            obs.dispatched(num_prompt, local_prefill=True)
            request = decode_request(prepared, decision, None, interval)
            chunks = self._decode_with_fallback(request, obs, deadlines, prepared.stream)
            return Generation(num_prompt, chunks)
        obs.dispatched(num_prompt, local_prefill=False)
        verify = self._verify(kv_verify)
        obs.timeline.kv_verified = verify
        result = await self._prefill_with_fallback(prepared, decision, obs, deadlines, verify)
        if result is None:  # fell back to prefilling on the decode replica
            obs.dispatched(num_prompt, local_prefill=True)
            request = decode_request(prepared, decision, None, interval)
            chunks = self._decode_with_fallback(request, obs, deadlines, prepared.stream)
            return Generation(num_prompt, chunks)
        handoff = result.handoff
        if self._handoff_swapper is not None:
            handoff = await self._handoff_swapper.exchange(handoff)
        request = decode_request(
            prepared, decision, handoff, interval, verify, prefill_request_id=result.request_id
        )
        chunks = self._decode_with_fallback(request, obs, deadlines, prepared.stream)
        return Generation(result.num_prompt_tokens, chunks)

    async def _enter_tiers(
        self, gates: TierGates, prepared: PreparedRequest, obs: RequestObservation, tenant: Tenant
    ) -> None:
        """Wait for the prefill tier (its predicted prefill seconds), then for a decode stream
        slot (router/tenants/gate.py); the observation leaves them when the prefill and the
        stream end. In this order a request waiting for the prefill tier holds no stream slot,
        and a full decode tier holds prefills back (their KV would have nowhere to go)."""
        cost_s = (
            self._placer.estimate_prefill_s(prepared.prompt_token_ids)
            if self._placer is not None
            else 0.0
        )
        prefill = None
        try:
            prefill = await gates.prefill.enter(tenant, cost_s, prepared.priority)
            decode = None
            if gates.decode is not None:
                decode = await gates.decode.enter(tenant, 1.0, prepared.priority)
        except AdmissionRejected as exc:
            obs.not_admitted(exc.reason)
            if prefill is not None:
                prefill.leave()
            raise
        except BaseException:
            if prefill is not None:
                prefill.leave()
            raise
        obs.holds(prefill, decode)

    def _verify(self, override: bool | None) -> bool:
        """Whether this remote prefill's handoff is checked."""
        if override is not None:
            return override
        fraction = self._kv_verify_fraction
        return fraction >= 1.0 or (fraction > 0.0 and self._rng.random() < fraction)

    async def _prefill_with_fallback(
        self,
        prepared: PreparedRequest,
        decision: Decision | None,
        obs: RequestObservation,
        deadlines: RequestDeadlines,
        verify_kv: bool = False,
    ) -> PrefillResult | None:
        """The remote prefill, recovered per `router.fallback.prefill` when it fails:
        retried once on another prefill replica and/or replaced by a local prefill (None).
        Raises when the configured recovery is exhausted (failure point `prefill`)."""
        action = self._fallback.prefill
        request = prefill_request(prepared, decision, verify_kv)
        try:
            return await self._prefill(request, obs, deadlines.prefill())
        except Exception as exc:
            if action == "fail":
                raise
            failed, reason = request.target_replica_id, _failure_reason(exc)
            last: Exception = exc
        if action in ("retry", "retry_then_local"):
            other = self._placer.other_replica("prefill", failed) if self._placer else None
            if other is not None:
                obs.fell_back(
                    "prefill", reason, "retry",
                    f"prefill failed on {failed} ({reason}): retried on {other}",
                )  # fmt: skip
                retry = replace(request, request_id=f"{request.request_id}2",
                                target_replica_id=other)  # fmt: skip
                try:
                    return await self._prefill(retry, obs, deadlines.prefill())
                except Exception as exc:
                    failed, reason, last = other, _failure_reason(exc), exc
            if action == "retry":
                raise last
        if decision is None or deadlines.first_token().seconds <= 0:
            raise last  # no decode replica chosen yet, or no time left to prefill there
        obs.fell_back(
            "prefill", reason, "local",
            f"prefill failed on {failed} ({reason}): prefilled on decode "
            f"{decision.decode_replica_id}",
        )  # fmt: skip
        return None

    async def _decode_with_fallback(
        self,
        request: DecodeRequest,
        obs: RequestObservation,
        deadlines: RequestDeadlines,
        streaming: bool,
    ) -> AsyncGenerator[DecodeChunk, None]:
        """The decode stream, recovered per `router.fallback.decode` when it fails before its
        first token: retried once on another healthy decode replica, which prefills the
        prompt itself (the failed attempt released its handoff: its KV may be half-read).
        A failure after the first token is never retried; it propagates (failure point
        `decode_after_first_token`)."""
        started = False
        async with contextlib.aclosing(self._decode(request, obs, deadlines, streaming)) as first:
            try:
                async for chunk in first:
                    started = True
                    yield chunk
                return
            except Exception as exc:
                if started:
                    raise
                failure = exc
        retry = self._decode_retry(request, failure, obs, deadlines)
        if retry is None:
            raise failure
        async with contextlib.aclosing(self._decode(retry, obs, deadlines, streaming)) as second:
            async for chunk in second:
                yield chunk

    def _decode_retry(
        self,
        request: DecodeRequest,
        failure: Exception,
        obs: RequestObservation,
        deadlines: RequestDeadlines,
    ) -> DecodeRequest | None:
        """The retry of a decode that failed before its first token, or None when there is
        none: not configured, its first-token deadline ran out (504), or no other healthy
        decode replica."""
        if self._fallback.decode != "retry" or self._placer is None:
            return None
        if isinstance(failure, OpenAIError) or deadlines.first_token().seconds <= 0:
            return None
        failed = request.target_replica_id
        other = self._placer.other_replica("decode", failed)
        if other is None:
            return None
        obs.decode_moved(
            other,
            f"decode failed on {failed} (error) before its first token: retried on {other}, "
            "prefilled there",
        )
        return replace(
            request, request_id=f"{request.request_id}2", target_replica_id=other, handoff=None
        )

    def _place(
        self,
        prepared: PreparedRequest,
        policy: PolicyName | None,
        obs: RequestObservation,
        itl_guard: bool | None = None,
        pace: bool | None = None,
    ) -> Decision | None:
        """Failure point `placement`; raises AdmissionRejected (429) when the chosen
        replicas are past their admission bounds."""
        if self._placer is None:
            return None
        try:
            # Keyed by the engine request id: unique even when clients reuse x-request-id.
            return self._placer.place(
                prepared.engine_request_id,
                prepared.prompt_token_ids,
                prepared.priority,
                policy,
                itl_guard=itl_guard,
                pace=pace,
            )
        except NoReplicaError as exc:
            obs.failed("placement", exc)
            raise OpenAIError(503, str(exc), code="no_replica") from exc
        except AdmissionRejected as exc:
            obs.not_admitted(exc.reason)
            raise

    async def _prefill(
        self, request: PrefillRequest, obs: RequestObservation, budget: Budget
    ) -> PrefillResult:
        """Failure point `prefill`: the prefill is no longer outstanding either way. The call
        is abandoned (cancelled, so the engine aborts it) when its deadline passes, or as soon
        as the router's view marks its replica unhealthy (a frozen engine never answers)."""
        try:
            async with asyncio.timeout(budget.seconds):
                result = await self._while_healthy(
                    "prefill", request.target_replica_id, self._dispatcher.prefill(request)
                )
            obs.prefill_returned(result)
            return result
        except TimeoutError as exc:
            obs.failed("prefill", exc)
            raise OpenAIError(504, budget.message(), code=budget.code) from exc
        except Exception as exc:
            obs.failed("prefill", exc)
            raise
        finally:
            obs.prefill_ended()

    async def _while_healthy(
        self, pool: PoolName, replica_id: str | None, call: Coroutine[Any, Any, _T]
    ) -> _T:
        """Await `call`; raise ReplicaUnhealthyError (cancelling it) once `replica_id` is no
        longer healthy in the router's view (checked every HEALTH_POLL_S). Without a placer
        or a target replica this is a plain await."""
        if self._placer is None or replica_id is None:
            return await call
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=HEALTH_POLL_S)
                if done:
                    return task.result()
                if not self._placer.is_healthy(pool, replica_id):
                    raise ReplicaUnhealthyError(pool, replica_id)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _decode(
        self,
        request: DecodeRequest,
        obs: RequestObservation,
        deadlines: RequestDeadlines,
        streaming: bool,
    ) -> AsyncGenerator[DecodeChunk, None]:
        """The decode stream, reported to `obs` chunk by chunk, each chunk within its
        deadline (first token, then idle gap / whole request)."""
        obs.decode_sent()
        source = self._dispatcher.decode(request)
        first = True
        try:
            while True:
                budget = deadlines.first_token() if first else deadlines.next_chunk(streaming)
                try:
                    async with asyncio.timeout(_finite(budget.seconds)):
                        chunk = await anext(source)
                except StopAsyncIteration:
                    break
                except TimeoutError as exc:
                    raise OpenAIError(504, budget.message(), code=budget.code) from exc
                if first:
                    first = False
                    obs.first_token(chunk)
                obs.delivered(chunk)
                yield chunk
            obs.stream_completed()
        except Exception as exc:
            obs.failed("decode_before_first_token" if first else "decode_after_first_token", exc)
            raise
        finally:
            obs.decode_ended()
            await _close(source)
            if first and request.handoff is not None:
                # No token came back: the decode may never have reached an engine, and the
                # prefill's KV would wait for its lease. Free it now (harmless if the decode
                # engine already did).
                self._release(KVRelease(f"{request.request_id}-release", request.handoff), obs)

    def _release(self, release: KVRelease, obs: RequestObservation) -> None:
        """Send `release` in the background (the caller may be cancelled); log a failure."""

        async def send() -> None:
            try:
                await self._dispatcher.release(release)
            except Exception as exc:  # the lease still frees the KV
                log.warning("request %s: releasing its KV failed: %r", obs.request_id, exc)

        task = asyncio.get_running_loop().create_task(send())
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)


def _finite(seconds: float) -> float | None:
    return None if math.isinf(seconds) else seconds


async def _close(stream: AsyncIterator[DecodeChunk]) -> None:
    """Close an async generator we stopped reading (aborts its request); no-op otherwise."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
