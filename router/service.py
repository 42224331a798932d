"""One request's path through the cluster: validate, tokenize once, prefill, hand off, decode.

`CompletionService` is built once per router replica and called by the HTTP layer per
request. It raises `OpenAIError` for anything the client must fix; it never formats HTTP.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pdserve.config import PdserveConfig
from pdserve.messages import DecodeChunk, DecodeRequest, PrefillRequest, SamplingOptions
from pdserve.router.dispatch import Dispatcher
from pdserve.router.errors import OpenAIError
from pdserve.router.metric_catalog import input_bucket
from pdserve.router.metrics import RouterMetrics
from pdserve.router.openai_models import ChatCompletionRequest, CompletionRequest
from pdserve.router.placement import Placer
from pdserve.router.policy.types import Decision, NoReplicaError, PolicyName
from pdserve.router.prompts import PromptRenderer
from pdserve.router.timeline import Timeline
from pdserve.router.tracing import RequestTracer


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated, tokenized request, ready to dispatch."""

    request_id: str
    engine_request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingOptions
    priority: int
    stream: bool = False


@dataclass(frozen=True, slots=True)
class Generation:
    """A dispatched request: its prompt accounting, where it runs, and the decode stream."""

    num_prompt_tokens: int
    num_cached_tokens: int | None
    """None for a local prefill: the decode engine reports it with its first chunk."""
    chunks: AsyncIterator[DecodeChunk]
    decision: Decision | None
    """None when placed by Ray Serve's load balancing (replica view not ready yet)."""
    timeline: Timeline

    @property
    def decision_label(self) -> str:
        """'remote_prefill' or 'local_prefill' (a bounded metric label)."""
        local = self.decision is not None and self.decision.prefill_is_local
        return "local_prefill" if local else "remote_prefill"


class CompletionService:
    """Validates and runs chat and completion requests over a `Dispatcher`."""

    def __init__(
        self,
        config: PdserveConfig,
        renderer: PromptRenderer,
        dispatcher: Dispatcher,
        metrics: RouterMetrics,
        placer: Placer | None = None,
        kv_bytes_per_token: int = 0,
        tracer: RequestTracer | None = None,
    ):
        self._config = config
        self._renderer = renderer
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._placer = placer
        self._kv_bytes_per_token = kv_bytes_per_token
        self._tracer = tracer
        self._vocab_size = renderer.vocab_size()

    def _batch_interval_s(self, prepared: PreparedRequest) -> float:
        """How often the decode replica sends tokens: the configured interval when
        streaming; without streaming only the first token (for TTFT) and the end."""
        if not prepared.stream:
            return math.inf
        return self._config.router.stream_batch_interval_ms / 1000.0

    def _block_bytes(self) -> int:
        """Bytes one KV block holds (blocks read per handoff x this = bytes moved)."""
        block = self._placer.view.block_size_tokens if self._placer is not None else 0
        return self._kv_bytes_per_token * block

    def pools_ready(self) -> dict[str, bool] | None:
        """Whether each pool has a running replica, from Ray Serve's own replica list (no
        call to the replicas); None until both pools' request routers are attached."""
        if self._placer is None:
            return None
        view = self._placer.view
        view.refresh()
        if not view.attached:
            return None
        return {pool: bool(view.snapshots(pool)) for pool in ("prefill", "decode")}

    def update_pool_gauges(self) -> None:
        """Refresh the per-pool gauges from the replica view (called at each scrape)."""
        if self._placer is None:
            return
        view = self._placer.view
        view.refresh()
        m = self._metrics
        for pool in ("prefill", "decode"):
            snaps = [s for s in view.snapshots(pool) if s.healthy]
            m.ready_replicas.labels(pool).set(len(snaps))
            m.running_requests.labels(pool).set(sum(s.num_running_requests for s in snaps))
            usage = sum(s.kv_cache_usage for s in snaps) / len(snaps) if snaps else 0.0
            m.kv_cache_usage.labels(pool).set(usage)
            m.queued_prefill_tokens.labels(pool).set(self._placer.queued_prefill_tokens(pool))

    def replicas(self) -> dict[str, Any]:
        """The router's view of the replicas (for operators and `pdserve top`)."""
        if self._placer is None:
            return {"ready": False, "pools": {}}
        return self._placer.view.describe()

    @property
    def model_id(self) -> str:
        return self._config.model.served_model_name

    def check_model(self, model: str) -> None:
        if model != self.model_id:
            raise OpenAIError(
                404,
                f"The model '{model}' does not exist; this server serves '{self.model_id}'",
                param="model",
                code="model_not_found",
            )

    def prepare_chat(self, req: ChatCompletionRequest, request_id: str) -> PreparedRequest:
        self._check_common(req.model, req.unsupported_reason())
        ids = self._renderer.render_chat(req.messages, req.add_generation_prompt)
        return self._prepare(
            request_id, ids, req, req.requested_max_tokens(), req.num_logprobs(), "messages"
        )

    def prepare_completion(self, req: CompletionRequest, request_id: str) -> PreparedRequest:
        self._check_common(req.model, req.unsupported_reason())
        prompt = req.single_prompt()
        if isinstance(prompt, str):
            if not prompt:
                raise OpenAIError(400, "prompt must not be empty", param="prompt")
            ids = self._renderer.encode(prompt)
        else:
            if not prompt:
                raise OpenAIError(400, "prompt must not be empty", param="prompt")
            bad = [t for t in prompt if not 0 <= t < self._vocab_size]
            if bad:
                raise OpenAIError(
                    400,
                    f"prompt token ids must be in [0, {self._vocab_size}); got {bad[:5]}",
                    param="prompt",
                )
            ids = prompt
        return self._prepare(request_id, ids, req, req.max_tokens, req.logprobs, "prompt")

    def _check_common(self, model: str, unsupported: tuple[str, str] | None) -> None:
        self.check_model(model)
        if unsupported is not None:
            param, message = unsupported
            raise OpenAIError(400, message, param=param, code="unsupported_parameter")

    def _prepare(
        self,
        request_id: str,
        ids: list[int],
        req: ChatCompletionRequest | CompletionRequest,
        max_tokens: int | None,
        num_logprobs: int | None,
        prompt_param: str,
    ) -> PreparedRequest:
        limit = self._config.model.max_model_len_tokens
        if len(ids) >= limit:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens, but the prompt has "
                f"{len(ids)} tokens. Shorten the prompt.",
                param=prompt_param,
                code="context_length_exceeded",
            )
        room = limit - len(ids)
        if max_tokens is None:
            max_tokens = min(self._config.router.default_max_tokens, room)
        elif max_tokens > room:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {limit} tokens; the prompt has "
                f"{len(ids)} tokens and max_tokens asks for {max_tokens} more "
                f"(at most {room} fit).",
                param="max_tokens",
                code="context_length_exceeded",
            )
        try:
            stop = req.stop_list()
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="stop") from exc
        sampling = SamplingOptions(
            max_tokens=max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=max(req.top_k, 0),
            min_tokens=min(req.min_tokens, max_tokens),
            seed=req.seed,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            repetition_penalty=req.repetition_penalty,
            stop=stop,
            stop_token_ids=tuple(req.stop_token_ids or ()),
            ignore_eos=req.ignore_eos,
            include_stop_str_in_output=req.include_stop_str_in_output,
            skip_special_tokens=req.skip_special_tokens,
            num_logprobs=num_logprobs,
        )
        return PreparedRequest(
            request_id=request_id,
            # Engine ids must be unique even when a client reuses its x-request-id.
            engine_request_id=f"{request_id}-{uuid.uuid4().hex[:8]}",
            prompt_token_ids=ids,
            sampling=sampling,
            priority=req.priority,
            stream=bool(req.stream),
        )

    async def generate(
        self,
        prepared: PreparedRequest,
        policy: PolicyName | None = None,
        arrival_s: float | None = None,
    ) -> Generation:
        """Place the request, prefill (remotely, or locally on decode), and return the decode
        stream. `policy` overrides the configured routing policy for this request;
        `arrival_s` (router monotonic clock) starts its timeline.

        Raises before the first chunk if placement or the prefill fails; the caller iterates
        `chunks`, which also completes the timeline and the latency metrics.
        """
        timeline = Timeline(arrival_s=time.monotonic() if arrival_s is None else arrival_s)
        decision = None
        if self._placer is not None:
            try:
                decision = self._placer.place(
                    prepared.request_id, prepared.prompt_token_ids, prepared.priority, policy
                )
            except NoReplicaError as exc:
                raise OpenAIError(503, str(exc), code="no_replica") from exc
        priority = decision.engine_priority if decision is not None else prepared.priority
        decode_target = decision.decode_replica_id if decision is not None else None
        num_prompt = len(prepared.prompt_token_ids)
        timeline.prefill_dispatched_s = time.monotonic()
        if decision is not None and decision.prefill_is_local:
            timeline.local_prefill = True
            chunks = self._dispatcher.decode(
                DecodeRequest(
                    request_id=f"{prepared.engine_request_id}-d",
                    prompt_token_ids=prepared.prompt_token_ids,
                    sampling=prepared.sampling,
                    handoff=None,
                    priority=priority,
                    target_replica_id=decode_target,
                    batch_interval_s=self._batch_interval_s(prepared),
                )
            )
            return Generation(
                num_prompt_tokens=num_prompt,
                num_cached_tokens=None,
                chunks=self._observe(
                    chunks, timeline, num_prompt, None, 0, prepared.request_id, decision
                ),
                decision=decision,
                timeline=timeline,
            )
        try:
            result = await self._dispatcher.prefill(
                PrefillRequest(
                    request_id=f"{prepared.engine_request_id}-p",
                    prompt_token_ids=prepared.prompt_token_ids,
                    priority=priority,
                    target_replica_id=decision.prefill_replica_id if decision else None,
                )
            )
        finally:
            if self._placer is not None:
                self._placer.prefill_done(decision, prepared.request_id)
        timeline.prefill_returned_s = time.monotonic()
        timeline.prefill_engine = result.engine_times
        timeline.prefill_replica_id = result.replica_id
        chunks = self._dispatcher.decode(
            DecodeRequest(
                request_id=f"{prepared.engine_request_id}-d",
                prompt_token_ids=prepared.prompt_token_ids,
                sampling=prepared.sampling,
                handoff=result.handoff,
                priority=priority,
                target_replica_id=decode_target,
                batch_interval_s=self._batch_interval_s(prepared),
            )
        )
        kv_bytes = result.handoff.num_blocks * self._block_bytes()
        return Generation(
            num_prompt_tokens=result.num_prompt_tokens,
            num_cached_tokens=result.num_cached_tokens,
            chunks=self._observe(
                chunks,
                timeline,
                result.num_prompt_tokens,
                result.num_cached_tokens,
                kv_bytes,
                prepared.request_id,
            ),
            decision=decision,
            timeline=timeline,
        )

    async def _observe(
        self,
        chunks: AsyncIterator[DecodeChunk],
        timeline: Timeline,
        num_prompt: int,
        num_cached: int | None,
        kv_bytes: int,
        request_id: str,
        local: Decision | None = None,
    ) -> AsyncIterator[DecodeChunk]:
        """Marks the timeline and counts tokens as chunks pass; observes the latency
        histograms when the stream ends normally. `num_cached` None (with `local` set) means
        a local prefill: the cached count comes from the decode engine's first chunk, there
        is no KV handoff, and the placer hears the prefill ended at the first token."""
        m = self._metrics
        first = True
        try:
            async for chunk in chunks:
                now = time.monotonic()
                if first:
                    first = False
                    timeline.first_token_s = now
                    timeline.decode_engine = chunk.engine_times
                    timeline.decode_replica_id = chunk.replica_id
                    if local is not None and self._placer is not None:
                        self._placer.prefill_done(local, request_id)
                    if num_cached is None:
                        m.cached_prompt_tokens.inc(chunk.num_cached_tokens)
                    else:
                        # The decode engine only produces a token after the KV pull
                        # succeeded (kv_load_failure_policy=fail): a completed handoff.
                        m.kv_transfers.inc()
                        m.cached_prompt_tokens.inc(num_cached)
                    m.prompt_tokens.inc(num_prompt)
                timeline.deliveries.append((now, len(chunk.token_ids)))
                m.generation_tokens.inc(len(chunk.token_ids))
                yield chunk
            timeline.last_token_s = time.monotonic()
        finally:
            if first and local is not None and self._placer is not None:
                self._placer.prefill_done(local, request_id)
        self._record(timeline, num_prompt, kv_bytes, request_id)

    def _record(self, timeline: Timeline, num_prompt: int, kv_bytes: int, request_id: str) -> None:
        m = self._metrics
        bucket = input_bucket(num_prompt)
        decision = "local_prefill" if timeline.local_prefill else "remote_prefill"
        stages = timeline.stages()
        ttft, e2e = timeline.ttft_s(), timeline.e2e_s()
        if ttft is not None:
            m.ttft.labels(bucket, decision).observe(ttft)
        if e2e is not None:
            m.e2e.labels(bucket, decision).observe(e2e)
        m.queue_time.labels("prefill").observe(
            stages.get("router_queue", 0.0) + stages.get("prefill_queue", 0.0)
        )
        if "prefill" in stages:
            m.prefill_time.labels(bucket, decision).observe(stages["prefill"])
        if not timeline.local_prefill:
            m.kv_transfer_seconds.observe(stages.get("kv_transfer", 0.0))
            m.kv_transfer_bytes.observe(kv_bytes)
        for gap in timeline.inter_token_s():
            m.itl.observe(gap)
        if self._tracer is not None:
            self._tracer.record(
                timeline,
                request_id,
                {"pdserve.decision": decision, "pdserve.prompt_tokens": num_prompt},
            )
