"""The GPU check's run config and its aggregated reference server's arguments (pure).

`build_run_config` takes a checked-in template (deploy/gpu-check.yaml on cuda,
deploy/local.yaml for the CPU dry run), points it at the model folder the check created and
at the check's private ports, and validates it with pdserve's own schema. `reference_args`
gives the `vllm.entrypoints.openai.api_server` arguments of one aggregated engine with the
decode pool's engine settings (the oracle of the identity check).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pdserve.config import PdserveConfig, parse_config


@dataclass(frozen=True)
class Ports:
    """Ports of one check run, apart from a default `pdserve up` (8000, 15600, 16600)."""

    router: int = 8400
    reference: int = 8500
    side_channel_base: int = 15800
    kv_events_base: int = 16800


def build_run_config(
    template: dict[str, Any],
    model_path: str,
    ports: Ports,
    enforce_eager: bool | None = None,
) -> PdserveConfig:
    """`template` (a parsed YAML mapping, not modified) serving the folder `model_path` on
    `ports`; `enforce_eager` overrides both pools' setting when not None. Raises
    pdserve.config.ConfigError naming every bad field."""
    data = copy.deepcopy(template)
    data.setdefault("model", {})["source"] = model_path
    router = data.setdefault("router", {})
    router["host"] = "127.0.0.1"
    router["port"] = ports.router
    kv = data.setdefault("kv_transfer", {})
    kv["side_channel_base_port"] = ports.side_channel_base
    kv["kv_events_base_port"] = ports.kv_events_base
    if enforce_eager is not None:
        for role in ("prefill", "decode"):
            data.setdefault(role, {}).setdefault("engine", {})["enforce_eager"] = enforce_eager
    return parse_config(data, origin="gpu-check run config")


def reference_args(
    cfg: PdserveConfig, model_path: str, port: int, gpu_memory_utilization: float
) -> list[str]:
    """Arguments (after `python -m vllm.entrypoints.openai.api_server`) of an aggregated
    server with the decode engine's settings. On cuda it gets `gpu_memory_utilization` of
    the GPU and the decode engine's `kv_cache_memory_bytes`, if set, so it fits beside the
    cluster; on cpu see `reference_env`."""
    eng = cfg.decode.engine
    args = [
        "--model", model_path,
        "--served-model-name", cfg.model.served_model_name,
        "--dtype", cfg.model.dtype,
        "--max-model-len", str(cfg.model.max_model_len_tokens),
        "--max-num-batched-tokens", str(max(eng.max_num_batched_tokens,
                                            cfg.prefill.engine.max_num_batched_tokens)),
        "--max-num-seqs", str(eng.max_num_seqs),
        "--seed", str(cfg.model.seed),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--disable-log-stats",
    ]  # fmt: skip
    if eng.enforce_eager:
        args.append("--enforce-eager")
    if eng.block_size_tokens is not None:
        args += ["--block-size", str(eng.block_size_tokens)]
    if cfg.platform == "cuda":
        args += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
        kv_bytes = eng.extra_engine_args.get("kv_cache_memory_bytes")
        if kv_bytes is not None:
            args += ["--kv-cache-memory-bytes", str(int(kv_bytes))]
    return args


def reference_env(cfg: PdserveConfig) -> dict[str, str]:
    """Environment of the reference server: on cpu its KV cache size (whole GiB, at least 1)
    as the decode engine's; nothing on cuda."""
    env = {"VLLM_NO_USAGE_STATS": "1"}
    if cfg.platform == "cpu":
        gib = max(1, cfg.decode.engine.cpu_kv_cache_bytes >> 30)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(gib)
    return env
