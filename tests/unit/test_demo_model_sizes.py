"""Demo model sizes: the presets' arithmetic, the gpu-check model as written, and that the
default tiny model did not change (pdserve.demo_model, pdserve.demo_presets; no vLLM)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import LlamaConfig, LlamaForCausalLM

from pdserve.demo_model import MARKER_FILE, create_demo_model, demo_model_size, is_demo_model
from pdserve.demo_presets import MODEL_VOCAB_SIZE, PRESETS, SIZES, DemoPreset
from pdserve.demo_tokenizer import SPECIAL_TOKENS

# sha256 of model.safetensors of the tiny model (seed 0) as every release before sizes made
# it; tests, caches and peers' results rely on these bytes.
TINY_SEED0_SHA256 = "741965e617c6aefec48cb6624442ff65f400fe6ad2bc4a6cf157114db42e17d2"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_tiny_is_unchanged_and_the_default(tmp_path: Path) -> None:
    default = create_demo_model(tmp_path / "default", seed=0)
    explicit = create_demo_model(tmp_path / "explicit", seed=0, size="tiny")
    assert _sha256(default / "model.safetensors") == TINY_SEED0_SHA256
    for name in ("model.safetensors", "config.json", "tokenizer.json", MARKER_FILE):
        assert (explicit / name).read_bytes() == (default / name).read_bytes(), name
    assert "size" not in json.loads((default / MARKER_FILE).read_text())
    assert demo_model_size(default) == "tiny"


@pytest.mark.parametrize("size", SIZES)
def test_parameter_count_matches_transformers(size: str) -> None:
    """The preset's arithmetic equals the parameters of the model transformers builds (on the
    meta device: no memory, no weights)."""
    preset = PRESETS[size]  # type: ignore[index]
    config = LlamaConfig(
        vocab_size=MODEL_VOCAB_SIZE,
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_key_value_heads,
        head_dim=preset.head_dim,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert preset.num_parameters() == sum(p.numel() for p in model.parameters())


def test_gpu_check_preset_is_in_the_intended_range() -> None:
    preset = PRESETS["gpu-check"]
    assert 1024 <= preset.hidden_size <= 2048
    assert preset.num_hidden_layers >= 4
    assert preset.dtype == "bfloat16"
    assert 300e6 <= preset.weight_bytes() <= 500e6
    # A 1,500-token prompt moves >= 16 MiB of KV from prefill to decode.
    assert preset.kv_cache_bytes_per_token() * 1500 >= 16 << 20
    assert PRESETS["tiny"].weight_bytes() < 4e6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_key_value_heads": 8}, "multiple of num_key_value_heads"),
        ({"head_dim": 64}, "must equal hidden_size"),
        ({"dtype": "float16"}, "dtype must be one of"),
    ],
)
def test_preset_rejects_inconsistent_shapes(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(PRESETS["gpu-check"], **change)  # type: ignore[arg-type]


def test_std_of() -> None:
    gpu, tiny = PRESETS["gpu-check"], PRESETS["tiny"]
    assert gpu.std_of("model.layers.3.mlp.up_proj.weight") == gpu.layer_initializer_range
    assert gpu.std_of("lm_head.weight") == gpu.std_of("model.embed_tokens.weight")
    assert tiny.std_of("model.layers.0.self_attn.q_proj.weight") == tiny.initializer_range
    assert isinstance(gpu, DemoPreset)


def test_unknown_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size must be one of tiny, gpu-check"):
        create_demo_model(tmp_path / "m", size="huge")  # type: ignore[arg-type]
    assert not (tmp_path / "m").exists()


def test_a_model_of_another_size_is_replaced(tmp_path: Path) -> None:
    """A folder whose marker names another size is rebuilt (cheaply: tiny over "gpu-check")."""
    out = create_demo_model(tmp_path / "m", seed=0)
    marker = json.loads((out / MARKER_FILE).read_text())
    (out / MARKER_FILE).write_text(json.dumps({**marker, "size": "gpu-check"}))
    assert demo_model_size(out) == "gpu-check" and is_demo_model(out)
    create_demo_model(out, seed=0)
    assert demo_model_size(out) == "tiny"
    assert _sha256(out / "model.safetensors") == TINY_SEED0_SHA256
    assert demo_model_size(tmp_path / "missing") is None


@pytest.fixture(scope="module")
def gpu_check_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gpu-check model, written once (~415 MB; a few seconds)."""
    started = time.perf_counter()
    out = create_demo_model(tmp_path_factory.mktemp("gpu") / "model", seed=0, size="gpu-check")
    assert time.perf_counter() - started < 60
    return out


def test_gpu_check_model_as_written(gpu_check_dir: Path) -> None:
    preset = PRESETS["gpu-check"]
    config = json.loads((gpu_check_dir / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    assert config["hidden_size"] == preset.hidden_size
    assert config["num_hidden_layers"] == preset.num_hidden_layers
    assert config["num_key_value_heads"] == preset.num_key_value_heads
    assert config["vocab_size"] == MODEL_VOCAB_SIZE
    assert json.loads((gpu_check_dir / MARKER_FILE).read_text()) == {
        "name": "pdserve-demo", "seed": 0, "format_version": 1, "size": "gpu-check",
    }  # fmt: skip
    assert demo_model_size(gpu_check_dir) == "gpu-check"
    size_bytes = (gpu_check_dir / "model.safetensors").stat().st_size
    assert preset.weight_bytes() <= size_bytes < preset.weight_bytes() + (1 << 20)
    with safe_open(str(gpu_check_dir / "model.safetensors"), framework="pt") as weights:
        names = list(weights.keys())
        assert len(names) == 2 + 1 + 9 * preset.num_hidden_layers
        lm_head = weights.get_tensor("lm_head.weight")
        assert lm_head.dtype == torch.bfloat16
        assert not lm_head[: len(SPECIAL_TOKENS)].any()  # special tokens are never emitted
        layer = weights.get_tensor("model.layers.0.mlp.down_proj.weight").float()
        assert layer.std().item() == pytest.approx(preset.layer_initializer_range, rel=0.02)
        embed = weights.get_tensor("model.embed_tokens.weight").float()
        assert embed.std().item() == pytest.approx(preset.initializer_range, rel=0.02)
        assert torch.equal(weights.get_tensor("model.norm.weight"), torch.ones(1536).bfloat16())


def test_gpu_check_model_is_reused_not_rebuilt(gpu_check_dir: Path) -> None:
    stamp = (gpu_check_dir / "model.safetensors").stat().st_mtime_ns
    started = time.perf_counter()
    create_demo_model(gpu_check_dir, seed=0, size="gpu-check")
    assert time.perf_counter() - started < 1
    assert (gpu_check_dir / "model.safetensors").stat().st_mtime_ns == stamp
