"""Observing requests: the timeline, every router metric, tracing and the placer's bookkeeping.

`RouterObserver` is built once per router replica and owns all of them. The HTTP layer opens
one `RequestObservation` per accepted request (`start`), or reports a request it rejected
before that (`rejected`). The orchestrator calls the observation at named points of the
request's path, in this order (points in brackets are skipped on some paths):

    [holds] → placed → dispatched → [prefill_returned → prefill_ended] → decode_sent
           → first_token → delivered (per chunk) → [stream_completed] → decode_ended

(`failed` at the point where a request fails), and the HTTP layer closes it with
`ended(status)` exactly once. Nothing here does I/O except logging failures and tracing,
which exports in the background.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pdserve.autoscaling.journal import PoolScaling
from pdserve.messages import DecodeChunk, PrefillResult
from pdserve.names import POOLS, PoolName
from pdserve.router.context.breaks import CacheBreak, ConversationTracker
from pdserve.router.context.cost import PromptCost, prompt_cost
from pdserve.router.context.layout import PromptLayout
from pdserve.router.metric_catalog import DecisionLabel, input_bucket
from pdserve.router.metrics import RouterMetrics
from pdserve.router.placement import Placer
from pdserve.router.policy.types import Decision
from pdserve.router.tenants.gate import Pass
from pdserve.router.timeline import Timeline
from pdserve.router.tracing import RequestTracer
from pdserve.tenant_config import DEFAULT_TENANT

Endpoint = Literal["chat", "completion"]
FailurePoint = Literal[
    "placement", "prefill", "decode_before_first_token", "decode_after_first_token"
]
"""Where on its path a request failed (router/orchestrate.py describes each)."""

log = logging.getLogger("pdserve.router")

# Bounded label values of pdserve_fallbacks_total.
FallbackStage = PoolName
FallbackReason = Literal["error", "timeout", "unhealthy"]
FallbackAction = Literal["retry", "local"]


class RequestObservation:
    """One request's observation. Built by `RouterObserver.start`; not shared across requests."""

    def __init__(
        self,
        owner: RouterObserver,
        endpoint: Endpoint,
        request_id: str,
        placement_id: str,
        arrival_s: float,
        layout: PromptLayout | None = None,
        cache_break: CacheBreak | None = None,
        tenant: str = DEFAULT_TENANT,
    ):
        self._owner = owner
        self.tenant = tenant
        """The tenant's name (a bounded label: names come from the key file only)."""
        self._on_end: list[Callable[[int], None]] = []
        self._prefill_pass: Pass | None = None
        self._decode_pass: Pass | None = None
        self._layout = layout
        self._cache_break = cache_break
        self.prompt_cost: PromptCost | None = None
        """The prompt's tokens by part, cached and computed; None until the first token."""
        self.endpoint: Endpoint = endpoint
        self.request_id = request_id
        """The client-facing id (x-request-id): logs and traces."""
        self.placement_id = placement_id
        """Unique per request inside this router even when clients reuse an x-request-id:
        the placer's bookkeeping key."""
        self.timeline = Timeline(arrival_s=arrival_s)
        self.decision: Decision | None = None
        """None until placed, and when placed by Ray Serve's load balancing (the replica view
        is not ready yet)."""
        self._num_prompt_tokens = 0
        self._num_cached_tokens: int | None = None
        self._prefill_open = False
        self._decode_sent = False
        self._first = True
        self._ended = False
        self.failure_point: FailurePoint | None = None
        """Where the request failed; None while it has not."""
        self.fallbacks: list[str] = []
        """What the router did about failed stages, in order (for the decision header)."""

    @property
    def decision_label(self) -> DecisionLabel:
        """The bounded `decision` label: 'none' until the request reached a decode replica."""
        if not self._decode_sent:
            return "none"
        return "local_prefill" if self.timeline.local_prefill else "remote_prefill"

    def on_end(self, callback: Callable[[int], None]) -> None:
        """Call `callback(tokens used)` when the request ends: its prompt tokens once it was
        dispatched to an engine, plus the tokens it generated (settles the tenant's tokens)."""
        self._on_end.append(callback)

    def holds(self, prefill: Pass | None, decode: Pass | None) -> None:
        """The request holds these tier passes (router/tenants/gate.py): the prefill pass is
        left when the prefill ends (with its measured engine seconds), the decode pass when
        the decode stream ends."""
        self._prefill_pass = prefill
        self._decode_pass = decode
        m = self._owner.metrics
        for tier, held in (("prefill", prefill), ("decode", decode)):
            if held is not None:
                m.tenant_queue_wait.labels(self.tenant, tier).observe(held.waited_s)

    def measured_prefill_s(self) -> float | None:
        """The engine-reported prefill time (scheduled → first token on the engine that
        prefilled: the prefill engine, or decode for a local prefill); None until known."""
        t = self.timeline
        engine = t.decode_engine if t.local_prefill else t.prefill_engine
        if engine is None:
            return None
        return max(0.0, engine.first_token_s - engine.scheduled_s)

    # ---- the named points, in path order -----------------------------------------------

    def placed(self, decision: Decision | None) -> None:
        """The policy chose where the request runs (None: Ray Serve's load balancing)."""
        self.decision = decision
        if decision is not None and decision.itl is not None:
            self._owner.metrics.itl_guard.labels(decision.itl).inc()

    def dispatched(self, num_prompt_tokens: int, local_prefill: bool) -> None:
        """The prefill was sent: to a prefill replica, or (local) with the decode request.
        The placer counts it as outstanding prefill work until `prefill_ended`."""
        self._num_prompt_tokens = num_prompt_tokens
        self.timeline.prefill_dispatched_s = self._owner.clock()
        self.timeline.local_prefill = local_prefill
        self._prefill_open = True

    def prefill_returned(self, result: PrefillResult) -> None:
        """A remote prefill finished: its KV waits on the prefill replica for decode."""
        t = self.timeline
        t.prefill_returned_s = self._owner.clock()
        t.prefill_engine = result.engine_times
        t.prefill_replica_id = result.replica_id
        self._num_prompt_tokens = result.num_prompt_tokens
        self._num_cached_tokens = result.num_cached_tokens

    def prefill_ended(self) -> None:
        """The prefill is no longer outstanding work (finished, failed or abandoned): tell
        the placer. Idempotent. Remote: when the prefill call returns or fails; local: at the
        first token, or when the decode stream ends without one."""
        if self._prefill_pass is not None:
            held, self._prefill_pass = self._prefill_pass, None
            held.leave(self.measured_prefill_s())
        if not self._prefill_open:
            return
        self._prefill_open = False
        measured = self.measured_prefill_s()
        if measured is not None:
            self._owner.metrics.tenant_prefill_seconds.labels(self.tenant).inc(measured)
        placer = self._owner.placer
        if placer is not None:
            placer.prefill_done(self.decision, self.placement_id, measured)

    def fell_back(
        self, stage: FallbackStage, reason: FallbackReason, action: FallbackAction, detail: str
    ) -> None:
        """A stage failed and the request moves on another way (`router.fallback`)."""
        self._owner.metrics.fallbacks.labels(stage, reason, action).inc()
        self.fallbacks.append(detail)
        log.warning("request %s: %s", self.request_id, detail)

    def decode_moved(self, decode_replica_id: str, detail: str) -> None:
        """The decode failed before its first token and is retried on `decode_replica_id`,
        which prefills the prompt itself (counted as a decode fallback)."""
        self.fell_back("decode", "error", "retry", detail)
        self.timeline.local_prefill = True
        self._num_cached_tokens = None  # the retry's own prefill reports it
        placer = self._owner.placer
        if placer is not None:
            placer.decode_moved(self.placement_id, decode_replica_id)

    @property
    def num_cached_tokens(self) -> int | None:
        """Prompt tokens the serving prefill took from a prefix cache (None until known)."""
        return self._num_cached_tokens

    def decode_sent(self) -> None:
        """The decode request is on its way to a decode replica."""
        self._decode_sent = True

    def first_token(self, chunk: DecodeChunk) -> None:
        """The first chunk arrived from decode: time to first token; prompt accounting."""
        m = self._owner.metrics
        t = self.timeline
        t.first_token_s = self._owner.clock()
        t.decode_engine = chunk.engine_times
        t.decode_replica_id = chunk.replica_id
        if t.local_prefill:
            self.prefill_ended()
            self._num_cached_tokens = chunk.num_cached_tokens
        else:
            # The decode engine produces a token only once the prompt's KV is in place: pulled
            # (or, under kv_load_failure_policy=recompute, recomputed after a failed pull;
            # the engine counts those as transfer failures).
            m.kv_transfers.inc()
        m.cached_prompt_tokens.inc(self._num_cached_tokens or 0)
        m.tenant_tokens.labels(self.tenant, "prompt").inc(self._num_prompt_tokens)
        m.tenant_tokens.labels(self.tenant, "cached").inc(self._num_cached_tokens or 0)
        cost = prompt_cost(
            self._num_prompt_tokens, self._num_cached_tokens or 0, self._layout, self._cache_break
        )
        self.prompt_cost = cost
        for part, tokens in cost.parts.items():
            if tokens.cached:
                m.prompt_tokens.labels(part, "true").inc(tokens.cached)
            if tokens.computed:
                m.prompt_tokens.labels(part, "false").inc(tokens.computed)

    def delivered(self, chunk: DecodeChunk) -> None:
        """A chunk (the first one too) arrived from decode."""
        if chunk.kv_recomputed:
            self.timeline.kv_recomputed = chunk.kv_recomputed
        self.timeline.deliveries.append((self._owner.clock(), len(chunk.token_ids)))
        self._owner.metrics.generation_tokens.inc(len(chunk.token_ids))

    def stream_completed(self) -> None:
        """The decode stream ended normally: observe the latency histograms and trace."""
        self.timeline.last_token_s = self._owner.clock()
        self._owner.record_latencies(self.timeline, self._num_prompt_tokens, self.tenant)
        if self._owner.tracer is not None:
            self._owner.tracer.record(
                self.timeline,
                self.request_id,
                {
                    "pdserve.decision": self.decision_label,
                    "pdserve.prompt_tokens": self._num_prompt_tokens,
                },
            )

    def decode_ended(self) -> None:
        """The decode stream is over, normally or not (a local prefill that never produced a
        token is no longer outstanding; the decode replica has one stream less)."""
        self.prefill_ended()
        if self._decode_pass is not None:
            held, self._decode_pass = self._decode_pass, None
            held.leave()
        placer = self._owner.placer
        if placer is not None:
            placer.decode_done(self.placement_id)

    def not_admitted(self, reason: str) -> None:
        """Admission control refused the request (it then ends with 429)."""
        self._owner.not_admitted(reason)
        self._owner.tenant_rejected(self.tenant, reason)

    def failed(self, point: FailurePoint, error: BaseException) -> None:
        """The request failed at `point` (the error then propagates to the HTTP layer)."""
        self.failure_point = point
        log.warning("request %s failed at %s: %r", self.request_id, point, error, exc_info=error)

    def ended(self, status: int | str) -> None:
        """The response is over with this HTTP status (499: the client went away). Counts the
        request once; later calls do nothing."""
        if self._ended:
            return
        self._ended = True
        self.decode_ended()
        m = self._owner.metrics
        m.requests.labels(self.endpoint, self.decision_label, str(status)).inc()
        m.tenant_requests.labels(self.tenant, str(status)).inc()
        generated = sum(n for _, n in self.timeline.deliveries)
        prompt = self._num_prompt_tokens if self.timeline.prefill_dispatched_s is not None else 0
        m.tenant_tokens.labels(self.tenant, "output").inc(generated)
        self._owner.record_kv_block_seconds(self.tenant, self.timeline, prompt, generated)
        for callback in self._on_end:
            callback(prompt + generated)


class RouterObserver:
    """Owns the router's metrics, tracer and placer bookkeeping; one per router replica."""

    def __init__(
        self,
        metrics: RouterMetrics,
        placer: Placer | None = None,
        tracer: RequestTracer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.metrics = metrics
        self.placer = placer
        self.tracer = tracer
        self.clock = clock
        # (counter, replica id) -> that engine counter's value at the last scrape
        self._engine_counts_seen: dict[tuple[str, str], int] = {}
        self._events_seen_unix_s: dict[PoolName, float] = {}

    def start(
        self,
        endpoint: Endpoint,
        request_id: str,
        placement_id: str,
        arrival_s: float,
        layout: PromptLayout | None = None,
        cache_break: CacheBreak | None = None,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> RequestObservation:
        """Open the observation of an accepted (validated) request; count its cache break."""
        if cache_break is not None:
            self.metrics.cache_breaks.labels(cache_break.part).inc()
        return RequestObservation(
            self, endpoint, request_id, placement_id, arrival_s, layout, cache_break, tenant
        )

    def rejected(self, endpoint: Endpoint, status: int, tenant: str | None = None) -> None:
        """A request refused before it was accepted (validation, policy header, admission);
        `tenant` None: the refusal came before the tenant was known or is counted elsewhere."""
        self.metrics.requests.labels(endpoint, "none", str(status)).inc()
        if tenant is not None:
            self.metrics.tenant_requests.labels(tenant, str(status)).inc()

    def not_admitted(self, reason: str) -> None:
        """A request refused by admission control (429), by the bound it hit."""
        self.metrics.rejected.labels(reason).inc()

    def tenant_rejected(self, tenant: str, reason: str) -> None:
        """A tenant's request refused with 429 (its limits, its queue, or a router bound)."""
        self.metrics.tenant_rejected.labels(tenant, reason).inc()

    def record_kv_block_seconds(
        self, tenant: str, timeline: Timeline, num_prompt: int, num_generated: int
    ) -> None:
        """Count the KV block-seconds a finished stream held on its decode replica: from its
        first token to its end, the prompt's blocks plus its output's blocks growing linearly
        (block size: the engines')."""
        if timeline.first_token_s is None or self.placer is None:
            return
        end_s = timeline.last_token_s
        if end_s is None:
            end_s = timeline.deliveries[-1][0] if timeline.deliveries else timeline.first_token_s
        held_s = max(0.0, end_s - timeline.first_token_s)
        block = max(1, self.placer.view.block_size_tokens)
        blocks = math.ceil(num_prompt / block) + num_generated / block / 2
        self.metrics.tenant_kv_block_seconds.labels(tenant).inc(blocks * held_s)

    def record_latencies(self, timeline: Timeline, num_prompt: int, tenant: str) -> None:
        """Observe a completed request's latency histograms."""
        m = self.metrics
        bucket = input_bucket(num_prompt)
        decision = "local_prefill" if timeline.local_prefill else "remote_prefill"
        stages = timeline.stages()
        ttft, e2e = timeline.ttft_s(), timeline.e2e_s()
        if ttft is not None:
            m.ttft.labels(bucket, decision).observe(ttft)
            m.tenant_ttft.labels(tenant).observe(ttft)
        if e2e is not None:
            m.e2e.labels(bucket, decision).observe(e2e)
        m.queue_time.labels("prefill").observe(
            stages.get("router_queue", 0.0) + stages.get("prefill_queue", 0.0)
        )
        if "prefill" in stages:
            m.prefill_time.labels(bucket, decision).observe(stages["prefill"])
        if not timeline.local_prefill:
            m.kv_wait_seconds.observe(stages.get("kv_transfer", 0.0))
        tenant_itl = m.tenant_itl.labels(tenant)
        for gap in timeline.inter_token_s():
            m.itl.observe(gap)
            tenant_itl.observe(gap)

    def update_conversation_gauges(self, conversations: ConversationTracker | None) -> None:
        """Refresh the cache-break detector's state gauges (called at each scrape)."""
        if conversations is not None:
            self.metrics.conversations.set(conversations.num_conversations)
            self.metrics.conversation_state_bytes.set(conversations.stored_bytes)

    def update_pool_gauges(self) -> None:
        """Refresh the per-pool gauges from the replica view (called at each scrape)."""
        if self.placer is None:
            return
        view = self.placer.view
        view.refresh()
        m = self.metrics
        for pool in POOLS:
            snaps = [s for s in view.snapshots(pool) if s.healthy]
            m.ready_replicas.labels(pool).set(len(snaps))
            m.running_requests.labels(pool).set(sum(s.num_running_requests for s in snaps))
            usage = sum(s.kv_cache_usage for s in snaps) / len(snaps) if snaps else 0.0
            m.kv_cache_usage.labels(pool).set(usage)
            m.queued_prefill_tokens.labels(pool).set(self.placer.queued_prefill_tokens(pool))
            for snap in snaps:
                failures = self._since_last_scrape("failures", snap.replica_id,
                                                   snap.kv_transfer_failures_total)  # fmt: skip
                m.kv_transfer_failures.labels(pool).inc(failures)
                expired = self._since_last_scrape("expired", snap.replica_id,
                                                  snap.kv_expired_total)  # fmt: skip
                m.kv_expired.labels(pool).inc(expired)
            for replica_id, stats in view.reports(pool):
                self._fold_integrity(pool, replica_id, stats.get("kv_integrity"))
                for name, hist in m.engine_histograms.items():
                    hist.fold(pool, replica_id, stats.get(name.removeprefix("pdserve_")))
        live = {s.replica_id for pool in POOLS for s in view.snapshots(pool)}
        for hist in m.engine_histograms.values():
            hist.forget(live)

    def update_scaling(self, docs: Mapping[PoolName, PoolScaling]) -> None:
        """Refresh the elastic pools' gauges from their policies' documents; count the scale
        events not seen before (an event is known by its time)."""
        m = self.metrics
        for pool, doc in docs.items():
            m.target_replicas.labels(pool).set(doc.target_replicas)
            m.wanted_replicas.labels(pool).set(doc.wanted_replicas)
            m.scaling_signal.labels(pool).set(doc.signal)
            m.scaling_target.labels(pool).set(doc.signal_target)
            seen = self._events_seen_unix_s.get(pool, float("-inf"))
            for event in doc.events:
                if event.unix_s > seen:
                    direction = "up" if event.to_replicas > event.from_replicas else "down"
                    m.scale_events.labels(pool, direction).inc()
            if doc.events:
                self._events_seen_unix_s[pool] = max(seen, doc.events[-1].unix_s)

    def _fold_integrity(self, pool: PoolName, replica_id: str, report: Any) -> None:
        """One replica's cumulative KV-integrity counts (EngineCounters.integrity) into the
        router's counters."""
        if not isinstance(report, dict):
            return
        m = self.metrics
        count = self._since_last_scrape
        m.kv_integrity_checks.labels(pool).inc(count("checks", replica_id, report["checks"]))
        after = count("after_expiry", replica_id, report["notifications_after_expiry"])
        m.kv_after_expiry.labels(pool).inc(after)
        for reason, total in report["failures"].items():
            failed = count(f"integrity:{reason}", replica_id, int(total))
            m.kv_integrity_failures.labels(pool, reason).inc(failed)

    def _since_last_scrape(self, counter: str, replica_id: str, total: int) -> int:
        """How much one replica's cumulative engine counter grew since the last scrape (a
        replaced replica has a new id and starts from its own count)."""
        key = (counter, replica_id)
        before = self._engine_counts_seen.get(key, 0)
        self._engine_counts_seen[key] = total
        return max(0, total - before)
