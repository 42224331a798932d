"""The demo model's sizes: architecture, dtype and weight scales per size (pure data).

Used by :mod:`pdserve.demo_model` to build the model; importable without torch, e.g. to
compute a size's parameter count, weight bytes or KV cache bytes per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from pdserve.demo_tokenizer import TOKENIZER_VOCAB_SIZE

DemoSize = Literal["tiny", "gpu-check"]
DEFAULT_SIZE: Final[DemoSize] = "tiny"

VOCAB_MULTIPLE: Final = 64

_DTYPE_BYTES: Final = {"float32": 4, "bfloat16": 2}


def model_vocab_size(tokenizer_vocab_size: int) -> int:
    """Round the tokenizer vocabulary up to a multiple of ``VOCAB_MULTIPLE``."""
    return -(-tokenizer_vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


MODEL_VOCAB_SIZE: Final = model_vocab_size(TOKENIZER_VOCAB_SIZE)


@dataclass(frozen=True)
class DemoPreset:
    """Architecture, dtype and weight scales of one demo model size (pure data).

    Every norm weight is 1; every other matrix is drawn from N(0, std) with std
    ``initializer_range`` (also written to config.json), except the attention and MLP
    projections of the layers when ``layer_initializer_range`` is set.

    The gpu-check size computes in bfloat16, whose rounding is ~65,000 times coarser than
    float32's. With one std (0.0577) for all matrices, its greedy choices flipped at ~40% of
    positions between bfloat16 and float32 (the layers amplified rounding noise). Layer
    weights of std 0.01 bring that to ~1%, the rounding floor (median |logit difference|
    0.01 against a median top-1/top-2 gap of 0.44, logits spread like the tiny model's, std
    ~2.3), while every output still depends on the whole context. Measured on CPU with
    transformers, teacher-forced argmax over 237 prompt positions; replacing the first half
    of the prompt changed the argmax at every position of the second half.
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    initializer_range: float
    dtype: Literal["float32", "bfloat16"]
    layer_initializer_range: float | None = None

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) (grouped-query attention)"
            )
        if self.num_attention_heads * self.head_dim != self.hidden_size:
            raise ValueError(
                f"num_attention_heads x head_dim ({self.num_attention_heads} x {self.head_dim}) "
                f"must equal hidden_size ({self.hidden_size})"
            )
        if self.dtype not in _DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPE_BYTES)}, got {self.dtype!r}")

    def std_of(self, name: str) -> float:
        """The std of the normal distribution the (non-norm) parameter ``name`` is drawn from."""
        if name.startswith("model.layers.") and self.layer_initializer_range is not None:
            return self.layer_initializer_range
        return self.initializer_range

    def num_parameters(self, vocab_size: int = MODEL_VOCAB_SIZE) -> int:
        """Parameters of the model (untied embedding and output head, no biases)."""
        hidden = self.hidden_size
        q_dim = self.num_attention_heads * self.head_dim
        kv_dim = self.num_key_value_heads * self.head_dim
        attention = 2 * hidden * q_dim + 2 * hidden * kv_dim
        mlp = 3 * hidden * self.intermediate_size
        per_layer = attention + mlp + 2 * hidden  # + input and post-attention norms
        return 2 * vocab_size * hidden + self.num_hidden_layers * per_layer + hidden

    def weight_bytes(self, vocab_size: int = MODEL_VOCAB_SIZE) -> int:
        """Bytes of all weights in ``dtype`` (model.safetensors is this plus a small header)."""
        return self.num_parameters(vocab_size) * _DTYPE_BYTES[self.dtype]

    def kv_cache_bytes_per_token(self) -> int:
        """KV cache bytes one token takes in all layers when the cache uses ``dtype``."""
        per_layer = 2 * self.num_key_value_heads * self.head_dim * _DTYPE_BYTES[self.dtype]
        return self.num_hidden_layers * per_layer


PRESETS: Final[Mapping[DemoSize, DemoPreset]] = MappingProxyType(
    {
        # The original demo model: its bytes must not change (tests and caches rely on them).
        "tiny": DemoPreset(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            initializer_range=0.2,
            dtype="float32",
        ),
        # ~208 M parameters, ~415 MB in bfloat16, 16 KiB of KV per token (GQA, 3 query heads
        # per KV head): a 1,500-token prompt moves ~24 MB from prefill to decode. Created in
        # seconds on a GPU box's CPU.
        "gpu-check": DemoPreset(
            hidden_size=1536,
            intermediate_size=4096,
            num_hidden_layers=8,
            num_attention_heads=12,
            num_key_value_heads=4,
            head_dim=128,
            initializer_range=0.0577,  # 0.2 * sqrt(128 / 1536): the tiny model's row norms
            dtype="bfloat16",
            layer_initializer_range=0.01,  # greedy robust to bfloat16 rounding (see above)
        ),
    }
)
SIZES: Final[tuple[DemoSize, ...]] = tuple(PRESETS)
