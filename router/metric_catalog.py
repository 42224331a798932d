"""Every metric pdserve's router exports: name, type, unit, labels (pure data).

The router's Prometheus registry (metrics.py), the Grafana dashboard and the alert rules shipped
with the Helm chart are all checked against this one catalog in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from pdserve.names import RejectReason

MetricType = Literal["counter", "gauge", "histogram"]
MetricScope = Literal["router", "cluster"]
"""Whose value a series is, when several router replicas export it (docs/several-routers.md):
- "router": this replica's own work (the requests it served, its memory, its loop). Each
  replica exports its share; the cluster's value is the sum over router replicas.
- "cluster": copied from the engines' routing stats or the autoscaler's journal. Every router
  replica exports the same value (up to when each last read it): never sum it across router
  replicas; take max over them (by the series' own labels, and by `pod` to keep clusters
  apart) first."""

# Bounded label values only: never request ids or prompt text (the {pool} values are
# pdserve.names.POOLS).
INPUT_BUCKETS = ("0-256", "256-1k", "1k-4k", "4k-16k", "16k+")
DecisionLabel = Literal["remote_prefill", "local_prefill", "none"]
DECISIONS: tuple[DecisionLabel, ...] = get_args(DecisionLabel)
REJECT_REASONS: tuple[str, ...] = get_args(RejectReason)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    """Family name as exposed (counters get `_total` appended on the wire)."""
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    measured_by_engines: bool = False
    """A histogram the engines measure and report in their routing stats under the name
    without its `pdserve_` prefix; the router sums it per pool (router/engine_histograms.py)."""
    scope: MetricScope = "router"
    """Sum over router replicas ("router") or the same in each ("cluster"); see MetricScope."""


CATALOG: tuple[MetricSpec, ...] = (
    MetricSpec(
        "pdserve_requests",
        "counter",
        "Requests answered by the router.",
        ("endpoint", "decision", "status"),
    ),
    MetricSpec(
        "pdserve_requests_rejected",
        "counter",
        "Requests refused by admission control (429), by the bound they hit.",
        ("reason",),
    ),
    MetricSpec(
        "pdserve_router_refusal_seconds",
        "histogram",
        "What a refusal made before the body is read costs (router/refusal.py): seconds from "
        "the request's arrival at the router's ASGI app to its 429's response start, by the "
        "bound that refused it. A slow refusal waited on a busy event loop.",
        ("reason",),
    ),
    MetricSpec(
        "pdserve_fallbacks",
        "counter",
        "Requests moved off a failed stage (router.fallback): the stage that failed, why, "
        "and what the router did instead.",
        ("stage", "reason", "action"),
    ),
    MetricSpec(
        "pdserve_kv_transfers",
        "counter",
        "Remote prefills whose decode produced a token: the KV was pulled (or, after a failed "
        "pull, recomputed on decode; pdserve_kv_transfer_failures_total counts those).",
    ),
    MetricSpec(
        "pdserve_kv_transfer_failures",
        "counter",
        "KV transfers the engines reported failed (NIXL transfer, handshake or notification "
        "failures), by the pool of the engine that saw them; read from the replicas' routing "
        "stats at each scrape. With kv_transfer.load_failure_policy=recompute each failed "
        "pull on decode is recomputed there.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_kv_expired",
        "counter",
        "Requests whose KV a (prefill) engine freed at the end of its lease because no decode "
        "pulled, released or renewed it (kv_transfer.kv_lease_seconds), by pool; read from "
        "the replicas' routing stats at each scrape.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_kv_notifications_after_expiry",
        "counter",
        "Pull-done notifications a (prefill) engine received for KV it had already freed at "
        "the end of its lease: a decode engine read blocks that may hold another prompt by "
        "then (with kv_transfer.verify on, such a read fails its check and is recomputed), "
        "by pool; read from the replicas' routing stats at each scrape.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_kv_integrity_checks",
        "counter",
        "KV handoffs a (decode) engine checked before decoding from them (kv_transfer.verify), "
        "by pool; read from the replicas' routing stats at each scrape.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_kv_integrity_failures",
        "counter",
        "KV handoffs an engine did not use because they failed a check, each recomputed on "
        "that engine instead, by pool and reason: digest (pulled blocks differ from the "
        "producer's), identity (the handoff belongs to another prompt, request or model), "
        "stale (the lease ran out before the decode engine had the request), unverifiable "
        "(no usable integrity record). Read from the replicas' routing stats at each scrape.",
        ("pool", "reason"),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_prompt_tokens",
        "counter",
        "Prompt tokens of served requests (counted at the first token), by part (the message "
        "role whose content they are, 'template' for the chat template's own tokens, 'prompt' "
        "for completions and when router.prompt_cost is off) and whether the serving prefill "
        "took them from a prefix cache.",
        ("part", "cached"),
    ),
    MetricSpec(
        "pdserve_conversations",
        "gauge",
        "Conversations this router remembers for cache-break detection (their latest prompt).",
    ),
    MetricSpec(
        "pdserve_conversation_state_bytes",
        "gauge",
        "Memory those conversations hold, as router.prompt_cost.conversation_state_max_bytes "
        "bounds it (token ids plus a fixed overhead per conversation).",
    ),
    MetricSpec(
        "pdserve_cache_breaks",
        "counter",
        "Requests whose prompt stopped repeating the previous prompt of their conversation "
        "before its end (a cache break), by the part of the message where it departed.",
        ("part",),
    ),
    MetricSpec(
        "pdserve_cached_prompt_tokens",
        "counter",
        "Prompt tokens the serving prefill took from a prefix cache.",
    ),
    MetricSpec("pdserve_generation_tokens", "counter", "Tokens generated by the decode pool."),
    MetricSpec(
        "pdserve_time_to_first_token_seconds",
        "histogram",
        "Time from arrival at the router to the first token sent to the client.",
        ("input_bucket", "decision"),
    ),
    MetricSpec(
        "pdserve_queue_time_seconds",
        "histogram",
        "Time a request waited before its prefill started on an engine.",
        ("pool",),
    ),
    MetricSpec(
        "pdserve_prefill_time_seconds",
        "histogram",
        "Prefill compute time on the engine.",
        ("input_bucket", "decision"),
    ),
    MetricSpec(
        "pdserve_kv_wait_seconds",
        "histogram",
        "Per remote-prefilled request: the decode engine's wait from accepting it to "
        "scheduling it, i.e. the KV pull plus any wait for a decode slot (the timeline's "
        "kv_transfer stage).",
    ),
    MetricSpec(
        "pdserve_kv_transfer_seconds",
        "histogram",
        "NIXL's own time per KV transfer (read posted to done), measured by the pulling "
        "engine's NixlConnector, by that engine's pool; from the replicas' routing stats.",
        ("pool",),
        measured_by_engines=True,
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_decode_stall_seconds",
        "histogram",
        "Time decode streams waited on engine steps that also carried prefill (a local "
        "prefill or spill-over on a decode engine, a KV-integrity recompute): one observation "
        "per decoding stream per such step, the step's seconds (the inter-token gap that "
        "stream saw on it); the sum is the stream-seconds spent waiting on those steps. "
        "Measured by the engines' schedulers, by pool; from the replicas' routing stats.",
        ("pool",),
        measured_by_engines=True,
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_itl_guard_decisions",
        "counter",
        "Prefills on a decode replica that the ITL guard weighed (router.routing.itl_slo_s; "
        "streams were decoding there), by verdict: worth (prefilled there), not_worth (the "
        "TTFT saved was less than stall_weight x the streams' stall) or no_headroom (a "
        "minimum chunk would take a step over the ITL SLO); the last two went to the prefill "
        "pool.",
        ("verdict",),
    ),
    MetricSpec(
        "pdserve_kv_transfer_bytes",
        "histogram",
        "Bytes per NIXL KV transfer, as the pulling engine's NixlConnector counted them, by "
        "that engine's pool; from the replicas' routing stats.",
        ("pool",),
        measured_by_engines=True,
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_inter_token_latency_seconds",
        "histogram",
        "Time between consecutive tokens streamed to the client.",
    ),
    MetricSpec(
        "pdserve_e2e_latency_seconds",
        "histogram",
        "Time from arrival to the last token.",
        ("input_bucket", "decision"),
    ),
    MetricSpec(
        "pdserve_pool_ready_replicas",
        "gauge",
        "Replicas ready to serve.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_pool_queued_prefill_tokens",
        "gauge",
        "Prompt tokens this router replica sent to the pool whose prefill has not finished "
        "(the sum over router replicas is the cluster's).",
        ("pool",),
    ),
    MetricSpec(
        "pdserve_pool_running_requests",
        "gauge",
        "Requests running on the pool's engines.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_pool_kv_cache_usage_ratio",
        "gauge",
        "Mean KV cache usage (0-1) over the pool's engines.",
        ("pool",),
        scope="cluster",
    ),
    # Elastic pools only (autoscaling.policy 'slo'), as their policy last published them.
    MetricSpec(
        "pdserve_pool_target_replicas",
        "gauge",
        "Replicas Ray Serve's autoscaler aims for (its target, after delays and bounds).",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_pool_wanted_replicas",
        "gauge",
        "Replicas the pool's policy asks Ray Serve for now (while holding: Serve's target), "
        "before Serve's delays and bounds.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_pool_scaling_signal",
        "gauge",
        "The pool's scaling signal per replica (prefill: queued prefill seconds; decode: "
        "KV-cache usage 0-1), averaged by Ray Serve over the look-back window.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_pool_scaling_target",
        "gauge",
        "The target of pdserve_pool_scaling_signal.",
        ("pool",),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_pool_scale_events",
        "counter",
        "Changes of Ray Serve's target replica count seen by this router, by direction.",
        ("pool", "direction"),
        scope="cluster",
    ),
    MetricSpec(
        "pdserve_router_event_loop_lag_seconds",
        "histogram",
        "How much later than asked this router replica's event loop woke a task that sleeps "
        "50 ms, from the replica's first request on: time the loop, which serves every "
        "request of the replica, could run nothing (a blocking call, a full garbage "
        "collection, a starved CPU).",
    ),
    # ---- per tenant (docs/tenants.md): `tenant` values are key-file names only -----------
    MetricSpec(
        "pdserve_tenant_requests",
        "counter",
        "Requests of each tenant answered by this router, by HTTP status (429s included).",
        ("tenant", "status"),
    ),
    MetricSpec(
        "pdserve_tenant_rejected",
        "counter",
        "A tenant's requests refused with 429, by reason: its own limits "
        "(tenant_requests_per_minute, tenant_tokens_per_minute, tenant_concurrency), its tier "
        "queues (fair_queue_full, fair_queue_timeout) or a replica bound at placement.",
        ("tenant", "reason"),
    ),
    MetricSpec(
        "pdserve_tenant_tokens",
        "counter",
        "A tenant's tokens: prompt (every prompt token served), cached (of those, found in a "
        "prefix cache) and output (generated).",
        ("tenant", "kind"),
    ),
    MetricSpec(
        "pdserve_tenant_prefill_seconds",
        "counter",
        "Prefill time the engines reported for a tenant's prompts (scheduled to first token "
        "on the engine that prefilled: the prefill replica, or decode for a local prefill).",
        ("tenant",),
    ),
    MetricSpec(
        "pdserve_tenant_decode_kv_block_seconds",
        "counter",
        "KV block-seconds a tenant's streams held on decode: from first to last token, the "
        "prompt's blocks plus the output's blocks (counted as growing linearly).",
        ("tenant",),
    ),
    MetricSpec(
        "pdserve_tenant_time_to_first_token_seconds",
        "histogram",
        "Time to first token of a tenant's completed requests, at the router.",
        ("tenant",),
    ),
    MetricSpec(
        "pdserve_tenant_inter_token_latency_seconds",
        "histogram",
        "Inter-token latency of a tenant's completed streams, at the router.",
        ("tenant",),
    ),
    MetricSpec(
        "pdserve_tenant_queue_wait_seconds",
        "histogram",
        "How long a tenant's requests waited in a tier's fair queue (0 when the tier had "
        "room; router.tenants).",
        ("tenant", "tier"),
    ),
    MetricSpec(
        "pdserve_tenant_inflight_requests",
        "gauge",
        "A tenant's requests in flight on this router (streams count until they end).",
        ("tenant",),
    ),
)
TENANT_TOKEN_KINDS = ("prompt", "cached", "output")


def input_bucket(num_prompt_tokens: int) -> str:
    """The bounded input-length label for a prompt size."""
    for bound, label in ((256, "0-256"), (1024, "256-1k"), (4096, "1k-4k"), (16384, "4k-16k")):
        if num_prompt_tokens < bound:
            return label
    return "16k+"
