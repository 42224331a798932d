"""Unit tests for pdserve.demo_model (no vLLM; builds tiny models in temporary dirs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer

from pdserve.demo_model import MARKER_FILE, create_demo_model, is_demo_model
from pdserve.demo_tokenizer import BOS_TOKEN, EOT_TOKEN, SPECIAL_TOKENS

ASSISTANT_HEADER = "<|start_header_id|>assistant<|end_header_id|>\n\n"
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tell me a story about a dog."},
]


def _render(tokenizer: Any, messages: list[dict[str, Any]], *, add_generation_prompt: bool) -> str:
    """Render ``messages`` with the tokenizer's chat template to a string."""
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    assert isinstance(text, str)
    return text


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build a seed-0 demo model once for the whole module."""
    out_dir = tmp_path_factory.mktemp("demo") / "model"
    assert create_demo_model(out_dir, seed=0) == out_dir
    return out_dir


def test_deterministic_bytes(demo_dir: Path, tmp_path: Path) -> None:
    """Same seed gives identical bytes; another seed changes only the weights."""
    again = create_demo_model(tmp_path / "again", seed=0)
    other = create_demo_model(tmp_path / "other", seed=1)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (demo_dir / name).read_bytes(), name
    # The seed changes the weights only; the tokenizer is seed-independent.
    assert (other / "model.safetensors").read_bytes() != (
        demo_dir / "model.safetensors"
    ).read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (demo_dir / "tokenizer.json").read_bytes()


def test_chat_template_single_bos_and_generation_prompt(demo_dir: Path) -> None:
    """The chat template yields exactly one bos and ends with the assistant header."""
    tokenizer: Any = AutoTokenizer.from_pretrained(str(demo_dir))
    assert tokenizer.bos_token == BOS_TOKEN
    assert tokenizer.pad_token is not None
    assert tokenizer.pad_token_id != tokenizer.eos_token_id

    text = _render(tokenizer, MESSAGES, add_generation_prompt=True)
    assert text.startswith(BOS_TOKEN)
    assert text.count(BOS_TOKEN) == 1
    assert text.endswith(EOT_TOKEN + ASSISTANT_HEADER)

    encoded = tokenizer.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True)
    ids = list(encoded["input_ids"] if not isinstance(encoded, list) else encoded)
    assert ids[0] == tokenizer.bos_token_id
    assert ids.count(tokenizer.bos_token_id) == 1
    header_ids = tokenizer.encode(ASSISTANT_HEADER, add_special_tokens=False)
    assert ids[-len(header_ids) :] == header_ids
    # Tokenizing the rendered text must not add a second bos either.
    assert tokenizer(text)["input_ids"].count(tokenizer.bos_token_id) == 1
    assert tokenizer.decode(ids) == text

    closed = _render(tokenizer, MESSAGES, add_generation_prompt=False)
    assert closed.endswith(EOT_TOKEN)
    assert not closed.endswith(ASSISTANT_HEADER)

    parts: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Tell me a story."}]}
    ]
    as_parts = _render(tokenizer, parts, add_generation_prompt=True)
    as_string = _render(
        tokenizer, [{"role": "user", "content": "Tell me a story."}], add_generation_prompt=True
    )
    assert as_parts == as_string
    tool = _render(
        tokenizer, [*MESSAGES, {"role": "tool", "content": "42"}], add_generation_prompt=False
    )
    assert "<|start_header_id|>tool<|end_header_id|>\n\n42<|eot_id|>" in tool


def test_config_architecture_and_sizes(demo_dir: Path) -> None:
    """config.json, generation_config.json and the weights have the documented shape."""
    config = json.loads((demo_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["hidden_size"] == 128
    assert config["intermediate_size"] == 256
    assert config["num_hidden_layers"] == 2
    assert config["num_attention_heads"] == 4
    assert config["num_key_value_heads"] == 2
    assert config["head_dim"] == 32
    assert config["max_position_embeddings"] == 8192
    assert config["vocab_size"] == 2048
    assert config["vocab_size"] % 64 == 0
    assert config["tie_word_embeddings"] is False
    assert config["dtype"] == "float32"
    assert config["rope_parameters"]["rope_type"] == "default"

    generation = json.loads((demo_dir / "generation_config.json").read_text())
    assert generation.get("do_sample", False) is False
    for key in ("temperature", "top_k", "top_p", "repetition_penalty"):
        assert key not in generation

    tokenizer = json.loads((demo_dir / "tokenizer.json").read_text())
    assert len(tokenizer["model"]["vocab"]) <= config["vocab_size"]

    with safe_open(str(demo_dir / "model.safetensors"), framework="pt") as weights:
        assert weights.get_tensor("model.embed_tokens.weight").shape == (2048, 128)
        lm_head = weights.get_tensor("lm_head.weight")
        assert lm_head.shape == (2048, 128)
        assert lm_head.dtype == torch.float32
        assert weights.get_tensor("model.layers.0.self_attn.k_proj.weight").shape == (64, 128)
        # Special tokens can never be produced: their output-head rows are zero.
        assert not lm_head[: len(SPECIAL_TOKENS)].any()


def test_is_demo_model(demo_dir: Path, tmp_path: Path) -> None:
    """is_demo_model recognises the folder and rejects others."""
    assert is_demo_model(demo_dir)
    assert json.loads((demo_dir / MARKER_FILE).read_text()) == {
        "name": "pdserve-demo",
        "seed": 0,
        "format_version": 1,
    }
    assert not is_demo_model(tmp_path / "missing")
    assert not is_demo_model(tmp_path)
    assert [p.name for p in demo_dir.parent.iterdir()] == ["model"]  # no temp leftovers


def test_idempotent_and_replacement_rules(tmp_path: Path) -> None:
    """Reuse, rebuild and refusal rules of create_demo_model."""
    out_dir = tmp_path / "model"
    rng_state = torch.random.get_rng_state()
    create_demo_model(out_dir, seed=3)
    assert torch.equal(torch.random.get_rng_state(), rng_state)
    stamp = (out_dir / "model.safetensors").stat().st_mtime_ns
    create_demo_model(out_dir, seed=3)
    assert (out_dir / "model.safetensors").stat().st_mtime_ns == stamp

    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    (incomplete / MARKER_FILE).write_text((out_dir / MARKER_FILE).read_text())
    assert not is_demo_model(incomplete)
    create_demo_model(incomplete, seed=3)  # a broken demo folder is rebuilt
    assert is_demo_model(incomplete)

    create_demo_model(out_dir, seed=4)  # a demo model of another seed is replaced
    assert json.loads((out_dir / MARKER_FILE).read_text())["seed"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["incomplete", "model"]

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not a model")
    with pytest.raises(FileExistsError):
        create_demo_model(foreign)
    assert (foreign / "keep.txt").read_text() == "not a model"

    with pytest.raises(ValueError, match="seed"):
        create_demo_model(tmp_path / "bad", seed=-1)
