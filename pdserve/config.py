"""The one deployment config: model, prefill and decode pools, KV transfer, router.

One YAML file describes a deployment. The CLI (`pdserve up`), Ray Serve's `serve run` (through
`pdserve.deploy.app:build_app`) and the Helm chart all consume this schema. Pure data: no I/O
beyond `load_config`, which reads one file.
"""

from __future__ import annotations

import pathlib
from typing import Any, Literal, Self

import yaml
from pydantic import Field, ValidationError, model_validator

from pdserve.router.policy.config import PolicyConfig
from pdserve.router.policy.strict import StrictModel
from pdserve.router.policy.types import PolicyName

DEMO_MODEL_ID = "pdserve-demo"


class ModelConfig(StrictModel):
    """Which model both pools serve (they must serve the same one)."""

    source: str = Field(
        default="demo",
        description=(
            "'demo' for the built-in tiny model made locally, a local Hugging Face model "
            "folder, or a hub id (only where the machine has internet)."
        ),
    )
    served_model_name: str = Field(
        default=DEMO_MODEL_ID, min_length=1, description="Model id clients send as `model`."
    )
    demo_model_dir: str = Field(
        default="~/.cache/pdserve/demo-model",
        description="Where the demo model is created when source is 'demo'.",
    )
    max_model_len_tokens: int = Field(
        default=4096, gt=0, description="Context window (prompt + completion) in tokens."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="Weights/activation dtype passed to vLLM."
    )
    seed: int = Field(default=0, description="Engine seed (same on every replica).")


class AutoscalingConfig(StrictModel):
    """Ray Serve autoscaling bounds for one pool."""

    min_replicas: int = Field(default=1, ge=0, description="Fewest replicas kept running.")
    max_replicas: int = Field(default=1, ge=1, description="Most replicas ever started.")
    target_ongoing_requests: float = Field(
        default=8.0, gt=0, description="Ongoing requests per replica the autoscaler aims for."
    )
    upscale_delay_seconds: float = Field(default=30.0, ge=0, description="Wait before adding.")
    downscale_delay_seconds: float = Field(default=300.0, ge=0, description="Wait before removing.")

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"autoscaling.min_replicas ({self.min_replicas}) must be <= "
                f"max_replicas ({self.max_replicas})"
            )
        return self


class EngineConfig(StrictModel):
    """vLLM engine settings for one role."""

    max_num_seqs: int = Field(default=64, gt=0, description="Concurrent sequences per engine.")
    max_num_batched_tokens: int = Field(
        default=4096, gt=0, description="Token budget of one engine step."
    )
    enable_prefix_caching: bool = Field(default=True, description="Reuse cached prompt blocks.")
    enable_chunked_prefill: bool = Field(default=True, description="Split long prefills.")
    enforce_eager: bool = Field(
        default=False, description="Skip torch compile (faster start, slower steps)."
    )
    block_size_tokens: int | None = Field(
        default=None, gt=0, description="KV block size; None lets the platform choose."
    )
    cpu_kv_cache_bytes: int = Field(
        default=1 << 30, gt=0, description="KV cache size on CPU (VLLM_CPU_KVCACHE_SPACE)."
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Fraction of GPU memory vLLM may use."
    )
    tensor_parallel_size: int = Field(default=1, ge=1, description="GPUs per engine.")
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        default="priority",
        description="Engine queue order; 'priority' lets the router put short prefills first.",
    )
    prefill_chunk_tokens: int | None = Field(
        default=None,
        gt=0,
        description=(
            "Chunked prefill: most prompt tokens one request may prefill per engine step, so "
            "short prompts interleave with long ones (vLLM long_prefill_token_threshold). "
            "None = the whole step budget."
        ),
    )
    export_vllm_metrics: bool = Field(
        default=True,
        description=(
            "Export the engine's own vllm: metrics through Ray's metrics export (one scrape "
            "endpoint per node), as vLLM's API server would on /metrics."
        ),
    )
    kv_events: bool = Field(
        default=True,
        description=(
            "Publish KV cache events (block stored/removed) over ZMQ so the router knows "
            "which prefix blocks each replica holds; off = approximate routing history."
        ),
    )
    extra_engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Further vLLM engine args, passed through verbatim."
    )


class PoolConfig(StrictModel):
    """One pool (prefill or decode): replicas, autoscaling, resources, engine."""

    num_replicas: int = Field(default=1, ge=1, description="Replicas when autoscaling is off.")
    autoscaling: AutoscalingConfig | None = Field(
        default=None, description="Ray Serve autoscaling bounds; None = fixed num_replicas."
    )
    num_cpus: float = Field(
        default=0.0, ge=0, description="Ray CPUs reserved per replica (0 on a laptop)."
    )
    num_gpus: float = Field(default=0.0, ge=0, description="Ray GPUs reserved per replica.")
    ray_resources: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Custom Ray resources each replica needs, e.g. {pdserve_prefill: 1} to pin the pool "
            "to the Kubernetes worker group that advertises that resource."
        ),
    )
    cpu_cores: list[int] | None = Field(
        default=None,
        description=(
            "CPU only: cores this pool's engines run on (OpenMP binding). None = all cores. "
            "Keep prefill and decode apart on small machines."
        ),
    )
    max_ongoing_requests: int = Field(
        default=256, gt=0, description="Ray Serve cap on in-flight requests per replica."
    )
    unresponsive_after_seconds: float = Field(
        default=30.0,
        gt=0,
        description=(
            "A replica pings its engine process every second; an engine that has not answered "
            "for this long (frozen, or stuck in one step) is unhealthy: the router stops "
            "routing to it and Ray Serve's health check kills its engine and replaces the "
            "replica (losing its streams). Keep it well above the longest engine step (a "
            "max_num_batched_tokens prefill chunk) and any pause you would rather wait out."
        ),
    )
    engine: EngineConfig = Field(default_factory=EngineConfig, description="vLLM settings.")


class KVTransferConfig(StrictModel):
    """How KV moves from prefill to decode (vLLM NixlConnector over NIXL)."""

    connector: Literal["NixlConnector"] = Field(
        default="NixlConnector", description="vLLM KV connector."
    )
    buffer_device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="NIXL buffer device; auto = cuda on GPU, cpu otherwise."
    )
    kv_events_base_port: int = Field(
        default=16600,
        ge=1024,
        le=65000,
        description="First port of the engines' KV-event publishers (one per replica).",
    )
    side_channel_base_port: int = Field(
        default=15600,
        ge=1024,
        le=65000,
        description="First NIXL side-channel port; each replica takes the next free one.",
    )
    side_channel_host: str = Field(
        default="auto",
        description=(
            "Address other replicas reach this replica's NIXL side channel on; 'auto' = "
            "127.0.0.1 on cpu (one machine), the Ray node IP on cuda (many nodes)."
        ),
    )
    backends: list[str] = Field(default_factory=lambda: ["UCX"], description="NIXL backends.")
    num_threads: int = Field(default=1, ge=1, description="NIXL/UCX worker threads per engine.")
    progress_thread: bool = Field(
        default=False,
        description=(
            "CPU only: run NIXL's UCX progress thread (it busy-polls one core per engine). "
            "Off by default on CPU, where the engine loop progresses transfers itself; GPU "
            "nodes always keep NIXL's default."
        ),
    )
    abort_request_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description=(
            "The lease: a prefill engine frees KV that no decode pulled (nor released) after "
            "this long (VLLM_NIXL_ABORT_REQUEST_TIMEOUT)."
        ),
    )
    load_failure_policy: Literal["recompute", "fail"] = Field(
        default="recompute",
        description=(
            "A decode engine that cannot load a request's KV (NIXL error, lease expired, "
            "prefill engine gone): `recompute` the prompt on the decode engine (vLLM "
            "kv_load_failure_policy; counted in pdserve_kv_transfer_failures_total"
            '{pool="decode"}), or `fail` the request (502 decode_failed).'
        ),
    )
    ucx_env: dict[str, str] = Field(
        default_factory=dict,
        description="UCX_* environment for engines (e.g. UCX_TLS); empty = UCX defaults.",
    )


class AuthConfig(StrictModel):
    """API keys the router enforces on every /v1 route (none configured: the API is open)."""

    api_key_env: str = Field(
        default="PDSERVE_API_KEY",
        min_length=1,
        description=(
            "Environment variable holding the accepted API keys, comma-separated (several "
            "keys let you rotate: add the new one, move clients, drop the old one). Read by "
            "each router replica at start; unset or empty = no keys from the environment."
        ),
    )
    api_key_file: str | None = Field(
        default=None,
        description=(
            "A file with more accepted keys, one per line (e.g. a mounted Kubernetes Secret); "
            "blank lines and lines starting with # are ignored. None = no file."
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
            "below kv_transfer.abort_request_timeout_seconds, or a decode may arrive after "
            "its KV lease ran out."
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
            "Estimated prefill seconds (cost model) this router may have queued on one prefill "
            "replica; a request that would push its chosen replica past this is refused (a "
            "replica with nothing queued always takes one). Short prompts still get in when "
            "only the long-prompt lane is full: they go to other replicas or prefill on decode."
        ),
    )
    max_decode_streams: int | None = Field(
        default=512,
        gt=0,
        description="Streams this router may have open on one decode replica.",
    )


class RouterConfig(StrictModel):
    """The OpenAI-compatible HTTP router."""

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8000, ge=1, le=65535, description="HTTP port.")
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
            "Honour a per-request x-pdserve-policy header (local and benchmark configs only)."
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


class PdserveConfig(StrictModel):
    """A whole deployment."""

    platform: Literal["cpu", "cuda"] = Field(default="cpu", description="Engine build in use.")
    app_name: str = Field(default="pdserve", description="Ray Serve application name.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Served model.")
    prefill: PoolConfig = Field(default_factory=PoolConfig, description="Prefill pool.")
    decode: PoolConfig = Field(default_factory=PoolConfig, description="Decode pool.")
    kv_transfer: KVTransferConfig = Field(
        default_factory=KVTransferConfig, description="KV transfer."
    )
    router: RouterConfig = Field(default_factory=RouterConfig, description="HTTP router.")

    @model_validator(mode="after")
    def _cross_field(self) -> Self:
        wait = self.router.deadlines.busy_replica_wait_seconds
        if wait >= self.kv_transfer.abort_request_timeout_seconds:
            raise ValueError(
                f"router.deadlines.busy_replica_wait_seconds ({wait}) must be below "
                "kv_transfer.abort_request_timeout_seconds "
                f"({self.kv_transfer.abort_request_timeout_seconds}): a decode that waits "
                "longer finds its KV freed"
            )
        if self.platform == "cpu" and self.kv_transfer.buffer_device == "cuda":
            raise ValueError("kv_transfer.buffer_device 'cuda' needs platform 'cuda'")
        for role, pool in (("prefill", self.prefill), ("decode", self.decode)):
            if self.platform == "cuda" and pool.num_gpus < pool.engine.tensor_parallel_size:
                raise ValueError(
                    f"{role}.num_gpus ({pool.num_gpus}) must cover "
                    f"tensor_parallel_size ({pool.engine.tensor_parallel_size}) on cuda"
                )
            eng = pool.engine
            if not eng.enable_chunked_prefill and (
                eng.max_num_batched_tokens < self.model.max_model_len_tokens
            ):
                raise ValueError(
                    f"{role}.engine.max_num_batched_tokens ({eng.max_num_batched_tokens}) must "
                    f"be >= model.max_model_len_tokens ({self.model.max_model_len_tokens}) "
                    "when chunked prefill is off"
                )
        return self

    @property
    def kv_buffer_device(self) -> Literal["cpu", "cuda"]:
        """The NIXL buffer device after resolving 'auto'."""
        if self.kv_transfer.buffer_device == "auto":
            return "cuda" if self.platform == "cuda" else "cpu"
        return self.kv_transfer.buffer_device


class ConfigError(ValueError):
    """A config file that cannot be used; the message says what to fix."""


def parse_config(data: dict[str, Any], *, origin: str = "config") -> PdserveConfig:
    """Validate a config mapping; raise ConfigError naming every bad field."""
    try:
        return PdserveConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{origin}: {problems}") from exc


def load_config(path: pathlib.Path) -> PdserveConfig:
    """Read and validate one YAML config file."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(raw).__name__}")
    return parse_config(raw, origin=str(path))
