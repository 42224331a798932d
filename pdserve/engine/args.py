"""vLLM engine arguments for one role, from the pdserve config (pure)."""

from __future__ import annotations

from typing import Any

from pdserve.config import PdserveConfig
from pdserve.itl_budget import ItlSettings
from pdserve.kv_transfer.connector_config import kv_transfer_config
from pdserve.names import PoolName


def engine_args(
    config: PdserveConfig,
    role: PoolName,
    model_path: str,
    kv_events_endpoint: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for `vllm.AsyncEngineArgs` for a prefill or decode engine.

    `kv_events_endpoint`: where the engine publishes KV cache events, `tcp://HOST:PORT`, bound
    by the publisher (None = no events).
    """
    pool = config.pool(role)
    eng = pool.engine
    args: dict[str, Any] = {
        "model": model_path,
        "served_model_name": config.model.served_model_name,
        "max_model_len": config.model.max_model_len_tokens,
        "dtype": config.model.dtype,
        "seed": config.model.seed,
        "max_num_seqs": eng.max_num_seqs,
        "max_num_batched_tokens": eng.max_num_batched_tokens,
        "enable_prefix_caching": eng.enable_prefix_caching,
        "enable_chunked_prefill": eng.enable_chunked_prefill,
        "enforce_eager": eng.enforce_eager,
        "tensor_parallel_size": eng.tensor_parallel_size,
        "scheduling_policy": eng.scheduling_policy,
        "kv_transfer_config": kv_transfer_config(config, role),
        # pdserve collects engine stats through its own stat logger (pdserve.engine.stats);
        # vLLM's default loggers would only add periodic log lines.
        "disable_log_stats": True,
    }
    if eng.prefill_chunk_tokens is not None:
        args["long_prefill_token_threshold"] = eng.prefill_chunk_tokens
    routing = config.router.routing
    if role == "decode" and config.mode == "disaggregated" and routing.itl_slo_s is not None:
        # Prompts prefilled on a decode engine are chunked within its streams' ITL budget
        # (pdserve.engine.itl_scheduler; the router predicts with the same rule).
        sync = config.platform != "cuda"
        args["scheduler_cls"] = "pdserve.engine.itl_scheduler." + (
            "ItlBudgetScheduler" if sync else "ItlBudgetAsyncScheduler"
        )
        cost = routing.cost_model
        args["additional_config"] = ItlSettings(
            itl_slo_s=routing.itl_slo_s,
            min_chunk_tokens=routing.min_prefill_chunk_tokens,
            per_token_s=cost.per_token_s,
            per_token_sq_s=cost.per_token_sq_s,
            decode_base_s=cost.decode_base_s,
            decode_per_seq_s=cost.decode_per_seq_s,
            decode_per_context_token_s=cost.decode_per_context_token_s,
        ).to_config()
    if kv_events_endpoint is not None:
        args["kv_events_config"] = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": kv_events_endpoint,
        }
    if eng.block_size_tokens is not None:
        args["block_size"] = eng.block_size_tokens
    if config.platform == "cuda":
        args["gpu_memory_utilization"] = eng.gpu_memory_utilization
    else:
        args["kv_cache_memory_bytes"] = eng.cpu_kv_cache_bytes
    args.update(eng.extra_engine_args)
    return args
