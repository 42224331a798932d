"""The typed KV handoff and the per-role connector config (pure)."""

from __future__ import annotations

import pytest

from pdserve.config import PdserveConfig
from pdserve.engine.args import engine_args
from pdserve.kv_transfer.connector_config import (
    engine_environment,
    kv_transfer_config,
    side_channel_host,
)
from pdserve.kv_transfer.params import HandoffError, KVHandoff

VLLM_PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [[3, 4, 5]],
    "remote_engine_id": "eng-1",
    "remote_request_id": "req-p",
    "remote_host": "10.0.0.7",
    "remote_port": 15600,
    "tp_size": 1,
    "remote_num_tokens": 300,
    "remote_prefill_cached_tokens": 128,
    "transfer_mode": "pull",
}


def test_handoff_round_trips_vllm_params() -> None:
    handoff = KVHandoff.from_vllm(VLLM_PARAMS)
    assert handoff.num_blocks == 3
    assert handoff.remote_prefill_cached_tokens == 128
    back = handoff.to_decode_params()
    assert back == VLLM_PARAMS  # unknown keys (tp_size, transfer_mode) pass through


def test_handoff_accepts_flat_block_list() -> None:
    handoff = KVHandoff.from_vllm({**VLLM_PARAMS, "remote_block_ids": [1, 2]})
    assert handoff.remote_block_ids == [[1, 2]]


@pytest.mark.parametrize("params", [None, {}, {"remote_block_ids": [1]}])
def test_missing_params_is_a_clear_error(params: dict[str, object] | None) -> None:
    with pytest.raises(HandoffError, match="kv_transfer_params"):
        KVHandoff.from_vllm(params)


@pytest.mark.parametrize(
    ("platform", "role", "kv_role", "device"),
    [
        ("cpu", "prefill", "kv_producer", "cpu"),
        ("cpu", "decode", "kv_consumer", "cpu"),
        ("cuda", "prefill", "kv_producer", "cuda"),
        ("cuda", "decode", "kv_consumer", "cuda"),
    ],
)
def test_connector_config_per_role_and_platform(
    platform: str, role: str, kv_role: str, device: str
) -> None:
    cfg = PdserveConfig.model_validate(
        {"platform": platform, "prefill": {"num_gpus": 1}, "decode": {"num_gpus": 1}}
    )
    kv = kv_transfer_config(cfg, role)  # type: ignore[arg-type]
    assert kv["kv_connector"] == "NixlConnector"
    assert kv["kv_role"] == kv_role
    assert kv["kv_buffer_device"] == device
    assert kv["kv_load_failure_policy"] == "recompute"
    args = engine_args(cfg, role, "/models/x")  # type: ignore[arg-type]
    assert args["enable_prefix_caching"] is True
    assert args["kv_transfer_config"] == kv


def test_kv_load_failure_policy_is_configurable() -> None:
    cfg = PdserveConfig.model_validate({"kv_transfer": {"load_failure_policy": "fail"}})
    assert kv_transfer_config(cfg, "decode")["kv_load_failure_policy"] == "fail"


def test_engine_environment_sets_port_cores_and_marker() -> None:
    cfg = PdserveConfig.model_validate(
        {"prefill": {"cpu_cores": [0]}, "decode": {"cpu_cores": [1]}}
    )
    env = engine_environment(cfg, "decode", 15612, "10.0.0.7")
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "15612"
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.7"  # the node's address (auto)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert env["PDSERVE_NIXL_KV_CORES"] == "1"
    assert env["PDSERVE_NIXL_PROGRESS_THREAD"] == "0"
    assert env["PDSERVE_ENGINE_ROLE"] == "decode"
    gpu = PdserveConfig.model_validate(
        {"platform": "cuda", "prefill": {"num_gpus": 1}, "decode": {"num_gpus": 1}}
    )
    assert "PDSERVE_NIXL_PROGRESS_THREAD" not in engine_environment(gpu, "prefill", 1, "10.0.0.7")


def test_side_channel_host_is_the_node_address_unless_overridden() -> None:
    assert side_channel_host(PdserveConfig(), "10.0.0.7") == "10.0.0.7"
    fixed = PdserveConfig.model_validate({"kv_transfer": {"side_channel_host": "192.168.5.5"}})
    assert side_channel_host(fixed, "10.0.0.7") == "192.168.5.5"


def test_the_cpu_kv_cache_is_sized_in_exact_bytes() -> None:
    """cpu_kv_cache_bytes reaches vLLM as kv_cache_memory_bytes, not rounded to whole GiB (the
    engine server also drops an inherited VLLM_CPU_KVCACHE_SPACE, vLLM's legacy GiB knob)."""
    cfg = PdserveConfig.model_validate({"decode": {"engine": {"cpu_kv_cache_bytes": 48 << 20}}})
    assert engine_args(cfg, "decode", "/m")["kv_cache_memory_bytes"] == 48 << 20
    assert engine_args(cfg, "prefill", "/m")["kv_cache_memory_bytes"] == 1 << 30
    assert "VLLM_CPU_KVCACHE_SPACE" not in engine_environment(cfg, "decode", 1, "127.0.0.1")
    gpu = PdserveConfig.model_validate(
        {"platform": "cuda", "prefill": {"num_gpus": 1}, "decode": {"num_gpus": 1}}
    )
    assert "kv_cache_memory_bytes" not in engine_args(gpu, "decode", "/m")


def test_each_replica_gets_its_own_cores_by_local_rank() -> None:
    cfg = PdserveConfig.model_validate(
        {"mode": "aggregated", "decode": {"num_replicas": 3, "cpu_cores_per_replica": [[0], [1]]}}
    )
    binds = [engine_environment(cfg, "decode", 1, "127.0.0.1", rank) for rank in range(3)]
    assert [env["VLLM_CPU_OMP_THREADS_BIND"] for env in binds] == ["0", "1", "0"]


def test_the_lease_goes_where_vllm_reads_it_and_verify_loads_the_checked_connector() -> None:
    cfg = PdserveConfig.model_validate({"kv_transfer": {"kv_lease_seconds": 12}})
    for role in ("prefill", "decode"):
        kv = kv_transfer_config(cfg, role)  # type: ignore[arg-type]
        assert kv["kv_connector_extra_config"]["kv_lease_duration"] == 12
        assert kv["kv_connector"] == "NixlConnector"  # vLLM checks connectors by this name
        assert kv["kv_connector_module_path"] == "pdserve.kv_transfer.verified_connector"
        env = engine_environment(cfg, role, 15600, "127.0.0.1")  # type: ignore[arg-type]
        assert not any("ABORT_REQUEST_TIMEOUT" in k for k in env)  # vLLM no longer reads it
    sampled = PdserveConfig.model_validate({"kv_transfer": {"verify": "sample:0.1"}})
    assert "kv_connector_module_path" in kv_transfer_config(sampled, "decode")  # type: ignore[operator]
    off = PdserveConfig.model_validate({"kv_transfer": {"verify": "off"}})
    assert "kv_connector_module_path" not in kv_transfer_config(off, "decode")  # type: ignore[operator]


def test_the_verified_connector_keeps_vllms_connector_name_and_class() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPullConnector

    from pdserve.kv_transfer import verified_connector

    assert verified_connector.NixlConnector.__name__ == "NixlConnector"
    assert issubclass(verified_connector.NixlConnector, NixlPullConnector)


@pytest.mark.parametrize(
    ("verify", "fraction"), [("all", 1.0), ("off", 0.0), ("sample:0.25", 0.25), ("sample:1", 1.0)]
)
def test_verify_settings(verify: str, fraction: float) -> None:
    cfg = PdserveConfig.model_validate({"kv_transfer": {"verify": verify}})
    assert cfg.kv_transfer.verify_fraction == fraction


@pytest.mark.parametrize("bad", ["some", "sample:", "sample:1.5", "sample:-0.1", "ALL"])
def test_bad_verify_settings_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="verify"):
        PdserveConfig.model_validate({"kv_transfer": {"verify": bad}})


def test_a_lease_shorter_than_the_busy_replica_wait_is_refused() -> None:
    with pytest.raises(ValueError, match="kv_lease_seconds"):
        PdserveConfig.model_validate(
            {"kv_transfer": {"kv_lease_seconds": 6},
             "router": {"deadlines": {"busy_replica_wait_seconds": 6}}}
        )  # fmt: skip
    with pytest.raises(ValueError, match="kv_lease_seconds"):
        PdserveConfig.model_validate({"kv_transfer": {"kv_lease_seconds": 5}})
