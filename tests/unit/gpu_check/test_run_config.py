"""The GPU check's run config, reference server arguments and `config` command (pure + tmp)."""

from __future__ import annotations

import pathlib
import subprocess

import pytest
import yaml
from typer.testing import CliRunner

from pdserve.bench.gpu_check.cli import app
from pdserve.bench.gpu_check.run_config import (
    Ports,
    build_run_config,
    reference_args,
    reference_env,
)
from pdserve.config import ConfigError, load_config

ROOT = pathlib.Path(__file__).resolve().parents[3]
GPU_TEMPLATE = ROOT / "deploy" / "gpu-check.yaml"
CPU_TEMPLATE = ROOT / "deploy" / "local.yaml"


def _template(path: pathlib.Path) -> dict[str, object]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def test_gpu_template_validates_and_shares_one_gpu() -> None:
    """deploy/gpu-check.yaml: cuda, 1 + 1 replicas on half a GPU each, a local model folder,
    fixed KV caches, VRAM KV buffers, no custom Ray resources."""
    cfg = load_config(GPU_TEMPLATE)
    assert cfg.platform == "cuda"
    assert cfg.kv_buffer_device == "cuda"
    assert cfg.kv_transfer.side_channel_host == "auto"
    assert cfg.model.source.startswith("~/") and cfg.model.dtype == "bfloat16"
    total_util = 0.0
    for pool in (cfg.prefill, cfg.decode):
        assert pool.num_replicas == 1 and pool.autoscaling is None
        assert pool.num_gpus == 0.5
        assert pool.ray_resources == {}
        assert pool.engine.extra_engine_args["kv_cache_memory_bytes"] == 2 << 30
        total_util += pool.engine.gpu_memory_utilization
    assert total_util + 0.2 <= 0.9  # + the reference server's default share


def test_build_run_config_points_at_the_model_and_private_ports() -> None:
    template = _template(CPU_TEMPLATE)
    ports = Ports(router=8401, reference=8501, side_channel_base=15801, kv_events_base=16801)
    cfg = build_run_config(template, "/models/tiny", ports, enforce_eager=False)
    assert cfg.model.source == "/models/tiny"
    assert (cfg.router.host, cfg.router.port) == ("127.0.0.1", 8401)
    assert cfg.kv_transfer.side_channel_base_port == 15801
    assert cfg.kv_transfer.kv_events_base_port == 16801
    assert not cfg.prefill.engine.enforce_eager and not cfg.decode.engine.enforce_eager
    assert template["model"] == _template(CPU_TEMPLATE)["model"]  # the template is untouched
    kept = build_run_config(template, "/m", Ports())
    assert kept.prefill.engine.enforce_eager is True  # local.yaml's value when not overridden
    with pytest.raises(ConfigError, match="gpu-check run config"):
        build_run_config({**template, "platform": "tpu"}, "/m", Ports())


def test_reference_args_mirror_the_decode_engine() -> None:
    cpu = build_run_config(_template(CPU_TEMPLATE), "/m", Ports())
    args = reference_args(cpu, "/m", 8500, gpu_memory_utilization=0.2)
    pairs = dict(zip(args[::2], args[1::2], strict=False))
    assert pairs["--model"] == "/m" and pairs["--port"] == "8500"
    assert pairs["--served-model-name"] == cpu.model.served_model_name
    assert pairs["--dtype"] == "float32"
    assert pairs["--max-model-len"] == str(cpu.model.max_model_len_tokens)
    assert "--enforce-eager" in args
    assert "--gpu-memory-utilization" not in args  # cpu: the KV space comes from the env
    assert reference_env(cpu)["VLLM_CPU_KVCACHE_SPACE"] == "1"

    gpu_raw = _template(GPU_TEMPLATE)
    gpu_raw["prefill"]["num_gpus"] = gpu_raw["decode"]["num_gpus"] = 1  # type: ignore[index]
    gpu = build_run_config(gpu_raw, "/m", Ports())  # (valid whatever fractional GPUs do)
    args = reference_args(gpu, "/m", 8500, gpu_memory_utilization=0.2)
    pairs = dict(zip(args[::2], args[1::2], strict=False))
    assert pairs["--gpu-memory-utilization"] == "0.2"
    assert pairs["--kv-cache-memory-bytes"] == str(2 << 30)
    assert pairs["--dtype"] == "bfloat16"
    assert "VLLM_CPU_KVCACHE_SPACE" not in reference_env(gpu)


def test_config_command_writes_a_valid_config_and_sourceable_assignments(
    tmp_path: pathlib.Path,
) -> None:
    model_dir = tmp_path / "model with space"
    out, shell = tmp_path / "config.yaml", tmp_path / "config.env"
    result = CliRunner().invoke(
        app,
        ["config", "--template", str(CPU_TEMPLATE), "--model-dir", str(model_dir),
         "--out", str(out), "--shell-out", str(shell), "--no-eager"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    cfg = load_config(out)
    assert cfg.model.source == str(model_dir.resolve())
    assert cfg.decode.engine.enforce_eager is False
    script = f'source {shell}; printf "%s\\n" "$ROUTER_URL" "$MODEL_NAME" "${{REF_ARGS[@]}}"'
    lines = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert lines[:2] == ["http://127.0.0.1:8400", cfg.model.served_model_name]
    assert lines[2:4] == ["--model", str(model_dir.resolve())]  # one word despite the space
    assert "--enforce-eager" not in lines

    bad = CliRunner().invoke(
        app, ["config", "--template", str(tmp_path / "missing.yaml"), "--model-dir", "/m",
              "--out", str(out)],
    )  # fmt: skip
    assert bad.exit_code == 1
