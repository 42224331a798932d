"""KV cache bytes per token of a model, from its Hugging Face config (pure).

bytes/token = 2 (K and V) × layers × KV heads × head dim × bytes per element. The tests use it
to check the bytes NIXL reports for a handoff (blocks read × block size × bytes/token).
"""

from __future__ import annotations

from typing import Any

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8": 1}


def kv_bytes_per_token(hf_config: dict[str, Any], dtype: str = "auto") -> int:
    """KV bytes per token for a decoder-only transformer config (config.json as a dict).

    `dtype`: the engine's KV dtype; 'auto' takes the config's torch_dtype/dtype.
    """
    text = hf_config.get("text_config") or hf_config
    layers = int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    if dtype == "auto":
        dtype = str(text.get("torch_dtype") or text.get("dtype") or "bfloat16")
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"unknown KV dtype {dtype!r}; expected one of {sorted(_DTYPE_BYTES)}")
    return 2 * layers * kv_heads * head_dim * _DTYPE_BYTES[dtype]
