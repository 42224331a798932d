"""vLLM KV-connector config for one engine role, and the per-replica engine environment.

Pure functions of the pdserve config: the engine wrapper calls them once per replica, before
the engine starts.
"""

from __future__ import annotations

from typing import Any

from pdserve.config import PdserveConfig
from pdserve.engine.queue_poll import QUEUE_BUSY_POLL_ENV
from pdserve.names import PoolName

VERIFIED_CONNECTOR_MODULE = "pdserve.kv_transfer.verified_connector"
_KV_ROLE: dict[PoolName, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}


def kv_transfer_config(config: PdserveConfig, role: PoolName) -> dict[str, Any] | None:
    """The `kv_transfer_config` engine arg for a prefill or decode engine; None (no KV
    connector) in an aggregated deployment, where every engine prefills its own prompts."""
    if config.aggregated:
        return None
    kv = config.kv_transfer
    out: dict[str, Any] = {
        "kv_connector": kv.connector,
        "kv_role": _KV_ROLE[role],
        "kv_buffer_device": config.kv_buffer_device,
        # recompute: a failed pull (or a handoff that fails its check) is prefilled on decode.
        "kv_load_failure_policy": kv.load_failure_policy,
        "kv_connector_extra_config": {
            "backends": list(kv.backends),
            "num_threads": kv.num_threads,
            "kv_lease_duration": kv.kv_lease_seconds,
        },
    }
    if kv.verify_fraction > 0:
        # The same NixlConnector with each handoff checked (docs/kv-integrity.md).
        out["kv_connector_module_path"] = VERIFIED_CONNECTOR_MODULE
    return out


def engine_environment(
    config: PdserveConfig,
    role: PoolName,
    side_channel_port: int,
    node_address: str,
    local_rank: int = 0,
) -> dict[str, str]:
    """Environment variables one replica sets before starting its engine.

    `local_rank`: the replica's rank among its pool's replicas on this node; it picks the
    replica's entry of `cpu_cores_per_replica`.

    `side_channel_port` must be unique per replica on a node (see `ports.pick_free_port`);
    `node_address` is the address remote peers reach this node on (pdserve.node.
    advertised_address), used when side_channel_host is 'auto'.
    """
    kv = config.kv_transfer
    env = {
        # Marks the engine's processes so `pdserve down` can find any that outlive their actor.
        "PDSERVE_ENGINE_ROLE": role,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel_port),
        "VLLM_NIXL_SIDE_CHANNEL_HOST": side_channel_host(config, node_address),
        # Engine-side usage stats phone home; a serving cluster must never do that.
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    env.update(kv.ucx_env)
    busy_poll_s = config.pool(role).engine.busy_poll_s(config.platform)
    if busy_poll_s is not None:  # see pdserve.engine.queue_poll
        env[QUEUE_BUSY_POLL_ENV] = repr(busy_poll_s)
    if config.platform == "cpu":
        # See pdserve.kv_transfer.vllm_plugin for why these two exist.
        env["PDSERVE_NIXL_PROGRESS_THREAD"] = "1" if kv.progress_thread else "0"
        core_list = replica_cores(config, role, local_rank)
        if core_list is not None:
            cores = ",".join(str(c) for c in core_list)
            env["VLLM_CPU_OMP_THREADS_BIND"] = cores
            env["PDSERVE_NIXL_KV_CORES"] = cores
    return env


def replica_cores(config: PdserveConfig, role: PoolName, local_rank: int = 0) -> list[int] | None:
    """The CPU cores one replica's engine runs on (CPU platform): the pool's `cpu_cores`, or
    the `cpu_cores_per_replica` entry of the replica's node-local rank; None = not pinned."""
    if config.platform != "cpu":
        return None
    pool = config.pool(role)
    if pool.cpu_cores_per_replica is not None:
        return pool.cpu_cores_per_replica[local_rank % len(pool.cpu_cores_per_replica)]
    return pool.cpu_cores


def side_channel_host(config: PdserveConfig, node_address: str) -> str:
    """The NIXL side-channel address this replica binds and advertises to decode replicas:
    the config's override, else the node's address."""
    host = config.kv_transfer.side_channel_host
    return node_address if host == "auto" else host
