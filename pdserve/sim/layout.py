"""Which engines a deployment runs and how they share cores (pure data), from a pdserve
config or from a search point of `pdserve tune`."""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.config import PdserveConfig
from pdserve.names import PoolName
from pdserve.router.policy.config import PolicyConfig
from pdserve.sim.engine import EngineLimits

CPU_BLOCK_TOKENS = 128
"""vLLM's KV block size on CPU when the config leaves it to the platform."""
GPU_BLOCK_TOKENS = 16
DEMO_KV_BYTES_PER_TOKEN = 1024


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One engine: its replica id, pool, scheduler limits, and the device group it shares
    (engines of one group split its compute: k busy engines each run k times slower)."""

    engine_id: str
    pool: PoolName
    limits: EngineLimits
    device_group: str


@dataclass(frozen=True, slots=True)
class SimLayout:
    """A deployment as the simulator sees it."""

    name: str
    aggregated: bool
    engines: tuple[EngineSpec, ...]
    policy: PolicyConfig
    stream_batch_interval_s: float
    kv_pull_between_prefill_steps: bool = False
    """CPU with NIXL's progress thread off: the prefill engine's loop progresses a KV pull, so
    a pull waits while that engine is inside a step."""

    def pool(self, pool: PoolName) -> tuple[EngineSpec, ...]:
        return tuple(e for e in self.engines if e.pool == pool)

    @property
    def num_devices(self) -> int:
        return len({e.device_group for e in self.engines})

    def describe(self) -> str:
        """E.g. '1P1D' or 'aggregated x2'."""
        if self.aggregated:
            return f"aggregated x{len(self.engines)}"
        return f"{len(self.pool('prefill'))}P{len(self.pool('decode'))}D"


def layout_from_config(config: PdserveConfig, name: str | None = None) -> SimLayout:
    """The engines `config` runs (fixed replica counts: num_replicas, or the autoscaler's
    initial count), with their core groups: `cpu_cores_per_replica` entries, else the pool's
    `cpu_cores`, else one device per engine (GPU: each replica has its own GPUs)."""
    engines: list[EngineSpec] = []
    for pool in config.pools:
        pc = config.pool(pool)
        eng = pc.engine
        block = eng.block_size_tokens or (
            CPU_BLOCK_TOKENS if config.platform == "cpu" else GPU_BLOCK_TOKENS
        )
        # The demo model's KV bytes per token (float32, 2 layers). For other models the KV
        # capacity, hence KV usage (a routing tie-breaker and the 0.95 filter) and the prefix
        # cache's size, are approximate; on GPU the config does not give the cache size.
        bytes_per_token = DEMO_KV_BYTES_PER_TOKEN
        limits = EngineLimits(
            max_num_seqs=eng.max_num_seqs,
            max_num_batched_tokens=eng.max_num_batched_tokens,
            chunk_tokens=eng.prefill_chunk_tokens or eng.max_num_batched_tokens,
            block_size_tokens=block,
            kv_capacity_tokens=max(block, eng.cpu_kv_cache_bytes // bytes_per_token),
        )
        count = pc.num_replicas
        if pc.autoscaling is not None:
            count = max(pc.autoscaling.min_replicas, min(count, pc.autoscaling.max_replicas))
        for i in range(count):
            cores: list[int] | None = pc.cpu_cores
            if pc.cpu_cores_per_replica is not None:
                cores = pc.cpu_cores_per_replica[i % len(pc.cpu_cores_per_replica)]
            group = (
                "cores:" + ",".join(map(str, sorted(cores)))
                if cores is not None and config.platform == "cpu"
                else f"{pool}{i}"
            )
            engines.append(EngineSpec(f"{pool}{i}", pool, limits, group))
    policy = config.router.routing.model_copy(
        update={"block_size_tokens": engines[0].limits.block_size_tokens}
    )
    return SimLayout(
        name=name or config.app_name,
        aggregated=config.aggregated,
        engines=tuple(engines),
        policy=policy,
        stream_batch_interval_s=config.router.stream_batch_interval_ms / 1000.0,
        kv_pull_between_prefill_steps=(
            config.platform == "cpu" and not config.kv_transfer.progress_thread
        ),
    )
