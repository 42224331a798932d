"""Deterministic, fully offline Llama demo models for pdserve.

:func:`create_demo_model` builds a Hugging Face model folder (a random-weight
``LlamaForCausalLM`` plus a locally trained byte-level BPE tokenizer with a Llama-3-style
chat template) that vLLM and ``transformers`` can load without any network access. It is
meant for tests, demos and smoke checks, not for producing meaningful text.

Sizes (:data:`pdserve.demo_presets.PRESETS`; all share the tokenizer, vocabulary 2048 and
context 8192):

* ``"tiny"`` (default): float32, 2 layers, hidden 128, about 0.8 M parameters (3.3 MB).
  Its files are byte-identical to those of the single-size releases of this module.
* ``"gpu-check"``: bfloat16, 8 layers, hidden 1536, 12 query and 4 KV heads of 128, about
  208 M parameters (415 MB) and 16 KiB of KV cache per token, so that KV transfers between
  prefill and decode GPUs are not trivially small (scripts/gpu-check.sh).

Folder layout written by :func:`create_demo_model`::

    config.json              LlamaConfig of the size (layers, hidden, dtype), vocab 2048
    generation_config.json   greedy-neutral (do_sample=False, no temperature/top-k/top-p)
    model.safetensors        weights in the size's dtype, deterministic from ``seed``
    tokenizer.json           byte-level BPE, 2048 tokens including 6 special tokens
    tokenizer_config.json    bos/eos/pad, add_bos_token=False, chat_template
    special_tokens_map.json  bos/eos/pad
    chat_template.jinja      the same chat template (transformers>=5 layout)
    pdserve_demo.json        marker: {"name": "pdserve-demo", "seed": ..., "format_version": 1}
                             plus "size" for every size but "tiny"

Properties relied upon by callers:

* Byte-identical ``model.safetensors`` and ``tokenizer.json`` for the same ``seed`` and size
  (and the same installed library versions). The tokenizer depends on neither.
* The chat template emits ``<|begin_of_text|>`` itself and the tokenizer never adds it, so
  ``tokenizer.apply_chat_template(..., tokenize=True)`` yields exactly one bos token.
* The output head rows of special tokens and of tokens that do not decode to printable ASCII
  are zero, so greedy (and in practice any) decoding only ever emits printable ASCII text
  and never emits an end-of-sequence token: generations always run to ``max_tokens``
  (finish reason ``"length"``) unless a stop string matches.
* The tiny size uses a large ``initializer_range`` (0.2), giving logits with a spread of a
  few units and a median top-1/top-2 gap of about 0.5, so greedy decoding is robust to small
  numerical differences between backends (exact near-ties remain possible but rare). The
  gpu-check size uses smaller layer weights for the same robustness in bfloat16 (see
  :class:`DemoPreset`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pdserve.demo_presets import (
    DEFAULT_SIZE,
    PRESETS,
    SIZES,
    DemoPreset,
    DemoSize,
    model_vocab_size,
)
from pdserve.demo_tokenizer import (
    BOS_TOKEN,
    EOS_TOKEN,
    EOT_TOKEN,
    MODEL_MAX_LENGTH,
    PAD_TOKEN,
    emittable_token_ids,
    save_tokenizer,
    train_tokenizer,
    write_json,
)

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

DEMO_MODEL_NAME: Final = "pdserve-demo"
FORMAT_VERSION: Final = 1
MARKER_FILE: Final = "pdserve_demo.json"

MAX_POSITION_EMBEDDINGS: Final = MODEL_MAX_LENGTH
ROPE_THETA: Final = 500000.0
RMS_NORM_EPS: Final = 1e-5

REQUIRED_FILES: Final[tuple[str, ...]] = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    MARKER_FILE,
)


def _init_weights(
    shapes: Mapping[str, tuple[int, ...]],
    preset: DemoPreset,
    seed: int,
    emittable_ids: list[int],
) -> dict[str, torch.Tensor]:
    """Deterministic weights for the parameter ``shapes`` of a model of ``preset``.

    Norm weights are ones; every other matrix is N(0, ``preset.std_of(name)``) drawn in float32
    from a dedicated generator in sorted parameter-name order (then cast to the preset's
    dtype), so the result does not depend on how ``transformers`` initialises or orders
    modules. Output-head rows of tokens not in ``emittable_ids`` are zeroed so those tokens
    can never win an argmax.
    """
    import torch

    dtype = getattr(torch, preset.dtype)
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    weights: dict[str, torch.Tensor] = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            tensor = torch.ones(shape, dtype=torch.float32)
        else:
            tensor = torch.normal(
                0.0, preset.std_of(name), size=shape, generator=generator, dtype=torch.float32
            )
        if name == "lm_head.weight":
            keep = torch.zeros(shape[0], dtype=torch.bool)
            keep[emittable_ids] = True
            tensor[~keep] = 0.0
        weights[name] = tensor.to(dtype).contiguous()
    return weights


def _save_model(out_dir: Path, seed: int, tokenizer: Tokenizer, preset: DemoPreset) -> None:
    """Build the ``LlamaForCausalLM`` of ``preset`` for ``seed`` and save it with its configs."""
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    eot_id = tokenizer.token_to_id(EOT_TOKEN)
    pad_id = tokenizer.token_to_id(PAD_TOKEN)
    config = LlamaConfig(
        vocab_size=model_vocab_size(tokenizer.get_vocab_size()),
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_key_value_heads,
        head_dim=preset.head_dim,
        hidden_act="silu",
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        initializer_range=preset.initializer_range,
        rms_norm_eps=RMS_NORM_EPS,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype=preset.dtype,
        architectures=["LlamaForCausalLM"],
    )
    # Only the parameter names and shapes are taken from transformers: the model is built on
    # the meta device (no memory, no initialisation); fork_rng keeps the caller's global RNG
    # state untouched whatever transformers does while building it.
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        model = LlamaForCausalLM(config)
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    state_dict = _init_weights(shapes, preset, seed, emittable_token_ids(tokenizer))
    # Write the files directly rather than via model.save_pretrained: no progress bar, no
    # version-dependent weight conversion, plain file permissions, sorted tensor names.
    save_file(state_dict, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(out_dir))
    GenerationConfig(
        bos_token_id=bos_id,
        eos_token_id=[eos_id, eot_id],
        pad_token_id=pad_id,
        do_sample=False,
    ).save_pretrained(str(out_dir))


def _read_marker(path: Path) -> dict[str, Any] | None:
    """Return the parsed marker file of ``path``, or None if it is missing or invalid."""
    try:
        data = json.loads((path / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("name") != DEMO_MODEL_NAME:
        return None
    return data


def _marker(seed: int, size: DemoSize) -> dict[str, Any]:
    """The marker file's content; the tiny size's marker has no "size" (as before sizes)."""
    marker: dict[str, Any] = {
        "name": DEMO_MODEL_NAME,
        "seed": seed,
        "format_version": FORMAT_VERSION,
    }
    if size != DEFAULT_SIZE:
        marker["size"] = size
    return marker


def demo_model_size(path: Path) -> DemoSize | None:
    """The size of the complete demo model in ``path``, or None if it holds none (or one of
    an unknown size). Never raises for missing or unreadable paths."""
    try:
        if not (Path(path).is_dir() and _is_complete(Path(path), None, None)):
            return None
        marker = _read_marker(Path(path))
    except OSError:
        return None
    size = marker.get("size", DEFAULT_SIZE) if marker is not None else None
    return next((s for s in SIZES if s == size), None)


def _is_complete(path: Path, seed: int | None, size: DemoSize | None) -> bool:
    """Check that ``path`` holds a complete current-format demo model (for ``seed`` and
    ``size`` if given)."""
    marker = _read_marker(path)
    if marker is None or marker.get("format_version") != FORMAT_VERSION:
        return False
    if seed is not None and marker.get("seed") != seed:
        return False
    if size is not None and marker.get("size", DEFAULT_SIZE) != size:
        return False
    return all((path / name).is_file() for name in REQUIRED_FILES)


def is_demo_model(path: Path) -> bool:
    """Return True if ``path`` is a complete demo model folder of the current format.

    Checks the ``pdserve_demo.json`` marker (name ``"pdserve-demo"`` and the current
    ``format_version``) and that all model and tokenizer files are present. Any seed and
    size are accepted. Never raises for missing or unreadable paths; returns False instead.
    """
    try:
        return Path(path).is_dir() and _is_complete(Path(path), None, None)
    except OSError:
        return False


def _finalize_tree(path: Path) -> None:
    """Make files in ``path`` world-readable and flush them and the directory to disk."""
    path.chmod(0o755)
    for child in sorted(path.iterdir()):
        if child.is_file():
            child.chmod(0o644)  # safetensors writes 0600; the folder may be shared
            fd = os.open(child, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _build(out_dir: Path, seed: int, size: DemoSize) -> None:
    """Write every demo model file into the (existing, empty) directory ``out_dir``."""
    tokenizer = train_tokenizer()
    save_tokenizer(tokenizer, out_dir)
    _save_model(out_dir, seed, tokenizer, PRESETS[size])
    # The marker is written last: a folder with a valid marker is complete.
    write_json(out_dir / MARKER_FILE, _marker(seed, size))
    _finalize_tree(out_dir)


def create_demo_model(out_dir: Path, *, seed: int = 0, size: DemoSize = DEFAULT_SIZE) -> Path:
    """Create (or reuse) an offline Llama demo model in ``out_dir`` and return ``out_dir``.

    Contract:

    * Fully offline and deterministic: the same ``seed`` and ``size`` (with the same installed
      library versions) give byte-identical ``model.safetensors`` and ``tokenizer.json``.
    * Idempotent: if ``out_dir`` already holds a complete demo model with the same ``seed``,
      ``size`` and the current format version, it is returned without rebuilding.
    * Atomic: the model is built in a temporary sibling directory and renamed into place,
      so ``out_dir`` is either absent/unchanged or a complete model, never half-written.
    * An existing ``out_dir`` is replaced only if it is empty or is a demo model (of another
      seed, size or format version); any other existing path raises :class:`FileExistsError`.
    * Parent directories are created as needed. The caller's global torch RNG state is not
      modified. The tiny size takes a few seconds (mostly importing ``transformers``); the
      ``"gpu-check"`` size writes ~415 MB and takes about ten seconds more on a small CPU.

    Args:
        out_dir: Destination folder.
        seed: Non-negative integer (< 2**63) that determines the model weights. The
            tokenizer is the same for every seed.
        size: One of :data:`SIZES` (see :data:`PRESETS`); ``"tiny"`` by default.

    Returns:
        ``out_dir`` (as given, converted to :class:`pathlib.Path`).

    Raises:
        ValueError: If ``seed`` is not an integer in ``[0, 2**63)`` or ``size`` is unknown.
        FileExistsError: If ``out_dir`` exists and is neither empty nor a demo model.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    if size not in PRESETS:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    out_dir = Path(out_dir)
    if _is_complete(out_dir, seed, size):
        return out_dir
    _check_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        _build(tmp_dir, seed, size)
        _install(tmp_dir, out_dir, seed, size)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return out_dir


def _check_replaceable(out_dir: Path) -> None:
    """Raise FileExistsError if ``out_dir`` exists and must not be replaced."""
    if not os.path.lexists(out_dir):
        return
    if (
        out_dir.is_dir()
        and not out_dir.is_symlink()
        and (_read_marker(out_dir) is not None or not any(out_dir.iterdir()))
    ):
        return
    raise FileExistsError(f"{out_dir} exists and is not a pdserve demo model; not replacing it")


def _install(tmp_dir: Path, out_dir: Path, seed: int, size: DemoSize) -> None:
    """Atomically move the finished ``tmp_dir`` to ``out_dir``.

    Tolerates a concurrent creator finishing first (its identical result is kept). An old
    demo model of another seed/size/format is moved aside and deleted after the swap.
    """
    try:
        tmp_dir.rename(out_dir)  # atomic; also replaces an empty directory
        return
    except OSError:
        if _is_complete(out_dir, seed, size):
            return  # someone else built the same model concurrently
        _check_replaceable(out_dir)
    old_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    try:
        out_dir.rename(old_dir / "model")
        tmp_dir.rename(out_dir)
    finally:
        shutil.rmtree(old_dir, ignore_errors=True)
