"""The deployment config: defaults, validation errors that name the field, cross-field rules."""

from __future__ import annotations

import pathlib
import re

import pytest

from pdserve.config import ConfigError, PdserveConfig, load_config, parse_config
from pdserve.engine.warmup import warmup_token_ids

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "deploy").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path: pathlib.Path) -> None:
    cfg = load_config(path)
    assert cfg.model.served_model_name


def test_local_config_keeps_engines_on_separate_cores() -> None:
    cfg = load_config(ROOT / "deploy" / "local.yaml")
    assert cfg.platform == "cpu"
    assert cfg.prefill.cpu_cores and cfg.decode.cpu_cores
    assert not set(cfg.prefill.cpu_cores) & set(cfg.decode.cpu_cores)
    assert cfg.kv_buffer_device == "cpu"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"prefil": {}}, "prefil: Extra inputs are not permitted"),
        ({"prefill": {"num_replicas": 0}}, "prefill.num_replicas"),
        ({"prefill": {"num_replicas": "two"}}, "prefill.num_replicas"),
        (
            {"decode": {"autoscaling": {"min_replicas": 3, "max_replicas": 2}}},
            "min_replicas (3) must be <= max_replicas (2)",
        ),
        ({"kv_transfer": {"buffer_device": "cuda"}}, "needs platform 'cuda'"),
        ({"platform": "tpu"}, "platform"),
        (
            {"platform": "cuda", "prefill": {"num_gpus": 0}},
            "prefill.num_gpus (0.0) must cover tensor_parallel_size",
        ),
        (
            {
                "decode": {
                    "engine": {"enable_chunked_prefill": False, "max_num_batched_tokens": 512}
                }
            },
            "must be >= model.max_model_len_tokens",
        ),
        (
            {"decode": {"engine": {"warmup_prompt_tokens": 4096}}},
            "decode.engine.warmup_prompt_tokens (4096) must be at most "
            "model.max_model_len_tokens - 1 (4095)",
        ),
        ({"router": {"port": 70000}}, "router.port"),
        # The policy is named in one place, router.policy; routing holds its settings only.
        (
            {"router": {"routing": {"policy": "round_robin"}}},
            "router.routing.policy: Extra inputs are not permitted",
        ),
    ],
)
def test_bad_config_names_the_problem(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data, origin="test.yaml")
    assert fragment in str(err.value)
    assert str(err.value).startswith("test.yaml:")


def test_engine_warmup_follows_platform() -> None:
    """None: the longest prompt the model takes on CPU, none on GPU; a set value as set."""
    cpu = PdserveConfig()
    assert cpu.decode.engine.warmup_tokens(cpu.platform, 4096) == 4095
    gpu = PdserveConfig.model_validate(
        {"platform": "cuda", "prefill": {"num_gpus": 1}, "decode": {"num_gpus": 1}}
    )
    assert gpu.prefill.engine.warmup_tokens(gpu.platform, 4096) == 0
    off = PdserveConfig.model_validate({"prefill": {"engine": {"warmup_prompt_tokens": 0}}})
    assert off.prefill.engine.warmup_tokens("cpu", 4096) == 0
    assert off.decode.engine.warmup_tokens("cpu", 4096) == 4095


def test_warmup_prompt_is_ordinary_token_ids() -> None:
    ids = warmup_token_ids(2500)
    assert len(ids) == 2500 and min(ids) == 10 and max(ids) == 999
    assert len(set(ids)) == 990  # it cycles: no special or out-of-vocabulary ids


def test_warmup_burst_prompts_differ_from_the_first_id() -> None:
    """The burst's prompts start on different ids: no prefix-cache block in common."""
    prompts = [warmup_token_ids(1536, first=i) for i in range(5)]
    assert len({p[0] for p in prompts}) == 5
    assert all(len(p) == 1536 and min(p) >= 10 and max(p) <= 999 for p in prompts)
    assert warmup_token_ids(3, first=989) == [999, 10, 11]  # wraps inside the range


def test_warmup_burst_fills_one_and_a_half_step_budgets() -> None:
    """4 prompts adding up to 1.5 budgets by default on CPU: the first step is full and
    splits one prompt; bounded by the context window and max_num_seqs; none when off."""
    cpu = PdserveConfig().decode.engine  # budget 4096
    assert cpu.warmup_burst_tokens("cpu", 4096) == (1536,) * 4
    assert sum(cpu.warmup_burst_tokens("cpu", 4096)) == 6144
    assert cpu.warmup_burst_tokens("cpu", 1024) == (1023,) * 4  # each fits the window
    few_seqs = cpu.model_copy(update={"max_num_seqs": 2})
    assert few_seqs.warmup_burst_tokens("cpu", 4096) == (3072,) * 2
    assert cpu.model_copy(update={"warmup_burst_prompts": 0}).warmup_burst_tokens("cpu", 4096) == ()
    no_warmup = cpu.model_copy(update={"warmup_prompt_tokens": 0})
    assert no_warmup.warmup_burst_tokens("cpu", 4096) == ()  # only after the warm-up prompt
    assert cpu.warmup_burst_tokens("cuda", 4096) == ()  # GPU: no warm-up by default
    assert (
        cpu.model_copy(update={"warmup_prompt_tokens": 100}).warmup_burst_tokens("cuda", 4096)
        == (1536,) * 4
    )


def test_buffer_device_auto_follows_platform() -> None:
    gpu = PdserveConfig.model_validate(
        {"platform": "cuda", "prefill": {"num_gpus": 1}, "decode": {"num_gpus": 1}}
    )
    assert gpu.kv_buffer_device == "cuda"
    assert PdserveConfig().kv_buffer_device == "cpu"


def test_unreadable_and_non_mapping_files(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)


def test_aggregated_mode_runs_only_the_decode_pool_without_a_kv_connector() -> None:
    from pdserve.engine.args import engine_args

    cfg = PdserveConfig.model_validate({"mode": "aggregated", "decode": {"num_replicas": 2}})
    assert cfg.aggregated and cfg.pools == ("decode",)
    assert engine_args(cfg, "decode", "/m")["kv_transfer_config"] is None
    # The config travels to every replica as its JSON dump: it must validate again.
    assert PdserveConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    assert PdserveConfig().pools == ("prefill", "decode")
    assert engine_args(PdserveConfig(), "decode", "/m")["kv_transfer_config"]["kv_role"] == (
        "kv_consumer"
    )


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"mode": "aggregated", "prefill": {"num_replicas": 2}}, "remove the `prefill` block"),
        ({"mode": "colocated"}, "mode"),
        ({"decode": {"cpu_cores": [0], "cpu_cores_per_replica": [[1]]}}, "not both"),
        ({"decode": {"cpu_cores_per_replica": [[0], []]}}, "every entry needs a core"),
    ],
)
def test_aggregated_and_core_layout_errors_name_the_fix(
    data: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        parse_config(data)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "deploy" / "keys").glob("*.yaml")), ids=lambda p: p.name
)
def test_shipped_tenant_key_files_validate(path: pathlib.Path) -> None:
    import yaml

    from pdserve.tenant_config import TenantFile

    TenantFile.model_validate(yaml.safe_load(path.read_text()))
