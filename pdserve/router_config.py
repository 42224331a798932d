"""The router's part of the deployment config: HTTP, API keys, admission bounds, deadlines,
fallbacks and routing (pure data; `pdserve.config.PdserveConfig.router` holds one).
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from pdserve.names import PolicyName
from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.strict import StrictModel
from pdserve.tenant_config import TenantsConfig


class AuthConfig(StrictModel):
    """API keys the router enforces on every /v1 route (none configured: the API is open)."""

    api_key_env: str = Field(
        default="PDSERVE_API_KEY",
        min_length=1,
        description=(
            "Environment variable holding accepted API keys, comma-separated (several keys let "
            "you rotate: add the new one, move clients, drop the old one); they belong to the "
            "`default` tenant. Read by each router replica at start; unset or empty = no keys "
            "from the environment."
        ),
    )
    api_key_file: str | None = Field(
        default=None,
        description=(
            "A file with more accepted keys (e.g. a mounted Kubernetes Secret): either the "
            "tenant format (YAML `tenants:` with each tenant's name, weight, priority, keys "
            "and limits; docs/tenants.md), or one key per line (each key its own tenant; "
            "blank lines and lines starting with # are ignored). None = no file."
        ),
    )
    protect_metrics: bool = Field(
        default=False,
        description="Also require a key on GET /metrics (off: Prometheus scrapes it openly).",
    )


class DeadlineConfig(StrictModel):
    """How long each stage of a request may take before the router gives up on it (and
    aborts the engines' work). A miss before the first token is a 504; after it, an SSE error
    event ends the stream."""

    prefill_seconds: float = Field(
        default=60.0, gt=0, description="A remote prefill call, from dispatch to its result."
    )
    first_token_seconds: float = Field(
        default=120.0, gt=0, description="Arrival at the router to the first generated token."
    )
    stream_idle_seconds: float = Field(
        default=30.0,
        gt=0,
        description=(
            "Streaming: the longest gap between two chunks from decode (a frozen or dead "
            "engine is detected within this). Non-streaming requests get their tokens at "
            "the end, so only request_seconds bounds them after the first token."
        ),
    )
    request_seconds: float = Field(
        default=600.0, gt=0, description="Arrival at the router to the last token."
    )
    busy_replica_wait_seconds: float = Field(
        default=5.0,
        gt=0,
        description=(
            "How long a request waits for the replica its policy chose while that replica is "
            "at max_ongoing_requests before it goes to the least-loaded one instead; must stay "
            "below kv_transfer.kv_lease_seconds, or a decode may arrive after its KV "
            "lease ran out."
        ),
    )
    sse_keepalive_seconds: float = Field(
        default=15.0,
        gt=0,
        description="Streaming: send an SSE comment this often so proxies keep the stream open.",
    )


PrefillFallback = Literal["retry_then_local", "retry", "local", "fail"]
DecodeFallback = Literal["retry", "fail"]


class FallbackConfig(StrictModel):
    """What the router does when a stage fails before the client saw anything."""

    prefill: PrefillFallback = Field(
        default="retry_then_local",
        description=(
            "A remote prefill that fails, times out or whose replica died: `retry` it once on "
            "another prefill replica; `local`: prefill on the chosen decode replica instead "
            "(no KV transfer); `retry_then_local`: retry, and if that fails too (or there is "
            "no other prefill replica) prefill locally; `fail`: answer the error."
        ),
    )
    decode: DecodeFallback = Field(
        default="retry",
        description=(
            "A decode that fails before its first token (an engine error, a dead replica): "
            "`retry` it once on another healthy decode replica, prefilling there (the KV "
            "handed off for the first one is released); `fail`: answer the error. A decode "
            "that fails after its first token is never retried (the client has tokens)."
        ),
    )


class AdmissionConfig(StrictModel):
    """Bounded work per tier: a request beyond a bound gets 429 with Retry-After at once,
    instead of queueing without limit. None turns a bound off. The defaults are generous
    backstops, not tuned to a machine: tighten them to your measured capacity."""

    max_inflight_requests: int | None = Field(
        default=512,
        gt=0,
        description="Requests one router replica serves at once (a stream counts until it ends).",
    )
    max_prefill_backlog_seconds: float | None = Field(
        default=30.0,
        gt=0,
        description=(
            "Predicted prefill wait (cost model seconds) where a request would prefill: the "
            "engine's own reported queue from every router, or this router's in-flight work "
            "there when larger; a request that would push the replica that prefills it (prefill "
            "replica, or decode for a local prefill) past this is refused (a replica with "
            "nothing queued always takes one). Short prompts still get in when only the "
            "long-prompt lane is full: they go to other replicas or prefill on decode."
        ),
    )
    max_decode_streams: int | None = Field(
        default=512,
        gt=0,
        description="Streams this router may have open on one decode replica.",
    )


class PromptCostConfig(StrictModel):
    """Per-request prompt cost (cached and computed tokens by part) and cache-break detection
    (docs/context-cost.md)."""

    enabled: bool = Field(
        default=True,
        description=(
            "Report each request's prompt tokens by part (system, user, assistant, tool, "
            "template), cached and computed: the x-pdserve-prompt-cost header, the "
            "`pdserve_prompt_cost` usage field and the `part` label of "
            "pdserve_prompt_tokens_total. Off: no header or usage field, and the metric counts "
            "every prompt as part 'prompt'. Costs one more chat-template render per chat "
            "request (the template's skeleton)."
        ),
    )
    detect_cache_breaks: bool = Field(
        default=True,
        description=(
            "Compare each request with the previous one of its conversation and report where "
            "the prompt stopped repeating it (the message, and the tokens it cost): the "
            "`cache_break` entry of the prompt cost and pdserve_cache_breaks_total. A "
            "conversation is known by the x-pdserve-conversation header, else the request's "
            "`user` field (when conversation_key_from_user), else (chat only) its opening: the "
            "tokens up to the end of its first non-system message. Conversations are scoped "
            "by the request's Authorization header (one API key's prompts are never compared "
            "with another's). Needs `enabled`."
        ),
    )
    conversation_key_from_user: bool = Field(
        default=True,
        description=(
            "Use the OpenAI `user` field as the conversation key when no "
            "x-pdserve-conversation header is sent (turn off when clients send one `user` for "
            "many concurrent conversations: their prompts would be compared with each other)."
        ),
    )
    conversation_state_max_bytes: int = Field(
        default=64 << 20,
        ge=1 << 16,
        description=(
            "Memory the router replica may hold for remembered conversations (each one's "
            "latest prompt tokens, 4 bytes a token, plus about 200 bytes); the least recently "
            "used are forgotten beyond it (their next step is then not compared)."
        ),
    )


class RouterAutoscalingConfig(StrictModel):
    """Ray Serve's request-based autoscaling of the router replicas (its default policy: the
    number of replicas follows the requests in flight per replica)."""

    min_replicas: int = Field(default=1, ge=1, description="Fewest router replicas kept running.")
    max_replicas: int = Field(
        default=2,
        ge=1,
        description=(
            "Most router replicas ever started (also the size of the per-replica metrics port "
            "range: router.metrics_port + 0 .. max_replicas - 1)."
        ),
    )
    target_ongoing_requests: float = Field(
        default=64.0,
        gt=0,
        description="Requests in flight per router replica to aim for (a stream counts until "
        "it ends).",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"router.autoscaling.min_replicas ({self.min_replicas}) must be <= "
                f"max_replicas ({self.max_replicas})"
            )
        return self


# Default distance from router.port to the first per-replica metrics port: just above the
# port the local cluster moves Serve's proxy to with direct ingress (router.port + 1000), and
# below the engines' NIXL side-channel and KV-event ports (15600+) for routers under 14600.
METRICS_PORT_OFFSET = 1001


class RouterConfig(StrictModel):
    """The OpenAI-compatible HTTP router."""

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8000, ge=1, le=65535, description="HTTP port.")
    num_replicas: int = Field(
        default=1,
        ge=1,
        description=(
            "Router replicas (Ray Serve ingress replicas), all behind the one URL on `port` "
            "(with more than one, or with `autoscaling`, HTTP goes through Ray Serve's proxy; "
            "docs/several-routers.md says what is per replica). With `autoscaling`: the "
            "replicas started first (kept within its bounds)."
        ),
    )
    autoscaling: RouterAutoscalingConfig | None = Field(
        default=None,
        description="Scale the router replicas on requests in flight. None = num_replicas fixed.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description=(
            "First port of the per-replica metrics range: each router replica serves its own "
            "GET /metrics on the first free port of [metrics_port, metrics_port + the most "
            "router replicas), on `host`, so that Prometheus and `pdserve top` scrape every "
            "replica (the /metrics on `port` answers for whichever replica got the request). "
            "None = port + 1001."
        ),
    )
    max_request_bytes: int = Field(
        default=8 << 20,
        gt=0,
        description="Largest accepted request body; a larger one gets 413 before it is parsed.",
    )
    auth: AuthConfig = Field(
        default_factory=AuthConfig, description="API keys (Authorization: Bearer <key>)."
    )
    admission: AdmissionConfig = Field(
        default_factory=AdmissionConfig, description="Bounds per tier (429 beyond them)."
    )
    tenants: TenantsConfig = Field(
        default_factory=TenantsConfig,
        description=(
            "Sharing saturated tiers between tenants by weight (the tenants, their keys and "
            "limits are in the key file, router.auth.api_key_file; docs/tenants.md)."
        ),
    )
    deadlines: DeadlineConfig = Field(
        default_factory=DeadlineConfig, description="Per-stage timeouts (504 when missed)."
    )
    fallback: FallbackConfig = Field(
        default_factory=FallbackConfig, description="Recovery from a failed stage."
    )
    allow_client_priority: bool = Field(
        default=False,
        description=(
            "Honour the request body's `priority` (lower is served first). Off: every client "
            "gets priority 0 and only the router's policy orders the engines' queues, so no "
            "client can jump the queue."
        ),
    )
    default_max_tokens: int = Field(
        default=256, gt=0, description="max_tokens when the client sends none."
    )
    num_cpus: float = Field(default=0.0, ge=0, description="Ray CPUs reserved for the router.")
    policy: PolicyName = Field(
        default="pdserve",
        description=(
            "Routing policy: 'pdserve' (prefill-cost- and cache-aware), or the baselines "
            "'round_robin' and 'least_loaded'. With allow_policy_override, a request's "
            "x-pdserve-policy header overrides it."
        ),
    )
    allow_policy_override: bool = Field(
        default=False,
        description=(
            "Honour the per-request x-pdserve-policy and x-pdserve-kv-verify headers (local "
            "and benchmark configs only)."
        ),
    )
    routing: PolicyConfig = Field(
        default_factory=PolicyConfig,
        description=(
            "Settings of the routing policy (which one decides is `policy`): scorer weights, "
            "local-prefill thresholds, lanes, priorities and cost model."
        ),
    )
    prefix_index: Literal["auto", "events", "approximate"] = Field(
        default="auto",
        description=(
            "How the router learns which prefix blocks each replica holds: 'events' (vLLM KV "
            "cache events), 'approximate' (routing history), 'auto' = events when the engines "
            "publish them."
        ),
    )
    access_log: bool = Field(
        default=False,
        description="Ray Serve's per-request access log lines (cost CPU on every hop).",
    )
    otlp_traces_endpoint: str | None = Field(
        default=None,
        description=(
            "OTLP/HTTP traces endpoint (e.g. http://otel-collector:4318/v1/traces): emit one "
            "span tree per request (router, prefill, KV transfer, decode). None = no tracing."
        ),
    )
    routing_stats_period_seconds: float = Field(
        default=0.5, gt=0, description="How often Ray Serve polls each replica's load."
    )
    prompt_cost: PromptCostConfig = Field(
        default_factory=PromptCostConfig,
        description="Prompt cost by part and cache-break detection, for agent builders.",
    )
    stream_batch_interval_ms: float = Field(
        default=50.0,
        ge=0,
        le=1000,
        description=(
            "Streaming: decode replicas send tokens to the router at most once per this "
            "interval (the first token and the finish go at once), so a stream costs a few "
            "messages instead of one per token. 0 = one message per engine step. Ray Serve "
            "LLM's default is also 50 ms."
        ),
    )

    @model_validator(mode="after")
    def _metrics_ports_fit(self) -> Self:
        last = self.first_metrics_port + self.max_replicas - 1
        if last > 65535:
            raise ValueError(
                f"router metrics ports {self.first_metrics_port}..{last} pass 65535: set "
                "router.metrics_port lower"
            )
        return self

    @property
    def max_replicas(self) -> int:
        """The most router replicas this config may run."""
        return self.autoscaling.max_replicas if self.autoscaling else self.num_replicas

    @property
    def several_replicas(self) -> bool:
        """More than one router replica may run (HTTP then goes through Serve's proxy)."""
        return self.max_replicas > 1

    @property
    def first_metrics_port(self) -> int:
        """The first per-replica metrics port (`metrics_port`, default port + 1001)."""
        return (
            self.metrics_port if self.metrics_port is not None else self.port + METRICS_PORT_OFFSET
        )

    @property
    def metrics_ports(self) -> range:
        """The ports router replicas serve their own /metrics on (one each)."""
        return range(self.first_metrics_port, self.first_metrics_port + self.max_replicas)
