"""A bit-exact 64-bit digest of each KV block, computed where the KV lives (CPU or GPU).

For block b: every layer's slice of the block is read as 32-bit words w_j (16- or 8-bit words
for narrower caches), and its layer digest is sum_j w_j * c_j mod 2^64, with c_j fixed odd
pseudo-random 64-bit coefficients (seeded, the same in every process). The block's digest
folds the layers in their sorted-name order: d = d * M + d_layer mod 2^64. Integer arithmetic
mod 2^64 is exact whatever order the reduction runs in, so a producer and a consumer with the
same cache layout get the same number for the same bytes; a changed word changes the digest
(its odd coefficient cannot vanish mod 2^64), two changed words collide with probability
~2^-64, and swapped blocks or layers are told apart by position.

Cost: one gather of the blocks plus a widening multiply-add per word: a few passes over the
block's bytes in device memory (measure with `python -m pdserve.kv_transfer.digest_bench`).

Used by the verified connector's worker half (producer: after the prompt's last chunk ran;
consumer: after the pull landed). Not thread-safe; one per worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SEED = 0x5EED_CAFE
LAYER_MULTIPLIER = 0x9E3779B97F4A7C15  # odd: the golden-ratio constant
_MASK = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


class BlockDigester:
    """Digests blocks of one worker's KV cache tensors.

    `caches`: layer name -> tensor with one dimension of size `num_physical_blocks` (the
    block dimension: the first such dimension). `physical_per_logical`: kernel blocks per
    scheduler block (vLLM splits a logical block when the kernel's block is smaller).
    Raises ValueError when a tensor has no block dimension.
    """

    def __init__(
        self, caches: Mapping[str, Any], num_physical_blocks: int, physical_per_logical: int = 1
    ):
        import torch

        self._torch = torch
        self._ratio = physical_per_logical
        self._layers: list[tuple[str, Any, int]] = []
        for name in sorted(caches):
            tensor = caches[name]
            dims = [d for d, size in enumerate(tensor.shape) if size == num_physical_blocks]
            if not dims:
                raise ValueError(
                    f"KV cache {name} of shape {tuple(tensor.shape)} has no dimension of "
                    f"{num_physical_blocks} blocks"
                )
            self._layers.append((name, tensor, dims[0]))
        if not self._layers:
            raise ValueError("no KV cache tensors to digest")
        self._coefficients: dict[tuple[str, int], Any] = {}

    def _coeffs(self, device: Any, num_words: int) -> Any:
        key = (str(device), num_words)
        if key not in self._coefficients:
            torch = self._torch
            gen = torch.Generator().manual_seed(SEED)
            c = torch.randint(-(2**62), 2**62, (num_words,), generator=gen, dtype=torch.int64)
            self._coefficients[key] = (c | 1).to(device)
        return self._coefficients[key]

    def _physical(self, block_ids: Sequence[int]) -> list[int]:
        r = self._ratio
        return [b * r + i for b in block_ids for i in range(r)]

    def digests(self, block_ids: Sequence[int]) -> list[int]:
        """One unsigned 64-bit digest per logical block id, in order."""
        if not block_ids:
            return []
        torch = self._torch
        phys = self._physical(block_ids)
        total: Any = 0
        for _, tensor, dim in self._layers:
            index = torch.tensor(phys, device=tensor.device, dtype=torch.long)
            blocks = tensor.index_select(dim, index).movedim(dim, 0).contiguous()
            raw = blocks.view(len(phys), -1).view(torch.uint8)
            width = raw.shape[1]
            word = torch.int32 if width % 4 == 0 else torch.int16 if width % 2 == 0 else torch.int8
            words = raw.view(word).to(torch.int64)
            layer = (words * self._coeffs(tensor.device, words.shape[1])).sum(dim=1)
            total = total * _signed(LAYER_MULTIPLIER) + layer
        per_physical = [v & _MASK for v in total.tolist()]
        if self._ratio == 1:
            return per_physical
        out = []
        for i in range(len(block_ids)):
            acc = 0
            for v in per_physical[i * self._ratio : (i + 1) * self._ratio]:
                acc = (acc * LAYER_MULTIPLIER + v) & _MASK
            out.append(acc)
        return out

    def overwrite(self, block_ids: Sequence[int], value: float) -> None:
        """Fill the blocks with `value` in every layer (the corruption fault hook only)."""
        torch = self._torch
        phys = self._physical(block_ids)
        for _, tensor, dim in self._layers:
            index = torch.tensor(phys, device=tensor.device, dtype=torch.long)
            tensor.index_fill_(dim, index, value)
