"""One pool's config: its replicas, resources and start/health deadlines (`PoolConfig`) and
the vLLM engine each replica runs (`EngineConfig`).

Part of the deployment config (`pdserve.config.PdserveConfig.prefill` / `.decode`); read by the
Ray Serve app builder (replicas, resources, autoscaling), the engine host (engine args, warm-up,
start deadline, queue polling) and `pdserve up` (core binding). Pure data plus small helpers
that resolve platform defaults; every field is described for `pdserve config-schema`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pdserve.autoscaling.config import AutoscalingConfig
from pdserve.router.policy.strict import StrictModel


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
        default=1 << 30,
        gt=0,
        description="KV cache size on CPU in bytes (vLLM's kv_cache_memory_bytes).",
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
    queue_busy_poll_seconds: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description=(
            "How long an engine's scheduler and worker processes keep polling the shared-"
            "memory queue between them after each message before they sleep until the next "
            "one (vLLM's built-in 1 s: both spin, calling sched_yield, for a second after "
            "every step). On CPU the spinning processes took the cores from the router, the "
            "replicas and the clients for up to a second at a time (machine-wide freezes "
            "under bursts; bench/RESULTS.md, 'CPU-host effects we measured and fixed'). "
            "None = 0.02 s on CPU, vLLM's 1 s on GPU."
        ),
    )
    warmup_prompt_tokens: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Before the replica reports ready, its engine prefills one prompt of this many "
            "tokens (max_tokens 1), so no client request pays for the engine's first step of "
            "a new largest size: on CPU the first prompt longer than any before it prefilled "
            "several times slower than the next one (bench/RESULTS.md, 'Engine warm-up'), "
            "and shorter ones after it were not slow. None = the longest prompt the model "
            "takes (model.max_model_len_tokens - 1) on CPU, 0 (none) on GPU, where vLLM's "
            "start-up profile run and graph capture do this; at most max_model_len_tokens - 1."
        ),
    )
    warmup_burst_prompts: int = Field(
        default=4,
        ge=0,
        description=(
            "After the warm-up prompt, the engine prefills this many distinct prompts at "
            "once (max_tokens 1), together 1.5 x max_num_batched_tokens long (each at most "
            "model.max_model_len_tokens - 1, at most max_num_seqs of them): a step that fills "
            "the token budget with several sequences and splits one, then the split one's "
            "rest, so a client's first burst of long prompts is not the engine's first such "
            "step. On the CPU host it was measured on, it changed no latency measurably either "
            "way (bench/RESULTS.md, 'Engine warm-up'). 0 = none; runs only "
            "when the warm-up prompt does (warmup_prompt_tokens > 0)."
        ),
    )
    extra_engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Further vLLM engine args, passed through verbatim."
    )

    def warmup_tokens(self, platform: str, max_model_len_tokens: int) -> int:
        """The warm-up prompt's length for `platform` (0: no warm-up)."""
        if self.warmup_prompt_tokens is not None:
            return self.warmup_prompt_tokens
        return max_model_len_tokens - 1 if platform == "cpu" else 0

    def warmup_burst_tokens(self, platform: str, max_model_len_tokens: int) -> tuple[int, ...]:
        """The lengths of the warm-up burst's prompts, prefilled at once after the warm-up
        prompt (empty: no burst). They add up to 1.5 x the step budget where the context
        window allows, so the first step is full and splits a prompt."""
        count = min(self.warmup_burst_prompts, self.max_num_seqs)
        if count == 0 or self.warmup_tokens(platform, max_model_len_tokens) == 0:
            return ()
        total = self.max_num_batched_tokens * 3 // 2
        each = min(-(-total // count), max_model_len_tokens - 1)
        return (each,) * count

    def busy_poll_s(self, platform: str) -> float | None:
        """The queue's busy-poll window for `platform` (None: leave vLLM's own)."""
        if self.queue_busy_poll_seconds is not None:
            return self.queue_busy_poll_seconds
        return CPU_QUEUE_BUSY_POLL_S if platform == "cpu" else None


CPU_QUEUE_BUSY_POLL_S = 0.02
"""The default busy-poll window on CPU: longer than the gap between two engine steps under
load, far shorter than vLLM's 1 s."""


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
    cpu_cores_per_replica: list[list[int]] | None = Field(
        default=None,
        description=(
            "CPU only, instead of cpu_cores: one core list per replica; the replica of "
            "node-local rank k (Ray Serve's replica rank) runs on entry k modulo the list's "
            "length. E.g. [[0], [1]] gives two replicas a core each."
        ),
    )
    pin_engine_core: bool = Field(
        default=True,
        description=(
            "CPU only, with cpu_cores or cpu_cores_per_replica: also keep the engine's "
            "scheduler process (vLLM's EngineCore, which busy-waits on its worker while the "
            "engine steps) on the replica's cores. vLLM binds only the worker's OpenMP threads; "
            "left free, the scheduler spins on another pool's core and starves the router and "
            "replicas there. False leaves it to the OS: for comparison, and where several "
            "engines share a core (their schedulers would spin against each other's workers)."
        ),
    )
    max_ongoing_requests: int = Field(
        default=256, gt=0, description="Ray Serve cap on in-flight requests per replica."
    )
    graceful_shutdown_seconds: float = Field(
        default=60.0,
        gt=0,
        description=(
            "A replica being removed (scale-down, redeploy) gets no new requests and has this "
            "long to finish the ones it holds (decode: whole streams) before Ray Serve kills "
            "it; keep it above your longest stream."
        ),
    )
    engine_start_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description=(
            "A replica's engine must be ready (weights loaded, KV cache allocated, warm-up "
            "done) this long after it starts, else the replica kills its engine processes "
            "and fails, and Ray Serve starts a new one (up to its retry limit). It ends "
            "starts that would hang for good (e.g. a NIXL side-channel port taken before the "
            "engine bound it). "
            "Keep it well above your slowest healthy start (the model's load time, plus "
            "compilation and warm-up). None: 240 s on platform cpu (the demo model starts "
            "in 30-160 s), 1200 s on gpu."
        ),
    )
    unresponsive_after_seconds: float = Field(
        default=30.0,
        gt=0,
        description=(
            "A replica pings its engine process every second; an engine that has not answered "
            "for this long (frozen, or stuck in one step) is unhealthy: the routers stop "
            "routing to it and move the prefills waiting on it, and ~3 s later Ray Serve's "
            "health check kills its engine and replaces the replica (losing its streams). "
            "Keep it well above the longest engine step (a "
            "max_num_batched_tokens prefill chunk) and any pause you would rather wait out."
        ),
    )
    engine: EngineConfig = Field(default_factory=EngineConfig, description="vLLM settings.")

    def engine_start_timeout_s(self, platform: str) -> float:
        """The engine's start deadline on `platform` (see engine_start_timeout_seconds)."""
        if self.engine_start_timeout_seconds is not None:
            return self.engine_start_timeout_seconds
        return 240.0 if platform == "cpu" else 1200.0
